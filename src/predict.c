/* predict.c - `gputrain predict`: the model a checkpoint's model_spec describes, with its
 * parameters, run on the CPU reference network (layers.c) over image files and dataset samples.
 *
 * An image file (PNG or JPEG) is read, checked and decoded by image_file.c to the model's channel
 * count (colour to grey or grey to colour as stb_image converts) and resized to the model's input
 * when it is not that size (image_resize.c: stb's resizer, as PIL and torchvision filter).
 * Since a model only knows what its training images looked like, an image far from its input size
 * (unless it was trained on resized images: --image-size)
 * or whose edges (its background) are light where the training images' are dark, or the other way
 * round, gets one warning line. Pixels go through the same uint8 -> x / 255 input step as
 * training. Probabilities are the softmax of the logits, in double. */
#include "gputrain/predict.h"

#include "gputrain/cpu_net.h"
#include "gputrain/image_file.h"
#include "gputrain/layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PREDICT_CHUNK 256      /* samples per forward pass */
#define PREDICT_MAX_SIDE 4096u /* image files larger than this are refused unread */
#define PREDICT_FAR_SCALE 2.0  /* a resize by more than this on a side is warned about */
#define PREDICT_FAR_ASPECT 1.1 /* ... and one that stretches the shape by more than this */
#define PREDICT_REF_SAMPLES 1000u /* training images whose edges give the usual background */
#define PREDICT_INVERTED 128.0 /* an image whose edges differ from theirs by more looks inverted */

typedef struct predictor {
    const gt_config *c;
    FILE *out;
    gt_ckpt_meta meta;
    gt_class_name *names; /* the checkpoint's class names (nnames, malloc'd), or NULL */
    int nnames;
    gt_model m;
    float *params;
    float *buffers;      /* batch norm's running statistics, NULL for a model without */
    int *order;          /* a row's classes, most probable first (nclasses of them) */
    double *prob;        /* a row's unnormalised probabilities */
    gt_cpu_net net;
    int have_net;
    int size[2];         /* the model's input where it was trained on resized images (or
                          * --image-size says so): the data are resized to it; else 0 0 */
    gt_data data;        /* loaded at the first dataset range, or for the first image */
    int have_data;
    int data_checked;    /* against the checkpoint: shape and class names */
    int ref_tried, have_ref;
    double ref_edge;     /* mean edge pixel of the first training images: their background */
    uint64_t samples, correct;
} predictor;

