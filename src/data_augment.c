/* data_augment.c - training-data augmentation on uint8 bytes (random crop with zero padding and a
 * horizontal flip), and the one function that copies a batch sample for every gather, so the CPU
 * network and the CUDA staging slots see the same bytes. data.h says what the crop and flip are. */
#include "gputrain/counter_rng.h"
#include "gputrain/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gt_augment_on(const gt_augment *a)
{
    return a && (a->pad > 0 || a->flip);
}

/* One item of --augment's list into a; 0, or -1 with its message. */
static int augment_item(const char *item, size_t len, gt_augment *a, const char *all, gt_err *e)
{
    if (len == 4 && memcmp(item, "flip", 4) == 0) {
        a->flip = 1;
        return 0;
    }
    if (len > 5 && memcmp(item, "crop:", 5) == 0) {
        size_t nd = strspn(item + 5, "0123456789");
        if (nd != len - 5 || nd > 3)
            return gt_fail(e, "--augment: '%s': crop:P takes a whole number of pixels", all);
        int p = atoi(item + 5);
        if (p < 1 || p > GT_AUGMENT_MAX_PAD)
            return gt_fail(e, "--augment: '%s': crop padding %d is out of range (1..%d)", all, p,
                           GT_AUGMENT_MAX_PAD);
        a->pad = p;
        return 0;
    }
    return gt_fail(e, "--augment: '%s' is not none or a list of crop:P and flip", all);
}

int gt_augment_parse(const char *s, gt_augment *a, gt_err *e)
{
    gt_augment out = {0, 0};
    if (strcmp(s, "none") != 0) {
        const char *p = s;
        for (;;) {
            size_t len = strcspn(p, ",");
            if (augment_item(p, len, &out, s, e))
                return -1;
            if (!p[len])
                break;
            p += len + 1;
        }
    }
    *a = out;
    return 0;
}

void gt_augment_format(const gt_augment *a, char *buf, size_t size)
{
    if (!gt_augment_on(a)) {
        snprintf(buf, size, "none");
        return;
    }
    char crop[24] = "";
    if (a->pad > 0)
        snprintf(crop, sizeof crop, "crop:%d", a->pad);
    snprintf(buf, size, "%s%s%s", crop, a->pad > 0 && a->flip ? "," : "", a->flip ? "flip" : "");
}

void gt_augment_draw(const gt_augment *a, uint64_t seed, uint32_t epoch, uint32_t sample, int *dy,
                     int *dx, int *flip)
{
    uint64_t key = gt_augment_key(seed, epoch, sample);
    uint32_t span = a && a->pad > 0 ? 2u * (uint32_t)a->pad + 1u : 1u;
    *dy = (int)(gt_counter_hash(key, 0) % span);
    *dx = (int)(gt_counter_hash(key, 1) % span);
    *flip = a && a->flip ? (int)(gt_counter_hash(key, 2) & 1u) : 0;
}

/* One channel plane (h x w) cropped at (dy, dx) of its P-padded copy, and mirrored if flip. */
static void augment_plane(const uint8_t *src, uint8_t *dst, int h, int w, int pad, int dy, int dx,
                          int flip)
{
    for (int y = 0; y < h; y++) {
        int sy = y + dy - pad;
        uint8_t *row = dst + (size_t)y * w;
        if (sy < 0 || sy >= h) {
            memset(row, 0, (size_t)w);
            continue;
        }
        const uint8_t *srow = src + (size_t)sy * w;
        for (int x = 0; x < w; x++) {
            int sx = (flip ? w - 1 - x : x) + dx - pad;
            row[x] = sx >= 0 && sx < w ? srow[sx] : 0;
        }
    }
}

void gt_data_copy_sample(const gt_dataset *ds, uint32_t id, const gt_augment *a, uint64_t seed,
                         uint32_t epoch, uint8_t *dst)
{
    size_t plane = (size_t)ds->h * ds->w, len = (size_t)ds->c * plane;
    const uint8_t *src = ds->images + (size_t)id * len;
    if (!gt_augment_on(a)) {
        memcpy(dst, src, len);
        return;
    }
    int dy, dx, flip;
    gt_augment_draw(a, seed, epoch, id, &dy, &dx, &flip);
    for (int ch = 0; ch < ds->c; ch++)
        augment_plane(src + ch * plane, dst + ch * plane, ds->h, ds->w, a->pad, dy, dx, flip);
}
