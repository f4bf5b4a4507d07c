#ifndef VIEWFINDER_KERNELS_H
#define VIEWFINDER_KERNELS_H
// Hot loops of Viewfinder in C, each built twice: a portable version (the baseline vector unit:
// SSE2 on x86-64, NEON on arm64) and, on x86-64 only, an AVX2 version chosen at run time when the
// CPU has AVX2. Both give bit-identical results (integer arithmetic, or float arithmetic in the
// same order without contraction). No target-CPU flag is needed to build them.
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// 1 when the AVX2 versions are in use, 0 for the portable ones.
int vf_kernels_avx2_active(void);
/// 1 when this CPU and build can run the AVX2 versions.
int vf_kernels_avx2_available(void);
/// Forces the portable versions (1) or goes back to the CPU's best (0). For tests.
void vf_kernels_force_portable(int on);

/// Sums of the 4-neighbour Laplacian over `rows` rows of `n` samples starting at `mid`
/// (rows `bytesPerRow` apart, samples `pixelStride` apart; one sample of border all round is read).
void vf_laplacian_sums(const uint8_t *mid, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n, ptrdiff_t rows,
                       int64_t *sum, uint64_t *sumSquares, uint64_t *sumPixels);

/// Sums of the squared 3×3 Sobel gradient (gx² + gy²) and of the samples, laid out as above.
void vf_sobel_sums(const uint8_t *mid, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n, ptrdiff_t rows,
                   uint64_t *sumSquares, uint64_t *sumPixels);

/// The focus stage's half-resolution copy: `height` rows of `width` outputs, output (i, j) the
/// [1 2 1]⊗[1 2 1] sum around the sample at column 2i, row 2j from `centre` (samples `pixelStride`
/// apart, rows `bytesPerRow` apart), plus 8, shifted right by 4. Reads one sample and one row either
/// side of those. Rows of `dst` are `dstStride` apart.
void vf_half_binomial(const uint8_t *centre, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t width, ptrdiff_t height,
                      uint8_t *dst, ptrdiff_t dstStride);

/// Column sums: `sums[i]` = Σ over `rows` rows of sample i (of `n`, `pixelStride` apart; rows
/// `bytesPerRow` apart). At most 2^23 rows (32-bit sums of 8-bit samples).
void vf_column_sums(const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n, ptrdiff_t rows, int32_t *sums);

/// Row sums: `sums[y]` = Σ of the `n` samples of row y (`pixelStride` apart), `rows` rows.
void vf_row_sums(const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n, ptrdiff_t rows, int32_t *sums);

/// Splits `height` rows of packed 4:2:2 (`width` even) into Y (width per row) and, when `u` and `v`
/// are not NULL, U and V planes (width/2 per row). `yOffset` 0 and `uOffset` 1 for YUYV, 1 and 0 for UYVY.
void vf_split_packed422(const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t width, ptrdiff_t height,
                        int yOffset, int uOffset, uint8_t *y, uint8_t *u, uint8_t *v);

/// The pyramid's first level from packed 4:2:2 luma (`luma` the first luma byte, samples 2 bytes
/// apart, rows `bytesPerRow` apart): `height` rows of `width` outputs, `dst` rows `dstStride` apart,
/// dst(x, y) = (l(2x, 2y) + l(2x + 1, 2y) + l(2x, 2y + 1) + l(2x + 1, 2y + 1) + 2) >> 2. Reads rows
/// 0 ..< 2·height and luma samples 0 ..< 2·width (no byte past the last luma sample used).
void vf_halve_packed422(const uint8_t *luma, ptrdiff_t bytesPerRow, ptrdiff_t width, ptrdiff_t height, uint8_t *dst, ptrdiff_t dstStride);

/// Sum of absolute differences of two blocks: Σ |a − b| over `rows` rows of the first `side`
/// (at most 16) samples; 16 bytes of each row are read. Rows `aStride` and `bStride` apart.
uint32_t vf_sad16_rows(const uint8_t *a, ptrdiff_t aStride, const uint8_t *b, ptrdiff_t bStride, ptrdiff_t rows, ptrdiff_t side);

/// The pyramid's next level from planar 8-bit rows: `height` rows of `width` outputs, dst(x, y) =
/// (s(2x, 2y) + s(2x + 1, 2y) + s(2x, 2y + 1) + s(2x + 1, 2y + 1) + 2) >> 2; reads rows 0 ..< 2·height
/// and bytes 0 ..< 2·width of each.
void vf_halve_grey(const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t width, ptrdiff_t height, uint8_t *dst, ptrdiff_t dstStride);

