/* image_resize.c - decoded images into the dataset layout, resized with stb_image_resize where
 * asked (see image_resize.h). */
#include "gputrain/image_resize.h"

#include <stdlib.h>

#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb_image_resize.h>

int gt_image_to_chw(const char *path, const uint8_t *px, int w, int h, int c, uint8_t *dst,
                    int out_w, int out_h, gt_err *e)
{
    uint8_t *sized = NULL;
    if (w != out_w || h != out_h) {
        sized = malloc((size_t)out_w * out_h * c);
        if (!sized || !stbir_resize_uint8(px, w, h, 0, sized, out_w, out_h, 0, c)) {
            free(sized);
            return gt_fail(e, "%s: out of memory resizing %dx%d to %dx%d", path, w, h, out_w,
                           out_h);
        }
        px = sized;
    }
    size_t plane = (size_t)out_w * out_h;
    for (int ch = 0; ch < c; ch++)
        for (size_t i = 0; i < plane; i++)
            dst[ch * plane + i] = px[i * c + ch];
    free(sized);
    return 0;
}
