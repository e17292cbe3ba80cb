/* gt_cuda.h - what the CUDA files share, and what C tests may call.
 *
 * The C part (always visible) is a per-GPU context, one helper per layer kind that runs that
 * layer's forward and backward on HOST arrays, so tests/test_cuda_parity.c, a C file, can hold
 * every GPU op against its CPU twin in src/layers.c with the same signatures, and the choice of
 * how a device runs its training step (gt_cuda_path), so the test can hold every path.
 *
 * The CUDA part (only under nvcc) holds the context's fields, error checks that turn a failed
 * CUDA, cuDNN or cuBLAS call into a gt_fail message naming the GPU, the call, the error and the
 * source line, the per-layer plans of layers_cuda.cu, the kernel launchers of kernels.cu, the
 * fused LeNet step (fused_plan.cu, fused_cuda.cu), and what the allreduce mode (optim_cuda.cu,
 * allreduce_cuda.cu) needs of a device. */
#ifndef GT_CUDA_H
#define GT_CUDA_H

#include "gputrain/device.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_cuda_ctx gt_cuda_ctx;

/* A context on GPU ordinal: compute stream, cuDNN and cuBLAS handles. GT_PRECISION_TF32 lets
 * cuBLAS and cuDNN use TF32 tensor cores; GT_PRECISION_BF16 runs convolutions and linear layers
 * on bf16 copies (device.h). */
int gt_cuda_ctx_open(gt_cuda_ctx **out, int ordinal, gt_precision precision, gt_err *e);
void gt_cuda_ctx_close(gt_cuda_ctx *c);

/* One layer on the GPU of c, forward then backward, on host arrays. Forward writes y; backward
 * takes dy, overwrites dx (NULL: not computed) and ACCUMULATES into dw and db, exactly like the
 * CPU functions of layers.h, so the caller passes their starting values in. */
int gt_cuda_test_conv2d(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w,
                        const float *wt, const float *b, int o, int k, int pad, const float *dy,
                        float *y, float *dx, float *dw, float *db, gt_err *e);
/* The same with a stride (gt_conv2d_forward_strided's shapes); b NULL: no bias (db unused). */
int gt_cuda_test_conv2d_strided(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w,
                                const float *wt, const float *b, int o, int k, int pad,
                                int stride, const float *dy, float *y, float *dx, float *dw,
                                float *db, gt_err *e);
/* Batch norm over ch channels of h x w planes. train: gt_batchnorm_forward_train (running_mean
 * and running_var, ch floats each, move by GT_BN_MOMENTUM), then, with dy, gt_batchnorm_backward
 * with batch statistics (dx, and dgamma, dbeta accumulated into). Without train:
 * gt_batchnorm_forward_eval with the running statistics, forward only (dy must be NULL). */
int gt_cuda_test_batchnorm(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w,
                           const float *gamma, const float *beta, float *running_mean,
                           float *running_var, int train, const float *dy, float *y, float *dx,
                           float *dgamma, float *dbeta, gt_err *e);
/* Global average pooling of ch planes of h x w: gt_gap_forward, then gt_gap_backward. */
int gt_cuda_test_gap(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w,
                     const float *dy, float *y, float *dx, gt_err *e);
int gt_cuda_test_linear(gt_cuda_ctx *c, const float *x, int n, int in, const float *wt,
                        const float *b, int out, const float *dy, float *y, float *dx, float *dw,
                        float *db, gt_err *e);
/* kind is GT_AVGPOOL or GT_MAXPOOL. */
int gt_cuda_test_pool(gt_cuda_ctx *c, gt_layer_kind kind, const float *x, int n, int ch, int h,
                      int w, int k, const float *dy, float *y, float *dx, gt_err *e);
/* kind is GT_RELU, GT_SIGMOID or GT_TANH. */
int gt_cuda_test_act(gt_cuda_ctx *c, gt_layer_kind kind, const float *x, const float *dy,
                     size_t len, float *y, float *dx, gt_err *e);
int gt_cuda_test_dropout(gt_cuda_ctx *c, const float *x, const float *dy, int n, size_t len,
                         float p, uint64_t seed, uint32_t epoch, const uint32_t *sample_ids,
                         uint32_t layer, float *y, uint8_t *mask, float *dx, gt_err *e);
/* dlogits may be NULL; *loss gets the summed loss, *correct the argmax hits. */
int gt_cuda_test_softmax_xent(gt_cuda_ctx *c, const float *logits, const uint16_t *labels, int n,
                              int k, float scale, float *dlogits, double *loss, int *correct,
                              gt_err *e);
int gt_cuda_test_normalize(gt_cuda_ctx *c, const uint8_t *src, float *dst, size_t len, gt_err *e);
/* The model's input step (gt_cuda_input) on n samples as stored, cropped and flipped on the device
 * as aug says (NULL: none) with sample ids, seed and epoch as a staging slot holds them. */
int gt_cuda_test_input(gt_cuda_ctx *c, const gt_model *m, const uint8_t *raw, int n,
                       const uint32_t *ids, uint64_t seed, uint32_t epoch, const gt_augment *aug,
                       float *out, gt_err *e);
/* One optimizer update of optim_cuda.cu on host arrays (s0, s1 NULL where unused), with the
 * arguments of gt_optim_apply. */
int gt_cuda_test_optim(gt_cuda_ctx *c, const gt_optim_cfg *cfg, const gt_optim_step *st, float *p,
                       const float *g, float gscale, float *s0, float *s1, size_t n, gt_err *e);

/* How a CUDA device runs a training step. fused: the three kernels of fused_cuda.cu (LeNet-shaped
 * models only) instead of one library call per layer; graphs: each step replays a CUDA graph
 * captured once per batch shape instead of launching its work one call at a time. */
typedef struct gt_cuda_path {
    int fused;                 /* the fused kernels run the step */
    int fusable;               /* the model has the shape the fused kernels take */
    int graphs;                /* steps replay captured graphs */
    int ngraphs;               /* graphs captured and cached now */
    const char *graph_error;   /* why capture failed and steps went eager; "" if it never did */
} gt_cuda_path;

