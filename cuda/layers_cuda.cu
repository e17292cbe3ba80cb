/* layers_cuda.cu - the GPU version of each layer of src/layers.c, with the same semantics and
 * layouts: convolution, pooling and activations through cuDNN (NCHW float), linear through
 * cuBLAS, dropout through kernels.cu.
 *
 * A gt_cuda_layer holds the descriptors of one layer; they are rewritten only when the batch
 * size changes (a short last batch, an evaluation chunk). Convolution algorithms are chosen once
 * at start-up by timing them; if a later batch size needs more workspace than was allocated,
 * cuDNN's heuristics pick others that fit, so a step never allocates. */
#include "gt_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const float one = 1.0f, zero = 0.0f;

static int layer_fail(gt_cuda_ctx *c, const gt_cuda_layer *cl, gt_err *e, const char *what)
{
    return gt_fail(e, "%s: layer %u (%s): %s", c->name, cl->index,
                   cl->L.name[0] ? cl->L.name : "unnamed", what);
}

static int tensor_set(gt_cuda_ctx *c, cudnnTensorDescriptor_t d, int n, int ch, int h, int w,
                      gt_err *e)
{
    GT_CUDNN_CHECK(c->name, e,
                   cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, ch, h, w));
    return 0;
}

/* ---- choosing convolution algorithms --------------------------------------------------------- */

/* Winograd transforms trade accuracy for speed: on an H200 the non-fused backward-filter one
 * was ~1e-4 off the CPU reference where every other algorithm was ~1e-7. */
static bool conv_winograd(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
static bool conv_winograd(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
static bool conv_winograd(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* The first (fastest) result that ran and fits limit, deterministic when asked; without TF32,
 * one that keeps fp32 accuracy (no tensor cores, no Winograd). -1 if none. */
template <typename Perf>
static int conv_pick(const Perf *perf, int got, size_t limit, int deterministic, int tf32)
{
    for (int i = 0; i < got; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > limit)
            continue;
        if (deterministic && perf[i].determinism != CUDNN_DETERMINISTIC)
            continue;
        if (!tf32 && (perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                      perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
                      conv_winograd(perf[i].algo)))
            continue;
        return i;
    }
    return -1;
}

/* Takes the best result for one direction. Without TF32, backward prefers deterministic
 * algorithms so that parity tests and reruns are stable, and settles for any that works; with
 * TF32 (not bit-reproducible anyway) every algorithm cuDNN offers competes, tensor ops, Winograd
 * and non-deterministic ones included, as PyTorch's defaults allow. */
template <typename Perf, typename Algo>
static int conv_take(gt_cuda_ctx *c, gt_cuda_layer *cl, const Perf *perf, int got, size_t limit,
                     int deterministic, cudnnConvolutionDescriptor_t conv, Algo *algo,
                     size_t *need, const char *direction, gt_err *e)
{
    deterministic = deterministic && !c->tf32;
    int i = conv_pick(perf, got, limit, deterministic, c->tf32);
    if (i < 0 && deterministic)
        i = conv_pick(perf, got, limit, 0, c->tf32);
    if (i < 0) {
        char what[160];
        snprintf(what, sizeof what,
                 "no %s convolution algorithm runs in %zu bytes of workspace at batch %d",
                 direction, limit, cl->n);
        return layer_fail(c, cl, e, what);
    }
    *algo = perf[i].algo;
    if (perf[i].memory > *need)
        *need = perf[i].memory;
    GT_CUDNN_CHECK(c->name, e,
                   cudnnSetConvolutionMathType(conv, c->tf32 ? perf[i].mathType : CUDNN_FMA_MATH));
    return 0;
}

static int conv_set_batch_desc(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, gt_err *e)
{
    const gt_layer *L = &cl->L;
    return tensor_set(c, cl->x_desc, n, L->in_c, L->in_h, L->in_w, e) ||
           tensor_set(c, cl->y_desc, n, L->out_c, L->out_h, L->out_w, e);
}

/* Workspace the chosen algorithms need at the current descriptors; -1 if one of them cannot
 * run there at all. */
static int conv_ws_size(gt_cuda_ctx *c, gt_cuda_layer *cl, size_t *bytes)
{
    size_t fwd = 0, filter = 0, data = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, cl->x_desc, cl->w_desc, cl->conv_fwd,
                                                cl->y_desc, cl->fwd_algo, &fwd) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionBackwardFilterWorkspaceSize(c->cudnn, cl->x_desc, cl->y_desc,
                                                       cl->conv_bwd_filter, cl->w_desc,
                                                       cl->bwd_filter_algo, &filter) !=
            CUDNN_STATUS_SUCCESS ||
        (cl->need_dx &&
         cudnnGetConvolutionBackwardDataWorkspaceSize(c->cudnn, cl->w_desc, cl->y_desc,
                                                      cl->conv_bwd_data, cl->x_desc,
                                                      cl->bwd_data_algo, &data) !=
             CUDNN_STATUS_SUCCESS))
        return -1;
    *bytes = fwd > filter ? fwd : filter;
    *bytes = data > *bytes ? data : *bytes;
    return 0;
}

