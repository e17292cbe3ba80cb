/* conv_engine.cu - convolutions through cuDNN's backend API: each direction of each
 * convolution runs an execution plan of an engine configuration chosen by timing them.
 *
 * Why: on an H200 with cuDNN 9.14 the legacy calls (cudnnConvolutionForward and the backward
 * two) ran resnet18's channels-last bf16 convolutions 1.4-6.8x slower than the fastest engine
 * configuration the backend API offers for the same shape, 6.60 against 2.56 ms a step
 * (tools/bench/conv_engines.c, docs/perf-notes.md): the legacy algorithms do not reach every
 * engine. PyTorch reaches them through cuDNN's frontend, which sits on this API. The fp32
 * path's NCHW convolutions gained the same way (docs/perf-notes.md, "fp32 convolutions through
 * the backend API").
 *
 * The choice: cuDNN's heuristics (mode A, then its fallback list) name engine configurations for
 * the operation graph of one direction at the training batch; each that finalizes into a plan
 * within the search workspace, compiles nothing at run time, keeps the precision asked (fp32:
 * no configuration cuDNN notes as converting its inputs down, nor, without TF32, one on tensor
 * cores; PyTorch's rule) and, for the backward directions, is deterministic where the device
 * keeps to those (--deterministic; any, if none is) is executed on the steps' own buffers and
 * timed; the fastest is kept as its engine's global index and its knobs' values, in the
 * process-wide cache (conv_cache.h), so every layer and device with the same key rebuilds the
 * same configuration instead of timing again. Plans are per batch size: a layer keeps those
 * of its last few (training, a short last batch, evaluation chunks); a batch whose chosen
 * configuration does not finalize or needs more workspace than there is takes the heuristics'
 * first configuration that fits (no timing), so a step never allocates.
 *
 * Tensors: bf16 x and y NHWC, the filter k, r, s, c, with fp32 accumulation (blocks_cuda.cu
 * makes the copies); fp32 all NCHW (the filter k, c, r, s), the fp32 path's own arrays, its
 * filter gradient added into the gradient array (beta 1) as the legacy call did. Unique ids: x 1,
 * w 2, y 3 in every direction (dx, dw and dy take the places of x, w and y). */
#include "gt_cuda.h"

#include "gputrain/conv_cache.h"
#include "gputrain/counter_rng.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENG_SLOTS 4      /* batch sizes a layer keeps plans for */
#define ENG_OWN 12       /* descriptors behind one plan */
#define ENG_MAX_CFG 64   /* configurations a heuristics query returns */
#define ENG_REPS 4       /* timed runs of a configuration (after one warm-up); the minimum wins */

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

/* A plan and every descriptor it was built from (kept alive with it, destroyed with it). */
typedef struct eng_plan {
    cudnnBackendDescriptor_t own[ENG_OWN];
    int nown;
    cudnnBackendDescriptor_t graph, plan;
    size_t ws;
} eng_plan;

struct gt_conv_engines {
    gt_conv_choice choice[3]; /* a direction's timed choice (GT_CONV_FWD, _BWD_FILTER, _DATA) */
    int ndir;                 /* directions chosen: 2 (no input gradient) or 3 */
    int64_t align[3];         /* byte alignment declared for x, w and y */
    struct {
        int n;                /* batch; 0: empty */
        unsigned used;        /* last use, for eviction */
        eng_plan p[3];
    } slot[ENG_SLOTS];
    unsigned tick;
    int cur;                  /* the slot of the layer's current batch; -1: none */
};

/* ---- descriptors ------------------------------------------------------------------------------ */

#define TRY(call)                                                                                  \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            return s_;                                                                             \
    } while (0)