/* Chooses the step's path (open picks fused where the model allows, and graphs); -1 with a
 * message when fused is asked of a model that does not allow it, or d is not a CUDA device. The
 * first choice of the layer path times its convolution algorithms: set-up time, no step in
 * flight. */
int gt_cuda_device_set_path(gt_device *d, int fused, int graphs, gt_err *e);
/* 0 and the path of d, or -1 when d is not a CUDA device. */
int gt_cuda_device_get_path(gt_device *d, gt_cuda_path *out);
/* Prints each convolution's chosen engine configurations at the batch it runs now, a line each
 * (gt_cuda_layer_describe_algos); -1 when d is not a CUDA device. For benchmarks. */
int gt_cuda_device_print_algos(gt_device *d, FILE *f);
/* bf16 training steps: on (the default), a convolution's bf16 input is made once a step (by the
 * ReLU that writes it, or the first convolution that reads it) and kept for the others and for
 * backward; off, every convolution rounds its input again in forward and in backward, as before
 * the copies were kept. The same bits either way: for tests. Drops the captured graphs. */
int gt_cuda_device_set_half_copies(gt_device *d, int on, gt_err *e);
/* Steps that download their whole gradient do it in parts beside the backward, and a train_step
 * after load_params uploads the parameters in parts beside its forward, where the model has at
 * least min_params parameters (1 M at open; 0: every model on the layer path; SIZE_MAX: none).
 * The same bits either way: for tests. Drops the captured graphs. */
int gt_cuda_device_set_split(gt_device *d, size_t min_params, gt_err *e);
/* Queues a load_params copy that is still pending (device_cuda.cu leaves it for the train_step
 * after it, which uploads in parts beside its forward) on d's stream, whole: before anything
 * else reads or writes the parameters on the device. */
int gt_cuda_device_load_join(gt_device *d, gt_err *e);
/* Copies the device's own gradient (what train_step left there, also with keep_grad) to host. */
int gt_cuda_device_read_grad(gt_device *d, float *host, gt_err *e);

/* ---- peer access and the peer-to-peer all-reduce (context.cu, p2p_allreduce.cu) ------------- */

/* Lets every pair of the n GPUs read and write each other's memory (peer access); -1 with a
 * message naming a pair that cannot. Enabling twice is harmless. */
int gt_cuda_enable_peers(const int *ordinals, int n, gt_err *e);

/* A sum over the GPUs of this process, synchronised on the devices (p2p_allreduce.cu says how).
 * Rank r is GPU ordinals[r]; its input is the device array in[r] of n floats (16-byte aligned),
 * which must not change from a launch until that launch has finished on every rank. */
typedef struct gt_p2p gt_p2p;
#define GT_P2P_MAX_RANKS 8
/* Algorithms: AUTO picks two-shot from 512 KB up on 3 GPUs or more (gt_p2p_two_shot), one-shot
 * otherwise. */
enum { GT_P2P_AUTO = 0, GT_P2P_ONE_SHOT, GT_P2P_TWO_SHOT };
/* A rank's status: how its last failed call ended, sticky; OK while none has. */
enum { GT_P2P_OK = 0, GT_P2P_TIMED_OUT, GT_P2P_ABORTED };

/* 2..GT_P2P_MAX_RANKS distinct GPUs; enables peer access; a wait of a call gives up after
 * budget_s seconds. One reference, held by the caller. */
int gt_p2p_create(gt_p2p **out, int nranks, const int *ordinals, const float *const *in,
                  size_t n, double budget_s, gt_err *e);
/* Queues rank's part of one all-reduce on stream (a cudaStream_t of its GPU); every rank must
 * launch the same calls with the same algorithm in the same order. Capturable in a CUDA graph. */
int gt_p2p_launch(gt_p2p *p, int rank, int algo, void *stream, gt_err *e);
/* gt_p2p_launch of elements [lo, lo + n) only (GT_P2P_AUTO: its choice on n), in at most
 * max_blocks blocks, into the same elements of the result: the same bits as the whole call there.
 * Every rank launches the same ranges, caps and algorithms in the same order. Capturable in a
 * CUDA graph. */
int gt_p2p_launch_range(gt_p2p *p, int rank, size_t lo, size_t n, unsigned max_blocks, int algo,
                        void *stream, gt_err *e);
/* One-shot, the sum applied as it is made: rank's params (and optimizer state s0, s1, as
 * gt_cuda_optim_apply takes them) updated by the sum times gscale under c's rule at step st, the
 * same bits as gt_p2p_launch then gt_cuda_optim_apply on its result; no result is written.
 * Every rank launches it alike in place of a gt_p2p_launch. */
int gt_p2p_launch_update(gt_p2p *p, int rank, void *stream, const gt_optim_cfg *c,
                         const gt_optim_step *st, float *params, float gscale, float *s0,
                         float *s1, gt_err *e);
/* One-shot, the mean of the ranks' inputs into rank's params (n floats on its GPU): each element
 * summed in double in rank order from 0, divided by the rank count and rounded to float, as
 * mode_local.c averages replicas through the store; no result is written. Every rank launches it
 * alike in place of a gt_p2p_launch. */
int gt_p2p_launch_average(gt_p2p *p, int rank, void *stream, float *params, gt_err *e);
/* Rank's result: n floats in its GPU's memory, valid once its launch has finished and
 * gt_p2p_status is GT_P2P_OK; the same bits on every rank, each element summed in rank order. */
const float *gt_p2p_result(const gt_p2p *p, int rank);
/* GT_P2P_*: a call of rank gave up (its wait ran past the budget, an abort, or a rank left). */
int gt_p2p_status(const gt_p2p *p, int rank);
int gt_p2p_two_shot(const gt_p2p *p);
/* Whether gt_p2p_launch_update is the faster way to update by the sum (small arrays). */
int gt_p2p_fuses_update(const gt_p2p *p);
double gt_p2p_budget_s(const gt_p2p *p);
/* Ends every wait, now and later, of every group made before the call. */
void gt_p2p_abort_all(void);
/* References: each owner releases once, after its rank's stream is idle; the first release ends
 * the others' waits (a rank that leaves never arrives again), the last frees the buffers. */
