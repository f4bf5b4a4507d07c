// Pixel-format conversion rows for outputs that deliver another format than the stream's
// (VideoDataOutput's pixel format setting): YUV to packed RGB, RGB re-ordering, sample gathering
// with optional vertical averaging (for 4:2:2 to 4:2:0 chroma), and plane rotation/mirroring.
// Plain C: integer arithmetic only, so every build gives the same bits; the compiler vectorises
// the simple loops at -O2.
#include "ViewfinderKernels.h"
#include <string.h>

static inline uint8_t clamp255(int32_t v) { return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v)); }

void vf_yuv_to_rgb_row(const uint8_t *y, ptrdiff_t yStep, const uint8_t *u, const uint8_t *v, ptrdiff_t cStep,
                       ptrdiff_t width, uint8_t *dst, int channels, int rIndex, int bIndex) {
    // Full-range BT.601 (JPEG's YCbCr), 16.16 fixed point: R = Y + 1.402 Cr,
    // G = Y - 0.344136 Cb - 0.714136 Cr, B = Y + 1.772 Cb.
    for (ptrdiff_t x = 0; x < width; x++) {
        int32_t yy = y[x * yStep];
        int32_t r = yy, g = yy, b = yy;
        if (u && v) {
            int32_t cb = (int32_t)u[(x >> 1) * cStep] - 128, cr = (int32_t)v[(x >> 1) * cStep] - 128;
            r = yy + ((91881 * cr + 32768) >> 16);
            g = yy - ((22554 * cb + 46802 * cr - 32768) >> 16);
            b = yy + ((116130 * cb + 32768) >> 16);
        }
        uint8_t *p = dst + x * channels;
        p[rIndex] = clamp255(r);
        p[1] = clamp255(g);
        p[bIndex] = clamp255(b);
        if (channels == 4) p[3] = 255;
    }
}

void vf_rgb_reorder_row(const uint8_t *src, int srcChannels, int srcR, int srcB, ptrdiff_t width,
                        uint8_t *dst, int dstChannels, int dstR, int dstB) {
    for (ptrdiff_t x = 0; x < width; x++) {
        const uint8_t *s = src + x * srcChannels;
        uint8_t *d = dst + x * dstChannels;
        uint8_t r = s[srcR], g = s[1], b = s[srcB];
        d[dstR] = r; d[1] = g; d[dstB] = b;
        if (dstChannels == 4) d[3] = 255;
    }
}

void vf_gather_row(const uint8_t *a, const uint8_t *b, ptrdiff_t step, ptrdiff_t n, uint8_t *dst, ptrdiff_t dstStep) {
    if (b) {
        for (ptrdiff_t i = 0; i < n; i++) dst[i * dstStep] = (uint8_t)(((int)a[i * step] + (int)b[i * step] + 1) >> 1);
    } else if (step == 1 && dstStep == 1) {
        for (ptrdiff_t i = 0; i < n; i++) dst[i] = a[i];
    } else {
        for (ptrdiff_t i = 0; i < n; i++) dst[i * dstStep] = a[i * step];
    }
}

void vf_rotate_plane(const uint8_t *src, ptrdiff_t srcPitch, ptrdiff_t width, ptrdiff_t height, ptrdiff_t bpp,
                     uint8_t *dst, ptrdiff_t dstPitch, int rotation, int mirrored) {
    // The destination is the source turned `rotation` degrees clockwise, then flipped left-right
    // when `mirrored`. Destination size: (height x width) for 90 and 270, else (width x height).
    ptrdiff_t dw = (rotation == 90 || rotation == 270) ? height : width;
    ptrdiff_t dh = (rotation == 90 || rotation == 270) ? width : height;
    for (ptrdiff_t dy = 0; dy < dh; dy++) {
        uint8_t *drow = dst + dy * dstPitch;
        for (ptrdiff_t dxo = 0; dxo < dw; dxo++) {
            ptrdiff_t dx = mirrored ? dw - 1 - dxo : dxo;
            ptrdiff_t sx, sy;
            switch (rotation) {
            case 90: sx = dy; sy = height - 1 - dx; break;
            case 180: sx = width - 1 - dx; sy = height - 1 - dy; break;
            case 270: sx = width - 1 - dy; sy = dx; break;
            default: sx = dx; sy = dy; break;
            }
            const uint8_t *s = src + sy * srcPitch + sx * bpp;
            uint8_t *d = drow + dxo * bpp;
            for (ptrdiff_t k = 0; k < bpp; k++) d[k] = s[k];
        }
    }
}

