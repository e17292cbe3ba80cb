/* data_cifar.c - the CIFAR-10 and CIFAR-100 binary formats, read into memory as uint8.
 *
 * A record is its label byte(s) and 3072 pixel bytes: the red, green and blue 32x32 planes, each
 * row-major, which is already the C x H x W layout the dataset keeps, so pixels are copied as they
 * come. CIFAR-10 has data_batch_1.bin .. data_batch_5.bin and test_batch.bin (one label byte,
 * class names in batches.meta.txt); CIFAR-100 has train.bin and test.bin (a coarse and a fine label
 * byte: the fine label is kept, class names in fine_label_names.txt).
 *
 * Every file is treated as hostile: its size must be a whole, nonzero number of records within the
 * limits of data.h before anything is allocated, the bytes read must be the bytes its size said
 * (a file cut short while it is read is refused), and every label must name a class. */
#include "gputrain/data.h"

#include "gputrain/atomic_file.h"
#include "gputrain/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_TRAIN_FILES 5
#define CIFAR_CHUNK 256          /* records per read */
#define CIFAR100_COARSE 20       /* CIFAR-100's coarse classes, checked though not kept */
#define CIFAR_NAMES_MAX (64u << 10) /* bytes of a class-names file */

/* What tells the two variants apart: the files, the label bytes and the class count. */
typedef struct cifar_kind {
    const char *train[CIFAR_TRAIN_FILES];
    int ntrain;
    const char *test, *names;
    int label_bytes, nclasses;
} cifar_kind;

static const cifar_kind cifar10 = {
    {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
     "data_batch_5.bin"}, 5, "test_batch.bin", "batches.meta.txt", 1, 10};
static const cifar_kind cifar100 = {{"train.bin"}, 1, "test.bin", "fine_label_names.txt", 2, 100};

static int cifar_path(char *dst, const char *dir, const char *name, gt_err *e)
{
    int len = snprintf(dst, GT_PATHLEN, "%s/%s", dir, name);
    if (len < 0 || len >= GT_PATHLEN)
        return gt_fail(e, "%s/%s: path longer than %d bytes", dir, name, GT_PATHLEN - 1);
    return 0;
}

static int cifar_exists(const char *dir, const char *name)
{
    char path[GT_PATHLEN];
    struct stat st;
    return cifar_path(path, dir, name, NULL) == 0 && stat(path, &st) == 0;
}

int gt_cifar_detect(const char *dir)
{
    if (cifar_exists(dir, cifar10.train[0]))
        return 10;
    return cifar_exists(dir, cifar100.train[0]) ? 100 : 0;
}

/* Reads n bytes at the file's current position: 0, or -1 with e naming what came short. */
static int cifar_read(int fd, const char *path, uint8_t *buf, size_t n, uint64_t at, gt_err *e)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return gt_fail(e, "%s: read error: %s", path, strerror(errno));
        if (r == 0)
            return gt_fail(e, "%s: truncated while read (ends at byte %llu)", path,
                           (unsigned long long)(at + got));
        got += (size_t)r;
    }
    return 0;
}

/* Copies the records of buf (n of them, read at record first) into ds, checking each label. */
static int cifar_unpack(const cifar_kind *k, const char *path, const uint8_t *buf, uint32_t n,
                        uint32_t first, gt_dataset *ds, uint32_t into, gt_err *e)
{
    size_t rec = (size_t)k->label_bytes + CIFAR_PIXELS;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *r = buf + i * rec;
        uint8_t label = r[k->label_bytes - 1];
        if (k->label_bytes == 2 && r[0] >= CIFAR100_COARSE)
            return gt_fail(e, "%s: record %u has coarse label %u (expected 0..%d)", path,
                           first + i, r[0], CIFAR100_COARSE - 1);
        if (label >= k->nclasses)
            return gt_fail(e, "%s: record %u has label %u (expected 0..%d)", path, first + i,
                           label, k->nclasses - 1);
        ds->labels[into + i] = label;
        memcpy(ds->images + (size_t)(into + i) * CIFAR_PIXELS, r + k->label_bytes, CIFAR_PIXELS);
    }
    return 0;
}