void gt_p2p_retain(gt_p2p *p);
void gt_p2p_release(gt_p2p *p);

/* The allreduce mode's step summing its gradient over the GPUs in parts, beside its backward
 * (allreduce_cuda.cu, device_cuda.cu's cuda_split). step_sums: nonzero (the device's exchange
 * state's number, unique in the process) once a step may: the peer exchange, after the first
 * reduce_update; 0 otherwise (NULL, one GPU, NCCL, the local mode). sum_part: queues the sum of
 * gradient elements [lo, lo + n) into the group's result on stream; every GPU queues the same
 * parts in the same order. step_summed: whether the step queued last did, so that the
 * reduce_update after it only applies the result. */
struct gt_cuda_allreduce;
unsigned gt_cuda_allreduce_step_sums(const struct gt_cuda_allreduce *a);
int gt_cuda_allreduce_sum_part(struct gt_cuda_allreduce *a, size_t lo, size_t n, void *stream,
                               gt_err *e);
void gt_cuda_allreduce_step_summed(struct gt_cuda_allreduce *a, int summed);
/* Whether d's step queued last summed its gradient in parts (0 also where d is not a CUDA
 * device): for tests. */
int gt_cuda_device_step_summed(gt_device *d);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

/* The cuDNN workspace available while timing convolution algorithms. */
#define GT_CUDA_SEARCH_WS (256u << 20)
/* cuBLAS's own workspace, given to it up front so it never allocates during a step. */
#define GT_CUDA_CUBLAS_WS (32u << 20)

/* The launch shape of the element-wise kernels: GT_CUDA_THREADS a block, gt_cuda_grid(len)
 * blocks (at most GT_CUDA_MAX_GRID), each thread striding over what is left
 * (GT_CUDA_GRID_STRIDE). */
enum { GT_CUDA_THREADS = 256, GT_CUDA_MAX_GRID = 4096 };

static inline unsigned gt_cuda_grid(size_t len)
{
    size_t blocks = (len + GT_CUDA_THREADS - 1) / GT_CUDA_THREADS;
    return (unsigned)(blocks < (size_t)GT_CUDA_MAX_GRID ? blocks : (size_t)GT_CUDA_MAX_GRID);
}

#define GT_CUDA_GRID_STRIDE(i, len)                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (len);                \
         i += (size_t)gridDim.x * blockDim.x)

struct gt_cuda_ctx {
    int ordinal;
    int tf32;                 /* fp32 data may be multiplied in TF32 */
    int deterministic;        /* the convolutions' backward keeps to deterministic algorithms */
    int bf16;                 /* convolutions and linear layers compute on bf16 copies */
    char name[64];            /* "gpu:N (device name)", the start of every error message */
    char gpu[128];            /* the device's own name (cudaDeviceProp.name) */
    int cc_major, cc_minor;   /* its compute capability */
    int sms;                  /* its multiprocessor count */
    cudaStream_t stream;      /* compute: every kernel, cuDNN and cuBLAS call of this context */
    cudnnHandle_t cudnn;      /* NULL until gt_cuda_ctx_layer_libs (the first layer's init) */
    cublasHandle_t cublas;    /* likewise */
    void *cublas_ws;
    void *ws;                 /* cuDNN workspace shared by all layers (one stream, one at a time) */
    size_t ws_bytes;
    void *half_a, *half_b;    /* bf16 scratch shared by all layers: a layer's input (or input
                                 gradient) and output (or output gradient), half_len values each */
    void *half_w;             /* bf16 scratch: a convolution's weight gradient, half_w_len values */
    size_t half_len, half_w_len;
    /* The weight gradient beside the input gradient (layers_cuda.cu, wgrad_beside): a stream,
     * its fork and join events and its own cuDNN workspace of ws_bytes, made by the first
     * backward that uses them outside a capture; side_tiles: the most 128 x 128 tiles of
     * input gradient a convolution's that goes beside may have (0: none). */
    cudaStream_t side;
    cudaEvent_t side_fork, side_join;
    void *ws_side;
    size_t ws_side_bytes;
    size_t side_tiles;
};

/* Fills e with "<gpu>: <call> failed: <what> (<file>:<line>)" and returns -1. */
int gt_cuda_fail(gt_err *e, const char *gpu, const char *call, const char *what,
                 const char *file, int line);

#define GT_CUDA_CHECK(gpu, e, call)                                                          \
    do {                                                                                     \
        cudaError_t st_ = (call);                                                            \
        if (st_ != cudaSuccess)                                                              \
            return gt_cuda_fail((e), (gpu), #call, cudaGetErrorString(st_), __FILE__,         \
                                __LINE__);                                                   \
    } while (0)

#define GT_CUDNN_CHECK(gpu, e, call)                                                         \
    do {                                                                                     \
        cudnnStatus_t st_ = (call);                                                          \
        if (st_ != CUDNN_STATUS_SUCCESS)                                                     \
            return gt_cuda_fail((e), (gpu), #call, cudnnGetErrorString(st_), __FILE__,        \
                                __LINE__);                                                   \
    } while (0)

#define GT_CUBLAS_CHECK(gpu, e, call)                                                        \
    do {                                                                                     \
        cublasStatus_t st_ = (call);                                                         \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return gt_cuda_fail((e), (gpu), #call, cublasGetStatusString(st_), __FILE__,      \
                                __LINE__);                                                   \
    } while (0)

/* After a kernel launch: a bad configuration is reported here, not at the next sync. */
#define GT_CUDA_LAUNCHED(gpu, e) GT_CUDA_CHECK(gpu, e, cudaGetLastError())

