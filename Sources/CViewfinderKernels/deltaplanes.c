// Delta bit-planes: a lossless code for 8-bit image planes that LZ4 cannot shrink (sensor noise).
//
// Each byte is predicted by the byte above it (row -1 is all 128), the difference (mod 256, as a
// signed byte) is zigzag-coded (0, -1, 1, -2, … → 0, 1, 2, 3, …), and each run of 16 codes in a
// row (a block; the row's last block is padded with zeros) is stored as its bit width b (0…8,
// the bits of the largest code) and b bit planes of 16 bits, plane k holding bit k of the 16
// codes (bit i = code i), least significant plane first. Per row: the widths as nibbles, block 2j
// in the low nibble of byte j (ceil(blocks / 2) bytes), then each block's planes, 2 bytes each,
// little-endian. Noise of a few levels costs 4–5 bits a byte instead of 8; a smooth plane less.
// Each row depends only on the row above, so coding and decoding are vector operations across
// the row (SSE2 on x86-64; a portable path elsewhere writes the same bytes).
#include "include/ViewfinderKernels.h"
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define VF_DBP_SSE2 1
#else
#define VF_DBP_SSE2 0
#endif

size_t vf_dbp_bound(size_t rowBytes, size_t rows) {
    size_t blocks = (rowBytes + 15) / 16;
    // + 16: a block's planes are stored 16 bytes at a time.
    return rows * ((blocks + 1) / 2 + blocks * 16) + 16;
}

static inline int dbp_width(unsigned m) {
    int b = 0;
    while (m) { b++; m >>= 1; }
    return b;
}

// One block in portable C: codes z[16] → width, planes at out; returns bytes written.
static inline size_t dbp_block_portable(const uint8_t *z, int *width, uint8_t *out) {
    unsigned m = 0;
    for (int i = 0; i < 16; i++) m |= z[i];
    int b = dbp_width(m);
    for (int k = 0; k < b; k++) {
        unsigned plane = 0;
        for (int i = 0; i < 16; i++) plane |= (unsigned)((z[i] >> k) & 1) << i;
        out[2 * k] = (uint8_t)plane;
        out[2 * k + 1] = (uint8_t)(plane >> 8);
    }
    *width = b;
    return (size_t)(2 * b);
}

static inline uint8_t dbp_zigzag(uint8_t cur, uint8_t up) {
    int8_t d = (int8_t)(uint8_t)(cur - up);
    return (uint8_t)(((uint8_t)d << 1) ^ (uint8_t)(d >> 7));
}

size_t vf_dbp_encode(const uint8_t *src, size_t rowBytes, size_t rows, uint8_t *dst) {
    size_t blocks = (rowBytes + 15) / 16, headerBytes = (blocks + 1) / 2;
    uint8_t *out = dst;
    uint8_t flat[16];
    memset(flat, 128, sizeof flat);
    for (size_t y = 0; y < rows; y++) {
        const uint8_t *row = src + y * rowBytes;
        const uint8_t *up = y ? row - rowBytes : NULL;
        uint8_t *header = out;
        memset(header, 0, headerBytes);
        out += headerBytes;
        for (size_t j = 0; j < blocks; j++) {
            size_t x = 16 * j, n = rowBytes - x < 16 ? rowBytes - x : 16;
            int b;
#if VF_DBP_SSE2
            if (n == 16) {
                __m128i c = _mm_loadu_si128((const __m128i *)(row + x));
                __m128i u = up ? _mm_loadu_si128((const __m128i *)(up + x)) : _mm_set1_epi8((char)128);
                __m128i d = _mm_sub_epi8(c, u);
                __m128i z = _mm_xor_si128(_mm_add_epi8(d, d), _mm_cmpgt_epi8(_mm_setzero_si128(), d));
                // The width: the bits of the largest code (OR of the 16 codes).
                __m128i o = _mm_or_si128(z, _mm_srli_si128(z, 8));
                o = _mm_or_si128(o, _mm_srli_si128(o, 4));
                o = _mm_or_si128(o, _mm_srli_si128(o, 2));
                o = _mm_or_si128(o, _mm_srli_si128(o, 1));
                unsigned m = (unsigned)_mm_cvtsi128_si32(o) & 0xFF;
                b = m ? 32 - __builtin_clz(m) : 0;
                // Plane k: bit k of each byte moved to its top bit (constant shifts), then
                // gathered; all eight go out in one store, of which the first b count.
                __m128i planes = _mm_set_epi16(
                    (short)_mm_movemask_epi8(z), (short)_mm_movemask_epi8(_mm_slli_epi16(z, 1)),
                    (short)_mm_movemask_epi8(_mm_slli_epi16(z, 2)), (short)_mm_movemask_epi8(_mm_slli_epi16(z, 3)),
                    (short)_mm_movemask_epi8(_mm_slli_epi16(z, 4)), (short)_mm_movemask_epi8(_mm_slli_epi16(z, 5)),
                    (short)_mm_movemask_epi8(_mm_slli_epi16(z, 6)), (short)_mm_movemask_epi8(_mm_slli_epi16(z, 7)));
                _mm_storeu_si128((__m128i *)out, planes);
                out += 2 * b;
            } else
#endif
            {
                uint8_t z[16];
                const uint8_t *u = up ? up + x : flat;
                for (size_t i = 0; i < 16; i++) z[i] = i < n ? dbp_zigzag(row[x + i], u[i]) : 0;
                out += dbp_block_portable(z, &b, out);
            }
            header[j / 2] |= (uint8_t)(b << (4 * (j & 1)));
        }
    }
    return (size_t)(out - dst);
}

