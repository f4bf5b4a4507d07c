// See ViewfinderJPEG.h. The libjpeg error handler longjmps back into vf_jpeg_packed_encode, which
// is why this lives in C (Swift cannot use setjmp).
#include "ViewfinderJPEG.h"
#include "ViewfinderKernels.h"
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

struct vf_error_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

struct vf_dest_mgr {
    struct jpeg_destination_mgr pub;
    size_t capacity;
    int overflow;
};

struct vf_jpeg_packed {
    struct jpeg_compress_struct cinfo;
    struct vf_error_mgr err;
    struct vf_dest_mgr dest;
    // Strip buffers: 8 rows of Y (paddedWidth) and of U and V (paddedWidth / 2), 32-byte aligned rows.
    uint8_t *strip;
    size_t stripCapacity;
};

static void vf_error_exit(j_common_ptr cinfo) {
    struct vf_error_mgr *err = (struct vf_error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void vf_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void vf_init_destination(j_compress_ptr cinfo) { (void)cinfo; }

// The buffer is the caller's whole output: running out of it is an error (it cannot happen with
// tjBufSize's worst case).
static boolean vf_empty_output_buffer(j_compress_ptr cinfo) {
    struct vf_dest_mgr *d = (struct vf_dest_mgr *)cinfo->dest;
    d->overflow = 1;
    ERREXIT(cinfo, JERR_BUFFER_SIZE);
    return FALSE;
}

static void vf_term_destination(j_compress_ptr cinfo) { (void)cinfo; }

vf_jpeg_packed *vf_jpeg_packed_create(void) {
    vf_jpeg_packed *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->cinfo.err = jpeg_std_error(&e->err.pub);
    e->err.pub.error_exit = vf_error_exit;
    e->err.pub.output_message = vf_output_message;
    if (setjmp(e->err.jump)) { free(e); return NULL; }
    jpeg_create_compress(&e->cinfo);
    e->dest.pub.init_destination = vf_init_destination;
    e->dest.pub.empty_output_buffer = vf_empty_output_buffer;
    e->dest.pub.term_destination = vf_term_destination;
    e->cinfo.dest = &e->dest.pub;
    return e;
}

void vf_jpeg_packed_destroy(vf_jpeg_packed *e) {
    if (!e) return;
    jpeg_destroy_compress(&e->cinfo);
    free(e->strip);
    free(e);
}

static void copy_message(const char *m, char *message, size_t cap) {
    if (!message || cap == 0) return;
    size_t n = strlen(m);
    if (n >= cap) n = cap - 1;
    memcpy(message, m, n);
    message[n] = 0;
}

int vf_jpeg_packed_encode(vf_jpeg_packed *e, const uint8_t *src, ptrdiff_t bytesPerRow, int width, int height,
                          int yOffset, int uOffset, int quality, uint8_t *out, size_t capacity, size_t *size,
                          char *message, size_t messageCapacity) {
    if (width <= 0 || height <= 0 || (width & 1) || quality < 1 || quality > 100 || bytesPerRow < 2 * (ptrdiff_t)width) {
        copy_message("invalid size, stride or quality for packed 4:2:2", message, messageCapacity);
        return -1;
    }
    // MCU: 16x8 for 4:2:2. Rows are padded to whole MCUs by repeating the last column and row,
    // as TurboJPEG does for sizes that are not multiples of the MCU.
    const int pw = (width + 15) & ~15, pcw = pw / 2;
    const int cw = width / 2;
    const size_t yRow = (size_t)pw, cRow = (size_t)pcw;
    const size_t need = 8 * yRow + 16 * cRow + 64;
    if (need > e->stripCapacity) {
        free(e->strip);
        e->strip = aligned_alloc(64, (need + 63) & ~(size_t)63);
        if (!e->strip) { e->stripCapacity = 0; copy_message("out of memory for the strip buffers", message, messageCapacity); return -1; }
        e->stripCapacity = need;
    }
    JSAMPROW yRows[8], uRows[8], vRows[8];
    for (int j = 0; j < 8; j++) {
        yRows[j] = e->strip + j * yRow;
        uRows[j] = e->strip + 8 * yRow + j * cRow;
        vRows[j] = e->strip + 8 * yRow + 8 * cRow + j * cRow;
    }
    JSAMPARRAY planes[3] = { yRows, uRows, vRows };

    j_compress_ptr c = &e->cinfo;
    e->dest.pub.next_output_byte = out;
    e->dest.pub.free_in_buffer = capacity;
    e->dest.capacity = capacity;
    e->dest.overflow = 0;
    if (setjmp(e->err.jump)) {
        copy_message(e->err.message, message, messageCapacity);
        jpeg_abort_compress(c);
        return -1;
    }
    // TurboJPEG 2.1's setCompDefaults for TJSAMP_422, then raw data in.
    c->image_width = (JDIMENSION)width;
    c->image_height = (JDIMENSION)height;
    c->in_color_space = JCS_RGB;
    c->input_components = 3;
    jpeg_set_defaults(c);
    jpeg_set_quality(c, quality, TRUE);
    c->dct_method = quality >= 96 ? JDCT_ISLOW : JDCT_FASTEST;
    jpeg_set_colorspace(c, JCS_YCbCr);
    c->comp_info[0].h_samp_factor = 2; c->comp_info[0].v_samp_factor = 1;
    c->comp_info[1].h_samp_factor = 1; c->comp_info[1].v_samp_factor = 1;
    c->comp_info[2].h_samp_factor = 1; c->comp_info[2].v_samp_factor = 1;
    c->raw_data_in = TRUE;
    jpeg_start_compress(c, TRUE);

    for (int row = 0; row < height; row += 8) {
        int rows = height - row < 8 ? height - row : 8;
        vf_split_packed422(src + (ptrdiff_t)row * bytesPerRow, bytesPerRow, width, rows, yOffset, uOffset,
                           e->strip, e->strip + 8 * yRow, e->strip + 8 * yRow + 8 * cRow);
        // vf_split_packed422 writes rows packed (width, width/2 apart): spread them to the padded
        // strides from the last row down (in place), then pad columns and rows.
        if (pw != width) {
            for (int j = rows - 1; j >= 0; j--) {
                memmove(yRows[j], e->strip + (size_t)j * width, (size_t)width);
                memmove(uRows[j], e->strip + 8 * yRow + (size_t)j * cw, (size_t)cw);
                memmove(vRows[j], e->strip + 8 * yRow + 8 * cRow + (size_t)j * cw, (size_t)cw);
            }
            for (int j = 0; j < rows; j++) {
                memset(yRows[j] + width, yRows[j][width - 1], (size_t)(pw - width));
                memset(uRows[j] + cw, uRows[j][cw - 1], (size_t)(pcw - cw));
                memset(vRows[j] + cw, vRows[j][cw - 1], (size_t)(pcw - cw));
            }
        }
        for (int j = rows; j < 8; j++) {
            memcpy(yRows[j], yRows[rows - 1], yRow);
            memcpy(uRows[j], uRows[rows - 1], cRow);
            memcpy(vRows[j], vRows[rows - 1], cRow);
        }
        jpeg_write_raw_data(c, planes, 8);
    }
    jpeg_finish_compress(c);
    *size = capacity - e->dest.pub.free_in_buffer;
    return 0;
}