/* Creates the context's cuDNN handle on first use; gt_cuda_layer_init calls it. */
int gt_cuda_ctx_layer_libs(gt_cuda_ctx *c, gt_err *e);
/* (Re)allocates the context's cuDNN workspace to exactly bytes; set-up time only. */
int gt_cuda_ctx_set_workspace(gt_cuda_ctx *c, size_t bytes, gt_err *e);
/* cudaMalloc with the size in the message. */
int gt_cuda_malloc(gt_cuda_ctx *c, void **p, size_t bytes, gt_err *e);
/* (Re)allocates the bf16 scratch (half_a, half_b of act values, half_w of w values) where they
 * are smaller; set-up time only. */
int gt_cuda_ctx_half_scratch(gt_cuda_ctx *c, size_t act, size_t w, gt_err *e);

/* ---- layers (layers_cuda.cu) ----------------------------------------------------------------- */

/* The cuDNN state of one layer: descriptors for the batch size last used and, for a
 * convolution, the engine configurations chosen once at start-up (conv_engine.cu; its legacy
 * descriptors give the output's shape and the reference of the fp32 accuracy check). */
typedef struct gt_cuda_layer {
    gt_layer L;               /* shapes and parameter offsets */
    uint32_t index;           /* position in the model: the dropout key's layer */
    int n;                    /* batch size the descriptors describe; 0 before the first use */
    cudnnTensorDescriptor_t x_desc, y_desc, bias_desc;
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_fwd, conv_bwd_data, conv_bwd_filter;
    cudnnDataType_t dtype;    /* convolution: its x, w, y descriptors' type (bf16 contexts:
                                 CUDNN_DATA_BFLOAT16, on the half scratch) */
    int planned;              /* the convolution's configurations are chosen */
    int need_dx;              /* the backward-data one was chosen (not the first layer) */
    float *bias_part;         /* conv with bias: GT_CUDA_BIAS_MAX_SPLITS partial sums a channel */
    unsigned *bias_done;      /* and a counter a channel for gt_cuda_conv_bias_grad */
    cudnnPoolingDescriptor_t pool_desc;
    cudnnActivationDescriptor_t act_desc;
    cudnnTensorDescriptor_t bn_desc; /* batch norm: 1 x C x 1 x 1, its parameters and statistics */
    float *bn_save;           /* batch norm: the batch mean and inverse std of its forward (2 C) */
    float *bn_scratch;        /* batch norm: partial sums and coefficients (blocks_cuda.cu) */
    struct gt_conv_engines *eng; /* convolution: its backend-API plans (conv_engine.cu) */
    int nhwc_in, nhwc_out;    /* its input / output is a bf16 channels-last array (set by the
                                 device after init: device_cuda.cu's channels-last path) */
} gt_cuda_layer;

/* ---- convolutions through cuDNN's backend API (conv_engine.cu) ------------------------------ */

struct gt_conv_key;
/* Chooses each direction's engine configuration of a convolution (bf16 channels-last, or fp32
 * NCHW, checked against the legacy descriptors' reference at batch n) by timing them at batch n
 * on bufs (x, w, y, dx, dw; dx NULL for a first layer) within the context's workspace, through
 * the process-wide cache under base (conv_key's fields; direction, determinism, alignment and api
 * are set here); makes the plans of batches n and n_max and puts the workspace they need in
 * *ws_need. 1: another device is timing one (wait 0), come back. */
int gt_conv_engine_choose(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, int n_max, int wait,
                          const struct gt_conv_key *base, void *const bufs[5], size_t *ws_need,
                          gt_err *e);
/* Makes batch n the layer's current one: its plans kept or made (within the workspace). */
int gt_conv_engine_batch(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, gt_err *e);
/* Runs direction dir (GT_CONV_FWD: x, w -> y; _BWD_FILTER: x, dy -> dw; _BWD_DATA: dx <- w, dy
 * as x, w, y) at the current batch on the context's stream. */
int gt_conv_engine_run(gt_cuda_ctx *c, gt_cuda_layer *cl, int dir, const void *x, const void *w,
                       void *y, gt_err *e);
/* The chosen engines, "fwd eE filter eE data eE" (their global indices); snprintf's return. */
int gt_conv_engine_describe(const gt_cuda_layer *cl, char *buf, size_t len);
void gt_conv_engines_free(gt_cuda_layer *cl); /* forgets choices and plans */

/* A training batch's dropout seed and epoch in device memory, beside its sample ids: a replayed
 * graph then reads each batch's own, where kernel arguments would stay those of the capture. */
typedef struct gt_cuda_key {
    uint64_t seed;
    uint32_t epoch;
    uint32_t unused;          /* keeps the ids that follow 16-byte aligned */
} gt_cuda_key;

/* What one forward or backward call of a layer works on; device pointers. */
typedef struct gt_cuda_pass {
    int n;                    /* samples */
    const float *params;      /* the flat parameter array (weights at L.w_off, bias at L.b_off) */
    float *grad;              /* its gradient, accumulated into */
    uint8_t *mask;            /* dropout: n * out_len keep flags */
    const uint32_t *ids;      /* dropout: the n sample ids that key the masks */
    uint64_t seed;            /* dropout: used when key is NULL */
    uint32_t epoch;
    const gt_cuda_key *key;   /* dropout: seed and epoch in device memory; NULL: the two above */
    int train;                /* batch norm: normalise by the batch's statistics (else running) */
    float *buffers;           /* batch norm: the flat buffer array (model.h) at L.s_off: read
                                 when not training; when training, written with the batch's
                                 statistics (mean, unbiased variance, count 1) or, with
                                 bn_running, moved by them (momentum GT_BN_MOMENTUM, count + 1) */
    int bn_running;           /* see buffers */
    const float *other;       /* "]": the other branch's output, added to x */
    const void *params_half;  /* bf16 contexts: the parameters rounded to bf16 (same layout) */
    void *x_half;             /* bf16 training, convolutions: where this layer's input's bf16
                                 copy lives for the step (forward makes or finds it, backward
                                 reads it); NULL: rounded into the context's half_a each time */
    int x_half_fill;          /* forward: round x into x_half (0: it holds x already this step,
                                 made for another convolution of the same input or by the ReLU
                                 that wrote x) */
    void *y_half;             /* bf16 training, ReLU: where its output's bf16 copy goes too (a
                                 convolution's x_half); NULL: none */
    int relu;                 /* channels-last batch norm: apply the ReLU after it as well */
} gt_cuda_pass;

