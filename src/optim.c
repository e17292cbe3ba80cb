/* optim.c - SGD and Adam with torch.optim semantics, their table (one row per optimizer, at the
 * end), and the learning-rate schedule.
 *
 * The per-element arithmetic lives in small inline functions shared by the plain loops (one tight,
 * vectorisable loop per optimizer kind, used under stripe locks) and the relaxed-atomic loops (the
 * lock-free Hogwild store), so both give the same bits. Each step rounds where PyTorch's tensor
 * ops round (mul, then add; addcmul as (value*a)*b; addcdiv as (value*a)/b), which is why floating
 * contraction into FMA is turned off for this file: a fused multiply-add would round once where
 * PyTorch rounds twice, and could differ between the two loop forms. The build compiles this file
 * with -fno-math-errno (a pragma cannot turn it off): sqrtf rounds the same either way, but one
 * that may set errno is a branch, which kept the Adam loop scalar (3.3 M parameters: 10.3 ms). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "gputrain/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

/* Denormals: a parameter whose gradient stays zero (a dead ReLU's weights) sees its momentum decay
 * by 0.9 per update into the denormal range, where every x86 floating-point operation on it is
 * ~100x slower (measured: a lenet5 push went from 9 us to 214 us after ~800 steps). The updates run
 * with flush-to-zero and denormals-are-zero, as GPUs' and most frameworks' fast paths do; values
 * below 1.2e-38 become 0, nothing else changes. The caller's mode is restored. */
typedef struct fp_mode {
    unsigned int csr;
} fp_mode;

