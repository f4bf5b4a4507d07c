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
            // Rounded as libjpeg rounds it (+ half, then floor). It was `yy - ((… - half) >> 16)`,
            // which rounds the subtracted term down a half too far: green one level high on
            // almost every coloured pixel (3 Dec; an EXIF thumbnail's green was +1 on its photo).
            g = yy + ((32768 - 22554 * cb - 46802 * cr) >> 16);
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

void vf_box_reduce(const uint8_t *src, ptrdiff_t srcPitch, int factor, uint8_t *dst, ptrdiff_t dstPitch,
                   ptrdiff_t dw, ptrdiff_t dh, uint16_t *acc) {
    // Columns summed over the block's rows first (a straight loop the compiler vectorises), then
    // each block's columns; factor 2, 4 or 8, so the mean is a rounded shift.
    const int shift = factor == 2 ? 2 : factor == 4 ? 4 : 6;
    const uint32_t half = 1u << (shift - 1);
    const ptrdiff_t w = dw * factor;
    for (ptrdiff_t y = 0; y < dh; y++) {
        const uint8_t *row = src + y * factor * srcPitch;
        for (ptrdiff_t x = 0; x < w; x++) acc[x] = row[x];
        for (int r = 1; r < factor; r++) {
            row += srcPitch;
            for (ptrdiff_t x = 0; x < w; x++) acc[x] = (uint16_t)(acc[x] + row[x]);
        }
        uint8_t *out = dst + y * dstPitch;
        for (ptrdiff_t x = 0; x < dw; x++) {
            uint32_t sum = 0;
            for (int k = 0; k < factor; k++) sum += acc[x * factor + k];
            out[x] = (uint8_t)((sum + half) >> shift);
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
// chroma 16..240 to 0..255 about 128 (128 stays 128: a neutral pixel stays neutral). The exact
// result is floor(v * 255/219 + 1/2) for luma v = y - 16 and floor(d * 255/224 + 1/2) + 128 for
// chroma d = c - 128 (16.16 fixed point: v * 76309 and d * 74602), computed in 16-bit lanes as
// v + ((v * 10773 + 32768) >> 16) (76309 = 65536 + 10773; 74602 = 65536 + 9066): a multiply's
// high half plus the carry of its low half — the same bits in the SSE2 path (x86-64), the NEON
// path (arm64, a 32-bit product rounded) and the plain loop (elsewhere, and the tails). Inputs
// are clamped first (one step beyond the range) and results saturate. A 1080p YUYV frame takes
// about 0.45 ms in SSE2 here, 4.4 ms in a plain per-byte loop.
static inline uint8_t vf_range_one(int16_t x, int16_t lo, int16_t hi, int16_t sub, int16_t k, int16_t base) {
    int16_t v = (int16_t)((x < lo ? lo : (x > hi ? hi : x)) - sub);
    int32_t prod = (int32_t)v * (int32_t)k;
    int16_t high = (int16_t)(prod >> 16);
    uint16_t low = (uint16_t)prod;
    return clamp255(v + high + (int16_t)(low >> 15) + base);
}

#if defined(__x86_64__)
#include <emmintrin.h>
/// 16 bytes at a time in SSE2 (every x86-64 has it): the bytes widened to 16-bit lanes, clamped,
/// multiplied (pmulhw for the high half, pmullw for the low half's carry), packed back.
static void vf_range_sse2(uint8_t *p, ptrdiff_t blocks, const int16_t *lo, const int16_t *hi, const int16_t *sub,
                          const int16_t *k, const int16_t *base) {
    const __m128i LO = _mm_loadu_si128((const __m128i *)lo), HI = _mm_loadu_si128((const __m128i *)hi);
    const __m128i SUB = _mm_loadu_si128((const __m128i *)sub), K = _mm_loadu_si128((const __m128i *)k);
    const __m128i BASE = _mm_loadu_si128((const __m128i *)base), zero = _mm_setzero_si128();
    for (ptrdiff_t b = 0; b < blocks; b++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + 16 * b));
        __m128i halves[2] = {_mm_unpacklo_epi8(v, zero), _mm_unpackhi_epi8(v, zero)};
        for (int h = 0; h < 2; h++) {
            __m128i x = _mm_sub_epi16(_mm_min_epi16(_mm_max_epi16(halves[h], LO), HI), SUB);
            __m128i high = _mm_mulhi_epi16(x, K), carry = _mm_srli_epi16(_mm_mullo_epi16(x, K), 15);
            halves[h] = _mm_add_epi16(_mm_add_epi16(x, high), _mm_add_epi16(carry, BASE));
        }
        _mm_storeu_si128((__m128i *)(p + 16 * b), _mm_packus_epi16(halves[0], halves[1]));
    }
}
#elif defined(__aarch64__)
#include <arm_neon.h>
/// 16 bytes at a time in NEON (every arm64 has it): widened, clamped, multiplied to 32 bits
/// (vmull), rounded and narrowed back.
static void vf_range_neon(uint8_t *p, ptrdiff_t blocks, const int16_t *lo, const int16_t *hi, const int16_t *sub,
                          const int16_t *k, const int16_t *base) {
    const int16x8_t LO = vld1q_s16(lo), HI = vld1q_s16(hi), SUB = vld1q_s16(sub), K = vld1q_s16(k), BASE = vld1q_s16(base);
    const int32x4_t half = vdupq_n_s32(32768);
    for (ptrdiff_t b = 0; b < blocks; b++) {
        uint8x16_t v = vld1q_u8(p + 16 * b);
        int16x8_t halves[2] = {vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(v))), vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(v)))};
        for (int h = 0; h < 2; h++) {
            int16x8_t x = vsubq_s16(vminq_s16(vmaxq_s16(halves[h], LO), HI), SUB);
            int32x4_t a = vshrq_n_s32(vaddq_s32(vmull_s16(vget_low_s16(x), vget_low_s16(K)), half), 16);
            int32x4_t c = vshrq_n_s32(vaddq_s32(vmull_s16(vget_high_s16(x), vget_high_s16(K)), half), 16);
            halves[h] = vaddq_s16(vaddq_s16(x, vcombine_s16(vmovn_s32(a), vmovn_s32(c))), BASE);
        }
        vst1q_u8(p + 16 * b, vcombine_u8(vqmovun_s16(halves[0]), vqmovun_s16(halves[1])));
    }
}
#endif

