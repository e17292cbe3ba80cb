/* conv_engines.c - what cuDNN's backend API runs for resnet18's bf16 convolutions, beside what
 * the legacy API (the one layers_cuda.cu called until every convolution took engines) runs for
 * the algorithm its search chose.
 *
 * On an H200 the legacy API ran some of resnet18's bf16 convolutions on kernels without tensor
 * cores although the algorithm chosen for them was a tensor-op one, and which ones it did changed
 * with the handle's and descriptors' history (docs/perf-notes.md, "Why not 2x"). The backend API
 * names the engine configuration that runs, so what is timed is what runs. For each convolution
 * shape of resnet18 on 3x32x32 images, batch N, channels-last bf16 with fp32 accumulation, and
 * each direction (forward, backward data, backward filter), this times by execution:
 *   - the legacy API: cudnnFind*AlgorithmEx's first result, then executed through the legacy call
 *     as layers_cuda.cu did;
 *   - the backend API: every engine configuration cuDNN's heuristics (mode A, then the fallback
 *     list) offer that finalizes into a plan within the workspace, executed through
 *     cudnnBackendExecute.
 * and prints one line a shape and direction: the legacy time, the fastest backend configuration
 * (its engine's global index, whether cuDNN notes it non-deterministic) and the ratio; then the
 * sums of a step (each shape counted as often as resnet18 has it).
 *
 * Usage: conv_engines [N] [--all]   (N: batch, default 256; --all: every configuration's time)
 * Needs a GPU; exits 77 without one (the tests' skip code). */
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS_BYTES ((size_t)256 << 20)
#define MAX_CFG 64
#define REPS 10

/* A failed call ends the program with its text, the library's words for the status and the line. */
static void fail_call(const char *call, const char *what, int line)
{
    fprintf(stderr, "conv_engines: %s: %s (line %d)\n", call, what, line);
    exit(1);
}
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            fail_call(#call, cudnnGetErrorString(s_), __LINE__);                                   \
    } while (0)
#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t s_ = (call);                                                                   \
        if (s_ != cudaSuccess)                                                                     \
            fail_call(#call, cudaGetErrorString(s_), __LINE__);                                    \
    } while (0)

/* resnet18 (CIFAR form, torch_resnet.py) on 3x32x32: each distinct convolution and how many of
 * it a step has. */
typedef struct shape {
    int c, h, k, r, stride, pad, count;
} shape;
static const shape SHAPES[] = {
    {3, 32, 64, 3, 1, 1, 1},    {64, 32, 64, 3, 1, 1, 4},   {64, 32, 128, 3, 2, 1, 1},
    {64, 32, 128, 1, 2, 0, 1},  {128, 16, 128, 3, 1, 1, 3}, {128, 16, 256, 3, 2, 1, 1},
    {128, 16, 256, 1, 2, 0, 1}, {256, 8, 256, 3, 1, 1, 3},  {256, 8, 512, 3, 2, 1, 1},
    {256, 8, 512, 1, 2, 0, 1},  {512, 4, 512, 3, 1, 1, 3},
};
enum { FWD, DATA, FILTER };
static const char *const DIR_NAME[] = {"fwd", "data", "filter"};

static cudnnHandle_t handle;
static void *buf_x, *buf_y, *buf_w, *ws;
static cudaEvent_t ev0, ev1;

/* Microseconds a call of run(arg) takes, the median of REPS after one warm-up; -1 if it fails. */
typedef int (*runner)(void *arg);
static double time_us(runner run, void *arg)
{
    double t[REPS];
    if (run(arg) != 0 || cudaDeviceSynchronize() != cudaSuccess)
        return -1;
    for (int i = 0; i < REPS; i++) {
        float ms = 0;
        CU(cudaEventRecord(ev0, 0));
        if (run(arg) != 0)
            return -1;
        CU(cudaEventRecord(ev1, 0));
        CU(cudaEventSynchronize(ev1));
        CU(cudaEventElapsedTime(&ms, ev0, ev1));
        t[i] = 1e3 * ms;
    }
    for (int i = 1; i < REPS; i++) /* insertion sort, REPS is small */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double s = t[j];
            t[j] = t[j - 1];
            t[j - 1] = s;
        }
    return t[REPS / 2];
}

