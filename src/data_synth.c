/* data_synth.c - synthetic data for throughput runs: --data synthetic:CxHxW:K[:N].
 *
 * Each class has a fixed random template, smooth at the scale of 4x4 pixel blocks so that
 * convolutions and pooling keep it; a sample is its class's template plus noise, so a model
 * learns it (accuracy rises above chance) yet it costs no disk. Everything follows from a fixed
 * seed: the same spec gives the same bytes (and fingerprint) on every machine, and the train
 * split's first samples do not depend on N, nor does the test split.
 *
 * Generation must not slow start-up: the noise is one table of random bytes, and a sample adds a
 * window of it, starting at a random offset, to its template: a byte-wise add that compilers
 * vectorise, about as fast as the memory is written. */
#include "gputrain/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNTH_SEED 0x5eed5eedc1f4a7e1ull
#define SYNTH_TRAIN 50000u
#define SYNTH_TEST 10000u
#define SYNTH_MAX_CHANNELS 64
#define SYNTH_BLOCK 4                  /* template pixels share one value per 4x4 block */
#define SYNTH_NOISE ((size_t)1 << 20)  /* distinct noise offsets */

typedef struct synth_spec {
    int c, h, w, k;
    uint32_t ntrain;
} synth_spec;

int gt_synth_is(const char *spec)
{
    return spec && strncmp(spec, GT_SYNTH_PREFIX, strlen(GT_SYNTH_PREFIX)) == 0;
}

/* The numbers of "CxHxW:K" or "CxHxW:K:N" into v: how many (4 or 5), or -1 where s is neither. */
static int synth_fields(const char *s, unsigned long long *v)
{
    static const char seps[] = "xx::";
    for (int f = 0; f < 5; f++) {
        size_t n = strspn(s, "0123456789");
        if (n == 0)
            return -1;
        v[f] = strtoull(s, NULL, 10); /* saturates: too large, then out of range */
        s += n;
        if (*s == '\0')
            return f >= 3 ? f + 1 : -1;
        if (f == 4 || *s++ != seps[f])
            return -1;
    }
    return -1;
}

static int synth_parse(const char *spec, synth_spec *out, gt_err *e)
{
    unsigned long long v[5] = {0, 0, 0, 0, SYNTH_TRAIN};
    if (synth_fields(spec + strlen(GT_SYNTH_PREFIX), v) < 0)
        return gt_fail(e, "--data: '%s' is not synthetic:CxHxW:K or synthetic:CxHxW:K:N", spec);
    if (v[0] < 1 || v[0] > SYNTH_MAX_CHANNELS || v[1] < 1 || v[1] > GT_DATA_MAX_SIDE || v[2] < 1 ||
        v[2] > GT_DATA_MAX_SIDE)
        return gt_fail(e, "--data %s: image size %llux%llux%llu is out of range (channels 1..%d, "
                       "sides 1..%u)", spec, v[0], v[1], v[2], SYNTH_MAX_CHANNELS, GT_DATA_MAX_SIDE);
    if (v[3] < 2 || v[3] > GT_MAX_CLASSES)
        return gt_fail(e, "--data %s: K is %llu classes (expected 2..%d)", spec, v[3], GT_MAX_CLASSES);
    unsigned long long per = v[0] * v[1] * v[2];
    if (v[4] < 1 || v[4] > GT_DATA_MAX_SAMPLES ||
        (v[4] > SYNTH_TEST ? v[4] : SYNTH_TEST) * per >= GT_DATA_MAX_BYTES)
        return gt_fail(e, "--data %s: %llu training and %u test samples of %llu bytes (1..%u "
                       "samples, under 8 GiB a split)", spec, v[4], SYNTH_TEST, per,
                       GT_DATA_MAX_SAMPLES);
    *out = (synth_spec){(int)v[0], (int)v[1], (int)v[2], (int)v[3], (uint32_t)v[4]};
    return 0;
}

int gt_synth_check(const char *spec, gt_err *e)
{
    synth_spec s;
    return gt_synth_is(spec) ? synth_parse(spec, &s, e) : 0;
}

