/* layer_kinds.c - the layer-kind table of layer_kinds.h and the small functions its rows name:
 * for each kind, how its spec token reads and writes, what shape it gives, and how the CPU
 * reference runs it over a batch of a gt_cpu_net (through layers.c's forward and backward). */
#include "gputrain/layer_kinds.h"

#include "gputrain/layers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_MAX 64 /* characters of one field */

void gt_layer_token_split(const char *s, int len, gt_layer_token *t)
{
    int start = 0;
    t->n = 0;
    for (int i = 0; i <= len; i++) {
        if (i < len && s[i] != ':')
            continue;
        if (t->n == GT_LAYER_MAX_FIELDS) {
            t->n++;
            return;
        }
        t->f[t->n] = s + start;
        t->len[t->n] = i - start;
        t->n++;
        start = i + 1;
    }
}

/* Field i as a decimal integer in [lo, hi]: digits only, no sign, spaces or trailing junk. */
static int field_int(const gt_layer_token *t, int i, int lo, int hi, int *out)
{
    long v = 0;
    if (t->len[i] == 0)
        return -1;
    for (int j = 0; j < t->len[i]; j++) {
        char c = t->f[i][j];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
        if (v > hi)
            return -1;
    }
    if (v < lo)
        return -1;
    *out = (int)v;
    return 0;
}

/* Field i as a dropout probability 0 <= P < 1, all of it a decimal number. */
static int field_prob(const gt_layer_token *t, int i, float *out)
{
    char buf[TOKEN_MAX + 1], *end;
    const char *s = t->f[i];
    if (t->len[i] == 0 || t->len[i] > TOKEN_MAX || (s[0] != '.' && (s[0] < '0' || s[0] > '9')))
        return -1;
    memcpy(buf, s, (size_t)t->len[i]);
    buf[t->len[i]] = 0;
    if (strspn(buf, "0123456789.eE+-") != strlen(buf)) /* no hex floats (0x1p-3) */
        return -1;
    errno = 0;
    float p = strtof(buf, &end);
    if (*end || errno || !(p >= 0.0f && p < 1.0f))
        return -1;
    *out = p;
    return 0;
}

/* ---- parsers ----------------------------------------------------------------------------------- */

/* conv:OUT:K[:PAD[:STRIDE]][:nobias] */
static int parse_conv(const gt_layer_token *t, gt_layer *l, gt_err *e)
{
    int n = t->n;
    l->no_bias = n > 3 && t->len[n - 1] == 6 && memcmp(t->f[n - 1], "nobias", 6) == 0;
    n -= l->no_bias;
    l->stride = 1;
    if (n < 3 || n > 5)
        return gt_fail(e, "expected conv:OUT:K[:PAD[:STRIDE]][:nobias]");
    if (field_int(t, 1, 1, GT_LAYER_MAX_WIDTH, &l->out_c))
        return gt_fail(e, "bad output channels '%.*s' (1..%d)", t->len[1], t->f[1],
                       GT_LAYER_MAX_WIDTH);
    if (field_int(t, 2, 1, GT_LAYER_MAX_KERNEL, &l->k))
        return gt_fail(e, "bad kernel size '%.*s' (1..%d)", t->len[2], t->f[2],
                       GT_LAYER_MAX_KERNEL);
    if (n >= 4 && field_int(t, 3, 0, GT_LAYER_MAX_KERNEL, &l->pad))
        return gt_fail(e, "bad padding '%.*s' (0..%d)", t->len[3], t->f[3], l->k - 1);
    if (l->pad >= l->k)
        return gt_fail(e, "padding %d must be smaller than the kernel size %d", l->pad, l->k);
    if (n == 5 && field_int(t, 4, 1, GT_LAYER_MAX_KERNEL, &l->stride))
        return gt_fail(e, "bad stride '%.*s' (1..%d)", t->len[4], t->f[4], GT_LAYER_MAX_KERNEL);
    return 0;
}

static int parse_linear(const gt_layer_token *t, gt_layer *l, gt_err *e)
{
    if (t->n != 2)
        return gt_fail(e, "expected fc:OUT");
    if (field_int(t, 1, 1, GT_LAYER_MAX_WIDTH, &l->out_c))
        return gt_fail(e, "bad output features '%.*s' (1..%d)", t->len[1], t->f[1],
                       GT_LAYER_MAX_WIDTH);
    return 0;
}

