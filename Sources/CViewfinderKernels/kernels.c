// Each kernel's body is an always-inline function; `VF_DISPATCH` builds it into a portable
// function and, on x86-64, into a copy compiled for AVX2 (a per-function target attribute, not
// a build flag), and picks one at run time. The bodies use integer arithmetic, or float arithmetic
// in a fixed order (no contraction into FMA: see the pragma), so both copies agree bit for bit.
#include "ViewfinderKernels.h"

#pragma STDC FP_CONTRACT OFF

#define VF_INLINE static inline __attribute__((always_inline))

/// Runs `call` with `VF_S` standing for the stride `s`: a literal 1 or 2 for the common layouts
/// (planar and packed 4:2:2 luma), so the inlined loop has a constant stride the compiler
/// vectorises, else `s` itself.
#define VF_CONSTANT_STRIDE(s, call)                              \
    do {                                                         \
        if ((s) == 1) { const ptrdiff_t VF_S = 1; call; }        \
        else if ((s) == 2) { const ptrdiff_t VF_S = 2; call; }   \
        else { const ptrdiff_t VF_S = (s); call; }               \
    } while (0)

#if defined(__x86_64__) && (defined(__clang__) || defined(__GNUC__))
#define VF_X86 1
#define VF_AVX2 __attribute__((target("avx2")))
#else
#define VF_X86 0
#endif

// -1 not decided yet, 0 portable, 1 AVX2.
static int vf_level = -1;
static int vf_forced_portable = 0;

int vf_kernels_avx2_available(void) {
#if VF_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

void vf_kernels_force_portable(int on) {
    __atomic_store_n(&vf_forced_portable, on ? 1 : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&vf_level, -1, __ATOMIC_RELAXED);
}

int vf_kernels_avx2_active(void) {
    int level = __atomic_load_n(&vf_level, __ATOMIC_RELAXED);
    if (level < 0) {
        level = (!__atomic_load_n(&vf_forced_portable, __ATOMIC_RELAXED) && vf_kernels_avx2_available()) ? 1 : 0;
        __atomic_store_n(&vf_level, level, __ATOMIC_RELAXED);
    }
    return level;
}

#if VF_X86
#define VF_DISPATCH(name, params, args)                                   \
    VF_AVX2 static void name##_avx2 params { name##_body args; }          \
    static void name##_portable params { name##_body args; }              \
    void name params {                                                    \
        if (vf_kernels_avx2_active()) name##_avx2 args;                   \
        else name##_portable args;                                        \
    }
#define VF_DISPATCH_RETURNING(type, name, params, args)                   \
    VF_AVX2 static type name##_avx2 params { return name##_body args; }   \
    static type name##_portable params { return name##_body args; }       \
    type name params {                                                    \
        return vf_kernels_avx2_active() ? name##_avx2 args : name##_portable args; \
    }
#else
#define VF_DISPATCH(name, params, args) \
    void name params { name##_body args; }
#define VF_DISPATCH_RETURNING(type, name, params, args) \
    type name params { return name##_body args; }
#endif

// MARK: Focus measures

/// Rows in chunks of at most 1024 samples: 32-bit lane sums cannot overflow for 8-bit input at
/// that length (|lap| <= 1020, lap² <= 1040400; gx² + gy² <= 2·1020²).
enum { VF_CHUNK = 1024 };

VF_INLINE void laplacian_rows(const uint8_t *mid0, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows,
                              int64_t *sum, uint64_t *sumSq, uint64_t *sumPix) {
    int64_t t1 = 0; uint64_t t2 = 0, tp = 0;
    for (ptrdiff_t y = 0; y < rows; y++) {
        const uint8_t *mid = mid0 + y * bpr, *up = mid - bpr, *down = mid + bpr;
        for (ptrdiff_t start = 0; start < n; start += VF_CHUNK) {
            ptrdiff_t len = n - start < VF_CHUNK ? n - start : VF_CHUNK;
            int32_t s1 = 0; uint32_t s2 = 0, sp = 0;
            const uint8_t *m = mid + start * s, *u = up + start * s, *d = down + start * s;
            for (ptrdiff_t i = 0; i < len; i++) {
                ptrdiff_t k = i * s;
                int32_t c = m[k];
                int32_t lap = 4 * c - m[k - s] - m[k + s] - u[k] - d[k];
                s1 += lap;
                s2 += (uint32_t)(lap * lap);
                sp += (uint32_t)c;
            }
            t1 += s1; t2 += s2; tp += sp;
        }
    }
    *sum = t1; *sumSq = t2; *sumPix = tp;
}

VF_INLINE void vf_laplacian_sums_body(const uint8_t *mid, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows,
                                      int64_t *sum, uint64_t *sumSq, uint64_t *sumPix) {
    VF_CONSTANT_STRIDE(s, laplacian_rows(mid, bpr, VF_S, n, rows, sum, sumSq, sumPix));
}

VF_DISPATCH(vf_laplacian_sums,
            (const uint8_t *mid, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n, ptrdiff_t rows,
             int64_t *sum, uint64_t *sumSquares, uint64_t *sumPixels),
            (mid, bytesPerRow, pixelStride, n, rows, sum, sumSquares, sumPixels))

/// The 3 × 3 Sobel sums at `q` (samples `s` bytes apart, rows `bpr` apart): gx (right minus
/// left) and gy (below minus above), each within ±1020. The one statement of the operator for
/// the focus measure's sums, the dense step's pixel choice and its points. (Results in `int`
/// through 16 bits: clang vectorises the planar focus sums and the dense row loop better than
/// from the sums written out in each loop, −61 % and −27 % instructions in the portable build,
/// −10 % in the AVX2 row loop; the packed 4:2:2 focus sums, portable, +7 %.)
VF_INLINE void sobel_at(const uint8_t *q, ptrdiff_t bpr, ptrdiff_t s, int *gx, int *gy) {
    const uint8_t *up = q - bpr, *dn = q + bpr;
    *gx = (int16_t)((up[s] + 2 * q[s] + dn[s]) - (up[-s] + 2 * q[-s] + dn[-s]));
    *gy = (int16_t)((dn[-s] + 2 * dn[0] + dn[s]) - (up[-s] + 2 * up[0] + up[s]));
}

/// |gx| + |gy| of ``sobel_at`` (at most 2040: a 16-bit lane).
VF_INLINE int16_t sobel_l1_at(const uint8_t *q, ptrdiff_t bpr) {
    int gx, gy;
    sobel_at(q, bpr, 1, &gx, &gy);
    return (int16_t)((gx < 0 ? -gx : gx) + (gy < 0 ? -gy : gy));
}

VF_INLINE void sobel_rows(const uint8_t *mid0, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows,
                          uint64_t *sumSq, uint64_t *sumPix) {
    uint64_t t2 = 0, tp = 0;
    for (ptrdiff_t y = 0; y < rows; y++) {
        const uint8_t *mid = mid0 + y * bpr;
        for (ptrdiff_t start = 0; start < n; start += VF_CHUNK) {
            ptrdiff_t len = n - start < VF_CHUNK ? n - start : VF_CHUNK;
            uint32_t s2 = 0, sp = 0;
            const uint8_t *m = mid + start * s;
            for (ptrdiff_t i = 0; i < len; i++) {
                int gx, gy;
                sobel_at(m + i * s, bpr, s, &gx, &gy);
                s2 += (uint32_t)(gx * gx + gy * gy);
                sp += m[i * s];
            }
            t2 += s2; tp += sp;
        }
    }
    *sumSq = t2; *sumPix = tp;
}

VF_INLINE void vf_sobel_sums_body(const uint8_t *mid, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows,
                                  uint64_t *sumSq, uint64_t *sumPix) {
    VF_CONSTANT_STRIDE(s, sobel_rows(mid, bpr, VF_S, n, rows, sumSq, sumPix));
}

#if VF_X86
#include <immintrin.h>

/// Sobel sums with AVX2 intrinsics for planar (`s` 1) and packed 4:2:2 (`s` 2) luma: 16 samples per
/// step in 16-bit lanes, gx² + gy² by `vpmaddwd`, and the same sums as ``sobel_rows`` (all integer).
/// Packed rows are read 32 bytes at a time with the chroma bytes masked off; the vector part stops
/// one vector early there so that a load never passes the byte after the last luma sample used.
VF_AVX2 static void sobel_rows_avx2(const uint8_t *mid0, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows,
                                    uint64_t *sumSq, uint64_t *sumPix) {
    const __m256i lumaMask = _mm256_set1_epi16(0x00FF);
    const ptrdiff_t vectors = s == 1 ? n / 16 : (n - 1) / 16;
    uint64_t t2 = 0, tp = 0;
    for (ptrdiff_t y = 0; y < rows; y++) {
        const uint8_t *mid = mid0 + y * bpr, *up = mid - bpr, *down = mid + bpr;
#define VF_LOAD16(p, i) (s == 1 ? _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)((p) + (i)))) \
                                : _mm256_and_si256(_mm256_loadu_si256((const __m256i *)((p) + 2 * (i))), lumaMask))
        ptrdiff_t v = 0;
        while (v < vectors) {
            // 64 vectors of gx² + gy² pair sums stay below 2^32 per 32-bit lane.
            ptrdiff_t end = v + 64 < vectors ? v + 64 : vectors;
            __m256i sq = _mm256_setzero_si256(), px = _mm256_setzero_si256();
            for (; v < end; v++) {
                ptrdiff_t k = v * 16;
                __m256i ul = VF_LOAD16(up, k - 1), uc = VF_LOAD16(up, k), ur = VF_LOAD16(up, k + 1);
                __m256i ml = VF_LOAD16(mid, k - 1), mc = VF_LOAD16(mid, k), mr = VF_LOAD16(mid, k + 1);
                __m256i dl = VF_LOAD16(down, k - 1), dc = VF_LOAD16(down, k), dr = VF_LOAD16(down, k + 1);
                __m256i gx = _mm256_sub_epi16(_mm256_add_epi16(_mm256_add_epi16(ur, _mm256_slli_epi16(mr, 1)), dr),
                                              _mm256_add_epi16(_mm256_add_epi16(ul, _mm256_slli_epi16(ml, 1)), dl));
                __m256i gy = _mm256_sub_epi16(_mm256_add_epi16(_mm256_add_epi16(dl, _mm256_slli_epi16(dc, 1)), dr),
                                              _mm256_add_epi16(_mm256_add_epi16(ul, _mm256_slli_epi16(uc, 1)), ur));
                sq = _mm256_add_epi32(sq, _mm256_add_epi32(_mm256_madd_epi16(gx, gx), _mm256_madd_epi16(gy, gy)));
                px = _mm256_add_epi32(px, _mm256_madd_epi16(mc, _mm256_set1_epi16(1)));
            }
            uint32_t a[8], b[8];
            _mm256_storeu_si256((__m256i *)a, sq);
            _mm256_storeu_si256((__m256i *)b, px);
            for (int i = 0; i < 8; i++) { t2 += a[i]; tp += b[i]; }
        }
#undef VF_LOAD16
        for (ptrdiff_t i = vectors * 16; i < n; i++) {
            int gx, gy;
            sobel_at(mid + i * s, bpr, s, &gx, &gy);
            t2 += (uint32_t)(gx * gx + gy * gy);
            tp += mid[i * s];
        }
    }
    *sumSq = t2; *sumPix = tp;
}
#endif

static void vf_sobel_sums_portable(const uint8_t *mid, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows,
                                   uint64_t *sumSq, uint64_t *sumPix) {
    vf_sobel_sums_body(mid, bpr, s, n, rows, sumSq, sumPix);
}

void vf_sobel_sums(const uint8_t *mid, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n, ptrdiff_t rows,
                   uint64_t *sumSquares, uint64_t *sumPixels) {
#if VF_X86
    if ((pixelStride == 1 || pixelStride == 2) && vf_kernels_avx2_active()) {
        sobel_rows_avx2(mid, bytesPerRow, pixelStride, n, rows, sumSquares, sumPixels);
        return;
    }
#endif
    vf_sobel_sums_portable(mid, bytesPerRow, pixelStride, n, rows, sumSquares, sumPixels);
}

// MARK: Packed 4:2:2 split

VF_INLINE void split_rows(const uint8_t *src, ptrdiff_t bpr, ptrdiff_t width, ptrdiff_t height,
                          int yo, int uo, uint8_t *y, uint8_t *u, uint8_t *v) {
    ptrdiff_t pairs = width / 2;
    for (ptrdiff_t row = 0; row < height; row++) {
        const uint8_t *s = src + row * bpr;
        uint8_t *yd = y + row * width;
        if (u && v) {
            uint8_t *ud = u + row * pairs, *vd = v + row * pairs;
            for (ptrdiff_t x = 0; x < pairs; x++) {
                const uint8_t *p = s + 4 * x;
                yd[2 * x] = p[yo];
                yd[2 * x + 1] = p[2 + yo];
                ud[x] = p[uo];
                vd[x] = p[uo + 2];
            }
        } else {
            for (ptrdiff_t x = 0; x < width; x++) yd[x] = s[2 * x + yo];
        }
    }
}

VF_INLINE void vf_split_packed422_body(const uint8_t *src, ptrdiff_t bpr, ptrdiff_t width, ptrdiff_t height,
                                       int yo, int uo, uint8_t *y, uint8_t *u, uint8_t *v) {
    if (yo == 0 && uo == 1) split_rows(src, bpr, width, height, 0, 1, y, u, v);
    else split_rows(src, bpr, width, height, 1, 0, y, u, v);
}

#if VF_X86
#include <immintrin.h>
/// The split with byte shuffles, 32 pixels (64 bytes) a step: within each 16-byte lane `vpshufb`
/// gathers the lane's 8 luma, 4 U and 4 V bytes into dwords [Y Y U V]; a dword permute puts both
/// lanes' luma in the low half and [U U V V] in the high half; two 128-bit permutes and a qword
/// permute make 32 luma, 16 U and 16 V bytes. The pairs past the last whole 32 by the scalar loop.
/// Only bytes are moved, so the result is the portable one's (offsets read as it reads them: YUYV
/// for (0, 1), UYVY otherwise).
VF_AVX2 static void split_rows_avx2(const uint8_t *src, ptrdiff_t bpr, ptrdiff_t width, ptrdiff_t height,
                                    int yOffset, int uOffset, uint8_t *y, uint8_t *u, uint8_t *v) {
    const int yo = yOffset == 0 && uOffset == 1 ? 0 : 1, uo = 1 - yo;
    const ptrdiff_t pairs = width / 2;
    const __m256i pick = _mm256_setr_epi8(
        yo, 2 + yo, 4 + yo, 6 + yo, 8 + yo, 10 + yo, 12 + yo, 14 + yo, uo, 4 + uo, 8 + uo, 12 + uo, 2 + uo, 6 + uo, 10 + uo, 14 + uo,
        yo, 2 + yo, 4 + yo, 6 + yo, 8 + yo, 10 + yo, 12 + yo, 14 + yo, uo, 4 + uo, 8 + uo, 12 + uo, 2 + uo, 6 + uo, 10 + uo, 14 + uo);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 4, 5, 2, 6, 3, 7);
    const int chroma = u && v;
    for (ptrdiff_t row = 0; row < height; row++) {
        const uint8_t *s = src + row * bpr;
        uint8_t *yd = y + row * width;
        uint8_t *ud = chroma ? u + row * pairs : NULL, *vd = chroma ? v + row * pairs : NULL;
        ptrdiff_t k = 0; // pixel pairs done
        for (; k + 16 <= pairs; k += 16) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(s + 4 * k));
            __m256i b = _mm256_loadu_si256((const __m256i *)(s + 4 * k + 32));
            a = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(a, pick), lanes); // [Y 16 | U 8, V 8]
            b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(b, pick), lanes);
            _mm256_storeu_si256((__m256i *)(yd + 2 * k), _mm256_permute2x128_si256(a, b, 0x20));
            if (chroma) {
                __m256i c = _mm256_permute4x64_epi64(_mm256_permute2x128_si256(a, b, 0x31), 0xD8); // [U 16 | V 16]
                _mm_storeu_si128((__m128i *)(ud + k), _mm256_castsi256_si128(c));
                _mm_storeu_si128((__m128i *)(vd + k), _mm256_extracti128_si256(c, 1));
            }
        }
        for (; k < pairs; k++) {
            const uint8_t *p = s + 4 * k;
            yd[2 * k] = p[yo];
            yd[2 * k + 1] = p[2 + yo];
            if (chroma) { ud[k] = p[uo]; vd[k] = p[uo + 2]; }
        }
        if (!chroma && (width & 1)) yd[width - 1] = s[2 * (width - 1) + yo];
    }
}
#endif

