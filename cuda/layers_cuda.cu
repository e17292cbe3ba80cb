/* layers_cuda.cu - the GPU version of each layer of src/layers.c, with the same semantics and
 * layouts: convolution (any stride and padding, with or without bias), pooling, activations and
 * batch norm's evaluation through cuDNN (NCHW float), linear through cuBLAS, dropout through
 * kernels.cu, batch norm in training, global average pooling and the residual add through
 * blocks_cuda.cu. The block markers "res[" and "|" compute nothing here: the network loop
 * (device_cuda.cu) routes their activations and gradients, as src/cpu_net.c does.
 *
 * A gt_cuda_layer holds the descriptors of one layer; they are rewritten only when the batch
 * size changes (a short last batch, an evaluation chunk). Convolution algorithms are chosen once
 * at start-up by timing them at the training batch, and kept in a process-wide cache
 * (conv_cache.h) that every layer and device with the same key takes them from; the other batch
 * sizes reuse them, and if one needs more workspace than was allocated, cuDNN's heuristics pick
 * others that fit (no timing), so a step never allocates.
 *
 * In a bf16 context (device.h's GT_PRECISION_BF16) convolutions and linear layers round their
 * input, weights and output gradient into bf16 copies (the context's half scratch and the pass's
 * params_half), multiply with fp32 accumulation, and widen the results back to fp32: activations,
 * gradients and everything else stay fp32. A convolution's copies are channels-last (NHWC, its
 * filter's k, r, s, c), the layout Hopper's tensor-core kernels take (on NCHW bf16 cuDNN ran a
 * kernel without tensor cores); the conversions transpose as they round or widen, so the arrays
 * the rest of the network sees stay NCHW. In a training step a convolution's input copy is the
 * pass's x_half, made once a step (by the ReLU before it, which then writes its output's copy as
 * well, or by the first convolution of that input) and read again by backward. */
#include "gt_cuda.h"

#include "gputrain/conv_cache.h"
#include "gputrain/layers.h" /* GT_BN_EPS, GT_BN_MOMENTUM */

#include <cuda_bf16.h>

#include <stdio.h>
#include <string.h>

static const float one = 1.0f, zero = 0.0f;

static int layer_fail(gt_cuda_ctx *c, const gt_cuda_layer *cl, gt_err *e, const char *what)
{
    return gt_fail(e, "%s: layer %u (%s): %s", c->name, cl->index,
                   cl->L.name[0] ? cl->L.name : "unnamed", what);
}

/* bf16 convolutions are channels-last (NHWC copies, blocks_cuda.cu); everything else NCHW. */
static cudnnTensorFormat_t layout_of(cudnnDataType_t type)
{
    return type == CUDNN_DATA_BFLOAT16 ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

static int tensor_set_type(gt_cuda_ctx *c, cudnnTensorDescriptor_t d, cudnnDataType_t type, int n,
                           int ch, int h, int w, gt_err *e)
{
    GT_CUDNN_CHECK(c->name, e, cudnnSetTensor4dDescriptor(d, layout_of(type), type, n, ch, h, w));
    return 0;
}

static int tensor_set(gt_cuda_ctx *c, cudnnTensorDescriptor_t d, int n, int ch, int h, int w,
                      gt_err *e)
{
    return tensor_set_type(c, d, CUDNN_DATA_FLOAT, n, ch, h, w, e);
}

/* Whether cuDNN and cuBLAS may use tensor cores: TF32 on fp32 data, or bf16 data. */
static int tensor_ops_ok(const gt_cuda_ctx *c)
{
    return c->tf32 || c->bf16;
}

/* The math type of a convolution's legacy descriptors (fp32: plain multiply-adds, as the fp32
 * accuracy check's reference runs), also part of its choices' cache key. */
static cudnnMathType_t conv_search_math(const gt_cuda_ctx *c)
{
    return c->tf32 ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
           : c->bf16 ? CUDNN_TENSOR_OP_MATH
                     : CUDNN_FMA_MATH;
}

static int conv_set_batch_desc(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, gt_err *e)
{
    const gt_layer *L = &cl->L;
    return tensor_set_type(c, cl->x_desc, cl->dtype, n, L->in_c, L->in_h, L->in_w, e) ||
           tensor_set_type(c, cl->y_desc, cl->dtype, n, L->out_c, L->out_h, L->out_w, e);
}

/* What every direction's choice at the layer's current batch depends on (conv_cache.h) but the
 * direction, its determinism rule, the buffers' alignment and the API, which conv_engine.cu sets:
 * the GPU, the shapes, types and math, the search workspace and cuDNN's version (a choice kept on
 * disk names its engine by number). */
static gt_conv_key conv_key(const gt_cuda_ctx *c, const gt_cuda_layer *cl)
{
    const gt_layer *L = &cl->L;
    gt_conv_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.gpu, sizeof k.gpu, "%s", c->gpu);
    k.cc_major = c->cc_major;
    k.cc_minor = c->cc_minor;
    k.sms = c->sms;
    k.n = cl->n;
    k.c = L->in_c;
    k.h = L->in_h;
    k.w = L->in_w;
    k.k = L->out_c;
    k.r = k.s = L->k;
    k.stride = L->stride;
    k.pad = L->pad;
    k.dtype = (int)cl->dtype;
    k.layout = (int)layout_of(cl->dtype);
    k.math = (int)conv_search_math(c);
    k.tensor_ops = tensor_ops_ok(c);
    k.limit = c->ws_bytes;
    k.lib = (int)cudnnGetVersion();
    return k;
}

