/* device.h - what a worker computes on: the CPU reference or one GPU, behind one small table of
 * operations, so the worker loop (src/train.c) is the same for both.
 *
 * A device holds its own copy of the parameters. The worker pulls the store into d->params (host
 * memory: plain for the CPU, pinned for a GPU), calls load_params, runs train_step, which leaves
 * the mean gradient in d->grad (host memory, pinned for a GPU), and pushes d->grad to the store.
 *
 * A model with batch norm has buffers (model.h: running means, variances and counts), which the
 * optimizer never touches. load_params loads d->buffers beside d->params; evaluate normalises with
 * them. A training step normalises with its batch's statistics and then, without keep_grad, leaves
 * them in d->stats in the buffers' layout (each batch norm's batch mean where its running mean
 * is, its unbiased batch variance where its running variance is, 1 where its count is) for the
 * store to fold into its running statistics (gt_ps_push_stats); with keep_grad the device moves
 * its own running statistics instead (momentum GT_BN_MOMENTUM, as PyTorch), and get_params copies
 * them into d->buffers. */
#ifndef GT_DEVICE_H
#define GT_DEVICE_H

#include "gputrain/config.h" /* gt_exchange */
#include "gputrain/cpu_net.h"
#include "gputrain/optim.h"
#include "gputrain/pinned.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_device gt_device;

/* What a device may say of the gradient it left (the worker checks the host copy itself when it
 * says nothing). */
enum { GT_GRAD_UNCHECKED = 0, GT_GRAD_FINITE, GT_GRAD_NONFINITE };

typedef struct gt_step_out {
    double loss_sum;  /* summed loss over the batch */
    int correct;      /* argmax hits */
    int grad_status;  /* GT_GRAD_*: whether the device checked every gradient entry is finite */
} gt_step_out;

/* --overlap's weight prediction for step_begin: the optimizer's configuration and scalars of the
 * update the step still running will get, and its gradient scale. */
typedef struct gt_predict {
    const gt_optim_cfg *cfg;
    gt_optim_step st;
    float gscale;
} gt_predict;

