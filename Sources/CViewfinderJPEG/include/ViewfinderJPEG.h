#ifndef VIEWFINDER_JPEG_H
#define VIEWFINDER_JPEG_H
// JPEG encoding of packed 4:2:2 frames (YUYV, UYVY) straight from the packed rows, through
// libjpeg-turbo's raw-data interface: each 8-row strip is split into small Y, U and V row buffers
// that stay in the cache and handed to jpeg_write_raw_data, so no full-frame planar copy is made.
// The settings are TurboJPEG 2.1's tjCompressFromYUVPlanes' (quality, fast DCT below q96, JFIF,
// standard Huffman tables), so the output is byte-identical to a split followed by that call.
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// An encoder: a libjpeg compressor, its error handler and the strip buffers. Not thread-safe.
typedef struct vf_jpeg_packed vf_jpeg_packed;

/// A new encoder, or NULL when out of memory.
vf_jpeg_packed *vf_jpeg_packed_create(void);
void vf_jpeg_packed_destroy(vf_jpeg_packed *e);

/// Encodes `height` rows of packed 4:2:2 (`width` even, rows `bytesPerRow` apart) as a 4:2:2 JPEG
/// of `quality` (1–100) into `out` (`capacity` bytes; tjBufSize(width, height, TJSAMP_422) always
/// suffices). `yOffset` 0 and `uOffset` 1 for YUYV, 1 and 0 for UYVY. Returns 0 and sets `*size`,
/// or -1 with the reason in `message` (`messageCapacity` bytes, NUL-terminated).
int vf_jpeg_packed_encode(vf_jpeg_packed *e, const uint8_t *src, ptrdiff_t bytesPerRow, int width, int height,
                          int yOffset, int uOffset, int quality, uint8_t *out, size_t capacity, size_t *size,
                          char *message, size_t messageCapacity);

#ifdef __cplusplus
}
#endif
#endif
