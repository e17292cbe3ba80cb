/* optim_elem.cuh - one element of the GPU twin of src/optim.c: the per-update constants and the
 * arithmetic of SGD (plain, momentum, Nesterov) and Adam on one parameter, shared by the
 * optimizer's own kernels (optim_cuda.cu) and the peer all-reduce that applies the update as it
 * sums (p2p_allreduce.cu).
 *
 * Each element goes through the same float operations in the same order as the CPU loops, and
 * every one of them is an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, __fsqrt_rn,
 * __fdiv_rn), which nvcc never contracts into a fused multiply-add. The per-update constants are
 * derived on the host by the same expressions as optim.c. So a GPU update equals gt_optim_apply
 * bit for bit, and replicas that start equal stay equal. */
#ifndef GT_OPTIM_ELEM_CUH
#define GT_OPTIM_ELEM_CUH

#include "gputrain/optim.h"

#include <math.h>

/* Per-update constants, as optim.c's optim_consts_make derives them. */
typedef struct optim_consts {
    float lr, mom, wd;
    float b1, one_b1, b2, one_b2, eps;
    float step_size, bc2_sqrt;
    size_t decay_end;  /* elements from here on take no weight decay; 0: all take it */
} optim_consts;

static inline optim_consts optim_consts_make(const gt_optim_cfg *c, const gt_optim_step *st)
{
    optim_consts k;
    k.lr = st->lr;
    k.mom = c->momentum;
    k.wd = c->weight_decay;
    k.b1 = c->beta1;
    k.one_b1 = 1.0f - c->beta1;
    k.b2 = c->beta2;
    k.one_b2 = 1.0f - c->beta2;
    k.eps = c->eps;
    k.step_size = (float)((double)st->lr / (double)st->bc1);
    k.bc2_sqrt = (float)sqrt((double)st->bc2);
    k.decay_end = c->decay_end;
    return k;
}

/* The update rules, as kernels' template arguments. */
typedef enum optim_rule_kind {
    OPTIM_SGD = 1,
    OPTIM_MOMENTUM,
    OPTIM_NESTEROV,
    OPTIM_ADAM
} optim_rule_kind;

/* The rule of a configuration. */
static inline optim_rule_kind optim_rule(const gt_optim_cfg *c)
{
    if (c->kind == GT_OPT_ADAM)
        return OPTIM_ADAM;
    if (c->momentum == 0.0f)
        return OPTIM_SGD;
    return c->nesterov ? OPTIM_NESTEROV : OPTIM_MOMENTUM;
}

__device__ static inline float optim_grad(float g, float gscale, float p, float wd)
{
    float gi = __fmul_rn(g, gscale);
    return wd != 0.0f ? __fadd_rn(gi, __fmul_rn(wd, p)) : gi;
}

__device__ static inline float optim_momentum(float buf, float g, float mom)
{
    return __fadd_rn(__fmul_rn(mom, buf), g);
}

/* The weight decay of element i of the parameter array (gt_optim_apply_at's split). */
__device__ static inline float optim_wd(const optim_consts &k, size_t i)
{
    return k.decay_end != 0 && i >= k.decay_end ? 0.0f : k.wd;
}

/* Plain SGD on element i: also --overlap's weight prediction (optim_predict_one). */
__device__ static inline float optim_sgd_one(const optim_consts &k, float p, float g, float gscale,
                                             size_t i)
{
    return __fsub_rn(p, __fmul_rn(k.lr, optim_grad(g, gscale, p, optim_wd(k, i))));
}

/* Element i of p (and of the state arrays the rule has: s0 the momentum buffer or Adam's first
 * moment, s1 Adam's second) updated by gradient g. */
template <int RULE>
__device__ static inline void optim_elem(const optim_consts &k, float *p, float g, float gscale,
                                         float *s0, float *s1, size_t i)
{
    float wd = optim_wd(k, i);
    if (RULE == OPTIM_SGD) {
        p[i] = optim_sgd_one(k, p[i], g, gscale, i);
    } else if (RULE == OPTIM_MOMENTUM) {
        float b = optim_momentum(s0[i], optim_grad(g, gscale, p[i], wd), k.mom);
        s0[i] = b;
        p[i] = __fsub_rn(p[i], __fmul_rn(k.lr, b));
    } else if (RULE == OPTIM_NESTEROV) {
        float gi = optim_grad(g, gscale, p[i], wd);
        float b = optim_momentum(s0[i], gi, k.mom);
        s0[i] = b;
        p[i] = __fsub_rn(p[i], __fmul_rn(k.lr, __fadd_rn(gi, __fmul_rn(k.mom, b))));
    } else {
        float gi = optim_grad(g, gscale, p[i], wd);
        float mi = __fadd_rn(__fmul_rn(k.b1, s0[i]), __fmul_rn(k.one_b1, gi));
        float vi = __fadd_rn(__fmul_rn(k.b2, s1[i]), __fmul_rn(__fmul_rn(k.one_b2, gi), gi));
        s0[i] = mi;
        s1[i] = vi;
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
        p[i] = __fsub_rn(p[i], __fdiv_rn(__fmul_rn(k.step_size, mi), denom));
    }
}

#endif