static void plan_free(eng_plan *p)
{
    for (int i = p->nown - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(p->own[i]);
    memset(p, 0, sizeof *p);
}

/* A new descriptor of p's (destroyed with it). */
static cudnnStatus_t own(eng_plan *p, cudnnBackendDescriptorType_t type,
                         cudnnBackendDescriptor_t *d)
{
    if (p->nown == ENG_OWN)
        return CUDNN_STATUS_INTERNAL_ERROR;
    TRY(cudnnBackendCreateDescriptor(type, d));
    p->own[p->nown++] = *d;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                         cudnnBackendAttributeType_t type, int64_t count, const void *value)
{
    return cudnnBackendSetAttribute(d, name, type, count, value);
}

/* n x c x h x w (dimensions in NCHW order): bf16 with channels-last strides, fp32 NCHW. */
static cudnnStatus_t tensor(eng_plan *p, cudnnDataType_t type, int64_t uid, int64_t n, int64_t c,
                            int64_t h, int64_t w, int64_t align, cudnnBackendDescriptor_t *t)
{
    int64_t dims[4] = {n, c, h, w}, nhwc[4] = {c * h * w, 1, w * c, c},
            nchw[4] = {c * h * w, h * w, w, 1};
    const int64_t *strides = type == CUDNN_DATA_BFLOAT16 ? nhwc : nchw;
    TRY(own(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t));
    TRY(set(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
    TRY(set(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    TRY(set(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    TRY(set(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    TRY(set(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    return cudnnBackendFinalize(*t);
}

/* The operation graph of one direction of layer L at batch n, into p->graph. */
static cudnnStatus_t graph_build(const gt_cuda_ctx *c, const gt_cuda_layer *cl,
                                 const int64_t align[3], int n, int dir, eng_plan *p)
{
    const gt_layer *L = &cl->L;
    cudnnDataType_t t = cl->dtype;
    cudnnBackendDescriptor_t x, w, y, conv, op;
    TRY(tensor(p, t, UID_X, n, L->in_c, L->in_h, L->in_w, align[0], &x));
    TRY(tensor(p, t, UID_W, L->out_c, L->in_c, L->k, L->k, align[1], &w));
    TRY(tensor(p, t, UID_Y, n, L->out_c, L->out_h, L->out_w, align[2], &y));
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t dims = 2, dil[2] = {1, 1}, str[2] = {L->stride, L->stride}, pad[2] = {L->pad, L->pad};
    TRY(own(p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    TRY(set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    TRY(set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    TRY(set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
    TRY(set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    TRY(set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
    TRY(set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    TRY(set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    TRY(cudnnBackendFinalize(conv));
    /* fp32: the filter gradient is added into the gradient array */
    float alpha = 1, beta = dir == GT_CONV_BWD_FILTER && t == CUDNN_DATA_FLOAT ? 1.0f : 0.0f;
    const cudnnBackendDescriptorType_t types[3] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR};
    /* Each operation's attributes for x, w, y, the convolution, alpha and beta. */
    const cudnnBackendAttributeName_t attrs[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA}};
    const cudnnBackendAttributeName_t *a = attrs[dir];
    TRY(own(p, types[dir], &op));
    TRY(set(op, a[0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    TRY(set(op, a[1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    TRY(set(op, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    TRY(set(op, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    TRY(set(op, a[4], CUDNN_TYPE_FLOAT, 1, &alpha));
    TRY(set(op, a[5], CUDNN_TYPE_FLOAT, 1, &beta));
    TRY(cudnnBackendFinalize(op));
    cudnnHandle_t h = c->cudnn;
    TRY(own(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &p->graph));
    TRY(set(p->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    TRY(set(p->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    return cudnnBackendFinalize(p->graph);
}

/* A plan of configuration cfg (into p->plan, owned by p) and the workspace it needs. */
static cudnnStatus_t plan_make(const gt_cuda_ctx *c, eng_plan *p, cudnnBackendDescriptor_t cfg)
{
    cudnnHandle_t h = c->cudnn;
    int64_t need = 0, got = 0;
    TRY(own(p, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p->plan));
    TRY(set(p->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    TRY(set(p->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &cfg));
    TRY(cudnnBackendFinalize(p->plan));
    TRY(cudnnBackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &got, &need));
    p->ws = need > 0 ? (size_t)need : 0;
    return CUDNN_STATUS_SUCCESS;
}

/* The configuration of a choice, rebuilt on p's graph: its engine and knob values. */
static cudnnStatus_t cfg_from_choice(eng_plan *p, const gt_conv_choice *ch,
                                     cudnnBackendDescriptor_t *cfg)
{
    cudnnBackendDescriptor_t eng, knobs[GT_CONV_MAX_KNOBS];
    int64_t index = ch->engine;
    TRY(own(p, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    TRY(set(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->graph));
    TRY(set(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index));
    TRY(cudnnBackendFinalize(eng));
    TRY(own(p, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, cfg));
    TRY(set(*cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng));
    int made = 0;
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (; made < ch->nknobs && s == CUDNN_STATUS_SUCCESS; made++) {
        cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)ch->knob[made][0];
        int64_t value = ch->knob[made][1];
        if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
                                              &knobs[made])) != CUDNN_STATUS_SUCCESS)
            break;
        if ((s = set(knobs[made], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1,
                     &type)) == CUDNN_STATUS_SUCCESS &&
            (s = set(knobs[made], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                     &value)) == CUDNN_STATUS_SUCCESS)
            s = cudnnBackendFinalize(knobs[made]);
    }
    if (s == CUDNN_STATUS_SUCCESS && made > 0)
        s = set(*cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, made,
                knobs);
    for (int i = 0; i < made; i++) /* the configuration holds copies of the choices */
        cudnnBackendDestroyDescriptor(knobs[i]);
    TRY(s);
    return cudnnBackendFinalize(*cfg);
}

/* What a configuration is: its engine, whether cuDNN notes it non-deterministic, compiled at
 * run time, or less accurate than fp32 (on tensor cores, converting its inputs down, reducing
 * at lower precision, a Winograd transform), and its knobs' values. */
typedef struct cfg_notes {
    int nondet, rtc, tensor_core, down_convert, lossy;
} cfg_notes;

static cudnnStatus_t cfg_describe(cudnnBackendDescriptor_t cfg, gt_conv_choice *ch,
                                  cfg_notes *note)
{
    cudnnBackendDescriptor_t eng, knobs[GT_CONV_MAX_KNOBS];
    int64_t got = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t behaviour[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    memset(note, 0, sizeof *note);
    ch->nknobs = 0;
    TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    cudnnStatus_t s = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &eng);
    int64_t index = -1;
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                     &got, &index);
    if (s == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &got, notes) ==
            CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < got; i++) {
            note->nondet |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
            note->tensor_core |= notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
            note->down_convert |= notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
            note->lossy |= notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
                           notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD ||
                           notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 ||
                           notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 ||
                           notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13;
        }
    if (s == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &got, behaviour) ==
            CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < got; i++)
            note->rtc |= behaviour[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    cudnnBackendDestroyDescriptor(eng);
    TRY(s);
    ch->engine = index;
    int made = 0;
    for (; made < GT_CONV_MAX_KNOBS; made++)
        if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
                                              &knobs[made])) != CUDNN_STATUS_SUCCESS)
            break;
    got = 0;
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &got, knobs);
    for (int64_t i = 0; s == CUDNN_STATUS_SUCCESS && i < got && i < made; i++) {
        cudnnBackendKnobType_t type;
        int64_t value = 0, n = 0;
        if ((s = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                          CUDNN_TYPE_KNOB_TYPE, 1, &n, &type)) ==
                CUDNN_STATUS_SUCCESS &&
            (s = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                          CUDNN_TYPE_INT64, 1, &n, &value)) ==
                CUDNN_STATUS_SUCCESS) {
            ch->knob[ch->nknobs][0] = (long long)type;
            ch->knob[ch->nknobs][1] = (long long)value;
            ch->nknobs++;
        }
    }
    for (int i = 0; i < made; i++)
        cudnnBackendDestroyDescriptor(knobs[i]);
    return s;
}

/* The configurations cuDNN's heuristics (mode A, then the fallback list) offer for graph, into
 * cfg (created here; the caller destroys all ENG_MAX_CFG); their count. */
static int heuristics(cudnnBackendDescriptor_t graph, cudnnBackendDescriptor_t *cfg)
{
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    int n = 0;
    for (int i = 0; i < ENG_MAX_CFG; i++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]) !=
            CUDNN_STATUS_SUCCESS)
            cfg[i] = NULL;
    for (int m = 0; m < 2 && n < ENG_MAX_CFG; m++) {
        cudnnBackendDescriptor_t h;
        int64_t got = 0;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &h) !=
            CUDNN_STATUS_SUCCESS)
            break;
        if (set(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                &graph) == CUDNN_STATUS_SUCCESS &&
            set(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnBackendFinalize(h) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, ENG_MAX_CFG - n, &got,
                                     cfg + n) == CUDNN_STATUS_SUCCESS)
            n += (int)(got < ENG_MAX_CFG - n ? got : ENG_MAX_CFG - n);
        cudnnBackendDestroyDescriptor(h);
    }
    return n;
}

static void cfgs_free(cudnnBackendDescriptor_t *cfg)
{
    for (int i = 0; i < ENG_MAX_CFG; i++)
        if (cfg[i])
            cudnnBackendDestroyDescriptor(cfg[i]);
}

/* ---- running ---------------------------------------------------------------------------------- */

/* A variant pack of x, w, y and the context's workspace (the caller destroys it). */
static cudnnStatus_t pack_make(const gt_cuda_ctx *c, const void *x, const void *w, void *y,
                               cudnnBackendDescriptor_t *pack)
{
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {(void *)x, (void *)w, y};
    void *ws = c->ws;
    TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, pack));
    cudnnStatus_t s = set(*pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = set(*pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    if (s == CUDNN_STATUS_SUCCESS)
        s = set(*pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(*pack);
    if (s != CUDNN_STATUS_SUCCESS)
        cudnnBackendDestroyDescriptor(*pack);
    return s;
}

static cudnnStatus_t execute(const gt_cuda_ctx *c, const eng_plan *p, const void *x,
                             const void *w, void *y)
{
    cudnnBackendDescriptor_t pack;
    TRY(pack_make(c, x, w, y, &pack));
    cudnnStatus_t s = cudnnBackendExecute(c->cudnn, p->plan, pack);
    cudnnBackendDestroyDescriptor(pack);
    return s;
}

/* The fastest of ENG_REPS runs of p in microseconds (after one warm-up); < 0 if one failed. A
 * first run slower than half again the best so far (beat > 0) ends the timing there. */
static double time_plan(const gt_cuda_ctx *c, const eng_plan *p, void *const bufs[3],
                        cudaEvent_t ev[2], double beat)
{
    double best = -1;
    cudnnBackendDescriptor_t pack;
    if (pack_make(c, bufs[0], bufs[1], bufs[2], &pack) != CUDNN_STATUS_SUCCESS)
        return -1;
    int ok = cudnnBackendExecute(c->cudnn, p->plan, pack) == CUDNN_STATUS_SUCCESS &&
             cudaStreamSynchronize(c->stream) == cudaSuccess;
    for (int i = 0; ok && i < ENG_REPS; i++) {
        float ms = 0;
        ok = cudaEventRecord(ev[0], c->stream) == cudaSuccess &&
             cudnnBackendExecute(c->cudnn, p->plan, pack) == CUDNN_STATUS_SUCCESS &&
             cudaEventRecord(ev[1], c->stream) == cudaSuccess &&
             cudaEventSynchronize(ev[1]) == cudaSuccess &&
             cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess;
        if (ok && (best < 0 || 1e3 * ms < best))
            best = 1e3 * ms;
        if (beat > 0 && best > 1.5 * beat)
            break;
    }
    cudnnBackendDestroyDescriptor(pack);
    return ok ? best : -1;
}

/* ---- choosing --------------------------------------------------------------------------------- */

static int eng_fail(gt_cuda_ctx *c, const gt_cuda_layer *cl, gt_err *e, const char *what,
                    cudnnStatus_t s)
{
    return gt_fail(e, "%s: layer %u (%s): %s%s%s", c->name, cl->index,
                   cl->L.name[0] ? cl->L.name : "unnamed", what, s ? ": " : "",
                   s ? cudnnGetErrorString(s) : "");
}

/* Whether direction dir keeps to deterministic configurations on this device (--deterministic:
 * the forward always may take any). */
static int dir_deterministic(const gt_cuda_ctx *c, int dir)
{
    return dir != GT_CONV_FWD && c->deterministic;
}

/* fp32 without TF32: convolutions held to fp32's accuracy. */
static int fp32_exact(const gt_cuda_ctx *c, const gt_cuda_layer *cl)
{
    return cl->dtype == CUDNN_DATA_FLOAT && !c->tf32;
}

/* Whether a configuration may run layer cl's convolutions: nothing compiled at run time (that
 * costs seconds a configuration); deterministic where asked; fp32 without TF32 none that cuDNN
 * notes as computing below fp32's accuracy (tensor cores, inputs converted down, reductions at
 * lower precision, Winograd transforms: on an H200 the legacy Winograd weight gradient was ~1e-4
 * off the CPU reference where the others were ~1e-7), and those left must pass the accuracy
 * check (acc_open); with TF32 every configuration but those converting fp32 inputs to a
 * narrower type (PyTorch's rule). */
static int cfg_allowed(const gt_cuda_ctx *c, const gt_cuda_layer *cl, const cfg_notes *n,
                       int deterministic)
{
    if (n->rtc || (deterministic && n->nondet))
        return 0;
    if (cl->dtype != CUDNN_DATA_FLOAT)
        return 1;
    return !n->down_convert && !(fp32_exact(c, cl) && (n->tensor_core || n->lossy));
}

/* An fp32 configuration is kept only where its result agrees with the legacy call's
 * deterministic implicit-GEMM algorithm (fp32 multiply-adds) within acc_tol, relative L2, on
 * random inputs of the layer's shape: cuDNN's notes do not tell every configuration that computes
 * at less than fp32's accuracy (on an H200 with cuDNN 9.14 one backward-filter configuration
 * noted as neither tensor-core, Winograd nor reduced-precision ran 1.2e-3 off the CPU's reference
 * on a 5x5 convolution, where the legacy algorithms were ~1e-7 off). The bound grows with the
 * length K of the sums each output is (fp32 multiply-adds in another order differ by about
 * sqrt(K) units of fp32's rounding, 2^-24, in relative L2 on random operands: resnet18's first
 * 64-channel weight gradient at batch 256 sums 262,144 products, and PyTorch's fp32 result there
 * is 2.5e-5 off float64) and stays below what TF32 costs at any K (its inputs' rounding alone,
 * ~3e-4). */
#define ACC_TOL_MIN 1e-5
#define ACC_TOL_MAX 1e-4

static double acc_tol(const gt_cuda_layer *cl, int dir)
{
    const gt_layer *L = &cl->L;
    double k = dir == GT_CONV_FWD          ? (double)L->in_c * L->k * L->k
               : dir == GT_CONV_BWD_FILTER ? (double)cl->n * L->out_h * L->out_w
                                           : (double)L->out_c * L->k * L->k;
    double tol = 4.0 * sqrt(k) * 0x1p-24;
    return tol < ACC_TOL_MIN ? ACC_TOL_MIN : tol > ACC_TOL_MAX ? ACC_TOL_MAX : tol;
}

__global__ static void acc_fill_kernel(float *a, size_t n, uint64_t key)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        a[i] = 2.0f * gt_counter_uniform(key, (uint32_t)i) - 1.0f; /* [-1, 1) */
}

/* sums[0] += sum (a - ref)^2, sums[1] += sum ref^2 */
__global__ static void acc_diff_kernel(const float *a, const float *ref, size_t n, double *sums)
{
    double d = 0, r = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double x = (double)a[i] - ref[i];
        d += x * x;
        r += (double)ref[i] * ref[i];
    }
    for (int o = 16; o > 0; o /= 2) {
        d += __shfl_down_sync(0xffffffffu, d, o);
        r += __shfl_down_sync(0xffffffffu, r, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&sums[0], d);
        atomicAdd(&sums[1], r);
    }
}

/* A direction's random operands (in the places its plans read them), the reference result and a
 * candidate's result. */
typedef struct acc_check {
    float *buf[3]; /* x, w, y as the direction's variant pack names them; the output's is out */
    float *ref, *out;
    double *sums;
    size_t out_len;
    int out_at;    /* which of x, w, y the direction writes */
} acc_check;

static void acc_close(acc_check *a)
{
    for (int i = 0; i < 3; i++)
        cudaFree(a->buf[i]);
    cudaFree(a->ref);
    cudaFree(a->out);
    cudaFree(a->sums);
    memset(a, 0, sizeof *a);
}

/* Makes the operands and the reference result of direction dir at the layer's batch (its legacy
 * descriptors are set to it); -1 where that cannot be done (nothing is then checked). */
static int acc_open(gt_cuda_ctx *c, const gt_cuda_layer *cl, int dir, acc_check *a)
{
    static const float one = 1.0f, zero = 0.0f;
    const gt_layer *L = &cl->L;
    size_t xl = (size_t)cl->n * L->in_c * L->in_h * L->in_w,
           wl = (size_t)L->out_c * L->in_c * L->k * L->k,
           yl = (size_t)cl->n * L->out_c * L->out_h * L->out_w;
    size_t len[3] = {xl, wl, yl};
    int out = dir == GT_CONV_FWD ? 2 : dir == GT_CONV_BWD_FILTER ? 1 : 0;
    memset(a, 0, sizeof *a);
    a->out_at = out;
    a->out_len = len[out];
    int ok = cudaMalloc((void **)&a->ref, a->out_len * sizeof(float)) == cudaSuccess &&
             cudaMalloc((void **)&a->out, a->out_len * sizeof(float)) == cudaSuccess &&
             cudaMalloc((void **)&a->sums, 2 * sizeof(double)) == cudaSuccess;
    for (int i = 0; ok && i < 3; i++)
        if (i != out) {
            ok = cudaMalloc((void **)&a->buf[i], len[i] * sizeof(float)) == cudaSuccess;
            if (ok)
                acc_fill_kernel<<<256, 256, 0, c->stream>>>(a->buf[i], len[i], 0xacc0 + i);
        }
    cudnnStatus_t s = CUDNN_STATUS_NOT_SUPPORTED;
    if (ok && cudaGetLastError() == cudaSuccess) {
        cudnnHandle_t h = c->cudnn;
        if (dir == GT_CONV_FWD)
            s = cudnnConvolutionForward(h, &one, cl->x_desc, a->buf[0], cl->w_desc, a->buf[1],
                                        cl->conv_fwd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                        c->ws, c->ws_bytes, &zero, cl->y_desc, a->ref);
        else if (dir == GT_CONV_BWD_FILTER)
            s = cudnnConvolutionBackwardFilter(h, &one, cl->x_desc, a->buf[0], cl->y_desc,
                                               a->buf[2], cl->conv_bwd_filter,
                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, c->ws,
                                               c->ws_bytes, &zero, cl->w_desc, a->ref);
        else
            s = cudnnConvolutionBackwardData(h, &one, cl->w_desc, a->buf[1], cl->y_desc, a->buf[2],
                                             cl->conv_bwd_data, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                             c->ws, c->ws_bytes, &zero, cl->x_desc, a->ref);
    }
    if (s != CUDNN_STATUS_SUCCESS || cudaStreamSynchronize(c->stream) != cudaSuccess) {
        acc_close(a);
        cudaGetLastError();
        return -1;
    }
    return 0;
}

/* p's relative L2 distance to the reference on the check's operands; < 0 if it failed to run. */
static double acc_error(gt_cuda_ctx *c, const eng_plan *p, acc_check *a)
{
    void *ptr[3] = {a->buf[0], a->buf[1], a->buf[2]};
    ptr[a->out_at] = a->out;
    double sums[2] = {0, 0};
    /* the fp32 filter plans add into their output (beta 1) */
    if (cudaMemsetAsync(a->out, 0, a->out_len * sizeof(float), c->stream) != cudaSuccess ||
        cudaMemsetAsync(a->sums, 0, sizeof sums, c->stream) != cudaSuccess ||
        execute(c, p, ptr[0], ptr[1], ptr[2]) != CUDNN_STATUS_SUCCESS)
        return -1;
    acc_diff_kernel<<<256, 256, 0, c->stream>>>(a->out, a->ref, a->out_len, a->sums);
    if (cudaMemcpyAsync(sums, a->sums, sizeof sums, cudaMemcpyDeviceToHost, c->stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(c->stream) != cudaSuccess)
        return -1;
    return sums[1] > 0 ? sqrt(sums[0] / sums[1]) : sqrt(sums[0]);
}

/* Times every configuration the heuristics offer for direction dir at the layer's batch on
 * bufs (x, w, y as the direction reads them) and keeps the fastest allowed one in *ch (fp32
 * without TF32: the fastest whose accuracy check passes, acc_open). */
static int eng_time(gt_cuda_ctx *c, gt_cuda_layer *cl, int dir, int deterministic,
                    void *const bufs[3], gt_conv_choice *ch, gt_err *e)
{
    gt_conv_engines *g = cl->eng;
    eng_plan gp;
    memset(&gp, 0, sizeof gp);
    cudnnStatus_t s = graph_build(c, cl, g->align, cl->n, dir, &gp);
    if (s != CUDNN_STATUS_SUCCESS) {
        plan_free(&gp);
        return eng_fail(c, cl, e, "cuDNN refuses the convolution's operation graph", s);
    }
    cudnnBackendDescriptor_t cfg[ENG_MAX_CFG];
    int ncfg = heuristics(gp.graph, cfg);
    cudaEvent_t ev[2] = {NULL, NULL};
    struct {
        gt_conv_choice ch;
        double us;
        int cfg;
    } cand[ENG_MAX_CFG];
    int ncand = 0;
    double best = -1; /* the fastest so far */
    if (cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess)
        for (int i = 0; i < ncfg; i++) {
            cfg_notes note;
            memset(&cand[ncand], 0, sizeof cand[ncand]);
            if (cfg_describe(cfg[i], &cand[ncand].ch, &note) != CUDNN_STATUS_SUCCESS ||
                !cfg_allowed(c, cl, &note, deterministic))
                continue;
            eng_plan p = gp; /* the graph's descriptors stay gp's: p owns only its plan */
            p.nown = 0;
            if (plan_make(c, &p, cfg[i]) == CUDNN_STATUS_SUCCESS && p.ws <= c->ws_bytes) {
                /* one cut short (half again slower than the best) keeps its first run's time */
                double us = time_plan(c, &p, bufs, ev, best);
                if (us >= 0) {
                    cand[ncand].ch.memory = p.ws;
                    cand[ncand].us = us;
                    cand[ncand].cfg = i;
                    if (best < 0 || us < best)
                        best = us;
                    ncand++;
                }
            }
            plan_free(&p);
        }
    for (int k = 0; k < 2; k++)
        if (ev[k])
            cudaEventDestroy(ev[k]);
    cudaGetLastError(); /* a configuration that failed to launch leaves no sticky error */
    /* the fastest, checked where fp32 asks it */
    acc_check acc;
    int checking = ncand > 0 && fp32_exact(c, cl) && acc_open(c, cl, dir, &acc) == 0;
    double tol = acc_tol(cl, dir);
    int chosen = -1, tried[ENG_MAX_CFG] = {0};
    while (chosen < 0) {
        int j = -1;
        for (int i = 0; i < ncand; i++)
            if (!tried[i] && (j < 0 || cand[i].us < cand[j].us))
                j = i;
        if (j < 0)
            break;
        tried[j] = 1;
        if (checking) {
            eng_plan p = gp;
            p.nown = 0;
            double err = plan_make(c, &p, cfg[cand[j].cfg]) == CUDNN_STATUS_SUCCESS
                             ? acc_error(c, &p, &acc)
                             : -1;
            plan_free(&p);
            cudaGetLastError();
            if (err < 0 || err > tol)
                continue;
        }
        chosen = j;
    }
    if (checking)
        acc_close(&acc);
    cfgs_free(cfg);
    plan_free(&gp);
    if (chosen < 0 && deterministic) /* none deterministic runs here: any will do */
        return eng_time(c, cl, dir, 0, bufs, ch, e);
    if (chosen < 0) {
        char what[200];
        snprintf(what, sizeof what,
                 "no cuDNN engine configuration runs its %s convolution in %zu bytes of "
                 "workspace at batch %d%s",
                 dir == GT_CONV_FWD ? "forward" : dir == GT_CONV_BWD_FILTER ? "backward-filter"
                                                                            : "backward-data",
                 c->ws_bytes, cl->n, checking ? " at fp32's accuracy" : "");
        return eng_fail(c, cl, e, what, CUDNN_STATUS_SUCCESS);
    }
    *ch = cand[chosen].ch;
    return 0;
}

/* Rebuilds p (its graph kept) on the configuration of ch: a plan within limit bytes. */
static cudnnStatus_t plan_from_choice(const gt_cuda_ctx *c, eng_plan *p, const gt_conv_choice *ch,
                                      size_t limit)
{
    int keep = 0; /* the graph is the last descriptor graph_build made */
    while (keep < p->nown && p->own[keep] != p->graph)
        keep++;
    for (int i = p->nown - 1; i > keep; i--)
        cudnnBackendDestroyDescriptor(p->own[i]);
    p->nown = keep < p->nown ? keep + 1 : p->nown;
    p->plan = NULL;
    p->ws = 0;
    cudnnBackendDescriptor_t cfg;
    TRY(cfg_from_choice(p, ch, &cfg));
    TRY(plan_make(c, p, cfg));
    return p->ws <= limit ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
}

/* Direction dir's plan at batch n within limit bytes of workspace: the chosen configuration, or
 * else the heuristics' first that fits (deterministic first where asked). */
static int eng_plan_at(gt_cuda_ctx *c, gt_cuda_layer *cl, int dir, int n, size_t limit,
                       eng_plan *p, gt_err *e)
{
    gt_conv_engines *g = cl->eng;
    memset(p, 0, sizeof *p);
    cudnnStatus_t s = graph_build(c, cl, g->align, n, dir, p);
    if (s != CUDNN_STATUS_SUCCESS) {
        plan_free(p);
        return eng_fail(c, cl, e, "cuDNN refuses the convolution's operation graph", s);
    }
    if (plan_from_choice(c, p, &g->choice[dir], limit) == CUDNN_STATUS_SUCCESS)
        return 0;
    cudnnBackendDescriptor_t cfgs[ENG_MAX_CFG];
    int ncfg = heuristics(p->graph, cfgs), found = 0;
    int deterministic = dir_deterministic(c, dir);
    for (int pass = deterministic ? 0 : 1; pass < 2 && !found; pass++)
        for (int i = 0; i < ncfg && !found; i++) {
            gt_conv_choice cand;
            cfg_notes note;
            memset(&cand, 0, sizeof cand);
            found = cfg_describe(cfgs[i], &cand, &note) == CUDNN_STATUS_SUCCESS &&
                    cfg_allowed(c, cl, &note, pass == 0) &&
                    plan_from_choice(c, p, &cand, limit) == CUDNN_STATUS_SUCCESS;
        }
    cfgs_free(cfgs);
    if (found)
        return 0;
    plan_free(p);
    char what[128];
    snprintf(what, sizeof what, "no cuDNN engine configuration runs it in %zu bytes of workspace "
             "at batch %d", limit, n);
    return eng_fail(c, cl, e, what, CUDNN_STATUS_SUCCESS);
}

/* The slot holding plans for batch n (made within limit where missing); its index or -1. */
static int eng_slot(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, size_t limit, gt_err *e)
{
    gt_conv_engines *g = cl->eng;
    int s = -1;
    for (int i = 0; i < ENG_SLOTS; i++)
        if (g->slot[i].n == n) {
            s = i;
            for (int d = 0; d < g->ndir; d++)
                if (g->slot[i].p[d].ws > limit) { /* made under a larger workspace */
                    for (int k = 0; k < g->ndir; k++)
                        plan_free(&g->slot[i].p[k]);
                    g->slot[i].n = 0;
                    break;
                }
        }
    if (s >= 0 && g->slot[s].n == n) {
        g->slot[s].used = ++g->tick;
        return s;
    }
    s = 0;
    for (int i = 1; i < ENG_SLOTS; i++) /* an empty slot, or the least recently used */
        if (g->slot[i].used < g->slot[s].used)
            s = i;
    for (int d = 0; d < 3; d++)
        plan_free(&g->slot[s].p[d]);
    g->slot[s].n = 0;
    if (g->cur == s)
        g->cur = -1;
    for (int d = 0; d < g->ndir; d++)
        if (eng_plan_at(c, cl, d, n, limit, &g->slot[s].p[d], e)) {
            for (int k = 0; k < d; k++)
                plan_free(&g->slot[s].p[k]);
            return -1;
        }
    g->slot[s].n = n;
    g->slot[s].used = ++g->tick;
    return s;
}

/* Forgets a layer's choices and plans (its state stays allocated). */
static void eng_reset(gt_cuda_layer *cl)
{
    gt_conv_engines *g = cl->eng;
    if (!g)
        return;
    for (int i = 0; i < ENG_SLOTS; i++)
        for (int d = 0; d < 3; d++)
            plan_free(&g->slot[i].p[d]);
    memset(g, 0, sizeof *g);
    g->cur = -1;
}

/* The byte alignment declared for a tensor whose buffers start like p (16 at most). */
static int64_t align_of(const void *p)
{
    int64_t a = 16;
    while (a > 2 && ((uintptr_t)p & (uintptr_t)(a - 1)))
        a /= 2;
    return a;
}

int gt_conv_engine_choose(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, int n_max, int wait,
                          const gt_conv_key *base, void *const bufs[5], size_t *ws_need,
                          gt_err *e)
{
    /* bufs: x, w, y, dx (NULL: a first layer), dw */
    if (!cl->eng) {
        cl->eng = (gt_conv_engines *)calloc(1, sizeof *cl->eng);
        if (!cl->eng)
            return gt_fail(e, "%s: out of host memory for a convolution's plans", c->name);
    }
    gt_conv_engines *g = cl->eng;
    eng_reset(cl);
    g->align[0] = align_of(bufs[0]);
    if (bufs[3] && align_of(bufs[3]) < g->align[0])
        g->align[0] = align_of(bufs[3]);
    g->align[1] = align_of(bufs[1]);
    if (align_of(bufs[4]) < g->align[1])
        g->align[1] = align_of(bufs[4]);
    g->align[2] = align_of(bufs[2]);
    g->ndir = bufs[3] ? 3 : 2;
    int busy = 0;
    cl->n = n;
    for (int dir = 0; dir < g->ndir; dir++) {
        gt_conv_key k = *base;
        k.direction = dir;
        k.deterministic = dir_deterministic(c, dir);
        k.api = GT_CONV_BACKEND;
        k.align = (unsigned)(g->align[0] < g->align[1] ? g->align[0] : g->align[1]);
        k.align = k.align < (unsigned)g->align[2] ? k.align : (unsigned)g->align[2];
        gt_conv_claim claim = gt_conv_cache_claim(&k, wait, &g->choice[dir]);
        if (claim == GT_CONV_CACHE_BUSY) {
            busy = 1;
            continue;
        }
        if (claim == GT_CONV_CACHE_MINE) {
            /* what each direction reads and writes: fwd x, w -> y; filter x, dy -> dw; data
             * w, dy -> dx (y stands in for dy: only its shape matters while timing) */
            void *dirbufs[3][3] = {{bufs[0], bufs[1], bufs[2]},
                                   {bufs[0], bufs[4], bufs[2]},
                                   {bufs[3], bufs[1], bufs[2]}};
            if (eng_time(c, cl, dir, k.deterministic, dirbufs[dir], &g->choice[dir], e)) {
                gt_conv_cache_abandon(&k);
                cl->n = 0;
                return -1;
            }
            gt_conv_cache_put(&k, &g->choice[dir]);
        }
    }
    cl->n = 0;
    if (busy)
        return 1;
    size_t need = 0;
    int sizes[2] = {n, n_max};
    for (int i = 0; i < (n_max != n ? 2 : 1); i++) {
        int s = eng_slot(c, cl, sizes[i], c->ws_bytes, e);
        if (s < 0)
            return -1;
        for (int d = 0; d < g->ndir; d++)
            need = g->slot[s].p[d].ws > need ? g->slot[s].p[d].ws : need;
    }
    g->cur = -1;
    *ws_need = need;
    return 0;
}

int gt_conv_engine_batch(gt_cuda_ctx *c, gt_cuda_layer *cl, int n, gt_err *e)
{
    if (!cl->eng || !cl->eng->ndir)
        return eng_fail(c, cl, e, "convolution engines were never chosen", CUDNN_STATUS_SUCCESS);
    int s = eng_slot(c, cl, n, c->ws_bytes, e);
    cl->eng->cur = s;
    return s < 0 ? -1 : 0;
}

int gt_conv_engine_run(gt_cuda_ctx *c, gt_cuda_layer *cl, int dir, const void *x,
                       const void *w, void *y, gt_err *e)
{
    gt_conv_engines *g = cl->eng;
    if (!g || g->cur < 0 || g->slot[g->cur].n != cl->n || dir >= g->ndir)
        return eng_fail(c, cl, e, "no convolution plan for this batch and direction",
                        CUDNN_STATUS_SUCCESS);
    const void *ptrs[3] = {x, w, y};
    for (int i = 0; i < 3; i++)
        if (align_of(ptrs[i]) < g->align[i])
            return eng_fail(c, cl, e, "a buffer is less aligned than its plan declares",
                            CUDNN_STATUS_SUCCESS);
    cudnnStatus_t s = execute(c, &g->slot[g->cur].p[dir], x, w, y);
    if (s != CUDNN_STATUS_SUCCESS)
        return eng_fail(c, cl, e, "cudnnBackendExecute failed", s);
    return 0;
}

void gt_conv_engines_free(gt_cuda_layer *cl)
{
    eng_reset(cl);
    free(cl->eng);
    cl->eng = NULL;
}

int gt_conv_engine_describe(const gt_cuda_layer *cl, char *buf, size_t len)
{
    const gt_conv_engines *g = cl->eng;
    if (!g || !g->ndir)
        return snprintf(buf, len, "-");
    if (g->ndir == 2)
        return snprintf(buf, len, "fwd e%lld filter e%lld", g->choice[0].engine,
                        g->choice[1].engine);
    return snprintf(buf, len, "fwd e%lld filter e%lld data e%lld", g->choice[0].engine,
                    g->choice[1].engine, g->choice[2].engine);
}
