/* fused_plan.cu - which models the fused LeNet step of fused_cuda.cu can train, and the shapes,
 * buffer lengths, shared memory and gradient segments its kernels work from. Host code only. */
#include "gt_cuda.h"

#include <string.h>

static int plan_is_act(gt_layer_kind k)
{
    return k == GT_RELU || k == GT_SIGMOID || k == GT_TANH;
}

/* The layer kinds the fused kernels implement, in order; PLAN_ACT is any activation. */
enum { PLAN_ACT = -1 };

static int plan_shape_matches(const gt_model *m)
{
    static const int want[] = {GT_CONV,   PLAN_ACT, GT_AVGPOOL, GT_CONV,   PLAN_ACT, GT_AVGPOOL,
                               GT_LINEAR, PLAN_ACT, GT_LINEAR,  PLAN_ACT, GT_LINEAR};
    int n = (int)(sizeof want / sizeof *want);
    if (m->nlayers != n)
        return 0;
    for (int l = 0; l < n; l++) {
        const gt_layer *L = &m->layers[l];
        if (want[l] == PLAN_ACT ? !plan_is_act(L->kind) : (int)L->kind != want[l])
            return 0;
        if (L->kind == GT_CONV && (L->stride != 1 || L->b_len == 0))
            return 0; /* the kernels stride by 1 and add a bias */
    }
    return 1;
}

static gt_fused_conv plan_conv(const gt_layer *conv, const gt_layer *act, const gt_layer *pool)
{
    gt_fused_conv cv;
    memset(&cv, 0, sizeof cv);
    cv.in_c = conv->in_c;
    cv.in_h = conv->in_h;
    cv.in_w = conv->in_w;
    cv.out_c = conv->out_c;
    cv.k = conv->k;
    cv.pad = conv->pad;
    cv.out_h = conv->out_h;
    cv.out_w = conv->out_w;
    cv.act = act->kind;
    cv.pool = pool->k;
    cv.pool_h = pool->out_h;
    cv.pool_w = pool->out_w;
    cv.w_off = conv->w_off;
    cv.b_off = conv->b_off;
    cv.b_len = conv->b_len;
    return cv;
}

static gt_fused_fc plan_fc(const gt_layer *fc, const gt_layer *act)
{
    gt_fused_fc f;
    memset(&f, 0, sizeof f);
    f.in = (int)fc->in_len;
    f.out = fc->out_c;
    f.act = act ? (int)act->kind : -1;
    f.w_off = fc->w_off;
    f.b_off = fc->b_off;
    f.b_len = fc->b_len;
    return f;
}

static size_t plan_padded(const gt_fused_conv *cv)
{
    return (size_t)cv->in_c * (cv->in_h + 2 * cv->pad) * (cv->in_w + 2 * cv->pad);
}

static size_t plan_weights(const gt_fused_conv *cv)
{
    return (size_t)cv->out_c * cv->in_c * cv->k * cv->k;
}

/* Scratch of fused_conv_wgrad for n_o output channels of cv: partial rows per chunk. */
static size_t plan_wgrad_scratch(const gt_fused_conv *cv, int n_o)
{
    int rows = n_o * cv->in_c * GT_FUSED_K, items = rows + n_o;
    int nchunk = GT_FUSED_THREADS / items;
    nchunk = nchunk < 1 ? 1 : nchunk > cv->out_h ? cv->out_h : nchunk;
    return (size_t)rows * nchunk * GT_FUSED_K + (size_t)n_o * nchunk;
}

/* Shared memory of each kernel, carved as fused_kernels.cuh carves it. */
static void plan_smem(gt_fused_net *f)
{
    const gt_fused_conv *c1 = &f->conv[0], *c2 = &f->conv[1];
    const gt_fused_fc *f1 = &f->fc[0], *f2 = &f->fc[1], *f3 = &f->fc[2];
    size_t kk = GT_FUSED_K * GT_FUSED_K, border = GT_FUSED_K - 1 - c2->pad;
    size_t fwd = plan_padded(c1) + plan_padded(c2) + plan_weights(c1) + c1->out_c +
                 plan_weights(c2) + c2->out_c;
    fwd += (size_t)GT_FUSED_FC_SAMPLES * (f1->in + 2 * f1->out + 2 * f2->out + 2 * f3->out);
    fwd += 4 * (size_t)GT_FUSED_THREADS; /* fused_dense_back's partial sums */
    int n_o = c2->out_c < GT_FUSED_WGRAD_OUT ? c2->out_c : GT_FUSED_WGRAD_OUT;
    size_t wgrad2 = (size_t)n_o * c2->out_h * c2->out_w + plan_padded(c2) +
                    plan_wgrad_scratch(c2, n_o);
    size_t back1 = (size_t)c2->out_c * (c2->out_h + 2 * border) * (c2->out_w + 2 * border) +
                   (size_t)c2->out_c * kk + (size_t)c2->in_h * c2->in_w +
                   (size_t)c1->out_h * c1->out_w + plan_padded(c1);
    size_t dgrad = (size_t)gt_fused_dgrad_groups(c2->in_h, c2->in_w, c2->out_c, GT_FUSED_THREADS) *
                   c2->in_h * c2->in_w;
    back1 += dgrad > plan_wgrad_scratch(c1, 1) ? dgrad : plan_wgrad_scratch(c1, 1);
    f->smem_forward = fwd * sizeof(float);
    f->smem_backward = (wgrad2 > back1 ? wgrad2 : back1) * sizeof(float);
    f->back_blocks = c1->out_c + (c2->out_c + GT_FUSED_WGRAD_OUT - 1) / GT_FUSED_WGRAD_OUT;
}