int gt_predict_check_classes(const char *path, const gt_class_name *names, int nnames,
                             const gt_data *d, int ignore, FILE *warn, gt_err *e)
{
    if (nnames == 0 || !names) {
        char shown[4 * GT_PATHLEN];
        fprintf(warn, "gputrain: warning: %s holds no class names (written by an older gputrain); "
                      "they are not checked against the data's\n",
                gt_escape(shown, sizeof shown, path));
        return 0;
    }
    int n = nnames < d->train.nclasses ? nnames : d->train.nclasses;
    int k = 0;
    while (k < n && strcmp(names[k], d->class_names[k]) == 0)
        k++;
    if (ignore || (k == n && nnames == d->train.nclasses))
        return 0;
    if (k == n)
        return gt_fail(e, "%s: the checkpoint has %d classes, the data %s has %d "
                       "(--ignore-classes to go on)", path, nnames, d->dir, d->train.nclasses);
    return gt_fail(e, "%s: class %d is '%s' in the checkpoint but '%s' in the data %s: the class "
                   "names differ (--ignore-classes to go on)", path, k, names[k],
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
    m->norm = meta->norm; /* the input step the model was trained with */
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
    if (p->names)
        put_text(p->out, p->names[k]);
    else if (p->data_checked)
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
    gt_cpu_net_run(&p->net, p->params, p->buffers, &b, 0, NULL, &hits);
    return p->net.act[p->m.nlayers];
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

/* The dataset of --data (or the default), loaded once. */
static int data_open(predictor *p, gt_err *e)
{
    if (!p->have_data &&
        gt_data_load_sized(p->c->data[0] ? p->c->data : NULL, 0, p->size, &p->data, e) == 0)
        p->have_data = 1;
    return p->have_data ? 0 : -1;
}

/* The dataset, checked against the checkpoint once. */
static int load_data(predictor *p, gt_err *e)
{
    if (data_open(p, e) != 0)
        return -1;
    if (p->data_checked)
        return 0;
    p->data_checked = 1;
    const gt_config *c = p->c;
    const gt_dataset *t = &p->data.train;
    if (t->c != p->m.in_c || t->h != p->m.in_h || t->w != p->m.in_w ||
        t->nclasses != p->m.nclasses)
        return gt_fail(e, "%s: checkpoint is for %dx%dx%d inputs and %d classes, the data %s has "
                       "%dx%dx%d and %d", c->checkpoint, p->m.in_c, p->m.in_h, p->m.in_w,
                       p->m.nclasses, p->data.dir, t->c, t->h, t->w, t->nclasses);
    return gt_predict_check_classes(c->checkpoint, p->names, p->nnames, &p->data,
                                    c->ignore_classes, stderr, e);
}

/* ---- image files ----------------------------------------------------------------------------- */

/* Decodes path into px as the model's C x H x W input, resized where its size (*w x *h) differs. */
static int decode_image(const predictor *p, const char *path, uint8_t *px, int *w, int *h,
                        gt_err *e)
{
    const gt_model *m = &p->m;
    gt_image im;
    if (gt_image_open(path, PREDICT_MAX_SIDE, &im, e) != 0)
        return -1;
    *w = im.w;
    *h = im.h;
    int rc = gt_image_decode(path, &im, m->in_c, px, m->in_w, m->in_h, e);
    gt_image_close(&im);
    return rc;
}

/* The mean of the pixels on the edges of a c x h x w image: mostly its background. */
static double edge_mean(const uint8_t *px, int c, int h, int w)
{
    double sum = 0;
    size_t n = 0;
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x += y == 0 || y == h - 1 || w == 1 ? 1 : w - 1) {
                sum += px[((size_t)ch * h + y) * w + x];
                n++;
            }
    return sum / (double)n;
}

/* Whether the data at hand looks like the checkpoint's: the model's input shape and class count,
 * and its class names where the checkpoint holds them. */
static int data_is_checkpoints(const predictor *p)
{
    const gt_model *m = &p->m;
    const gt_dataset *t = &p->data.train;
    int same = t->n > 0 && t->c == m->in_c && t->h == m->in_h && t->w == m->in_w &&
               t->nclasses == m->nclasses;
    for (int k = 0; same && p->names && k < p->nnames; k++)
        same = strcmp(p->names[k], p->data.class_names[k]) == 0;
    return same;
}

/* The training images' usual edge (over their first PREDICT_REF_SAMPLES, computed once): 1 when
 * the data of --data or the default is at hand and looks like the checkpoint's, else 0. */
static int reference_edge(predictor *p, double *ref)
{
    const gt_dataset *t = &p->data.train;
    gt_err ignored;
    if (!p->ref_tried && data_open(p, &ignored) == 0 && data_is_checkpoints(p)) {
        uint32_t n = t->n < PREDICT_REF_SAMPLES ? t->n : PREDICT_REF_SAMPLES;
        size_t per = (size_t)t->c * t->h * t->w;
        double sum = 0;
        for (uint32_t i = 0; i < n; i++)
            sum += edge_mean(t->images + i * per, t->c, t->h, t->w);
        p->ref_edge = sum / n;
        p->have_ref = 1;
    }
    p->ref_tried = 1;
    *ref = p->ref_edge;
    return p->have_ref;
}

/* One warning line for an image (px, resized from w x h) that the model may misread: far from
 * its input size, or inverted relative to the training images (light edges where theirs are
 * dark, or the reverse). */
static void warn_image(predictor *p, const char *path, const uint8_t *px, int w, int h)
{
    const gt_model *m = &p->m;
    double sx = (double)w / m->in_w, sy = (double)h / m->in_h, ref;
    int far = !p->size[0] && (fmax(fmax(sx, 1 / sx), fmax(sy, 1 / sy)) > PREDICT_FAR_SCALE ||
                              fmax(sx / sy, sy / sx) > PREDICT_FAR_ASPECT);
    double edge = edge_mean(px, m->in_c, m->in_h, m->in_w);
    int inverted = reference_edge(p, &ref) && fabs(edge - ref) > PREDICT_INVERTED;
    if (!far && !inverted)
        return;
    char shown[4 * GT_PATHLEN], size[96] = "", look[160] = "";
    if (far)
        snprintf(size, sizeof size, "it is %dx%d pixels, far from the model's %dx%d (resized to "
                 "it)%s", w, h, m->in_w, m->in_h, inverted ? "; " : "");
    if (inverted)
        snprintf(look, sizeof look, "it looks inverted relative to the training images: its "
                 "edges average %.0f of 255, theirs %.0f", edge, ref);
    fprintf(stderr, "gputrain: warning: %s: %s%s; the prediction may be wrong\n",
            gt_escape(shown, sizeof shown, path), size, look);
}

static int predict_image(predictor *p, const char *path, gt_err *e)
{
    uint16_t label = 0;
    gt_dataset one = {.n = 1, .c = p->m.in_c, .h = p->m.in_h, .w = p->m.in_w,
                      .nclasses = p->m.nclasses, .labels = &label};
    one.images = malloc((size_t)one.c * one.h * one.w);
    if (!one.images)
        return gt_fail(e, "%s: out of memory", path);
    int w, h, rc = decode_image(p, path, one.images, &w, &h, e);
    if (rc == 0) {
        warn_image(p, path, one.images, w, h);
        print_row(p, path, forward(p, &one, 0, 1), -1);
    }
    free(one.images);
    return rc;
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
    if (gt_ckpt_read_names(path, &p->meta, &p->names, e) != 0)
        return -1;
    p->nnames = p->names ? p->meta.nnames : 0; /* kept apart: gt_ckpt_load rewrites meta */
    if (gt_predict_model(path, &p->meta, p->meta.in_c, p->meta.in_h, p->meta.in_w,
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
    if (p->m.nbuffers && !(p->buffers = malloc(p->m.nbuffers * sizeof(float))))
        return gt_fail(e, "%s: out of memory for %zu buffer values", path, p->m.nbuffers);
    /* the moving average copied over the parameters where the file has one (but --no-ema) */
    if (gt_ckpt_load_ema(path, &p->m, p->params, p->c->no_ema ? NULL : p->params, p->buffers,
                         NULL, 0, &p->meta, flags, e) != 0 ||
        gt_cpu_net_create(&p->net, &p->m, PREDICT_CHUNK, e) != 0)
        return -1;
    p->have_net = 1;
    const int *given = p->c->image_size;
    if (given[0] && (given[0] != p->m.in_h || given[1] != p->m.in_w))
        return gt_fail(e, "--image-size %dx%d: the model of %s takes %dx%d images", given[0],
                       given[1], path, p->m.in_h, p->m.in_w);
    if (given[0] || p->meta.resized)
        p->size[0] = p->m.in_h, p->size[1] = p->m.in_w;
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
        fprintf(p->out, "accuracy %.4f (%llu/%llu) over the dataset samples%s\n",
                (double)p->correct / p->samples, (unsigned long long)p->correct,
                (unsigned long long)p->samples,
                !p->meta.has_ema ? "" : p->c->no_ema ? " (training parameters, not the moving "
                                                       "average)"
                                                     : " (moving average of the parameters)");
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
    free(p->buffers);
    free(p->order);
    free(p->prob);
    free(p->names);
    free(p);
    return rc;
}
