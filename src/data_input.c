/* data_input.c - what happens to a sample on its way into the network: training-data augmentation
 * on uint8 bytes (random crop with zero padding and a horizontal flip), the one function that
 * copies a batch sample for every gather (so the CPU network and the CUDA staging slots see the
 * same bytes), and the per-channel normalisation's text and statistics (--normalize). data.h says
 * what the crop and flip are, model.h what the normalisation is. */
#include "gputrain/counter_rng.h"
#include "gputrain/data.h"

#include <math.h>
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
    gt_augment_offsets(gt_augment_key(seed, epoch, sample), a ? a->pad : 0, a && a->flip, dy, dx,
                       flip);
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

/* One comma list of count reals into v; -1 where it is not one. */
static int norm_list(const char *s, size_t len, float *v, int *count)
{
    int n = 0;
    const char *p = s, *end = s + len;
    while (p < end) {
        if (n == GT_NORM_MAX_C)
            return -1;
        char *stop;
        double x = strtod(p, &stop);
        if (stop == p || stop > end || (stop < end && *stop != ',') || !isfinite(x) ||
            fabs(x) > 1e6)
            return -1;
        v[n++] = (float)x;
        p = stop < end ? stop + 1 : stop;
        if (stop < end && p == end)
            return -1; /* a trailing comma */
    }
    *count = n;
    return n > 0 ? 0 : -1;
}

int gt_norm_parse(const char *what, const char *s, gt_input_norm *out, int *count, gt_err *e)
{
    gt_input_norm n = {0};
    const char *slash = strchr(s, '/');
    int nm = 0, ns = 0;
    if (!slash || norm_list(s, (size_t)(slash - s), n.mean, &nm) ||
        norm_list(slash + 1, strlen(slash + 1), n.std, &ns))
        return gt_fail(e, "%s: '%.200s' is not M1,M2,.../S1,S2,... (1 to %d reals each)", what, s,
                       GT_NORM_MAX_C);
    if (nm != ns)
        return gt_fail(e, "%s: '%.200s' has %d means and %d standard deviations", what, s, nm, ns);
    for (int i = 0; i < ns; i++)
        if (!(n.std[i] > 0))
            return gt_fail(e, "%s: '%.200s': standard deviation %g is not positive", what, s,
                           (double)n.std[i]);
    n.on = 1;
    *out = n;
    *count = nm;
    return 0;
}

int gt_norm_equal(const gt_input_norm *a, const gt_input_norm *b, int count)
{
    if (!a->on || !b->on)
        return !a->on && !b->on;
    for (int i = 0; i < count && i < GT_NORM_MAX_C; i++)
        if (a->mean[i] != b->mean[i] || a->std[i] != b->std[i])
            return 0;
    return 1;
}

void gt_norm_format(const gt_input_norm *n, int count, char *buf, size_t size)
{
    size_t len = 0;
    if (!n->on || count < 1) {
        snprintf(buf, size, "none");
        return;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < count && len < size; i++)
            len += (size_t)snprintf(buf + len, size - len, "%s%.9g", i ? "," : pass ? "/" : "",
                                    (double)(pass ? n->std[i] : n->mean[i]));
}

int gt_data_channel_stats(const gt_dataset *ds, gt_input_norm *out, gt_err *e)
{
    if (ds->c < 1 || ds->c > GT_NORM_MAX_C)
        return gt_fail(e, "--normalize: the data has %d channels (at most %d)", ds->c,
                       GT_NORM_MAX_C);
    if (ds->n == 0)
        return gt_fail(e, "--normalize auto: the training split is empty");
    gt_input_norm n = {0};
    size_t plane = (size_t)ds->h * ds->w;
    for (int ch = 0; ch < ds->c; ch++) {
        uint64_t s1 = 0, s2 = 0; /* exact: at most 2^33 samples' bytes, each below 2^16 squared */
        for (uint32_t i = 0; i < ds->n; i++) {
            const uint8_t *p = ds->images + ((size_t)i * ds->c + ch) * plane;
            uint64_t a = 0, b = 0;
            for (size_t j = 0; j < plane; j++)
                a += p[j], b += (uint32_t)p[j] * p[j];
            s1 += a, s2 += b;
        }
        double count = (double)ds->n * (double)plane;
        double mean = (double)s1 / count, var = (double)s2 / count - mean * mean;
        n.mean[ch] = (float)(mean / 255.0);
        /* A constant channel keeps std 1: its values all become 0. */
        n.std[ch] = var > 1e-12 ? (float)(sqrt(var) / 255.0) : 1.0f;
    }
    n.on = 1;
    *out = n;
    return 0;
}