/// Asks the memory system for `rows` rows of `span` bytes from `p` (rows `bytesPerRow` apart),
/// to be read soon: a hint only (no byte is read, and an address outside the buffer never faults).
void vf_prefetch_rows(const void *p, ptrdiff_t bytesPerRow, ptrdiff_t span, ptrdiff_t rows);

/// Copies `rows` rows of `width` samples, `pixelStride` bytes apart in `src` (rows `bytesPerRow`
/// apart), to contiguous bytes in `dst` (rows `dstStride` apart). Reads no byte past a row's last sample.
void vf_gather_samples(const uint8_t *src, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t width, ptrdiff_t rows, uint8_t *dst, ptrdiff_t dstStride);

/// The dense step's pixel choice over rows y0 ..< y0 + rows of a grey image `width` wide (rows
/// contiguous; rows y0 − 1 and y0 + rows are read): for each of `cells` cells of `cell` columns
/// from `margin` (ending at most at width − 2), in row order, the first pixel whose |gx| + |gy|
/// of the Sobel sums exceeds `best[k]` raises it and sets `at[k]` = y << 16 | x. `mag` is scratch
/// of `width` entries. See MotionEstimator.selectDensePixels.
void vf_dense_cell_maxima(const uint8_t *pixels, ptrdiff_t width, ptrdiff_t y0, ptrdiff_t rows, ptrdiff_t margin, ptrdiff_t cell,
                          ptrdiff_t cells, int16_t *mag, int16_t *best, int32_t *at);

/// The chosen pixels of one band (after ``vf_dense_cell_maxima``): for each cell in order whose
/// `best[k]` exceeds `threshold`, the pixel at `at[k]` (y << 16 | x): its x, y, value, and Sobel
/// gradient / 8 (the central difference's scale) written at the next index of `x`, `y`, `t`, `gx`
/// and `gy` (room for `cells` each). Returns how many were written.
ptrdiff_t vf_dense_points(const uint8_t *pixels, ptrdiff_t width, const int16_t *best, const int32_t *at, ptrdiff_t cells,
                          int16_t threshold, float *x, float *y, float *t, float *gx, float *gy);

/// The motion estimator's dense pass over `count` chosen pixels (positions, values and gradients
/// of the previous frame's level, whose scale `s` is a power of two) against `img` (rows `bw`
/// apart) under a similarity; see
/// MotionEstimator.densePass. With `histogram` (256 counts of |residual|·4, added to) the weighted
/// normal equations go to `sums` (upper triangle of JᵀJ, then −Jᵀr: 14 floats); `used` and the
/// summed robust cost always.
void vf_dense_pass(const float *xs, const float *ys, const float *ts, const float *gxs, const float *gys, ptrdiff_t count,
                   const uint8_t *img, ptrdiff_t bw, float maxU, float maxV, float s, float half, float cx, float cy,
                   float tx, float ty, float th, float kk, float unit, float huber,
                   int32_t *histogram, float *sums, ptrdiff_t *used, double *cost);

/// ``vf_dense_pass``'s cost and count (no normal equations) at every whole translation
/// (tx0 + i, ty0 + j), 0 <= i, j < side, with no rotation or scale, for chosen pixels at whole
/// positions and values (as ``vf_dense_points`` writes them): `costs[j * side + i]` and
/// `used[j * side + i]` are what a call of `vf_dense_pass` there returns, bit for bit. A sample
/// there is the pixel itself (the bilinear blend's fractions are 0), each point's robust cost is
/// exact in a double (its residual is a whole number), and point k adds to lane k mod 8 of its
/// translation in point order, the lanes added 0 to 7, as `vf_dense_pass` does. `lanes` is
/// scratch for side * side * 8 doubles. In the picture means what it does there: a sample at
/// 0 <= u <= width − 2, 0 <= v <= height − 2.
void vf_dense_scan(const float *xs, const float *ys, const float *ts, ptrdiff_t count,
                   const uint8_t *img, ptrdiff_t width, ptrdiff_t height, ptrdiff_t tx0, ptrdiff_t ty0, ptrdiff_t side,
                   double *lanes, double *costs, ptrdiff_t *used);

// MARK: Sim camera renderer (one row at a time; see SimRenderer.swift for the model)