/* Creates the descriptors of L (layer number index of its model); checks that cuDNN agrees with
 * the model on the output shape. */
int gt_cuda_layer_init(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_layer *L, uint32_t index,
                       gt_err *e);
void gt_cuda_layer_destroy(gt_cuda_layer *cl);

/* Convolutions only: chooses the engine configurations (gt_conv_engine_choose) by timing them at
 * batch n on real buffers (x, w, y, and dx, dw for backward; dx NULL for a first layer) within the
 * context's workspace, which the caller sizes for the search; deterministic ones for backward
 * where the context keeps to those (--deterministic). *ws_need gets the workspace they need at
 * batch n and, where it fits, at batch n_max, so one allocation covers both. In a bf16 context
 * the buffers hold bf16 values (the types stay float * for the fp32 callers). Each
 * direction's choice comes from the process-wide cache (conv_cache.h) where a device with an
 * equal key timed it already: where another device is timing one now, wait 0 returns 1 with
 * nothing chosen (come back later, with wait 1 to wait for it). */
int gt_cuda_layer_choose_algos(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, int n_max, int wait,
                               const float *x, const float *w, float *y, float *dx, float *dw,
                               size_t *ws_need, gt_err *e);
/* The chosen configurations, "fwd eE filter eE data eE"; snprintf's return. */
int gt_cuda_layer_describe_algos(const gt_cuda_layer *cl, char *buf, size_t len);

/* y = layer(x). Dropout always drops here: an evaluation pass skips the layer instead. */
int gt_cuda_layer_forward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                          const float *x, float *y, gt_err *e);
/* dx = d(loss)/dx given dy (dx NULL: skipped); parameter gradients accumulate into p->grad. */
int gt_cuda_layer_backward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                           const float *x, const float *y, const float *dy, float *dx,
                           gt_err *e);

/* ---- kernels (kernels.cu) -------------------------------------------------------------------- */

/* What the loss kernel accumulates on the GPU; zeroed by the caller. */
typedef struct gt_cuda_result {
    double loss_sum;
    int correct;
    int nonfinite;  /* training step: 1 when a gradient entry is not finite */
} gt_cuda_result;

int gt_cuda_normalize(gt_cuda_ctx *c, const uint8_t *src, float *dst, size_t len, gt_err *e);
/* A training batch's crop and flip done by its input step (gt_cuda_input) from its bytes as
 * stored: the batch's key and sample ids in device memory (its staging slot's) and --augment's
 * padding and flip. */
typedef struct gt_cuda_augment {
    const gt_cuda_key *key;
    const uint32_t *ids;
    int pad, flip;
} gt_cuda_augment;
/* The model's input step on n samples of m's input (model.h's gt_input_norm): x / 255 where its
 * normalisation is off (gt_cuda_normalize), else (x / 255 - mean[ch]) / std[ch], the CPU's formula
 * (cpu_net.c), so the floats are equal. With aug (NULL: none), each sample is first cropped and
 * flipped as gt_data_copy_sample does on the host (data_input.c), the same bytes. */
int gt_cuda_input(gt_cuda_ctx *c, const gt_model *m, const uint8_t *src, float *dst, int n,
                  const gt_cuda_augment *aug, gt_err *e);
/* Sets *flag (device memory, zeroed by the caller) when an entry of g[0..len) is not finite. */
int gt_cuda_flag_nonfinite(gt_cuda_ctx *c, const float *g, size_t len, int *flag, gt_err *e);
/* g[0..len) rounded to bf16 (ties to even) into h (device), setting *flag (zeroed by the caller)
 * where a rounded value is an Inf or a NaN: hogwild's bf16 gradient for the store. */
int gt_cuda_flag_to_bf16(gt_cuda_ctx *c, const float *g, uint16_t *h, size_t len, int *flag,
                         gt_err *e);
/* y[r][j] += b[j] for rows r < n of width len. */
int gt_cuda_bias_add(gt_cuda_ctx *c, float *y, const float *b, int n, int len, gt_err *e);
/* db[j] += sum over rows r < n of dy[r][j], rows in order like the CPU. */
int gt_cuda_bias_grad(gt_cuda_ctx *c, const float *dy, float *db, int n, int len, gt_err *e);
/* Partial sums a channel of gt_cuda_conv_bias_grad at most. */
#define GT_CUDA_BIAS_MAX_SPLITS 32
/* db[c] += the sum over samples r < n and positions of dy[r][c] (NCHW, hw positions a plane):
 * a convolution's bias gradient. Splits of the samples are summed by separate blocks into part
 * (ch * GT_CUDA_BIAS_MAX_SPLITS floats), then added in split order; done holds ch counters, zero
 * before the call and after it. The bits depend on the shape only, not on scheduling. */
int gt_cuda_conv_bias_grad(gt_cuda_ctx *c, const float *dy, float *db, float *part,
                           unsigned *done, int n, int ch, int hw, gt_err *e);
/* The mask is keyed by key's seed and epoch when key is non-NULL (device memory), else by seed and
 * epoch. */
int gt_cuda_dropout_forward(gt_cuda_ctx *c, const float *x, float *y, uint8_t *mask, int n,
                            size_t len, float p, uint64_t seed, uint32_t epoch,
                            const gt_cuda_key *key, const uint32_t *ids, uint32_t layer,
                            gt_err *e);
int gt_cuda_dropout_backward(gt_cuda_ctx *c, const float *dy, const uint8_t *mask, float *dx,
                             size_t n_len, float p, gt_err *e);

/* pred[i] = the index of row i's first largest logit, for n rows of k (device memory). */
int gt_cuda_argmax(gt_cuda_ctx *c, const float *logits, int n, int k, int32_t *pred, gt_err *e);
/* Adds the summed loss and argmax hits of n rows of k logits to *res; writes dlogits =
 * (softmax - onehot) * scale unless dlogits is NULL. Deterministic (one block, a fixed tree);
 * up to 64 classes a thread takes a row and does the CPU's arithmetic in its order. */