void vf_expand_limited_range(uint8_t *p, ptrdiff_t n, int layout) {
    // The parameters of each byte of a 32-byte pattern: luma (clamped to 15..236, less 16, by
    // 10773, +0) or chroma (15..241, less 128, by 9066, +128). One step beyond each end of the
    // range is kept so that the results there, -1 and 256, saturate to 0 and 255 as the exact
    // values below and above do (a clamp at 16 would give chroma 16's 0.5, rounded to 1).
    int16_t lo[32], hi[32], sub[32], k[32], base[32];
    for (int j = 0; j < 32; j++) {
        int luma = layout == 0 || (layout == 2 && (j & 1) == 0) || (layout == 3 && (j & 1) == 1);
        lo[j] = 15; hi[j] = luma ? 236 : 241; sub[j] = luma ? 16 : 128; k[j] = luma ? 10773 : 9066; base[j] = luma ? 0 : 128;
    }
    ptrdiff_t done = 0;
    // The 8-lane halves see the same pattern (8 is even).
#if defined(__x86_64__)
    vf_range_sse2(p, n / 16, lo, hi, sub, k, base);
    done = n / 16 * 16;
#elif defined(__aarch64__)
    vf_range_neon(p, n / 16, lo, hi, sub, k, base);
    done = n / 16 * 16;
#endif
    for (ptrdiff_t i = done; i < n; i++) {
        int j = (int)(i & 31);
        p[i] = vf_range_one(p[i], lo[j], hi[j], sub[j], k[j], base[j]);
    }
}