/* The kernels are unrolled for one kernel size and pooling window; padding must leave the
 * backward pass's border (K - 1 - pad) non-negative. */
static int plan_conv_ok(const gt_fused_conv *cv)
{
    return cv->k == GT_FUSED_K && cv->pool == GT_FUSED_POOL && cv->pad >= 0 &&
           cv->pad < GT_FUSED_K && cv->pool_h >= 1 && cv->pool_w >= 1;
}

int gt_fused_plan(const gt_model *m, size_t max_smem, gt_fused_net *f)
{
    memset(f, 0, sizeof *f);
    if (!plan_shape_matches(m))
        return 0;
    const gt_layer *L = m->layers;
    f->conv[0] = plan_conv(&L[0], &L[1], &L[2]);
    f->conv[1] = plan_conv(&L[3], &L[4], &L[5]);
    f->fc[0] = plan_fc(&L[6], &L[7]);
    f->fc[1] = plan_fc(&L[8], &L[9]);
    f->fc[2] = plan_fc(&L[10], NULL);
    f->nparams = m->nparams;
    f->in_len = L[0].in_len;
    f->a1_len = L[1].out_len;
    f->p1_len = L[2].out_len;
    f->a2_len = L[4].out_len;
    f->p2_len = L[5].out_len;
    f->part_len = plan_weights(&f->conv[1]) + f->conv[1].out_c + plan_weights(&f->conv[0]) +
                  f->conv[0].out_c;
    /* Each parameter must be written by exactly one reduction segment: no others may exist. */
    size_t covered = 0;
    for (int l = 0; l < m->nlayers; l++)
        covered += L[l].w_len + L[l].b_len;
    /* The input gradient into conv1's channels takes its outputs 2 x 2. */
    int even = f->conv[1].in_h % 2 == 0 && f->conv[1].in_w % 2 == 0;
    if (covered != m->nparams || !plan_conv_ok(&f->conv[0]) || !plan_conv_ok(&f->conv[1]) || !even)
        return 0;
    plan_smem(f);
    return f->smem_forward <= max_smem && f->smem_backward <= max_smem;
}

static void plan_add_seg(gt_fused_net *f, int kind, size_t dst, size_t len, size_t col,
                         const float *dy, int dy_len, const float *x, int x_len)
{
    if (len == 0)
        return;
    gt_fused_seg *s = &f->seg[f->nsegs++];
    s->kind = kind;
    s->dst = dst;
    s->len = len;
    s->col = col;
    s->dy = dy;
    s->dy_len = dy_len;
    s->x = x;
    s->x_len = x_len;
}

/* The partials row is [conv2 w, conv2 b, conv1 w, conv1 b]; a linear layer's weight gradient is
 * dy x^T summed over the batch, its bias gradient the sum of dy. */
void gt_fused_plan_segs(gt_fused_net *f)
{
    const gt_fused_conv *c1 = &f->conv[0], *c2 = &f->conv[1];
    const gt_fused_fc *fc = f->fc;
    size_t w2 = plan_weights(c2), w1 = plan_weights(c1);
    const float *dy[3] = {f->dh1, f->dh2, f->dz}, *x[3] = {f->p2, f->h1, f->h2};
    f->nsegs = 0;
    plan_add_seg(f, GT_FUSED_PART, c2->w_off, w2, 0, NULL, 0, NULL, 0);
    plan_add_seg(f, GT_FUSED_PART, c2->b_off, c2->b_len, w2, NULL, 0, NULL, 0);
    plan_add_seg(f, GT_FUSED_PART, c1->w_off, w1, w2 + c2->out_c, NULL, 0, NULL, 0);
    plan_add_seg(f, GT_FUSED_PART, c1->b_off, c1->b_len, w2 + c2->out_c + w1, NULL, 0, NULL, 0);
    for (int l = 0; l < 3; l++) {
        plan_add_seg(f, GT_FUSED_OUTER, fc[l].w_off, (size_t)fc[l].out * fc[l].in, 0, dy[l],
                     fc[l].out, x[l], fc[l].in);
        plan_add_seg(f, GT_FUSED_SUM, fc[l].b_off, fc[l].b_len, 0, dy[l], fc[l].out, NULL, 0);
    }
}
