/* predict.c - `gputrain predict`: the model a checkpoint's model_spec describes, with its
 * parameters, run on the CPU reference network (layers.c) over image files and dataset samples.
 *
 * An image file (PNG or JPEG) is read, checked and decoded by image_file.c to the model's channel
 * count (colour to grey or grey to colour as stb_image converts), never resized: a size other than
 * the model's input is an error. Pixels go through the same uint8 -> x / 255 input step as
 * training. Probabilities are the softmax of the logits, in double. */
#include "gputrain/predict.h"

#include "gputrain/image_file.h"
#include "gputrain/layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PREDICT_CHUNK 256      /* samples per forward pass */
#define PREDICT_MAX_SIDE 4096u /* image files larger than this are refused unread */

typedef struct predictor {
    const gt_config *c;
    FILE *out;
    gt_ckpt_meta meta;
    gt_model m;
    float *params;
    int *order;          /* a row's classes, most probable first (nclasses of them) */
    double *prob;        /* a row's unnormalised probabilities */
    gt_cpu_net net;
    int have_net;
    gt_data data;        /* loaded at the first dataset range */
    int have_data;
    uint64_t samples, correct;
} predictor;

int gt_predict_check_classes(const char *path, const gt_ckpt_meta *meta, const gt_data *d,
                             int ignore, FILE *warn, gt_err *e)
{
    if (meta->nnames == 0) {
        char shown[4 * GT_PATHLEN];
        fprintf(warn, "gputrain: warning: %s holds no class names (written by an older gputrain); "
                      "they are not checked against the data's\n",
                gt_escape(shown, sizeof shown, path));
        return 0;
    }
    int n = meta->nnames < d->train.nclasses ? meta->nnames : d->train.nclasses;
    int k = 0;
    while (k < n && strcmp(meta->class_names[k], d->class_names[k]) == 0)
        k++;
    if (ignore || (k == n && meta->nnames == d->train.nclasses))
        return 0;
    if (k == n)
        return gt_fail(e, "%s: the checkpoint has %d classes, the data %s has %d "
                       "(--ignore-classes to go on)", path, meta->nnames, d->dir, d->train.nclasses);
    return gt_fail(e, "%s: class %d is '%s' in the checkpoint but '%s' in the data %s: the class "
                   "names differ (--ignore-classes to go on)", path, k, meta->class_names[k],
                   d->class_names[k], d->dir);
}

int gt_predict_model(const char *path, const gt_ckpt_meta *meta, int in_c, int in_h, int in_w,
                     int nclasses, gt_model *m, gt_err *e)
{
    char where[GT_PATHLEN + 32];
    snprintf(where, sizeof where, "checkpoint %s: model_spec", path);
    if (gt_model_build_spec(where, meta->model_spec, in_c, in_h, in_w, nclasses, m, e) != 0)
        return -1;
    if (strcmp(m->spec, meta->model_spec) != 0)
        return gt_fail(e, "checkpoint %s: model_spec '%.80s' is not as gputrain writes it "
                       "('%.80s'): the file was edited", path, meta->model_spec, m->spec);
    if (strcmp(meta->model, m->name) != 0 && strcmp(meta->model, "custom") != 0)
        return gt_fail(e, "checkpoint %s: the metadata names model %.31s, but model_spec is %s: "
                       "the file was edited", path, meta->model, m->name);
    return 0;
}

/* Prints s (a file name or a class name) with its control bytes escaped. */
static void put_text(FILE *f, const char *s)
{
    char shown[4 * GT_PATHLEN];
    fputs(gt_escape(shown, sizeof shown, s), f);
}

/* Prints the name of class k: the checkpoint's, else the data's, else its number. */
static void put_class(const predictor *p, int k)
{
    if (p->meta.nnames > 0)
        put_text(p->out, p->meta.class_names[k]);
    else if (p->have_data)
        put_text(p->out, p->data.class_names[k]);
    else
        fprintf(p->out, "%d", k);
}

/* Prints "what: A 0.912, B 0.061, ..." with the top classes of one row of logits, then
 * " (true: X)" for a known label (truth >= 0). Counts the sample when its label is known. */