int gt_synth_probe(const char *spec, int *c, int *h, int *w, int *nclasses)
{
    synth_spec s;
    if (!gt_synth_is(spec) || synth_parse(spec, &s, NULL) != 0)
        return -1;
    *c = s.c, *h = s.h, *w = s.w, *nclasses = s.k;
    return 0;
}

/* One template per class and channel, values in [64, 192), one per SYNTH_BLOCK x SYNTH_BLOCK
 * block: drawn at each block's first pixel, copied to the rest of its row, then rows copied. */
static void synth_templates(const synth_spec *s, gt_rng *r, uint8_t *t)
{
    size_t w = (size_t)s->w;
    for (int k = 0; k < s->k * s->c; k++, t += (size_t)s->h * w)
        for (int y = 0; y < s->h; y++) {
            uint8_t *row = t + y * w;
            if (y % SYNTH_BLOCK != 0) {
                memcpy(row, row - w, w);
                continue;
            }
            for (size_t x = 0; x < w; x++)
                row[x] = x % SYNTH_BLOCK ? row[x - 1] : (uint8_t)(64 + gt_rng_below(r, 128));
        }
}

/* n samples: labels and noise offsets from their own stream, seeded by which split it is. */
static int synth_split(const synth_spec *s, const uint8_t *templates, const uint8_t *noise,
                       uint32_t n, uint64_t stream, gt_dataset *ds, gt_err *e)
{
    size_t per = (size_t)s->c * s->h * s->w;
    ds->n = n;
    ds->c = s->c, ds->h = s->h, ds->w = s->w;
    ds->nclasses = s->k;
    ds->images = gt_alloc(n * per);
    ds->labels = gt_alloc(n * sizeof *ds->labels);
    if (!ds->images || !ds->labels)
        return gt_fail(e, "synthetic data: out of memory for %zu bytes", n * per);
    gt_rng r;
    gt_rng_seed(&r, SYNTH_SEED + stream);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = gt_rng_below(&r, (uint32_t)s->k);
        const uint8_t *t = templates + k * per, *z = noise + gt_rng_below(&r, SYNTH_NOISE);
        uint8_t *dst = ds->images + i * per;
        for (size_t j = 0; j < per; j++)
            dst[j] = (uint8_t)(t[j] + z[j]);
        ds->labels[i] = (uint16_t)k;
    }
    ds->images_crc = gt_crc32(0, ds->images, n * per);
    ds->labels_crc = gt_labels_crc(ds->labels, n, s->k);
    return 0;
}

int gt_synth_load(const char *spec, gt_data *out, gt_err *e)
{
    synth_spec s;
    if (synth_parse(spec, &s, e) != 0)
        return -1;
    size_t per = (size_t)s.c * s.h * s.w;
    uint8_t *templates = malloc(s.k * per), *noise = malloc(SYNTH_NOISE + per);
    int rc = -1;
    if (!templates || !noise) {
        gt_fail(e, "--data %s: out of memory", spec);
    } else {
        gt_rng r;
        gt_rng_seed(&r, SYNTH_SEED);
        synth_templates(&s, &r, templates);
        for (size_t j = 0; j < SYNTH_NOISE + per; j += 8) { /* noise in [-64, 64), mod 256 */
            uint64_t v = gt_rng_u64(&r);
            for (size_t b = 0; b < 8 && j + b < SYNTH_NOISE + per; b++)
                noise[j + b] = (uint8_t)((v >> (8 * b)) % 128 - 64);
        }
        rc = synth_split(&s, templates, noise, s.ntrain, 1, &out->train, e) == 0 &&
                     synth_split(&s, templates, noise, SYNTH_TEST, 2, &out->test, e) == 0
                 ? 0 : -1;
    }
    if (rc == 0)
        rc = gt_data_alloc_names(out, s.k, e);
    for (int k = 0; rc == 0 && k < s.k; k++)
        snprintf(out->class_names[k], sizeof out->class_names[k], "%d", k);
    free(templates);
    free(noise);
    return rc;
}