/* The records a file holds, from its size: 0, or -1 on a size that is not whole records. */
static int cifar_count(const cifar_kind *k, const char *path, int fd, uint32_t *n, gt_err *e)
{
    struct stat st;
    size_t rec = (size_t)k->label_bytes + CIFAR_PIXELS;
    if (fstat(fd, &st) != 0)
        return gt_fail(e, "%s: cannot stat: %s", path, strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    if (size == 0)
        return gt_fail(e, "%s: empty file (expected %zu-byte CIFAR records)", path, rec);
    if (size % rec != 0)
        return gt_fail(e, "%s: %llu bytes is not a whole number of %zu-byte CIFAR records "
                       "(truncated or not %s)", path, (unsigned long long)size, rec,
                       k->nclasses == 10 ? "CIFAR-10" : "CIFAR-100");
    if (size / rec > GT_DATA_MAX_SAMPLES)
        return gt_fail(e, "%s: %llu records (limit %u)", path, (unsigned long long)(size / rec),
                       GT_DATA_MAX_SAMPLES);
    *n = (uint32_t)(size / rec);
    return 0;
}

/* One split's files: CIFAR-10's five training batches, or one file. */
typedef struct cifar_split {
    int nfiles;
    char paths[CIFAR_TRAIN_FILES][GT_PATHLEN];
    int fds[CIFAR_TRAIN_FILES]; /* open from cifar_open_split until cifar_load_split returns */
    uint32_t counts[CIFAR_TRAIN_FILES];
    uint64_t total;
} cifar_split;

/* Opens every file of the split and counts its records. */
static int cifar_open_split(const cifar_kind *k, const char *dir, const char *const *names,
                            cifar_split *sp, gt_err *e)
{
    for (int f = 0; f < sp->nfiles; f++) {
        const char *why;
        if (cifar_path(sp->paths[f], dir, names[f], e) != 0)
            return -1;
        if ((sp->fds[f] = gt_open_regular(sp->paths[f], &why)) < 0)
            return gt_fail(e, "%s: cannot open: %s", sp->paths[f], why);
        if (cifar_count(k, sp->paths[f], sp->fds[f], &sp->counts[f], e) != 0)
            return -1;
        sp->total += sp->counts[f];
    }
    if (sp->total > GT_DATA_MAX_SAMPLES || sp->total * CIFAR_PIXELS >= GT_DATA_MAX_BYTES)
        return gt_fail(e, "%s: %llu records in all (limits: %u, 8 GiB of images)", sp->paths[0],
                       (unsigned long long)sp->total, GT_DATA_MAX_SAMPLES);
    return 0;
}

/* Reads every record of the split's open files into ds, chunk by chunk. */
static int cifar_fill(const cifar_kind *k, const cifar_split *sp, gt_dataset *ds, gt_err *e)
{
    size_t rec = (size_t)k->label_bytes + CIFAR_PIXELS;
    uint8_t *buf = malloc(CIFAR_CHUNK * rec);
    if (!buf)
        return gt_fail(e, "%s: out of memory", sp->paths[0]);
    uint32_t into = 0;
    int rc = 0;
    for (int f = 0; f < sp->nfiles && rc == 0; f++) {
        const char *path = sp->paths[f];
        for (uint32_t at = 0; at < sp->counts[f] && rc == 0; at += CIFAR_CHUNK) {
            uint32_t n = sp->counts[f] - at < CIFAR_CHUNK ? sp->counts[f] - at : CIFAR_CHUNK;
            rc = cifar_read(sp->fds[f], path, buf, n * rec, (uint64_t)at * rec, e);
            if (rc == 0)
                rc = cifar_unpack(k, path, buf, n, at, ds, into, e);
            into += n;
        }
        uint8_t extra;
        if (rc == 0 && read(sp->fds[f], &extra, 1) != 0) /* it grew while read */
            rc = gt_fail(e, "%s: changed size while read", path);
    }
    free(buf);
    return rc;
}

static int cifar_load_split(const cifar_kind *k, const char *dir, const char *const *names,
                            int nfiles, gt_dataset *ds, gt_err *e)
{
    cifar_split sp = {.nfiles = nfiles, .fds = {-1, -1, -1, -1, -1}};
    int rc = cifar_open_split(k, dir, names, &sp, e);
    if (rc == 0) {
        ds->n = (uint32_t)sp.total;
        ds->c = 3;
        ds->h = ds->w = CIFAR_SIDE;
        ds->nclasses = k->nclasses;
        ds->images = gt_alloc(sp.total * CIFAR_PIXELS);
        ds->labels = gt_alloc(sp.total * sizeof *ds->labels);
        rc = ds->images && ds->labels ? cifar_fill(k, &sp, ds, e)
                                      : gt_fail(e, "%s: out of memory for %llu records",
                                                sp.paths[0], (unsigned long long)sp.total);
    }
    for (int f = 0; f < nfiles; f++)
        if (sp.fds[f] >= 0)
            close(sp.fds[f]);
    if (rc == 0) {
        ds->images_crc = gt_crc32(0, ds->images, (size_t)ds->n * CIFAR_PIXELS);
        ds->labels_crc = gt_labels_crc(ds->labels, ds->n, ds->nclasses);
    }
    return rc;
}

/* Reads a whole small text file (NUL-terminated) into *text; 1 if it is absent, 0 read, -1. */
static int cifar_slurp(const char *path, char **text, gt_err *e)
{
    const char *why;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT)
        return 1;
    int fd = gt_open_regular(path, &why);
    if (fd < 0)
        return gt_fail(e, "%s: cannot open: %s", path, why);
    int rc = -1;
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size > CIFAR_NAMES_MAX)
        gt_fail(e, "%s: %lld bytes, more than a class-names file may hold (%u)", path,
                (long long)st.st_size, CIFAR_NAMES_MAX);
    else if (!(*text = malloc((size_t)st.st_size + 1)))
        gt_fail(e, "%s: out of memory", path);
    else if (cifar_read(fd, path, (uint8_t *)*text, (size_t)st.st_size, 0, e) != 0)
        free(*text);
    else
        rc = 0;
    if (rc == 0)
        (*text)[st.st_size] = '\0';
    close(fd);
    return rc;
}