typedef struct gt_device_ops {
    /* d->params holds fresh parameters: make the device compute with them. */
    int (*load_params)(gt_device *d, gt_err *e);
    /* d->buffers holds running statistics: make the device evaluate with them (and, with
     * keep_grad, move them on from there); its parameters stay. Queued behind any step. */
    int (*load_buffers)(gt_device *d, gt_err *e);
    /* Forward and backward of one batch on the loaded parameters; the gradient of the mean loss
     * lands in d->grad. */
    int (*train_step)(gt_device *d, const gt_batch *b, gt_step_out *out, gt_err *e);
    /* Loss and hits over samples [lo, hi) of ds on the loaded parameters (no dropout); with
     * d->eval_pred set, also each sample's predicted class (its first largest logit). */
    int (*evaluate)(gt_device *d, const gt_dataset *ds, uint32_t lo, uint32_t hi, gt_step_out *out,
                    gt_err *e);
    /* Optional (NULL if absent): the overlapped hogwild step (--overlap). step_begin does what
     * load_params then train_step do, but returns once the work is queued behind any step still
     * running: it reads d->params and will write the gradient into d->grad as they are at the
     * call, so the caller may point them at other pinned buffers (gt_host_alloc) for the next
     * step. step_end waits for the oldest begun step and gives its results (its batch
     * statistics in d->stats). At most two steps
     * are begun and not ended; train_step is refused while any is. With d->predict set and a
     * step still running, the loaded parameters first take that step's plain SGD step
     * (gt_optim_predict) on the device, from its gradient there. */
    int (*step_begin)(gt_device *d, const gt_batch *b, gt_err *e);
    int (*step_end)(gt_device *d, gt_step_out *out, gt_err *e);
    /* Optional (NULL if absent): train_step's work queued on the parameters the device holds
     * (d->keep_grad, the allreduce mode), returning once it is queued; step_end gives its
     * results. Work is done in the order it was queued: a step queued after a reduce_update
     * computes on the updated parameters, and a reduce_update queued after it reduces its
     * gradient. Counted with step_begin's steps (at most two not ended). Where no step is in
     * flight and keep_grad is off, load_params's parameters go up as train_step takes them. */
    int (*step_queue)(gt_device *d, const gt_batch *b, gt_err *e);
    /* The allreduce mode (optional, NULL where unsupported; the CUDA backend): after a
     * train_step with d->keep_grad set, sum the gradient over every device of the communicator
     * (gt_cuda_allreduce_init) and apply one optimizer update, gradient scaled by gscale, to the
     * device's own parameters and optimizer state. Replicas stay bit-identical. */
    int (*reduce_update)(gt_device *d, const gt_optim_cfg *c, const gt_optim_step *st, float gscale,
                         gt_err *e);
    /* The local mode on GPUs (optional, NULL where unsupported; the CUDA backend): after a
     * train_step with d->keep_grad set, one optimizer update of the device's own parameters and
     * state by its own gradient scaled by gscale; with average set, every device of the
     * exchange (gt_cuda_allreduce_init) then takes the mean of all of their parameters, each
     * element summed in double in device order and divided by their count, as mode_local.c
     * averages the replicas through the store. Every device must call it alike. */
    int (*local_update)(gt_device *d, const gt_optim_cfg *c, const gt_optim_step *st,
                        float gscale, int average, gt_err *e);
    /* The device step's moving average of the parameters (--ema; optional, NULL where
     * unsupported: the CUDA backend after gt_cuda_allreduce_init). ema_set makes it src (host,
     * nparams floats); ema_update queues ema = decay*ema + (1-decay)*params behind the last
     * update, each product and the sum rounded as the store's (ps.h) are; ema_get copies it into
     * dst (host) once the work queued before has run. */
    int (*ema_set)(gt_device *d, const float *src, gt_err *e);
    int (*ema_update)(gt_device *d, float decay, gt_err *e);
    int (*ema_get)(gt_device *d, float *dst, gt_err *e);
    /* Optional (NULL: the store takes whole steps): the store step in parts of hogwild and ssp
     * (--store-parts; the CPU's one part after another, each checked for Inf and NaN). After a train_step with
     * d->grad_later set, which left the gradient on the device, or after a step_queue with it set,
     * while that step still runs, part k of the nparts (parameters [bounds[k], bounds[k + 1]),
     * bounds ascending from 0 to nparams, taken in the order order[k] lists) is downloaded into
     * d->grad over that range (with d->grad_bf16: rounded to bf16, ties to even, into d->grad_half,
     * which the device provides), part(arg, k) is called once it is there (it updates the store and
     * fills src over the same range), and that range of src (host, pinned: d->params, or the
     * store's parameters where nobody else writes them; NULL: nothing goes up) is then uploaded
     * while the next part's download and part() run. Behind a running step a part is downloaded as soon as its gradient
     * is final: where the step marked the parts of d->part_bounds as its backward finished them
     * (these bounds), during the backward, the parts then taken in the order they are finished
     * (ties in order's); else once the step has ended. A part whose gradient holds an Inf or NaN
     * (in bf16: after rounding) is not given to part(), nor is any part after it: then the return
     * is 1 (the parts before it were applied), else 0. Returns when every part() has returned and,
     * where src is not d->params, every upload has ended (its owner may rewrite or free it); the
     * next step waits for the uploads and downloads. */
    int (*exchange)(gt_device *d, int nparts, const size_t *bounds, const int *order,
                    const float *src, void (*part)(void *arg, int k), void *arg, gt_err *e);
    /* Copies the device's parameters into d->params, its optimizer state into s0/s1 (NULL:
     * skip) and, where it keeps them (keep_grad), its running statistics into d->buffers, for
     * evaluation and checkpoints. */
    int (*get_params)(gt_device *d, float *s0, float *s1, gt_err *e);
    /* Copies the running statistics alone into d->buffers, where the device keeps them
     * (keep_grad): get_params without the parameters. */
    int (*get_buffers)(gt_device *d, gt_err *e);
    /* Sets the device's optimizer state from host arrays (NULL: zeros), when a run resumes. */
    int (*set_state)(gt_device *d, const float *s0, const float *s1, gt_err *e);
    void (*close)(gt_device *d);
} gt_device_ops;