/* ---- the legacy API ---------------------------------------------------------------------------- */

typedef struct legacy {
    int dir;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int algo;
} legacy;

static int legacy_run(void *arg)
{
    legacy *l = arg;
    const float one = 1, zero = 0;
    cudnnStatus_t s;
    if (l->dir == FWD)
        s = cudnnConvolutionForward(handle, &one, l->x, buf_x, l->w, buf_w, l->conv,
                                    (cudnnConvolutionFwdAlgo_t)l->algo, ws, WS_BYTES, &zero, l->y,
                                    buf_y);
    else if (l->dir == DATA)
        s = cudnnConvolutionBackwardData(handle, &one, l->w, buf_w, l->y, buf_y, l->conv,
                                         (cudnnConvolutionBwdDataAlgo_t)l->algo, ws, WS_BYTES,
                                         &zero, l->x, buf_x);
    else
        s = cudnnConvolutionBackwardFilter(handle, &one, l->x, buf_x, l->y, buf_y, l->conv,
                                           (cudnnConvolutionBwdFilterAlgo_t)l->algo, ws, WS_BYTES,
                                           &zero, l->w, buf_w);
    return s == CUDNN_STATUS_SUCCESS ? 0 : -1;
}

/* The legacy search's first result for one direction, executed; its algorithm in *algo. */
static double legacy_time(const shape *s, int n, int dir, int *algo)
{
    legacy l = {.dir = dir};
    int oh = (s->h + 2 * s->pad - s->r) / s->stride + 1, got = 0;
    CK(cudnnCreateTensorDescriptor(&l.x));
    CK(cudnnCreateTensorDescriptor(&l.y));
    CK(cudnnCreateFilterDescriptor(&l.w));
    CK(cudnnCreateConvolutionDescriptor(&l.conv));
    CK(cudnnSetTensor4dDescriptor(l.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, n, s->c, s->h,
                                  s->h));
    CK(cudnnSetTensor4dDescriptor(l.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, n, s->k, oh, oh));
    CK(cudnnSetFilter4dDescriptor(l.w, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, s->k, s->c, s->r,
                                  s->r));
    CK(cudnnSetConvolution2dDescriptor(l.conv, s->pad, s->pad, s->stride, s->stride, 1, 1,
                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CK(cudnnSetConvolutionMathType(l.conv, CUDNN_TENSOR_OP_MATH));
    cudnnMathType_t math = CUDNN_TENSOR_OP_MATH;
    if (dir == FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[8];
        CK(cudnnFindConvolutionForwardAlgorithmEx(handle, l.x, buf_x, l.w, buf_w, l.conv, l.y,
                                                  buf_y, 8, &got, p, ws, WS_BYTES));
        l.algo = p[0].algo;
        math = p[0].mathType;
    } else if (dir == DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[8];
        CK(cudnnFindConvolutionBackwardDataAlgorithmEx(handle, l.w, buf_w, l.y, buf_y, l.conv, l.x,
                                                       buf_x, 8, &got, p, ws, WS_BYTES));
        l.algo = p[0].algo;
        math = p[0].mathType;
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[8];
        CK(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, l.x, buf_x, l.y, buf_y, l.conv,
                                                         l.w, buf_w, 8, &got, p, ws, WS_BYTES));
        l.algo = p[0].algo;
        math = p[0].mathType;
    }
    CK(cudnnSetConvolutionMathType(l.conv, math));
    *algo = l.algo;
    double us = time_us(legacy_run, &l);
    cudnnDestroyTensorDescriptor(l.x);
    cudnnDestroyTensorDescriptor(l.y);
    cudnnDestroyFilterDescriptor(l.w);
    cudnnDestroyConvolutionDescriptor(l.conv);
    return us;
}

/* ---- the backend API --------------------------------------------------------------------------- */

static cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type)
{
    cudnnBackendDescriptor_t d;
    CK(cudnnBackendCreateDescriptor(type, &d));
    return d;
}