int gt_cuda_layer_choose_algos(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, int n_max, int wait,
                               const float *x, const float *w, float *y, float *dx, float *dw,
                               size_t *ws_need, gt_err *e)
{
    cl->planned = 0;
    cl->need_dx = dx != NULL;
    cl->n = 0;
    if (conv_set_batch_desc(c, cl, n, e))
        return -1;
    cl->n = n;
    /* through the backend API (conv_engine.cu); the legacy descriptors at batch n serve its
     * fp32 accuracy check */
    gt_conv_key base = conv_key(c, cl);
    void *const bufs[5] = {(void *)x, (void *)w, y, dx, dw};
    int rc = gt_conv_engine_choose(c, cl, n, n_max, wait, &base, bufs, ws_need, e);
    cl->planned = rc == 0;
    cl->n = 0; /* the next use sets its batch and its plans */
    return rc;
}

/* The chosen engine configurations of a convolution as "fwd eE filter eE data eE" (cuDNN's
 * global engine numbers; data only where backward computes an input gradient). */
int gt_cuda_layer_describe_algos(const gt_cuda_layer *cl, char *buf, size_t len)
{
    if (cl->L.kind != GT_CONV || !cl->planned)
        return snprintf(buf, len, "-");
    return gt_conv_engine_describe(cl, buf, len);
}

/* ---- descriptors ----------------------------------------------------------------------------- */

static int layer_set_batch(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (cl->n == n)
        return 0;
    cl->n = 0;
    switch (L->kind) {
    case GT_CONV:
        if (conv_set_batch_desc(c, cl, n, e))
            return -1;
        cl->n = n;
        if (cl->planned && gt_conv_engine_batch(c, cl, n, e)) {
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
    case GT_BATCHNORM:
        if (tensor_set(c, cl->x_desc, n, L->in_c, L->in_h, L->in_w, e))
            return -1;
        break;
    case GT_LINEAR:
    case GT_DROPOUT:
    case GT_GAP:
    case GT_RES_BEGIN:
    case GT_RES_SPLIT:
    case GT_RES_END:
        break; /* no descriptors */
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
    cudnnMathType_t math = conv_search_math(c);
    /* bf16: the convolution reads and writes bf16 copies (gt_cuda_ctx's half scratch) and
     * accumulates in fp32 (the descriptors' compute type stays float). */
    cl->dtype = c->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    cudnnConvolutionDescriptor_t *convs[3] = {&cl->conv_fwd, &cl->conv_bwd_data,
                                              &cl->conv_bwd_filter};
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->x_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->y_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->bias_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreateFilterDescriptor(&cl->w_desc));
    GT_CUDNN_CHECK(c->name, e,
                   cudnnSetFilter4dDescriptor(cl->w_desc, cl->dtype, layout_of(cl->dtype),
                                              L->out_c, L->in_c, L->k, L->k));
    if (tensor_set(c, cl->bias_desc, 1, L->out_c, 1, 1, e) || conv_bias_alloc(c, cl, e))
        return -1;
    for (int i = 0; i < 3; i++) {
        GT_CUDNN_CHECK(c->name, e, cudnnCreateConvolutionDescriptor(convs[i]));
        GT_CUDNN_CHECK(c->name, e,
                       cudnnSetConvolution2dDescriptor(*convs[i], L->pad, L->pad, L->stride,
                                                       L->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                       CUDNN_DATA_FLOAT));
        GT_CUDNN_CHECK(c->name, e, cudnnSetConvolutionMathType(*convs[i], math));
    }
    int on, oc, oh, ow;
    if (tensor_set_type(c, cl->x_desc, cl->dtype, 1, L->in_c, L->in_h, L->in_w, e))
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

/* Batch norm: the batch's descriptor (set per batch size) and the 1 x C x 1 x 1 one of gamma,
 * beta and the statistics (cuDNN's inference), the saved mean and inverse std the backward
 * reads, and the training kernels' scratch. */
static int bn_init(gt_cuda_ctx *c, gt_cuda_layer *cl, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (L->w_len != (size_t)L->in_c || L->b_len != (size_t)L->in_c ||
        L->s_len != 2 * (size_t)L->in_c + 1 || L->out_c != L->in_c)
        return layer_fail(c, cl, e, "batch norm's parameters or buffers do not fit its channels");
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->x_desc));
    GT_CUDNN_CHECK(c->name, e, cudnnCreateTensorDescriptor(&cl->bn_desc));
    if (tensor_set(c, cl->bn_desc, 1, L->in_c, 1, 1, e))
        return -1;
    if (gt_cuda_malloc(c, (void **)&cl->bn_save, 2 * (size_t)L->in_c * sizeof(float), e))
        return -1;
    return gt_cuda_malloc(c, (void **)&cl->bn_scratch,
                          gt_cuda_bn_scratch_len(c, L->in_c) * sizeof(float), e);
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
        if (L->stride < 1)
            return layer_fail(c, cl, e, "convolution stride below 1");
        return conv_init(c, cl, e);
    case GT_AVGPOOL:
    case GT_MAXPOOL:
        return pool_init(c, cl, e);
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
        return act_init(c, cl, e);
    case GT_BATCHNORM:
        return bn_init(c, cl, e);
    case GT_LINEAR:
    case GT_DROPOUT:
    case GT_GAP:
    case GT_RES_BEGIN:
    case GT_RES_SPLIT:
    case GT_RES_END:
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
    if (cl->bn_desc)
        cudnnDestroyTensorDescriptor(cl->bn_desc);
    if (cl->bn_save)
        cudaFree(cl->bn_save);
    if (cl->bn_scratch)
        cudaFree(cl->bn_scratch);
    if (cl->bias_part)
        cudaFree(cl->bias_part);
    if (cl->bias_done)
        cudaFree(cl->bias_done);
    gt_conv_engines_free(cl);
    memset(cl, 0, sizeof *cl);
}