static void vf_split_packed422_portable(const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t width, ptrdiff_t height,
                                        int yOffset, int uOffset, uint8_t *y, uint8_t *u, uint8_t *v) {
    vf_split_packed422_body(src, bytesPerRow, width, height, yOffset, uOffset, y, u, v);
}

void vf_split_packed422(const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t width, ptrdiff_t height,
                        int yOffset, int uOffset, uint8_t *y, uint8_t *u, uint8_t *v) {
#if VF_X86
    if (vf_kernels_avx2_active()) {
        split_rows_avx2(src, bytesPerRow, width, height, yOffset, uOffset, y, u, v);
        return;
    }
#endif
    vf_split_packed422_portable(src, bytesPerRow, width, height, yOffset, uOffset, y, u, v);
}

// MARK: Pyramid

/// One row of the pyramid's 2×2 box average from packed 4:2:2 luma: out[x] = (r0[4x] + r0[4x + 2] +
/// r1[4x] + r1[4x + 2] + 2) >> 2 (the luma bytes of pixel pair x of two rows).
VF_INLINE void halve_packed_row(const uint8_t *r0, const uint8_t *r1, uint8_t *o, ptrdiff_t from, ptrdiff_t w) {
    for (ptrdiff_t x = from; x < w; x++) {
        const uint8_t *a = r0 + 4 * x, *b = r1 + 4 * x;
        o[x] = (uint8_t)((a[0] + a[2] + b[0] + b[2] + 2) >> 2);
    }
}

static void vf_halve_packed422_portable(const uint8_t *luma, ptrdiff_t bpr, ptrdiff_t w, ptrdiff_t h, uint8_t *dst, ptrdiff_t dstStride) {
    for (ptrdiff_t y = 0; y < h; y++) {
        const uint8_t *r0 = luma + 2 * y * bpr;
        halve_packed_row(r0, r0 + bpr, dst + y * dstStride, 0, w);
    }
}

#if VF_X86
#include <immintrin.h>

/// 16 outputs per step: 64 bytes of each row, the chroma bytes masked off, the rows added in 16-bit
/// lanes, the pairs by `vpmaddwd` with ones, then (sum + 2) >> 2 packed back to bytes (all integer:
/// the same values as the portable rows). The vector part stops before the last output so that no
/// load passes the last luma byte used (as the portable loop, which reads bytes 0 and 2 of a pair).
VF_AVX2 static void vf_halve_packed422_avx2(const uint8_t *luma, ptrdiff_t bpr, ptrdiff_t w, ptrdiff_t h, uint8_t *dst, ptrdiff_t dstStride) {
    const __m256i mask = _mm256_set1_epi16(0x00FF), ones = _mm256_set1_epi16(1), two = _mm256_set1_epi32(2);
    const ptrdiff_t vectorEnd = w > 16 ? (w - 1) / 16 * 16 : 0;
    for (ptrdiff_t y = 0; y < h; y++) {
        const uint8_t *r0 = luma + 2 * y * bpr, *r1 = r0 + bpr;
        uint8_t *o = dst + y * dstStride;
        for (ptrdiff_t x = 0; x < vectorEnd; x += 16) {
            const uint8_t *a = r0 + 4 * x, *b = r1 + 4 * x;
            // The next two rows, one row pair of work ahead (integer addresses: a prefetch past
            // the picture never faults).
            __builtin_prefetch((const void *)((uintptr_t)a + 2 * (uintptr_t)bpr));
            __builtin_prefetch((const void *)((uintptr_t)b + 2 * (uintptr_t)bpr));
            __m256i s0 = _mm256_add_epi16(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)a), mask),
                                          _mm256_and_si256(_mm256_loadu_si256((const __m256i *)b), mask));
            __m256i s1 = _mm256_add_epi16(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)(a + 32)), mask),
                                          _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(b + 32)), mask));
            // s0 holds pairs 0–7 as 16-bit lane pairs; madd gives 32-bit pair sums.
            __m256i p0 = _mm256_srli_epi32(_mm256_add_epi32(_mm256_madd_epi16(s0, ones), two), 2);
            __m256i p1 = _mm256_srli_epi32(_mm256_add_epi32(_mm256_madd_epi16(s1, ones), two), 2);
            // packs interleave 128-bit halves: p0 lo, p1 lo, p0 hi, p1 hi → reorder to 0..15.
            __m256i w16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(p0, p1), 0xD8);
            __m128i b8 = _mm_packus_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
            _mm_storeu_si128((__m128i *)(o + x), b8);
        }
        halve_packed_row(r0, r1, o, vectorEnd, w);
    }
}
#endif

void vf_halve_packed422(const uint8_t *luma, ptrdiff_t bytesPerRow, ptrdiff_t width, ptrdiff_t height, uint8_t *dst, ptrdiff_t dstStride) {
#if VF_X86
    if (vf_kernels_avx2_active()) { vf_halve_packed422_avx2(luma, bytesPerRow, width, height, dst, dstStride); return; }
#endif
    vf_halve_packed422_portable(luma, bytesPerRow, width, height, dst, dstStride);
}

// MARK: Sim camera renderer