/// dst[i] = src sampled at 16.16 position p0 + i·dp with Catmull-Rom cubic weights (12-bit fraction);
/// chunks whose fraction drifts by at most 0.05 px use their middle fraction.
void vf_sim_cubic_row(const uint16_t *src, uint16_t *dst, ptrdiff_t count, int32_t p0, int32_t dp);

/// dst[x] = rows of `base` (`stride` apart) sampled vertically at 16.16 row v0 + x·dv, column x
/// (Catmull-Rom cubic), with the same chunking as ``vf_sim_cubic_row``.
void vf_sim_cubic_columns(const uint16_t *base, ptrdiff_t stride, uint16_t *dst, ptrdiff_t count, int32_t v0, int32_t dv);

/// Box blur of radius n + f: dst[i] = (Σ src[i+1 ... i+2n+1] · w + (src[i] + src[i+2n+2]) · wf + 2^14) >> 15.
void vf_sim_box_row(const uint16_t *src, uint16_t *dst, ptrdiff_t count, ptrdiff_t n, uint32_t w, uint32_t wf);

/// Constants of the sensor model for one row.
typedef struct {
    float k;          // electrons per radiance unit for this row (exposure, light, flicker)
    float fullWell;   // electrons
    float readNoise2; // read noise², electrons²
    float noiseScale; // noise multiplier
    float gain;       // ADC units per electron
    float adcMax;
    float blurFraction;  // f of the box blur (ff)
    float blurInvNorm;   // 1 / (2n + 1 + 2f)
} vf_sim_sensor;

/// Radiance to ADC codes for one row: without blur (`colSum` NULL) the radiance is `row[x]`; with it
/// (colSum[x] + f·(lo[x] + hi[x]))/norm, and the running column sums move down one row
/// (colSum += hi − next). Shot and read noise from `noise`; `codes[x]` is the rounded ADC code.
void vf_sim_sensor_row(const vf_sim_sensor *c, const uint16_t *row, uint32_t *colSum, const uint16_t *lo,
                       const uint16_t *hi, const uint16_t *next, const float *noise, int32_t *codes, ptrdiff_t count);

/// dst[x] = tone[codes[x]]; returns Σ dst[x].
uint32_t vf_sim_tone_row(const int32_t *codes, const uint8_t *tone, uint8_t *dst, ptrdiff_t count);

/// Chroma for one row of luma pairs and the packing of the output, by `layout`: 0 YUYV and 1 UYVY
/// (4 bytes per pair into `out`), 2 NV12 (UV pairs into `out`), 3 planar (U into `out`, V into `outV`).
/// u = clamp(128 + ((cu·sat + castU)·(y0 + y1)) >> 16), v likewise.
void vf_sim_chroma_row(const uint8_t *luma, const int16_t *cu, const int16_t *cv, int32_t sat, int32_t castU, int32_t castV,
                       int layout, uint8_t *out, uint8_t *outV, ptrdiff_t pairs);

// MARK: Warp (see Warp.swift)

/// The warp's vertical pass over columns first...last of one output row into tmp[0...]: the source
/// row at column c is `start + (c − first)·step` (16.16), split into runs of columns that share
/// their two source rows; tmp[c − first] = (r0·(256 − w) + r1·w + 128) >> 8 with w bits 8–15 of
/// the row position (16-bit arithmetic). Samples `pixelStride` bytes apart.
void vf_warp_vertical(const uint8_t *sbase, ptrdiff_t bytesPerRow, ptrdiff_t first, ptrdiff_t last, ptrdiff_t pixelStride,
                      int32_t start, int32_t step, uint8_t *tmp);

/// The warp's horizontal pass over one row: `blocks` blocks of 16 outputs by the block tables (lane j
/// of block b reads src[blockBase[b] + j − z] and the next, z = blockShift[16b + j] in 0...3, weight
/// blockWeight[16b + j]), then outputs 16·blocks..<count by index/weight:
/// out[x] = (src[i]·(256 − w) + src[i + 1]·w + 128) >> 8. `src` is read 3 bytes before and 16 after.
void vf_warp_resample(const uint8_t *src, uint8_t *out, ptrdiff_t count, ptrdiff_t blocks, const int32_t *blockBase,
                      const int8_t *blockShift, const uint8_t *blockWeight, const int32_t *index, const int32_t *weight);