int gt_cuda_softmax_xent(gt_cuda_ctx *c, const float *logits, const uint16_t *labels, int n,
                         int k, float scale, float *dlogits, gt_cuda_result *res, gt_err *e);

/* ---- the residual networks' small ops (blocks_cuda.cu) ------------------------------------- */

/* y[p] = the mean of plane p of x, for planes planes of plane floats each. */
int gt_cuda_gap_forward(gt_cuda_ctx *c, const float *x, float *y, size_t planes, size_t plane,
                        gt_err *e);
/* dx[p][j] = dy[p] / plane. */
int gt_cuda_gap_backward(gt_cuda_ctx *c, const float *dy, float *dx, size_t planes,
                         size_t plane, gt_err *e);
/* y = a + b over len floats (y may be a or b). */
int gt_cuda_add(gt_cuda_ctx *c, const float *a, const float *b, float *y, size_t len, gt_err *e);
/* dx = y > 0 ? dy : 0, len values (src/layers.c's ReLU backward). */
int gt_cuda_relu_backward(gt_cuda_ctx *c, const float *y, const float *dy, float *dx, size_t len,
                          gt_err *e);

/* Batch norm in training on NCHW fp32 (blocks_cuda.cu), with src/layers.c's semantics:
 * forward normalises with the batch's statistics, writes its mean and inverse std into save (2
 * ch) and moves the running statistics by factor (1: replaces them; the variance unbiased)
 * and their count of batches (*count: 1, or + 1 where factor moves them; NULL: none);
 * backward, from forward's save, adds into dgamma and dbeta and writes dx. scratch holds
 * gt_cuda_bn_scratch_len(c, ch) floats of device memory. */
size_t gt_cuda_bn_scratch_len(const gt_cuda_ctx *c, int ch);
int gt_cuda_bn_forward_train(gt_cuda_ctx *c, const float *x, float *y, int n, int ch,
                             size_t plane, const float *gamma, const float *beta, double factor,
                             float *rmean, float *rvar, float *count, float *save, float *scratch,
                             gt_err *e);
int gt_cuda_bn_backward(gt_cuda_ctx *c, const float *x, const float *dy, float *dx, int n,
                        int ch, size_t plane, const float *gamma, const float *save,
                        float *dgamma, float *dbeta, float *scratch, gt_err *e);

/* ---- bf16 conversions (blocks_cuda.cu); bf16 arrays are __nv_bfloat16 -------------------- */

/* dst = src rounded to bf16 (nearest even), n values. */
int gt_cuda_to_bf16(gt_cuda_ctx *c, const float *src, void *dst, size_t n, gt_err *e);
/* bf16 convolutions run channels-last (NHWC) on bf16 copies while the network's arrays stay NCHW
 * fp32 (blocks_cuda.cu); each conversion transposes on the way. n samples of ch channels of plane
 * values each. */
/* dst (NHWC bf16) = src (NCHW fp32) rounded to bf16 (nearest even). */
int gt_cuda_to_nhwc_bf16(gt_cuda_ctx *c, const float *src, void *dst, size_t n, int ch,
                         size_t plane, gt_err *e);
/* dst (NCHW fp32) = src (NHWC bf16) + bias[channel] (bias NULL: none). */
int gt_cuda_from_nhwc_bf16(gt_cuda_ctx *c, const void *src, float *dst, size_t n, int ch,
                           size_t plane, const float *bias, gt_err *e);
/* y = max(x, 0) (NaN passed on, as cuDNN's ReLU), NCHW, and y_half = y rounded to bf16 (nearest
 * even, gt_cuda_to_nhwc_bf16's rounding) in NHWC: a ReLU whose output a convolution reads. */
int gt_cuda_relu_bf16(gt_cuda_ctx *c, const float *x, float *y, void *y_half, size_t n, int ch,
                      size_t plane, gt_err *e);
/* A filter's bf16 copy in cuDNN's NHWC filter layout (k, r, s, c) from its fp32 (k, c, r, s),
 * rs = r * s; and a bf16 (k, r, s, c) weight gradient added into the fp32 (k, c, r, s) one. */
int gt_cuda_filter_to_krsc_bf16(gt_cuda_ctx *c, const float *w, void *dst, int k, int ch,
                                int rs, gt_err *e);
int gt_cuda_filter_add_krsc_bf16(gt_cuda_ctx *c, const void *src, float *dw, int k, int ch,
                                 int rs, gt_err *e);
/* Many weight arrays' bf16 copies in one launch, a block a task: elements [lo, hi) of the fp32
 * array at off (within params and half), copied as they are or, where krsc, into the (k, r, s, c)
 * layout of a (k, ch, r s) filter (gt_cuda_filter_to_krsc_bf16's bits). tasks: device memory. */
typedef struct gt_cuda_half_task {
    unsigned long long off;
    unsigned lo, hi, ch, rs, krsc;
} gt_cuda_half_task;
int gt_cuda_weights_to_bf16(gt_cuda_ctx *c, const float *params, void *half,
                            const gt_cuda_half_task *tasks, int ntasks, gt_err *e);

/* ---- bf16 channels-last activations (blocks_cuda.cu) ---------------------------------------- */

/* A residual network's activations from its stem to its global average pool as bf16 NHWC arrays
 * (device_cuda.cu's channels-last path, gt_cuda_layer's nhwc_in and nhwc_out): n samples of
 * plane positions of ch channels, ch the fastest. Each op widens to fp32, computes as its fp32
 * twin above and rounds once (nearest even); len counts values. */
int gt_cuda_relu_nhwc(gt_cuda_ctx *c, const void *x, void *y, size_t len, gt_err *e);
int gt_cuda_relu_backward_nhwc(gt_cuda_ctx *c, const void *y, const void *dy, void *dx,
                               size_t len, gt_err *e);