// Wrapping 32-bit arithmetic, as the Swift model (&+, &*) defines it.
VF_INLINE int32_t wadd(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
VF_INLINE int32_t wmul(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }

typedef struct { int32_t w0, w1, w2, w3; } cubic_weights;

/// Catmull-Rom weights (x 8192) for a 12-bit fraction t: taps at -1, 0, +1, +2.
VF_INLINE cubic_weights cubic(int32_t t) {
    int32_t t2 = (t * t) >> 12, t3 = (t2 * t) >> 12;
    cubic_weights w = { 2 * t2 - t3 - t, 3 * t3 - 5 * t2 + 8192, 4 * t2 - 3 * t3 + t, t3 - t2 };
    return w;
}

VF_INLINE uint16_t cubic_tap(int32_t a, int32_t b, int32_t c, int32_t d, cubic_weights w) {
    int32_t v = wadd(wadd(wadd(wadd(wmul(a, w.w0), wmul(b, w.w1)), wmul(c, w.w2)), wmul(d, w.w3)), 4096) >> 13;
    v = v < 0 ? 0 : (v > 65535 ? 65535 : v);
    return (uint16_t)v;
}

VF_INLINE ptrdiff_t cubic_chunk(int32_t drift) {
    ptrdiff_t d = drift < 0 ? -(ptrdiff_t)drift : drift;
    if (d < 1) d = 1;
    ptrdiff_t c = 3277 / d;
    return c > 128 ? 128 : (c < 8 ? 8 : c);
}

VF_INLINE void vf_sim_cubic_row_body(const uint16_t *src, uint16_t *dst, ptrdiff_t count, int32_t p0, int32_t dp) {
    ptrdiff_t chunk = cubic_chunk(wadd(dp, -65536));
    for (ptrdiff_t i = 0; i < count;) {
        ptrdiff_t n = count - i < chunk ? count - i : chunk;
        int32_t ps = wadd(p0, wmul((int32_t)i, dp));
        int32_t pe = wadd(ps, wmul((int32_t)(n - 1), dp));
        ptrdiff_t ks = ps >> 16;
        uint16_t *d = dst + i;
        if ((ptrdiff_t)(pe >> 16) - ks == n - 1) {
            // One whole step per pixel: the chunk uses the middle pixel's fraction.
            const uint16_t *s = src + (ks - 1);
            cubic_weights w = cubic((wadd(ps, wmul((int32_t)(n / 2), wadd(dp, -65536))) >> 4) & 4095);
            for (ptrdiff_t j = 0; j < n; j++) d[j] = cubic_tap(s[j], s[j + 1], s[j + 2], s[j + 3], w);
        } else {
            for (ptrdiff_t j = 0; j < n; j++) {
                int32_t p = wadd(ps, wmul((int32_t)j, dp));
                const uint16_t *s = src + ((ptrdiff_t)(p >> 16) - 1);
                d[j] = cubic_tap(s[0], s[1], s[2], s[3], cubic((p >> 4) & 4095));
            }
        }
        i += n;
    }
}

VF_DISPATCH(vf_sim_cubic_row,
            (const uint16_t *src, uint16_t *dst, ptrdiff_t count, int32_t p0, int32_t dp),
            (src, dst, count, p0, dp))

VF_INLINE void vf_sim_cubic_columns_body(const uint16_t *base, ptrdiff_t stride, uint16_t *dst, ptrdiff_t count, int32_t v0, int32_t dv) {
    ptrdiff_t chunk = cubic_chunk(dv);
    for (ptrdiff_t i = 0; i < count;) {
        ptrdiff_t n = count - i < chunk ? count - i : chunk;
        int32_t vs = wadd(v0, wmul((int32_t)i, dv));
        int32_t ve = wadd(vs, wmul((int32_t)(n - 1), dv));
        ptrdiff_t ks = vs >> 16;
        uint16_t *d = dst + i;
        if ((ptrdiff_t)(ve >> 16) == ks) {
            // The same four source rows for the chunk, at the middle pixel's fraction.
            const uint16_t *r1 = base + (ks * stride + i);
            const uint16_t *r0 = r1 - stride, *r2 = r1 + stride, *r3 = r2 + stride;
            cubic_weights w = cubic((wadd(vs, wmul((int32_t)(n / 2), dv)) >> 4) & 4095);
            for (ptrdiff_t j = 0; j < n; j++) d[j] = cubic_tap(r0[j], r1[j], r2[j], r3[j], w);
        } else {
            for (ptrdiff_t j = 0; j < n; j++) {
                int32_t p = wadd(vs, wmul((int32_t)j, dv));
                const uint16_t *r1 = base + ((ptrdiff_t)(p >> 16) * stride + i + j);
                d[j] = cubic_tap(r1[-stride], r1[0], r1[stride], r1[2 * stride], cubic((p >> 4) & 4095));
            }
        }
        i += n;
    }
}

VF_DISPATCH(vf_sim_cubic_columns,
            (const uint16_t *base, ptrdiff_t stride, uint16_t *dst, ptrdiff_t count, int32_t v0, int32_t dv),
            (base, stride, dst, count, v0, dv))

VF_INLINE uint16_t box_out(uint32_t s, uint32_t e, uint32_t w, uint32_t wf) {
    return (uint16_t)((s * w + e * wf + 16384) >> 15);
}

VF_INLINE void vf_sim_box_row_body(const uint16_t *src, uint16_t *dst, ptrdiff_t count, ptrdiff_t n, uint32_t w, uint32_t wf) {
    switch (n) {
    case 0:
        for (ptrdiff_t i = 0; i < count; i++) dst[i] = box_out(src[i + 1], (uint32_t)src[i] + src[i + 2], w, wf);
        break;
    case 1:
        for (ptrdiff_t i = 0; i < count; i++)
            dst[i] = box_out((uint32_t)src[i + 1] + src[i + 2] + src[i + 3], (uint32_t)src[i] + src[i + 4], w, wf);
        break;
    case 2:
        for (ptrdiff_t i = 0; i < count; i++)
            dst[i] = box_out((uint32_t)src[i + 1] + src[i + 2] + src[i + 3] + src[i + 4] + src[i + 5], (uint32_t)src[i] + src[i + 6], w, wf);
        break;
    default: {
        // A running sum.
        uint32_t s = 0;
        for (ptrdiff_t j = 1; j <= 2 * n + 1; j++) s += src[j];
        ptrdiff_t o = 2 * n + 2;
        for (ptrdiff_t i = 0; i < count; i++) {
            uint32_t hi = src[i + o];
            dst[i] = box_out(s, (uint32_t)src[i] + hi, w, wf);
            s = s + hi - src[i + 1];
        }
    }
    }
}

VF_DISPATCH(vf_sim_box_row,
            (const uint16_t *src, uint16_t *dst, ptrdiff_t count, ptrdiff_t n, uint32_t w, uint32_t wf),
            (src, dst, count, n, w, wf))

/// Square root to about 0.1 %: a bit-level first guess and one Newton step (vectorises, unlike sqrtf).
VF_INLINE float fast_sqrt(float x) {
    union { float f; uint32_t u; } b = { x };
    b.u = 0x1FBD1DF5u + (b.u >> 1);
    float g = b.f;
    return 0.5f * (g + x / g);
}

VF_INLINE int32_t sensor_code(const vf_sim_sensor *c, float e, float z) {
    e = e < c->fullWell ? e : c->fullWell;
    float sd = fast_sqrt(e + c->readNoise2) * c->noiseScale;
    float dn = (e + sd * z) * c->gain;
    dn = dn > 0 ? dn : 0;
    dn = dn < c->adcMax ? dn : c->adcMax;
    // Round to nearest by the 1.5·2^23 trick.
    union { float f; int32_t i; } r = { dn + 12582912.0f };
    return wadd(r.i, -0x4B400000);
}

VF_INLINE void vf_sim_sensor_row_body(const vf_sim_sensor *cp, const uint16_t *row, uint32_t *colSum, const uint16_t *lo,
                                      const uint16_t *hi, const uint16_t *next, const float *noise, int32_t *codes, ptrdiff_t count) {
    const vf_sim_sensor c = *cp;
    if (colSum) {
        for (ptrdiff_t x = 0; x < count; x++) {
            float rad = ((float)colSum[x] + c.blurFraction * (float)((uint32_t)lo[x] + hi[x])) * c.blurInvNorm;
            codes[x] = sensor_code(&c, rad * c.k, noise[x]);
            colSum[x] = colSum[x] + hi[x] - next[x];
        }
    } else {
        for (ptrdiff_t x = 0; x < count; x++) codes[x] = sensor_code(&c, (float)row[x] * c.k, noise[x]);
    }
}

VF_DISPATCH(vf_sim_sensor_row,
            (const vf_sim_sensor *c, const uint16_t *row, uint32_t *colSum, const uint16_t *lo,
             const uint16_t *hi, const uint16_t *next, const float *noise, int32_t *codes, ptrdiff_t count),
            (c, row, colSum, lo, hi, next, noise, codes, count))

VF_INLINE uint32_t vf_sim_tone_row_body(const int32_t *codes, const uint8_t *tone, uint8_t *dst, ptrdiff_t count) {
    uint32_t sum = 0;
    for (ptrdiff_t x = 0; x < count; x++) dst[x] = tone[codes[x]];
    for (ptrdiff_t x = 0; x < count; x++) sum += dst[x];
    return sum;
}

VF_DISPATCH_RETURNING(uint32_t, vf_sim_tone_row,
                      (const int32_t *codes, const uint8_t *tone, uint8_t *dst, ptrdiff_t count),
                      (codes, tone, dst, count))

VF_INLINE uint8_t chroma(int32_t c, int32_t sat, int32_t cast, int32_t ys) {
    int32_t v = wadd(128, wmul(wadd(wmul(c, sat), cast), ys) >> 16);
    return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

VF_INLINE void chroma_rows(const uint8_t *luma, const int16_t *cu, const int16_t *cv, int32_t sat, int32_t castU, int32_t castV,
                           int layout, uint8_t *out, uint8_t *outV, ptrdiff_t pairs) {
    for (ptrdiff_t x = 0; x < pairs; x++) {
        uint8_t y0 = luma[2 * x], y1 = luma[2 * x + 1];
        int32_t ys = (int32_t)y0 + y1;
        uint8_t u = chroma(cu[x], sat, castU, ys), v = chroma(cv[x], sat, castV, ys);
        switch (layout) {
        case 0: out[4 * x] = y0; out[4 * x + 1] = u; out[4 * x + 2] = y1; out[4 * x + 3] = v; break;
        case 1: out[4 * x] = u; out[4 * x + 1] = y0; out[4 * x + 2] = v; out[4 * x + 3] = y1; break;
        case 2: out[2 * x] = u; out[2 * x + 1] = v; break;
        default: out[x] = u; outV[x] = v; break;
        }
    }
}

VF_INLINE void vf_sim_chroma_row_body(const uint8_t *luma, const int16_t *cu, const int16_t *cv, int32_t sat, int32_t castU, int32_t castV,
                                      int layout, uint8_t *out, uint8_t *outV, ptrdiff_t pairs) {
    // A constant layout per loop, so each one vectorises.
    switch (layout) {
    case 0: chroma_rows(luma, cu, cv, sat, castU, castV, 0, out, outV, pairs); break;
    case 1: chroma_rows(luma, cu, cv, sat, castU, castV, 1, out, outV, pairs); break;
    case 2: chroma_rows(luma, cu, cv, sat, castU, castV, 2, out, outV, pairs); break;
    default: chroma_rows(luma, cu, cv, sat, castU, castV, 3, out, outV, pairs); break;
    }
}

VF_DISPATCH(vf_sim_chroma_row,
            (const uint8_t *luma, const int16_t *cu, const int16_t *cv, int32_t sat, int32_t castU, int32_t castV,
             int layout, uint8_t *out, uint8_t *outV, ptrdiff_t pairs),
            (luma, cu, cv, sat, castU, castV, layout, out, outV, pairs))

// MARK: Warp (see Warp.swift)

#include <string.h>

typedef uint8_t vf_u8x16 __attribute__((vector_size(16)));
typedef int8_t vf_i8x16 __attribute__((vector_size(16)));
typedef uint16_t vf_u16x16 __attribute__((vector_size(32)));

VF_INLINE vf_u8x16 vf_load16(const uint8_t *p) { vf_u8x16 v; memcpy(&v, p, 16); return v; }

typedef uint8_t vf_u8x32 __attribute__((vector_size(32)));

/// One run of the vertical pass: t[i] = (r0[i·s]·(256 − w) + r1[i·s]·w + 128) >> 8 with
/// w = (uint16)(f + i·st) >> 8, all in wrapping 16-bit arithmetic (exact: the sum is at most 65408).
/// The loop is stated once and built twice, with `BLEND16(a, b, w)` the blend of 16 lanes (16-bit
/// lanes of a, b and the 8.8 weight w) and `NARROW(v0, v1)` the 32 bytes of two blends of results
/// in 0...255 (the 16 of one blend are the first half of `NARROW(v, v)`): 32 columns a step (one
/// narrowing and one store for both halves), then 16, then the last 16 columns once more
/// (overlapping: the columns written twice get the same bytes), so a run with s = 1 never ends in
/// the scalar loop.
#define VF_DEFINE_WARP_BLEND(NAME, ATTRIBUTES, BLEND16, NARROW) \
    ATTRIBUTES void NAME(const uint8_t *r0, const uint8_t *r1, uint8_t *t, ptrdiff_t n, uint16_t f, uint16_t st, ptrdiff_t s) { \
        ptrdiff_t i = 0;                                                                                                 \
        if (s == 1 && n >= 16) {                                                                                         \
            const vf_u16x16 ramp = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};                                \
            const vf_u16x16 rampStep = ramp * st;                                                                        \
            const uint16_t step16 = (uint16_t)(st * 16);                                                                 \
            vf_u16x16 w = (uint16_t)f + rampStep;                                                                        \
            for (; i + 32 <= n; i += 32) {                                                                               \
                vf_u16x16 a0 = __builtin_convertvector(vf_load16(r0 + i), vf_u16x16);                                    \
                vf_u16x16 b0 = __builtin_convertvector(vf_load16(r1 + i), vf_u16x16);                                    \
                vf_u16x16 a1 = __builtin_convertvector(vf_load16(r0 + i + 16), vf_u16x16);                               \
                vf_u16x16 b1 = __builtin_convertvector(vf_load16(r1 + i + 16), vf_u16x16);                               \
                vf_u16x16 w1 = w + step16;                                                                               \
                vf_u16x16 v0 = BLEND16(a0, b0, w), v1 = BLEND16(a1, b1, w1);                                             \
                vf_u8x32 o = NARROW(v0, v1);                                                                             \
                memcpy(t + i, &o, 32);                                                                                   \
                w = w1 + step16;                                                                                         \
            }                                                                                                            \
            for (; i + 16 <= n; i += 16) {                                                                               \
                vf_u16x16 a = __builtin_convertvector(vf_load16(r0 + i), vf_u16x16);                                     \
                vf_u16x16 b = __builtin_convertvector(vf_load16(r1 + i), vf_u16x16);                                     \
                vf_u16x16 v = BLEND16(a, b, w);                                                                          \
                vf_u8x32 o = NARROW(v, v);                                                                               \
                memcpy(t + i, &o, 16);                                                                                   \
                w += step16;                                                                                             \
            }                                                                                                            \
            if (i < n) {                                                                                                 \
                const ptrdiff_t j = n - 16;                                                                              \
                vf_u16x16 wt = (uint16_t)(f + (uint16_t)j * st) + rampStep;                                              \
                vf_u16x16 a = __builtin_convertvector(vf_load16(r0 + j), vf_u16x16);                                     \
                vf_u16x16 b = __builtin_convertvector(vf_load16(r1 + j), vf_u16x16);                                     \
                vf_u16x16 v = BLEND16(a, b, wt);                                                                         \
                vf_u8x32 o = NARROW(v, v);                                                                               \
                memcpy(t + j, &o, 16);                                                                                   \
                i = n;                                                                                                   \
            }                                                                                                            \
        }                                                                                                                \
        for (; i < n; i++) {                                                                                             \
            uint16_t a = r0[i * s], b = r1[i * s];                                                                       \
            uint16_t wy = (uint16_t)(f + (uint16_t)i * st) >> 8;                                                         \
            t[i] = (uint8_t)((uint16_t)((uint16_t)(a << 8) + (uint16_t)((uint16_t)(b - a) * wy) + 128) >> 8);           \
        }                                                                                                                \
    }

/// The portable blend: (a·256 + (b − a)·(w >> 8) + 128) >> 8 in wrapping 16-bit lanes.
#define VF_BLEND16_PORTABLE(a, b, w) ((((a) << 8) + ((b) - (a)) * ((w) >> 8) + 128) >> 8)
#define VF_NARROW_PORTABLE(v0, v1)                                                                                   \
    __builtin_convertvector(__builtin_shufflevector((v0), (v1), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, \
                                                    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31), \
                            vf_u8x32)
VF_DEFINE_WARP_BLEND(warp_blend_portable, static, VF_BLEND16_PORTABLE, VF_NARROW_PORTABLE)

typedef void (*vf_warp_blend_fn)(const uint8_t *r0, const uint8_t *r1, uint8_t *t, ptrdiff_t n, uint16_t f, uint16_t st, ptrdiff_t s);

/// The vertical pass in runs of columns that read the same two source rows, each run blended by
/// `blend` (``warp_blend_portable``, or ``warp_blend_avx2`` in the AVX2 build: a constant, so a
/// direct call per run).
VF_INLINE void warp_vertical_runs(const uint8_t *sbase, ptrdiff_t bpr, ptrdiff_t first, ptrdiff_t last, ptrdiff_t s,
                                  int32_t start, int32_t step, uint8_t *tmp, vf_warp_blend_fn blend) {
    int32_t fv = start;
    ptrdiff_t u = first;
    const uint16_t st = (uint16_t)step;
    while (u <= last) {
        int32_t iv = fv >> 16;
        ptrdiff_t end = last;
        if (step > 0) {
            ptrdiff_t e = u + (ptrdiff_t)((((iv + 1) << 16) - fv - 1) / step);
            if (e < end) end = e;
        } else if (step < 0) {
            ptrdiff_t e = u + (ptrdiff_t)((fv - (iv << 16)) / (-step));
            if (e < end) end = e;
        }
        const uint8_t *r0 = sbase + (ptrdiff_t)iv * bpr, *r1 = r0 + bpr;
        ptrdiff_t n = end - u + 1;
        // The next output row needs the source row after r1 (rows step by about 0.9): ask for it
        // now, a row of work ahead, since the pass waits on memory more than it computes. (Address
        // arithmetic in integers: the row may be past the picture, and a prefetch never faults.)
        for (ptrdiff_t k = 0; k < n * s; k += 64) __builtin_prefetch((const void *)((uintptr_t)(r1 + u * s) + (uintptr_t)bpr + (uintptr_t)k));
        blend(r0 + u * s, r1 + u * s, tmp + (u - first), n, (uint16_t)fv, st, s);
        fv = (int32_t)((uint32_t)fv + (uint32_t)n * (uint32_t)step);
        u = end + 1;
    }
}

#if VF_X86
/// The blend for AVX2 with one multiply per 16 lanes: a + ((b − a)·w + 128) >> 8 is
/// a + vpmulhrsw(b − a, w·128), since vpmulhrsw gives (x·y + 2^14) >> 15 (arithmetic) and
/// (d·w·128 + 2^14) >> 15 = (d·w + 128) >> 8 — the same bits as the portable blend (w ≤ 255, so
/// w·128 ≤ 32640 is a valid signed 16-bit factor), without its shift of a and its rounding add.
/// ((w >> 1) & 0x7F80 is the weight's top byte times 128.) The narrowing packs with unsigned
/// saturation (the results are in range, so the same bytes as truncating, without masking them
/// first); packus works within 128-bit lanes, [v0 lo, v1 lo | v0 hi, v1 hi], so then qwords 0 2 1 3.
#define VF_BLEND16_MULHRS(a, b, w) \
    ((a) + (vf_u16x16)_mm256_mulhrs_epi16((__m256i)((b) - (a)), (__m256i)(((w) >> 1) & (uint16_t)0x7F80)))
#define VF_NARROW_PACKUS(v0, v1) (vf_u8x32)_mm256_permute4x64_epi64(_mm256_packus_epi16((__m256i)(v0), (__m256i)(v1)), 0xD8)
VF_DEFINE_WARP_BLEND(warp_blend_avx2, VF_AVX2 static, VF_BLEND16_MULHRS, VF_NARROW_PACKUS)
#endif

VF_INLINE void vf_warp_vertical_body(const uint8_t *sbase, ptrdiff_t bpr, ptrdiff_t first, ptrdiff_t last, ptrdiff_t s,
                                     int32_t start, int32_t step, uint8_t *tmp) {
    warp_vertical_runs(sbase, bpr, first, last, s, start, step, tmp, warp_blend_portable);
}

#if VF_X86
VF_AVX2 static void vf_warp_vertical_avx2(const uint8_t *sbase, ptrdiff_t bpr, ptrdiff_t first, ptrdiff_t last, ptrdiff_t s,
                                          int32_t start, int32_t step, uint8_t *tmp) {
    warp_vertical_runs(sbase, bpr, first, last, s, start, step, tmp, warp_blend_avx2);
}
#endif

void vf_warp_vertical(const uint8_t *sbase, ptrdiff_t bytesPerRow, ptrdiff_t first, ptrdiff_t last, ptrdiff_t pixelStride,
                      int32_t start, int32_t step, uint8_t *tmp) {
#if VF_X86
    if (vf_kernels_avx2_active()) { vf_warp_vertical_avx2(sbase, bytesPerRow, first, last, pixelStride, start, step, tmp); return; }
#endif
    vf_warp_vertical_body(sbase, bytesPerRow, first, last, pixelStride, start, step, tmp);
}

/// (a·(256 − w) + b·w + 128) >> 8 per lane, in 16-bit lanes.
VF_INLINE vf_u8x16 warp_lerp16(vf_u8x16 a8, vf_u8x16 b8, vf_u8x16 w8) {
    vf_u16x16 a = __builtin_convertvector(a8, vf_u16x16), b = __builtin_convertvector(b8, vf_u16x16);
    vf_u16x16 w = __builtin_convertvector(w8, vf_u16x16);
    return __builtin_convertvector((a * (256 - w) + b * w + 128) >> 8, vf_u8x16);
}

VF_INLINE void vf_warp_resample_body(const uint8_t *src, uint8_t *out, ptrdiff_t n, ptrdiff_t blocks, const int32_t *bases,
                                     const int8_t *shifts, const uint8_t *weights, const int32_t *index, const int32_t *weight) {
    ptrdiff_t x = 0;
    for (ptrdiff_t b = 0; b < blocks; b++) {
        const uint8_t *p = src + bases[b];
        vf_u8x16 l1 = vf_load16(p + 1), l0 = vf_load16(p), m1 = vf_load16(p - 1), m2 = vf_load16(p - 2), m3 = vf_load16(p - 3);
        vf_i8x16 z; memcpy(&z, shifts + b * 16, 16);
        // All ones where z == k: (z ^ k) − 1 is −1 only then.
        vf_u8x16 k0 = (vf_u8x16)((vf_i8x16)(z - 1) >> 7), k1 = (vf_u8x16)((vf_i8x16)((z ^ 1) - 1) >> 7);
        vf_u8x16 k2 = (vf_u8x16)((vf_i8x16)((z ^ 2) - 1) >> 7), k3 = (vf_u8x16)((vf_i8x16)((z ^ 3) - 1) >> 7);
        vf_u8x16 left = (l0 & k0) | (m1 & k1) | (m2 & k2) | (m3 & k3);
        vf_u8x16 right = (l1 & k0) | (l0 & k1) | (m1 & k2) | (m2 & k3);
        vf_u8x16 o = warp_lerp16(left, right, vf_load16(weights + b * 16));
        memcpy(out + b * 16, &o, 16);
    }
    x = blocks * 16;
    for (; x < n; x++) {
        int32_t i = index[x];
        int32_t a = src[i], b = src[i + 1];
        out[x] = (uint8_t)(((a << 8) + (b - a) * weight[x] + 128) >> 8);
    }
}

#if VF_X86
/// The horizontal pass with byte shuffles: lane j of a block reads src[base + j − z] and the next
/// byte, and j − z is 0...15 (z ≤ j: the source columns never fall behind the block's first one),
/// so `vpshufb` picks both from the 16 bytes at base and at base + 1 — two loads and two shuffles
/// where the portable build blends five loads by masks. Two blocks per 256-bit step. The same
/// bytes and the same integer blend (a·(256 − w) + b·w + 128) >> 8 in 16-bit lanes: the same bits.
/// One block of 16 outputs: lane j reads p[j − z] and the next byte (z from `shifts`), blended by
/// `weights` in 16-bit lanes: the horizontal pass's odd last block (pairs of blocks go through
/// ``vf_resample_pair_avx2``).
VF_AVX2 static inline __m128i vf_resample_block16_avx2(const uint8_t *p, const int8_t *shifts, const uint8_t *weights) {
    const __m128i ramp = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m128i off = _mm_sub_epi8(ramp, _mm_loadu_si128((const __m128i *)shifts));
    __m128i left = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)p), off);
    __m128i right = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 1)), off);
    __m256i a = _mm256_cvtepu8_epi16(left), c = _mm256_cvtepu8_epi16(right);
    __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)weights));
    __m256i v = _mm256_add_epi16(a, _mm256_mulhrs_epi16(_mm256_sub_epi16(c, a), _mm256_slli_epi16(w, 7)));
    return _mm_packus_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

