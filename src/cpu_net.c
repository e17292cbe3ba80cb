/* cpu_net.c - gt_cpu_net: a whole gt_model over one minibatch on one thread, the CPU reference of
 * a training step. Its buffers are sized once at create; each layer runs through its row of the
 * layer-kind table (layer_kinds.c), whose adapters call the layer math of layers.c. */
#include "gputrain/cpu_net.h"

#include "gputrain/layer_kinds.h"
#include "gputrain/layers.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* count * per floats-or-bytes of elem size each, or NULL when the product overflows. */
static void *net_alloc(size_t count, size_t per, size_t elem)
{
    size_t items, bytes;
    if (__builtin_mul_overflow(count, per, &items) || __builtin_mul_overflow(items, elem, &bytes))
        return NULL;
    return gt_alloc(bytes);
}

/* Every shape, length and offset gt_cpu_net_step indexes by must agree with the chain of layers
 * and the parameter array, so that a hand-built or damaged model fails here, not in a buffer. */
static int net_check_model(const gt_model *m, gt_err *e)
{
    if (m->nlayers < 1 || m->nlayers > GT_MAX_LAYERS)
        return gt_fail(e, "model %s: %d layers (expected 1 to %d)", m->name, m->nlayers,
                       GT_MAX_LAYERS);
    int c = m->in_c, h = m->in_h, w = m->in_w;
    for (int l = 0; l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        long long out[3];
        gt_err why;
        if (gt_layer_out_shape(L, out, &why))
            return gt_fail(e, "model %s: layer %d: %s", m->name, l, why.msg);
        long long oc = out[0], oh = out[1], ow = out[2];
        int ok = c >= 1 && h >= 1 && w >= 1 && oc >= 1 && oh >= 1 && ow >= 1 &&
                 oh <= INT_MAX && ow <= INT_MAX && L->in_c == c && L->in_h == h && L->in_w == w &&
                 L->out_c == oc && L->out_h == oh && L->out_w == ow &&
                 L->in_len == (size_t)c * h * w && L->out_len == (size_t)oc * oh * ow;
        size_t want_w = L->kind == GT_CONV     ? (size_t)oc * c * L->k * L->k
                        : L->kind == GT_LINEAR ? (size_t)oc * L->in_len
                                               : 0;
        ok = ok && L->w_len == want_w && (L->b_len == 0 || (want_w && L->b_len == (size_t)oc)) &&
             L->w_off <= m->nparams && L->w_len <= m->nparams - L->w_off &&
             L->b_off <= m->nparams && L->b_len <= m->nparams - L->b_off;
        if (!ok)
            return gt_fail(e, "model %s: layer %d (kind %d) does not fit its %d x %d x %d input",
                           m->name, l, (int)L->kind, c, h, w);
        c = (int)oc, h = (int)oh, w = (int)ow;
    }
    size_t outputs = m->layers[m->nlayers - 1].out_len;
    if (m->nclasses < 1 || outputs != (size_t)m->nclasses)
        return gt_fail(e, "model %s: last layer gives %zu outputs for %d classes", m->name,
                       outputs, m->nclasses);
    return 0;
}