/* ---- forward and backward -------------------------------------------------------------------- */

/* The bf16 parameters of layer L (weights at w_off), or NULL with a message when the pass has
 * none or the scratch cannot hold rows values. */
static const __nv_bfloat16 *half_params(gt_cuda_ctx *c, const gt_cuda_layer *cl,
                                        const gt_cuda_pass *p, size_t rows, gt_err *e)
{
    if (!p->params_half || !c->half_a || !c->half_b || rows > c->half_len) {
        layer_fail(c, cl, e, "the bf16 parameters or scratch are missing or too small");
        return NULL;
    }
    return (const __nv_bfloat16 *)p->params_half + cl->L.w_off;
}

/* bf16 (channels-last copies, NCHW fp32 arrays): x rounded into the pass's x_half (once a step
 * for all the convolutions of one input, and kept for backward) or else into half_a, the
 * convolution into half_b, then widened into y with the bias added on the way. */
static int conv_forward_bf16(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                             const float *x, float *y, gt_err *e)
{
    const gt_layer *L = &cl->L;
    size_t xin = (size_t)p->n * L->in_len, yout = (size_t)p->n * L->out_len;
    const __nv_bfloat16 *w = half_params(c, cl, p, xin > yout ? xin : yout, e);
    void *xh = p->x_half ? p->x_half : c->half_a;
    size_t in_plane = (size_t)L->in_h * L->in_w, out_plane = (size_t)L->out_h * L->out_w;
    if (!w || ((!p->x_half || p->x_half_fill) &&
               gt_cuda_to_nhwc_bf16(c, x, xh, (size_t)p->n, L->in_c, in_plane, e)))
        return -1;
    if (gt_conv_engine_run(c, cl, GT_CONV_FWD, xh, w, c->half_b, e))
        return -1;
    return gt_cuda_from_nhwc_bf16(c, c->half_b, y, (size_t)p->n, L->out_c, out_plane,
                                  L->b_len ? p->params + L->b_off : NULL, e);
}

