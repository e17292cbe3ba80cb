/* context.cu - one GPU as the other CUDA files see it: its stream, cuDNN and cuBLAS handles and
 * workspace (gt_cuda_ctx), how a failed call becomes a one-line error, how many GPUs there are,
 * pinned host memory, which falls back to plain memory where there is no GPU, and peer access
 * between the GPUs of one process. */
#include "gt_cuda.h"

#include <atomic>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gt_cuda_fail(gt_err *e, const char *gpu, const char *call, const char *what,
                 const char *file, int line)
{
    const char *paren = strchr(call, '(');
    int call_len = paren ? (int)(paren - call) : (int)strlen(call);
    const char *base = strrchr(file, '/');
    return gt_fail(e, "%s: %.*s failed: %s (%s:%d)", gpu, call_len, call, what,
                   base ? base + 1 : file, line);
}

/* Whether this process has brought CUDA up (counted GPUs and found some, or opened one). Until
 * then host memory is plain, so that a run on CPU workers never initialises the driver (which
 * costs up to a second on a GPU host); once set it stays. */
static std::atomic<int> cuda_up{0};

int gt_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (n > 0)
        cuda_up.store(1);
    return n;
}

void *gt_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0)
        return NULL;
    if (!cuda_up.load())
        return gt_alloc(bytes);
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return gt_alloc(bytes);
    }
    /* Callers rely on gt_alloc's zero fill (optimizer state starts at zero). */
    memset(p, 0, bytes);
    return p;
}

void gt_host_free(void *p)
{
    unsigned int flags;
    if (!p)
        return;
    if (cuda_up.load()) {
        if (cudaHostGetFlags(&flags, p) == cudaSuccess) {
            cudaFreeHost(p);
            return;
        }
        cudaGetLastError();
    }
    gt_free(p);
}

void gt_host_register(int device, void *p, size_t bytes)
{
    if (p && bytes && (cudaSetDevice(device) != cudaSuccess ||
                       cudaHostRegister(p, bytes, cudaHostRegisterPortable) != cudaSuccess))
        cudaGetLastError();
}

void gt_host_unregister(void *p)
{
    if (p && cuda_up.load() && cudaHostUnregister(p) != cudaSuccess)
        cudaGetLastError();
}

int gt_cuda_malloc(gt_cuda_ctx *c, void **p, size_t bytes, gt_err *e)
{
    cudaError_t st = cudaMalloc(p, bytes ? bytes : 1);
    if (st != cudaSuccess) {
        *p = NULL;
        return gt_fail(e, "%s: cudaMalloc of %zu bytes failed: %s", c->name, bytes,
                       cudaGetErrorString(st));
    }
    return 0;
}

int gt_cuda_ctx_set_workspace(gt_cuda_ctx *c, size_t bytes, gt_err *e)
{
    if (c->ws_side) { /* sized from ws_bytes again by its next use */
        GT_CUDA_CHECK(c->name, e, cudaFree(c->ws_side));
        c->ws_side = NULL;
        c->ws_side_bytes = 0;
    }
    if (c->ws) {
        GT_CUDA_CHECK(c->name, e, cudaFree(c->ws));
        c->ws = NULL;
        c->ws_bytes = 0;
    }
    if (bytes == 0)
        return 0;
    if (gt_cuda_malloc(c, &c->ws, bytes, e))
        return -1;
    c->ws_bytes = bytes;
    return 0;
}

int gt_cuda_ctx_half_scratch(gt_cuda_ctx *c, size_t act, size_t w, gt_err *e)
{
    void **bufs[3] = {&c->half_a, &c->half_b, &c->half_w};
    size_t want[3] = {act, act, w}, have[3] = {c->half_len, c->half_len, c->half_w_len};
    for (int i = 0; i < 3; i++) {
        if (want[i] <= have[i] && *bufs[i])
            continue;
        if (*bufs[i])
            GT_CUDA_CHECK(c->name, e, cudaFree(*bufs[i]));
        *bufs[i] = NULL;
        if (gt_cuda_malloc(c, bufs[i], (want[i] ? want[i] : 1) * 2, e))
            return -1;
    }
    c->half_len = act > c->half_len ? act : c->half_len;
    c->half_w_len = w > c->half_w_len ? w : c->half_w_len;
    return 0;
}

/* Selects the device and makes sure its context comes up, with a message that names it. */
static int ctx_init_device(gt_cuda_ctx *c, int ordinal, gt_err *e)
{
    int count = 0;
    cudaError_t st = cudaGetDeviceCount(&count);
    if (st != cudaSuccess) {
        cudaGetLastError();
        return gt_fail(e, "--gpus: GPU %d does not exist (no usable CUDA device: %s)", ordinal,
                       cudaGetErrorString(st));
    }
    if (ordinal < 0 || ordinal >= count)
        return gt_fail(e, "--gpus: GPU %d does not exist (this machine has %d)", ordinal, count);
    cudaDeviceProp prop;
    st = cudaGetDeviceProperties(&prop, ordinal);
    if (st != cudaSuccess)
        return gt_fail(e, "--gpus: GPU %d failed to initialise: cudaGetDeviceProperties: %s",
                       ordinal, cudaGetErrorString(st));
    snprintf(c->name, sizeof c->name, "gpu:%d (%.40s)", ordinal, prop.name);
    snprintf(c->gpu, sizeof c->gpu, "%.127s", prop.name);
    c->cc_major = prop.major;
    c->cc_minor = prop.minor;
    c->sms = prop.multiProcessorCount;
    cuda_up.store(1);
    st = cudaSetDevice(ordinal);
    if (st == cudaSuccess)
        st = cudaFree(0);
    if (st != cudaSuccess)
        return gt_fail(e, "--gpus: GPU %d (%s) failed to initialise: %s", ordinal, prop.name,
                       cudaGetErrorString(st));
    return 0;
}