/// Two blocks of 16 outputs in one 256-bit step: the low lane from p0 (shifts s0, weights w0), the
/// high lane from p1 (s1, w1). Bytes widened by unpacking with zero inside each lane (bytes 0–7 and
/// 8–15 of both blocks), blended as a + vpmulhrsw(b − a, w·128), which is a + ((b − a)·w + 128) >> 8
/// (see ``warp_blend_avx2``) — one multiply, no rounding add — and packed back in lane order, so
/// each lane holds its block's 16 results with no cross-lane step. The same bits as
/// ``vf_resample_block16_avx2``.
VF_AVX2 static inline __m256i vf_resample_pair_avx2(const uint8_t *p0, const uint8_t *p1, const int8_t *s0, const int8_t *s1,
                                                   const uint8_t *w0, const uint8_t *w1) {
    const __m256i ramp = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                          0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m256i zero = _mm256_setzero_si256();
    __m256i l = _mm256_loadu2_m128i((const __m128i *)p1, (const __m128i *)p0);
    __m256i r = _mm256_loadu2_m128i((const __m128i *)(p1 + 1), (const __m128i *)(p0 + 1));
    __m256i off = _mm256_sub_epi8(ramp, _mm256_loadu2_m128i((const __m128i *)s1, (const __m128i *)s0));
    __m256i w8 = _mm256_loadu2_m128i((const __m128i *)w1, (const __m128i *)w0);
    __m256i left = _mm256_shuffle_epi8(l, off), right = _mm256_shuffle_epi8(r, off);
    __m256i aLo = _mm256_unpacklo_epi8(left, zero), aHi = _mm256_unpackhi_epi8(left, zero);
    __m256i bLo = _mm256_unpacklo_epi8(right, zero), bHi = _mm256_unpackhi_epi8(right, zero);
    __m256i wLo = _mm256_unpacklo_epi8(w8, zero), wHi = _mm256_unpackhi_epi8(w8, zero);
    __m256i vLo = _mm256_add_epi16(aLo, _mm256_mulhrs_epi16(_mm256_sub_epi16(bLo, aLo), _mm256_slli_epi16(wLo, 7)));
    __m256i vHi = _mm256_add_epi16(aHi, _mm256_mulhrs_epi16(_mm256_sub_epi16(bHi, aHi), _mm256_slli_epi16(wHi, 7)));
    return _mm256_packus_epi16(vLo, vHi);
}

VF_AVX2 static void vf_warp_resample_avx2(const uint8_t *src, uint8_t *out, ptrdiff_t n, ptrdiff_t blocks, const int32_t *bases,
                                          const int8_t *shifts, const uint8_t *weights, const int32_t *index, const int32_t *weight) {
    ptrdiff_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
        __m256i o = vf_resample_pair_avx2(src + bases[b], src + bases[b + 1], shifts + b * 16, shifts + b * 16 + 16,
                                          weights + b * 16, weights + b * 16 + 16);
        _mm256_storeu_si256((__m256i *)(out + b * 16), o);
    }
    for (; b < blocks; b++) {
        _mm_storeu_si128((__m128i *)(out + b * 16), vf_resample_block16_avx2(src + bases[b], shifts + b * 16, weights + b * 16));
    }
    for (ptrdiff_t x = blocks * 16; x < n; x++) {
        int32_t i = index[x];
        int32_t a = src[i], c = src[i + 1];
        out[x] = (uint8_t)(((a << 8) + (c - a) * weight[x] + 128) >> 8);
    }
}
#endif

