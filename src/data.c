/* data.c - loads a dataset into memory as uint8: MNIST-style IDX files (gzip or plain, read by
 * data_idx.c) or an image folder ROOT/<split>/<class>/<image> of PNG and JPEG files (read,
 * checked and decoded by image_file.c).
 *
 * Every file is treated as hostile: every size a file claims is checked against the limits in
 * data.h before anything is allocated from it. gt_data_load picks the format from what the folder
 * holds, loads the train and test splits of IDX data at the same time (two threads), checks that
 * train and test agree, applies --train-samples and computes the fingerprint that ties a
 * checkpoint to its data. */
#include "gputrain/data.h"

#include "gputrain/atomic_file.h"
#include "gputrain/image_file.h"
#include "gputrain/image_resize.h"
#include "gputrain/json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* IDX files carry no class count; MNIST and Fashion-MNIST both have ten. */
#define IDX_CLASSES 10

/* ---- image folders -------------------------------------------------------------------------- */

typedef struct name_list {
    char **names;
    size_t n, cap;
} name_list;

static void names_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

static int names_push(name_list *l, const char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **grown = realloc(l->names, cap * sizeof *grown);
        if (!grown)
            return -1;
        l->names = grown;
        l->cap = cap;
    }
    if (!(l->names[l->n] = strdup(name)))
        return -1;
    l->n++;
    return 0;
}

static int names_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int path_join(char *dst, const char *a, const char *b, gt_err *e)
{
    int len = snprintf(dst, GT_PATHLEN, "%s/%s", a, b);
    if (len < 0 || len >= GT_PATHLEN)
        return gt_fail(e, "%s/%s: path longer than %d bytes", a, b, GT_PATHLEN - 1);
    return 0;
}

static int path_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Lists a folder, skipping hidden entries, sorted bytewise so the order (and so the labels and the
 * fingerprint) never depends on the file system or the locale. */
static int dir_list(const char *path, name_list *out, gt_err *e)
{
    DIR *d = opendir(path);
    if (!d)
        return gt_fail(e, "%s: cannot open folder: %s", path, strerror(errno));
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.')
            continue;
        if (names_push(out, ent->d_name) != 0) {
            closedir(d);
            return gt_fail(e, "%s: out of memory listing the folder", path);
        }
    }
    closedir(d);
    if (out->n > 1)
        qsort(out->names, out->n, sizeof *out->names, names_cmp);
    return 0;
}

static int folder_list_classes(const char *split_dir, name_list *classes, gt_err *e)
{
    char path[GT_PATHLEN];
    if (dir_list(split_dir, classes, e) != 0)
        return -1;
    if (classes->n == 0)
        return gt_fail(e, "%s: no class folders", split_dir);
    if (classes->n > GT_MAX_CLASSES)
        return gt_fail(e, "%s: %zu class folders (limit %d)", split_dir, classes->n,
                       GT_MAX_CLASSES);
    for (size_t k = 0; k < classes->n; k++) {
        if (path_join(path, split_dir, classes->names[k], e) != 0)
            return -1;
        if (!path_is_dir(path))
            return gt_fail(e, "%s: not a folder (%s should hold only class folders)", path,
                           split_dir);
        if (strlen(classes->names[k]) > 31 || !gt_utf8_valid(classes->names[k]))
            return gt_fail(e, "%s: class name is %zu characters or not UTF-8 (limit 31 bytes)",
                           path, strlen(classes->names[k]));
    }
    return 0;
}

/* Appends the full path of every file in one class folder; an empty class is an error. */
static int folder_list_class(const char *class_dir, name_list *files, gt_err *e)
{
    char path[GT_PATHLEN];
    name_list in_class = {0};
    int rc = dir_list(class_dir, &in_class, e);
    if (rc == 0 && in_class.n == 0)
        rc = gt_fail(e, "%s: empty class folder", class_dir);
    for (size_t i = 0; rc == 0 && i < in_class.n; i++) {
        rc = path_join(path, class_dir, in_class.names[i], e);
        if (rc == 0 && names_push(files, path) != 0)
            rc = gt_fail(e, "%s: out of memory listing the images", class_dir);
    }
    names_free(&in_class);
    return rc;
}