static int conv_forward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p, const float *x,
                        float *y, gt_err *e)
{
    if (!cl->planned)
        return layer_fail(c, cl, e, "convolution algorithms were never chosen");
    if (cl->dtype == CUDNN_DATA_BFLOAT16)
        return conv_forward_bf16(c, cl, p, x, y, e);
    if (gt_conv_engine_run(c, cl, GT_CONV_FWD, x, p->params + cl->L.w_off, y, e))
        return -1;
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
    if (c->bf16) {
        /* bf16 x and W, the product accumulated and written in fp32. */
        const __nv_bfloat16 *w = half_params(c, cl, p, (size_t)p->n * in, e);
        if (!w || gt_cuda_to_bf16(c, x, c->half_a, (size_t)p->n * in, e))
            return -1;
        GT_CUBLAS_CHECK(c->name, e,
                        cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, p->n, in, &one, w,
                                     CUDA_R_16BF, in, c->half_a, CUDA_R_16BF, in, &zero, y,
                                     CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return cl->L.b_len ? gt_cuda_bias_add(c, y, p->params + cl->L.b_off, p->n, out, e) : 0;
    }
    GT_CUBLAS_CHECK(c->name, e,
                    cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, p->n, in, &one,
                                p->params + cl->L.w_off, in, x, in, &zero, y, out));
    if (cl->L.b_len)
        return gt_cuda_bias_add(c, y, p->params + cl->L.b_off, p->n, out, e);
    return 0;
}

/* Training normalises with the batch's statistics (blocks_cuda.cu's kernels): the running ones
 * move by f = 1 to the batch's own (the stats the store folds in, count 1) or by
 * f = GT_BN_MOMENTUM as PyTorch's do (count + 1). Evaluation normalises with the running
 * statistics (cuDNN). */
static int bn_forward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p, const float *x,
                      float *y, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (!p->buffers)
        return layer_fail(c, cl, e, "batch norm without the model's buffers");
    float *mean = p->buffers + L->s_off, *var = mean + L->in_c, *count = var + L->in_c;
    const float *gamma = p->params + L->w_off, *beta = p->params + L->b_off;
    if (!p->train) {
        GT_CUDNN_CHECK(c->name, e,
                       cudnnBatchNormalizationForwardInference(
                           c->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, cl->x_desc, x,
                           cl->x_desc, y, cl->bn_desc, gamma, beta, mean, var, GT_BN_EPS));
        return 0;
    }
    double factor = p->bn_running ? GT_BN_MOMENTUM : 1.0;
    return gt_cuda_bn_forward_train(c, x, y, p->n, L->in_c, (size_t)L->in_h * L->in_w, gamma,
                                    beta, factor, mean, var, count, cl->bn_save, cl->bn_scratch,
                                    e);
}

/* ---- bf16 channels-last activations (device_cuda.cu's channels-last path) ------------------ */

/* A channels-last convolution's bf16 NHWC input: x itself, or for the stem (whose input is the
 * fp32 NCHW batch) its copy, the pass's x_half (made here where x_half_fill) or else rounded into
 * half_a; NULL with e set on failure. */
static const void *nhwc_conv_input(gt_cuda_ctx *c, const gt_cuda_layer *cl,
                                   const gt_cuda_pass *p, const float *x, int fill, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (cl->nhwc_in)
        return x;
    void *to = p->x_half ? p->x_half : c->half_a;
    if ((!p->x_half || fill) &&
        gt_cuda_to_nhwc_bf16(c, x, to, (size_t)p->n, L->in_c, (size_t)L->in_h * L->in_w, e))
        return NULL;
    return to;
}

/* The convolution writes straight into y, batch norm (with the ReLU after it where p->relu)
 * normalises in place of its fp32 kernels, the global average pool widens into fp32 [n][c]. */
static int nhwc_forward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p, const float *x,
                        float *y, gt_err *e)
{
    const gt_layer *L = &cl->L;
    size_t plane = (size_t)L->in_h * L->in_w, len = (size_t)p->n * L->in_len;
    if (L->kind == GT_CONV) {
        if (!cl->planned)
            return layer_fail(c, cl, e, "convolution algorithms were never chosen");
        if (!cl->nhwc_out || L->b_len)
            return layer_fail(c, cl, e, "a channels-last convolution has a bias or fp32 output");
        const __nv_bfloat16 *w = half_params(c, cl, p, cl->nhwc_in ? 0 : len, e);
        const void *xh = w ? nhwc_conv_input(c, cl, p, x, p->x_half_fill, e) : NULL;
        return xh ? gt_conv_engine_run(c, cl, GT_CONV_FWD, xh, w, y, e) : -1;
    }
    if (L->kind == GT_BATCHNORM) {
        if (!p->buffers)
            return layer_fail(c, cl, e, "batch norm without the model's buffers");
        float *mean = p->buffers + L->s_off, *var = mean + L->in_c, *count = var + L->in_c;
        const float *gamma = p->params + L->w_off, *beta = p->params + L->b_off;
        if (!p->train)
            return gt_cuda_bn_forward_infer_nhwc(c, x, y, p->n, L->in_c, plane, gamma, beta, mean,
                                                 var, cl->bn_scratch, p->relu, e);
        double factor = p->bn_running ? GT_BN_MOMENTUM : 1.0;
        return gt_cuda_bn_forward_train_nhwc(c, x, y, p->n, L->in_c, plane, gamma, beta, factor,
                                             mean, var, count, cl->bn_save, cl->bn_scratch,
                                             p->relu, e);
    }
    if (L->kind == GT_RELU)
        return gt_cuda_relu_nhwc(c, x, y, len, e);
    if (L->kind == GT_RES_END)
        return p->other ? gt_cuda_add_nhwc(c, x, p->other, y, len, e)
                        : layer_fail(c, cl, e, "a block's end without its other branch");
    if (L->kind == GT_GAP)
        return gt_cuda_gap_forward_nhwc(c, x, y, (size_t)p->n, L->in_c, plane, e);
    return layer_fail(c, cl, e, "no channels-last kernels for this kind of layer");
}