static int parse_pool(const gt_layer_token *t, gt_layer *l, gt_err *e)
{
    if (t->n != 2)
        return gt_fail(e, "expected %.*s:K", t->len[0], t->f[0]);
    if (field_int(t, 1, 1, GT_LAYER_MAX_KERNEL, &l->k))
        return gt_fail(e, "bad pool size '%.*s' (1..%d)", t->len[1], t->f[1], GT_LAYER_MAX_KERNEL);
    return 0;
}

static int parse_dropout(const gt_layer_token *t, gt_layer *l, gt_err *e)
{
    if (t->n != 2)
        return gt_fail(e, "expected dropout:P");
    if (field_prob(t, 1, &l->p))
        return gt_fail(e, "bad dropout probability '%.*s' (0 <= P < 1)", t->len[1], t->f[1]);
    return 0;
}

static int parse_none(const gt_layer_token *t, gt_layer *l, gt_err *e)
{
    if (t->n != 1)
        return gt_fail(e, "%.*s takes no parameters", t->len[0], t->f[0]);
    return 0;
}

/* ---- shapes ------------------------------------------------------------------------------------ */

static void shape_same(const gt_layer *l, long long out[3])
{
    out[0] = l->in_c;
    out[1] = l->in_h;
    out[2] = l->in_w;
}

/* (in + 2 pad - k) / stride + 1, floor; 0 when the kernel does not fit once. */
static long long conv_side(int in, const gt_layer *l)
{
    long long span = (long long)in + 2 * l->pad - l->k;
    return span < 0 ? 0 : span / l->stride + 1;
}

static int shape_conv(const gt_layer *l, long long out[3])
{
    if (l->k < 1 || l->pad < 0 || l->stride < 1)
        return -1;
    out[0] = l->out_c;
    out[1] = conv_side(l->in_h, l);
    out[2] = conv_side(l->in_w, l);
    return 0;
}

static int shape_linear(const gt_layer *l, long long out[3])
{
    out[0] = l->out_c;
    out[1] = out[2] = 1;
    return 0;
}

static int shape_pool(const gt_layer *l, long long out[3])
{
    shape_same(l, out);
    if (l->k < 1)
        return -1;
    out[1] = l->in_h / l->k;
    out[2] = l->in_w / l->k;
    return 0;
}

static int shape_dropout(const gt_layer *l, long long out[3])
{
    shape_same(l, out);
    return l->p >= 0.0f && l->p < 1.0f ? 0 : -1;
}

static int shape_act(const gt_layer *l, long long out[3])
{
    shape_same(l, out);
    return 0;
}

static int shape_gap(const gt_layer *l, long long out[3])
{
    out[0] = l->in_c;
    out[1] = out[2] = 1;
    return 0;
}

/* ---- canonical tokens -------------------------------------------------------------------------- */

static void format_conv(const gt_layer *l, char *buf, size_t size)
{
    /* Stride 1 with a bias keeps the token older checkpoints' model_spec holds. */
    int n = snprintf(buf, size, "conv:%d:%d:%d", l->out_c, l->k, l->pad);
    if (l->stride != 1 && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, ":%d", l->stride);
    if (l->no_bias && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ":nobias");
}

static void format_linear(const gt_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "fc:%d", l->out_c);
}

static void format_pool(const gt_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "%s:%d", gt_layer_kind_of(l->kind)->word, l->k);
}

/* The shortest decimal that reads back as exactly p. */
static void format_dropout(const gt_layer *l, char *buf, size_t size)
{
    char prob[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(prob, sizeof prob, "%.*g", digits, (double)l->p);
        if (strtof(prob, NULL) == l->p)
            break;
    }
    snprintf(buf, size, "dropout:%s", prob);
}

static void format_word(const gt_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "%s", gt_layer_kind_of(l->kind)->word);
}

/* ---- the CPU reference over a batch ------------------------------------------------------------ */

static const float *bias_of(const gt_layer *L, const float *params)
{
    return L->b_len ? params + L->b_off : NULL;
}

static void cpu_conv_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                             int train)
{
    const gt_layer *L = &net->m->layers[l];
    gt_conv2d_forward_strided(net->act[l], b->n, L->in_c, L->in_h, L->in_w, params + L->w_off,
                              bias_of(L, params), L->out_c, L->k, L->pad, L->stride,
                              net->act[l + 1], net->col);
}

static void cpu_conv_backward(gt_cpu_net *net, int l, const float *params, float *grad, int n,
                              int train, const float *dy, float *dx)
{
    const gt_layer *L = &net->m->layers[l];
    gt_conv2d_backward_strided(net->act[l], dy, n, L->in_c, L->in_h, L->in_w, params + L->w_off,
                               L->out_c, L->k, L->pad, L->stride, dx, grad + L->w_off,
                               L->b_len ? grad + L->b_off : NULL, net->col);
}

