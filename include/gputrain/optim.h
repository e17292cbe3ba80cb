/* optim.h - optimizers with PyTorch semantics, applied to any contiguous range of parameters so
 * the parameter store can run them stripe by stripe.
 *
 * SGD:  g += wd*p; buf = mom*buf + g (buf starts at 0, so the first buf = g); g = nesterov ? g + mom*buf : buf;
 *       p -= lr*g                                          (torch.optim.SGD, dampening 0)
 * Adam: g += wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
 *       p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)      (torch.optim.Adam, bc = 1 - beta^t)
 * Updates run with denormals flushed to zero (values below 1.2e-38 become 0): a dead unit's
 * momentum would otherwise decay into the denormal range, where x86 arithmetic is ~100x slower.
 * The learning rate follows the schedule as a function of training progress measured in epochs
 * (samples seen / training-set size), so it means the same in every mode and worker count. */
#ifndef GT_OPTIM_H
#define GT_OPTIM_H

#include "gputrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_opt_kind { GT_OPT_SGD = 0, GT_OPT_ADAM } gt_opt_kind;
typedef enum gt_sched_kind { GT_SCHED_CONSTANT = 0, GT_SCHED_STEP, GT_SCHED_COSINE } gt_sched_kind;

typedef struct gt_optim_cfg {
    gt_opt_kind kind;
    float lr;             /* base learning rate */
    float momentum;       /* SGD momentum, 0 = none */
    int nesterov;         /* SGD Nesterov momentum */
    float weight_decay;   /* L2, added to the gradient */
    size_t decay_end;     /* parameters at this index and after take no weight decay (a model
                             with batch norm: its biases and gamma, beta; model.h ndecay);
                             0: every parameter takes it */
    float beta1, beta2, eps; /* Adam */
    gt_sched_kind schedule;
    float warmup_epochs;  /* linear warm-up from 0 over this many epochs, then the schedule */
    float step_epochs;    /* step schedule: multiply by gamma every step_epochs */
    float gamma;
    float total_epochs;   /* cosine: decays to 0 at this point */
} gt_optim_cfg;

/* Scalars for one update. */
typedef struct gt_optim_step {
    float lr;         /* learning rate for this update */
    float bc1, bc2;   /* Adam bias corrections 1 - beta^t */
} gt_optim_step;

void gt_optim_defaults(gt_optim_cfg *c);  /* SGD lr 0.05 momentum 0.9, constant; Adam betas 0.9/0.999, eps 1e-8 */

/* How many state arrays (each nparams floats) the optimizer keeps: 0, 1 (momentum) or 2 (Adam). */
int gt_optim_nstate(const gt_optim_cfg *c);

/* Learning rate at a point of training (epochs, may be fractional). */
float gt_optim_lr(const gt_optim_cfg *c, double epoch);

/* Scalars for update number t (1-based) at the given progress. */
gt_optim_step gt_optim_prepare(const gt_optim_cfg *c, uint64_t t, double epoch);

/* Applies one update to p[0..n) with gradient g*gscale; s0, s1 are the state arrays (momentum
 * buffer, or Adam m and v, zero at the start), NULL where unused. */
void gt_optim_apply(const gt_optim_cfg *c, const gt_optim_step *st, float *p, const float *g,
                    float gscale, float *s0, float *s1, size_t n);

/* gt_optim_apply (relaxed: gt_optim_apply_relaxed) of parameters [at, at + n) of the model's flat
 * array, p pointing at parameter `at`: those from c->decay_end on take no weight decay. */
void gt_optim_apply_at(const gt_optim_cfg *c, const gt_optim_step *st, size_t at, float *p,
                       const float *g, float gscale, float *s0, float *s1, size_t n, int relaxed);
/* The same arithmetic with every access to p, s0 and s1 a relaxed atomic load or store, for the
 * lock-free Hogwild store: concurrent updates may interleave element by element (an update can be
 * lost), but no value is torn and there is no undefined behaviour. */
void gt_optim_apply_relaxed(const gt_optim_cfg *c, const gt_optim_step *st, float *p,
                            const float *g, float gscale, float *s0, float *s1, size_t n);

/* --overlap's weight prediction: the plain SGD step (no momentum) of gradient g over the whole
 * parameter array, p -= lr x (g x gscale + weight_decay x p) (no decay from c->decay_end on), in
 * gt_optim_apply's arithmetic, skipping entries of g that are not
 * finite (a non-finite step is dropped, not pushed). With momentum 0 it is the store's own update
 * of g, bit for bit. */
void gt_optim_predict(const gt_optim_cfg *c, const gt_optim_step *st, float *p, const float *g,
                      float gscale, size_t n);

/* The signature of gt_optim_apply, which every optimizer's update has. */
typedef void (*gt_optim_apply_fn)(const gt_optim_cfg *c, const gt_optim_step *st, float *p,
                                  const float *g, float gscale, float *s0, float *s1, size_t n);

/* One optimizer: its word (--optimizer, logs, checkpoints), its state and its update.
 * gt_optim_nstate, gt_optim_apply and gt_optim_apply_relaxed go through the row (call those, which
 * also set the floating-point mode); checkpoints name the state arrays from it. */
typedef struct gt_optimizer_row {
    gt_name_head head;
    int nstate;                  /* state arrays at most (SGD without momentum keeps none) */
    const char *state_names[2];  /* their torch.optim names, as checkpoints store them */
    int (*nstate_for)(const gt_optim_cfg *c);  /* the arrays this configuration keeps */
    gt_optim_apply_fn apply;                   /* the update */
    gt_optim_apply_fn apply_relaxed;           /* the same with relaxed atomics (lock-free) */
} gt_optimizer_row;

#define GT_OPT_KINDS 2 /* rows of the table, one per gt_opt_kind */
extern const gt_optimizer_row gt_optimizer_rows[GT_OPT_KINDS];

/* The row of kind k, of the word name ("sgd", as checkpoints store it), or of the optimizer that
 * keeps nstate state arrays at most; NULL when no row has it. */
const gt_optimizer_row *gt_optimizer_row_of(gt_opt_kind k);
const gt_optimizer_row *gt_optimizer_row_named(const char *name);
const gt_optimizer_row *gt_optimizer_row_keeping(int nstate);

#ifdef __cplusplus
}
#endif
#endif