static void vf_warp_resample_portable(const uint8_t *src, uint8_t *out, ptrdiff_t n, ptrdiff_t blocks, const int32_t *bases,
                                      const int8_t *shifts, const uint8_t *weights, const int32_t *index, const int32_t *weight) {
    vf_warp_resample_body(src, out, n, blocks, bases, shifts, weights, index, weight);
}

void vf_warp_resample(const uint8_t *src, uint8_t *out, ptrdiff_t count, ptrdiff_t blocks, const int32_t *blockBase,
                      const int8_t *blockShift, const uint8_t *blockWeight, const int32_t *index, const int32_t *weight) {
#if VF_X86
    if (vf_kernels_avx2_active()) {
        vf_warp_resample_avx2(src, out, count, blocks, blockBase, blockShift, blockWeight, index, weight);
        return;
    }
#endif
    vf_warp_resample_portable(src, out, count, blocks, blockBase, blockShift, blockWeight, index, weight);
}

VF_INLINE void merge_pairs(const uint8_t *y, const uint8_t *u, const uint8_t *v, uint8_t *dst, ptrdiff_t pairs, int yo, int uo) {
    for (ptrdiff_t k = 0; k < pairs; k++) {
        dst[4 * k + yo] = y[2 * k];
        dst[4 * k + yo + 2] = y[2 * k + 1];
        dst[4 * k + uo] = u[k];
        dst[4 * k + uo + 2] = v[k];
    }
}

VF_INLINE void vf_merge_packed422_body(const uint8_t *y, const uint8_t *u, const uint8_t *v, uint8_t *dst, ptrdiff_t pairs, int yOffset, int uOffset) {
    // The warp writes a frame row by row into memory that is not in the cache: ask for the bytes
    // after this row (the next row when rows are contiguous) for writing, a row of work ahead.
    // (Integer addresses: past the buffer's end a prefetch never faults.)
    for (ptrdiff_t k = 0; k < 4 * pairs; k += 64) __builtin_prefetch((void *)((uintptr_t)dst + (uintptr_t)(4 * pairs + k)), 1);
    if (yOffset == 0 && uOffset == 1) merge_pairs(y, u, v, dst, pairs, 0, 1);
    else if (yOffset == 1 && uOffset == 0) merge_pairs(y, u, v, dst, pairs, 1, 0);
    else merge_pairs(y, u, v, dst, pairs, yOffset, uOffset);
}

VF_DISPATCH(vf_merge_packed422,
            (const uint8_t *y, const uint8_t *u, const uint8_t *v, uint8_t *dst, ptrdiff_t pairs, int yOffset, int uOffset),
            (y, u, v, dst, pairs, yOffset, uOffset))

// MARK: Packed 4:2:2 warp row (vertical pass, split, horizontal resampling and merge in one call)

VF_INLINE void warp_packed_tail(const uint8_t *py, const uint8_t *pu, const uint8_t *pv, const vf_warp_table *lt,
                                const vf_warp_table *ct, uint8_t *out, ptrdiff_t fromPair, ptrdiff_t pairs, int yo, int uo) {
    for (ptrdiff_t k = fromPair; k < pairs; k++) {
        ptrdiff_t x0 = 2 * k, x1 = 2 * k + 1;
        int32_t i0 = lt->index[x0], i1 = lt->index[x1], ic = ct->index[k];
        int32_t a0 = py[i0], b0 = py[i0 + 1], a1 = py[i1], b1 = py[i1 + 1];
        int32_t au = pu[ic], bu = pu[ic + 1], av = pv[ic], bv = pv[ic + 1];
        int32_t wc = ct->weight[k];
        out[4 * k + yo] = (uint8_t)(((a0 << 8) + (b0 - a0) * lt->weight[x0] + 128) >> 8);
        out[4 * k + yo + 2] = (uint8_t)(((a1 << 8) + (b1 - a1) * lt->weight[x1] + 128) >> 8);
        out[4 * k + uo] = (uint8_t)(((au << 8) + (bu - au) * wc + 128) >> 8);
        out[4 * k + uo + 2] = (uint8_t)(((av << 8) + (bv - av) * wc + 128) >> 8);
    }
}

static void warp_packed_row_portable(const vf_warp_packed_row *r) {
    vf_warp_vertical_body(r->source, r->bytesPerRow, r->first, r->last, 1, r->start, r->step, r->tmp);
    vf_split_packed422_body(r->tmp, 0, 2 * r->spanPairs, 1, r->yOffset, r->uOffset, r->planeY, r->planeU, r->planeV);
    const uint8_t *py = r->planeY + r->whole, *pu = r->planeU + r->wholeC, *pv = r->planeV + r->wholeC;
    vf_warp_resample_body(py, r->outY, 2 * r->pairs, r->luma.blocks, r->luma.blockBase, r->luma.blockShift, r->luma.blockWeight, r->luma.index, r->luma.weight);
    vf_warp_resample_body(pu, r->outU, r->pairs, r->chroma.blocks, r->chroma.blockBase, r->chroma.blockShift, r->chroma.blockWeight, r->chroma.index, r->chroma.weight);
    vf_warp_resample_body(pv, r->outV, r->pairs, r->chroma.blocks, r->chroma.blockBase, r->chroma.blockShift, r->chroma.blockWeight, r->chroma.index, r->chroma.weight);
    vf_merge_packed422_body(r->outY, r->outU, r->outV, r->out, r->pairs, r->yOffset, r->uOffset);
}

#if VF_X86
/// The resampled row's whole steps: two luma blocks and one block each of U and V per step (32
/// pixels, 64 output bytes), resampled and interleaved in registers. The chroma pair's [U 16 | V 16]
/// becomes [U0 V0 … U7 V7 | U8 V8 … U15 V15] (a qword permute, then a byte shuffle within each
/// lane), so unpacking it with the luma pair [Y 0–15 | Y 16–31] gives output bytes [0–15 | 32–47]
/// (low halves) and [16–31 | 48–63] (high halves), put in order by two 128-bit permutes.
/// `yFirst` (YUYV, else UYVY) is a constant at each call, so each layout has its own loop.
VF_AVX2 static inline __attribute__((always_inline)) void warp_packed_steps_avx2(
    uint8_t *restrict out, ptrdiff_t steps, const uint8_t *py, const uint8_t *pu, const uint8_t *pv, const vf_warp_table *luma,
    const vf_warp_table *chroma, const int yFirst) {
    const __m256i interleave = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
                                                0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    // The tables in locals: read through the structs the compiler reloaded every pointer each
    // step (the output row's stores might have changed them).
    const int32_t *restrict lBase = luma->blockBase, *restrict cBase = chroma->blockBase;
    const int8_t *restrict lShift = luma->blockShift, *restrict cShift = chroma->blockShift;
    const uint8_t *restrict lWeight = luma->blockWeight, *restrict cWeight = chroma->blockWeight;
    for (ptrdiff_t k = 0; k < steps; k++) {
        __m256i yy = vf_resample_pair_avx2(py + lBase[2 * k], py + lBase[2 * k + 1], lShift + 32 * k, lShift + 32 * k + 16,
                                           lWeight + 32 * k, lWeight + 32 * k + 16);
        __m256i uv = vf_resample_pair_avx2(pu + cBase[k], pv + cBase[k], cShift + 16 * k, cShift + 16 * k,
                                           cWeight + 16 * k, cWeight + 16 * k);
        __m256i c = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(uv, 0xD8), interleave);
        __m256i lo = yFirst ? _mm256_unpacklo_epi8(yy, c) : _mm256_unpacklo_epi8(c, yy);
        __m256i hi = yFirst ? _mm256_unpackhi_epi8(yy, c) : _mm256_unpackhi_epi8(c, yy);
        uint8_t *o = out + 64 * k;
        _mm256_storeu_si256((__m256i *)o, _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((__m256i *)(o + 32), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
}

/// The packed row: the vertical pass, the split, then the resampling and interleaving above (the
/// same integer blend as the portable passes, so the same bytes), the pairs past the last whole
/// step by the scalar tail.
VF_AVX2 static void warp_packed_row_avx2(const vf_warp_packed_row *r) {
    warp_vertical_runs(r->source, r->bytesPerRow, r->first, r->last, 1, r->start, r->step, r->tmp, warp_blend_avx2);
    split_rows_avx2(r->tmp, 0, 2 * r->spanPairs, 1, r->yOffset, r->uOffset, r->planeY, r->planeU, r->planeV);
    const uint8_t *py = r->planeY + r->whole, *pu = r->planeU + r->wholeC, *pv = r->planeV + r->wholeC;
    uint8_t *out = r->out;
    const ptrdiff_t pairs = r->pairs;
    for (ptrdiff_t k = 0; k < 4 * pairs; k += 64) __builtin_prefetch((void *)((uintptr_t)out + (uintptr_t)(4 * pairs + k)), 1);
    ptrdiff_t steps = r->luma.blocks / 2 < r->chroma.blocks ? r->luma.blocks / 2 : r->chroma.blocks;
    if (r->yOffset == 0) {
        warp_packed_steps_avx2(out, steps, py, pu, pv, &r->luma, &r->chroma, 1);
        warp_packed_tail(py, pu, pv, &r->luma, &r->chroma, out, 16 * steps, pairs, 0, 1);
    } else {
        warp_packed_steps_avx2(out, steps, py, pu, pv, &r->luma, &r->chroma, 0);
        warp_packed_tail(py, pu, pv, &r->luma, &r->chroma, out, 16 * steps, pairs, 1, 0);
    }
}
#endif

void vf_warp_packed422_row(const vf_warp_packed_row *row) {
#if VF_X86
    if (vf_kernels_avx2_active()) { warp_packed_row_avx2(row); return; }
#endif
    warp_packed_row_portable(row);
}

// MARK: Lucas–Kanade (see MotionEstimator.swift)
//
// Float sums in eight lanes: sample k of a row goes to lane k mod 8, each lane adds in row order,
// and the lanes are added 0 to 7 at the end. Both builds do exactly these operations (the AVX2
// one in one register, the portable one in two; no FMA), so they agree bit for bit.

typedef float vf_f32x8 __attribute__((vector_size(32)));
typedef uint8_t vf_u8x8 __attribute__((vector_size(8)));
typedef uint16_t vf_u16x8 __attribute__((vector_size(16)));

/// Eight samples `s` bytes apart from p as floats; for `s` 2 the 16 bytes from p are read. (Macros,
/// not functions: a 256-bit vector passed to or returned from a function without AVX changes the ABI.)
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LK_LOAD8_S2(r, p) do { vf_u16x8 v_; memcpy(&v_, (p), 16); v_ &= 0xFF; (r) = __builtin_convertvector(v_, vf_f32x8); } while (0)
#else
#define LK_LOAD8_S2(r, p) do { for (int i_ = 0; i_ < 8; i_++) (r)[i_] = (float)(p)[2 * i_]; } while (0)
#endif
#define LK_LOAD8(r, p, s) do {                                                                  \
        if ((s) == 1) { vf_u8x8 v_; memcpy(&v_, (p), 8); (r) = __builtin_convertvector(v_, vf_f32x8); } \
        else if ((s) == 2) LK_LOAD8_S2(r, p);                                                   \
        else for (int i_ = 0; i_ < 8; i_++) (r)[i_] = (float)(p)[i_ * (s)];                     \
    } while (0)
/// The lanes added 0 to 7.
#define LK_LANES(out, v) do { float t_ = (v)[0]; for (int i_ = 1; i_ < 8; i_++) t_ += (v)[i_]; (out) = t_; } while (0)

/// The Lucas–Kanade kernels' row ends: the columns past the last whole 8 (`full`) are summed by
/// one more step over the row's last 8 columns, n − 8 ... n − 1, whose lanes the loop already
/// summed are weighted 0 by this mask (loads stay inside the rows; the scalar loop only when n < 8).
/// (Written through a pointer: a 32-byte vector returned by value changes the ABI in the
/// portable build.)
VF_INLINE void lk_tail_mask(vf_f32x8 *m, ptrdiff_t n, ptrdiff_t full) {
    for (int l = 0; l < 8; l++) (*m)[l] = n - 8 + l >= full ? 1.0f : 0.0f;
}

/// One 8-column step of the structure tensor at column `kk`, gradients weighted by `mm` (1 or the
/// tail mask).
#define LK_TENSOR_STEP(kk, mm) do {                                                                   \
        const ptrdiff_t k_ = (kk);                                                                     \
        vf_f32x8 tr, tl, td, tu;                                                                       \
        LK_LOAD8(tr, r + k_ + 1, 1); LK_LOAD8(tl, r + k_ - 1, 1); LK_LOAD8(td, r + k_ + ts, 1); LK_LOAD8(tu, r + k_ - ts, 1); \
        vf_f32x8 gx = (tr - tl) * 0.5f * (mm), gy = (td - tu) * 0.5f * (mm);                           \
        xx += gx * gx; xy += gx * gy; yy += gy * gy;                                                   \
    } while (0)