static int ctx_create_handles(gt_cuda_ctx *c, gt_err *e)
{
    GT_CUDA_CHECK(c->name, e, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    return 0;
}

/* cuDNN's and cuBLAS's handles load their libraries' state and kernels, a noticeable part of
 * start-up, so a context whose device runs only the fused kernels never makes them: the layer
 * path's first layer does. */
int gt_cuda_ctx_layer_libs(gt_cuda_ctx *c, gt_err *e)
{
    if (c->cudnn && c->cublas)
        return 0;
    GT_CUDA_CHECK(c->name, e, cudaSetDevice(c->ordinal));
    if (!c->cudnn) {
        GT_CUDNN_CHECK(c->name, e, cudnnCreate(&c->cudnn));
        GT_CUDNN_CHECK(c->name, e, cudnnSetStream(c->cudnn, c->stream));
    }
    if (!c->cublas) {
        GT_CUBLAS_CHECK(c->name, e, cublasCreate(&c->cublas));
        GT_CUBLAS_CHECK(c->name, e, cublasSetStream(c->cublas, c->stream));
        GT_CUBLAS_CHECK(c->name, e,
                        cublasSetMathMode(c->cublas, c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                             : CUBLAS_DEFAULT_MATH));
        if (gt_cuda_malloc(c, &c->cublas_ws, GT_CUDA_CUBLAS_WS, e))
            return -1;
        GT_CUBLAS_CHECK(c->name, e,
                        cublasSetWorkspace(c->cublas, c->cublas_ws, GT_CUDA_CUBLAS_WS));
    }
    return 0;
}

/* gt_cuda_set_deterministic's rule: -1 by precision. Set before the devices open (their threads
 * read it in gt_cuda_ctx_open), so a plain int does. */
static int deterministic_rule = -1;

void gt_cuda_set_deterministic(int on) { deterministic_rule = on < 0 ? -1 : on != 0; }

int gt_cuda_ctx_open(gt_cuda_ctx **out, int ordinal, gt_precision precision, gt_err *e)
{
    *out = NULL;
    gt_cuda_ctx *c = (gt_cuda_ctx *)calloc(1, sizeof *c);
    if (!c)
        return gt_fail(e, "--gpus: GPU %d: out of host memory", ordinal);
    c->ordinal = ordinal;
    c->tf32 = precision == GT_PRECISION_TF32;
    c->bf16 = precision == GT_PRECISION_BF16;
    c->deterministic = deterministic_rule < 0 ? !c->tf32 : deterministic_rule;
    if (ctx_init_device(c, ordinal, e) || ctx_create_handles(c, e)) {
        gt_cuda_ctx_close(c);
        return -1;
    }
    /* GT_WGRAD_SIDE=N: another bound on the tiles (0: every weight gradient in line), for
     * measurements (layers_cuda.cu, side_ready) */
    const char *side = getenv("GT_WGRAD_SIDE");
    c->side_tiles = side ? strtoull(side, NULL, 10) : (size_t)c->sms;
    *out = c;
    return 0;
}

/* Teardown reports nothing: a handle that fails to go away leaves nothing to act on. */
void gt_cuda_ctx_close(gt_cuda_ctx *c)
{
    if (!c)
        return;
    if (c->stream) {
        cudaSetDevice(c->ordinal);
        cudaStreamSynchronize(c->stream);
        if (c->cublas)
            cublasDestroy(c->cublas);
        if (c->cudnn)
            cudnnDestroy(c->cudnn);
        if (c->cublas_ws)
            cudaFree(c->cublas_ws);
        if (c->ws)
            cudaFree(c->ws);
        if (c->ws_side)
            cudaFree(c->ws_side);
        if (c->side) {
            cudaStreamSynchronize(c->side);
            cudaStreamDestroy(c->side);
            cudaEventDestroy(c->side_fork);
            cudaEventDestroy(c->side_join);
        }
        void *half[3] = {c->half_a, c->half_b, c->half_w};
        for (int i = 0; i < 3; i++)
            if (half[i])
                cudaFree(half[i]);
        cudaStreamDestroy(c->stream);
        cudaGetLastError();
    }
    free(c);
}

int gt_cuda_enable_peers(const int *ordinals, int n, gt_err *e)
{
    for (int i = 0; i < n; i++) {
        char gpu[32];
        snprintf(gpu, sizeof gpu, "gpu:%d", ordinals[i]);
        GT_CUDA_CHECK(gpu, e, cudaSetDevice(ordinals[i]));
        for (int j = 0; j < n; j++) {
            int ok = 0;
            if (j == i)
                continue;
            GT_CUDA_CHECK(gpu, e, cudaDeviceCanAccessPeer(&ok, ordinals[i], ordinals[j]));
            if (!ok)
                return gt_fail(e, "GPU %d cannot access GPU %d's memory (no peer access)",
                               ordinals[i], ordinals[j]);
            cudaError_t st = cudaDeviceEnablePeerAccess(ordinals[j], 0);
            if (st == cudaErrorPeerAccessAlreadyEnabled)
                cudaGetLastError();
            else if (st != cudaSuccess)
                return gt_cuda_fail(e, gpu, "cudaDeviceEnablePeerAccess", cudaGetErrorString(st),
                                    __FILE__, __LINE__);
        }
    }
    return 0;
}