int gt_cpu_net_create(gt_cpu_net *net, const gt_model *m, int max_batch, gt_err *e)
{
    memset(net, 0, sizeof *net);
    if (max_batch < 1)
        return gt_fail(e, "batch size %d: must be at least 1", max_batch);
    if (net_check_model(m, e))
        return -1;
    size_t in_len = m->layers[0].in_len, max_act = in_len, col_len = 0;
    net->m = m;
    net->max_batch = max_batch;
    size_t nb = (size_t)max_batch;
    int layer = 0; /* whose output was being allocated when one failed; 0: the input */
    int ok = (net->xbytes = net_alloc(nb, in_len, 1)) && (net->ybytes = net_alloc(nb, 1, 1)) &&
             (net->act[0] = net_alloc(nb, in_len, sizeof(float)));
    for (int l = 0; ok && l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        layer = l + 1;
        max_act = L->out_len > max_act ? L->out_len : max_act;
        ok = (net->act[l + 1] = net_alloc(nb, L->out_len, sizeof(float))) != NULL;
        if (ok && L->kind == GT_DROPOUT)
            ok = (net->mask[l] = net_alloc(nb, L->out_len, 1)) != NULL;
        if (ok && L->kind == GT_MAXPOOL)
            ok = (net->arg[l] = net_alloc(nb, L->out_len, sizeof(int32_t))) != NULL;
        if (L->kind == GT_CONV) {
            size_t len = gt_conv2d_col_len(L->in_c, L->k, L->out_h, L->out_w);
            col_len = len > col_len ? len : col_len;
        }
    }
    char what[96]; /* the buffer being allocated, for the message */
    if (ok)
        snprintf(what, sizeof what, "the gradients (%zu values a sample)", max_act);
    else if (layer)
        snprintf(what, sizeof what, "the output of layer %d (%zu values a sample)", layer,
                 m->layers[layer - 1].out_len);
    else
        snprintf(what, sizeof what, "the input (%zu values a sample)", in_len);
    ok = ok && (net->grad_act = net_alloc(nb, max_act, sizeof(float))) &&
         (net->grad_act2 = net_alloc(nb, max_act, sizeof(float)));
    if (ok && col_len) {
        snprintf(what, sizeof what, "the unfolded convolution input (%zu values)", col_len);
        ok = (net->col = net_alloc(col_len, 1, sizeof(float))) != NULL;
    }
    if (!ok) {
        gt_cpu_net_destroy(net);
        return gt_fail(e, "model %s: out of memory for the CPU buffers of %d samples at a time: "
                       "%s", m->name, max_batch, what);
    }
    return 0;
}

void gt_cpu_net_destroy(gt_cpu_net *net)
{
    gt_free(net->xbytes);
    gt_free(net->ybytes);
    for (int l = 0; l <= GT_MAX_LAYERS; l++)
        gt_free(net->act[l]);
    for (int l = 0; l < GT_MAX_LAYERS; l++) {
        gt_free(net->mask[l]);
        gt_free(net->arg[l]);
    }
    gt_free(net->grad_act);
    gt_free(net->grad_act2);
    gt_free(net->col);
    memset(net, 0, sizeof *net);
}

static void net_gather(gt_cpu_net *net, const gt_batch *b)
{
    size_t in_len = net->m->layers[0].in_len;
    for (int i = 0; i < b->n; i++) {
        memcpy(net->xbytes + i * in_len, b->ds->images + (size_t)b->idx[i] * in_len, in_len);
        net->ybytes[i] = b->ds->labels[b->idx[i]];
    }
    gt_input_normalize(net->xbytes, net->act[0], (size_t)b->n * in_len);
}

/* A batch larger than max_batch would overrun the buffers: it returns NaN and counts nothing. */
double gt_cpu_net_step(gt_cpu_net *net, const float *params, const gt_batch *b, int train,
                       float *grad, int *correct)
{
    const gt_model *m = net->m;
    int n = b->n, hits = 0;
    if (correct)
        *correct = 0;
    if (n < 1 || n > net->max_batch)
        return n == 0 ? 0.0 : NAN;
    const gt_layer_kind_row *rows[GT_MAX_LAYERS];
    for (int l = 0; l < m->nlayers; l++)
        if (!(rows[l] = gt_layer_kind_of(m->layers[l].kind)))
            return NAN; /* gt_cpu_net_create refuses such a model; this one changed since */
    net_gather(net, b);
    for (int l = 0; l < m->nlayers; l++)
        rows[l]->cpu_forward(net, l, params, b, train);
    float *dy = net->grad_act, *dx = net->grad_act2;
    double loss = gt_softmax_xent(net->act[m->nlayers], net->ybytes, n, m->nclasses,
                                  1.0f / (float)n, grad ? dy : NULL, &hits);
    if (correct)
        *correct = hits;
    if (!grad)
        return loss;
    memset(grad, 0, m->nparams * sizeof *grad);
    for (int l = m->nlayers - 1; l >= 0; l--) {
        if (l == 0 && !rows[l]->param_prefix)
            break; /* the input needs no gradient */
        rows[l]->cpu_backward(net, l, params, grad, n, train, dy, l ? dx : NULL);
        float *t = dy;
        dy = dx;
        dx = t;
    }
    return loss;
}