int vf_dbp_decode(const uint8_t *src, size_t srcLength, size_t rowBytes, size_t rows, uint8_t *dst) {
    size_t blocks = (rowBytes + 15) / 16, headerBytes = (blocks + 1) / 2;
    const uint8_t *in = src, *end = src + srcLength;
    uint8_t flat[16];
    memset(flat, 128, sizeof flat);
    for (size_t y = 0; y < rows; y++) {
        uint8_t *row = dst + y * rowBytes;
        const uint8_t *up = y ? row - rowBytes : NULL;
        if ((size_t)(end - in) < headerBytes) return -1;
        const uint8_t *header = in;
        in += headerBytes;
        for (size_t j = 0; j < blocks; j++) {
            int b = (header[j / 2] >> (4 * (j & 1))) & 15;
            if (b > 8 || (size_t)(end - in) < (size_t)(2 * b)) return -1;
            size_t x = 16 * j, n = rowBytes - x < 16 ? rowBytes - x : 16;
#if VF_DBP_SSE2
            if (n == 16) {
                const __m128i bitsOf = _mm_set_epi8((char)128, 64, 32, 16, 8, 4, 2, 1, (char)128, 64, 32, 16, 8, 4, 2, 1);
                __m128i z = _mm_setzero_si128();
                for (int k = 0; k < b; k++) {
                    uint64_t lo = in[2 * k], hi = in[2 * k + 1];
                    __m128i v = _mm_set_epi64x((long long)(hi * 0x0101010101010101ULL), (long long)(lo * 0x0101010101010101ULL));
                    __m128i set = _mm_cmpeq_epi8(_mm_and_si128(v, bitsOf), bitsOf);
                    z = _mm_or_si128(z, _mm_and_si128(set, _mm_set1_epi8((char)(1 << k))));
                }
                in += 2 * b;
                // Undo the zigzag: d = (z >> 1) ^ -(z & 1).
                __m128i half = _mm_and_si128(_mm_srli_epi16(z, 1), _mm_set1_epi8(0x7F));
                __m128i neg = _mm_cmpeq_epi8(_mm_and_si128(z, _mm_set1_epi8(1)), _mm_set1_epi8(1));
                __m128i d = _mm_xor_si128(half, neg);
                __m128i u = up ? _mm_loadu_si128((const __m128i *)(up + x)) : _mm_set1_epi8((char)128);
                _mm_storeu_si128((__m128i *)(row + x), _mm_add_epi8(u, d));
                continue;
            }
#endif
            uint8_t z[16] = {0};
            for (int k = 0; k < b; k++) {
                unsigned plane = in[2 * k] | (unsigned)in[2 * k + 1] << 8;
                for (int i = 0; i < 16; i++) z[i] |= (uint8_t)(((plane >> i) & 1) << k);
            }
            in += 2 * b;
            const uint8_t *u = up ? up + x : flat;
            for (size_t i = 0; i < n; i++) {
                uint8_t d = (uint8_t)((z[i] >> 1) ^ (uint8_t)-(z[i] & 1));
                row[x + i] = (uint8_t)(u[i] + d);
            }
        }
    }
    return in == end ? 0 : -1;
}
