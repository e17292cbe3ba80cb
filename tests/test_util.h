/* test_util.h - the few helpers every C test uses: checks that report file and line, the skip
 * exit code ctest understands, and the location of the Fashion-MNIST files. */
#ifndef GT_TEST_UTIL_H
#define GT_TEST_UTIL_H

#include "gputrain/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GT_SKIP 77

static int gt_test_failures __attribute__((unused));

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);         \
            gt_test_failures++;                                                              \
        }                                                                                    \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                 \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            gt_test_failures++;                                                              \
        }                                                                                    \
    } while (0)

/* |a - b| <= tol * max(1, |a|, |b|) */
#define CHECK_CLOSE(a, b, tol)                                                               \
    do {                                                                                     \
        double a_ = (a), b_ = (b), s_ = fmax(1.0, fmax(fabs(a_), fabs(b_)));                \
        if (!(fabs(a_ - b_) <= (tol) * s_)) {                                                \
            fprintf(stderr, "%s:%d: %s = %.9g vs %s = %.9g (tol %g)\n", __FILE__, __LINE__, \
                    #a, a_, #b, b_, (double)(tol));                                          \
            gt_test_failures++;                                                              \
        }                                                                                    \
    } while (0)

#define TEST_DONE()                                                                          \
    do {                                                                                     \
        if (gt_test_failures) {                                                              \
            fprintf(stderr, "%d check(s) failed\n", gt_test_failures);                       \
            return 1;                                                                        \
        }                                                                                    \
        printf("ok\n");                                                                      \
        return 0;                                                                            \
    } while (0)

/* The Fashion-MNIST folder, or NULL when it is not on this machine. */
static inline const char *gt_test_fmnist_dir(void)
{
    static const char *dirs[] = {"datasets/fashion-mnist", "/usr/share/datasets/fashion-mnist"};
    static char buf[1024];
    const char *src = getenv("GT_SOURCE_DIR");
    const char *env = getenv("GT_DATA");
    if (env && *env)
        return env;
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        if (dirs[i][0] != '/' && src)
            snprintf(buf, sizeof buf, "%s/%s/train-images-idx3-ubyte.gz", src, dirs[i]);
        else
            snprintf(buf, sizeof buf, "%s/train-images-idx3-ubyte.gz", dirs[i]);
        FILE *f = fopen(buf, "rb");
        if (f) {
            fclose(f);
            *strrchr(buf, '/') = 0;
            return buf;
        }
    }
    return NULL;
}

/* The mean loss of each of the first `max` clocks of epoch 1 in a --log-steps log: a clock's
 * `shares` step lines (one per share) are averaged. Returns how many leading clocks had all their
 * shares logged. */
static inline int gt_test_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline int gt_test_step_losses(const char *path, int shares, double *out, int max)
{
    enum { MAX_STEPS = 256, MAX_SHARES = 64 };
    FILE *f = fopen(path, "r");
    char line[512];
    static double loss_of[MAX_STEPS][MAX_SHARES];
    int cnt[MAX_STEPS] = {0}, n = 0;
    if (max > MAX_STEPS)
        max = MAX_STEPS;
    while (f && fgets(line, sizeof line, f)) {
        unsigned step, epoch;
        double loss;
        const char *s = strstr(line, "\"epoch_step\":"), *l = strstr(line, "\"loss\":");
        const char *ep = strstr(line, "\"epoch\":");
        if (!strstr(line, "\"type\":\"step\"") || !s || !l || !ep)
            continue;
        if (sscanf(s, "\"epoch_step\":%u", &step) == 1 && sscanf(l, "\"loss\":%lf", &loss) == 1 &&
            sscanf(ep, "\"epoch\":%u", &epoch) == 1 && epoch == 1 && step < (unsigned)max &&
            cnt[step] < MAX_SHARES)
            loss_of[step][cnt[step]++] = loss;
    }
    if (f)
        fclose(f);
    /* Summed in ascending order, whatever order the workers logged in: the same bits each time
     * the same losses are logged. */
    for (; n < max && cnt[n] == shares; n++) {
        qsort(loss_of[n], (size_t)cnt[n], sizeof(double), gt_test_cmp_double);
        double sum = 0;
        for (int k = 0; k < cnt[n]; k++)
            sum += loss_of[n][k];
        out[n] = sum / shares;
    }
    return n;
}

/* n random 1x28x28 samples with labels 0..9, never all zeros. */
static inline void gt_test_random_dataset(gt_dataset *ds, gt_rng *r, uint32_t n)
{
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    ds->c = 1;
    ds->h = ds->w = 28;
    ds->nclasses = 10;
    ds->images = gt_alloc((size_t)n * 28 * 28);
    ds->labels = gt_alloc(n * sizeof *ds->labels);
    for (size_t i = 0; i < (size_t)n * 28 * 28; i++)
        ds->images[i] = (uint8_t)gt_rng_below(r, 256);
    for (uint32_t i = 0; i < n; i++)
        ds->labels[i] = (uint16_t)gt_rng_below(r, 10);
}

#endif