static void print_row(predictor *p, const char *what, const float *logits, int truth)
{
    int k = p->m.nclasses, top = p->c->top < k ? p->c->top : k, *order = p->order;
    double *prob = p->prob, max = logits[0], sum = 0;
    for (int j = 1; j < k; j++)
        max = logits[j] > max ? logits[j] : max;
    for (int j = 0; j < k; j++)
        sum += prob[j] = exp((double)logits[j] - max);
    for (int j = 0; j < k; j++) { /* insertion sort: a stable order, ties go to the first class */
        int at = j;
        for (; at > 0 && logits[order[at - 1]] < logits[j]; at--)
            order[at] = order[at - 1];
        order[at] = j;
    }
    put_text(p->out, what);
    fputc(':', p->out);
    for (int t = 0; t < top; t++) {
        fputs(t ? ", " : " ", p->out);
        put_class(p, order[t]);
        fprintf(p->out, " %.4f", prob[order[t]] / sum);
    }
    if (truth >= 0) {
        fputs(" (true: ", p->out);
        put_class(p, truth);
        fputc(')', p->out);
        p->samples++;
        p->correct += order[0] == truth;
    }
    fputc('\n', p->out);
}

/* The logits of samples first..first+n-1 of ds: net.act[nlayers]. */
static const float *forward(predictor *p, const gt_dataset *ds, uint32_t first, int n)
{
    uint32_t idx[PREDICT_CHUNK];
    for (int i = 0; i < n; i++)
        idx[i] = first + (uint32_t)i;
    gt_batch b = {.ds = ds, .idx = idx, .n = n};
    int hits = 0;
    gt_cpu_net_step(&p->net, p->params, &b, 0, NULL, &hits);
    return p->net.act[p->m.nlayers];
}

/* Decodes path as the model's C x H x W input into px (c*h*w bytes). */
static int decode_image(const predictor *p, const char *path, uint8_t *px, gt_err *e)
{
    gt_image im;
    if (gt_image_open(path, PREDICT_MAX_SIDE, &im, e) != 0)
        return -1;
    int rc = im.w != p->m.in_w || im.h != p->m.in_h
                 ? gt_fail(e, "%s: image is %dx%d pixels, the model takes %dx%d (images are not "
                           "resized)", path, im.w, im.h, p->m.in_w, p->m.in_h)
                 : gt_image_decode(path, &im, p->m.in_c, px, e);
    gt_image_close(&im);
    return rc;
}

static int predict_image(predictor *p, const char *path, gt_err *e)
{
    uint8_t label = 0;
    gt_dataset one = {.n = 1, .c = p->m.in_c, .h = p->m.in_h, .w = p->m.in_w,
                      .nclasses = p->m.nclasses, .labels = &label};
    one.images = malloc((size_t)one.c * one.h * one.w);
    if (!one.images)
        return gt_fail(e, "%s: out of memory", path);
    int rc = decode_image(p, path, one.images, e);
    if (rc == 0)
        print_row(p, path, forward(p, &one, 0, 1), -1);
    free(one.images);
    return rc;
}

/* "train:A-B", "test:A-B" or "SPLIT:A": 1 with the range, 0 when item names no split (a file),
 * -1 when it names one but the range is malformed. */
static int parse_range(const char *item, int *test, uint32_t *first, uint32_t *last)
{
    const char *s = strchr(item, ':');
    if (!s || (strncmp(item, "train:", 6) != 0 && strncmp(item, "test:", 5) != 0))
        return 0;
    *test = item[1] == 'e';
    char *end;
    s++;
    if (*s < '0' || *s > '9')
        return -1;
    unsigned long a = strtoul(s, &end, 10), b = a;
    if (*end == '-' && end[1] >= '0' && end[1] <= '9')
        b = strtoul(end + 1, &end, 10);
    else if (*end)
        return -1;
    if (*end || a > b || b > UINT32_MAX)
        return -1;
    *first = (uint32_t)a;
    *last = (uint32_t)b;
    return 1;
}