static void cpu_linear_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                               int train)
{
    const gt_layer *L = &net->m->layers[l];
    gt_linear_forward(net->act[l], b->n, (int)L->in_len, params + L->w_off, bias_of(L, params),
                      L->out_c, net->act[l + 1]);
}

static void cpu_linear_backward(gt_cpu_net *net, int l, const float *params, float *grad, int n,
                                int train, const float *dy, float *dx)
{
    const gt_layer *L = &net->m->layers[l];
    gt_linear_backward(net->act[l], dy, n, (int)L->in_len, params + L->w_off, L->out_c, dx,
                       grad + L->w_off, L->b_len ? grad + L->b_off : NULL);
}

static void cpu_avgpool_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                                int train)
{
    const gt_layer *L = &net->m->layers[l];
    gt_avgpool_forward(net->act[l], b->n, L->in_c, L->in_h, L->in_w, L->k, net->act[l + 1]);
}

static void cpu_avgpool_backward(gt_cpu_net *net, int l, const float *params, float *grad, int n,
                                 int train, const float *dy, float *dx)
{
    const gt_layer *L = &net->m->layers[l];
    gt_avgpool_backward(dy, n, L->in_c, L->in_h, L->in_w, L->k, dx);
}

static void cpu_maxpool_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                                int train)
{
    const gt_layer *L = &net->m->layers[l];
    gt_maxpool_forward(net->act[l], b->n, L->in_c, L->in_h, L->in_w, L->k, net->act[l + 1],
                       net->arg[l]);
}

static void cpu_maxpool_backward(gt_cpu_net *net, int l, const float *params, float *grad, int n,
                                 int train, const float *dy, float *dx)
{
    const gt_layer *L = &net->m->layers[l];
    gt_maxpool_backward(dy, net->arg[l], n, L->in_c, L->in_h, L->in_w, L->k, dx);
}

static void cpu_act_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                            int train)
{
    const gt_layer *L = &net->m->layers[l];
    gt_act_forward(L->kind, net->act[l], net->act[l + 1], (size_t)b->n * L->out_len);
}

static void cpu_act_backward(gt_cpu_net *net, int l, const float *params, float *grad, int n,
                             int train, const float *dy, float *dx)
{
    const gt_layer *L = &net->m->layers[l];
    gt_act_backward(L->kind, net->act[l + 1], dy, dx, (size_t)n * L->out_len);
}

/* Dropout is the identity outside training, by definition of inverted dropout. */
static void cpu_dropout_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                                int train)
{
    const gt_layer *L = &net->m->layers[l];
    if (train)
        gt_dropout_forward(net->act[l], net->act[l + 1], net->mask[l], b->n, L->out_len, L->p,
                           b->seed, b->epoch, b->idx, (uint32_t)l);
    else
        memcpy(net->act[l + 1], net->act[l], (size_t)b->n * L->out_len * sizeof(float));
}

static void cpu_dropout_backward(gt_cpu_net *net, int l, const float *params, float *grad, int n,
                                 int train, const float *dy, float *dx)
{
    const gt_layer *L = &net->m->layers[l];
    size_t len = (size_t)n * L->out_len;
    if (train)
        gt_dropout_backward(dy, net->mask[l], dx, len, L->p);
    else
        memcpy(dx, dy, len * sizeof *dx);
}

/* Training normalises with the batch's statistics and moves the running ones (the buffers); the
 * count of batches is the buffer's last value. Evaluation normalises with the running ones. */
static void cpu_bn_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                           int train)
{
    const gt_layer *L = &net->m->layers[l];
    float *stats = net->buffers + L->s_off;
    size_t plane = (size_t)L->in_h * L->in_w;
    if (train) {
        gt_batchnorm_forward_train(net->act[l], b->n, L->in_c, plane, params + L->w_off,
                                   params + L->b_off, net->bn_momentum, stats, stats + L->in_c, net->act[l + 1],
                                   net->save[l]);
        stats[2 * L->in_c] = net->bn_momentum == 1 ? 1.0f : stats[2 * L->in_c] + 1.0f;
    } else {
        gt_batchnorm_forward_eval(net->act[l], b->n, L->in_c, plane, params + L->w_off,
                                  params + L->b_off, stats, stats + L->in_c, net->act[l + 1],
                                  net->save[l]);
    }
}