/* Chooses by cuDNN's heuristics at the current descriptors, within limit bytes of workspace:
 * for a batch size whose timed algorithms do not fit the workspace there is. */
static int conv_pick_within(gt_cuda_ctx *c, gt_cuda_layer *cl, size_t limit, size_t *need,
                            gt_err *e)
{
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0;
    *need = 0;
    GT_CUDNN_CHECK(c->name, e,
                   cudnnGetConvolutionForwardAlgorithm_v7(
                       c->cudnn, cl->x_desc, cl->w_desc, cl->conv_fwd, cl->y_desc,
                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, fwd));
    if (conv_take(c, cl, fwd, got, limit, 0, cl->conv_fwd, &cl->fwd_algo, need, "forward", e))
        return -1;
    GT_CUDNN_CHECK(c->name, e,
                   cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                       c->cudnn, cl->x_desc, cl->y_desc, cl->conv_bwd_filter, cl->w_desc,
                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, filter));
    if (conv_take(c, cl, filter, got, limit, 1, cl->conv_bwd_filter, &cl->bwd_filter_algo, need,
                  "backward-filter", e))
        return -1;
    if (!cl->need_dx)
        return 0;
    GT_CUDNN_CHECK(c->name, e,
                   cudnnGetConvolutionBackwardDataAlgorithm_v7(
                       c->cudnn, cl->w_desc, cl->y_desc, cl->conv_bwd_data, cl->x_desc,
                       CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, data));
    return conv_take(c, cl, data, got, limit, 1, cl->conv_bwd_data, &cl->bwd_data_algo, need,
                     "backward-data", e);
}

/* Times every algorithm on real buffers and takes the fastest allowed one: on an H200 this
 * found backward-filter algorithms 2-3x faster than the heuristics' first choice for a
 * one-channel input. Timing noise can make two runs choose differently; all allowed
 * algorithms agree with the CPU to ~1e-7, not bit for bit. */
static int conv_find(gt_cuda_ctx *c, gt_cuda_layer *cl, const float *x, const float *w, float *y,
                     float *dx, float *dw, size_t *need, float *filter_ms, gt_err *e)
{
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0;
    *need = 0;
    GT_CUDNN_CHECK(c->name, e,
                   cudnnFindConvolutionForwardAlgorithmEx(
                       c->cudnn, cl->x_desc, x, cl->w_desc, w, cl->conv_fwd, cl->y_desc, y,
                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, fwd, c->ws, c->ws_bytes));
    if (conv_take(c, cl, fwd, got, c->ws_bytes, 0, cl->conv_fwd, &cl->fwd_algo, need, "forward",
                  e))
        return -1;
    /* y stands in for dy: only its shape matters while timing. */
    GT_CUDNN_CHECK(c->name, e,
                   cudnnFindConvolutionBackwardFilterAlgorithmEx(
                       c->cudnn, cl->x_desc, x, cl->y_desc, y, cl->conv_bwd_filter, cl->w_desc, dw,
                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, filter, c->ws,
                       c->ws_bytes));
    if (conv_take(c, cl, filter, got, c->ws_bytes, 1, cl->conv_bwd_filter, &cl->bwd_filter_algo,
                  need, "backward-filter", e))
        return -1;
    for (int i = 0; i < got; i++)
        if (filter[i].algo == cl->bwd_filter_algo && filter[i].status == CUDNN_STATUS_SUCCESS) {
            *filter_ms = filter[i].time;
            break;
        }
    if (!dx)
        return 0;
    GT_CUDNN_CHECK(c->name, e,
                   cudnnFindConvolutionBackwardDataAlgorithmEx(
                       c->cudnn, cl->w_desc, w, cl->y_desc, y, cl->conv_bwd_data, cl->x_desc, dx,
                       CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, data, c->ws, c->ws_bytes));
    return conv_take(c, cl, data, got, c->ws_bytes, 1, cl->conv_bwd_data, &cl->bwd_data_algo,
                     need, "backward-data", e);
}

/* ---- the weight gradient by the project's own kernels ------------------------------------------ */

enum { WGRAD_CUDNN = 0, WGRAD_GEMM = 1, WGRAD_TAPS = 2 };