/* One name per line (a trailing "\r" and blank lines at the end ignored): exactly nclasses of
 * them, each 1..31 bytes of UTF-8. */
static int cifar_parse_names(const char *path, char *text, int nclasses, char (*names)[32],
                             gt_err *e)
{
    size_t len = strlen(text);
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
        text[--len] = '\0';
    int k = 0;
    for (char *line = text, *next; len > 0 && line; line = next, k++) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\r')
            line[--n] = '\0';
        if (k >= nclasses)
            return gt_fail(e, "%s: more than %d class names", path, nclasses);
        if (n == 0 || n > 31 || !gt_utf8_valid(line))
            return gt_fail(e, "%s: line %d: a class name must be 1..31 bytes of UTF-8", path,
                           k + 1);
        memcpy(names[k], line, n + 1);
    }
    if (k != nclasses)
        return gt_fail(e, "%s: %d class names, expected %d", path, k, nclasses);
    return 0;
}

/* The class names from the variant's names file, or "0".."K-1" where there is none. */
static int cifar_class_names(const cifar_kind *k, const char *dir, gt_class_name *names, gt_err *e)
{
    char path[GT_PATHLEN], *text = NULL;
    if (cifar_path(path, dir, k->names, e) != 0)
        return -1;
    int rc = cifar_slurp(path, &text, e);
    if (rc == 1) {
        for (int c = 0; c < k->nclasses; c++)
            snprintf(names[c], 32, "%d", c);
        return 0;
    }
    if (rc == 0)
        rc = cifar_parse_names(path, text, k->nclasses, names, e);
    free(text);
    return rc;
}

int gt_cifar_load(const char *dir, int nclasses, gt_data *out, gt_err *e)
{
    const cifar_kind *k = nclasses == 100 ? &cifar100 : &cifar10;
    if (cifar_load_split(k, dir, k->train, k->ntrain, &out->train, e) != 0 ||
        cifar_load_split(k, dir, &k->test, 1, &out->test, e) != 0)
        return -1;
    if (gt_data_alloc_names(out, k->nclasses, e) != 0)
        return -1;
    return cifar_class_names(k, dir, out->class_names, e);
}