int gt_cuda_add_nhwc(gt_cuda_ctx *c, const void *a, const void *b, void *y, size_t len, gt_err *e);
/* y[s][ch] (fp32) = the mean of sample s's plane of channel ch; and its gradient, dx (bf16). */
int gt_cuda_gap_forward_nhwc(gt_cuda_ctx *c, const void *x, float *y, size_t n, int ch,
                             size_t plane, gt_err *e);
int gt_cuda_gap_backward_nhwc(gt_cuda_ctx *c, const float *dy, void *dx, size_t n, int ch,
                              size_t plane, gt_err *e);
/* Batch norm (ch a multiple of 8) as gt_cuda_bn_forward_train and gt_cuda_bn_backward, and
 * inference with the running statistics; relu: y = max(y, 0) on the way out (a ReLU after the
 * layer). */
int gt_cuda_bn_forward_train_nhwc(gt_cuda_ctx *c, const void *x, void *y, int n, int ch,
                                  size_t plane, const float *gamma, const float *beta,
                                  double factor, float *rmean, float *rvar, float *count,
                                  float *save, float *scratch, int relu, gt_err *e);
int gt_cuda_bn_forward_infer_nhwc(gt_cuda_ctx *c, const void *x, void *y, int n, int ch,
                                  size_t plane, const float *gamma, const float *beta,
                                  const float *rmean, const float *rvar, float *scratch, int relu,
                                  gt_err *e);
int gt_cuda_bn_backward_nhwc(gt_cuda_ctx *c, const void *x, const void *dy, void *dx, int n,
                             int ch, size_t plane, const float *gamma, const float *save,
                             float *dgamma, float *dbeta, float *scratch, gt_err *e);

/* ---- the fused LeNet step (fused_cuda.cu, kernels in fused_kernels.cuh) --------------------- */

/* One convolution stage: conv (stride 1) + bias, activation, average pooling. */
typedef struct gt_fused_conv {
    int in_c, in_h, in_w;         /* input plane, before padding */
    int out_c, k, pad, out_h, out_w;
    int act;                      /* GT_RELU, GT_SIGMOID or GT_TANH */
    int pool, pool_h, pool_w;     /* window (= stride) and pooled output; floor like the CPU */
    size_t w_off, b_off, b_len;   /* in the flat parameter array; b_len 0: no bias */
} gt_fused_conv;

/* One linear layer and the activation after it (act -1: none, the logits). */
typedef struct gt_fused_fc {
    int in, out, act;
    size_t w_off, b_off, b_len;
} gt_fused_fc;

/* Which gradient entries the reduction kernel sums, and from what: a run of the flat
 * gradient array is the batch sum of per-sample partials (the convolutions), of outer products
 * dy x^T (linear weights) or of dy (linear biases). */
typedef struct gt_fused_seg {
    int kind;                     /* GT_FUSED_PART, GT_FUSED_OUTER or GT_FUSED_SUM */
    size_t dst, len;              /* entries [dst, dst + len) of the gradient */
    size_t col;                   /* PART: first column of the partials row */
    const float *dy, *x;          /* OUTER and SUM: per-sample rows */
    int dy_len, x_len;            /* their row lengths */
} gt_fused_seg;

enum { GT_FUSED_PART = 0, GT_FUSED_OUTER, GT_FUSED_SUM, GT_FUSED_MAX_SEGS = 10 };

/* Samples per block of the fused forward kernel at most: each linear-layer weight read from L2
 * serves this many (fewer where the batch leaves SMs idle). */
#define GT_FUSED_FC_SAMPLES 4
/* The convolution kernel size and pooling window the fused kernels are unrolled for (LeNet's). */
#define GT_FUSED_K 5
#define GT_FUSED_POOL 2
/* Second-convolution output channels per weight-gradient block of the fused backward kernel. */
#define GT_FUSED_WGRAD_OUT 4
/* Threads per block of every fused kernel (the shared-memory plan depends on it). */
#define GT_FUSED_THREADS 256

/* A tile of a linear layer's weight gradient in the fused reduction: rows (outputs) x columns
 * (inputs); GT_FUSED_THREADS threads cover it 8 rows a thread. */
#define GT_FUSED_TILE_ROWS 32
#define GT_FUSED_TILE_COLS 64

/* Blocks of GT_FUSED_THREADS the fused reduction gives segment g: a tile each of an outer
 * product's entries, a thread each of the other kinds'. */
static inline __host__ __device__ size_t gt_fused_seg_blocks(const gt_fused_seg *g)
{
    if (g->kind == GT_FUSED_OUTER)
        return (size_t)((g->dy_len + GT_FUSED_TILE_ROWS - 1) / GT_FUSED_TILE_ROWS) *
               ((g->x_len + GT_FUSED_TILE_COLS - 1) / GT_FUSED_TILE_COLS);
    return (g->len + GT_FUSED_THREADS - 1) / GT_FUSED_THREADS;
}

/* Output-channel groups of the fused backward kernel's input gradient (conv2 into one conv1
 * channel): as many as leave every thread 2 x 2 outputs of one group; its scratch holds a plane
 * per group. */
static inline __host__ __device__ int gt_fused_dgrad_groups(int in_h, int in_w, int out_c,
                                                            int threads)
{
    int quads = in_h / 2 * (in_w / 2), g = quads > 0 ? threads / quads : 1;
    return g < 1 ? 1 : g > out_c ? out_c : g;
}

/* The shape of a LeNet-like model (conv act avgpool conv act avgpool fc act fc act fc, kernels
 * GT_FUSED_K with padding below it, pooling GT_FUSED_POOL) and the device buffers of its fused
 * step, cap samples each. */