/* A convolution's weight gradient and its input gradient are independent: both read dy and
 * neither writes what the other reads. At batch 128 resnet18's 7x7 and 4x4 layers start fewer
 * thread blocks in either product than the GPU has multiprocessors, so where a layer has an input
 * gradient of at most c->side_tiles tiles of 128 x 128 (the multiprocessors' count: less than
 * one wave) its weight gradient runs beside it on the context's side stream, with its own
 * workspace, and the compute stream waits for it before the next layer (which overwrites dy's
 * buffer); larger layers fill the GPU alone, and beside them the fork and join cost (every layer
 * beside: resnet20 at batch 256 -5%; this bound: +1%, resnet18 on Fashion-MNIST at batch 128
 * +1.3%, every layer +2.4%; results/resnet-2026-11-27-c25-c155, calls 82-83). The same kernels on
 * the same data: the same bits.
 * Whether the side stream and its workspace exist for layer cl at batch n: 1, 0 where the layer
 * is larger, or they are not made inside a capture, where nothing may be allocated (that step
 * keeps them in line), -1 with e set. */
static int side_ready(gt_cuda_ctx *c, const gt_cuda_layer *cl, int n, gt_err *e)
{
    const gt_layer *L = &cl->L;
    size_t rows = (size_t)n * L->in_h * L->in_w;
    if ((rows + 127) / 128 * (((size_t)L->in_c + 127) / 128) > c->side_tiles)
        return 0;
    if (!c->side || c->ws_side_bytes < c->ws_bytes) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        GT_CUDA_CHECK(c->name, e, cudaStreamIsCapturing(c->stream, &cs));
        if (cs != cudaStreamCaptureStatusNone)
            return 0;
    }
    if (!c->side) {
        GT_CUDA_CHECK(c->name, e, cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking));
        GT_CUDA_CHECK(c->name, e, cudaEventCreateWithFlags(&c->side_fork, cudaEventDisableTiming));
        GT_CUDA_CHECK(c->name, e, cudaEventCreateWithFlags(&c->side_join, cudaEventDisableTiming));
    }
    if (c->ws_side_bytes < c->ws_bytes) {
        if (c->ws_side)
            GT_CUDA_CHECK(c->name, e, cudaFree(c->ws_side));
        c->ws_side = NULL;
        c->ws_side_bytes = 0;
        if (gt_cuda_malloc(c, &c->ws_side, c->ws_bytes, e))
            return -1;
        c->ws_side_bytes = c->ws_bytes;
    }
    return 1;
}

/* The weight gradient from x's bf16 NHWC array xh and dy into half_w (k, r, s, c), then added to
 * the fp32 one (k, c, r, s), on c's stream. */
static int wgrad_run(gt_cuda_ctx *c, gt_cuda_layer *cl, const void *xh, const float *dy,
                     float *dw, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (gt_conv_engine_run(c, cl, GT_CONV_BWD_FILTER, xh, c->half_w, (void *)dy, e) ||
        gt_cuda_filter_add_krsc_bf16(c, c->half_w, dw, L->out_c, L->in_c, L->k * L->k, e))
        return -1;
    return 0;
}

/* wgrad_run on the side stream, forked from the compute stream; side_join marks its end. The
 * context's stream, workspace and cuDNN stream are the side's for those calls only. */