struct gt_device {
    const gt_device_ops *ops;
    char name[64];       /* "cpu:0", "gpu:2 (NVIDIA H100 80GB HBM3)" */
    int ordinal;         /* GPU ordinal, or the CPU worker index */
    const gt_model *model;
    int max_batch;
    float *params;       /* nparams, host */
    float *grad;         /* nparams, host */
    float *buffers;      /* model->nbuffers, host (pinned for a GPU): running statistics; NULL
                            when the model has none */
    float *stats;        /* model->nbuffers, host (pinned for a GPU): the last training step's
                            batch statistics (without keep_grad); NULL when the model has none */
    int loads_copy;      /* load_params copies d->params into the device's own memory (a GPU),
                            reading it once; 0: the device computes on d->params itself (CPU) */
    int keep_grad;       /* train_step leaves the gradient on the device (allreduce mode) */
    int grad_later;      /* train_step leaves the gradient on the device for exchange (hogwild's
                            store step in parts; a device without exchange ignores it) */
    const size_t *part_bounds; /* with grad_later, the parts (bounds as exchange takes them) a
                            step marks as its backward finishes their gradient, so that exchange
                            behind it starts early; NULL: none (the device may not mark) */
    int part_count;
    int grad_bf16;       /* with grad_later: exchange gives the gradient in bf16 (--store-grad) */
    const uint16_t *grad_half; /* nparams, host: where exchange puts the bf16 gradient, set by
                            the device once grad_bf16 is; NULL before */
    const gt_predict *predict; /* step_begin's weight prediction (--overlap), NULL: none */
    int32_t *eval_pred;  /* host, NULL: none; evaluate writes eval_pred[i], sample i's argmax
                            class, for each i of its [lo, hi) (indexed like the dataset) */
    int eval_ema;        /* evaluate the moving average the device step keeps (ema_set,
                            ema_update), not the loaded parameters: allreduce's replicas with
                            --ema; a device without one fails the evaluation */
    void *impl;          /* backend state */
};

/* The CPU backend. */
int gt_cpu_device_open(gt_device **out, const gt_model *m, int max_batch, int index, gt_err *e);

/* What a CUDA device computes in. Parameters, their gradients, the loss and batch norm stay fp32
 * in every one; the values of the first two are those of the old int tf32 argument. */

/* The CUDA backend (cuda/); returns -1 with a message when built without CUDA. */
int gt_cuda_device_count(void);
/* Whether the CUDA devices opened from now on keep their convolutions' backward directions to
 * cuDNN's deterministic algorithms (1), may take any (0), or decide by their precision (-1, the
 * default: any with --precision tf32). A process-wide rule, as cuDNN's own is in PyTorch; call it
 * before the devices open. */
void gt_cuda_set_deterministic(int on);
int gt_cuda_device_open(gt_device **out, const gt_model *m, int max_batch, int ordinal,
                        gt_precision precision, gt_err *e);
/* Sets up the exchange between the devices (all CUDA devices of this run, in order: the peer
 * all-reduce in one process, NCCL across hosts or with --exchange nccl) and the device optimizer
 * state the allreduce mode needs; -1 with a message when no exchange is available. */
int gt_cuda_allreduce_init(gt_device **devs, int n, const gt_optim_cfg *c, gt_exchange x,
                           gt_err *e);
/* Whether the exchange gt_cuda_allreduce_init set up for d averages replicas (local_update's
 * average): on one host, with the peer exchange or one GPU; not over NCCL. */
int gt_cuda_allreduce_averages(gt_device *d);
/* Makes every pending and later all-reduce of this process return an error instead of waiting
 * (a worker failed, or the run is ending): the abort path that keeps a lost GPU from hanging the
 * others. */
void gt_cuda_allreduce_abort(void);

void gt_device_close(gt_device *d);

#ifdef __cplusplus
}
#endif
#endif