typedef struct gt_fused_net {
    gt_fused_conv conv[2];
    gt_fused_fc fc[3];
    size_t nparams;
    int cap;
    size_t in_len;                /* input bytes per sample */
    float in_mean[GT_NORM_MAX_C];  /* the model's input step per conv1 channel, (x / 255 - mean) /
                                    * std; mean 0 and std 1 where it is off (x / 255 to the bit) */
    float in_std[GT_NORM_MAX_C];
    float *in_lut;                /* that step of each byte value, 256 a channel (device):
                                   * gt_fused_set_norm */
    int in_lut_set;               /* in_lut holds in_mean and in_std's values */
    size_t a1_len, p1_len, a2_len, p2_len; /* per-sample lengths of the buffers below */
    size_t part_len;              /* per-sample convolution gradient partials */
    size_t smem_forward, smem_backward; /* dynamic shared memory of each kernel */
    int back_blocks;              /* backward blocks per sample: one per conv1 channel, then one
                                   * per GT_FUSED_WGRAD_OUT conv2 output channels */
    int nsm;                      /* the GPU's multiprocessors */
    float *a1, *p1, *a2, *p2;     /* activation outputs and pooled outputs of the two stages */
    float *h1, *h2;               /* outputs of the first two linear layers (after activation) */
    float *dz, *dh2, *dh1, *dp2;  /* gradients: logits, linear pre-activations, the fc input */
    float *part;                  /* cap x part_len */
    double *loss;                 /* per-sample loss */
    int *hits;                    /* per-sample argmax hit */
    int nsegs;
    gt_fused_seg seg[GT_FUSED_MAX_SEGS];
} gt_fused_net;

/* 1 and f's shapes filled when the fused kernels can run m within max_smem bytes of shared memory
 * per block, else 0 (fused_plan.cu, host code only). */
int gt_fused_plan(const gt_model *m, size_t max_smem, gt_fused_net *f);
/* Fills f->seg from f's shapes and buffer pointers: what the reduction kernel sums where. */
void gt_fused_plan_segs(gt_fused_net *f);
/* The model's input step into f: a table of the 256 byte values per channel, computed here with
 * the layer path's formula (the same floats) and copied to the device where its values changed.
 * They come with the training data, after the device opened: called before each step and
 * evaluation, never inside a graph's capture (it waits for its copy). */
int gt_fused_set_norm(gt_cuda_ctx *c, gt_fused_net *f, const gt_input_norm *norm, gt_err *e);
/* Buffers for cap samples, and the kernels' shared-memory limits; set-up time only. */
int gt_fused_alloc(gt_cuda_ctx *c, gt_fused_net *f, int cap, gt_err *e);
void gt_fused_free(gt_fused_net *f);
/* One training step of n samples on c's stream: images n x in_len uint8, labels n; the mean-loss
 * gradient OVERWRITES grad (every entry), the summed loss and hits overwrite *res. */
int gt_fused_train(gt_cuda_ctx *c, gt_fused_net *f, const float *params, const uint8_t *images,
                   const uint16_t *labels, int n, float *grad, gt_cuda_result *res, gt_err *e);
/* Forward only: adds the summed loss and hits of n samples to *res. */
int gt_fused_eval(gt_cuda_ctx *c, gt_fused_net *f, const float *params, const uint8_t *images,
                  const uint16_t *labels, int n, gt_cuda_result *res, gt_err *e);

/* ---- the allreduce mode (optim_cuda.cu, allreduce_cuda.cu) ----------------------------------- */

/* gt_optim_apply on device arrays, queued on c's stream; the same bits as the CPU. */
int gt_cuda_optim_apply(gt_cuda_ctx *c, const gt_optim_cfg *cfg, const gt_optim_step *st,
                        float *p, const float *g, float gscale, float *s0, float *s1, size_t n,
                        gt_err *e);
/* --overlap's weight prediction on the device, on c's stream: p = src predicted with g as
 * gt_optim_predict does it (src: p itself, or pinned host memory the device reads directly). */
int gt_cuda_optim_predict_from(gt_cuda_ctx *c, const gt_optim_cfg *cfg, const gt_optim_step *st,
                               float *p, const float *src, const float *g, float gscale, size_t n,
                               gt_err *e);

/* The moving average on the device, on c's stream: ema = decay*ema + (1-decay)*p, each product
 * and the sum rounded to float as the store's ps_ema_range does them on the CPU (no fused
 * multiply-add), so both give the same bits from the same parameters. */
int gt_cuda_ema_apply(gt_cuda_ctx *c, float *ema, const float *p, float decay, size_t n,
                      gt_err *e);

/* One device's NCCL communicator and optimizer state (allreduce_cuda.cu). */
typedef struct gt_cuda_allreduce gt_cuda_allreduce;

/* What the allreduce mode works on inside a CUDA device (device_cuda.cu). */
typedef struct gt_cuda_device_parts {
    gt_cuda_ctx *ctx;
    float *params, *grad;             /* device arrays, nparams each */
    float *buffers;                   /* the running statistics (nbuffers) where keep_grad steps
                                         moved them since the last load_params, else NULL */
    gt_cuda_allreduce **allreduce;    /* set by gt_cuda_allreduce_init, freed when d closes */
} gt_cuda_device_parts;

/* 0 and the parts of d, or -1 when d is not a CUDA device. */
int gt_cuda_device_parts_of(gt_device *d, gt_cuda_device_parts *out);

/* The device operations of the allreduce mode (device.h says what each does). */
int gt_cuda_reduce_update(gt_device *d, const gt_optim_cfg *c, const gt_optim_step *st,
                          float gscale, gt_err *e);
int gt_cuda_local_update(gt_device *d, const gt_optim_cfg *c, const gt_optim_step *st,
                         float gscale, int average, gt_err *e);
int gt_cuda_get_params(gt_device *d, float *s0, float *s1, gt_err *e);
int gt_cuda_get_buffers(gt_device *d, gt_err *e);
int gt_cuda_ema_set(gt_device *d, const float *src, gt_err *e);
int gt_cuda_ema_update(gt_device *d, float decay, gt_err *e);
int gt_cuda_ema_get(gt_device *d, float *dst, gt_err *e);
/* The moving average on the device (ema_set made it), NULL where there is none or no a. */
const float *gt_cuda_allreduce_ema(const gt_cuda_allreduce *a);
int gt_cuda_set_state(gt_device *d, const float *s0, const float *s1, gt_err *e);
/* Releases the communicator and the state; a device's close calls it after its stream is idle. */
void gt_cuda_allreduce_free(gt_cuda_allreduce *a);
#endif

#endif