static int wgrad_beside(gt_cuda_ctx *c, gt_cuda_layer *cl, const void *xh, const float *dy,
                        float *dw, gt_err *e)
{
    cudaStream_t main = c->stream;
    void *ws = c->ws;
    GT_CUDA_CHECK(c->name, e, cudaEventRecord(c->side_fork, main));
    GT_CUDA_CHECK(c->name, e, cudaStreamWaitEvent(c->side, c->side_fork, 0));
    GT_CUDNN_CHECK(c->name, e, cudnnSetStream(c->cudnn, c->side));
    c->stream = c->side;
    c->ws = c->ws_side;
    int rc = wgrad_run(c, cl, xh, dy, dw, e);
    c->stream = main;
    c->ws = ws;
    GT_CUDNN_CHECK(c->name, e, cudnnSetStream(c->cudnn, main));
    if (rc)
        return -1;
    GT_CUDA_CHECK(c->name, e, cudaEventRecord(c->side_join, c->side));
    return 0;
}

/* The convolution's weight gradient from x's bf16 NHWC array (the stem's: its copy) and dy as
 * they are, beside its input gradient straight into dx (side_ready). */
static int nhwc_backward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                         const float *x, const float *y, const float *dy, float *dx, gt_err *e)
{
    const gt_layer *L = &cl->L;
    size_t plane = (size_t)L->in_h * L->in_w, len = (size_t)p->n * L->in_len;
    if (L->kind == GT_CONV) {
        if (!cl->planned || (dx && !cl->need_dx))
            return layer_fail(c, cl, e, "convolution backward algorithms were never chosen");
        if (dx && !cl->nhwc_in)
            return layer_fail(c, cl, e, "an input gradient of a convolution of fp32 input");
        const __nv_bfloat16 *w = half_params(c, cl, p, cl->nhwc_in ? 0 : len, e);
        if (!w)
            return -1;
        if (!c->half_w || L->w_len > c->half_w_len)
            return layer_fail(c, cl, e, "the bf16 weight-gradient scratch is missing or too small");
        const void *xh = nhwc_conv_input(c, cl, p, x, 0, e);
        int side = xh && dx ? side_ready(c, cl, p->n, e) : 0;
        if (!xh || side < 0 ||
            (side ? wgrad_beside : wgrad_run)(c, cl, xh, dy, p->grad + L->w_off, e) ||
            (dx && gt_conv_engine_run(c, cl, GT_CONV_BWD_DATA, dx, w, (void *)dy, e)))
            return -1;
        if (side)
            GT_CUDA_CHECK(c->name, e, cudaStreamWaitEvent(c->stream, c->side_join, 0));
        return 0;
    }
    if (L->kind == GT_BATCHNORM) {
        if (!p->train || !dx)
            return layer_fail(c, cl, e, "batch norm backward runs in training, to a buffer");
        return gt_cuda_bn_backward_nhwc(c, x, dy, dx, p->n, L->in_c, plane,
                                        p->params + L->w_off, cl->bn_save, p->grad + L->w_off,
                                        p->grad + L->b_off, cl->bn_scratch, e);
    }
    if (L->kind == GT_RELU)
        return dx ? gt_cuda_relu_backward_nhwc(c, y, dy, dx, len, e) : 0;
    if (L->kind == GT_GAP)
        return dx ? gt_cuda_gap_backward_nhwc(c, dy, dx, (size_t)p->n, L->in_c, plane, e) : 0;
    return layer_fail(c, cl, e, "no channels-last kernels for this kind of layer");
}

int gt_cuda_layer_forward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                          const float *x, float *y, gt_err *e)
{
    if (layer_set_batch(c, cl, p->n, e))
        return -1;
    if (cl->nhwc_in || cl->nhwc_out)
        return nhwc_forward(c, cl, p, x, y, e);
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
        if (cl->L.kind == GT_RELU && p->y_half) /* bf16 training: a convolution's copy of y too */
            return gt_cuda_relu_bf16(c, x, y, p->y_half, (size_t)p->n, cl->L.out_c,
                                     (size_t)cl->L.out_h * cl->L.out_w, e);
        GT_CUDNN_CHECK(c->name, e,
                       cudnnActivationForward(c->cudnn, cl->act_desc, &one, cl->x_desc, x, &zero,
                                              cl->x_desc, y));
        return 0;
    case GT_DROPOUT:
        return gt_cuda_dropout_forward(c, x, y, p->mask, p->n, cl->L.out_len, cl->L.p, p->seed,
                                       p->epoch, p->key, p->ids, cl->index, e);
    case GT_BATCHNORM:
        return bn_forward(c, cl, p, x, y, e);
    case GT_GAP:
        return gt_cuda_gap_forward(c, x, y, (size_t)p->n * cl->L.in_c,
                                   (size_t)cl->L.in_h * cl->L.in_w, e);
    case GT_RES_END:
        if (!p->other)
            return layer_fail(c, cl, e, "a block's end without its other branch");
        return gt_cuda_add(c, x, p->other, y, (size_t)p->n * cl->L.out_len, e);
    case GT_RES_BEGIN:
    case GT_RES_SPLIT:
        return layer_fail(c, cl, e, "block markers run in the network loop (device_cuda.cu)");
    }
    return layer_fail(c, cl, e, "unknown layer kind");
}

