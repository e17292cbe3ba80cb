/* image_file.h - reading one image file of a folder dataset so that damage is found before it is
 * decoded.
 *
 * stb_image decodes (it reads PNG, JPEG, BMP, ... with one call and no dependencies), but it
 * ignores PNG chunk CRCs and the zlib Adler-32, and decodes whatever size the data claims. So a
 * PNG is checked first: the signature, IHDR first with a width and height within max_side, every
 * chunk's CRC-32, the file no larger than its image can need, and the IDAT zlib stream inflated
 * once into a small scratch buffer (nothing as large as the image is allocated) to check its
 * Adler-32 and that it holds exactly the bytes the IHDR size implies. Other formats get the size
 * bound only (JPEG and BMP carry no checksum). */
#ifndef GT_IMAGE_FILE_H
#define GT_IMAGE_FILE_H

#include "gputrain/common.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads path (a regular file, opened without blocking) into *buf (malloc'd, *len bytes) after
 * the checks above; messages name the file. */
int gt_image_read(const char *path, unsigned max_side, unsigned char **buf, size_t *len, gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
