// TurboJPEG's accurate against its fast IDCT on one 1920x1080 camera-like JPEG: a photograph
// (at least 1920x1080; its top-left 1920x1080) encoded 4:2:2 at quality 85, as a webcam sends,
// then decoded to planes as the engine decodes MJPEG. Prints how many luma samples differ
// between the two and each one's decode time (200 decodes a round, 5 interleaved rounds).
// Build: gcc -O2 tj_idct.c -o tj_idct -lturbojpeg     Run: ./tj_idct photo.jpg
#include <turbojpeg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s photo.jpg\n", argv[0]); return 64; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 1; }
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n);
    if (fread(b, 1, n, f) != (size_t)n) { fprintf(stderr, "%s: short read\n", argv[1]); return 1; }
    fclose(f);
    tjhandle d = tjInitDecompress();
    int w, h, s, cs;
    if (tjDecompressHeader3(d, b, n, &w, &h, &s, &cs)) { fprintf(stderr, "%s: %s\n", argv[1], tjGetErrorStr2(d)); return 1; }
    const int W = 1920, H = 1080;
    if (w < W || h < H) { fprintf(stderr, "%s: %dx%d, smaller than 1920x1080\n", argv[1], w, h); return 1; }
    unsigned char *rgb = malloc((size_t)w * h * 3);
    tjDecompress2(d, b, n, rgb, w, 0, h, TJPF_RGB, 0);
    tjhandle c = tjInitCompress();
    unsigned char *jpeg = NULL; unsigned long size = 0;
    tjCompress2(c, rgb, W, w * 3, H, TJPF_RGB, &jpeg, &size, TJSAMP_422, 85, 0);
    printf("JPEG 1920x1080 4:2:2 q85: %lu bytes\n", size);
    unsigned char *a[3] = { malloc(W * H), malloc(W * H / 2), malloc(W * H / 2) };
    unsigned char *q[3] = { malloc(W * H), malloc(W * H / 2), malloc(W * H / 2) };
    int strides[3] = { W, W / 2, W / 2 };
    tjDecompressToYUVPlanes(d, jpeg, size, a, W, strides, H, 0);
    tjDecompressToYUVPlanes(d, jpeg, size, q, W, strides, H, TJFLAG_FASTDCT);
    long differ = 0; int most = 0;
    for (int i = 0; i < W * H; i++) { int e = abs(a[0][i] - q[0][i]); if (e) differ++; if (e > most) most = e; }
    printf("luma samples differing: %.1f %%, at most %d levels\n", 100.0 * differ / (W * H), most);
    for (int round = 0; round < 5; round++) {
        for (int fast = 0; fast < 2; fast++) {
            double t = now();
            for (int k = 0; k < 200; k++) tjDecompressToYUVPlanes(d, jpeg, size, a, W, strides, H, fast ? TJFLAG_FASTDCT : 0);
            printf("%s %.3f ms   ", fast ? "fast" : "accurate", (now() - t) / 200 * 1e3);
        }
        printf("\n");
    }
    return 0;
}