void vf_downscale_packed(const uint8_t *src, ptrdiff_t srcPitch, ptrdiff_t width, ptrdiff_t height, int channels,
                         uint8_t *dst, ptrdiff_t dstPitch, ptrdiff_t dw, ptrdiff_t dh) {
    // Area average: output pixel (x, y) is the mean of the source block
    // [x*width/dw, (x+1)*width/dw) x [y*height/dh, (y+1)*height/dh) (at least one pixel).
    for (ptrdiff_t y = 0; y < dh; y++) {
        ptrdiff_t y0 = y * height / dh, y1 = (y + 1) * height / dh;
        if (y1 <= y0) y1 = y0 + 1;
        for (ptrdiff_t x = 0; x < dw; x++) {
            ptrdiff_t x0 = x * width / dw, x1 = (x + 1) * width / dw;
            if (x1 <= x0) x1 = x0 + 1;
            uint32_t sum[4] = {0, 0, 0, 0};
            for (ptrdiff_t sy = y0; sy < y1; sy++) {
                const uint8_t *row = src + sy * srcPitch;
                for (ptrdiff_t sx = x0; sx < x1; sx++)
                    for (int k = 0; k < channels; k++) sum[k] += row[sx * channels + k];
            }
            uint32_t n = (uint32_t)((y1 - y0) * (x1 - x0));
            for (int k = 0; k < channels; k++) dst[y * dstPitch + x * channels + k] = (uint8_t)((sum[k] + n / 2) / n);
        }
    }
}

// MARK: Streaming copy

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

void vf_copy_streaming(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *s = (const uint8_t *)src;
    // Head: up to the first 16-byte boundary of the destination, plainly.
    size_t head = (size_t)((16 - ((uintptr_t)d & 15)) & 15);
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head; s += head; n -= head;
    size_t blocks = n / 64;
    for (size_t i = 0; i < blocks; i++, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    // Streaming stores are weakly ordered: fence them before whatever publishes the copy.
    _mm_sfence();
    memcpy(d, s, n - blocks * 64);
#else
    memcpy(dst, src, n);
#endif
}

// Limited ("video", BT.601/709 studio) range to full range, in place: luma 16..235 to 0..255,
// chroma 16..240 to 0..255 about 128 (128 stays 128: a neutral pixel stays neutral). 16.16 fixed
// point, round half up; the loops are simple enough for the compiler to vectorise at -O2.
static inline uint8_t vf_full_luma(uint8_t y) {
    int32_t v = (((int32_t)y - 16) * 76309 + 32768) >> 16; // 255 / 219
    return clamp255(v);
}

static inline uint8_t vf_full_chroma(uint8_t c) {
    int32_t v = ((((int32_t)c - 128) * 74602 + 32768) >> 16) + 128; // 255 / 224
    return clamp255(v);
}

void vf_expand_limited_range(uint8_t *p, ptrdiff_t n, int layout) {
    switch (layout) {
    case 0:
        for (ptrdiff_t i = 0; i < n; i++) p[i] = vf_full_luma(p[i]);
        break;
    case 1:
        for (ptrdiff_t i = 0; i < n; i++) p[i] = vf_full_chroma(p[i]);
        break;
    default: {
        // Packed 4:2:2: luma at even bytes (layout 2, YUYV) or at odd bytes (layout 3, UYVY).
        uint8_t *l = p + (layout == 2 ? 0 : 1), *c = p + (layout == 2 ? 1 : 0);
        ptrdiff_t pairs = n / 2;
        for (ptrdiff_t i = 0; i < pairs; i++) {
            l[2 * i] = vf_full_luma(l[2 * i]);
            c[2 * i] = vf_full_chroma(c[2 * i]);
        }
        if (n & 1) p[n - 1] = layout == 2 ? vf_full_luma(p[n - 1]) : vf_full_chroma(p[n - 1]);
        break;
    }
    }
}