static void cpu_bn_backward(gt_cpu_net *net, int l, const float *params, float *grad, int n,
                            int train, const float *dy, float *dx)
{
    const gt_layer *L = &net->m->layers[l];
    gt_batchnorm_backward(net->act[l], dy, n, L->in_c, (size_t)L->in_h * L->in_w,
                          params + L->w_off, net->save[l], train, dx, grad + L->w_off,
                          grad + L->b_off);
}

static void cpu_gap_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                            int train)
{
    const gt_layer *L = &net->m->layers[l];
    gt_gap_forward(net->act[l], b->n, L->in_c, (size_t)L->in_h * L->in_w, net->act[l + 1]);
}

static void cpu_gap_backward(gt_cpu_net *net, int l, const float *params, float *grad, int n,
                             int train, const float *dy, float *dx)
{
    const gt_layer *L = &net->m->layers[l];
    gt_gap_backward(dy, n, L->in_c, (size_t)L->in_h * L->in_w, dx);
}

/* Blocks. Forward: res[ and | compute nothing, as their outputs are the block's input itself
 * (cpu_net.c points act[l + 1] there); ] adds the other branch, act[peer]. Backward runs the
 * other way with the block's gradient buffer net->branch[l]: ] keeps its output gradient there
 * for the other branch and passes it on; | swaps, passing on the kept one (the body's output
 * gradient) and keeping the shortcut's gradient of the block input; res[ adds what is kept to the
 * body's gradient of the block input. */
static void cpu_none_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                             int train)
{
}

static void cpu_res_begin_backward(gt_cpu_net *net, int l, const float *params, float *grad,
                                   int n, int train, const float *dy, float *dx)
{
    if (dx)
        gt_add(dy, net->branch[l], dx, (size_t)n * net->m->layers[l].out_len);
}

static void cpu_res_split_backward(gt_cpu_net *net, int l, const float *params, float *grad,
                                   int n, int train, const float *dy, float *dx)
{
    const gt_layer *L = &net->m->layers[l];
    memcpy(dx, net->branch[l], (size_t)n * L->in_len * sizeof *dx);
    memcpy(net->branch[l], dy, (size_t)n * L->out_len * sizeof *dy);
}

static void cpu_res_end_forward(gt_cpu_net *net, int l, const float *params, const gt_batch *b,
                                int train)
{
    const gt_layer *L = &net->m->layers[l];
    gt_add(net->act[l], net->act[L->peer], net->act[l + 1], (size_t)b->n * L->out_len);
}

static void cpu_res_end_backward(gt_cpu_net *net, int l, const float *params, float *grad, int n,
                                 int train, const float *dy, float *dx)
{
    size_t len = (size_t)n * net->m->layers[l].out_len;
    memcpy(net->branch[l], dy, len * sizeof *dy);
    memcpy(dx, dy, len * sizeof *dx);
}

/* ---- the table --------------------------------------------------------------------------------- */

/* In gt_layer_kind order, which is also the order the spec's error message lists the words. */
static const gt_layer_kind_row layer_kinds[] = {
    {GT_CONV, "conv", 'c', parse_conv, shape_conv, format_conv, cpu_conv_forward,
     cpu_conv_backward},
    {GT_LINEAR, "fc", 'f', parse_linear, shape_linear, format_linear, cpu_linear_forward,
     cpu_linear_backward},
    {GT_AVGPOOL, "avgpool", 0, parse_pool, shape_pool, format_pool, cpu_avgpool_forward,
     cpu_avgpool_backward},
    {GT_MAXPOOL, "maxpool", 0, parse_pool, shape_pool, format_pool, cpu_maxpool_forward,
     cpu_maxpool_backward},
    {GT_RELU, "relu", 0, parse_none, shape_act, format_word, cpu_act_forward, cpu_act_backward},
    {GT_SIGMOID, "sigmoid", 0, parse_none, shape_act, format_word, cpu_act_forward,
     cpu_act_backward},
    {GT_TANH, "tanh", 0, parse_none, shape_act, format_word, cpu_act_forward, cpu_act_backward},
    {GT_DROPOUT, "dropout", 0, parse_dropout, shape_dropout, format_dropout, cpu_dropout_forward,
     cpu_dropout_backward},
    {GT_BATCHNORM, "bn", 'b', parse_none, shape_act, format_word, cpu_bn_forward,
     cpu_bn_backward},
    {GT_GAP, "gap", 0, parse_none, shape_gap, format_word, cpu_gap_forward, cpu_gap_backward},
    /* The block markers' shapes here are their own; gt_layer_model_shape adds the block's. */
    {GT_RES_BEGIN, "res[", 0, parse_none, shape_act, format_word, cpu_none_forward,
     cpu_res_begin_backward},
    {GT_RES_SPLIT, "|", 0, parse_none, shape_act, format_word, cpu_none_forward,
     cpu_res_split_backward},
    {GT_RES_END, "]", 0, parse_none, shape_act, format_word, cpu_res_end_forward,
     cpu_res_end_backward},
};

