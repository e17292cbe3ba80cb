/* data_split.c - --val-split: a fraction of the training samples held out as a validation set.
 * The held-out samples are chosen by a shuffle under a fixed seed (GT_VAL_SPLIT_SEED), not the
 * run's --seed, so that every run of the same data and fraction (other seeds, a resume) holds out
 * the same samples and their val_acc compare. Both parts keep the training set's order. */
#include "gputrain/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The shuffle's seed: any fixed value; changing it changes which samples every run holds out. */
#define GT_VAL_SPLIT_SEED 0x76616c73706c6974ull /* "valsplit" */

/* Copies the samples of src whose keep flag equals want into dst (n of them), in src's order. */
static int split_copy(const gt_dataset *src, const uint8_t *held, uint8_t want, uint32_t n,
                      gt_dataset *dst)
{
    size_t bytes = (size_t)src->c * (size_t)src->h * (size_t)src->w;
    *dst = *src;
    dst->n = n;
    dst->images = gt_alloc(n * bytes);
    dst->labels = gt_alloc(n * sizeof *dst->labels);
    if (!dst->images || !dst->labels)
        return -1;
    uint32_t k = 0;
    for (uint32_t i = 0; i < src->n; i++) {
        if (held[i] != want)
            continue;
        memcpy(dst->images + (size_t)k * bytes, src->images + (size_t)i * bytes, bytes);
        dst->labels[k++] = src->labels[i];
    }
    return 0;
}

int gt_data_val_check(uint32_t n, double frac, gt_err *e)
{
    uint32_t nval = (uint32_t)llround(frac * (double)n);
    if (frac > 0 && (nval < 1 || nval >= n))
        return gt_fail(e, "--val-split %g: holds out %u of the %u training samples; leave at "
                          "least one on each side", frac, nval, n);
    return 0;
}

int gt_data_split_val(gt_data *d, double frac, gt_err *e)
{
    uint32_t n = d->train.n;
    uint32_t nval = (uint32_t)llround(frac * (double)n);
    if (frac <= 0)
        return 0;
    if (gt_data_val_check(n, frac, e) != 0)
        return -1;
    uint32_t *perm = malloc((size_t)n * sizeof *perm);
    uint8_t *held = calloc(n, 1);
    gt_dataset train = {0}, val = {0};
    int rc = -1;
    if (perm && held) {
        gt_permutation(perm, n, GT_VAL_SPLIT_SEED, 0);
        for (uint32_t i = 0; i < nval; i++)
            held[perm[i]] = 1;
        rc = split_copy(&d->train, held, 1, nval, &val) == 0 &&
                     split_copy(&d->train, held, 0, n - nval, &train) == 0 ? 0 : -1;
    }
    free(perm);
    free(held);
    if (rc != 0) {
        gt_free(train.images);
        gt_free(train.labels);
        gt_free(val.images);
        gt_free(val.labels);
        return gt_fail(e, "--val-split: out of memory for %u training samples", n);
    }
    gt_free(d->train.images);
    gt_free(d->train.labels);
    d->train = train;
    d->val = val;
    return 0;
}
