/* gt_cuda.h - what the CUDA files share, and what C tests may call.
 *
 * The C part (always visible) is a per-GPU context and one helper per layer kind that runs that
 * layer's forward and backward on HOST arrays, so tests/test_cuda_parity.c, a C file, can hold
 * every GPU op against its CPU twin in src/layers.c with the same signatures.
 *
 * The CUDA part (only under nvcc) holds the context's fields, error checks that turn a failed
 * CUDA, cuDNN or cuBLAS call into a gt_fail message naming the GPU, the call, the error and the
 * source line, the per-layer plans of layers_cuda.cu, the kernel launchers of kernels.cu, and
 * what the allreduce mode (optim_cuda.cu, allreduce_cuda.cu) needs of a device. */
#ifndef GT_CUDA_H
#define GT_CUDA_H

#include "gputrain/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_cuda_ctx gt_cuda_ctx;

/* A context on GPU ordinal: compute stream, cuDNN and cuBLAS handles. tf32 lets cuBLAS and
 * cuDNN use TF32 tensor cores. */
int gt_cuda_ctx_open(gt_cuda_ctx **out, int ordinal, int tf32, gt_err *e);
void gt_cuda_ctx_close(gt_cuda_ctx *c);

/* One layer on the GPU of c, forward then backward, on host arrays. Forward writes y; backward
 * takes dy, overwrites dx (NULL: not computed) and ACCUMULATES into dw and db, exactly like the
 * CPU functions of layers.h, so the caller passes their starting values in. */
int gt_cuda_test_conv2d(gt_cuda_ctx *c, const float *x, int n, int ch, int h, int w,
                        const float *wt, const float *b, int o, int k, int pad, const float *dy,
                        float *y, float *dx, float *dw, float *db, gt_err *e);
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
int gt_cuda_test_softmax_xent(gt_cuda_ctx *c, const float *logits, const uint8_t *labels, int n,
                              int k, float scale, float *dlogits, double *loss, int *correct,
                              gt_err *e);
int gt_cuda_test_normalize(gt_cuda_ctx *c, const uint8_t *src, float *dst, size_t len, gt_err *e);
/* One optimizer update of optim_cuda.cu on host arrays (s0, s1 NULL where unused), with the
 * arguments of gt_optim_apply. */
int gt_cuda_test_optim(gt_cuda_ctx *c, const gt_optim_cfg *cfg, const gt_optim_step *st, float *p,
                       const float *g, float gscale, float *s0, float *s1, size_t n, gt_err *e);

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

struct gt_cuda_ctx {
    int ordinal;
    int tf32;
    char name[64];            /* "gpu:N (device name)", the start of every error message */
    cudaStream_t stream;      /* compute: every kernel, cuDNN and cuBLAS call of this context */
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    void *cublas_ws;
    void *ws;                 /* cuDNN workspace shared by all layers (one stream, one at a time) */
    size_t ws_bytes;
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

/* (Re)allocates the context's cuDNN workspace to exactly bytes; set-up time only. */
int gt_cuda_ctx_set_workspace(gt_cuda_ctx *c, size_t bytes, gt_err *e);
/* cudaMalloc with the size in the message. */
int gt_cuda_malloc(gt_cuda_ctx *c, void **p, size_t bytes, gt_err *e);

/* ---- layers (layers_cuda.cu) ----------------------------------------------------------------- */

/* The cuDNN state of one layer: descriptors for the batch size last used and, for a
 * convolution, the algorithms chosen once at start-up. */
typedef struct gt_cuda_layer {
    gt_layer L;               /* shapes and parameter offsets */
    uint32_t index;           /* position in the model: the dropout key's layer */
    int n;                    /* batch size the descriptors describe; 0 before the first use */
    cudnnTensorDescriptor_t x_desc, y_desc, bias_desc;
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_fwd, conv_bwd_data, conv_bwd_filter;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    int planned;              /* the convolution algorithms are chosen */
    int need_dx;              /* the backward-data algorithm was chosen (not the first layer) */
    cudnnPoolingDescriptor_t pool_desc;
    cudnnActivationDescriptor_t act_desc;
} gt_cuda_layer;

/* What one forward or backward call of a layer works on; device pointers. */
typedef struct gt_cuda_pass {
    int n;                    /* samples */
    const float *params;      /* the flat parameter array (weights at L.w_off, bias at L.b_off) */
    float *grad;              /* its gradient, accumulated into */
    uint8_t *mask;            /* dropout: n * out_len keep flags */
    const uint32_t *ids;      /* dropout: the n sample ids that key the masks */
    uint64_t seed;
    uint32_t epoch;
} gt_cuda_pass;

/* Creates the descriptors of L (layer number index of its model); checks that cuDNN agrees with
 * the model on the output shape. */
int gt_cuda_layer_init(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_layer *L, uint32_t index,
                       gt_err *e);
void gt_cuda_layer_destroy(gt_cuda_layer *cl);

/* Convolutions only: chooses the algorithms by timing them at batch n on real buffers (x, w, y,
 * and dx, dw for backward; dx NULL for a first layer) within the context's workspace, which the
 * caller sizes for the search; deterministic ones for backward. *ws_need gets the workspace they
 * need at batch n and, where it fits, at batch n_max, so one allocation covers both. */
int gt_cuda_layer_choose_algos(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, int n_max,
                               const float *x, const float *w, float *y, float *dx, float *dw,
                               size_t *ws_need, gt_err *e);

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
} gt_cuda_result;

