/* cpu_net.h - a whole network on the CPU (src/cpu_net.c): one minibatch's forward and backward
 * through the layer-kind table, the reference a device's training step is tested against. */
#ifndef GT_CPU_NET_H
#define GT_CPU_NET_H

#include "gputrain/data.h"
#include "gputrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A whole network on the CPU: buffers for one batch size, created once. */
typedef struct gt_cpu_net {
    const gt_model *m;
    int max_batch;
    uint8_t *xbytes;               /* gathered uint8 input, max_batch * in_len */
    uint16_t *labels;              /* gathered labels */
    float *act[GT_MAX_LAYERS + 1]; /* act[0] input, act[i+1] output of layer i */
    float *grad_act;               /* max_batch * max_act: gradient flowing backward (ping) */
    float *grad_act2;              /* and pong */
    uint8_t *mask[GT_MAX_LAYERS];  /* dropout masks */
    int32_t *arg[GT_MAX_LAYERS];   /* maxpool argmax */
    float *save[GT_MAX_LAYERS];    /* batch norm: the mean and 1/std its forward used (2 C) */
    float *branch[GT_MAX_LAYERS];  /* block markers: their block's gradient buffer, one of: */
    float *grad_branch[GT_MAX_BLOCK_DEPTH]; /* max_batch * max_act each, one per nesting depth */
    float *col;                    /* im2col workspace */
    float *buffers;                /* the model's buffers during a step (gt_cpu_net_run's) */
    double bn_momentum;            /* how a training forward moves them: GT_BN_MOMENTUM (the
                                      default), or 1 to leave the batch's statistics there */
} gt_cpu_net;

int gt_cpu_net_create(gt_cpu_net *net, const gt_model *m, int max_batch, gt_err *e);
void gt_cpu_net_destroy(gt_cpu_net *net);

/* One minibatch: the samples idx[0..n) of ds. seed and epoch key the dropout masks and the
 * augmentation. */
typedef struct gt_batch {
    const gt_dataset *ds;   /* the split the samples come from */
    const uint32_t *idx;    /* n sample ids */
    int n;                  /* samples */
    uint32_t epoch;         /* keys dropout and augmentation */
    uint64_t seed;          /* the run's seed: the same */
    const gt_augment *aug;  /* training batches: --augment (data.h); NULL = none, as evaluation */
} gt_batch;

/* Forward (train=1 applies dropout and batch norm's batch statistics) and, when grad is non-NULL,
 * backward: grad is overwritten with the gradient of the mean loss. Returns the summed loss over
 * the batch; *correct counts hits. buffers are the model's m->nbuffers floats (batch norm's
 * running statistics, model.h): a training forward updates them, an evaluation forward reads
 * them (with net->bn_momentum 1 a training forward writes its batch's statistics there, and 1 as
 * the count, instead); the parameters are never written. A model with buffers given NULL returns NaN. */
double gt_cpu_net_run(gt_cpu_net *net, const float *params, float *buffers, const gt_batch *b,
                      int train, float *grad, int *correct);
/* gt_cpu_net_run without buffers, for the models that have none. */
double gt_cpu_net_step(gt_cpu_net *net, const float *params, const gt_batch *b, int train,
                       float *grad, int *correct);

#ifdef __cplusplus
}
#endif
#endif