#define LAYER_KINDS (sizeof layer_kinds / sizeof *layer_kinds)

const gt_layer_kind_row *gt_layer_kind_of(gt_layer_kind kind)
{
    for (size_t i = 0; i < LAYER_KINDS; i++)
        if (layer_kinds[i].kind == kind)
            return &layer_kinds[i];
    return NULL;
}

const gt_layer_kind_row *gt_layer_kind_find(const char *word, size_t len)
{
    for (size_t i = 0; i < LAYER_KINDS; i++)
        if (strlen(layer_kinds[i].word) == len && memcmp(layer_kinds[i].word, word, len) == 0)
            return &layer_kinds[i];
    return NULL;
}

void gt_layer_kind_words(char *buf, size_t size)
{
    size_t used = 0;
    if (size)
        buf[0] = 0;
    for (size_t i = 0; i < LAYER_KINDS; i++) {
        int n = snprintf(buf + used, size - used, "%s%s", i ? " " : "", layer_kinds[i].word);
        if (n < 0 || (size_t)n >= size - used)
            return;
        used += (size_t)n;
    }
}

int gt_layer_out_shape(const gt_layer *l, long long out[3], gt_err *e)
{
    const gt_layer_kind_row *row = gt_layer_kind_of(l->kind);
    if (!row)
        return gt_fail(e, "layer kind %d is not a known kind", (int)l->kind);
    if (row->out_shape(l, out))
        return gt_fail(e, "%s: kernel, padding or probability out of range", row->word);
    return 0;
}

int gt_layer_model_shape(const gt_model *m, int l, long long out[3], gt_err *e)
{
    const gt_layer *L = &m->layers[l];
    if (gt_layer_out_shape(L, out, e))
        return -1;
    if (L->kind != GT_RES_SPLIT && L->kind != GT_RES_END)
        return 0;
    const gt_layer *P = L->peer >= 0 && L->peer < l ? &m->layers[L->peer] : NULL;
    if (!P || !(P->kind == GT_RES_BEGIN || (L->kind == GT_RES_END && P->kind == GT_RES_SPLIT)))
        return gt_fail(e, "%s: its block's layer %d is not before it or not a block's part",
                       gt_layer_kind_of(L->kind)->word, L->peer + 1);
    if (L->kind == GT_RES_SPLIT) { /* the shortcut starts from the block's input */
        out[0] = P->in_c, out[1] = P->in_h, out[2] = P->in_w;
        return 0;
    }
    if (P->in_c == L->in_c && P->in_h == L->in_h && P->in_w == L->in_w)
        return 0;
    /* With a '|', P's input is the body's output and L's the shortcut's; without, P's input is the
     * block's own (the identity shortcut) and L's the body's output. */
    const gt_layer *body = P->kind == GT_RES_SPLIT ? P : L, *shortcut = body == P ? L : P;
    return gt_fail(e, "the residual block's body gives %dx%dx%d but its shortcut %dx%dx%d: they "
                   "must match to be added", body->in_c, body->in_h, body->in_w, shortcut->in_c,
                   shortcut->in_h, shortcut->in_w);
}

void gt_layer_param_lens(const gt_layer *l, size_t lens[3])
{
    size_t o = (size_t)l->out_c;
    lens[0] = lens[1] = lens[2] = 0;
    switch (l->kind) {
    case GT_CONV:
        lens[0] = o * (size_t)l->in_c * (size_t)l->k * (size_t)l->k;
        lens[1] = l->no_bias ? 0 : o;
        break;
    case GT_LINEAR:
        lens[0] = o * l->in_len;
        lens[1] = o;
        break;
    case GT_BATCHNORM:
        lens[0] = lens[1] = (size_t)l->in_c;
        lens[2] = 2 * (size_t)l->in_c + 1;
        break;
    case GT_AVGPOOL:
    case GT_MAXPOOL:
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
    case GT_DROPOUT:
    case GT_GAP:
    case GT_RES_BEGIN:
    case GT_RES_SPLIT:
    case GT_RES_END:
        break;
    }
}