/* The dataset of --data (or the default), checked against the checkpoint once. */
static int load_data(predictor *p, gt_err *e)
{
    if (p->have_data)
        return 0;
    const gt_config *c = p->c;
    if (gt_data_load(c->data[0] ? c->data : NULL, 0, &p->data, e) != 0)
        return -1;
    p->have_data = 1;
    const gt_dataset *t = &p->data.train;
    if (t->c != p->m.in_c || t->h != p->m.in_h || t->w != p->m.in_w ||
        t->nclasses != p->m.nclasses)
        return gt_fail(e, "%s: checkpoint is for %dx%dx%d inputs and %d classes, the data %s has "
                       "%dx%dx%d and %d", c->checkpoint, p->m.in_c, p->m.in_h, p->m.in_w,
                       p->m.nclasses, p->data.dir, t->c, t->h, t->w, t->nclasses);
    return gt_predict_check_classes(c->checkpoint, &p->meta, &p->data, c->ignore_classes, stderr, e);
}

static int predict_range(predictor *p, const char *item, int test, uint32_t first, uint32_t last,
                         gt_err *e)
{
    if (load_data(p, e) != 0)
        return -1;
    const gt_dataset *ds = test ? &p->data.test : &p->data.train;
    if (last >= ds->n)
        return gt_fail(e, "%s: the %s split has samples 0-%u", item, test ? "test" : "train",
                       ds->n - 1);
    for (uint64_t at = first; at <= last; at += PREDICT_CHUNK) {
        int n = last - at + 1 < PREDICT_CHUNK ? (int)(last - at + 1) : PREDICT_CHUNK;
        const float *logits = forward(p, ds, (uint32_t)at, n);
        for (int i = 0; i < n; i++) {
            char what[32];
            snprintf(what, sizeof what, "%s:%llu", test ? "test" : "train",
                     (unsigned long long)at + i);
            print_row(p, what, logits + (size_t)i * p->m.nclasses, ds->labels[at + i]);
        }
    }
    return 0;
}

static int predict_open(predictor *p, gt_err *e)
{
    const char *path = p->c->checkpoint;
    if (gt_ckpt_read_meta(path, &p->meta, e) != 0 ||
        gt_predict_model(path, &p->meta, p->meta.in_c, p->meta.in_h, p->meta.in_w,
                         p->meta.nclasses, &p->m, e) != 0)
        return -1;
    size_t k = (size_t)p->m.nclasses;
    p->params = malloc(p->m.nparams * sizeof(float));
    p->order = malloc(k * sizeof *p->order);
    p->prob = malloc(k * sizeof *p->prob);
    if (!p->params || !p->order || !p->prob)
        return gt_fail(e, "%s: out of memory for %zu parameters and %zu classes", path,
                       p->m.nparams, k);
    unsigned flags = p->c->allow_nonfinite ? GT_CKPT_ALLOW_NONFINITE : 0;
    if (gt_ckpt_load(path, &p->m, p->params, NULL, 0, &p->meta, flags, e) != 0 ||
        gt_cpu_net_create(&p->net, &p->m, PREDICT_CHUNK, e) != 0)
        return -1;
    p->have_net = 1;
    return 0;
}

static int predict_items(predictor *p, int *usage, gt_err *e)
{
    for (int i = 0; i < p->c->nitems; i++) {
        const char *item = p->c->items[i];
        int test;
        uint32_t first, last;
        int r = parse_range(item, &test, &first, &last);
        if (r < 0) {
            *usage = 1;
            return gt_fail(e, "predict: '%s' is not a range SPLIT:FIRST-LAST (train or test, "
                           "FIRST <= LAST)", item);
        }
        if ((r ? predict_range(p, item, test, first, last, e) : predict_image(p, item, e)) != 0)
            return -1;
    }
    if (p->samples > 0)
        fprintf(p->out, "accuracy %.4f (%llu/%llu) over the dataset samples\n",
                (double)p->correct / p->samples, (unsigned long long)p->correct,
                (unsigned long long)p->samples);
    return 0;
}

int gt_predict_run(const gt_config *c, FILE *out, int *usage, gt_err *e)
{
    *usage = 0;
    predictor *p = calloc(1, sizeof *p);
    if (!p)
        return gt_fail(e, "out of memory");
    p->c = c;
    p->out = out;
    int rc = predict_open(p, e) == 0 ? predict_items(p, usage, e) : -1;
    if (p->have_net)
        gt_cpu_net_destroy(&p->net);
    if (p->have_data)
        gt_data_free(&p->data);
    free(p->params);
    free(p->order);
    free(p->prob);
    free(p);
    return rc;
}