int gt_cuda_normalize(gt_cuda_ctx *c, const uint8_t *src, float *dst, size_t len, gt_err *e);
/* y[r][j] += b[j] for rows r < n of width len. */
int gt_cuda_bias_add(gt_cuda_ctx *c, float *y, const float *b, int n, int len, gt_err *e);
/* db[j] += sum over rows r < n of dy[r][j], rows in order like the CPU. */
int gt_cuda_bias_grad(gt_cuda_ctx *c, const float *dy, float *db, int n, int len, gt_err *e);
int gt_cuda_dropout_forward(gt_cuda_ctx *c, const float *x, float *y, uint8_t *mask, int n,
                            size_t len, float p, uint64_t seed, uint32_t epoch,
                            const uint32_t *ids, uint32_t layer, gt_err *e);
int gt_cuda_dropout_backward(gt_cuda_ctx *c, const float *dy, const uint8_t *mask, float *dx,
                             size_t n_len, float p, gt_err *e);
/* Adds the summed loss and argmax hits of n rows of k logits to *res; writes dlogits =
 * (softmax - onehot) * scale unless dlogits is NULL. Deterministic (one block, fixed order). */
int gt_cuda_softmax_xent(gt_cuda_ctx *c, const float *logits, const uint8_t *labels, int n,
                         int k, float scale, float *dlogits, gt_cuda_result *res, gt_err *e);

/* ---- the allreduce mode (optim_cuda.cu, allreduce_cuda.cu) ----------------------------------- */

/* gt_optim_apply on device arrays, queued on c's stream; the same bits as the CPU. */
int gt_cuda_optim_apply(gt_cuda_ctx *c, const gt_optim_cfg *cfg, const gt_optim_step *st,
                        float *p, const float *g, float gscale, float *s0, float *s1, size_t n,
                        gt_err *e);

/* One device's NCCL communicator and optimizer state (allreduce_cuda.cu). */
typedef struct gt_cuda_allreduce gt_cuda_allreduce;

/* What the allreduce mode works on inside a CUDA device (device_cuda.cu). */
typedef struct gt_cuda_device_parts {
    gt_cuda_ctx *ctx;
    float *params, *grad;             /* device arrays, nparams each */
    gt_cuda_allreduce **allreduce;    /* set by gt_cuda_allreduce_init, freed when d closes */
} gt_cuda_device_parts;

/* 0 and the parts of d, or -1 when d is not a CUDA device. */
int gt_cuda_device_parts_of(gt_device *d, gt_cuda_device_parts *out);

/* The device operations of the allreduce mode (device.h says what each does). */
int gt_cuda_reduce_update(gt_device *d, const gt_optim_cfg *c, const gt_optim_step *st,
                          float gscale, gt_err *e);
int gt_cuda_get_params(gt_device *d, float *s0, float *s1, gt_err *e);
int gt_cuda_set_state(gt_device *d, const float *s0, const float *s1, gt_err *e);
/* Releases the communicator and the state; a device's close calls it after its stream is idle. */
void gt_cuda_allreduce_free(gt_cuda_allreduce *a);
#endif

#endif
