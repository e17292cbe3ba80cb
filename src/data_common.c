/* data_common.c - what every data format's loader (data.c's folders and IDX files, data_cifar.c,
 * data_synth.c) shares with the dispatcher in data.c: the labels' CRC-32 of a dataset's
 * fingerprint and the class-name table. Kept apart so that the format loaders depend on it and
 * not on the dispatcher that calls them. */
#include "gputrain/data.h"

#include <string.h>

uint32_t gt_labels_crc(const uint16_t *labels, uint32_t n, int nclasses)
{
    uint8_t buf[4096];
    uint32_t crc = 0;
    int wide = nclasses > 256;
    size_t per = wide ? 2 : 1, chunk = sizeof buf / per;
    for (uint32_t at = 0; at < n; at += (uint32_t)chunk) {
        size_t m = n - at < chunk ? n - at : chunk;
        for (size_t i = 0; i < m; i++) {
            buf[i * per] = (uint8_t)labels[at + i];
            if (wide)
                buf[i * per + 1] = (uint8_t)(labels[at + i] >> 8);
        }
        crc = gt_crc32(crc, buf, m * per);
    }
    return crc;
}

uint64_t gt_labels_crc_len(uint32_t n, int nclasses)
{
    return (uint64_t)n * (nclasses > 256 ? 2u : 1u);
}

int gt_data_alloc_names(gt_data *d, int n, gt_err *e)
{
    gt_free(d->class_names);
    d->class_names = n > 0 ? gt_alloc((size_t)n * sizeof *d->class_names) : NULL;
    if (!d->class_names)
        return gt_fail(e, "%s: out of memory for %d class names", d->dir, n);
    memset(d->class_names, 0, (size_t)n * sizeof *d->class_names);
    return 0;
}