/* dW[o][r] += sum over rows m of dyt[o][m] col[m][r], m = (sample, position): column-major that
 * is dW^T (r x o) = col^T (r x m) dyt^T (m x o), each operand as it lies. cuBLAS's FP32 GEMM
 * gives the same bits every run on one GPU model. */
static int conv_wgrad_gemm(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, const float *x,
                           const float *dy, float *dw, gt_err *e)
{
    const gt_layer *L = &cl->L;
    int plane = L->out_h * L->out_w, row = L->in_c * L->k * L->k, m = n * plane;
    if (gt_cuda_nchw_to_cnhw(c, dy, cl->wgrad_dyt, n, L->out_c, plane, e) ||
        gt_cuda_im2col_rows(c, x, n, L->in_c, L->in_h, L->in_w, L->k, L->pad, cl->wgrad_col, e))
        return -1;
    GT_CUBLAS_CHECK(c->name, e,
                    cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, row, L->out_c, m, &one,
                                cl->wgrad_col, row, cl->wgrad_dyt, m, &one, dw, row));
    return 0;
}

/* dW += the weight gradient of n samples by the layer's own path. */
static int conv_wgrad_own(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, const float *x,
                          const float *dy, float *dw, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (cl->wgrad_own == WGRAD_TAPS)
        return gt_cuda_conv_wgrad_taps(c, x, dy, dw, cl->wgrad_part, cl->wgrad_done, n, L->in_c,
                                       L->in_h, L->in_w, L->out_c, L->k, L->pad, e);
    return conv_wgrad_gemm(c, cl, n, x, dy, dw, e);
}

static void conv_wgrad_free(gt_cuda_layer *cl)
{
    void *bufs[4] = {cl->wgrad_col, cl->wgrad_dyt, cl->wgrad_part, cl->wgrad_done};
    for (int i = 0; i < 4; i++)
        if (bufs[i])
            cudaFree(bufs[i]);
    cl->wgrad_col = cl->wgrad_dyt = cl->wgrad_part = NULL;
    cl->wgrad_done = NULL;
    cl->wgrad_own = cl->wgrad_cap = 0;
}

/* GT_CONV_WGRAD: cudnn or unset (-1: never, the default: whole runs measured no gain from the own
 * path, docs/perf-notes.md lever F), auto (0: the own path where timing finds it faster), own
 * (1: wherever its buffers fit); any other value is an error naming the variable. */
static int conv_wgrad_env(int *mode, gt_err *e)
{
    const char *v = getenv("GT_CONV_WGRAD");
    *mode = -1;
    if (!v || !*v)
        return 0;
    if (strcmp(v, "auto") == 0) {
        *mode = 0;
        return 0;
    }
    if (strcmp(v, "own") == 0 || strcmp(v, "cudnn") == 0) {
        *mode = v[0] == 'o' ? 1 : -1;
        return 0;
    }
    return gt_fail(e, "GT_CONV_WGRAD: bad value '%.40s' (auto, own or cudnn)", v);
}

/* One run of the own path between two events, its time in *ms. */
static int conv_wgrad_timed_run(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, const float *x,
                                const float *dy, float *dw, cudaEvent_t ev[2], float *ms,
                                gt_err *e)
{
    GT_CUDA_CHECK(c->name, e, cudaEventRecord(ev[0], c->stream));
    if (conv_wgrad_own(c, cl, n, x, dy, dw, e))
        return -1;
    GT_CUDA_CHECK(c->name, e, cudaEventRecord(ev[1], c->stream));
    GT_CUDA_CHECK(c->name, e, cudaEventSynchronize(ev[1]));
    GT_CUDA_CHECK(c->name, e, cudaEventElapsedTime(ms, ev[0], ev[1]));
    return 0;
}