static void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void *value)
{
    CK(cudnnBackendSetAttribute(d, name, type, count, value));
}

/* An NHWC bf16 tensor n x c x h x w (dimensions in NCHW order, strides channels-last). */
static cudnnBackendDescriptor_t tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w)
{
    cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cudnnDataType_t type = CUDNN_DATA_BFLOAT16;
    int64_t dims[4] = {n, c, h, w}, strides[4] = {c * h * w, 1, w * c, c}, align = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    CK(cudnnBackendFinalize(t));
    return t;
}

/* The operation graph of one direction of one shape (uids: x 1, w 2, y 3). */
static cudnnBackendDescriptor_t op_graph(const shape *s, int n, int dir)
{
    int64_t oh = (s->h + 2 * s->pad - s->r) / s->stride + 1;
    cudnnBackendDescriptor_t x = tensor(1, n, s->c, s->h, s->h), w = tensor(2, s->k, s->c, s->r, s->r),
                             y = tensor(3, n, s->k, oh, oh);
    cudnnBackendDescriptor_t conv = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t dims = 2, dil[2] = {1, 1}, str[2] = {s->stride, s->stride}, pad[2] = {s->pad, s->pad};
    set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
    set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    CK(cudnnBackendFinalize(conv));
    float alpha = 1, beta = 0;
    cudnnBackendDescriptor_t op;
    if (dir == FWD) {
        op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            1, &conv);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    } else if (dir == DATA) {
        op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    } else {
        op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &x);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &w);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &y);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    }
    CK(cudnnBackendFinalize(op));
    cudnnBackendDescriptor_t g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
    set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    CK(cudnnBackendFinalize(g));
    return g; /* the pieces stay alive for the process: a benchmark of a few dozen graphs */
}

typedef struct backend {
    cudnnBackendDescriptor_t plan, pack;
} backend;

static int backend_run(void *arg)
{
    backend *b = arg;
    return cudnnBackendExecute(handle, b->plan, b->pack) == CUDNN_STATUS_SUCCESS ? 0 : -1;
}

/* Engine configurations of g from heuristics mode (A, or the fallback list) into cfg; count. */
static int64_t heuristics(cudnnBackendDescriptor_t g, cudnnBackendHeurMode_t mode,
                          cudnnBackendDescriptor_t *cfg)
{
    cudnnBackendDescriptor_t h = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
    set(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (cudnnBackendFinalize(h) != CUDNN_STATUS_SUCCESS)
        return 0;
    for (int i = 0; i < MAX_CFG; i++)
        cfg[i] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 MAX_CFG, &got, cfg) != CUDNN_STATUS_SUCCESS)
        got = 0;
    return got;
}

/* The engine behind a configuration: its global index and whether cuDNN notes it
 * non-deterministic. */
static void engine_of(cudnnBackendDescriptor_t cfg, int64_t *index, int *nondet)
{
    cudnnBackendDescriptor_t eng = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t got = 0;
    cudnnBackendNumericalNote_t notes[16];
    *index = -1;
    *nondet = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &got, &eng) != CUDNN_STATUS_SUCCESS)
        return;
    cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got,
                             index);
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, 16, &got, notes) ==
        CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < got; i++)
            *nondet |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
}

