/* image_resize.h - an image as stb_image decodes it (H x W x C, channels interleaved) into the
 * layout datasets keep (C x H x W), resized where the sizes differ: how --image-size gives every
 * image of a folder, and every image predict reads, one size. */
#ifndef GT_IMAGE_RESIZE_H
#define GT_IMAGE_RESIZE_H

#include "gputrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* px is w x h with c channels; dst gets c planes of out_w x out_h. Resizing is stb_image_resize's
 * (Mitchell filter down, Catmull-Rom up, edges clamped) on the byte values, as PIL and
 * torchvision resize; equal sizes copy exactly. Fails only out of memory (path names the image). */
int gt_image_to_chw(const char *path, const uint8_t *px, int w, int h, int c, uint8_t *dst,
                    int out_w, int out_h, gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