/* bf16, channels-last: x's copy from forward (the pass's x_half; without one, x rounded into
 * half_a again) and dy into half_b; the weight gradient into half_w (k, r, s, c), then added to
 * the fp32 one (k, c, r, s); the input gradient into half_a (x's copy there is used up), then
 * widened into dx. The bias gradient sums the fp32 dy. */
static int conv_backward_bf16(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                              const float *x, const float *dy, float *dx, gt_err *e)
{
    const gt_layer *L = &cl->L;
    size_t xin = (size_t)p->n * L->in_len, yout = (size_t)p->n * L->out_len;
    const __nv_bfloat16 *w = half_params(c, cl, p, xin > yout ? xin : yout, e);
    if (!w)
        return -1;
    if (!c->half_w || L->w_len > c->half_w_len)
        return layer_fail(c, cl, e, "the bf16 weight-gradient scratch is missing or too small");
    const void *xh = p->x_half ? p->x_half : c->half_a;
    size_t in_plane = (size_t)L->in_h * L->in_w, out_plane = (size_t)L->out_h * L->out_w;
    if ((!p->x_half &&
         gt_cuda_to_nhwc_bf16(c, x, c->half_a, (size_t)p->n, L->in_c, in_plane, e)) ||
        gt_cuda_to_nhwc_bf16(c, dy, c->half_b, (size_t)p->n, L->out_c, out_plane, e))
        return -1;
    if (gt_conv_engine_run(c, cl, GT_CONV_BWD_FILTER, xh, c->half_w, c->half_b, e) ||
        gt_cuda_filter_add_krsc_bf16(c, c->half_w, p->grad + L->w_off, L->out_c, L->in_c,
                                     L->k * L->k, e))
        return -1;
    if (L->b_len && gt_cuda_conv_bias_grad(c, dy, p->grad + L->b_off, cl->bias_part,
                                           cl->bias_done, p->n, L->out_c,
                                           L->out_h * L->out_w, e))
        return -1;
    if (!dx)
        return 0;
    if (gt_conv_engine_run(c, cl, GT_CONV_BWD_DATA, c->half_a, w, c->half_b, e))
        return -1;
    return gt_cuda_from_nhwc_bf16(c, c->half_a, dx, (size_t)p->n, L->in_c, in_plane, NULL, e);
}

static int conv_backward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                         const float *x, const float *dy, float *dx, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (!cl->planned || (dx && !cl->need_dx))
        return layer_fail(c, cl, e, "convolution backward algorithms were never chosen");
    if (cl->dtype == CUDNN_DATA_BFLOAT16)
        return conv_backward_bf16(c, cl, p, x, dy, dx, e);
    /* the filter gradient is added into the gradient array (beta 1) */
    if (gt_conv_engine_run(c, cl, GT_CONV_BWD_FILTER, x, p->grad + L->w_off, (void *)dy, e))
        return -1;
    if (L->b_len && gt_cuda_conv_bias_grad(c, dy, p->grad + L->b_off, cl->bias_part,
                                           cl->bias_done, p->n, L->out_c,
                                           L->out_h * L->out_w, e))
        return -1;
    if (dx)
        return gt_conv_engine_run(c, cl, GT_CONV_BWD_DATA, dx, p->params + L->w_off, (void *)dy, e);
    return 0;
}

/* linear_backward's products on bf16 copies of x (half_a), dy (half_b) and W, accumulated and
 * written in fp32; the bias gradient sums the fp32 dy. */