/* The best of three timed runs of the own path at batch n (after one to warm up), in ms. */
static int conv_wgrad_time(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, const float *x,
                           const float *dy, float *dw, float *best, gt_err *e)
{
    cudaEvent_t ev[2] = {NULL, NULL};
    int rc = 0;
    *best = -1.0f;
    for (int i = 0; rc == 0 && i < 2; i++)
        if (cudaEventCreate(&ev[i]) != cudaSuccess)
            rc = gt_fail(e, "%s: cudaEventCreate failed", c->name);
    for (int i = 0; rc == 0 && i < 4; i++) {
        float ms = 0.0f;
        rc = conv_wgrad_timed_run(c, cl, n, x, dy, dw, ev, &ms, e);
        if (rc == 0 && i > 0 && (*best < 0.0f || ms < *best))
            *best = ms;
    }
    for (int i = 0; i < 2; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    return rc;
}

/* The own path's buffers: the taps kernel's partial sums and zeroed counters, or the GEMM's
 * operands for n samples (0 when they would pass 256 MB: then cuDNN's stays). */
static int conv_wgrad_alloc(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, gt_err *e)
{
    const gt_layer *L = &cl->L;
    size_t out_c = (size_t)L->out_c;
    if (gt_cuda_conv_wgrad_taps_fits(L->in_c, L->k)) {
        cl->wgrad_own = WGRAD_TAPS;
        if (gt_cuda_malloc(c, (void **)&cl->wgrad_part,
                           out_c * 25 * GT_CUDA_BIAS_MAX_SPLITS * sizeof(float), e) ||
            gt_cuda_malloc(c, (void **)&cl->wgrad_done, out_c * sizeof(unsigned), e))
            return -1;
        GT_CUDA_CHECK(c->name, e,
                      cudaMemsetAsync(cl->wgrad_done, 0, out_c * sizeof(unsigned), c->stream));
        return 0;
    }
    size_t rows = (size_t)n * L->out_h * L->out_w, row = (size_t)L->in_c * L->k * L->k;
    size_t col_bytes = rows * row * sizeof(float), dyt_bytes = rows * out_c * sizeof(float);
    if (col_bytes + dyt_bytes > (256u << 20))
        return 0;
    cl->wgrad_own = WGRAD_GEMM;
    cl->wgrad_cap = n;
    return gt_cuda_malloc(c, (void **)&cl->wgrad_col, col_bytes, e) ||
                   gt_cuda_malloc(c, (void **)&cl->wgrad_dyt, dyt_bytes, e)
               ? -1
               : 0;
}

/* Without TF32 the deterministic cuDNN algorithms left for a backward filter can be slow (cnn-wide's
 * first convolution at batch 128: 483 us on an H100 under Nsight Compute); with GT_CONV_WGRAD=auto
 * the own path takes over where it times at least 20% faster than the chosen one (filter_ms,
 * cuDNN's own timing), with GT_CONV_WGRAD=own always. */
static int conv_wgrad_choose(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, const float *x,
                             const float *dy, float *dw, float filter_ms, gt_err *e)
{
    int mode;
    float own_ms = -1.0f;
    conv_wgrad_free(cl);
    if (conv_wgrad_env(&mode, e))
        return -1;
    if (mode < 0 || c->tf32)
        return 0;
    if (conv_wgrad_alloc(c, cl, n, e) ||
        (cl->wgrad_own && mode == 0 && conv_wgrad_time(c, cl, n, x, dy, dw, &own_ms, e))) {
        conv_wgrad_free(cl);
        return -1;
    }
    if (mode == 0 && !(filter_ms > 0.0f && own_ms >= 0.0f && own_ms < 0.8f * filter_ms))
        conv_wgrad_free(cl);
    return 0;
}

int gt_cuda_layer_choose_algos(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, int n_max,
                               const float *x, const float *w, float *y, float *dx, float *dw,
                               size_t *ws_need, gt_err *e)
{
    size_t need = 0, need_max = 0;
    cl->planned = 0;
    cl->need_dx = dx != NULL;
    cl->n = 0;
    if (conv_set_batch_desc(c, cl, n, e))
        return -1;
    cl->n = n;
    float filter_ms = -1.0f;
    if (conv_find(c, cl, x, w, y, dx, dw, &need, &filter_ms, e) ||
        conv_wgrad_choose(c, cl, n, x, y, dw, filter_ms, e))
        return -1;
    cl->planned = 1;
    /* Cover the largest batch too where these algorithms run there within the search
     * workspace; otherwise that batch falls back to heuristics within the final workspace. */
    if (n_max != n && conv_set_batch_desc(c, cl, n_max, e) == 0 &&
        conv_ws_size(c, cl, &need_max) == 0 && need_max <= c->ws_bytes && need_max > need)
        need = need_max;
    cl->n = 0; /* the next use sets its batch and checks the final workspace */
    *ws_need = need;
    return 0;
}

/* ---- descriptors ----------------------------------------------------------------------------- */

static int layer_set_batch(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, gt_err *e)
{
    const gt_layer *L = &cl->L;
    size_t need = 0;
    if (cl->n == n)
        return 0;
    cl->n = 0;
    switch (L->kind) {
    case GT_CONV:
        if (conv_set_batch_desc(c, cl, n, e))
            return -1;
        cl->n = n;
        if (cl->planned && (conv_ws_size(c, cl, &need) != 0 || need > c->ws_bytes) &&
            conv_pick_within(c, cl, c->ws_bytes, &need, e)) {
            cl->n = 0;
            return -1;
        }
        return 0;
    case GT_AVGPOOL:
    case GT_MAXPOOL:
        if (tensor_set(c, cl->x_desc, n, L->in_c, L->in_h, L->in_w, e) ||
            tensor_set(c, cl->y_desc, n, L->out_c, L->out_h, L->out_w, e))
            return -1;
        break;
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
        if (tensor_set(c, cl->x_desc, n, L->in_c, L->in_h, L->in_w, e))
            return -1;
        break;
    default:
        break;
    }
    cl->n = n;
    return 0;
}

/* The scratch of gt_cuda_conv_bias_grad, its counters zeroed once: each call leaves them zero. */
static int conv_bias_alloc(gt_cuda_ctx *c, gt_cuda_layer *cl, gt_err *e)
{
    size_t ch = (size_t)cl->L.out_c;
    if (!cl->L.b_len)
        return 0;
    if (gt_cuda_malloc(c, (void **)&cl->bias_part, ch * GT_CUDA_BIAS_MAX_SPLITS * sizeof(float),
                       e) ||
        gt_cuda_malloc(c, (void **)&cl->bias_done, ch * sizeof(unsigned), e))
        return -1;
    GT_CUDA_CHECK(c->name, e,
                  cudaMemsetAsync(cl->bias_done, 0, ch * sizeof(unsigned), c->stream));
    return 0;
}

static int conv_init(gt_cuda_ctx *c, gt_cuda_layer *cl, gt_err *e)
{
    const gt_layer *L = &cl->L;
    cudnnMathType_t math = c->tf32 ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION : CUDNN_FMA_MATH;
    cudnnConvolutionDescriptor_t *convs[3] = {&cl->conv_fwd, &cl->conv_bwd_data,
                                              &cl->conv_bwd_filter};
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->x_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->y_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->bias_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreateFilterDescriptor(&cl->w_desc));
    GT_CUDNN_CHECK(c->name, e,
                   cudnnSetFilter4dDescriptor(cl->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                              L->out_c, L->in_c, L->k, L->k));
    if (tensor_set(c, cl->bias_desc, 1, L->out_c, 1, 1, e) || conv_bias_alloc(c, cl, e))
        return -1;
    for (int i = 0; i < 3; i++) {
        GT_CUDNN_CHECK(c->name, e, cudnnCreateConvolutionDescriptor(convs[i]));
        GT_CUDNN_CHECK(c->name, e,
                       cudnnSetConvolution2dDescriptor(*convs[i], L->pad, L->pad, 1, 1, 1, 1,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        GT_CUDNN_CHECK(c->name, e, cudnnSetConvolutionMathType(*convs[i], math));
    }
    int on, oc, oh, ow;
    if (tensor_set(c, cl->x_desc, 1, L->in_c, L->in_h, L->in_w, e))
        return -1;
    GT_CUDNN_CHECK(c->name, e,
                   cudnnGetConvolution2dForwardOutputDim(cl->conv_fwd, cl->x_desc, cl->w_desc,
                                                         &on, &oc, &oh, &ow));
    if (oc != L->out_c || oh != L->out_h || ow != L->out_w)
        return layer_fail(c, cl, e, "cuDNN's convolution output shape differs from the model's");
    return 0;
}

static int pool_init(gt_cuda_ctx *c, gt_cuda_layer *cl, gt_err *e)
{
    const gt_layer *L = &cl->L;
    cudnnPoolingMode_t mode =
        L->kind == GT_MAXPOOL ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->x_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->y_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreatePoolingDescriptor(&cl->pool_desc));
    GT_CUDNN_CHECK(c->name, e,
                   cudnnSetPooling2dDescriptor(cl->pool_desc, mode, CUDNN_PROPAGATE_NAN, L->k,
                                               L->k, 0, 0, L->k, L->k));
    int on, oc, oh, ow;
    if (tensor_set(c, cl->x_desc, 1, L->in_c, L->in_h, L->in_w, e))
        return -1;
    GT_CUDNN_CHECK(c->name, e,
                   cudnnGetPooling2dForwardOutputDim(cl->pool_desc, cl->x_desc, &on, &oc, &oh,
                                                     &ow));
    if (oc != L->out_c || oh != L->out_h || ow != L->out_w)
        return layer_fail(c, cl, e, "cuDNN's pooling output shape differs from the model's");
    return 0;
}

static int act_init(gt_cuda_ctx *c, gt_cuda_layer *cl, gt_err *e)
{
    cudnnActivationMode_t mode = cl->L.kind == GT_RELU      ? CUDNN_ACTIVATION_RELU
                                 : cl->L.kind == GT_SIGMOID ? CUDNN_ACTIVATION_SIGMOID
                                                            : CUDNN_ACTIVATION_TANH;
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->x_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreateActivationDescriptor(&cl->act_desc));
    GT_CUDNN_CHECK(c->name, e,
                   cudnnSetActivationDescriptor(cl->act_desc, mode, CUDNN_PROPAGATE_NAN, 0.0));
    return 0;
}