/// Interleaves planar rows into packed 4:2:2 (`pairs` pixel pairs); offsets as ``vf_split_packed422``.
void vf_merge_packed422(const uint8_t *y, const uint8_t *u, const uint8_t *v, uint8_t *dst, ptrdiff_t pairs, int yOffset, int uOffset);

/// One horizontal resampling table (see ``vf_warp_resample``): `blocks` blocks of 16 outputs by the
/// block tables, the other outputs by index/weight.
typedef struct {
    const int32_t *blockBase;
    const int8_t *blockShift;
    const uint8_t *blockWeight;
    const int32_t *index;
    const int32_t *weight;
    ptrdiff_t blocks;
} vf_warp_table;

/// One output row of a packed 4:2:2 warp.
typedef struct {
    const uint8_t *source;  // the source frame
    ptrdiff_t bytesPerRow;
    ptrdiff_t first, last;  // bytes of the vertical pass (whole pixel pairs)
    int32_t start, step;    // its source row (16.16) at `first` and per byte
    uint8_t *tmp;           // the vertical pass's row
    ptrdiff_t spanPairs;    // pixel pairs in it
    uint8_t *planeY, *planeU, *planeV; // planar rows split from it
    uint8_t *outY, *outU, *outV;       // planar outputs (portable build)
    ptrdiff_t whole, wholeC; // first plane sample of the horizontal passes (luma, chroma)
    vf_warp_table luma, chroma;
    uint8_t *out;            // the output row
    ptrdiff_t pairs;         // pixel pairs out
    int yOffset, uOffset;    // 0, 1 for YUYV; 1, 0 for UYVY
} vf_warp_packed_row;

/// One output row of a packed 4:2:2 warp: ``vf_warp_vertical`` over bytes first...last into `tmp`,
/// ``vf_split_packed422`` of `spanPairs` pairs, ``vf_warp_resample`` of luma (2·pairs outputs from
/// planeY + whole) and of U and V (pairs outputs from planeU/V + wholeC), then
/// ``vf_merge_packed422`` into `out`. The AVX2 build resamples and interleaves in registers (the
/// same bytes). `luma.blocks` and `chroma.blocks` as for ``vf_warp_resample`` (0 when unusable); a
/// table's block part must give the same sample and weight per output as its index/weight part
/// (as `WarpWorkspace` builds them), since the builds may take an output from either.
void vf_warp_packed422_row(const vf_warp_packed_row *row);

// MARK: Lucas–Kanade (see MotionEstimator.swift)

/// Structure tensor of an n × rows template (first sample `t`, rows `ts` apart, one sample of border
/// read all round) with central-difference gradients: out = (Σgx², Σgx·gy, Σgy²).
void vf_lk_tensor(const uint8_t *t, ptrdiff_t ts, ptrdiff_t n, ptrdiff_t rows, float *out);

/// One Lucas–Kanade step's right-hand side: out = (Σgx·e, Σgy·e), e = T − the image sampled
/// bilinearly at (k + fx, j + fy) from `img` (rows `bytesPerRow` apart, samples `pixelStride` apart).
/// Sums in eight lanes in a fixed order (bit-identical between the builds).
void vf_lk_mismatch(const uint8_t *t, ptrdiff_t ts, const uint8_t *img, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n,
                    ptrdiff_t rows, float fx, float fy, float *out);

/// One block's share of a similarity's Gauss–Newton normal equations (inverse compositional: the
/// template's gradients): out[0...9] the upper triangle of JᵀJ (h00 h01 h02 h03 h11 h12 h13 h22
/// h23 h33), out[10...13] Jᵀe, J = ∇T·(1, 0 | 0, 1 | −py, px | px, py), px = px0 + k·step, py =
/// py0 + j·step, e = T − the image sampled bilinearly at (k + fx, j + fy) as in ``vf_lk_mismatch``.
/// Sums in eight lanes in a fixed order (bit-identical between the builds).
void vf_lk_similarity(const uint8_t *t, ptrdiff_t ts, const uint8_t *img, ptrdiff_t bytesPerRow, ptrdiff_t pixelStride, ptrdiff_t n,
                      ptrdiff_t rows, float fx, float fy, float px0, float py0, float step, float *out);