static int linear_backward_bf16(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                                const float *x, const float *dy, float *dx, gt_err *e)
{
    const gt_layer *L = &cl->L;
    int in = (int)L->in_len, out = (int)L->out_len;
    size_t xin = (size_t)p->n * in, yout = (size_t)p->n * out;
    const __nv_bfloat16 *w = half_params(c, cl, p, xin > yout ? xin : yout, e);
    if (!w || gt_cuda_to_bf16(c, x, c->half_a, xin, e) ||
        gt_cuda_to_bf16(c, dy, c->half_b, yout, e))
        return -1;
    GT_CUBLAS_CHECK(c->name, e,
                    cublasGemmEx(c->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, p->n, &one,
                                 c->half_a, CUDA_R_16BF, in, c->half_b, CUDA_R_16BF, out, &one,
                                 p->grad + L->w_off, CUDA_R_32F, in, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    if (L->b_len && gt_cuda_bias_grad(c, dy, p->grad + L->b_off, p->n, out, e))
        return -1;
    if (dx)
        GT_CUBLAS_CHECK(c->name, e,
                        cublasGemmEx(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, p->n, out, &one, w,
                                     CUDA_R_16BF, in, c->half_b, CUDA_R_16BF, out, &zero, dx,
                                     CUDA_R_32F, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* dW[out][in] += dy^T x is column-major dW^T (in x out) += x^T dy; dx[n][in] = dy W is
 * column-major dx^T (in x n) = W^T dy^T. */
static int linear_backward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                           const float *x, const float *dy, float *dx, gt_err *e)
{
    const gt_layer *L = &cl->L;
    int in = (int)L->in_len, out = (int)L->out_len;
    if (c->bf16)
        return linear_backward_bf16(c, cl, p, x, dy, dx, e);
    GT_CUBLAS_CHECK(c->name, e,
                    cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, p->n, &one, x, in,
                                dy, out, &one, p->grad + L->w_off, in));
    if (L->b_len && gt_cuda_bias_grad(c, dy, p->grad + L->b_off, p->n, out, e))
        return -1;
    if (dx)
        GT_CUBLAS_CHECK(c->name, e,
                        cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, p->n, out, &one,
                                    p->params + L->w_off, in, dy, out, &zero, dx, in));
    return 0;
}

/* With the batch's statistics of the forward just run (the only backward a step takes): gamma's
 * and beta's gradients accumulate into p->grad; a first layer's (dx NULL) needs scratch from
 * the caller for its input gradient. */
static int bn_backward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p, const float *x,
                       const float *dy, float *dx, gt_err *e)
{
    const gt_layer *L = &cl->L;
    if (!p->train)
        return layer_fail(c, cl, e, "batch norm backward runs in training only");
    if (!dx)
        return layer_fail(c, cl, e, "batch norm backward needs an input gradient buffer");
    return gt_cuda_bn_backward(c, x, dy, dx, p->n, L->in_c, (size_t)L->in_h * L->in_w,
                               p->params + L->w_off, cl->bn_save, p->grad + L->w_off,
                               p->grad + L->b_off, cl->bn_scratch, e);
}

int gt_cuda_layer_backward(gt_cuda_ctx *c, gt_cuda_layer *cl, const gt_cuda_pass *p,
                           const float *x, const float *y, const float *dy, float *dx,
                           gt_err *e)
{
    if (layer_set_batch(c, cl, p->n, e))
        return -1;
    if (cl->nhwc_in || cl->nhwc_out)
        return nhwc_backward(c, cl, p, x, y, dy, dx, e);
    switch (cl->L.kind) {
    case GT_CONV:
        return conv_backward(c, cl, p, x, dy, dx, e);
    case GT_LINEAR:
        return linear_backward(c, cl, p, x, dy, dx, e);
    case GT_AVGPOOL:
    case GT_MAXPOOL:
        if (dx)
            GT_CUDNN_CHECK(c->name, e,
                           cudnnPoolingBackward(c->cudnn, cl->pool_desc, &one, cl->y_desc, y,
                                                cl->y_desc, dy, cl->x_desc, x, &zero,
                                                cl->x_desc, dx));
        return 0;
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
        if (dx && cl->L.kind == GT_RELU)
            return gt_cuda_relu_backward(c, y, dy, dx, (size_t)p->n * cl->L.out_len, e);
        if (dx)
            GT_CUDNN_CHECK(c->name, e,
                           cudnnActivationBackward(c->cudnn, cl->act_desc, &one, cl->x_desc, y,
                                                   cl->x_desc, dy, cl->x_desc, x, &zero,
                                                   cl->x_desc, dx));
        return 0;
    case GT_DROPOUT:
        return dx ? gt_cuda_dropout_backward(c, dy, p->mask, dx, (size_t)p->n * cl->L.out_len,
                                             cl->L.p, e)
                  : 0;
    case GT_BATCHNORM:
        return bn_backward(c, cl, p, x, dy, dx, e);
    case GT_GAP:
        return dx ? gt_cuda_gap_backward(c, dy, dx, (size_t)p->n * cl->L.in_c,
                                         (size_t)cl->L.in_h * cl->L.in_w, e)
                  : 0;
    case GT_RES_BEGIN:
    case GT_RES_SPLIT:
    case GT_RES_END:
        return layer_fail(c, cl, e, "block markers run in the network loop (device_cuda.cu)");
    }
    return layer_fail(c, cl, e, "unknown layer kind");
}
