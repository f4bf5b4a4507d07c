// Runs every kernel of CViewfinderKernels on fixed pseudo-random inputs and prints one line per
// kernel: its name and a hash of what it wrote (integer kernels) or its sums (float kernels).
// scripts/check-arm64-kernels.sh builds this for x86-64 (portable and AVX2 copies) and for arm64
// (run under qemu-aarch64) and compares the lines: the integer kernels must agree bit for bit on
// both architectures; so do the float ones (sums in a fixed order, no fused multiply-add).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ViewfinderKernels.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }

static uint64_t fnv(const void *p, size_t n) {
    const uint8_t *b = p; uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}

enum { W = 643, H = 97, S = 2 * W + 64 };

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "portable") == 0) vf_kernels_force_portable(1);
    printf("avx2_active %d\n", vf_kernels_avx2_active());
    static uint8_t img[S * (H + 8)];
    for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)(next() & 0xFF) / 2 + (uint8_t)((i % S) / 8);
    const uint8_t *mid = img + S + 2;

    for (int stride = 1; stride <= 2; stride++) {
        int64_t sum; uint64_t sq, px;
        vf_laplacian_sums(mid, S, stride, W - 4, H - 2, &sum, &sq, &px);
        printf("laplacian_sums/%d %lld %llu %llu\n", stride, (long long)sum, (unsigned long long)sq, (unsigned long long)px);
        vf_sobel_sums(mid, S, stride, W - 4, H - 2, &sq, &px);
        printf("sobel_sums/%d %llu %llu\n", stride, (unsigned long long)sq, (unsigned long long)px);
    }

    for (int stride = 1; stride <= 2; stride++) {
        // The focus stage's half-resolution copy and the window tracker's projections.
        static uint8_t half[W * H];
        static int32_t cols[W], rows[H];
        vf_half_binomial(mid, S, stride, (W - 6) / 2, (H - 4) / 2, half, W / 2);
        printf("half_binomial/%d %016llx\n", stride, (unsigned long long)fnv(half, (size_t)(W / 2) * ((H - 4) / 2)));
        vf_column_sums(mid, S, stride, W - 4, H - 2, cols);
        vf_row_sums(mid, S, stride, W - 4, H - 2, rows);
        printf("projections/%d %016llx %016llx\n", stride, (unsigned long long)fnv(cols, sizeof cols), (unsigned long long)fnv(rows, sizeof rows));
    }

    static uint8_t y[W * H], u[W * H], v[W * H], packed[S * H];
    for (int order = 0; order < 2; order++) {
        vf_split_packed422(img, S, W - 1, H, order, 1 - order, y, u, v);
        printf("split_packed422/%d %016llx %016llx %016llx\n", order, (unsigned long long)fnv(y, (W - 1) * H),
               (unsigned long long)fnv(u, (W - 1) / 2 * H), (unsigned long long)fnv(v, (W - 1) / 2 * H));
        vf_merge_packed422(y, u, v, packed, (W - 1) / 2, order, 1 - order);
        printf("merge_packed422/%d %016llx\n", order, (unsigned long long)fnv(packed, (W - 1) / 2 * 4));
    }
    for (int order = 0; order < 2; order++) {
        // The pyramid's 1/2 level from packed 4:2:2 luma (luma at byte `order` of each pair).
        vf_halve_packed422(img + order, S, (W - 1) / 2, H / 2, y, W);
        printf("halve_packed422/%d %016llx\n", order, (unsigned long long)fnv(y, W * (H / 2)));
    }

    static uint16_t src16[4 * W + 64], dst16[2 * W];
    for (size_t i = 0; i < sizeof src16 / 2; i++) src16[i] = (uint16_t)(next() & 0x3FFF);
    vf_sim_cubic_row(src16 + 4, dst16, W, 3 << 16 | 0x1234, 0x0000F0A0);
    printf("sim_cubic_row %016llx\n", (unsigned long long)fnv(dst16, W * 2));
    vf_sim_cubic_columns(src16 + 2 * 97, 97, dst16, 80, 1 << 16 | 0x8000, 0x00001100);
    printf("sim_cubic_columns %016llx\n", (unsigned long long)fnv(dst16, 80 * 2));
    vf_sim_box_row(src16, dst16, W, 3, 4000, 1500);
    printf("sim_box_row %016llx\n", (unsigned long long)fnv(dst16, W * 2));

    static uint8_t tone[4096], out8[2 * W], outV[W];
    static int32_t codes[W];
    for (int i = 0; i < 4096; i++) tone[i] = (uint8_t)(i * 255 / 4095);
    for (int i = 0; i < W; i++) codes[i] = (int32_t)(next() % 4096);
    uint32_t tsum = vf_sim_tone_row(codes, tone, out8, W);
    printf("sim_tone_row %u %016llx\n", tsum, (unsigned long long)fnv(out8, W));
    static int16_t cu[W], cv[W];
    for (int i = 0; i < W; i++) { cu[i] = (int16_t)(next() % 4095) - 2047; cv[i] = (int16_t)(next() % 4095) - 2047; }
    for (int layout = 0; layout < 4; layout++) {
        memset(out8, 0, sizeof out8); memset(outV, 0, sizeof outV);
        vf_sim_chroma_row(y, cu, cv, 300, -2000, 1500, layout, out8, outV, W / 2);
        printf("sim_chroma_row/%d %016llx %016llx\n", layout, (unsigned long long)fnv(out8, sizeof out8), (unsigned long long)fnv(outV, sizeof outV));
    }

    for (int factor = 2; factor <= 8; factor *= 2) {
        static uint8_t reduced[(W / 2) * (H / 2)];
        static uint16_t acc[W];
        memset(reduced, 0, sizeof reduced);
        vf_box_reduce(y, W, factor, reduced, W / 2, W / factor, H / factor, acc);
        printf("box_reduce/%d %016llx\n", factor, (unsigned long long)fnv(reduced, sizeof reduced));
    }

    vf_sim_sensor sc = { .k = 37.5f, .fullWell = 20000, .readNoise2 = 9, .noiseScale = 1, .gain = 0.2f, .adcMax = 4095,
                         .blurFraction = 0.25f, .blurInvNorm = 1.0f / 7.5f };
    static uint16_t rowA[W], lo[W], hi[W], nx[W];
    static uint32_t colSum[W];
    static float noise[W];
    static int32_t sensed[W];
    for (int i = 0; i < W; i++) {
        rowA[i] = (uint16_t)(next() & 0x3FF); lo[i] = (uint16_t)(next() & 0x3FF); hi[i] = (uint16_t)(next() & 0x3FF);
        nx[i] = (uint16_t)(next() & 0x3FF); colSum[i] = (uint32_t)(next() & 0xFFF); noise[i] = (float)((int32_t)(next() & 0xFFFF) - 32768) / 16384.0f;
    }
    vf_sim_sensor_row(&sc, rowA, NULL, NULL, NULL, NULL, noise, sensed, W);
    printf("sim_sensor_row %016llx\n", (unsigned long long)fnv(sensed, sizeof sensed));
    vf_sim_sensor_row(&sc, rowA, colSum, lo, hi, nx, noise, sensed, W);
    printf("sim_sensor_row/blur %016llx %016llx\n", (unsigned long long)fnv(sensed, sizeof sensed), (unsigned long long)fnv(colSum, sizeof colSum));

    static uint8_t tmp[W + 64];
    for (int stride = 1; stride <= 2; stride++) {
        memset(tmp, 0, sizeof tmp);
        vf_warp_vertical(img + 4 * S, S, 3, W / stride - 8, stride, 2 << 16 | 0x3000, 0x00000123, tmp);
        printf("warp_vertical/%d %016llx\n", stride, (unsigned long long)fnv(tmp, sizeof tmp));
    }
    enum { BLOCKS = 20, COUNT = 16 * BLOCKS + 9 };
    static int32_t blockBase[BLOCKS], index_[COUNT], weight[COUNT];
    static int8_t blockShift[16 * BLOCKS];
    static uint8_t blockWeight[16 * BLOCKS];
    for (int b = 0; b < BLOCKS; b++) {
        blockBase[b] = 4 + 15 * b;
        for (int j = 0; j < 16; j++) { blockShift[16 * b + j] = (int8_t)(j * 3 / 16); blockWeight[16 * b + j] = (uint8_t)(next() & 0xFF); }
    }
    for (int x = 0; x < COUNT; x++) { index_[x] = 4 + x * 15 / 16; weight[x] = (int32_t)(next() & 0xFF); }
    memset(out8, 0, sizeof out8);
    vf_warp_resample(img + S, out8, COUNT, BLOCKS, blockBase, blockShift, blockWeight, index_, weight);
    printf("warp_resample %016llx\n", (unsigned long long)fnv(out8, COUNT));
    // An odd number of blocks: the AVX2 copy's single-block tail.
    memset(out8, 0, sizeof out8);
    vf_warp_resample(img + S, out8, COUNT - 16, BLOCKS - 1, blockBase, blockShift, blockWeight, index_, weight);
    printf("warp_resample/odd %016llx\n", (unsigned long long)fnv(out8, COUNT - 16));
    // A packed 4:2:2 row: vertical pass, split, resampling and interleaving in one call (both
    // orders; luma block counts even and odd: the AVX2 copy's scalar tail).
    {
        enum { SPAN = 180, PAIRS = 164 };
        static uint8_t prow[4 * SPAN + 128], pplanes[6][2 * SPAN + 128], packedOut[4 * PAIRS];
        // Block tables that agree with index_/weight (as WarpWorkspace builds them: an output may
        // come from either).
        static int32_t pBase[BLOCKS];
        static int8_t pShift[16 * BLOCKS];
        static uint8_t pWeight[16 * BLOCKS];
        for (int b = 0; b < BLOCKS; b++) {
            pBase[b] = index_[16 * b];
            for (int j = 0; j < 16; j++) { pShift[16 * b + j] = (int8_t)(j - (index_[16 * b + j] - pBase[b])); pWeight[16 * b + j] = (uint8_t)weight[16 * b + j]; }
        }
        for (int order = 0; order <= 1; order++) {
            for (int lumaBlocks = BLOCKS; lumaBlocks >= BLOCKS - 1; lumaBlocks--) {
                memset(packedOut, 0, sizeof packedOut);
                vf_warp_table lt = { pBase, pShift, pWeight, index_, weight, lumaBlocks };
                vf_warp_table ct = { pBase, pShift, pWeight, index_, weight, BLOCKS / 2 };
                vf_warp_packed_row r = { img + 4 * S, S, 4, 4 + 4 * SPAN - 1, 2 << 16 | 0x3000, 0x00000123, prow + 64, SPAN,
                                         pplanes[0] + 64, pplanes[1] + 64, pplanes[2] + 64, pplanes[3] + 64, pplanes[4] + 64, pplanes[5] + 64,
                                         2, 1, lt, ct, packedOut, PAIRS, order, 1 - order };
                vf_warp_packed422_row(&r);
                printf("warp_packed422_row/%d/%d %016llx\n", order, lumaBlocks, (unsigned long long)fnv(packedOut, sizeof packedOut));
            }
        }
    }

    float t3[3], m2[2];
    vf_lk_tensor(img + 2 * S + 2, S, 31, 29, t3);
    printf("lk_tensor %.9g %.9g %.9g\n", t3[0], t3[1], t3[2]);
    vf_lk_mismatch(img + 2 * S + 2, S, img + 5 * S + 9, S, 1, 31, 29, 0.3125f, 0.71875f, m2);
    printf("lk_mismatch %.9g %.9g\n", m2[0], m2[1]);
    {
        // The dense pass: 61 points (a partial last step), some outside the picture.
        static float dx[61], dy[61], dt[61], dgx[61], dgy[61];
        for (int i = 0; i < 61; i++) {
            dx[i] = (float)(next() % 300) / 3.0f - 5; dy[i] = (float)(next() % 200) / 5.0f - 2;
            dt[i] = (float)(next() % 256); dgx[i] = (float)(next() % 64) - 32; dgy[i] = (float)(next() % 64) - 32;
        }
        int32_t hist[256] = {0};
        float dsums[14];
        ptrdiff_t dused; double dcost;
        vf_dense_pass(dx, dy, dt, dgx, dgy, 61, img, S, 98.999f, 39.999f, 2, 0.5f, 100, 40, 1.25f, -0.75f, 0.01f, 0.002f, 1000, 6, hist, dsums, &dused, &dcost);
        unsigned long long hs = 0;
        for (int i = 0; i < 256; i++) hs = hs * 31 + (unsigned)hist[i];
        printf("dense_pass %ld %.17g %llu", (long)dused, dcost, hs);
        for (int i = 0; i < 14; i++) printf(" %.9g", dsums[i]);
        printf("\n");
    }
    {
        // The translation scan: 61 points at whole positions, 7 x 7 translations moving some
        // out of the picture on every side; the costs' bits and the counts.
        static float sx[61], sy[61], st[61];
        for (int i = 0; i < 61; i++) {
            sx[i] = (float)(next() % 100); sy[i] = (float)(next() % 40); st[i] = (float)(next() % 256);
        }
        static double lanes[7 * 7 * 8], costs[7 * 7];
        static ptrdiff_t used[7 * 7];
        vf_dense_scan(sx, sy, st, 61, img, 100, 40, -3, -3, 7, lanes, costs, used); // rows 100 apart
        unsigned long long us = 0;
        for (int i = 0; i < 49; i++) us = us * 31 + (unsigned long long)used[i];
        printf("dense_scan %016llx %llu\n", (unsigned long long)fnv(costs, sizeof costs), us);
    }
    {
        // The grey pyramid's halving and the strided sample copy, at widths around 16 outputs.
        static uint8_t half[64 * 8], gathered[40 * 6];
        for (int w = 5; w <= 37; w += 16) {
            vf_halve_grey(img + 1, S, w, 7, half, 64);
            printf("halve_grey/%d %016llx\n", w, (unsigned long long)fnv(half, sizeof half));
            for (int st = 1; st <= 3; st++) {
                vf_gather_samples(img + 3, S, st, w, 6, gathered, 40);
                printf("gather_samples/%d/%d %016llx\n", w, st, (unsigned long long)fnv(gathered, sizeof gathered));
            }
        }
    }
    {
        // The dense step's pixel choice: cells of 7 columns over 20 rows, from a threshold of 40.
        enum { CELLS = (S - 4) / 7 };
        static int16_t mag[S], best[CELLS];
        static int32_t at[CELLS];
        for (int k = 0; k < CELLS; k++) best[k] = 40;
        vf_dense_cell_maxima(img, S, 1, 20, 2, 7, CELLS, mag, best, at);
        printf("dense_cell_maxima %016llx %016llx\n", (unsigned long long)fnv(best, sizeof best), (unsigned long long)fnv(at, sizeof at));
    }
    {
        // Bands of 4 × 4 cells (the estimator's levels: 16 cells a step, the last overlapping),
        // then the band's chosen pixels.
        enum { CELLS4 = (S - 4) / 4 };
        static int16_t mag[S], best[CELLS4];
        static int32_t at[CELLS4];
        static float px[CELLS4], py[CELLS4], pt[CELLS4], pgx[CELLS4], pgy[CELLS4];
        uint64_t hb = 0, ha = 0, hp = 0;
        ptrdiff_t total = 0;
        for (int y0 = 1; y0 + 4 <= 40; y0 += 4) {
            for (int k = 0; k < CELLS4; k++) best[k] = 60;
            vf_dense_cell_maxima(img, S, y0, 4, 2, 4, CELLS4, mag, best, at);
            ptrdiff_t n = vf_dense_points(img, S, best, at, CELLS4, 60, px, py, pt, pgx, pgy);
            hb ^= fnv(best, sizeof best) + (uint64_t)y0;
            for (int k = 0; k < CELLS4; k++) if (best[k] > 60) ha ^= (uint64_t)at[k] * 0x9E3779B97F4A7C15ull;
            hp ^= fnv(px, (size_t)n * 4) ^ fnv(py, (size_t)n * 4) ^ fnv(pt, (size_t)n * 4) ^ fnv(pgx, (size_t)n * 4) ^ fnv(pgy, (size_t)n * 4);
            total += n;
        }
        printf("dense_band_maxima %016llx %016llx %016llx %ld\n", (unsigned long long)hb, (unsigned long long)ha, (unsigned long long)hp, (long)total);
    }
    for (int sn = 5; sn <= 33; sn += 7) {
        float h14[14];
        vf_lk_similarity(img + 2 * S + 2, S, img + 5 * S + 9, S, 2, sn, sn, 0.3125f, 0.71875f, -0.21f, 0.13f, 0.004f, h14);
        printf("lk_similarity/%d", sn);
        for (int i = 0; i < 14; i++) printf(" %.9g", h14[i]);
        printf("\n");
    }
    {
        // SAD of blocks 1 to 16 wide, rows S apart, the second block offset by a row and a column.
        unsigned long long sads = 0;
        for (int side = 1; side <= 16; side++) sads = sads * 1000003ULL + vf_sad16_rows(img + S + 3, S, img + 2 * S + 4 + side, S, side, side);
        printf("sad16_rows %llu %u\n", sads, vf_sad16_rows(img, S, img + 5 * S + 1, S, 13, 13));
    }

    // Delta bit-planes (dump version 4): the same bytes from the SSE2 and the portable code, for
    // a width with a padded last block, and back bit-exact.
    static uint8_t dbpIn[77 * 9], dbpBack[77 * 9], dbpOut[77 * 9 * 2 + 64];
    for (int i = 0; i < 77 * 9; i++) dbpIn[i] = (uint8_t)(img[S + i] / 8 + (next() & 7));
    size_t dbpN = vf_dbp_encode(dbpIn, 77, 9, dbpOut);
    int dbpOK = vf_dbp_decode(dbpOut, dbpN, 77, 9, dbpBack) == 0 && memcmp(dbpIn, dbpBack, sizeof dbpIn) == 0;
    printf("dbp_encode %zu %016llx %d\n", dbpN, (unsigned long long)fnv(dbpOut, dbpN), dbpOK);

    // Limited to full range, every layout, over an odd count (the packed loops' tail).
    for (int layout = 0; layout < 4; layout++) {
        static uint8_t r[S * 3 + 1];
        memcpy(r, img, sizeof r);
        vf_expand_limited_range(r, (ptrdiff_t)sizeof r, layout);
        printf("expand_limited_range/%d %016llx\n", layout, (unsigned long long)fnv(r, sizeof r));
    }
    return 0;
}