/* Collects every image path, class by class; ends[k] is one past class k's last file. */
static int folder_list_files(const char *split_dir, const name_list *classes, name_list *files,
                             uint32_t *ends, gt_err *e)
{
    char class_dir[GT_PATHLEN];
    for (size_t k = 0; k < classes->n; k++) {
        if (path_join(class_dir, split_dir, classes->names[k], e) != 0 ||
            folder_list_class(class_dir, files, e) != 0)
            return -1;
        if (files->n > GT_DATA_MAX_SAMPLES)
            return gt_fail(e, "%s: more than %u images", split_dir, GT_DATA_MAX_SAMPLES);
        ends[k] = (uint32_t)files->n;
    }
    return 0;
}

/* Reads and checks one image file (not a folder) into im (closed by the caller). */
static int folder_open_image(const char *path, gt_image *im, gt_err *e)
{
    if (path_is_dir(path))
        return gt_fail(e, "%s: a folder inside a class folder (expected image files)", path);
    return gt_image_open(path, GT_DATA_MAX_SIDE, im, e);
}

/* Decodes every file into out; the first image sets the size all the others must share, unless
 * size (height, width) is given: then each is resized to it. */
static int folder_fill(const name_list *files, const uint32_t *ends, size_t nclasses,
                       const int *size, gt_dataset *out, gt_err *e)
{
    gt_image im;
    const char *first = files->names[0];
    if (folder_open_image(first, &im, e) != 0)
        return -1;
    int w = im.w, h = im.h, c = im.channels;
    gt_image_close(&im);
    int oh = size[0] > 0 ? size[0] : h, ow = size[0] > 0 ? size[1] : w;
    size_t per = (size_t)c * oh * ow;
    unsigned long long bytes = (unsigned long long)files->n * per;
    if (bytes >= GT_DATA_MAX_BYTES)
        return gt_fail(e, "%s: %zu images of %dx%dx%d = %llu bytes (limit 8 GiB)", first, files->n,
                       c, oh, ow, bytes);
    out->images = gt_alloc(bytes);
    out->labels = gt_alloc(files->n * sizeof *out->labels);
    if (!out->images || !out->labels)
        return gt_fail(e, "%s: out of memory for %llu bytes of images", first, bytes);
    out->n = (uint32_t)files->n;
    out->c = c;
    out->h = oh;
    out->w = ow;
    out->nclasses = (int)nclasses;
    size_t k = 0;
    for (size_t i = 0; i < files->n; i++) {
        const char *path = files->names[i];
        if (folder_open_image(path, &im, e) != 0)
            return -1;
        int rc = (size[0] == 0 && (im.w != w || im.h != h)) || im.channels != c
                     ? gt_fail(e, "%s: %dx%d with %d channel(s), but the first image %s is %dx%d "
                               "with %d", path, im.w, im.h, im.channels, first, w, h, c)
                     : gt_image_decode(path, &im, c, out->images + i * per, ow, oh, e);
        gt_image_close(&im);
        if (rc != 0)
            return -1;
        while (i >= ends[k])
            k++;
        out->labels[i] = (uint16_t)k;
    }
    return 0;
}

/* The CRC-32s of a split held in memory (an IDX file's come with its load). */
static void dataset_crc(gt_dataset *ds)
{
    ds->images_crc = gt_crc32(0, ds->images, (size_t)ds->n * ds->c * ds->h * ds->w);
    ds->labels_crc = gt_labels_crc(ds->labels, ds->n, ds->nclasses);
}

int gt_folder_load(const char *root, const char *split, gt_dataset *out,
                   gt_class_name **class_names, int *nclasses, gt_err *e)
{
    return gt_folder_load_sized(root, split, (const int[2]){0, 0}, out, class_names, nclasses, e);
}