int gt_cuda_layer_init(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_layer *L, uint32_t index,
                       gt_err *e)
{
    memset(cl, 0, sizeof *cl);
    cl->L = *L;
    cl->index = index;
    if (gt_cuda_ctx_layer_libs(c, e))
        return -1;
    switch (L->kind) {
    case GT_CONV:
        return conv_init(c, cl, e);
    case GT_AVGPOOL:
    case GT_MAXPOOL:
        return pool_init(c, cl, e);
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
        return act_init(c, cl, e);
    case GT_LINEAR:
    case GT_DROPOUT:
        return 0;
    }
    return layer_fail(c, cl, e, "unknown layer kind");
}

void gt_cuda_layer_destroy(gt_cuda_layer *cl)
{
    if (cl->x_desc)
        cudnnDestroyTensorDescriptor(cl->x_desc);
    if (cl->y_desc)
        cudnnDestroyTensorDescriptor(cl->y_desc);
    if (cl->bias_desc)
        cudnnDestroyTensorDescriptor(cl->bias_desc);
    if (cl->w_desc)
        cudnnDestroyFilterDescriptor(cl->w_desc);
    if (cl->conv_fwd)
        cudnnDestroyConvolutionDescriptor(cl->conv_fwd);
    if (cl->conv_bwd_data)
        cudnnDestroyConvolutionDescriptor(cl->conv_bwd_data);
    if (cl->conv_bwd_filter)
        cudnnDestroyConvolutionDescriptor(cl->conv_bwd_filter);
    if (cl->pool_desc)
        cudnnDestroyPoolingDescriptor(cl->pool_desc);
    if (cl->act_desc)
        cudnnDestroyActivationDescriptor(cl->act_desc);
    conv_wgrad_free(cl);
    if (cl->bias_part)
        cudaFree(cl->bias_part);
    if (cl->bias_done)
        cudaFree(cl->bias_done);
    memset(cl, 0, sizeof *cl);
}