static fp_mode fp_flush_denormals(void)
{
    fp_mode m = {0};
#if defined(__SSE__)
    m.csr = _mm_getcsr();
    _mm_setcsr(m.csr | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
#endif
    return m;
}

static void fp_restore(fp_mode m)
{
#if defined(__SSE__)
    _mm_setcsr(m.csr);
#else
    (void)m;
#endif
}

void gt_optim_defaults(gt_optim_cfg *c)
{
    *c = (gt_optim_cfg){
        .kind = GT_OPT_SGD,
        .lr = 0.05f,
        .momentum = 0.9f,
        .nesterov = 0,
        .weight_decay = 0.0f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .schedule = GT_SCHED_CONSTANT,
        .warmup_epochs = 0.0f,
        .step_epochs = 0.0f,
        .gamma = 0.1f,
        .total_epochs = 10.0f,
    };
}

/* The optimizer's row; a kind without one never comes from the parser or a checkpoint, so meeting
 * one is a programming error, not bad input. */
static const gt_optimizer_row *optim_row(const gt_optim_cfg *c)
{
    const gt_optimizer_row *row = gt_optimizer_row_of(c->kind);
    if (!row) {
        fprintf(stderr, "gputrain: internal error: optimizer kind %d has no row\n", (int)c->kind);
        abort();
    }
    return row;
}

static int optim_sgd_nstate(const gt_optim_cfg *c)
{
    return c->momentum != 0.0f ? 1 : 0;
}

static int optim_adam_nstate(const gt_optim_cfg *c)
{
    return 2;
}

int gt_optim_nstate(const gt_optim_cfg *c)
{
    return optim_row(c)->nstate_for(c);
}

float gt_optim_lr(const gt_optim_cfg *c, double epoch)
{
    double lr = c->lr, warmup = c->warmup_epochs;
    if (epoch < 0.0)
        epoch = 0.0;
    if (epoch < warmup)
        return (float)(lr * epoch / warmup);
    switch (c->schedule) {
    case GT_SCHED_STEP:
        if (c->step_epochs > 0.0f)
            lr *= pow(c->gamma, floor(epoch / c->step_epochs));
        break;
    case GT_SCHED_COSINE: {
        double span = (double)c->total_epochs - warmup;
        double frac = span > 0.0 ? (epoch - warmup) / span : 1.0;
        lr *= 0.5 * (1.0 + cos(M_PI * fmin(1.0, frac)));
        break;
    }
    case GT_SCHED_CONSTANT:
        break;
    }
    return (float)lr;
}

gt_optim_step gt_optim_prepare(const gt_optim_cfg *c, uint64_t t, double epoch)
{
    /* t counts from 1; t = 0 would make Adam divide by a zero bias correction. */
    double steps = t ? (double)t : 1.0;
    gt_optim_step st = {
        .lr = gt_optim_lr(c, epoch),
        .bc1 = (float)(1.0 - pow(c->beta1, steps)),
        .bc2 = (float)(1.0 - pow(c->beta2, steps)),
    };
    return st;
}

/* Per-update constants, derived once so every loop sees identical values. */
typedef struct optim_consts {
    float lr, mom, wd;
    float b1, one_b1, b2, one_b2, eps;
    float step_size, bc2_sqrt; /* Adam: lr / bc1 and sqrt(bc2) */
} optim_consts;

static optim_consts optim_consts_make(const gt_optim_cfg *c, const gt_optim_step *st)
{
    optim_consts k = {
        .lr = st->lr,
        .mom = c->momentum,
        .wd = c->weight_decay,
        .b1 = c->beta1,
        .one_b1 = 1.0f - c->beta1,
        .b2 = c->beta2,
        .one_b2 = 1.0f - c->beta2,
        .eps = c->eps,
        .step_size = (float)((double)st->lr / (double)st->bc1),
        .bc2_sqrt = (float)sqrt((double)st->bc2),
    };
    return k;
}

/* grad = g*gscale, then grad.add(param, alpha=wd) as torch does only when wd != 0. */
static inline float optim_grad(float g, float gscale, float p, float wd)
{
    float gi = g * gscale;
    return wd != 0.0f ? gi + wd * p : gi;
}

/* buf.mul_(momentum).add_(grad) */
static inline float optim_momentum(float buf, float g, float mom) { return mom * buf + g; }

static inline float optim_adam_m(float m, float g, const optim_consts *k)
{
    return k->b1 * m + k->one_b1 * g;
}

static inline float optim_adam_v(float v, float g, const optim_consts *k)
{
    return k->b2 * v + (k->one_b2 * g) * g;
}

/* param.addcdiv_(m, sqrt(v)/sqrt(bc2) + eps, value=-lr/bc1) */
static inline float optim_adam_p(float p, float m, float v, const optim_consts *k)
{
    float denom = sqrtf(v) / k->bc2_sqrt + k->eps;
    return p - (k->step_size * m) / denom;
}

/* Plain SGD on one element: the update and --overlap's weight prediction. */
static inline float optim_sgd_one(const optim_consts *k, float p, float g, float gscale)
{
    return p - k->lr * optim_grad(g, gscale, p, k->wd);
}

static void optim_sgd(const optim_consts *k, float *restrict p, const float *restrict g,
                      float gscale, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = optim_sgd_one(k, p[i], g[i], gscale);
}

void gt_optim_predict(const gt_optim_cfg *c, const gt_optim_step *st, float *p, const float *g,
                      float gscale, size_t n)
{
    optim_consts k = optim_consts_make(c, st);
    size_t end = c->decay_end && c->decay_end < n ? c->decay_end : n;
    fp_mode mode = fp_flush_denormals();
    for (size_t i = 0; i < n; i++) {
        if (i == end)
            k.wd = 0.0f;
        if (isfinite(g[i]))
            p[i] = optim_sgd_one(&k, p[i], g[i], gscale);
    }
    fp_restore(mode);
}

static void optim_sgd_momentum(const optim_consts *k, float *restrict p, const float *restrict g,
                               float gscale, float *restrict buf, size_t n)
{
    const float lr = k->lr, wd = k->wd, mom = k->mom;
    for (size_t i = 0; i < n; i++) {
        float b = optim_momentum(buf[i], optim_grad(g[i], gscale, p[i], wd), mom);
        buf[i] = b;
        p[i] = p[i] - lr * b;
    }
}

static void optim_sgd_nesterov(const optim_consts *k, float *restrict p, const float *restrict g,
                               float gscale, float *restrict buf, size_t n)
{
    const float lr = k->lr, wd = k->wd, mom = k->mom;
    for (size_t i = 0; i < n; i++) {
        float gi = optim_grad(g[i], gscale, p[i], wd);
        float b = optim_momentum(buf[i], gi, mom);
        buf[i] = b;
        p[i] = p[i] - lr * (gi + mom * b);
    }
}

static void optim_adam(const optim_consts *k, float *restrict p, const float *restrict g,
                       float gscale, float *restrict m, float *restrict v, size_t n)
{
    const float wd = k->wd;
    for (size_t i = 0; i < n; i++) {
        float gi = optim_grad(g[i], gscale, p[i], wd);
        float mi = optim_adam_m(m[i], gi, k);
        float vi = optim_adam_v(v[i], gi, k);
        m[i] = mi;
        v[i] = vi;
        p[i] = optim_adam_p(p[i], mi, vi, k);
    }
}

static void optim_sgd_apply(const gt_optim_cfg *c, const gt_optim_step *st, float *p,
                            const float *g, float gscale, float *s0, float *s1, size_t n)
{
    optim_consts k = optim_consts_make(c, st);
    if (c->momentum == 0.0f)
        optim_sgd(&k, p, g, gscale, n);
    else if (c->nesterov)
        optim_sgd_nesterov(&k, p, g, gscale, s0, n);
    else
        optim_sgd_momentum(&k, p, g, gscale, s0, n);
}

static void optim_adam_apply(const gt_optim_cfg *c, const gt_optim_step *st, float *p,
                             const float *g, float gscale, float *s0, float *s1, size_t n)
{
    optim_consts k = optim_consts_make(c, st);
    optim_adam(&k, p, g, gscale, s0, s1, n);
}

void gt_optim_apply(const gt_optim_cfg *c, const gt_optim_step *st, float *p, const float *g,
                    float gscale, float *s0, float *s1, size_t n)
{
    const gt_optimizer_row *row = optim_row(c);
    fp_mode mode = fp_flush_denormals();
    row->apply(c, st, p, g, gscale, s0, s1, n);
    fp_restore(mode);
}

void gt_optim_apply_at(const gt_optim_cfg *c, const gt_optim_step *st, size_t at, float *p,
                       const float *g, float gscale, float *s0, float *s1, size_t n, int relaxed)
{
    void (*apply)(const gt_optim_cfg *, const gt_optim_step *, float *, const float *, float,
                  float *, float *, size_t) = relaxed ? gt_optim_apply_relaxed : gt_optim_apply;
    size_t end = c->decay_end;
    size_t k = end == 0 || end >= at + n ? n : end <= at ? 0 : end - at; /* decayed first */
    if (k > 0)
        apply(c, st, p, g, gscale, s0, s1, k);
    if (k < n) {
        gt_optim_cfg none = *c;
        none.weight_decay = 0.0f;
        apply(&none, st, p + k, g + k, gscale, s0 ? s0 + k : NULL, s1 ? s1 + k : NULL, n - k);
    }
}

static inline float load_relaxed(float *x)
{
    float v;
    __atomic_load(x, &v, __ATOMIC_RELAXED);
    return v;
}

static inline void store_relaxed(float *x, float v) { __atomic_store(x, &v, __ATOMIC_RELAXED); }

static void optim_sgd_apply_relaxed(const gt_optim_cfg *c, const gt_optim_step *st, float *p,
                                    const float *g, float gscale, float *s0, float *s1, size_t n)
{
    optim_consts k = optim_consts_make(c, st);
    int momentum = c->momentum != 0.0f;
    int nesterov = momentum && c->nesterov;
    for (size_t i = 0; i < n; i++) {
        float pi = load_relaxed(&p[i]);
        float gi = optim_grad(g[i], gscale, pi, k.wd);
        if (momentum) {
            float b = optim_momentum(load_relaxed(&s0[i]), gi, k.mom);
            store_relaxed(&s0[i], b);
            store_relaxed(&p[i], pi - k.lr * (nesterov ? gi + k.mom * b : b));
        } else {
            store_relaxed(&p[i], pi - k.lr * gi);
        }
    }
}

static void optim_adam_apply_relaxed(const gt_optim_cfg *c, const gt_optim_step *st, float *p,
                                     const float *g, float gscale, float *s0, float *s1, size_t n)
{
    optim_consts k = optim_consts_make(c, st);
    for (size_t i = 0; i < n; i++) {
        float pi = load_relaxed(&p[i]);
        float gi = optim_grad(g[i], gscale, pi, k.wd);
        float mi = optim_adam_m(load_relaxed(&s0[i]), gi, &k);
        float vi = optim_adam_v(load_relaxed(&s1[i]), gi, &k);
        store_relaxed(&s0[i], mi);
        store_relaxed(&s1[i], vi);
        store_relaxed(&p[i], optim_adam_p(pi, mi, vi, &k));
    }
}

void gt_optim_apply_relaxed(const gt_optim_cfg *c, const gt_optim_step *st, float *p,
                            const float *g, float gscale, float *s0, float *s1, size_t n)
{
    const gt_optimizer_row *row = optim_row(c);
    fp_mode mode = fp_flush_denormals();
    row->apply_relaxed(c, st, p, g, gscale, s0, s1, n);
    fp_restore(mode);
}

/* The optimizer table: one row per gt_opt_kind (GT_OPT_KINDS), state named as torch.optim names
 * it in an optimizer's state_dict. */
const gt_optimizer_row gt_optimizer_rows[] = {
    {{"sgd", GT_OPT_SGD}, 1, {"momentum_buffer", NULL}, optim_sgd_nstate, optim_sgd_apply,
     optim_sgd_apply_relaxed},
    {{"adam", GT_OPT_ADAM}, 2, {"exp_avg", "exp_avg_sq"}, optim_adam_nstate, optim_adam_apply,
     optim_adam_apply_relaxed},
};

const gt_optimizer_row *gt_optimizer_row_of(gt_opt_kind k)
{
    for (int i = 0; i < GT_OPT_KINDS; i++)
        if (gt_optimizer_rows[i].head.value == (int)k)
            return &gt_optimizer_rows[i];
    return NULL;
}

const gt_optimizer_row *gt_optimizer_row_named(const char *name)
{
    for (int i = 0; name && i < GT_OPT_KINDS; i++)
        if (strcmp(gt_optimizer_rows[i].head.name, name) == 0)
            return &gt_optimizer_rows[i];
    return NULL;
}

const gt_optimizer_row *gt_optimizer_row_keeping(int nstate)
{
    for (int i = 0; i < GT_OPT_KINDS; i++)
        if (gt_optimizer_rows[i].nstate == nstate)
            return &gt_optimizer_rows[i];
    return NULL;
}