int gt_folder_load_sized(const char *root, const char *split, const int *size, gt_dataset *out,
                         gt_class_name **class_names, int *nclasses, gt_err *e)
{
    char split_dir[GT_PATHLEN];
    name_list classes = {0}, files = {0};
    uint32_t *ends = NULL;
    int rc = -1;
    memset(out, 0, sizeof *out);
    *class_names = NULL;
    if (path_join(split_dir, root, split, e) != 0 ||
        folder_list_classes(split_dir, &classes, e) != 0)
        goto done;
    ends = calloc(classes.n, sizeof *ends);
    *class_names = gt_alloc(classes.n * sizeof **class_names);
    if (!ends || !*class_names) {
        gt_fail(e, "%s: out of memory", split_dir);
        goto done;
    }
    if (folder_list_files(split_dir, &classes, &files, ends, e) != 0 ||
        folder_fill(&files, ends, classes.n, size, out, e) != 0)
        goto done;
    dataset_crc(out);
    for (size_t k = 0; k < classes.n; k++)
        snprintf((*class_names)[k], GT_CLASS_NAMELEN, "%s", classes.names[k]);
    *nclasses = (int)classes.n;
    rc = 0;
done:
    if (rc != 0) {
        gt_free(out->images);
        gt_free(out->labels);
        memset(out, 0, sizeof *out);
        gt_free(*class_names);
        *class_names = NULL;
    }
    free(ends);
    names_free(&classes);
    names_free(&files);
    return rc;
}

/* ---- whole datasets ------------------------------------------------------------------------- */

enum { DATA_NONE, DATA_IDX, DATA_FOLDER, DATA_CIFAR10, DATA_CIFAR100, DATA_SYNTH };
static const char *const format_names[] = {"", "idx", "folder", "cifar10", "cifar100", "synthetic"};

static const char *const idx_names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

/* Fills path with dir/name.gz or dir/name, whichever exists (.gz first): 1, else 0. */
static int idx_find(const char *dir, const char *name, char *path, gt_err *e)
{
    struct stat st;
    if (snprintf(path, GT_PATHLEN, "%s/%s.gz", dir, name) >= GT_PATHLEN)
        return gt_fail(e, "%s/%s.gz: path longer than %d bytes", dir, name, GT_PATHLEN - 1);
    if (stat(path, &st) == 0)
        return 1;
    snprintf(path, GT_PATHLEN, "%s/%s", dir, name);
    return stat(path, &st) == 0 ? 1 : 0;
}

/* Any one IDX file makes it an IDX folder, so a half-finished download is reported as such. */
static int data_detect(const char *dir)
{
    char path[GT_PATHLEN];
    for (int i = 0; i < 4; i++)
        if (idx_find(dir, idx_names[i], path, NULL) == 1)
            return DATA_IDX;
    int cifar = gt_cifar_detect(dir);
    if (cifar != 0)
        return cifar == 10 ? DATA_CIFAR10 : DATA_CIFAR100;
    if (path_join(path, dir, "train", NULL) == 0 && path_is_dir(path))
        return DATA_FOLDER;
    return DATA_NONE;
}

static int data_load_idx_split(const char *images, const char *labels, gt_dataset *ds, gt_err *e)
{
    uint32_t nlabels;
    uint8_t *bytes = NULL; /* the file's labels, widened into ds->labels */
    int rc = -1;
    if (gt_idx_load_images(images, &ds->n, &ds->h, &ds->w, &ds->images, &ds->images_crc, e) != 0 ||
        gt_idx_load_labels(labels, &nlabels, &bytes, &ds->labels_crc, e) != 0)
        goto done;
    ds->c = 1;
    ds->nclasses = IDX_CLASSES;
    if (nlabels != ds->n) {
        gt_fail(e, "%s holds %u images but %s holds %u labels", images, ds->n, labels, nlabels);
        goto done;
    }
    for (uint32_t i = 0; i < nlabels; i++)
        if (bytes[i] >= IDX_CLASSES) {
            gt_fail(e, "%s: label at index %u is %u (expected 0..%d)", labels, i, bytes[i],
                    IDX_CLASSES - 1);
            goto done;
        }
    if (!(ds->labels = gt_alloc((size_t)nlabels * sizeof *ds->labels)) && nlabels) {
        gt_fail(e, "%s: out of memory for %u labels", labels, nlabels);
        goto done;
    }
    for (uint32_t i = 0; i < nlabels; i++)
        ds->labels[i] = bytes[i];
    rc = 0;
done:
    gt_free(bytes);
    return rc;
}