/* ---- forward and backward -------------------------------------------------------------------- */

static int conv_forward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p, const float *x,
                        float *y, gt_err *e)
{
    if (!cl->planned)
        return layer_fail(c, cl, e, "convolution algorithms were never chosen");
    GT_CUDNN_CHECK(c->name, e,
                   cudnnConvolutionForward(c->cudnn, &one, cl->x_desc, x, cl->w_desc,
                                           p->params + cl->L.w_off, cl->conv_fwd, cl->fwd_algo,
                                           c->ws, c->ws_bytes, &zero, cl->y_desc, y));
    if (cl->L.b_len)
        GT_CUDNN_CHECK(c->name, e,
                       cudnnAddTensor(c->cudnn, &one, cl->bias_desc, p->params + cl->L.b_off,
                                      &one, cl->y_desc, y));
    return 0;
}

/* Row-major y[n][out] = x[n][in] W[out][in]^T is column-major y^T = W^T' x^T: cuBLAS sees W as
 * an in x out matrix and transposes it. */
static int linear_forward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                          const float *x, float *y, gt_err *e)
{
    int in = (int)cl->L.in_len, out = (int)cl->L.out_len;
    GT_CUBLAS_CHECK(c->name, e,
                    cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, p->n, in, &one,
                                p->params + cl->L.w_off, in, x, in, &zero, y, out));
    if (cl->L.b_len)
        return gt_cuda_bias_add(c, y, p->params + cl->L.b_off, p->n, out, e);
    return 0;
}

int gt_cuda_layer_forward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                          const float *x, float *y, gt_err *e)
{
    if (layer_set_batch(c, cl, p->n, e))
        return -1;
    switch (cl->L.kind) {
    case GT_CONV:
        return conv_forward(c, cl, p, x, y, e);
    case GT_LINEAR:
        return linear_forward(c, cl, p, x, y, e);
    case GT_AVGPOOL:
    case GT_MAXPOOL:
        GT_CUDNN_CHECK(c->name, e,
                       cudnnPoolingForward(c->cudnn, cl->pool_desc, &one, cl->x_desc, x, &zero,
                                           cl->y_desc, y));
        return 0;
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
        GT_CUDNN_CHECK(c->name, e,
                       cudnnActivationForward(c->cudnn, cl->act_desc, &one, cl->x_desc, x, &zero,
                                              cl->x_desc, y));
        return 0;
    case GT_DROPOUT:
        return gt_cuda_dropout_forward(c, x, y, p->mask, p->n, cl->L.out_len, cl->L.p, p->seed,
                                       p->epoch, p->key, p->ids, cl->index, e);
    }
    return layer_fail(c, cl, e, "unknown layer kind");
}