VF_INLINE void vf_lk_tensor_body(const uint8_t *t, ptrdiff_t ts, ptrdiff_t n, ptrdiff_t rows, float *out) {
    vf_f32x8 xx = {0}, xy = {0}, yy = {0};
    const ptrdiff_t full = n & ~(ptrdiff_t)7;
    vf_f32x8 tailMask;
    lk_tail_mask(&tailMask, n, full);
    for (ptrdiff_t j = 0; j < rows; j++) {
        const uint8_t *r = t + j * ts;
        for (ptrdiff_t k = 0; k < full; k += 8) LK_TENSOR_STEP(k, 1.0f);
        if (n >= 8 && full < n) {
            LK_TENSOR_STEP(n - 8, tailMask);
        } else for (ptrdiff_t k = full; k < n; k++) {
            float gx = ((float)r[k + 1] - (float)r[k - 1]) * 0.5f;
            float gy = ((float)r[k + ts] - (float)r[k - ts]) * 0.5f;
            int l = (int)(k & 7);
            xx[l] += gx * gx; xy[l] += gx * gy; yy[l] += gy * gy;
        }
    }
    LK_LANES(out[0], xx); LK_LANES(out[1], xy); LK_LANES(out[2], yy);
}

VF_DISPATCH(vf_lk_tensor, (const uint8_t *t, ptrdiff_t ts, ptrdiff_t n, ptrdiff_t rows, float *out), (t, ts, n, rows, out))

/// The template's value and gradients and the image sampled bilinearly at (k + fx, j + fy), eight
/// columns from `kk`, gradients weighted by `mm` (1 or the tail mask); declares tc, gx, gy and e.
/// Shared by the mismatch and the similarity steps.
#define LK_SAMPLE8(kk, mm)                                                                             \
        const ptrdiff_t k_ = (kk);                                                                     \
        const uint8_t *q = p + k_ * s;                                                                 \
        vf_f32x8 a, b, c, d, tc, tr, tl, td, tu;                                                       \
        LK_LOAD8(a, q, s); LK_LOAD8(b, q + s, s); LK_LOAD8(c, q + bpr, s); LK_LOAD8(d, q + bpr + s, s); \
        LK_LOAD8(tc, r + k_, 1); LK_LOAD8(tr, r + k_ + 1, 1); LK_LOAD8(tl, r + k_ - 1, 1);             \
        LK_LOAD8(td, r + k_ + ts, 1); LK_LOAD8(tu, r + k_ - ts, 1);                                    \
        vf_f32x8 top = a + (b - a) * fx;                                                               \
        vf_f32x8 v = top + ((c + (d - c) * fx) - top) * fy;                                            \
        vf_f32x8 gx = (tr - tl) * 0.5f * (mm), gy = (td - tu) * 0.5f * (mm);                           \
        vf_f32x8 e = tc - v

/// One 8-column step of the mismatch at column `kk`, gradients weighted by `mm`.
#define LK_MISMATCH_STEP(kk, mm) do { LK_SAMPLE8(kk, mm); bx += gx * e; by += gy * e; } while (0)

VF_INLINE void lk_mismatch(const uint8_t *t, ptrdiff_t ts, const uint8_t *img, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n,
                           ptrdiff_t rows, float fx, float fy, float *out) {
    vf_f32x8 bx = {0}, by = {0};
    const ptrdiff_t full = n & ~(ptrdiff_t)7;
    vf_f32x8 tailMask;
    lk_tail_mask(&tailMask, n, full);
    for (ptrdiff_t j = 0; j < rows; j++) {
        const uint8_t *r = t + j * ts, *p = img + j * bpr;
        for (ptrdiff_t k = 0; k < full; k += 8) LK_MISMATCH_STEP(k, 1.0f);
        if (n >= 8 && full < n) {
            LK_MISMATCH_STEP(n - 8, tailMask);
        } else for (ptrdiff_t k = full; k < n; k++) {
            const uint8_t *q = p + k * s;
            float a = q[0], b = q[s], c = q[bpr], d = q[bpr + s];
            float top = a + (b - a) * fx;
            float v = top + ((c + (d - c) * fx) - top) * fy;
            float gx = ((float)r[k + 1] - (float)r[k - 1]) * 0.5f;
            float gy = ((float)r[k + ts] - (float)r[k - ts]) * 0.5f;
            float e = (float)r[k] - v;
            int l = (int)(k & 7);
            bx[l] += gx * e; by[l] += gy * e;
        }
    }
    LK_LANES(out[0], bx); LK_LANES(out[1], by);
}

/// One 8-column step of ``lk_similarity`` at column `kk`, gradients weighted by `mm` (1 or the tail mask).
#define LK_SIM_STEP(kk, mm) do {                                                                       \
        LK_SAMPLE8(kk, mm);                                                                            \
        vf_f32x8 px = px0 + ((float)k_ + ramp) * step;                                                 \
        vf_f32x8 j2 = gy * px - gx * py, j3 = gx * px + gy * py;                                       \
        h00 += gx * gx; h01 += gx * gy; h02 += gx * j2; h03 += gx * j3;                                \
        h11 += gy * gy; h12 += gy * j2; h13 += gy * j3;                                                \
        h22 += j2 * j2; h23 += j2 * j3; h33 += j3 * j3;                                                \
        g0 += gx * e; g1 += gy * e; g2 += j2 * e; g3 += j3 * e;                                        \
    } while (0)

/// One block's contribution to a similarity's Gauss–Newton normal equations (see
/// MotionEstimator.accumulateSimilarity): out[0...9] the upper triangle of JᵀJ row by row
/// (h00 h01 h02 h03 h11 h12 h13 h22 h23 h33), out[10...13] Jᵀe, with J = ∇T · (1, 0 | 0, 1 |
/// −py, px | px, py), px = px0 + k·step, py = py0 + j·step, e = T − the image sampled bilinearly.
VF_INLINE void lk_similarity(const uint8_t *t, ptrdiff_t ts, const uint8_t *img, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n,
                             ptrdiff_t rows, float fx, float fy, float px0, float py0, float step, float *out) {
    vf_f32x8 h00 = {0}, h01 = {0}, h02 = {0}, h03 = {0}, h11 = {0}, h12 = {0}, h13 = {0}, h22 = {0}, h23 = {0}, h33 = {0};
    vf_f32x8 g0 = {0}, g1 = {0}, g2 = {0}, g3 = {0};
    const vf_f32x8 ramp = {0, 1, 2, 3, 4, 5, 6, 7};
    const ptrdiff_t full = n & ~(ptrdiff_t)7;
    vf_f32x8 tailMask;
    lk_tail_mask(&tailMask, n, full);
    for (ptrdiff_t j = 0; j < rows; j++) {
        const uint8_t *r = t + j * ts, *p = img + j * bpr;
        const float py = py0 + (float)j * step;
        for (ptrdiff_t k = 0; k < full; k += 8) LK_SIM_STEP(k, 1.0f);
        if (n >= 8 && full < n) {
            LK_SIM_STEP(n - 8, tailMask);
        } else {
            for (ptrdiff_t k = full; k < n; k++) {
                const uint8_t *q = p + k * s;
                float a = q[0], b = q[s], c = q[bpr], d = q[bpr + s];
                float top = a + (b - a) * fx;
                float v = top + ((c + (d - c) * fx) - top) * fy;
                float gx = ((float)r[k + 1] - (float)r[k - 1]) * 0.5f;
                float gy = ((float)r[k + ts] - (float)r[k - ts]) * 0.5f;
                float e = (float)r[k] - v;
                float px = px0 + (float)k * step;
                float j2 = gy * px - gx * py, j3 = gx * px + gy * py;
                int l = (int)(k & 7);
                h00[l] += gx * gx; h01[l] += gx * gy; h02[l] += gx * j2; h03[l] += gx * j3;
                h11[l] += gy * gy; h12[l] += gy * j2; h13[l] += gy * j3;
                h22[l] += j2 * j2; h23[l] += j2 * j3; h33[l] += j3 * j3;
                g0[l] += gx * e; g1[l] += gy * e; g2[l] += j2 * e; g3[l] += j3 * e;
            }
        }
    }
    LK_LANES(out[0], h00); LK_LANES(out[1], h01); LK_LANES(out[2], h02); LK_LANES(out[3], h03);
    LK_LANES(out[4], h11); LK_LANES(out[5], h12); LK_LANES(out[6], h13);
    LK_LANES(out[7], h22); LK_LANES(out[8], h23); LK_LANES(out[9], h33);
    LK_LANES(out[10], g0); LK_LANES(out[11], g1); LK_LANES(out[12], g2); LK_LANES(out[13], g3);
}

VF_INLINE void vf_lk_similarity_body(const uint8_t *t, ptrdiff_t ts, const uint8_t *img, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n,
                                     ptrdiff_t rows, float fx, float fy, float px0, float py0, float step, float *out) {
    VF_CONSTANT_STRIDE(s, lk_similarity(t, ts, img, bpr, VF_S, n, rows, fx, fy, px0, py0, step, out));
}

VF_DISPATCH(vf_lk_similarity,
            (const uint8_t *t, ptrdiff_t ts, const uint8_t *img, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n,
             ptrdiff_t rows, float fx, float fy, float px0, float py0, float step, float *out),
            (t, ts, img, bytesPerRow, pixelStride, n, rows, fx, fy, px0, py0, step, out))

VF_INLINE void vf_lk_mismatch_body(const uint8_t *t, ptrdiff_t ts, const uint8_t *img, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n,
                                   ptrdiff_t rows, float fx, float fy, float *out) {
    VF_CONSTANT_STRIDE(s, lk_mismatch(t, ts, img, bpr, VF_S, n, rows, fx, fy, out));
}

VF_DISPATCH(vf_lk_mismatch,
            (const uint8_t *t, ptrdiff_t ts, const uint8_t *img, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n,
             ptrdiff_t rows, float fx, float fy, float *out),
            (t, ts, img, bytesPerRow, pixelStride, n, rows, fx, fy, out))

// MARK: Sum of absolute differences (see MotionEstimator.sad)