/// One row of YUV to packed RGB (full-range BT.601): luma sample x at `y[x * yStep]`, chroma for
/// pixel x at `u[(x / 2) * cStep]` and `v[(x / 2) * cStep]` (4:2:x); `u`/`v` NULL for grey. Writes
/// `channels` (3 or 4, alpha 255) bytes per pixel with red at `rIndex`, green at 1, blue at `bIndex`.
void vf_yuv_to_rgb_row(const uint8_t *y, ptrdiff_t yStep, const uint8_t *u, const uint8_t *v, ptrdiff_t cStep,
                       ptrdiff_t width, uint8_t *dst, int channels, int rIndex, int bIndex);
/// One row of packed RGB re-ordered/re-packed (3 or 4 bytes per pixel; alpha written as 255).
void vf_rgb_reorder_row(const uint8_t *src, int srcChannels, int srcR, int srcB, ptrdiff_t width,
                        uint8_t *dst, int dstChannels, int dstR, int dstB);
/// `dst[i * dstStep] = a[i * step]`, or the rounded mean of `a` and `b` when `b` is not NULL.
void vf_gather_row(const uint8_t *a, const uint8_t *b, ptrdiff_t step, ptrdiff_t n, uint8_t *dst, ptrdiff_t dstStep);
/// A plane of `bpp`-byte samples turned `rotation` (0, 90, 180, 270) degrees clockwise, then
/// mirrored left-right when `mirrored` is non-zero.
void vf_rotate_plane(const uint8_t *src, ptrdiff_t srcPitch, ptrdiff_t width, ptrdiff_t height, ptrdiff_t bpp,
                     uint8_t *dst, ptrdiff_t dstPitch, int rotation, int mirrored);
/// One plane (a byte per sample) reduced by `factor` (2, 4 or 8) each way to `dw` x `dh`: each
/// output sample the rounded mean of its factor x factor block. `acc` holds `dw * factor` values.
void vf_box_reduce(const uint8_t *src, ptrdiff_t srcPitch, int factor, uint8_t *dst, ptrdiff_t dstPitch,
                   ptrdiff_t dw, ptrdiff_t dh, uint16_t *acc);
/// A packed picture (`channels` bytes per pixel) reduced to `dw` x `dh` by area averaging.
void vf_downscale_packed(const uint8_t *src, ptrdiff_t srcPitch, ptrdiff_t width, ptrdiff_t height, int channels,
                         uint8_t *dst, ptrdiff_t dstPitch, ptrdiff_t dw, ptrdiff_t dh);

/// Copies `n` bytes with non-temporal (cache-bypassing) stores on x86-64, ending with a store
/// fence; plain `memcpy` elsewhere. For large copies into memory another process reads (the
/// shared-memory ring): on the machines measured a 4 MB frame takes ~0.24 ms instead of ~0.42 ms,
/// since the destination is not read into the cache first.
void vf_copy_streaming(void *dst, const void *src, size_t n);

/// Limited-range YUV (luma 16–235, chroma 16–240, as V4L2's `V4L2_QUANTIZATION_LIM_RANGE`) to
/// full range (0–255, JPEG's), in place over `n` bytes. `layout`: 0 every byte luma, 1 every byte
/// chroma, 2 packed 4:2:2 with luma first (YUYV), 3 packed 4:2:2 with chroma first (UYVY).
void vf_expand_limited_range(uint8_t *p, ptrdiff_t n, int layout);

/// Bytes of heap in use (glibc's mallinfo2: small blocks plus mmapped ones), or -1 where the C
/// library has no mallinfo2. The soak and the lifetime tests tell a leak from what the allocator
/// keeps for reuse (which the resident set includes) by it.
long long vf_heap_in_use_bytes(void);

/// Delta bit-planes (see deltaplanes.c): the most bytes `vf_dbp_encode` writes for a plane.
size_t vf_dbp_bound(size_t rowBytes, size_t rows);
/// Codes `rows` rows of `rowBytes` bytes (contiguous) into `dst` (at least `vf_dbp_bound` bytes);
/// returns the bytes written.
size_t vf_dbp_encode(const uint8_t *src, size_t rowBytes, size_t rows, uint8_t *dst);
/// Decodes exactly `srcLength` bytes into `rows` rows of `rowBytes` bytes; 0, or -1 when the
/// input is damaged (a width above 8, too short, or bytes left over). Never reads past `src +
/// srcLength` or writes past the plane.
int vf_dbp_decode(const uint8_t *src, size_t srcLength, size_t rowBytes, size_t rows, uint8_t *dst);

#ifdef __cplusplus
}
#endif
#endif