/* The fastest configuration of g by execution: its time (-1: none ran), engine and note. */
static double backend_best(cudnnBackendDescriptor_t g, int all, int64_t *best_index,
                           int *best_nondet, int *tried)
{
    cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    double best = -1;
    *tried = 0;
    for (int m = 0; m < 2; m++) {
        cudnnBackendDescriptor_t cfg[MAX_CFG];
        int64_t n = heuristics(g, modes[m], cfg);
        for (int64_t i = 0; i < n; i++) {
            backend b;
            b.plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            set(b.plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
            set(b.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &cfg[i]);
            if (cudnnBackendFinalize(b.plan) != CUDNN_STATUS_SUCCESS)
                continue;
            int64_t need = 0, got = 0;
            CK(cudnnBackendGetAttribute(b.plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                        CUDNN_TYPE_INT64, 1, &got, &need));
            if ((size_t)need > WS_BYTES)
                continue;
            int64_t uids[3] = {1, 2, 3};
            void *ptrs[3] = {buf_x, buf_w, buf_y};
            b.pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
            set(b.pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
            set(b.pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
            set(b.pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
            CK(cudnnBackendFinalize(b.pack));
            double us = time_us(backend_run, &b);
            (*tried)++;
            int64_t index;
            int nondet;
            engine_of(cfg[i], &index, &nondet);
            if (all)
                printf("    %s engine %3lld%s: %8.1f us (workspace %lld)\n",
                       m ? "fallback" : "heur A  ", (long long)index, nondet ? " (nondet)" : "",
                       us, (long long)need);
            if (us >= 0 && (best < 0 || us < best)) {
                best = us;
                *best_index = index;
                *best_nondet = nondet;
            }
        }
    }
    return best;
}

int main(int argc, char **argv)
{
    int n = 256, all = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--all") == 0)
            all = 1;
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: conv_engines [N] [--all]\n");
            return 0;
        } else if ((n = atoi(argv[i])) < 1 || n > 4096) {
            fprintf(stderr, "conv_engines: batch '%s' is not 1..4096\n", argv[i]);
            return 2;
        }
    }
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        printf("conv_engines: no GPU (skipped)\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    size_t big = (size_t)n * 64 * 32 * 32 * 2; /* the largest activation, bf16 */
    if (big < (size_t)512 * 512 * 9 * 2)
        big = (size_t)512 * 512 * 9 * 2;
    CU(cudaMalloc(&buf_x, big));
    CU(cudaMalloc(&buf_y, big));
    CU(cudaMalloc(&buf_w, big));
    CU(cudaMalloc(&ws, WS_BYTES));
    CU(cudaMemset(buf_x, 0, big));
    CU(cudaMemset(buf_y, 0, big));
    CU(cudaMemset(buf_w, 0, big));
    CU(cudaEventCreate(&ev0));
    CU(cudaEventCreate(&ev1));
    CK(cudnnCreate(&handle));
    printf("%s, cuDNN %zu, batch %d, NHWC bf16, fp32 accumulation; median of %d runs (us)\n",
           prop.name, cudnnGetVersion(), n, REPS);
    double sum_legacy = 0, sum_backend = 0;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const shape *s = &SHAPES[i];
        for (int dir = FWD; dir <= FILTER; dir++) {
            if (dir == DATA && s->c == 3)
                continue; /* the stem has no input gradient */
            int algo = -1, tried = 0, nondet = 0;
            int64_t index = -1;
            double lt = legacy_time(s, n, dir, &algo);
            if (all)
                printf("c%d h%d k%d r%d s%d %s:\n", s->c, s->h, s->k, s->r, s->stride,
                       DIR_NAME[dir]);
            double bt = backend_best(op_graph(s, n, dir), all, &index, &nondet, &tried);
            printf("c%-3d h%-2d k%-3d r%d s%d x%d %-6s  legacy algo %d %8.1f  backend engine %3lld%s "
                   "%8.1f (%d tried)  legacy/backend %.2f\n",
                   s->c, s->h, s->k, s->r, s->stride, s->count, DIR_NAME[dir], algo, lt,
                   (long long)index, nondet ? " nondet" : "", bt, tried,
                   lt > 0 && bt > 0 ? lt / bt : 0.0);
            if (lt > 0)
                sum_legacy += lt * s->count;
            if (bt > 0)
                sum_backend += bt * s->count;
        }
    }
    printf("a resnet18 step's convolutions: legacy %.2f ms, backend %.2f ms\n", sum_legacy / 1e3,
           sum_backend / 1e3);
    return 0;
}
