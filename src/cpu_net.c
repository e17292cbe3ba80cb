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

/* A parameter or buffer range [off, off + len) inside an array of total floats. */
static int net_range_ok(size_t off, size_t len, size_t total)
{
    return off <= total && len <= total - off;
}

/* Every shape, length and offset gt_cpu_net_run indexes by must agree with the chain of layers,
 * the parameter array and the buffer array, so that a hand-built or damaged model fails here, not
 * in a buffer. */
static int net_check_model(const gt_model *m, int *depth, gt_err *e)
{
    if (m->nlayers < 1 || m->nlayers > GT_MAX_LAYERS)
        return gt_fail(e, "model %s: %d layers (expected 1 to %d)", m->name, m->nlayers,
                       GT_MAX_LAYERS);
    if (gt_model_block_depths(m, depth, e))
        return -1;
    if (m->norm.on && (m->in_c > GT_NORM_MAX_C || m->in_c < 1))
        return gt_fail(e, "model %s: %d input channels to normalise (at most %d)", m->name,
                       m->in_c, GT_NORM_MAX_C);
    int c = m->in_c, h = m->in_h, w = m->in_w;
    for (int l = 0; l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        long long out[3];
        size_t lens[3];
        gt_err why;
        int ok = L->in_c == c && L->in_h == h && L->in_w == w;
        if (ok && gt_layer_model_shape(m, l, out, &why))
            return gt_fail(e, "model %s: layer %d: %s", m->name, l, why.msg);
        long long oc = out[0], oh = out[1], ow = out[2];
        gt_layer_param_lens(L, lens);
        ok = ok && c >= 1 && h >= 1 && w >= 1 && oc >= 1 && oh >= 1 && ow >= 1 &&
             oc <= INT_MAX && oh <= INT_MAX && ow <= INT_MAX && L->out_c == oc &&
             L->out_h == oh && L->out_w == ow && L->in_len == (size_t)c * h * w &&
             L->out_len == (size_t)oc * oh * ow && L->w_len == lens[0] && L->b_len == lens[1] &&
             L->s_len == lens[2] && net_range_ok(L->w_off, L->w_len, m->nparams) &&
             net_range_ok(L->b_off, L->b_len, m->nparams) &&
             net_range_ok(L->s_off, L->s_len, m->nbuffers);
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

/* Layer l's extra buffers: dropout's mask, maxpool's argmax, batch norm's statistics, a block
 * marker's gradient buffer; and act[l + 1], which for res[ and | is the block's input itself. */
static int net_alloc_layer(gt_cpu_net *net, int l, const int *depth)
{
    const gt_layer *L = &net->m->layers[l];
    size_t nb = (size_t)net->max_batch;
    switch (L->kind) {
    case GT_RES_BEGIN:
    case GT_RES_SPLIT:
        net->act[l + 1] = net->act[L->kind == GT_RES_BEGIN ? l : L->peer];
        net->branch[l] = net->grad_branch[depth[l]];
        return 0;
    case GT_RES_END:
        net->branch[l] = net->grad_branch[depth[l]];
        break;
    case GT_DROPOUT:
        if (!(net->mask[l] = net_alloc(nb, L->out_len, 1)))
            return -1;
        break;
    case GT_MAXPOOL:
        if (!(net->arg[l] = net_alloc(nb, L->out_len, sizeof(int32_t))))
            return -1;
        break;
    case GT_BATCHNORM:
        if (!(net->save[l] = net_alloc(2, (size_t)L->in_c, sizeof(float))))
            return -1;
        break;
    case GT_CONV:
    case GT_LINEAR:
    case GT_AVGPOOL:
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
    case GT_GAP:
        break;
    }
    return (net->act[l + 1] = net_alloc(nb, L->out_len, sizeof(float))) != NULL ? 0 : -1;
}

int gt_cpu_net_create(gt_cpu_net *net, const gt_model *m, int max_batch, gt_err *e)
{
    int depth[GT_MAX_LAYERS];
    memset(net, 0, sizeof *net);
    if (max_batch < 1)
        return gt_fail(e, "batch size %d: must be at least 1", max_batch);
    if (net_check_model(m, depth, e))
        return -1;
    size_t in_len = m->layers[0].in_len, max_act = in_len, col_len = 0;
    int blocks = 0;
    for (int l = 0; l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        max_act = L->out_len > max_act ? L->out_len : max_act;
        blocks = L->kind == GT_RES_BEGIN && depth[l] + 1 > blocks ? depth[l] + 1 : blocks;
        if (L->kind == GT_CONV) {
            size_t len = gt_conv2d_col_len_strided(L->in_c, L->in_h, L->in_w, L->k, L->pad,
                                                   L->stride);
            col_len = len > col_len ? len : col_len;
        }
    }
    net->m = m;
    net->max_batch = max_batch;
    net->bn_momentum = GT_BN_MOMENTUM;
    size_t nb = (size_t)max_batch;
    int layer = 0; /* whose output was being allocated when one failed; 0: the input */
    int ok = (net->xbytes = net_alloc(nb, in_len, 1)) &&
             (net->labels = net_alloc(nb, 1, sizeof *net->labels)) &&
             (net->act[0] = net_alloc(nb, in_len, sizeof(float))) &&
             (net->grad_act = net_alloc(nb, max_act, sizeof(float))) &&
             (net->grad_act2 = net_alloc(nb, max_act, sizeof(float)));
    char what[96]; /* the buffer being allocated, for the message */
    snprintf(what, sizeof what, "the input and the gradients (%zu values a sample)", max_act);
    for (int d = 0; ok && d < blocks; d++)
        ok = (net->grad_branch[d] = net_alloc(nb, max_act, sizeof(float))) != NULL;
    for (int l = 0; ok && l < m->nlayers; l++) {
        layer = l + 1;
        snprintf(what, sizeof what, "the output of layer %d (%zu values a sample)", layer,
                 m->layers[l].out_len);
        ok = net_alloc_layer(net, l, depth) == 0;
    }
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
    gt_free(net->labels);
    gt_free(net->act[0]);
    for (int l = 0; l < GT_MAX_LAYERS; l++) {
        int alias = 0; /* res[ and | outputs are an earlier layer's activations */
        for (int j = 0; j <= l && !alias; j++)
            alias = net->act[l + 1] == net->act[j];
        if (!alias)
            gt_free(net->act[l + 1]);
        gt_free(net->mask[l]);
        gt_free(net->arg[l]);
        gt_free(net->save[l]);
    }
    for (int d = 0; d < GT_MAX_BLOCK_DEPTH; d++)
        gt_free(net->grad_branch[d]);
    gt_free(net->grad_act);
    gt_free(net->grad_act2);
    gt_free(net->col);
    memset(net, 0, sizeof *net);
}

/* The input step with the model's per-channel normalisation (model.h): the formula of the GPU's
 * input kernel (kernels.cu), so both give the same floats. */
static void net_input(const gt_model *m, const uint8_t *src, float *dst, int n)
{
    size_t plane = (size_t)m->in_h * m->in_w, len = (size_t)n * m->in_c * plane;
    if (!m->norm.on) {
        gt_input_normalize(src, dst, len);
        return;
    }
    for (size_t p = 0; p < len; p += plane) {
        int ch = (int)(p / plane % (size_t)m->in_c);
        float mean = m->norm.mean[ch], std = m->norm.std[ch];
        for (size_t j = p; j < p + plane; j++)
            dst[j] = ((float)src[j] / 255.0f - mean) / std;
    }
}

/* The batch's bytes (augmented where training: the same function as the CUDA staging gather)
 * and labels, then the input step. */
static void net_gather(gt_cpu_net *net, const gt_batch *b, int train)
{
    size_t in_len = net->m->layers[0].in_len;
    const gt_augment *aug = train ? b->aug : NULL;
    for (int i = 0; i < b->n; i++) {
        gt_data_copy_sample(b->ds, b->idx[i], aug, b->seed, b->epoch, net->xbytes + i * in_len);
        net->labels[i] = b->ds->labels[b->idx[i]];
    }
    net_input(net->m, net->xbytes, net->act[0], b->n);
}

/* A batch larger than max_batch would overrun the buffers, and batch norm without its buffers
 * cannot run: either returns NaN and counts nothing. */
double gt_cpu_net_run(gt_cpu_net *net, const float *params, float *buffers, const gt_batch *b,
                      int train, float *grad, int *correct)
{
    const gt_model *m = net->m;
    int n = b->n, hits = 0;
    if (correct)
        *correct = 0;
    if (n < 1 || n > net->max_batch || (m->nbuffers && !buffers))
        return n == 0 ? 0.0 : NAN;
    net->buffers = buffers;
    const gt_layer_kind_row *rows[GT_MAX_LAYERS];
    for (int l = 0; l < m->nlayers; l++)
        if (!(rows[l] = gt_layer_kind_of(m->layers[l].kind)))
            return NAN; /* gt_cpu_net_create refuses such a model; this one changed since */
    net_gather(net, b, train);
    for (int l = 0; l < m->nlayers; l++)
        rows[l]->cpu_forward(net, l, params, b, train);
    float *dy = net->grad_act, *dx = net->grad_act2;
    double loss = gt_softmax_xent(net->act[m->nlayers], net->labels, n, m->nclasses,
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

double gt_cpu_net_step(gt_cpu_net *net, const float *params, const gt_batch *b, int train,
                       float *grad, int *correct)
{
    return gt_cpu_net_run(net, params, NULL, b, train, grad, correct);
}