static int conv_backward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                         const float *x, const float *dy, float *dx, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (!cl->planned || (dx && !cl->need_dx))
        return layer_fail(c, cl, e, "convolution backward algorithms were never chosen");
    if (cl->wgrad_own && (cl->wgrad_own == WGRAD_TAPS || p->n <= cl->wgrad_cap)) {
        if (conv_wgrad_own(c, cl, p->n, x, dy, p->grad + L->w_off, e))
            return -1;
    } else {
        GT_CUDNN_CHECK(c->name, e,
                       cudnnConvolutionBackwardFilter(c->cudnn, &one, cl->x_desc, x, cl->y_desc,
                                                      dy, cl->conv_bwd_filter,
                                                      cl->bwd_filter_algo, c->ws, c->ws_bytes,
                                                      &one, cl->w_desc, p->grad + L->w_off));
    }
    if (L->b_len && gt_cuda_conv_bias_grad(c, dy, p->grad + L->b_off, cl->bias_part,
                                           cl->bias_done, p->n, L->out_c,
                                           L->out_h * L->out_w, e))
        return -1;
    if (dx)
        GT_CUDNN_CHECK(c->name, e,
                       cudnnConvolutionBackwardData(c->cudnn, &one, cl->w_desc,
                                                    p->params + L->w_off, cl->y_desc, dy,
                                                    cl->conv_bwd_data, cl->bwd_data_algo, c->ws,
                                                    c->ws_bytes, &zero, cl->x_desc, dx));
    return 0;
}

/* dW[out][in] += dy^T x is column-major dW^T (in x out) += x^T dy; dx[n][in] = dy W is
 * column-major dx^T (in x n) = W^T dy^T. */
static int linear_backward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                           const float *x, const float *dy, float *dx, int bias, gt_err *e)
{
    const gt_layer *L = &cl->L;
    int in = (int)L->in_len, out = (int)L->out_len;
    GT_CUBLAS_CHECK(c->name, e,
                    cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, p->n, &one, x, in,
                                dy, out, &one, p->grad + L->w_off, in));
    if (bias && L->b_len && gt_cuda_bias_grad(c, dy, p->grad + L->b_off, p->n, out, e))
        return -1;
    if (dx)
        GT_CUBLAS_CHECK(c->name, e,
                        cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, p->n, out, &one,
                                    p->params + L->w_off, in, dy, out, &zero, dx, in));
    return 0;
}

int gt_cuda_layer_backward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                           const float *x, const float *y, const float *dy, float *dx,
                           gt_err *e)
{
    if (layer_set_batch(c, cl, p->n, e))
        return -1;
    switch (cl->L.kind) {
    case GT_CONV:
        return conv_backward(c, cl, p, x, dy, dx, e);
    case GT_LINEAR:
        return linear_backward(c, cl, p, x, dy, dx, 1, e);
    default:
        break;
    }
    if (!dx)
        return 0;
    switch (cl->L.kind) {
    case GT_AVGPOOL:
    case GT_MAXPOOL:
        GT_CUDNN_CHECK(c->name, e,
                       cudnnPoolingBackward(c->cudnn, cl->pool_desc, &one, cl->y_desc, y,
                                            cl->y_desc, dy, cl->x_desc, x, &zero, cl->x_desc,
                                            dx));
        return 0;
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
        GT_CUDNN_CHECK(c->name, e,
                       cudnnActivationBackward(c->cudnn, cl->act_desc, &one, cl->x_desc, y,
                                               cl->x_desc, dy, cl->x_desc, x, &zero, cl->x_desc,
                                               dx));
        return 0;
    case GT_DROPOUT:
        return gt_cuda_dropout_backward(c, dy, p->mask, dx, (size_t)p->n * cl->L.out_len,
                                        cl->L.p, e);
    default:
        break;
    }
    return layer_fail(c, cl, e, "unknown layer kind");
}

/* ---- epilogues ------------------------------------------------------------------------------- */

/* What of next (the nnext layers after cl's) cl's epilogue can run: cl's epi fields, and
 * cl->absorbs returned. */
static int layer_plan_epilogue(gt_cuda_layer *cl, const gt_layer *next, int nnext)
{
    gt_layer_kind kind = cl->L.kind;
    cl->absorbs = 0;
    cl->epi_pool = cl->epi_k = 0;
    cl->epi_p = 0.0f;
    cl->epi_drop_index = 0;
    if ((kind != GT_CONV && kind != GT_LINEAR) || nnext < 1 || next[0].kind != GT_RELU)
        return 0;
    cl->absorbs = 1;
    if (nnext < 2)
        return 1;
    if (kind == GT_CONV && (next[1].kind == GT_MAXPOOL || next[1].kind == GT_AVGPOOL)) {
        cl->epi_pool = next[1].kind;
        cl->epi_k = next[1].k;
        cl->absorbs = 2;
    } else if (kind == GT_LINEAR && next[1].kind == GT_DROPOUT) {
        cl->epi_p = next[1].p;
        cl->epi_drop_index = cl->index + 2;
        cl->absorbs = 2;
    }
    return cl->absorbs;
}