/* Fashion-MNIST is recognised by its test labels (CRC-32 of the 10000 label bytes, which
 * --train-samples never cuts) and gets its class names; any other IDX data is named "0".."9". */
#define FASHION_TEST_LABELS_CRC 0x242bc73fu
static int data_idx_class_names(gt_data *out, gt_err *e)
{
    if (gt_data_alloc_names(out, IDX_CLASSES, e) != 0)
        return -1;
    static const char *const fashion[IDX_CLASSES] = {"T-shirt/top", "Trouser", "Pullover",
        "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
    int is_fashion = out->test.n == 10000 && out->test.labels_crc == FASHION_TEST_LABELS_CRC;
    for (int k = 0; k < IDX_CLASSES; k++) {
        if (is_fashion)
            snprintf(out->class_names[k], sizeof out->class_names[k], "%s", fashion[k]);
        else
            snprintf(out->class_names[k], sizeof out->class_names[k], "%d", k);
    }
    return 0;
}

/* One split's two files, loaded on a thread of its own. */
typedef struct idx_split_job {
    const char *images, *labels;
    gt_dataset *ds;
    gt_err err;
    int rc;
} idx_split_job;

static void *idx_split_thread(void *arg)
{
    idx_split_job *j = arg;
    j->rc = data_load_idx_split(j->images, j->labels, j->ds, &j->err);
    return NULL;
}

/* The test split inflates on a thread of its own while this one inflates the train split
 * (Fashion-MNIST: 7.8 of the 54 MB), one after the other where no thread starts. Errors come as
 * they would one after the other: the train split's first. Whatever either split holds on an
 * error is freed with the dataset. */
static int data_load_idx_splits(char (*paths)[GT_PATHLEN], gt_data *out, gt_err *e)
{
    idx_split_job test = {paths[2], paths[3], &out->test, {{0}}, 0};
    pthread_t t;
    int threaded = pthread_create(&t, NULL, idx_split_thread, &test) == 0;
    if (!threaded)
        idx_split_thread(&test);
    int rc = data_load_idx_split(paths[0], paths[1], &out->train, e);
    if (threaded)
        pthread_join(t, NULL);
    if (rc != 0)
        return -1;
    if (test.rc != 0) {
        *e = test.err;
        return -1;
    }
    return 0;
}

static int data_load_idx(const char *dir, gt_data *out, gt_err *e)
{
    char paths[4][GT_PATHLEN];
    for (int i = 0; i < 4; i++) {
        int found = idx_find(dir, idx_names[i], paths[i], e);
        if (found < 0)
            return -1;
        if (!found)
            return gt_fail(e, "%s/%s[.gz]: missing (an IDX dataset needs all four files)", dir,
                           idx_names[i]);
    }
    if (data_load_idx_splits(paths, out, e) != 0)
        return -1;
    if (out->train.h != out->test.h || out->train.w != out->test.w)
        return gt_fail(e, "%s holds %dx%d images but %s holds %dx%d", paths[0], out->train.h,
                       out->train.w, paths[2], out->test.h, out->test.w);
    return data_idx_class_names(out, e);
}

static int data_check_classes(const char *dir, const gt_data *d, const gt_class_name *test_names,
                              int ntest, gt_err *e)
{
    if (ntest != d->train.nclasses)
        return gt_fail(e, "%s/test has %d class folders but %s/train has %d", dir, ntest, dir,
                       d->train.nclasses);
    for (int k = 0; k < ntest; k++)
        if (strcmp(test_names[k], d->class_names[k]) != 0)
            return gt_fail(e, "%s/test: class %d is '%s' but in %s/train it is '%s'", dir, k,
                           test_names[k], dir, d->class_names[k]);
    return 0;
}

static int data_load_folder(const char *dir, const int *size, gt_data *out, gt_err *e)
{
    int ntrain, ntest;
    gt_class_name *test_names = NULL;
    int rc = -1;
    if (gt_folder_load_sized(dir, "train", size, &out->train, &out->class_names, &ntrain, e) == 0 &&
        gt_folder_load_sized(dir, "test", size, &out->test, &test_names, &ntest, e) == 0 &&
        data_check_classes(dir, out, test_names, ntest, e) == 0)
        rc = 0;
    gt_free(test_names);
    if (rc != 0)
        return -1;
    const gt_dataset *a = &out->train, *b = &out->test;
    if (a->c != b->c || a->h != b->h || a->w != b->w)
        return gt_fail(e,
                       "%s/train holds %dx%d images with %d channel(s) but %s/test holds %dx%d "
                       "with %d",
                       dir, a->w, a->h, a->c, dir, b->w, b->h, b->c);
    return 0;
}

/* Keeps the first limit samples, copied into buffers of the right size so nothing pins or copies
 * the unused tail later. */
static int data_apply_limit(const char *dir, gt_dataset *ds, uint32_t limit, gt_err *e)
{
    if (limit == 0 || limit == ds->n)
        return 0;
    if (limit > ds->n)
        return gt_fail(e, "--train-samples %u is more than the %u training samples in %s", limit,
                       ds->n, dir);
    size_t per = (size_t)ds->c * ds->h * ds->w;
    uint8_t *images = gt_alloc(limit * per);
    uint16_t *labels = gt_alloc(limit * sizeof *labels);
    if (!images || !labels) {
        gt_free(images);
        gt_free(labels);
        return gt_fail(e, "%s: out of memory keeping %u training samples", dir, limit);
    }
    memcpy(images, ds->images, limit * per);
    memcpy(labels, ds->labels, limit * sizeof *labels);
    gt_free(ds->images);
    gt_free(ds->labels);
    ds->images = images;
    ds->labels = labels;
    ds->n = limit;
    dataset_crc(ds);
    return 0;
}

/* The CRC-32 of train images, train labels, test images and test labels one after the other,
 * combined from each one's own (crc32_combine), so that no pass over the data is made twice. */
static uint32_t data_fingerprint(const gt_data *d)
{
    const gt_dataset *splits[2] = {&d->train, &d->test};
    uint32_t crc = 0;
    for (int i = 0; i < 2; i++) {
        const gt_dataset *s = splits[i];
        z_off_t bytes = (z_off_t)s->n * s->c * s->h * s->w;
        crc = (uint32_t)crc32_combine(crc, s->images_crc, bytes);
        crc = (uint32_t)crc32_combine(crc, s->labels_crc,
                                      (z_off_t)gt_labels_crc_len(s->n, s->nclasses));
    }
    return crc;
}

static int data_load_dir(const char *dir, uint32_t train_limit, const int *size, gt_data *out,
                         gt_err *e)
{
    if (!gt_synth_is(dir) && !path_is_dir(dir))
        return gt_fail(e,
                       "%s: not a folder (--data wants a folder of IDX or CIFAR files or "
                       "train/ and test/ image folders, or synthetic:CxHxW:K)",
                       dir);
    int format = gt_synth_is(dir) ? DATA_SYNTH : data_detect(dir);
    if (format == DATA_NONE)
        return gt_fail(e,
                       "%s: holds neither train-images-idx3-ubyte[.gz] and the other IDX files, "
                       "CIFAR's data_batch_1.bin or train.bin, nor train/ and test/ image folders",
                       dir);
    if (snprintf(out->dir, sizeof out->dir, "%s", dir) >= (int)sizeof out->dir)
        return gt_fail(e, "%s: path longer than %d bytes", dir, GT_PATHLEN - 1);
    snprintf(out->format, sizeof out->format, "%s", format_names[format]);
    int rc = format == DATA_IDX      ? data_load_idx(dir, out, e)
             : format == DATA_FOLDER ? data_load_folder(dir, size, out, e)
             : format == DATA_SYNTH  ? gt_synth_load(dir, out, e)
                                     : gt_cifar_load(dir, format == DATA_CIFAR10 ? 10 : 100, out, e);
    if (rc == 0 && size[0] > 0 && (size[0] != out->train.h || size[1] != out->train.w))
        rc = gt_fail(e, "--image-size %dx%d: %s holds %s images of %dx%d, which are not resized "
                     "(only image folders' are)", size[0], size[1], dir, out->format,
                     out->train.h, out->train.w);
    if (rc == 0)
        rc = data_apply_limit(dir, &out->train, train_limit, e);
    if (rc == 0)
        out->fingerprint = data_fingerprint(out);
    return rc;
}

static const char *const data_defaults[2] = {"datasets/fashion-mnist",
                                             "/usr/share/datasets/fashion-mnist"};

/* The folder to load: dir, or where dir is NULL or "" (the config's "") the first default that
 * holds a dataset; NULL if none does. */
static const char *data_choose_dir(const char *dir)
{
    if (dir && *dir)
        return dir;
    for (size_t i = 0; i < sizeof data_defaults / sizeof *data_defaults; i++)
        if (data_detect(data_defaults[i]) != DATA_NONE)
            return data_defaults[i];
    return NULL;
}

int gt_data_load(const char *dir, uint32_t train_limit, gt_data *out, gt_err *e)
{
    return gt_data_load_sized(dir, train_limit, (const int[2]){0, 0}, out, e);
}

int gt_data_load_sized(const char *dir, uint32_t train_limit, const int *size, gt_data *out,
                       gt_err *e)
{
    memset(out, 0, sizeof *out);
    dir = data_choose_dir(dir);
    if (!dir)
        return gt_fail(e,
                       "no dataset found: tried %s and %s; run datasets/fetch-fashion-mnist.sh "
                       "or pass --data",
                       data_defaults[0], data_defaults[1]);
    if (data_load_dir(dir, train_limit, size, out, e) != 0) {
        gt_data_free(out);
        return -1;
    }
    return 0;
}

int gt_data_probe(const char *dir, int *c, int *h, int *w, int *nclasses)
{
    char path[GT_PATHLEN];
    uint32_t n;
    dir = data_choose_dir(dir);
    if (gt_synth_is(dir))
        return gt_synth_probe(dir, c, h, w, nclasses);
    int format = dir && path_is_dir(dir) ? data_detect(dir) : DATA_NONE;
    if (format == DATA_CIFAR10 || format == DATA_CIFAR100) { /* one shape, class count by name */
        *c = 3;
        *h = *w = 32;
        *nclasses = format == DATA_CIFAR10 ? 10 : 100;
        return 0;
    }
    if (format != DATA_IDX || idx_find(dir, idx_names[0], path, NULL) != 1 ||
        gt_idx_read_image_header(path, &n, h, w, NULL) != 0)
        return -1;
    *c = 1;
    *nclasses = IDX_CLASSES;
    return 0;
}

void gt_data_free(gt_data *d)
{
    if (!d)
        return;
    gt_free(d->train.images);
    gt_free(d->train.labels);
    gt_free(d->test.images);
    gt_free(d->test.labels);
    gt_free(d->class_names);
    gt_free(d->val.images);
    gt_free(d->val.labels);
    memset(d, 0, sizeof *d);
}