/// Σ |a − b| over `rows` rows of the first `side` (≤ 16) bytes; 16 bytes of each row are read.
VF_INLINE uint32_t vf_sad16_rows_body(const uint8_t *a, ptrdiff_t aStride, const uint8_t *b, ptrdiff_t bStride, ptrdiff_t rows, ptrdiff_t side) {
    vf_u8x16 mask;
    for (int i = 0; i < 16; i++) mask[i] = i < side ? 0xFF : 0;
#if VF_X86
    // psadbw (SSE2, so in both builds): the 16 differences summed in two 64-bit halves.
    __m128i m;
    memcpy(&m, &mask, 16);
    __m128i acc = _mm_setzero_si128();
    for (ptrdiff_t j = 0; j < rows; j++) {
        __m128i va = _mm_and_si128(_mm_loadu_si128((const __m128i *)(a + j * aStride)), m);
        __m128i vb = _mm_and_si128(_mm_loadu_si128((const __m128i *)(b + j * bStride)), m);
        acc = _mm_add_epi64(acc, _mm_sad_epu8(va, vb));
    }
    return (uint32_t)(_mm_cvtsi128_si64(acc) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
#else
    vf_u16x16 acc = {0};
    for (ptrdiff_t j = 0; j < rows; j++) {
        vf_u8x16 va = vf_load16(a + j * aStride) & mask, vb = vf_load16(b + j * bStride) & mask;
        vf_u8x16 d = __builtin_elementwise_max(va, vb) - __builtin_elementwise_min(va, vb);
        acc += __builtin_convertvector(d, vf_u16x16);
    }
    uint32_t t = 0;
    for (int i = 0; i < 16; i++) t += acc[i];
    return t;
#endif
}

VF_DISPATCH_RETURNING(uint32_t, vf_sad16_rows,
                      (const uint8_t *a, ptrdiff_t aStride, const uint8_t *b, ptrdiff_t bStride, ptrdiff_t rows, ptrdiff_t side),
                      (a, aStride, b, bStride, rows, side))

// MARK: Pyramid of grey images, and copying samples out of a frame (see MotionEstimator.swift)

/// dst(x, y) = (s(2x, 2y) + s(2x + 1, 2y) + s(2x, 2y + 1) + s(2x + 1, 2y + 1) + 2) >> 2 over
/// `height` rows of `width` outputs, from planar 8-bit rows. 16 outputs a step (32 bytes of each
/// row as 16-bit lanes, one pixel pair each), then the last 16 once more (overlapping), so only
/// rows under 16 outputs take the scalar loop.
VF_INLINE void halve_grey_row(const uint8_t *r0, const uint8_t *r1, uint8_t *o, ptrdiff_t w) {
    ptrdiff_t x = 0;
    if (w >= 16) {
        for (;; x += 16) {
            if (x + 16 > w) x = w - 16;
            vf_u16x16 a, c;
            memcpy(&a, r0 + 2 * x, 32);
            memcpy(&c, r1 + 2 * x, 32);
            vf_u16x16 sum = (a & 0xFF) + (a >> 8) + (c & 0xFF) + (c >> 8) + 2;
            vf_u8x16 out = __builtin_convertvector(sum >> 2, vf_u8x16);
            memcpy(o + x, &out, 16);
            if (x + 16 >= w) break;
        }
        return;
    }
    for (; x < w; x++) o[x] = (uint8_t)((r0[2 * x] + r0[2 * x + 1] + r1[2 * x] + r1[2 * x + 1] + 2) >> 2);
}

VF_INLINE void vf_halve_grey_body(const uint8_t *src, ptrdiff_t bpr, ptrdiff_t w, ptrdiff_t h, uint8_t *dst, ptrdiff_t dstStride) {
    for (ptrdiff_t y = 0; y < h; y++) halve_grey_row(src + 2 * y * bpr, src + (2 * y + 1) * bpr, dst + y * dstStride, w);
}

VF_DISPATCH(vf_halve_grey, (const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t width, ptrdiff_t height, uint8_t *dst, ptrdiff_t dstStride),
            (src, bytesPerRow, width, height, dst, dstStride))

/// dst[j·dstStride + k] = src[j·bytesPerRow + k·pixelStride] for `rows` rows of `width` samples.
/// Stride 2 (packed 4:2:2 luma) 16 samples a step from 32 bytes, the row's last 16 once more
/// (overlapping); it reads no byte past the row's last sample.
VF_INLINE void vf_gather_samples_body(const uint8_t *src, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t width, ptrdiff_t rows, uint8_t *dst, ptrdiff_t dstStride) {
    for (ptrdiff_t j = 0; j < rows; j++) {
        const uint8_t *r = src + j * bpr;
        uint8_t *o = dst + j * dstStride;
        if (s == 1) { memcpy(o, r, (size_t)width); continue; }
        ptrdiff_t k = 0;
        if (s == 2 && width >= 16) {
            for (;; k += 16) {
                if (k + 16 > width) k = width - 16;
                // 31 bytes hold samples k ... k + 15; the 32nd byte would be past the last sample.
                vf_u16x16 a = {0};
                memcpy(&a, r + 2 * k, 31);
                vf_u8x16 out = __builtin_convertvector(a & 0xFF, vf_u8x16);
                memcpy(o + k, &out, 16);
                if (k + 16 >= width) break;
            }
            continue;
        }
        for (; k < width; k++) o[k] = r[k * s];
    }
}

VF_DISPATCH(vf_gather_samples, (const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t width, ptrdiff_t rows, uint8_t *dst, ptrdiff_t dstStride),
            (src, bytesPerRow, pixelStride, width, rows, dst, dstStride))

void vf_prefetch_rows(const void *p, ptrdiff_t bytesPerRow, ptrdiff_t span, ptrdiff_t rows) {
    // Integer addresses: a row outside the picture is only a wasted hint.
    const uintptr_t base = (uintptr_t)p;
    for (ptrdiff_t j = 0; j < rows; j++) {
        const uintptr_t r = base + (uintptr_t)(j * bytesPerRow);
        for (uintptr_t a = r & ~(uintptr_t)63; a < r + (uintptr_t)span; a += 64) __builtin_prefetch((const void *)a);
    }
}

// MARK: The dense step's pixel choice (see MotionEstimator.selectDensePixels)

typedef int16_t vf_i16x16 __attribute__((vector_size(32)));
typedef int32_t vf_i32x16 __attribute__((vector_size(64)));

/// A band of four rows in cells of 4 × 4 (the estimator's levels), 16 cells a step: every pixel's
/// key (mag << 4) | (3 − row) << 2 | (3 − column), mag ≤ 2040 so 15 bits, the band's rows merged
/// by maximum as they are computed, then each cell's largest key: its steepest pixel, the first
/// of equals in row order — the choice the row loop makes, which takes a pixel only when it is
/// steeper than the best so far. The last step overlaps the one before when the cells are not a
/// multiple of 16 (a cell seen twice keeps its choice: its key is no longer steeper).
VF_INLINE void dense_band_maxima4(const uint8_t *pixels, ptrdiff_t width, ptrdiff_t y0, ptrdiff_t margin, ptrdiff_t cells,
                                  int16_t *key, int16_t *best, int32_t *at) {
    const ptrdiff_t end = margin + 4 * cells;
    for (ptrdiff_t r = 0; r < 4; r++) {
        const uint8_t *c = pixels + (y0 + r) * width, *up = c - width, *dn = c + width;
        const int16_t rowBits = (int16_t)((3 - r) << 2);
        ptrdiff_t x = margin;
        for (; x + 16 <= end; x += 16) {
#define VF_ROW16(p) __builtin_convertvector(vf_load16(p), vf_i16x16)
            const vf_i16x16 ul = VF_ROW16(up + x - 1), uc = VF_ROW16(up + x), ur = VF_ROW16(up + x + 1);
            const vf_i16x16 cl = VF_ROW16(c + x - 1), cr = VF_ROW16(c + x + 1);
            const vf_i16x16 dl = VF_ROW16(dn + x - 1), dc = VF_ROW16(dn + x), dr = VF_ROW16(dn + x + 1);
#undef VF_ROW16
            const vf_i16x16 gx = (ur - ul) + 2 * (cr - cl) + (dr - dl), gy = (dl - ul) + 2 * (dc - uc) + (dr - ur);
            vf_i16x16 k = ((__builtin_elementwise_abs(gx) + __builtin_elementwise_abs(gy)) << 4) | rowBits;
            if (r > 0) { vf_i16x16 old; memcpy(&old, key + x, 32); k = __builtin_elementwise_max(k, old); }
            memcpy(key + x, &k, 32);
        }
        for (; x < end; x++) {
            const int16_t k = (int16_t)((sobel_l1_at(c + x, width) << 4) | rowBits);
            key[x] = r > 0 && key[x] > k ? key[x] : k;
        }
    }
    const vf_i16x16 column = {3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0};
    const vf_i32x16 ramp = {0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60};
    for (ptrdiff_t k = 0; k < cells; k += 16) {
        if (k + 16 > cells) k = cells - 16;
        vf_i16x16 v[4];
        for (int j = 0; j < 4; j++) {
            memcpy(&v[j], key + margin + 4 * k + 16 * j, 32);
            v[j] |= column;
            // Each group of four lanes to its maximum in every lane.
            v[j] = __builtin_elementwise_max(v[j], __builtin_shufflevector(v[j], v[j], 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
            v[j] = __builtin_elementwise_max(v[j], __builtin_shufflevector(v[j], v[j], 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
        }
        const vf_i16x16 e = __builtin_shufflevector(
            __builtin_shufflevector(v[0], v[1], 0, 4, 8, 12, 16, 20, 24, 28), __builtin_shufflevector(v[2], v[3], 0, 4, 8, 12, 16, 20, 24, 28),
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        vf_i16x16 b;
        memcpy(&b, best + k, 32);
        const vf_i16x16 steepest = e >> 4, update = steepest > b;
        b = (steepest & update) | (b & ~update);
        memcpy(best + k, &b, 32);
        // The place: row y0 + 3 − ((e >> 2) & 3), column margin + 4·cell + 3 − (e & 3).
        const vf_i32x16 e32 = __builtin_convertvector(e, vf_i32x16);
        const vf_i32x16 pos = (int32_t)((y0 + 3) << 16 | (margin + 4 * k + 3)) + ramp - (((e32 >> 2) & 3) << 16) - (e32 & 3);
        const vf_i32x16 u = __builtin_convertvector(update, vf_i32x16);
        vf_i32x16 a;
        memcpy(&a, at + k, 64);
        a = (pos & u) | (a & ~u);
        memcpy(at + k, &a, 64);
    }
}

/// Otherwise per row of the band, |gx| + |gy| of the 3 × 3 Sobel sums at x = 1 ... width − 2 into
/// `mag` (at most 2040: 16-bit lanes), then in each cell of `cell` columns from `margin` the first
/// pixel above the cell's best so far, row by row: the same choice, in the same order, as the
/// Swift loop it replaces (SIMD16 in Swift ran a generic call per operation in debug builds,
/// 87 % of a debug stabilise stage).
VF_INLINE void vf_dense_cell_maxima_body(const uint8_t *pixels, ptrdiff_t width, ptrdiff_t y0, ptrdiff_t rows, ptrdiff_t margin,
                                         ptrdiff_t cell, ptrdiff_t cells, int16_t *mag, int16_t *best, int32_t *at) {
    if (cell == 4 && rows == 4 && cells >= 16) {
        dense_band_maxima4(pixels, width, y0, margin, cells, mag, best, at);
        return;
    }
    for (ptrdiff_t y = y0; y < y0 + rows; y++) {
        const uint8_t *c = pixels + y * width;
        for (ptrdiff_t x = 1; x < width - 1; x++) mag[x] = sobel_l1_at(c + x, width);
        for (ptrdiff_t k = 0; k < cells; k++) {
            const int16_t *m = mag + margin + k * cell;
            int16_t b = best[k];
            ptrdiff_t a = -1;
            for (ptrdiff_t i = 0; i < cell; i++) {
                if (m[i] > b) { b = m[i]; a = i; }
            }
            if (a >= 0) { best[k] = b; at[k] = (int32_t)(y << 16 | (margin + k * cell + a)); }
        }
    }
}

VF_DISPATCH(vf_dense_cell_maxima,
            (const uint8_t *pixels, ptrdiff_t width, ptrdiff_t y0, ptrdiff_t rows, ptrdiff_t margin, ptrdiff_t cell, ptrdiff_t cells,
             int16_t *mag, int16_t *best, int32_t *at),
            (pixels, width, y0, rows, margin, cell, cells, mag, best, at))

ptrdiff_t vf_dense_points(const uint8_t *pixels, ptrdiff_t width, const int16_t *best, const int32_t *at, ptrdiff_t cells,
                          int16_t threshold, float *x, float *y, float *t, float *gx, float *gy) {
    ptrdiff_t n = 0;
    for (ptrdiff_t k = 0; k < cells; k++) {
        if (best[k] <= threshold) continue;
        const int32_t bx = at[k] & 0xFFFF, by = at[k] >> 16;
        const uint8_t *q = pixels + (ptrdiff_t)by * width + bx;
        // Sums of small integers: exact, as the same sums in floats.
        int sx, sy;
        sobel_at(q, width, 1, &sx, &sy);
        x[n] = (float)bx; y[n] = (float)by; t[n] = (float)q[0];
        gx[n] = (float)sx * 0.125f; gy[n] = (float)sy * 0.125f;
        n++;
    }
    return n;
}

// MARK: The motion estimator's dense pass (see MotionEstimator.densePass)

typedef int32_t vf_i32x8 __attribute__((vector_size(32)));
typedef double vf_f64x8 __attribute__((vector_size(64)));

/// Eight chosen pixels a step; point k goes to lane k mod 8 and the lanes are added 0 to 7 at the
/// end (the same operations in both builds, so the same bits). Lanes outside the picture, or past
/// the last point, are weighted 0 and counted nowhere.
VF_INLINE void vf_dense_pass_body(const float *xs, const float *ys, const float *ts, const float *gxs, const float *gys, ptrdiff_t count,
                                  const uint8_t *img, ptrdiff_t bw, float maxU, float maxV, float s, float half, float cx, float cy,
                                  float tx, float ty, float th, float kk, float unit, float huber,
                                  int32_t *histogram, float *sums, ptrdiff_t *usedOut, double *costOut) {
    vf_f32x8 h00 = {0}, h01 = {0}, h02 = {0}, h03 = {0}, h11 = {0}, h12 = {0}, h13 = {0}, h22 = {0}, h23 = {0}, h33 = {0};
    vf_f32x8 g0 = {0}, g1 = {0}, g2 = {0}, g3 = {0};
    vf_f64x8 cost = {0};
    ptrdiff_t used = 0;
    const vf_i32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    // s is a power of two (the level's scale), so a product with its reciprocal is the quotient,
    // bit for bit, without a division's latency.
    const float invS = 1.0f / s;
    for (ptrdiff_t i = 0; i < count; i += 8) {
        const ptrdiff_t n = count - i < 8 ? count - i : 8;
        vf_f32x8 x = {0}, y = {0}, t = {0}, gxv = {0}, gyv = {0};
        if (n == 8) {
            // Constant sizes: vector loads (a variable size was a call to memcpy per array).
            memcpy(&x, xs + i, 32); memcpy(&y, ys + i, 32); memcpy(&t, ts + i, 32);
            memcpy(&gxv, gxs + i, 32); memcpy(&gyv, gys + i, 32);
        } else {
            memcpy(&x, xs + i, (size_t)n * 4); memcpy(&y, ys + i, (size_t)n * 4); memcpy(&t, ts + i, (size_t)n * 4);
            memcpy(&gxv, gxs + i, (size_t)n * 4); memcpy(&gyv, gys + i, (size_t)n * 4);
        }
        const vf_f32x8 px = x * s + half - cx, py = y * s + half - cy;
        const vf_f32x8 u = x + tx + (-th * py + kk * px) * invS, v = y + ty + (th * px + kk * py) * invS;
        const vf_i32x8 ok = (u >= 0) & (v >= 0) & (u < maxU) & (v < maxV) & (lane < (int32_t)n);
        // Lanes outside the picture at (0, 0) before the conversion (no out-of-range float to int).
        const vf_f32x8 uc = (vf_f32x8)((vf_i32x8)u & ok), vc = (vf_f32x8)((vf_i32x8)v & ok);
        const vf_i32x8 iu = __builtin_convertvector(uc, vf_i32x8), iv = __builtin_convertvector(vc, vf_i32x8);
        const vf_f32x8 fu = uc - __builtin_convertvector(iu, vf_f32x8), fv = vc - __builtin_convertvector(iv, vf_f32x8);
        // Each lane's two byte pairs as 16-bit loads into small arrays, then split and converted
        // as vectors (lane by lane into float vectors the loop was a blend per byte).
        uint8_t topPairs[16], bottomPairs[16];
        for (int l = 0; l < 8; l++) {
            const uint8_t *q = img + ((ptrdiff_t)iv[l] * bw + iu[l]);
            memcpy(topPairs + 2 * l, q, 2); memcpy(bottomPairs + 2 * l, q + bw, 2);
        }
        vf_u8x16 tp, bp;
        memcpy(&tp, topPairs, 16); memcpy(&bp, bottomPairs, 16);
#define VF_PAIR_BYTES(v, i) __builtin_convertvector(__builtin_shufflevector(v, v, i, i + 2, i + 4, i + 6, i + 8, i + 10, i + 12, i + 14), vf_f32x8)
        const vf_f32x8 q00 = VF_PAIR_BYTES(tp, 0), q01 = VF_PAIR_BYTES(tp, 1), q10 = VF_PAIR_BYTES(bp, 0), q11 = VF_PAIR_BYTES(bp, 1);
#undef VF_PAIR_BYTES
        const vf_f32x8 top = q00 + (q01 - q00) * fu;
        const vf_f32x8 bot = q10 + (q11 - q10) * fu;
        const vf_f32x8 r = top + (bot - top) * fv - t;
        const vf_f32x8 ar = (vf_f32x8)((vf_i32x8)r & 0x7FFFFFFF);
        const vf_i32x8 small = ar <= 4;
        const vf_f32x8 rho = (vf_f32x8)(((vf_i32x8)(0.5f * ar * ar) & small) | ((vf_i32x8)(4 * (ar - 2)) & ~small));
        // Lanes outside add 0 (their cost lane keeps its bits: the sums start at +0).
        cost += __builtin_convertvector((vf_f32x8)((vf_i32x8)rho & ok), vf_f64x8);
        for (int l = 0; l < 8; l++) used -= ok[l]; // -1 where inside
        if (!histogram) continue;
        for (int l = 0; l < 8; l++) {
            if (!ok[l]) continue;
            const float a4 = ar[l] * 4;
            histogram[!(a4 < 255) ? 255 : (int)a4] += 1;
        }
        const vf_i32x8 inside = ar <= huber;
        const vf_f32x8 wgt = (vf_f32x8)((((vf_i32x8)(vf_f32x8){1, 1, 1, 1, 1, 1, 1, 1} & inside) | ((vf_i32x8)(huber / ar) & ~inside)) & ok);
        const vf_f32x8 gx = gxv * invS, gy = gyv * invS;
        const vf_f32x8 pk = px / unit, qk = py / unit;
        const vf_f32x8 j0 = gx, j1 = gy, j2 = -gx * qk + gy * pk, j3 = gx * pk + gy * qk;
        const vf_f32x8 w0 = wgt * j0, w1 = wgt * j1, w2 = wgt * j2, w3 = wgt * j3;
        h00 += w0 * j0; h01 += w0 * j1; h02 += w0 * j2; h03 += w0 * j3;
        h11 += w1 * j1; h12 += w1 * j2; h13 += w1 * j3;
        h22 += w2 * j2; h23 += w2 * j3; h33 += w3 * j3;
        g0 -= w0 * r; g1 -= w1 * r; g2 -= w2 * r; g3 -= w3 * r;
    }
    if (sums) {
        LK_LANES(sums[0], h00); LK_LANES(sums[1], h01); LK_LANES(sums[2], h02); LK_LANES(sums[3], h03);
        LK_LANES(sums[4], h11); LK_LANES(sums[5], h12); LK_LANES(sums[6], h13);
        LK_LANES(sums[7], h22); LK_LANES(sums[8], h23); LK_LANES(sums[9], h33);
        LK_LANES(sums[10], g0); LK_LANES(sums[11], g1); LK_LANES(sums[12], g2); LK_LANES(sums[13], g3);
    }
    double c = cost[0];
    for (int l = 1; l < 8; l++) c += cost[l];
    *usedOut = used;
    *costOut = c;
}

VF_DISPATCH(vf_dense_pass,
            (const float *xs, const float *ys, const float *ts, const float *gxs, const float *gys, ptrdiff_t count,
             const uint8_t *img, ptrdiff_t bw, float maxU, float maxV, float s, float half, float cx, float cy,
             float tx, float ty, float th, float kk, float unit, float huber,
             int32_t *histogram, float *sums, ptrdiff_t *usedOut, double *costOut),
            (xs, ys, ts, gxs, gys, count, img, bw, maxU, maxV, s, half, cx, cy, tx, ty, th, kk, unit, huber, histogram, sums, usedOut, costOut))

void vf_dense_scan(const float *xs, const float *ys, const float *ts, ptrdiff_t count,
                   const uint8_t *img, ptrdiff_t width, ptrdiff_t height, ptrdiff_t tx0, ptrdiff_t ty0, ptrdiff_t side,
                   double *lanes, double *costs, ptrdiff_t *used) {
    // The Huber cost at 4 grey levels of a whole residual |r| (0.5 r² within 4, 4 (|r| − 2)
    // beyond): in floats, as vf_dense_pass computes it, every value exact.
    double rho[256];
    for (int a = 0; a < 256; a++) {
        const float ar = (float)a;
        rho[a] = (double)(ar <= 4 ? 0.5f * ar * ar : 4 * (ar - 2));
    }
    const ptrdiff_t shifts = side * side;
    for (ptrdiff_t k = 0; k < shifts * 8; k++) lanes[k] = 0;
    for (ptrdiff_t k = 0; k < shifts; k++) used[k] = 0;
    for (ptrdiff_t p = 0; p < count; p++) {
        const ptrdiff_t x = (ptrdiff_t)xs[p], y = (ptrdiff_t)ys[p], t = (ptrdiff_t)ts[p], lane = p & 7;
        // The translations that keep the sample in the picture: a rectangle of the grid.
        const ptrdiff_t i0 = -(x + tx0) > 0 ? -(x + tx0) : 0, j0 = -(y + ty0) > 0 ? -(y + ty0) : 0;
        ptrdiff_t i1 = width - 2 - (x + tx0) + 1, j1 = height - 2 - (y + ty0) + 1;
        if (i1 > side) i1 = side;
        if (j1 > side) j1 = side;
        for (ptrdiff_t j = j0; j < j1; j++) {
            const uint8_t *row = img + (y + ty0 + j) * width + x + tx0;
            double *l = lanes + (j * side) * 8 + lane;
            ptrdiff_t *u = used + j * side;
            for (ptrdiff_t i = i0; i < i1; i++) {
                const ptrdiff_t r = (ptrdiff_t)row[i] - t;
                l[i * 8] += rho[r < 0 ? -r : r];
                u[i] += 1;
            }
        }
    }
    for (ptrdiff_t k = 0; k < shifts; k++) {
        double c = lanes[k * 8];
        for (int l = 1; l < 8; l++) c += lanes[k * 8 + l];
        costs[k] = c;
    }
}

// MARK: The focus stage's half-resolution copy and its window tracker's projections

/// Vertical [1 2 1] sums of up to `VF_HALF_BLOCK` + 2 samples a step into a row of 16-bit sums,
/// then the horizontal [1 2 1] at every second one: the same integer sum as the direct 3×3
/// formula, so the same bytes.
enum { VF_HALF_BLOCK = 512 };

VF_INLINE void half_binomial_rows(const uint8_t *c0, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t w, ptrdiff_t h, uint8_t *dst, ptrdiff_t dstStride) {
    uint16_t v[2 * VF_HALF_BLOCK + 2];
    for (ptrdiff_t j = 0; j < h; j++) {
        const uint8_t *c = c0 + 2 * j * bpr, *u = c - bpr, *d = c + bpr;
        uint8_t *out = dst + j * dstStride;
        for (ptrdiff_t start = 0; start < w; start += VF_HALF_BLOCK) {
            ptrdiff_t len = w - start < VF_HALF_BLOCK ? w - start : VF_HALF_BLOCK;
            // v[k] is the vertical sum at source column 2·start − 1 + k, k = 0 ... 2·len.
            ptrdiff_t first = (2 * start - 1) * s;
            for (ptrdiff_t k = 0; k <= 2 * len; k++) {
                ptrdiff_t o = first + k * s;
                v[k] = (uint16_t)(u[o] + 2 * c[o] + d[o]);
            }
            for (ptrdiff_t i = 0; i < len; i++)
                out[start + i] = (uint8_t)((v[2 * i] + 2 * v[2 * i + 1] + v[2 * i + 2] + 8) >> 4);
        }
    }
}

VF_INLINE void vf_half_binomial_body(const uint8_t *c, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t w, ptrdiff_t h, uint8_t *dst, ptrdiff_t dstStride) {
    VF_CONSTANT_STRIDE(s, half_binomial_rows(c, bpr, VF_S, w, h, dst, dstStride));
}

VF_DISPATCH(vf_half_binomial, (const uint8_t *centre, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t width, ptrdiff_t height, uint8_t *dst, ptrdiff_t dstStride),
            (centre, bytesPerRow, pixelStride, width, height, dst, dstStride))

VF_INLINE void column_sums_rows(const uint8_t *src, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows, int32_t *sums) {
    for (ptrdiff_t i = 0; i < n; i++) sums[i] = 0;
    for (ptrdiff_t y = 0; y < rows; y++) {
        const uint8_t *p = src + y * bpr;
        for (ptrdiff_t i = 0; i < n; i++) sums[i] += p[i * s];
    }
}

VF_INLINE void vf_column_sums_body(const uint8_t *src, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows, int32_t *sums) {
    VF_CONSTANT_STRIDE(s, column_sums_rows(src, bpr, VF_S, n, rows, sums));
}

VF_DISPATCH(vf_column_sums, (const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n, ptrdiff_t rows, int32_t *sums),
            (src, bytesPerRow, pixelStride, n, rows, sums))

VF_INLINE void row_sums_rows(const uint8_t *src, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows, int32_t *sums) {
    for (ptrdiff_t y = 0; y < rows; y++) {
        const uint8_t *p = src + y * bpr;
        int32_t t = 0;
        for (ptrdiff_t i = 0; i < n; i++) t += p[i * s];
        sums[y] = t;
    }
}

VF_INLINE void vf_row_sums_body(const uint8_t *src, ptrdiff_t bpr, ptrdiff_t s, ptrdiff_t n, ptrdiff_t rows, int32_t *sums) {
    VF_CONSTANT_STRIDE(s, row_sums_rows(src, bpr, VF_S, n, rows, sums));
}

VF_DISPATCH(vf_row_sums, (const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n, ptrdiff_t rows, int32_t *sums),
            (src, bytesPerRow, pixelStride, n, rows, sums))