int gt_cuda_layer_path_env(int *epilogues, gt_err *e)
{
    const char *v = getenv("GT_LAYER_PATH");
    *epilogues = 0;
    if (!v || !*v || strcmp(v, "plain") == 0)
        return 0;
    if (strcmp(v, "epilogue") == 0) {
        *epilogues = 1;
        return 0;
    }
    return gt_fail(e, "GT_LAYER_PATH: bad value '%.40s' (plain or epilogue)", v);
}

void gt_cuda_layers_plan_epilogues(gt_cuda_layer *layer, const gt_model *m, int *head)
{
    for (int l = 0; l < m->nlayers; l++)
        head[l] = l;
    for (int l = 0; l < m->nlayers; l++) {
        int k = layer_plan_epilogue(&layer[l], m->layers + l + 1, m->nlayers - l - 1);
        for (int j = 1; j <= k; j++)
            head[l + j] = l;
        l += k;
    }
}

static const float *layer_bias(const gt_cuda_layer *cl, const float *params)
{
    return cl->L.b_len ? params + cl->L.b_off : NULL;
}

static int epilogue_check(gt_cuda_ctx *c, gt_cuda_layer *cl, gt_err *e)
{
    if (cl->absorbs < 1 || (cl->L.kind != GT_CONV && cl->L.kind != GT_LINEAR))
        return layer_fail(c, cl, e, "the layer has no epilogue");
    if (cl->L.kind == GT_CONV && !cl->planned)
        return layer_fail(c, cl, e, "convolution algorithms were never chosen");
    return 0;
}

int gt_cuda_layer_forward_epilogue(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                                   const float *x, float *z, float *y, int train, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (epilogue_check(c, cl, e) || layer_set_batch(c, cl, p->n, e))
        return -1;
    const float *b = layer_bias(cl, p->params);
    if (L->kind == GT_CONV) {
        GT_CUDNN_CHECK(c->name, e,
                       cudnnConvolutionForward(c->cudnn, &one, cl->x_desc, x, cl->w_desc,
                                               p->params + L->w_off, cl->conv_fwd, cl->fwd_algo,
                                               c->ws, c->ws_bytes, &zero, cl->y_desc, z));
        return gt_cuda_conv_epilogue_forward(c, z, b, p->n, L->out_c, L->out_h, L->out_w,
                                             cl->absorbs == 2 ? cl->epi_pool : 0, cl->epi_k, y,
                                             e);
    }
    int in = (int)L->in_len, out = (int)L->out_len;
    GT_CUBLAS_CHECK(c->name, e,
                    cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, p->n, in, &one,
                                p->params + L->w_off, in, x, in, &zero, z, out));
    gt_cuda_drop drop = {cl->epi_p, p->mask, p->seed, p->epoch, p->key, p->ids,
                         cl->epi_drop_index};
    int dropping = train && cl->absorbs == 2;
    if (dropping && !p->mask)
        return layer_fail(c, cl, e, "the epilogue's dropout has no mask buffer");
    return gt_cuda_linear_epilogue_forward(c, z, b, p->n, L->out_len, dropping ? &drop : NULL,
                                           y, e);
}

int gt_cuda_layer_backward_epilogue(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                                    const float *x, const float *z, const float *dy, float *dz,
                                    float *dx, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (epilogue_check(c, cl, e) || layer_set_batch(c, cl, p->n, e))
        return -1;
    const float *b = layer_bias(cl, p->params);
    if (L->kind == GT_CONV)
        return gt_cuda_conv_epilogue_backward(c, z, b, dy, p->n, L->out_c, L->out_h, L->out_w,
                                              cl->absorbs == 2 ? cl->epi_pool : 0, cl->epi_k,
                                              dz, e) ||
                       conv_backward(c, cl, p, x, dz, dx, e)
                   ? -1
                   : 0;
    int dropping = cl->absorbs == 2;
    if (dropping && !p->mask)
        return layer_fail(c, cl, e, "the epilogue's dropout has no mask buffer");
    if (gt_cuda_linear_epilogue_backward(c, z, b, dy, dropping ? p->mask : NULL, cl->epi_p, p->n,
                                         (int)L->out_len, dz,
                                         L->b_len ? p->grad + L->b_off : NULL, e))
        return -1;
    return linear_backward(c, cl, p, x, dz, dx, 0, e);
}
