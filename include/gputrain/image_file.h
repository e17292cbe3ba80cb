/* image_file.h - reading one image file (of a folder dataset, or for predict) so that damage is
 * found before it is decoded.
 *
 * gputrain reads PNG and JPEG; a file of any other format (BMP, GIF, TIFF, WebP, ...) is refused
 * with a line saying what it is. stb_image decodes, but it ignores PNG chunk CRCs and the zlib
 * Adler-32, decodes a JPEG cut short as if it were whole, and decodes whatever size the data
 * claims. So the structure is checked first. A PNG: the signature, IHDR first with a width and
 * height within max_side, every chunk's type and CRC-32, the file no larger than its image can
 * need, and the IDAT zlib stream inflated once into a small scratch buffer (nothing as large as
 * the image is allocated) to check its Adler-32 and that it holds exactly the bytes the IHDR size
 * implies. A JPEG (which carries no checksum): every segment within the file, one frame header
 * of a coding stb_image decodes (baseline, extended or progressive Huffman, 8-bit, 1, 3 or 4
 * components) with a size within max_side, each scan ending at a marker, and the end-of-image
 * marker present (a truncated file lacks it). */
#ifndef GT_IMAGE_FILE_H
#define GT_IMAGE_FILE_H

#include "gputrain/common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_image {
    unsigned char *bytes; /* the whole file, checked */
    size_t len;
    const char *format;   /* "PNG" or "JPEG" */
    int w, h;             /* from the header */
    int channels;         /* what it decodes to: 1 (grey, grey + alpha) or 3 (colour; alpha dropped) */
} gt_image;

/* Reads path (a regular file, opened without blocking) into im after the checks above; messages
 * name the file. gt_image_close frees it. */
int gt_image_open(const char *path, unsigned max_side, gt_image *im, gt_err *e);

/* Decodes im into dst as c x out_h x out_w bytes (c = 1 or 3: colour to grey or grey to colour as
 * stb_image converts), resized by gt_image_to_chw (image_resize.h) where its size differs. */
int gt_image_decode(const char *path, const gt_image *im, int c, uint8_t *dst, int out_w,
                    int out_h, gt_err *e);

void gt_image_close(gt_image *im);

#ifdef __cplusplus
}
#endif
#endif
