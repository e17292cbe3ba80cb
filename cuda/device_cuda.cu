/* device_cuda.cu - one GPU behind the gt_device table: everything a worker's steps need is
 * allocated once at open, so a step only gathers its batch, launches and synchronises once.
 *
 * A training batch travels: its key (dropout seed and epoch), sample ids, labels and images are
 * gathered on the host into a pinned staging slot and uploaded into the slot's device twin on the
 * compute stream, as the first part of its step. Two slots let --overlap gather the next batch
 * while the step before it still reads the other.
 *
 * A step's device work - that upload, forward, loss and backward (the fused kernels of
 * fused_cuda.cu for LeNet-shaped models, else layer by layer through cuDNN and cuBLAS), the
 * gradient and the loss back into pinned host memory - is captured once per shape (batch size,
 * slot, keep_grad, host gradient buffer, host parameters uploaded in parts) into a CUDA graph and
 * replayed: a step then costs the
 * host one graph launch and one synchronisation instead of some forty library calls of 5-60 us
 * each. A shape's first step runs eagerly, which also lets cuDNN and the module loader do their
 * one-time work outside a capture, and its graph is captured right after for the steps that
 * follow.
 *
 * Residual blocks run as src/cpu_net.c runs them: the outputs of "res[" and "|" are the block's
 * input itself (act[l + 1] points at it, no copy), "]" adds the other branch, and backward keeps
 * one gradient buffer per nesting depth. Batch norm's running statistics (the model's buffers)
 * live on the device beside the parameters: load_params uploads d->buffers there and evaluation
 * reads them. A training step writes its batch statistics into device scratch and copies them
 * into d->stats as part of the step (graphs are kept per host stats buffer too); with keep_grad
 * it moves the device's running statistics instead, which get_params copies back.
 *
 * From 1 M parameters the layer path's whole copies go in parts beside the compute (cuda_split):
 * the gradient down as the backward finishes each part, and the parameters that load_params left
 * pending up as the train_step after it reaches the layers that read them. The allreduce mode's
 * steps on the peer exchange sum the gradient over the GPUs in the same parts, as the backward
 * finishes each. */
#include "gt_cuda.h"

#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_EVAL_CHUNK 1024
/* Captured step graphs kept per device: two slots times a full and a last short batch times two
 * host gradient buffers (--overlap), with and without keep_grad, fit. */
#define CUDA_GRAPHS 16

/* Where the parts of a batch of n samples sit in a staging slot, host and device alike. */
typedef struct slot_layout {
    size_t ids, labels, images, total; /* byte offsets (the key at 0) and the bytes to copy */
} slot_layout;

typedef struct cuda_slot {
    uint8_t *host;            /* pinned */
    uint8_t *dev;
    cudaEvent_t consumed;     /* recorded on the compute stream after the step that read it */
    gt_augment aug;           /* the crop and flip its step's input does on the device (pad 0,
                               * flip 0: none; slot_gather says which) */
} cuda_slot;

/* hogwild's store step in parts (cuda_exchange): a stream for each copy direction, so that a
 * part's download, the host's work on the part before it and the upload of the one before that
 * overlap; an event a part. Made by the first exchange. */
#define CUDA_XCHG_PARTS GT_STORE_PARTS_MAX
typedef struct cuda_xchg {
    cudaStream_t down, up;
    cudaEvent_t down_end, done, part[CUDA_XCHG_PARTS];
    cudaEvent_t final[CUDA_XCHG_PARTS]; /* recorded on the compute stream once part k's gradient
                                         * is final and flag[k] set: by the step's backward
                                         * (marks), else by exchange behind the step */
    int *flag;                          /* device: part k's gradient holds an Inf or NaN */
    int *flag_host;                     /* pinned: each part's flag, downloaded with the part */
    uint16_t *half, *half_host;         /* d->grad_bf16: the gradient in bf16, on the device and
                                         * pinned on the host (d->grad_half); made once */
    int half_on;                        /* the marks and the exchange round into half */
    size_t bounds[CUDA_XCHG_PARTS + 1]; /* the parts the marks were planned for */
    int mark_layer[CUDA_XCHG_PARTS];    /* the layer whose backward finishes part k (marks) */
    int nmarks;                         /* their count (d->part_count); 0: no plan */
    int ready;
} cuda_xchg;

/* The whole copies of a training step in parts, on the layer path, for models of at least
 * min_params (a small model's copy is shorter than the events'):
 * - the gradient's download beside the backward (cuda_split_plan): each part copied to the host
 *   on a stream of its own as soon as the backward has finished it; the step ends once every part
 *   is down;
 * - the parameters' upload beside the forward (cuda_up_plan): load_params leaves its copy pending,
 *   and the train_step after it uploads the parts on a stream of its own, the biases' and batch
 *   norm's first, then the weights in layer order, each layer's forward waiting for the parts it
 *   reads. Every other call copies a pending load whole first (cuda_load_join);
 * - the allreduce mode's sum beside the backward (cuda_sum_plan): a keep_grad step whose
 *   reduce_update takes the peer exchange sums each part over the GPUs (allreduce_cuda.cu) on a
 *   stream of its own as soon as the backward has finished it; the step ends once every part is
 *   summed, and the reduce_update after it only applies the sum. */
#define CUDA_SPLIT_PARTS 8
#define CUDA_SPLIT_MIN_PARAMS (1u << 20)
typedef struct cuda_split {
    cudaStream_t down, up;
    cudaStream_t sum;                    /* the sums' stream (cuda_sum_plan), made once */
    cudaEvent_t fork[CUDA_SPLIT_PARTS + 1], join, up_fork, up_part[CUDA_SPLIT_PARTS + 1];
    size_t bounds[CUDA_SPLIT_PARTS + 2]; /* the weights in CUDA_SPLIT_PARTS, then the rest */
    int mark_layer[CUDA_SPLIT_PARTS + 1];
    int up_order[CUDA_SPLIT_PARTS + 1];  /* the parts in upload order: the rest, then weights */
    int up_need[GT_MAX_LAYERS];          /* the upload events layers 0..l wait for: the last */
    size_t min_params;                   /* the smallest model split (gt_cuda_device_set_split) */
    int n;                               /* parts; 0: not planned */
    int ready;                           /* the streams and events exist */
    float *dst;                          /* this step's destination (host); NULL: not split */
    const float *up_src;                 /* load_params's source while its copy is pending */
    int up_pending;                      /* load_params's copy is not queued yet */
    int up_on;                           /* the step being queued uploads in parts */
    unsigned sum_on;                     /* the step being queued sums its parts over the GPUs:
                                          * gt_cuda_allreduce_step_sums' number; 0: it does not */
} cuda_split;

/* One captured step, replayed for every step of its shape. */
typedef struct cuda_graph_key {
    int n, slot, keep_grad, marks;
    const float *grad_dst;    /* the host gradient buffer its copy writes */
    const float *stats_dst;   /* the host batch-statistics buffer its copy writes */
    const float *up_src;      /* the host parameters its upload in parts reads; NULL: none */
    unsigned sums;            /* the exchange its sums in parts launch on (split.sum_on) */
    gt_augment aug;           /* the crop and flip its input does (the slot's) */
} cuda_graph_key;

typedef struct cuda_graph {
    cudaGraphExec_t exec;     /* NULL: an empty entry */
    cuda_graph_key key;       /* the step's shape */
    uint64_t used;            /* the step that last ran it: the least recent is replaced */
} cuda_graph;

typedef struct cuda_impl {
    gt_cuda_ctx *ctx;
    int cap;                           /* samples one forward pass holds: max(max_batch, chunk) */
    size_t in_len;
    int nclasses;
    gt_cuda_layer layer[GT_MAX_LAYERS];
    float *params, *grad;              /* nparams each */
    void *params_half;                 /* bf16 precision: params rounded to bf16 (nparams) */
    gt_cuda_half_task *half_tasks;     /* and the copy's blocks for one launch (device) */
    int nhalf_tasks;
    void *act_half[GT_MAX_LAYERS + 1]; /* bf16 precision: act[l]'s bf16 copy for a training
                                        * step where a convolution reads act[l] (owners only),
                                        * max_batch rows: made once in forward, read again by
                                        * every convolution of that input and by backward */
    float *act[GT_MAX_LAYERS + 1];     /* act[0] the input, act[l + 1] layer l's output; cap rows */
    float *dact[2];                    /* gradient flowing backward (ping-pong), max_batch rows */
    uint8_t *mask[GT_MAX_LAYERS];      /* dropout keep flags, max_batch rows */
    cuda_slot slot[2];
    int inflight[2], ninflight;        /* slots of begun, not yet ended steps, oldest first */
    int slot_marked[2];                /* the step in this slot marks its parts (cuda_xchg) */
    uint8_t *eval_x;                   /* one evaluation chunk's images */
    uint16_t *eval_y;                  /* and labels */
    int32_t *eval_pred;                /* its predicted classes (d->eval_pred), cap; allocated
                                        * by the first evaluation that asks for them */
    float *branch[GT_MAX_BLOCK_DEPTH]; /* residual blocks' gradient buffers, one per nesting depth,
                                        * max_batch rows */
    int depth[GT_MAX_LAYERS];          /* block markers: their block's nesting depth */
    float *buffers;                    /* the model's buffers (running statistics); NULL if none */
    float *stats;                      /* a step's batch statistics, in the buffers' layout */
    int buffers_moved;                 /* a keep_grad step moved buffers since load_params */
    gt_cuda_result *result;
    gt_cuda_result *result_host;       /* pinned, one per slot (a step's loss and hits), then the
                                        * evaluation's: a step may still be queued beside it */
    gt_cuda_allreduce *allreduce;      /* NCCL communicator and optimizer state, allreduce mode */
    cuda_xchg xchg;                    /* the store step in parts (cuda_exchange) */
    cuda_split split;                  /* the whole copies in parts (cuda_split) */
    gt_fused_net fnet;                 /* the fused step's shapes and buffers, where fusable */
    gt_input_norm graph_norm;          /* the input step the captured graphs and the fused
                                        * kernels' copy hold (cuda_sync_norm) */
    int fusable, fused, graphs;        /* see gt_cuda_path */
    int layers_ready;                  /* cuda_plan_layers ran: the layer path can run */
    int no_half_copies;                /* bf16 steps leave act_half unused (tests) */
    int nhwc_end;                      /* bf16 channels-last path (cuda_nhwc_plan): act[1] to
                                        * act[nhwc_end] are bf16 NHWC, nhwc_end the global average
                                        * pool's layer; 0: every activation NCHW fp32 */
    char bn_relu[GT_MAX_LAYERS];       /* channels-last batch norm l applies ReLU l + 1 too */
    cuda_graph graph[CUDA_GRAPHS];
    uint64_t nsteps;
    char graph_error[GT_ERRLEN];       /* why capture failed; "" if it never did */
} cuda_impl;

/* result_host's entry for evaluations, after the two slots'. */
#define EVAL_RESULT 2

static size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

static slot_layout slot_layout_for(int n, size_t in_len)
{
    slot_layout l;
    l.ids = align16(sizeof(gt_cuda_key));
    l.labels = align16(l.ids + (size_t)n * sizeof(uint32_t));
    l.images = align16(l.labels + (size_t)n * sizeof(uint16_t));
    l.total = l.images + (size_t)n * in_len;
    return l;
}

static size_t layer_in_len(const gt_model *m, int l)
{
    return l == 0 ? m->layers[0].in_len : m->layers[l - 1].out_len;
}

/* The layer whose output act[l] is (as cpu_net.c points them): "res[" gives its input, "|" the
 * block's input; l itself where act[l] has its own buffer. */
static int act_owner(const gt_model *m, int l)
{
    while (l > 0) {
        const gt_layer *L = &m->layers[l - 1];
        if (L->kind == GT_RES_BEGIN)
            l = l - 1;
        else if (L->kind == GT_RES_SPLIT)
            l = L->peer;
        else
            break;
    }
    return l;
}

/* ---- bf16 channels-last activations ---------------------------------------------------------- */

/* bf16 precision keeps a residual network's activations in bf16 channels-last (NHWC) from its
 * stem convolution's output to its global average pool's input, as PyTorch's channels-last
 * autocast does: the convolutions read and write them directly, and batch norm, ReLU, the
 * residual adds and the pool run blocks_cuda.cu's bf16 NHWC kernels, their gradients flowing
 * back in bf16 too (parameters, their gradients and batch norm's statistics stay fp32). The
 * NCHW fp32 path rounds each convolution's input into a channels-last copy and widens its output
 * back, three passes over every activation a layer that this path does not make. It needs: a
 * first layer that is a convolution, then only bias-free convolutions, batch norm, ReLU and block
 * markers up to a global average pool, every activation between them of a multiple of 8 channels
 * (batch norm's kernels load eight channels at once).
 * The layer returned is that pool's (0: the model stays NCHW fp32). */
static int cuda_nhwc_plan(const gt_model *m)
{
    if (m->nlayers < 2 || m->layers[0].kind != GT_CONV)
        return 0;
    for (int l = 0; l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        if (L->kind == GT_GAP)
            return l;
        if (L->out_c % 8 || (L->kind == GT_CONV && L->b_len))
            return 0;
        if (L->kind != GT_CONV && L->kind != GT_BATCHNORM && L->kind != GT_RELU &&
            L->kind != GT_RES_BEGIN && L->kind != GT_RES_SPLIT && L->kind != GT_RES_END)
            return 0;
    }
    return 0;
}

/* act[l] is a bf16 channels-last array. */
static int act_nhwc(const cuda_impl *g, int l) { return g->nhwc_end && l >= 1 && l <= g->nhwc_end; }

/* Marks each layer's side of the channels-last path (after gt_cuda_layer_init) and the batch
 * norms that apply their ReLU: the ReLU's input is then never written, which nothing else reads
 * (a block marker's peer is a marker, never a ReLU). */
static void cuda_nhwc_mark(cuda_impl *g, const gt_model *m)
{
    for (int l = 0; l < m->nlayers; l++) {
        g->layer[l].nhwc_in = act_nhwc(g, l);
        g->layer[l].nhwc_out = act_nhwc(g, l + 1);
        g->bn_relu[l] = m->layers[l].kind == GT_BATCHNORM && l + 1 < m->nlayers &&
                        m->layers[l + 1].kind == GT_RELU && act_nhwc(g, l + 1) &&
                        act_nhwc(g, l + 2);
    }
}

/* ---- captured steps -------------------------------------------------------------------------- */

static void graph_drop_all(cuda_impl *g)
{
    for (int i = 0; i < CUDA_GRAPHS; i++) {
        if (g->graph[i].exec)
            cudaGraphExecDestroy(g->graph[i].exec);
        memset(&g->graph[i], 0, sizeof g->graph[i]);
    }
}

static int graph_key_eq(const cuda_graph_key *a, const cuda_graph_key *b)
{
    return a->n == b->n && a->slot == b->slot && a->keep_grad == b->keep_grad &&
           a->marks == b->marks && a->grad_dst == b->grad_dst && a->stats_dst == b->stats_dst &&
           a->up_src == b->up_src && a->sums == b->sums && a->aug.pad == b->aug.pad &&
           a->aug.flip == b->aug.flip;
}

static cuda_graph *graph_find(cuda_impl *g, const cuda_graph_key *k)
{
    for (int i = 0; i < CUDA_GRAPHS; i++)
        if (g->graph[i].exec && graph_key_eq(&g->graph[i].key, k))
            return &g->graph[i];
    return NULL;
}

/* Keeps exec in an empty entry, else in place of the least recently used one. */
static void graph_store(cuda_impl *g, cudaGraphExec_t exec, const cuda_graph_key *k)
{
    cuda_graph *gr = &g->graph[0];
    for (int i = 0; i < CUDA_GRAPHS && gr->exec; i++)
        if (!g->graph[i].exec || g->graph[i].used < gr->used)
            gr = &g->graph[i];
    if (gr->exec)
        cudaGraphExecDestroy(gr->exec);
    gr->exec = exec;
    gr->key = *k;
    gr->used = g->nsteps;
}

/* ---- buffers and close ----------------------------------------------------------------------- */

static void cuda_free_impl(cuda_impl *g, const gt_model *m)
{
    graph_drop_all(g);
    gt_fused_free(&g->fnet);
    for (int l = 0; l < GT_MAX_LAYERS; l++) {
        gt_cuda_layer_destroy(&g->layer[l]);
        if (g->mask[l])
            cudaFree(g->mask[l]);
    }
    for (int l = 0; l <= GT_MAX_LAYERS; l++) {
        if (g->act[l] && (l > m->nlayers || act_owner(m, l) == l))
            cudaFree(g->act[l]);
        if (g->act_half[l])
            cudaFree(g->act_half[l]);
    }
    for (int i = 0; i < GT_MAX_BLOCK_DEPTH; i++)
        if (g->branch[i])
            cudaFree(g->branch[i]);
    void *dev[] = {g->params, g->grad, g->dact[0], g->dact[1], g->slot[0].dev, g->slot[1].dev,
                   g->eval_x, g->eval_y, g->result, g->buffers, g->stats, g->params_half,
                   g->half_tasks};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i])
            cudaFree(dev[i]);
    void *host[] = {g->slot[0].host, g->slot[1].host, g->result_host};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        if (host[i])
            cudaFreeHost(host[i]);
    for (int s = 0; s < 2; s++)
        if (g->slot[s].consumed)
            cudaEventDestroy(g->slot[s].consumed);
    cuda_xchg *x = &g->xchg;
    cudaEvent_t *ev[] = {&x->down_end, &x->done};
    for (size_t i = 0; i < sizeof ev / sizeof *ev; i++)
        if (*ev[i])
            cudaEventDestroy(*ev[i]);
    for (int i = 0; i < CUDA_XCHG_PARTS; i++) {
        if (x->part[i])
            cudaEventDestroy(x->part[i]);
        if (x->final[i])
            cudaEventDestroy(x->final[i]);
    }
    if (x->flag)
        cudaFree(x->flag);
    if (x->flag_host)
        cudaFreeHost(x->flag_host);
    cuda_split *sp = &g->split;
    for (int i = 0; sp->ready && i <= CUDA_SPLIT_PARTS; i++) {
        cudaEventDestroy(sp->fork[i]);
        cudaEventDestroy(sp->up_part[i]);
    }
    if (sp->ready) {
        cudaEventDestroy(sp->join);
        cudaEventDestroy(sp->up_fork);
        cudaStreamDestroy(sp->down);
        cudaStreamDestroy(sp->up);
    }
    if (sp->sum)
        cudaStreamDestroy(sp->sum);
    if (x->half)
        cudaFree(x->half);
    if (x->half_host)
        cudaFreeHost(x->half_host);
    if (x->down)
        cudaStreamDestroy(x->down);
    if (x->up)
        cudaStreamDestroy(x->up);
    cudaGetLastError();
}

static void cuda_close(gt_device *d)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    if (g) {
        if (g->ctx) {
            cudaSetDevice(g->ctx->ordinal);
            cudaStreamSynchronize(g->ctx->stream);
            gt_cuda_allreduce_free(g->allreduce);
            cudaFree(g->eval_pred);
            cuda_free_impl(g, d->model);
            gt_cuda_ctx_close(g->ctx);
        }
        free(g);
    }
    gt_host_free(d->params);
    gt_host_free(d->grad);
    gt_host_free(d->buffers);
    gt_host_free(d->stats);
    free(d);
}

static int cuda_alloc_host(gt_cuda_ctx *c, void **p, size_t bytes, gt_err *e)
{
    cudaError_t st = cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (st != cudaSuccess) {
        *p = NULL;
        return gt_fail(e, "%s: cudaHostAlloc of %zu pinned bytes failed: %s", c->name, bytes,
                       cudaGetErrorString(st));
    }
    return 0;
}

/* Batch norm's running statistics on the device and their host twins d->buffers and d->stats
 * (pinned), the buffers at their initial values; nothing for a model without buffers. The
 * statistics' scratch starts at zero: cuDNN reads it times 0, which a NaN would survive. */
static int cuda_alloc_model_buffers(gt_device *d, cuda_impl *g, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    size_t bytes = d->model->nbuffers * sizeof(float);
    if (!bytes)
        return 0;
    if (gt_cuda_malloc(c, (void **)&g->buffers, bytes, e) ||
        gt_cuda_malloc(c, (void **)&g->stats, bytes, e))
        return -1;
    d->buffers = (float *)gt_host_alloc(bytes);
    d->stats = (float *)gt_host_alloc(bytes);
    if (!d->buffers || !d->stats)
        return gt_fail(e, "%s: out of host memory for %zu buffer values", c->name,
                       d->model->nbuffers);
    gt_model_init_buffers(d->model, d->buffers);
    memset(d->stats, 0, bytes);
    GT_CUDA_CHECK(c->name, e, cudaMemset(g->stats, 0, bytes));
    GT_CUDA_CHECK(c->name, e, cudaMemcpy(g->buffers, d->buffers, bytes, cudaMemcpyHostToDevice));
    return 0;
}

/* How layer L's weights enter the parameters' bf16 copy: -1 not at all (no weights the bf16
 * layers multiply), 1 as a filter in cuDNN's (k, r, s, c) layout, 0 as they are (a 1x1 filter, a
 * linear layer). */
static int layer_half_kind(const gt_layer *L)
{
    if (L->kind != GT_CONV && L->kind != GT_LINEAR)
        return -1;
    return L->kind == GT_CONV && L->k > 1;
}

/* Elements a block of the one-launch bf16 copy takes (cuda_params_half). */
#define HALF_TASK_LEN 8192

/* The blocks of the parameters' bf16 copy in one launch (gt_cuda_weights_to_bf16): every
 * weight array cuda_layer_half copies, in chunks of HALF_TASK_LEN, uploaded once. */
static int cuda_half_tasks(gt_device *d, cuda_impl *g, gt_err *e)
{
    const gt_model *m = d->model;
    size_t n = 0;
    for (int l = 0; l < m->nlayers; l++)
        if (layer_half_kind(&m->layers[l]) >= 0)
            n += (m->layers[l].w_len + HALF_TASK_LEN - 1) / HALF_TASK_LEN;
    if (n == 0)
        return 0;
    gt_cuda_half_task *t = (gt_cuda_half_task *)malloc(n * sizeof *t);
    if (!t)
        return gt_fail(e, "%s: out of memory for the bf16 copy's blocks", d->name);
    size_t k = 0;
    for (int l = 0; l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        int krsc = layer_half_kind(L);
        for (size_t lo = 0; krsc >= 0 && lo < L->w_len; lo += HALF_TASK_LEN)
            t[k++] = (gt_cuda_half_task){
                .off = L->w_off, .lo = (unsigned)lo,
                .hi = (unsigned)(L->w_len - lo < HALF_TASK_LEN ? L->w_len : lo + HALF_TASK_LEN),
                .ch = (unsigned)(krsc ? L->in_c : 1), .rs = (unsigned)(krsc ? L->k * L->k : 1),
                .krsc = (unsigned)krsc};
    }
    int rc = gt_cuda_malloc(g->ctx, (void **)&g->half_tasks, n * sizeof *t, e);
    if (rc == 0 &&
        cudaMemcpy(g->half_tasks, t, n * sizeof *t, cudaMemcpyHostToDevice) != cudaSuccess)
        rc = gt_fail(e, "%s: the bf16 copy's blocks could not be uploaded", d->name);
    free(t);
    g->nhalf_tasks = rc == 0 ? (int)n : 0;
    return rc ? -1 : 0;
}

/* bf16 precision: the parameters' bf16 copy, the training step's bf16 copies of convolution
 * inputs (act_half) and the context's scratch for a layer's bf16 input and output (any layer's,
 * cap rows) and a convolution's weight gradient. */
static int cuda_alloc_half(gt_device *d, cuda_impl *g, gt_err *e)
{
    const gt_model *m = d->model;
    size_t w_max = 0;
    if (!g->ctx->bf16)
        return 0;
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].kind == GT_CONV && m->layers[l].w_len > w_max)
            w_max = m->layers[l].w_len;
    if (gt_cuda_malloc(g->ctx, &g->params_half, (m->nparams ? m->nparams : 1) * 2, e))
        return -1;
    for (int l = 0; l < m->nlayers; l++) {
        int o = act_owner(m, l);
        if (m->layers[l].kind == GT_CONV && !act_nhwc(g, o) && !g->act_half[o] &&
            gt_cuda_malloc(g->ctx, &g->act_half[o],
                           (size_t)d->max_batch * layer_in_len(m, o) * 2, e))
            return -1;
    }
    GT_CUDA_CHECK(d->name, e, cudaMemset(g->params_half, 0, (m->nparams ? m->nparams : 1) * 2));
    if (cuda_half_tasks(d, g, e))
        return -1;
    return gt_cuda_ctx_half_scratch(g->ctx, (size_t)g->cap * m->max_act, w_max, e);
}

static int cuda_alloc_buffers(gt_device *d, cuda_impl *g, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    const gt_model *m = d->model;
    size_t nb = (size_t)d->max_batch, cap = (size_t)g->cap, nparams = m->nparams;
    size_t slot_bytes = slot_layout_for(d->max_batch, g->in_len).total;
    if (gt_cuda_malloc(c, (void **)&g->params, nparams * sizeof(float), e) ||
        gt_cuda_malloc(c, (void **)&g->grad, nparams * sizeof(float), e))
        return -1;
    for (int l = 0; l <= m->nlayers; l++)
        if (act_owner(m, l) != l)
            g->act[l] = g->act[act_owner(m, l)]; /* owners come first */
        else if (gt_cuda_malloc(c, (void **)&g->act[l], cap * layer_in_len(m, l) * sizeof(float),
                                e))
            return -1;
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].kind == GT_DROPOUT &&
            gt_cuda_malloc(c, (void **)&g->mask[l], nb * m->layers[l].out_len, e))
            return -1;
    for (int i = 0; i < 2; i++)
        if (gt_cuda_malloc(c, (void **)&g->dact[i], nb * m->max_act * sizeof(float), e))
            return -1;
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].kind == GT_RES_BEGIN && !g->branch[g->depth[l]] &&
            gt_cuda_malloc(c, (void **)&g->branch[g->depth[l]], nb * m->max_act * sizeof(float),
                           e))
            return -1;
    if (cuda_alloc_model_buffers(d, g, e) || cuda_alloc_half(d, g, e))
        return -1;
    for (int s = 0; s < 2; s++) {
        if (gt_cuda_malloc(c, (void **)&g->slot[s].dev, slot_bytes, e) ||
            cuda_alloc_host(c, (void **)&g->slot[s].host, slot_bytes, e))
            return -1;
        GT_CUDA_CHECK(c->name, e,
                      cudaEventCreateWithFlags(&g->slot[s].consumed, cudaEventDisableTiming));
    }
    if (gt_cuda_malloc(c, (void **)&g->eval_x, cap * g->in_len, e) ||
        gt_cuda_malloc(c, (void **)&g->eval_y, cap * sizeof *g->eval_y, e) ||
        gt_cuda_malloc(c, (void **)&g->result, sizeof *g->result, e) ||
        cuda_alloc_host(c, (void **)&g->result_host, 3 * sizeof *g->result_host, e))
        return -1;
    /* Finite contents for timing the convolution algorithms. */
    GT_CUDA_CHECK(c->name, e, cudaMemset(g->params, 0, nparams * sizeof(float)));
    for (int l = 0; l <= m->nlayers; l++)
        GT_CUDA_CHECK(c->name, e,
                      cudaMemset(g->act[l], 0, cap * layer_in_len(m, l) * sizeof(float)));
    d->params = (float *)gt_host_alloc(nparams * sizeof(float));
    d->grad = (float *)gt_host_alloc(nparams * sizeof(float));
    if (!d->params || !d->grad)
        return gt_fail(e, "%s: out of host memory for %zu parameters", c->name, nparams);
    return 0;
}

/* One convolution's algorithms at the training batch size (gt_cuda_layer_choose_algos, on the
 * buffers the steps use); 1 where wait is 0 and another device is timing one of them. */
static int cuda_plan_conv(gt_device *d, cuda_impl *g, int l, int wait, size_t *need, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    const gt_layer *L = &d->model->layers[l];
    if (c->bf16)
        /* Timed on the bf16 buffers the steps use, at their alignment (a weight's copy starts
         * at its offset in the parameters' bf16 array). */
        return gt_cuda_layer_choose_algos(
            c, &g->layer[l], d->max_batch, g->cap, wait, (const float *)c->half_a,
            (const float *)((const __nv_bfloat16 *)g->params_half + L->w_off),
            (float *)c->half_b, l ? g->dact[0] : NULL, (float *)c->half_w, need, e);
    return gt_cuda_layer_choose_algos(c, &g->layer[l], d->max_batch, g->cap, wait, g->act[l],
                                      g->params + L->w_off, g->act[l + 1],
                                      l ? g->dact[0] : NULL, g->grad + L->w_off, need, e);
}

/* cuBLAS loads the kernels of a product at its first call: resnet18's first training step
 * waited ~50 ms in its fc layer on one H200. Each linear layer's forward and backward run once
 * here instead, at the training batch size on zeroed inputs, with the device's other one-time
 * work (the convolutions' search before it); what they write, every step writes again (its
 * gradient is zeroed first). */
static int cuda_warm_linear(gt_device *d, cuda_impl *g, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    const gt_model *m = d->model;
    gt_cuda_pass p = {};
    p.n = d->max_batch;
    p.params = g->params;
    p.grad = g->grad;
    p.params_half = g->params_half;
    p.train = 1;
    for (int l = 0; l < m->nlayers; l++) {
        if (m->layers[l].kind != GT_LINEAR)
            continue;
        size_t bytes = (size_t)d->max_batch * m->max_act * sizeof(float);
        GT_CUDA_CHECK(c->name, e, cudaMemsetAsync(g->dact[0], 0, bytes, c->stream));
        GT_CUDA_CHECK(c->name, e,
                      cudaMemsetAsync(g->act[l], 0,
                                      (size_t)d->max_batch * layer_in_len(m, l) * sizeof(float),
                                      c->stream));
        if (gt_cuda_layer_forward(c, &g->layer[l], &p, g->act[l], g->act[l + 1], e) ||
            gt_cuda_layer_backward(c, &g->layer[l], &p, g->act[l], g->act[l + 1], g->dact[0],
                                   l ? g->dact[1] : NULL, e))
            return -1;
    }
    GT_CUDA_CHECK(c->name, e, cudaStreamSynchronize(c->stream));
    return 0;
}

/* Times each convolution's algorithms at the training batch size with a generous workspace,
 * then keeps only the workspace the chosen ones need. Runs when the layer path is first chosen
 * (at open for a model the fused kernels cannot run): the search writes the activation, input
 * gradient and gradient buffers, so the stream must be idle and no gradient pending. Choices
 * are shared across the process (conv_cache.h): a shape another layer or device timed already
 * is not timed again, and the first pass skips shapes another device is timing now, so GPUs
 * opening together split the searches between them; the second waits for those. */
static int cuda_plan_layers(gt_device *d, cuda_impl *g, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    const gt_model *m = d->model;
    size_t free_bytes = 0, total_bytes = 0, need = 0;
    int later[GT_MAX_LAYERS], nlater = 0;
    GT_CUDA_CHECK(c->name, e, cudaStreamSynchronize(c->stream));
    for (int l = 0; l < m->nlayers; l++)
        gt_cuda_layer_destroy(&g->layer[l]); /* from an attempt that failed half-way */
    GT_CUDA_CHECK(c->name, e, cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t search = free_bytes / 4 < GT_CUDA_SEARCH_WS ? free_bytes / 4 : GT_CUDA_SEARCH_WS;
    if (gt_cuda_ctx_set_workspace(c, search, e))
        return -1;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? nlater : m->nlayers;
        for (int i = 0; i < n; i++) {
            int l = pass ? later[i] : i;
            size_t layer_need = 0;
            if (!pass && gt_cuda_layer_init(c, &g->layer[l], &m->layers[l], (uint32_t)l, e))
                return -1;
            if (m->layers[l].kind != GT_CONV)
                continue;
            int rc = cuda_plan_conv(d, g, l, pass, &layer_need, e);
            if (rc < 0)
                return -1;
            if (rc > 0)
                later[nlater++] = l;
            else
                need = layer_need > need ? layer_need : need;
        }
    }
    if (gt_cuda_ctx_set_workspace(c, need, e))
        return -1;
    cuda_nhwc_mark(g, m);
    if (cuda_warm_linear(d, g, e))
        return -1;
    g->layers_ready = 1;
    return 0;
}

/* ---- batches --------------------------------------------------------------------------------- */

static int cuda_check_dataset(const gt_device *d, const cuda_impl *g, const gt_dataset *ds,
                              gt_err *e)
{
    if ((size_t)ds->c * ds->h * ds->w != g->in_len)
        return gt_fail(e, "%s: dataset samples are %d x %d x %d, the model takes %zu inputs",
                       d->name, ds->c, ds->h, ds->w, g->in_len);
    return 0;
}

static int cuda_check_batch(const gt_device *d, const cuda_impl *g, const gt_batch *b, gt_err *e)
{
    if (b->n < 1 || b->n > d->max_batch)
        return gt_fail(e, "%s: batch of %d samples (buffers hold %d)", d->name, b->n,
                       d->max_batch);
    return cuda_check_dataset(d, g, b->ds, e);
}

static int slot_busy(const cuda_impl *g, int s)
{
    for (int i = 0; i < g->ninflight; i++)
        if (g->inflight[i] == s)
            return 1;
    return 0;
}

/* A slot no begun step still reads (the caller allows at most one begun step beside it). */
static int slot_free(const cuda_impl *g)
{
    return slot_busy(g, 0) ? 1 : 0;
}

/* Gathers b into the slot's pinned bytes; the upload is the caller's. Its augmentation (b->aug)
 * is done by the step's input on the device where the step takes the layer path (the input
 * kernel crops and flips as data_input.c does: the same bytes as the CPU network's gather), so
 * the host only copies each sample: a resnet batch's crop and flip (256 3x32x32 images) cost the
 * host 0.3-0.6 ms, which the store's modes wait for between one step and the next.
 * The fused kernels read the slot's bytes as they are: there the host augments. */
static int slot_gather(gt_device *d, cuda_impl *g, cuda_slot *s, const gt_batch *b, gt_err *e)
{
    int on_device = !g->fused && gt_augment_on(b->aug);
    const gt_augment none = {0, 0}, *host_aug = on_device ? NULL : b->aug;
    s->aug = on_device ? *b->aug : none;
    const gt_dataset *ds = b->ds;
    slot_layout lay = slot_layout_for(b->n, g->in_len);
    gt_cuda_key *key = (gt_cuda_key *)s->host;
    uint32_t *ids = (uint32_t *)(s->host + lay.ids);
    uint16_t *labels = (uint16_t *)(s->host + lay.labels);
    uint8_t *images = s->host + lay.images;
    for (int i = 0; i < b->n; i++) {
        uint32_t id = b->idx[i];
        if (id >= ds->n)
            return gt_fail(e, "%s: batch sample %u is outside the dataset (%u samples)", d->name,
                           id, ds->n);
        if (ds->labels[id] >= g->nclasses)
            return gt_fail(e, "%s: sample %u has label %d, the model has %d classes", d->name, id,
                           ds->labels[id], g->nclasses);
        ids[i] = id;
        labels[i] = ds->labels[id];
        gt_data_copy_sample(ds, id, host_aug, b->seed, b->epoch, images + (size_t)i * g->in_len);
    }
    key->seed = b->seed;
    key->epoch = b->epoch;
    key->unused = 0;
    return 0;
}

/* ---- passes ---------------------------------------------------------------------------------- */

/* A training step's bf16 copy of convolution l's input x (act_half), or NULL: not a bf16
 * training convolution, or x is not the activation the copy is of. */
static void *conv_x_half(const cuda_impl *g, const gt_model *m, int l, const float *x, int train)
{
    int o = act_owner(m, l);
    if (!train || g->no_half_copies || m->layers[l].kind != GT_CONV || act_nhwc(g, o) ||
        !g->act_half[o] || x != g->act[o])
        return NULL;
    return g->act_half[o];
}

/* Layer L's part of the parameters' bf16 copy (cuda_params_half); nothing for a layer without
 * weights the bf16 layers multiply. */
static int cuda_layer_half(cuda_impl *g, const gt_layer *L, const float *src, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    __nv_bfloat16 *half = (__nv_bfloat16 *)g->params_half;
    int kind = layer_half_kind(L);
    if (kind < 0)
        return 0;
    return kind ? gt_cuda_filter_to_krsc_bf16(c, src + L->w_off, half + L->w_off, L->out_c,
                                              L->in_c, L->k * L->k, e)
                : gt_cuda_to_bf16(c, src + L->w_off, half + L->w_off, L->w_len, e);
}

/* Before layer l's forward in a step that uploads in parts (cuda_up_parts): the compute stream
 * waits for the upload's parts that layers 0..l read and that it has not waited for (*waited:
 * the last event it waited for, -1 none), then makes the layer's bf16 copy. */
static int cuda_up_wait(cuda_impl *g, const gt_model *m, int l, int *waited, gt_err *e)
{
    cuda_split *sp = &g->split;
    gt_cuda_ctx *c = g->ctx;
    int need = sp->up_need[l];
    if (need > *waited) {
        GT_CUDA_CHECK(c->name, e, cudaStreamWaitEvent(c->stream, sp->up_part[need], 0));
        *waited = need;
    }
    return g->params_half ? cuda_layer_half(g, &m->layers[l], g->params, e) : 0;
}

/* Forward through every layer; without pass.train, dropout is the identity and is skipped (the
 * next layer reads its input). "res[" passes its input on, "|" the block's input (its peer's
 * input), and "]" adds its peer's input, the other branch. *logits is the last layer's output.
 * In a bf16 training step a ReLU whose output a convolution reads writes its bf16 copy as well;
 * otherwise the first convolution to read an activation rounds it into that copy; the others of
 * that input (a projection shortcut beside its block's body) and backward read it. */
static int cuda_forward(cuda_impl *g, const gt_model *m, gt_cuda_pass pass, const float **logits,
                        gt_err *e)
{
    const float *in[GT_MAX_LAYERS]; /* each layer's input, as it ran */
    const float *x = g->act[0];
    char rounded[GT_MAX_LAYERS + 1] = {0}; /* act_half[l] holds this step's act[l] */
    int up = pass.train && g->split.up_on, waited = -1;
    for (int l = 0; l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        in[l] = x;
        if (up && cuda_up_wait(g, m, l, &waited, e))
            return -1;
        if ((!pass.train && L->kind == GT_DROPOUT) || L->kind == GT_RES_BEGIN)
            continue;
        if (L->kind == GT_RES_SPLIT) {
            x = in[L->peer];
            continue;
        }
        pass.other = L->kind == GT_RES_END ? in[L->peer] : NULL;
        pass.mask = g->mask[l];
        pass.x_half = conv_x_half(g, m, l, x, pass.train);
        pass.x_half_fill = pass.x_half && !rounded[act_owner(m, l)];
        if (pass.x_half)
            rounded[act_owner(m, l)] = 1;
        pass.y_half = pass.train && !g->no_half_copies && L->kind == GT_RELU ? g->act_half[l + 1]
                                                                             : NULL;
        if (pass.y_half)
            rounded[l + 1] = 1;
        pass.relu = g->bn_relu[l];
        float *y = g->act[l + 1 + pass.relu];
        if (gt_cuda_layer_forward(g->ctx, &g->layer[l], &pass, x, y, e))
            return -1;
        x = y;
        if (pass.relu) { /* the ReLU after it ran too */
            l++;
            in[l] = g->act[l];
        }
    }
    *logits = x;
    return 0;
}

static void swap_ptr(float **a, float **b)
{
    float *t = *a;
    *a = *b;
    *b = t;
}

/* The block markers' backward, as cpu_net.c's (layer_kinds.c): "]" keeps its output gradient in
 * its depth's buffer and passes it on; "|" passes on the kept one (the body's output gradient)
 * and keeps the shortcut's gradient of the block input, a swap of buffers; "res[" adds the kept
 * one to the body's gradient of the block input. Buffers swap roles, not contents, where they
 * can: every one holds max_batch * max_act floats. */
static int cuda_backward_marker(cuda_impl *g, const gt_layer *L, int l, int n, float **dy,
                                float **dx, float **branch, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    float **kept = &branch[g->depth[l]];
    size_t len = (size_t)n * L->out_len;
    int half = act_nhwc(g, l + 1); /* gradients as bf16 channels-last */
    switch (L->kind) {
    case GT_RES_END:
        GT_CUDA_CHECK(c->name, e,
                      cudaMemcpyAsync(*kept, *dy, len * (half ? 2 : sizeof(float)),
                                      cudaMemcpyDeviceToDevice, c->stream));
        return 0;
    case GT_RES_SPLIT:
        swap_ptr(dy, kept);
        return 0;
    case GT_RES_BEGIN:
        if (half ? gt_cuda_add_nhwc(c, *dy, *kept, *dx, len, e)
                 : gt_cuda_add(c, *dy, *kept, *dx, len, e))
            return -1;
        swap_ptr(dy, dx);
        return 0;
    case GT_CONV:
    case GT_LINEAR:
    case GT_AVGPOOL:
    case GT_MAXPOOL:
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
    case GT_DROPOUT:
    case GT_BATCHNORM:
    case GT_GAP:
        break;
    }
    return gt_fail(e, "%s: layer %d is not a block marker", c->name, l);
}

/* ---- hogwild's store step in parts: the exchange's streams and the step's marks ------------ */

static int cuda_xchg_open(gt_device *d, cuda_xchg *x, gt_err *e)
{
    GT_CUDA_CHECK(d->name, e, cudaStreamCreateWithFlags(&x->down, cudaStreamNonBlocking));
    GT_CUDA_CHECK(d->name, e, cudaStreamCreateWithFlags(&x->up, cudaStreamNonBlocking));
    GT_CUDA_CHECK(d->name, e, cudaEventCreateWithFlags(&x->down_end, cudaEventDisableTiming));
    GT_CUDA_CHECK(d->name, e, cudaEventCreateWithFlags(&x->done, cudaEventDisableTiming));
    for (int i = 0; i < CUDA_XCHG_PARTS; i++) {
        GT_CUDA_CHECK(d->name, e, cudaEventCreateWithFlags(&x->part[i], cudaEventDisableTiming));
        GT_CUDA_CHECK(d->name, e, cudaEventCreateWithFlags(&x->final[i], cudaEventDisableTiming));
    }
    GT_CUDA_CHECK(d->name, e, cudaMalloc((void **)&x->flag, CUDA_XCHG_PARTS * sizeof(int)));
    GT_CUDA_CHECK(d->name, e,
                  cudaHostAlloc((void **)&x->flag_host, CUDA_XCHG_PARTS * sizeof(int),
                                cudaHostAllocDefault));
    x->ready = 1;
    return 0;
}

/* The bf16 gradient's buffers where d->grad_bf16 asks for them (made once, outside any capture);
 * x->half_on follows d->grad_bf16. */
static int cuda_xchg_half(gt_device *d, cuda_xchg *x, gt_err *e)
{
    x->half_on = d->grad_bf16 != 0;
    if (x->half_on && !x->half) {
        size_t bytes = d->model->nparams * sizeof(uint16_t);
        GT_CUDA_CHECK(d->name, e, cudaMalloc((void **)&x->half, bytes));
        GT_CUDA_CHECK(d->name, e,
                      cudaHostAlloc((void **)&x->half_host, bytes, cudaHostAllocDefault));
    }
    d->grad_half = x->half_on ? x->half_host : NULL;
    return 0;
}

/* Whether a step now marks d->part_bounds' parts during its backward (1, or 2 where it rounds
 * them to bf16; 0: it does not; -1 with e set), planning the marks where the parts changed. The
 * backward runs from the last layer to the first and each layer writes only its own parameters'
 * gradient, so a part's gradient is final after the backward of the first layer holding any of
 * its parameters; that layer has read
 * those parameters for the last time too, so the part's upload may overwrite them. The fused
 * step has no layers to mark between; a part no layer holds leaves the step unmarked. */
static int cuda_marks_plan(gt_device *d, cuda_impl *g, gt_err *e)
{
    cuda_xchg *x = &g->xchg;
    const gt_model *m = d->model;
    int n = d->part_count;
    if (g->fused || d->keep_grad || !d->grad_later || !d->part_bounds || n < 1 ||
        n > CUDA_XCHG_PARTS)
        return 0;
    if ((!x->ready && cuda_xchg_open(d, x, e)) || cuda_xchg_half(d, x, e))
        return -1;
    size_t bytes = (size_t)(n + 1) * sizeof(size_t);
    if (x->nmarks == n && memcmp(x->bounds, d->part_bounds, bytes) == 0)
        return 1 + x->half_on;
    x->nmarks = 0;
    for (int k = 0; k < n; k++) {
        size_t lo = d->part_bounds[k], hi = d->part_bounds[k + 1];
        x->mark_layer[k] = -1;
        for (int l = 0; l < m->nlayers && x->mark_layer[k] < 0; l++) {
            const gt_layer *L = &m->layers[l];
            if ((L->w_len && L->w_off < hi && lo < L->w_off + L->w_len) ||
                (L->b_len && L->b_off < hi && lo < L->b_off + L->b_len))
                x->mark_layer[k] = l;
        }
        if (x->mark_layer[k] < 0)
            return 0;
    }
    memcpy(x->bounds, d->part_bounds, bytes);
    x->nmarks = n;
    return 1 + x->half_on;
}

/* Part k of bounds is final on the compute stream: its flag (any Inf or NaN in its gradient, or
 * with half_on in its bf16 copy, made here) and its final event, an event node of the step's
 * graph where the step is being captured. */
static int cuda_mark_part(cuda_impl *g, const size_t *bounds, int k, gt_err *e)
{
    cuda_xchg *x = &g->xchg;
    gt_cuda_ctx *c = g->ctx;
    cudaStreamCaptureStatus cs;
    GT_CUDA_CHECK(c->name, e, cudaStreamIsCapturing(c->stream, &cs));
    unsigned flags = cs == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : 0;
    size_t lo = bounds[k], len = bounds[k + 1] - lo;
    if (x->half_on ? gt_cuda_flag_to_bf16(c, g->grad + lo, x->half + lo, len, x->flag + k, e)
                   : gt_cuda_flag_nonfinite(c, g->grad + lo, len, x->flag + k, e))
        return -1;
    GT_CUDA_CHECK(c->name, e, cudaEventRecordWithFlags(x->final[k], c->stream, flags));
    return 0;
}

/* After layer l's backward: each part it finishes is marked. */
static int cuda_mark_parts(cuda_impl *g, int l, gt_err *e)
{
    const cuda_xchg *x = &g->xchg;
    for (int k = 0; k < x->nmarks; k++)
        if (x->mark_layer[k] == l && cuda_mark_part(g, x->bounds, k, e))
            return -1;
    return 0;
}

/* Whether layer L holds any of the parameters [lo, hi). */
static int layer_holds(const gt_layer *L, size_t lo, size_t hi)
{
    return (L->w_len && L->w_off < hi && lo < L->w_off + L->w_len) ||
           (L->b_len && L->b_off < hi && lo < L->b_off + L->b_len);
}

/* The layer whose backward finishes the gradient of parameters [lo, hi): the first holding any
 * of them (the backward runs from the last layer to the first, each writing only its own
 * parameters' gradient); -1 where no layer holds one. */
static int grad_final_layer(const gt_model *m, size_t lo, size_t hi)
{
    for (int l = 0; l < m->nlayers; l++)
        if (layer_holds(&m->layers[l], lo, hi))
            return l;
    return -1;
}

/* The split copies' parts of the layer path, once: the weights in CUDA_SPLIT_PARTS even parts,
 * then the biases and batch norm's parameters (model.h puts them last), each with the layer whose
 * backward finishes its gradient, and the upload's order and waits (cuda_split). Returns whether
 * the model goes in parts (a small model, the fused step: no); -1 with e set on failure. */
static int cuda_split_ready(gt_device *d, cuda_impl *g, gt_err *e)
{
    cuda_split *sp = &g->split;
    const gt_model *m = d->model;
    if (g->fused || m->nparams < sp->min_params)
        return 0;
    if (!sp->ready) {
        GT_CUDA_CHECK(d->name, e, cudaStreamCreateWithFlags(&sp->down, cudaStreamNonBlocking));
        GT_CUDA_CHECK(d->name, e, cudaStreamCreateWithFlags(&sp->up, cudaStreamNonBlocking));
        for (int i = 0; i <= CUDA_SPLIT_PARTS; i++) {
            GT_CUDA_CHECK(d->name, e,
                          cudaEventCreateWithFlags(&sp->fork[i], cudaEventDisableTiming));
            GT_CUDA_CHECK(d->name, e,
                          cudaEventCreateWithFlags(&sp->up_part[i], cudaEventDisableTiming));
        }
        GT_CUDA_CHECK(d->name, e, cudaEventCreateWithFlags(&sp->join, cudaEventDisableTiming));
        GT_CUDA_CHECK(d->name, e, cudaEventCreateWithFlags(&sp->up_fork, cudaEventDisableTiming));
        sp->ready = 1;
    }
    if (sp->n == 0) {
        /* The weights in CUDA_SPLIT_PARTS, the first only the first layers' where a tensor ends
         * within half an even part (the rest even): the forward's first layers wait for no
         * more than their own upload, and the backward's last part (download or sum) is small. */
        size_t w = m->ndecay < m->nparams ? m->ndecay : m->nparams;
        size_t cut = gt_model_tensors_end_within(m, w / CUDA_SPLIT_PARTS / 2);
        int n = 0;
        for (int k = 0; k < CUDA_SPLIT_PARTS; k++)
            sp->bounds[n++] = !cut ? w * (size_t)k / CUDA_SPLIT_PARTS
                              : k == 0 ? 0
                                       : cut + (w - cut) * (size_t)(k - 1) / (CUDA_SPLIT_PARTS - 1);
        if (w < m->nparams)
            sp->bounds[n++] = w;
        sp->bounds[n] = m->nparams;
        for (int k = 0; k < n; k++)
            if ((sp->mark_layer[k] = grad_final_layer(m, sp->bounds[k], sp->bounds[k + 1])) < 0)
                return 0; /* a part no layer holds (not in a built model): whole copies */
        int u = 0;
        if (w < m->nparams) /* the rest first: the first batch norm reads it */
            sp->up_order[u++] = n - 1;
        for (int k = 0; k < CUDA_SPLIT_PARTS; k++)
            sp->up_order[u++] = k;
        for (int l = 0, need = 0; l < m->nlayers; l++) {
            for (int i = 0; i < n; i++) {
                int k = sp->up_order[i];
                if (i > need && layer_holds(&m->layers[l], sp->bounds[k], sp->bounds[k + 1]))
                    need = i;
            }
            sp->up_need[l] = need;
        }
        sp->n = n;
    }
    return 1;
}

/* Plans the whole download in parts for a step that downloads its gradient into dst
 * (step_grad_dst): sp->dst is dst where the step goes in parts, else NULL; -1 with e set on
 * failure. */
static int cuda_split_plan(gt_device *d, cuda_impl *g, float *dst, gt_err *e)
{
    g->split.dst = NULL;
    int on = dst ? cuda_split_ready(d, g, e) : 0;
    if (on < 0)
        return -1;
    g->split.dst = on ? dst : NULL;
    return 0;
}

/* Plans the sum in parts for the step being queued (sp->sum_on), where its reduce_update takes
 * the peer exchange (gt_cuda_allreduce_step_sums) and the model goes in parts, and tells the
 * exchange whether it sums, for the reduce_update after it; -1 with e set on failure. The sums'
 * stream has the highest priority: a peer's blocks spin until this GPU's reach the part, so they
 * should not queue behind the backward's (graphs keep it: graph_capture). */
static int cuda_sum_plan(gt_device *d, cuda_impl *g, gt_err *e)
{
    cuda_split *sp = &g->split;
    unsigned sums = d->keep_grad ? gt_cuda_allreduce_step_sums(g->allreduce) : 0;
    int on = sums ? cuda_split_ready(d, g, e) : 0, least = 0, greatest = 0;
    sp->sum_on = 0;
    if (on < 0)
        return -1;
    if (on && !sp->sum) {
        GT_CUDA_CHECK(d->name, e, cudaDeviceGetStreamPriorityRange(&least, &greatest));
        GT_CUDA_CHECK(d->name, e,
                      cudaStreamCreateWithPriority(&sp->sum, cudaStreamNonBlocking, greatest));
    }
    sp->sum_on = on ? sums : 0;
    gt_cuda_allreduce_step_summed(g->allreduce, on);
    return 0;
}

/* Queues load_params's pending copy whole on the compute stream (every call but train_step's). */
static int cuda_load_join(gt_device *d, cuda_impl *g, gt_err *e)
{
    cuda_split *sp = &g->split;
    if (!sp->up_pending)
        return 0;
    sp->up_pending = 0;
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->params, sp->up_src, d->model->nparams * sizeof(float),
                                  cudaMemcpyHostToDevice, g->ctx->stream));
    return 0;
}

/* train_step: whether its step uploads load_params's pending copy in parts beside the forward
 * (sp->up_on; the copy whole first where the model does not go in parts). */
static int cuda_up_plan(gt_device *d, cuda_impl *g, gt_err *e)
{
    cuda_split *sp = &g->split;
    sp->up_on = 0;
    if (!sp->up_pending)
        return 0;
    int on = cuda_split_ready(d, g, e);
    if (on <= 0)
        return on < 0 || cuda_load_join(d, g, e) ? -1 : 0;
    sp->up_on = 1;
    return 0;
}

/* The start of a step that uploads in parts: each part goes up on the upload stream, behind an
 * event on the compute stream (a fork of the captured graph), in upload order, each with its
 * event. */
static int cuda_up_parts(cuda_impl *g, gt_err *e)
{
    cuda_split *sp = &g->split;
    gt_cuda_ctx *c = g->ctx;
    GT_CUDA_CHECK(c->name, e, cudaEventRecord(sp->up_fork, c->stream));
    GT_CUDA_CHECK(c->name, e, cudaStreamWaitEvent(sp->up, sp->up_fork, 0));
    for (int i = 0; i < sp->n; i++) {
        int k = sp->up_order[i];
        size_t lo = sp->bounds[k], len = sp->bounds[k + 1] - lo;
        GT_CUDA_CHECK(c->name, e,
                      cudaMemcpyAsync(g->params + lo, sp->up_src + lo, len * sizeof(float),
                                      cudaMemcpyHostToDevice, sp->up));
        GT_CUDA_CHECK(c->name, e, cudaEventRecord(sp->up_part[i], sp->up));
    }
    return 0;
}

/* The stream a step's parts go on beside its backward: the sums' or the download's. */
static cudaStream_t split_stream(const cuda_split *sp) { return sp->sum_on ? sp->sum : sp->down; }

/* After layer l's backward: each part of the split it finishes goes down to the host (sp->dst),
 * or is summed over the GPUs (sp->sum_on), on the split's stream, behind an event on the compute
 * stream (a fork of the captured graph, where the step is being captured). */
static int cuda_split_parts(cuda_impl *g, int l, gt_err *e)
{
    cuda_split *sp = &g->split;
    gt_cuda_ctx *c = g->ctx;
    cudaStream_t s = split_stream(sp);
    for (int k = 0; (sp->dst || sp->sum_on) && k < sp->n; k++) {
        if (sp->mark_layer[k] != l)
            continue;
        size_t lo = sp->bounds[k], len = sp->bounds[k + 1] - lo;
        GT_CUDA_CHECK(c->name, e, cudaEventRecord(sp->fork[k], c->stream));
        GT_CUDA_CHECK(c->name, e, cudaStreamWaitEvent(s, sp->fork[k], 0));
        if (sp->sum_on) {
            if (gt_cuda_allreduce_sum_part(g->allreduce, lo, len, s, e))
                return -1;
        } else {
            GT_CUDA_CHECK(c->name, e,
                          cudaMemcpyAsync(sp->dst + lo, g->grad + lo, len * sizeof(float),
                                          cudaMemcpyDeviceToHost, s));
        }
    }
    return 0;
}

/* Backward from dact[0] (the loss gradient); the first layer computes no input gradient (a
 * first batch norm still gets a scratch buffer for it: cuDNN writes one). Layers without
 * parameters stop at the first layer, as on the CPU. */
static int cuda_backward(cuda_impl *g, const gt_model *m, gt_cuda_pass pass, int marks,
                         gt_err *e)
{
    float *dy = g->dact[0], *dx = g->dact[1];
    float *branch[GT_MAX_BLOCK_DEPTH];
    memcpy(branch, g->branch, sizeof branch);
    for (int l = m->nlayers - 1; l >= 0; l--) {
        const gt_layer *L = &m->layers[l];
        gt_layer_kind kind = L->kind;
        if (l == 0 && kind != GT_CONV && kind != GT_LINEAR && kind != GT_BATCHNORM)
            break;
        if (kind == GT_RES_BEGIN || kind == GT_RES_SPLIT || kind == GT_RES_END) {
            if (cuda_backward_marker(g, L, l, pass.n, &dy, &dx, branch, e))
                return -1;
            continue;
        }
        pass.mask = g->mask[l];
        pass.x_half = conv_x_half(g, m, l, g->act[l], pass.train); /* made by forward */
        pass.x_half_fill = 0;
        if (gt_cuda_layer_backward(g->ctx, &g->layer[l], &pass, g->act[l], g->act[l + 1], dy,
                                   l || kind == GT_BATCHNORM ? dx : NULL, e))
            return -1;
        if ((marks && cuda_mark_parts(g, l, e)) || cuda_split_parts(g, l, e))
            return -1;
        swap_ptr(&dy, &dx);
    }
    return 0;
}

/* The parameters' bf16 copy for a step or an evaluation: the weights the bf16 layers multiply
 * (layers_cuda.cu's half_params), each convolution's filter (k, c, r, s) in cuDNN's channels-last
 * filter layout (k, r, s, c), a 1x1 filter and a linear layer's weights as they are. Biases and
 * batch norm's parameters stay fp32 and get no copy. */
static int cuda_params_half(cuda_impl *g, const gt_model *m, const float *src, gt_err *e)
{
    if (g->half_tasks) /* one launch for every layer's (resnet18 at batch 128: ~85 us less) */
        return gt_cuda_weights_to_bf16(g->ctx, src, g->params_half, g->half_tasks,
                                       g->nhalf_tasks, e);
    for (int l = 0; l < m->nlayers; l++)
        if (cuda_layer_half(g, &m->layers[l], src, e))
            return -1;
    return 0;
}

/* A training step layer by layer, on the batch in slot s: the gradient accumulates into a zeroed
 * array, the loss into a zeroed result; with marks, the backward marks the exchange's parts as it
 * finishes them (cuda_mark_parts). */
static int cuda_layers_train(gt_device *d, cuda_impl *g, const cuda_slot *s, int n, int marks,
                             gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    const gt_model *m = d->model;
    slot_layout lay = slot_layout_for(n, g->in_len);
    gt_cuda_pass pass = {n, g->params, g->grad, NULL, (const uint32_t *)(s->dev + lay.ids), 0, 0,
                         (const gt_cuda_key *)s->dev, 1, d->keep_grad ? g->buffers : g->stats,
                         d->keep_grad, NULL, g->params_half, NULL, 0, NULL, 0};
    const float *logits;
    cuda_split *sp = &g->split;
    if (sp->up_on ? cuda_up_parts(g, e) : g->params_half && cuda_params_half(g, m, g->params, e))
        return -1;
    if (g->stats && !d->keep_grad)
        GT_CUDA_CHECK(d->name, e,
                      cudaMemsetAsync(g->stats, 0, m->nbuffers * sizeof(float), c->stream));
    gt_cuda_augment aug = {(const gt_cuda_key *)s->dev, (const uint32_t *)(s->dev + lay.ids),
                           s->aug.pad, s->aug.flip};
    if (gt_cuda_input(c, m, s->dev + lay.images, g->act[0], n, gt_augment_on(&s->aug) ? &aug : NULL,
                      e) ||
        cuda_forward(g, m, pass, &logits, e))
        return -1;
    if (sp->up_on) /* the join of the upload's fork: every part is up */
        GT_CUDA_CHECK(d->name, e, cudaStreamWaitEvent(c->stream, sp->up_part[sp->n - 1], 0));
    GT_CUDA_CHECK(d->name, e, cudaMemsetAsync(g->result, 0, sizeof *g->result, c->stream));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemsetAsync(g->grad, 0, m->nparams * sizeof(float), c->stream));
    if (gt_cuda_softmax_xent(c, logits, (const uint16_t *)(s->dev + lay.labels), n, g->nclasses,
                             1.0f / (float)n, g->dact[0], g->result, e))
        return -1;
    if (marks)
        GT_CUDA_CHECK(d->name, e,
                      cudaMemsetAsync(g->xchg.flag, 0, CUDA_XCHG_PARTS * sizeof(int), c->stream));
    if (cuda_backward(g, m, pass, marks, e))
        return -1;
    return gt_cuda_flag_nonfinite(c, g->grad, m->nparams, &g->result->nonfinite, e);
}

/* The host array a step downloads its gradient into: none where the gradient stays on the device
 * (the allreduce mode's keep_grad, and grad_later, for which cuda_exchange downloads it). */
static float *step_grad_dst(const gt_device *d)
{
    return d->keep_grad || d->grad_later ? NULL : d->grad;
}

/* Everything the GPU does for one training step, in stream order: what a graph captures. */
static int cuda_step_enqueue(gt_device *d, cuda_impl *g, int s, int n, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    cuda_slot *slot = &g->slot[s];
    slot_layout lay = slot_layout_for(n, g->in_len);
    size_t grad_bytes = d->model->nparams * sizeof(float);
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(slot->dev, slot->host, lay.total, cudaMemcpyHostToDevice,
                                  c->stream));
    if (g->fused ? gt_fused_train(c, &g->fnet, g->params, slot->dev + lay.images,
                                  (const uint16_t *)(slot->dev + lay.labels), n, g->grad,
                                  g->result, e)
                 : cuda_layers_train(d, g, slot, n, g->slot_marked[s], e))
        return -1;
    if (g->split.dst || g->split.sum_on) {
        /* its parts went down or were summed beside the backward: the step waits for them */
        GT_CUDA_CHECK(d->name, e, cudaEventRecord(g->split.join, split_stream(&g->split)));
        GT_CUDA_CHECK(d->name, e, cudaStreamWaitEvent(c->stream, g->split.join, 0));
    } else if (step_grad_dst(d)) {
        GT_CUDA_CHECK(d->name, e,
                      cudaMemcpyAsync(d->grad, g->grad, grad_bytes, cudaMemcpyDeviceToHost,
                                      c->stream));
    }
    if (!d->keep_grad && g->stats)
        GT_CUDA_CHECK(d->name, e,
                      cudaMemcpyAsync(d->stats, g->stats, d->model->nbuffers * sizeof(float),
                                      cudaMemcpyDeviceToHost, c->stream));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->result_host + s, g->result, sizeof *g->result,
                                  cudaMemcpyDeviceToHost, c->stream));
    return 0;
}

/* Captures the step's work for this shape into a graph for the steps that follow. Where capture
 * fails (a library that will not be captured), steps stay eager from then on and the reason is
 * kept for gt_cuda_device_get_path: the eager step just run is correct either way. */
static void graph_capture(gt_device *d, cuda_impl *g, int s, int n, const cuda_graph_key *k)
{
    cudaStream_t stream = g->ctx->stream;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    gt_err inner = {{0}};
    int rc = 0;
    cudaError_t st = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
    if (st == cudaSuccess) {
        rc = cuda_step_enqueue(d, g, s, n, &inner);
        st = cudaStreamEndCapture(stream, &graph);
        /* Each kernel at its own stream's priority, as when eager (the sums' stream's). */
        if (!rc && st == cudaSuccess)
            st = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
    }
    if (graph)
        cudaGraphDestroy(graph);
    if (rc || st != cudaSuccess) {
        cudaGetLastError();
        snprintf(g->graph_error, sizeof g->graph_error, "capturing a step of %d samples: %.400s",
                 n, rc ? inner.msg : cudaGetErrorString(st));
        g->graphs = 0;
        graph_drop_all(g);
        return;
    }
    graph_store(g, exec, k);
}

/* The model's input step has its values once the data is in, after the device opened: a change
 * drops the graphs captured with the old values (a launch keeps its arguments) and reaches the
 * fused kernels' table (which copies only where its values changed). Outside any capture. */
static int cuda_sync_norm(gt_device *d, cuda_impl *g, gt_err *e)
{
    if (memcmp(&g->graph_norm, &d->model->norm, sizeof g->graph_norm) != 0) {
        graph_drop_all(g);
        g->graph_norm = d->model->norm;
    }
    return g->fused ? gt_fused_set_norm(g->ctx, &g->fnet, &d->model->norm, e) : 0;
}

/* Replays the graph of this shape, or runs the step eagerly and captures it. */
static int cuda_step_run(gt_device *d, cuda_impl *g, int s, int n, gt_err *e)
{
    g->nsteps++;
    if (d->keep_grad && g->buffers)
        g->buffers_moved = 1;
    if (cuda_sync_norm(d, g, e))
        return -1;
    int marks = cuda_marks_plan(d, g, e);
    if (marks < 0 || cuda_split_plan(d, g, step_grad_dst(d), e) || cuda_sum_plan(d, g, e))
        return -1;
    g->slot_marked[s] = marks;
    if (!g->graphs)
        return cuda_step_enqueue(d, g, s, n, e);
    cuda_graph_key k = {n,        s,        d->keep_grad,
                        marks,    step_grad_dst(d), d->stats,
                        g->split.up_on ? g->split.up_src : NULL, g->split.sum_on,
                        g->slot[s].aug};
    cuda_graph *gr = graph_find(g, &k);
    if (gr) {
        gr->used = g->nsteps;
        GT_CUDA_CHECK(d->name, e, cudaGraphLaunch(gr->exec, g->ctx->stream));
        return 0;
    }
    if (cuda_step_enqueue(d, g, s, n, e))
        return -1;
    graph_capture(d, g, s, n, &k);
    return 0;
}

/* ---- the device operations ------------------------------------------------------------------- */

/* d->buffers (running statistics) onto the device, behind whatever is queued. */
static int cuda_load_buffers(gt_device *d, cuda_impl *g, gt_err *e)
{
    if (!g->buffers)
        return 0;
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->buffers, d->buffers, d->model->nbuffers * sizeof(float),
                                  cudaMemcpyHostToDevice, g->ctx->stream));
    g->buffers_moved = 0;
    return 0;
}

static int cuda_load_buffers_op(gt_device *d, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    return cuda_load_buffers(d, g, e);
}

/* The parameters' copy is left pending (cuda_split): the train_step after it uploads them in
 * parts beside its forward, any other call whole first. */
static int cuda_load_params(gt_device *d, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    g->split.up_src = d->params;
    g->split.up_pending = 1;
    return cuda_load_buffers(d, g, e);
}

/* Queues b's step on the loaded parameters and records its slot's consumed event; *slot_out is
 * the slot whose result it fills. */
static int cuda_step_queue(gt_device *d, cuda_impl *g, const gt_batch *b, int *slot_out,
                           gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    if (cuda_check_batch(d, g, b, e))
        return -1;
    int s = slot_free(g);
    if (slot_gather(d, g, &g->slot[s], b, e) || cuda_step_run(d, g, s, b->n, e))
        return -1;
    GT_CUDA_CHECK(d->name, e, cudaEventRecord(g->slot[s].consumed, c->stream));
    *slot_out = s;
    return 0;
}

/* The results of the finished step that used slot s. */
static void cuda_step_result(const cuda_impl *g, int s, gt_step_out *out)
{
    const gt_cuda_result *res = g->result_host + s;
    out->loss_sum = res->loss_sum;
    out->correct = res->correct;
    /* The fused reduction, or the layer path's flag kernel, checked every gradient entry. */
    out->grad_status = res->nonfinite ? GT_GRAD_NONFINITE : GT_GRAD_FINITE;
}

/* Queues b's step with no step in flight: the parameters load_params left to copy go up in parts
 * beside its forward (cuda_up_plan), or whole before it. */
static int cuda_step_queue_uploading(gt_device *d, cuda_impl *g, const gt_batch *b, int *slot_out,
                                     gt_err *e)
{
    int rc = cuda_up_plan(d, g, e) || cuda_step_queue(d, g, b, slot_out, e);
    if (rc == 0) /* the step queued the upload (or the plan queued it whole before it) */
        g->split.up_pending = 0;
    g->split.up_on = 0; /* a step refused before its upload leaves it pending for the next call */
    return rc ? -1 : 0;
}

static int cuda_train_step(gt_device *d, const gt_batch *b, gt_step_out *out, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    int s;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    if (g->ninflight)
        return gt_fail(e, "%s: a step runs while %d begun steps are not ended", d->name,
                       g->ninflight);
    if (cuda_step_queue_uploading(d, g, b, &s, e))
        return -1;
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(g->ctx->stream));
    cuda_step_result(g, s, out);
    return 0;
}

/* Queues b's step and counts it among the steps begun and not ended. */
static int cuda_step_queue_inflight(gt_device *d, cuda_impl *g, const gt_batch *b, gt_err *e)
{
    int s;
    if (cuda_load_join(d, g, e) || cuda_step_queue(d, g, b, &s, e))
        return -1;
    g->inflight[g->ninflight++] = s;
    return 0;
}

/* The device address of a pinned host buffer, or NULL where the device cannot read it (pageable
 * memory: gt_host_alloc falls back to it where pinning fails). Asked each time: a buffer freed
 * and another allocated at its address need not be pinned alike. */
static const float *cuda_mapped(const float *host)
{
    cudaPointerAttributes a;
    const float *dev = NULL;
    if (cudaPointerGetAttributes(&a, host) == cudaSuccess && a.type == cudaMemoryTypeHost)
        dev = (const float *)a.devicePointer;
    cudaGetLastError();
    return dev;
}

/* --overlap: the parameters' upload and the step are queued behind whatever step is still
 * running, so the host can push that one's gradient meanwhile. The step's graph copies the
 * gradient into d->grad as it is now (graphs are kept per host buffer). */
static int cuda_step_begin(gt_device *d, const gt_batch *b, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    if (g->ninflight == 2)
        return gt_fail(e, "%s: a third step begun before the first ended", d->name);
    /* With a prediction, one kernel reads the pulled parameters from pinned host memory and
     * writes them predicted (a pageable buffer: an upload, then the kernel). The running step's
     * gradient is still in g->grad: the next step's graph, queued behind this, overwrites it. */
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    if (cuda_load_join(d, g, e))
        return -1;
    int predict = d->predict && g->ninflight == 1;
    const float *src = predict ? cuda_mapped(d->params) : NULL;
    if (!src) {
        if (cuda_load_params(d, e) || cuda_load_join(d, g, e))
            return -1;
        src = g->params;
    } else if (cuda_load_buffers(d, g, e)) {
        return -1;
    }
    if (predict && gt_cuda_optim_predict_from(g->ctx, d->predict->cfg, &d->predict->st, g->params,
                                              src, g->grad, d->predict->gscale,
                                              d->model->nparams, e))
        return -1;
    return cuda_step_queue_inflight(d, g, b, e);
}

/* The allreduce mode's pipelined step: queued on the parameters already on the device, behind
 * the update queued before it. The store's steps in parts (no step in flight, no keep_grad): a
 * pending upload goes beside the forward, as train_step's. */
static int cuda_step_queue_resident(gt_device *d, const gt_batch *b, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    if (g->ninflight == 2)
        return gt_fail(e, "%s: a third step queued before the first ended", d->name);
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    if (g->ninflight > 0 || d->keep_grad)
        return cuda_step_queue_inflight(d, g, b, e);
    int s;
    if (cuda_step_queue_uploading(d, g, b, &s, e))
        return -1;
    g->inflight[g->ninflight++] = s;
    return 0;
}

static int cuda_step_end(gt_device *d, gt_step_out *out, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    if (g->ninflight == 0)
        return gt_fail(e, "%s: no begun step to end", d->name);
    int s = g->inflight[0];
    g->inflight[0] = g->inflight[1];
    g->ninflight--;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    GT_CUDA_CHECK(d->name, e, cudaEventSynchronize(g->slot[s].consumed));
    cuda_step_result(g, s, out);
    return 0;
}

/* Samples [lo, lo + n) of ds on the parameters at src (device); the layer path computes n_fwd >=
 * n rows (the rows past n, stale images in eval_x, are computed and left out: every layer but
 * batch norm's training treats a sample alone). */
static int cuda_eval_chunk(gt_device *d, cuda_impl *g, const gt_dataset *ds, const float *src,
                           uint32_t lo, int n, int n_fwd, gt_err *e)
{
    gt_cuda_ctx *c = g->ctx;
    for (int i = 0; i < n; i++)
        if (ds->labels[lo + i] >= g->nclasses)
            return gt_fail(e, "%s: sample %u has label %d, the model has %d classes", d->name,
                           lo + i, ds->labels[lo + i], g->nclasses);
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->eval_x, ds->images + (size_t)lo * g->in_len,
                                  (size_t)n * g->in_len, cudaMemcpyHostToDevice, c->stream));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->eval_y, ds->labels + lo, (size_t)n * sizeof *g->eval_y,
                                  cudaMemcpyHostToDevice, c->stream));
    if (cuda_sync_norm(d, g, e))
        return -1;
    /* The fused kernels keep no logits: predictions come from the layer path (cuda_evaluate
     * plans it), which then gives the loss and hits too, from the same logits. */
    if (g->fused && !d->eval_pred)
        return gt_fused_eval(c, &g->fnet, src, g->eval_x, g->eval_y, n, g->result, e);
    gt_cuda_pass pass = {n_fwd, src, NULL, NULL, NULL, 0, 0, NULL, 0, g->buffers, 0, NULL,
                         g->params_half, NULL, 0, NULL, 0}; /* params_half: cuda_evaluate's */
    const float *logits;
    if (gt_cuda_input(c, d->model, g->eval_x, g->act[0], n_fwd, NULL, e) ||
        cuda_forward(g, d->model, pass, &logits, e) ||
        gt_cuda_softmax_xent(c, logits, g->eval_y, n, g->nclasses, 1.0f / (float)n, NULL,
                             g->result, e))
        return -1;
    if (!d->eval_pred)
        return 0;
    if (gt_cuda_argmax(c, logits, n, g->nclasses, g->eval_pred, e))
        return -1;
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(d->eval_pred + lo, g->eval_pred, (size_t)n * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost, c->stream));
    return 0;
}

static int cuda_evaluate(gt_device *d, const gt_dataset *ds, uint32_t lo, uint32_t hi,
                         gt_step_out *out, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    gt_cuda_ctx *c = g->ctx;
    out->loss_sum = 0;
    out->correct = 0;
    if (lo > hi || hi > ds->n)
        return gt_fail(e, "%s: evaluation range [%u, %u) outside the dataset (%u samples)",
                       d->name, lo, hi, ds->n);
    if (lo == hi)
        return 0;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    if (cuda_check_dataset(d, g, ds, e) || cuda_load_join(d, g, e))
        return -1;
    /* d->eval_ema: the moving average the device step keeps (allreduce_cuda.cu) */
    const float *src = d->eval_ema ? gt_cuda_allreduce_ema(g->allreduce) : g->params;
    if (!src)
        return gt_fail(e, "%s: evaluate: no moving average on the device (ema_set was not called)",
                       d->name);
    if (d->eval_pred && !g->eval_pred &&
        gt_cuda_malloc(c, (void **)&g->eval_pred, (size_t)g->cap * sizeof(int32_t), e))
        return -1;
    if (d->eval_pred && g->fused && !g->layers_ready && cuda_plan_layers(d, g, e))
        return -1;
    GT_CUDA_CHECK(d->name, e, cudaMemsetAsync(g->result, 0, sizeof *g->result, c->stream));
    /* bf16 on the layer path: chunks of the training batch, the last computed at that size too,
     * so that every convolution runs at the training step's shape. A new batch shape costs bf16
     * convolutions a first run of seconds (resnet18's first evaluation of 2500 images at the
     * 1024-sample chunk: 2.3-2.7 s on each H200, then 0.07 s; fp32 0.12 s), which every replica
     * paid at once. */
    int layer_path = !g->fused || d->eval_pred, bf16_layers = c->bf16 && layer_path;
    uint32_t step = bf16_layers ? (uint32_t)d->max_batch : (uint32_t)g->cap;
    /* The parameters' bf16 copy, once for every chunk. */
    if (layer_path && g->params_half && cuda_params_half(g, d->model, src, e))
        return -1;
    for (uint32_t s = lo; s < hi; s += step) {
        int n = hi - s < step ? (int)(hi - s) : (int)step;
        if (cuda_eval_chunk(d, g, ds, src, s, n, bf16_layers ? (int)step : n, e))
            return -1;
    }
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(g->result_host + EVAL_RESULT, g->result, sizeof *g->result,
                                  cudaMemcpyDeviceToHost, c->stream));
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(c->stream));
    out->loss_sum = g->result_host[EVAL_RESULT].loss_sum;
    out->correct = g->result_host[EVAL_RESULT].correct;
    return 0;
}

/* device.h's exchange: each part's download queued on one stream behind its final event (the
 * step's mark, else recorded here behind the step), the host's part() on each as it lands, and
 * its upload on the other stream. */
static int cuda_exchange(gt_device *d, int nparts, const size_t *bounds, const int *order,
                         const float *src, void (*part)(void *arg, int k), void *arg, gt_err *e)
{
    cuda_impl *g = (cuda_impl *)d->impl;
    cuda_xchg *x = &g->xchg;
    gt_cuda_ctx *c = g->ctx;
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    if (cuda_load_join(d, g, e))
        return -1;
    if (nparts < 1 || nparts > CUDA_XCHG_PARTS)
        return gt_fail(e, "%s: an exchange in %d parts (1..%d)", d->name, nparts,
                       CUDA_XCHG_PARTS);
    if (!d->grad_later || g->ninflight > 1)
        return gt_fail(e, "%s: an exchange needs the gradient of a step that left it on the device "
                       "(grad_later) and no other step in flight", d->name);
    if ((!x->ready && cuda_xchg_open(d, x, e)) || cuda_xchg_half(d, x, e))
        return -1;
    int marked = g->ninflight == 1 && g->slot_marked[g->inflight[0]] == 1 + x->half_on &&
                 x->nmarks == nparts &&
                 memcmp(x->bounds, bounds, (size_t)(nparts + 1) * sizeof(size_t)) == 0;
    if (!marked) {
        GT_CUDA_CHECK(d->name, e,
                      cudaMemsetAsync(x->flag, 0, (size_t)nparts * sizeof(int), c->stream));
        for (int k = 0; k < nparts; k++)
            if (cuda_mark_part(g, bounds, k, e))
                return -1;
    }
    /* Behind a marked step the parts go as its backward finishes them (the last marked first),
     * else as order lists them. */
    int take[CUDA_XCHG_PARTS];
    memcpy(take, order, (size_t)nparts * sizeof *take);
    for (int i = 1; marked && i < nparts; i++) /* stable: ties keep order's */
        for (int j = i; j > 0 && x->mark_layer[take[j]] > x->mark_layer[take[j - 1]]; j--) {
            int t = take[j];
            take[j] = take[j - 1];
            take[j - 1] = t;
        }
    order = take;
    for (int i = 0; i < nparts; i++) {
        int k = order[i];
        size_t lo = bounds[k], len = bounds[k + 1] - lo;
        GT_CUDA_CHECK(d->name, e, cudaStreamWaitEvent(x->down, x->final[k], 0));
        if (x->half_on)
            GT_CUDA_CHECK(d->name, e,
                          cudaMemcpyAsync(x->half_host + lo, x->half + lo, len * sizeof(uint16_t),
                                          cudaMemcpyDeviceToHost, x->down));
        else
            GT_CUDA_CHECK(d->name, e,
                          cudaMemcpyAsync(d->grad + lo, g->grad + lo, len * sizeof(float),
                                          cudaMemcpyDeviceToHost, x->down));
        GT_CUDA_CHECK(d->name, e,
                      cudaMemcpyAsync(x->flag_host + k, x->flag + k, sizeof(int),
                                      cudaMemcpyDeviceToHost, x->down));
        GT_CUDA_CHECK(d->name, e, cudaEventRecord(x->part[i], x->down));
    }
    GT_CUDA_CHECK(d->name, e, cudaEventRecord(x->down_end, x->down));
    /* A part's upload is queued once its download has landed, after its final event: the step
     * has read those parameters for the last time. */
    int bad = 0;
    for (int i = 0; i < nparts; i++) {
        int k = order[i];
        size_t lo = bounds[k], len = bounds[k + 1] - lo;
        GT_CUDA_CHECK(d->name, e, cudaEventSynchronize(x->part[i]));
        if (x->flag_host[k]) {
            bad = 1;
            break;
        }
        part(arg, k);
        if (src)
            GT_CUDA_CHECK(d->name, e,
                          cudaMemcpyAsync(g->params + lo, src + lo, len * sizeof(float),
                                          cudaMemcpyHostToDevice, x->up));
    }
    GT_CUDA_CHECK(d->name, e, cudaStreamWaitEvent(x->up, x->down_end, 0));
    GT_CUDA_CHECK(d->name, e, cudaEventRecord(x->done, x->up));
    GT_CUDA_CHECK(d->name, e, cudaStreamWaitEvent(c->stream, x->done, 0));
    if (src && src != d->params)
        GT_CUDA_CHECK(d->name, e, cudaEventSynchronize(x->done));
    return bad;
}

/* The allreduce trio and local_update live in allreduce_cuda.cu; without NCCL there is no
 * reduce_update, and train.c refuses that mode. */
static const gt_device_ops cuda_ops = {
    .load_params = cuda_load_params,
    .load_buffers = cuda_load_buffers_op,
    .train_step = cuda_train_step,
    .evaluate = cuda_evaluate,
    .step_begin = cuda_step_begin,
    .step_end = cuda_step_end,
    .step_queue = cuda_step_queue_resident,
#ifdef GT_HAVE_NCCL
    .reduce_update = gt_cuda_reduce_update,
    .local_update = gt_cuda_local_update,
    .ema_set = gt_cuda_ema_set,
    .ema_update = gt_cuda_ema_update,
    .ema_get = gt_cuda_ema_get,
#else
    .reduce_update = NULL,
    .local_update = NULL,
    .ema_set = NULL,
    .ema_update = NULL,
    .ema_get = NULL,
#endif
    .exchange = cuda_exchange,
    .get_params = gt_cuda_get_params,
    .get_buffers = gt_cuda_get_buffers,
    .set_state = gt_cuda_set_state,
    .close = cuda_close,
};

int gt_cuda_device_parts_of(gt_device *d, gt_cuda_device_parts *out)
{
    if (!d || d->ops != &cuda_ops)
        return -1;
    cuda_impl *g = (cuda_impl *)d->impl;
    out->ctx = g->ctx;
    out->params = g->params;
    out->grad = g->grad;
    out->buffers = g->buffers_moved ? g->buffers : NULL;
    out->allreduce = &g->allreduce;
    return 0;
}

static cuda_impl *cuda_impl_of(gt_device *d)
{
    return d && d->ops == &cuda_ops ? (cuda_impl *)d->impl : NULL;
}

int gt_cuda_device_load_join(gt_device *d, gt_err *e)
{
    cuda_impl *g = cuda_impl_of(d);
    if (!g)
        return gt_fail(e, "gt_cuda_device_load_join: not a CUDA device");
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    return cuda_load_join(d, g, e);
}

int gt_cuda_device_set_path(gt_device *d, int fused, int graphs, gt_err *e)
{
    cuda_impl *g = cuda_impl_of(d);
    if (!g)
        return gt_fail(e, "gt_cuda_device_set_path: not a CUDA device");
    if (fused && !g->fusable)
        return gt_fail(e, "%s: model %s does not have the fused step's shape (conv act avgpool "
                          "conv act avgpool fc act fc act fc)",
                       d->name, d->model->name);
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    graph_drop_all(g);
    if (!fused && !g->layers_ready && cuda_plan_layers(d, g, e))
        return -1;
    g->fused = fused != 0;
    g->graphs = graphs != 0;
    g->graph_error[0] = '\0';
    return 0;
}

/* The test settings' common part: d's impl once nothing is queued and no graph is kept (the next
 * step captures with the new setting); NULL with e set where d is not a CUDA device. */
static cuda_impl *cuda_test_setting(gt_device *d, const char *what, gt_err *e)
{
    cuda_impl *g = cuda_impl_of(d);
    cudaError_t st = cudaSuccess;
    if (!g)
        gt_fail(e, "%s: not a CUDA device", what);
    else if ((st = cudaSetDevice(d->ordinal)) != cudaSuccess ||
             (st = cudaStreamSynchronize(g->ctx->stream)) != cudaSuccess)
        gt_fail(e, "%s: %s: %s", d->name, what, cudaGetErrorString(st));
    if (!g || st != cudaSuccess)
        return NULL;
    graph_drop_all(g);
    return g;
}

int gt_cuda_device_set_half_copies(gt_device *d, int on, gt_err *e)
{
    cuda_impl *g = cuda_test_setting(d, "gt_cuda_device_set_half_copies", e);
    if (!g)
        return -1;
    g->no_half_copies = !on;
    return 0;
}

int gt_cuda_device_set_split(gt_device *d, size_t min_params, gt_err *e)
{
    cuda_impl *g = cuda_test_setting(d, "gt_cuda_device_set_split", e);
    if (!g)
        return -1;
    g->split.min_params = min_params;
    return 0;
}

int gt_cuda_device_step_summed(gt_device *d)
{
    cuda_impl *g = cuda_impl_of(d);
    return g && g->split.sum_on;
}

int gt_cuda_device_get_path(gt_device *d, gt_cuda_path *out)
{
    cuda_impl *g = cuda_impl_of(d);
    if (!g)
        return -1;
    out->fused = g->fused;
    out->fusable = g->fusable;
    out->graphs = g->graphs;
    out->ngraphs = 0;
    for (int i = 0; i < CUDA_GRAPHS; i++)
        out->ngraphs += g->graph[i].exec != NULL;
    out->graph_error = g->graph_error;
    return 0;
}

int gt_cuda_device_print_algos(gt_device *d, FILE *f)
{
    cuda_impl *g = cuda_impl_of(d);
    if (!g)
        return -1;
    for (int l = 0; l < d->model->nlayers; l++) {
        char what[128];
        if (d->model->layers[l].kind != GT_CONV)
            continue;
        gt_cuda_layer_describe_algos(&g->layer[l], what, sizeof what);
        fprintf(f, "layer %d (%s, batch %d): %s\n", l, d->model->layers[l].name,
                g->layer[l].n, what);
    }
    return 0;
}

int gt_cuda_device_read_grad(gt_device *d, float *host, gt_err *e)
{
    cuda_impl *g = cuda_impl_of(d);
    if (!g)
        return gt_fail(e, "gt_cuda_device_read_grad: not a CUDA device");
    GT_CUDA_CHECK(d->name, e, cudaSetDevice(d->ordinal));
    GT_CUDA_CHECK(d->name, e,
                  cudaMemcpyAsync(host, g->grad, d->model->nparams * sizeof(float),
                                  cudaMemcpyDeviceToHost, g->ctx->stream));
    GT_CUDA_CHECK(d->name, e, cudaStreamSynchronize(g->ctx->stream));
    return 0;
}

/* ---- open ------------------------------------------------------------------------------------ */

/* The fused step where the model has its shape and the GPU the shared memory (not for bf16
 * precision, which the layer path computes in; gt_cuda_device_set_path may still choose it);
 * graphs always. */
static int cuda_plan_fused(gt_device *d, cuda_impl *g, gt_err *e)
{
    int smem = 0;
    GT_CUDA_CHECK(d->name, e,
                  cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                         d->ordinal));
    g->fusable = gt_fused_plan(d->model, (size_t)smem, &g->fnet);
    if (g->fusable && gt_fused_alloc(g->ctx, &g->fnet, g->cap, e))
        return -1;
    g->fused = g->fusable && !g->ctx->bf16; /* the fused kernels compute in fp32 */
    g->graphs = 1;
    return 0;
}

/* Each block marker's nesting depth (its gradient buffer), the markers checked as the CPU network
 * checks them. */
static int cuda_block_depths(const gt_model *m, int *depth, int ordinal, gt_err *e)
{
    gt_err why;
    memset(depth, 0, GT_MAX_LAYERS * sizeof *depth);
    if (gt_model_block_depths(m, depth, &why) != 0)
        return gt_fail(e, "gpu:%d: %s", ordinal, why.msg);
    return 0;
}

static int cuda_check_model(const gt_model *m, int max_batch, int ordinal, int cap, gt_err *e)
{
    if (max_batch < 1)
        return gt_fail(e, "gpu:%d: batch size %d: must be at least 1", ordinal, max_batch);
    if (m->nlayers < 1 || m->nlayers > GT_MAX_LAYERS)
        return gt_fail(e, "gpu:%d: model %s has %d layers (expected 1 to %d)", ordinal, m->name,
                       m->nlayers, GT_MAX_LAYERS);
    if (m->layers[m->nlayers - 1].kind != GT_LINEAR)
        return gt_fail(e, "gpu:%d: model %s does not end in a linear layer", ordinal, m->name);
    /* cuDNN describes a tensor with int dimensions and at most 2^31 - 1 elements. */
    if (m->max_act > (size_t)INT32_MAX / (size_t)cap)
        return gt_fail(e, "gpu:%d: model %s: %d samples of %zu activations exceed what cuDNN "
                       "addresses (2^31 elements)", ordinal, m->name, cap, m->max_act);
    return 0;
}

int gt_cuda_device_open(gt_device **out, const gt_model *m, int max_batch, int ordinal,
                        gt_precision precision, gt_err *e)
{
    *out = NULL;
    if (precision != GT_PRECISION_FP32 && precision != GT_PRECISION_TF32 &&
        precision != GT_PRECISION_BF16)
        return gt_fail(e, "gpu:%d: unknown precision %d", ordinal, (int)precision);
    int cap = max_batch > CUDA_EVAL_CHUNK ? max_batch : CUDA_EVAL_CHUNK;
    if (cuda_check_model(m, max_batch, ordinal, cap, e))
        return -1;
    gt_device *d = (gt_device *)calloc(1, sizeof *d);
    cuda_impl *g = (cuda_impl *)calloc(1, sizeof *g);
    if (!d || !g) {
        free(d);
        free(g);
        return gt_fail(e, "gpu:%d: out of host memory", ordinal);
    }
    d->ops = &cuda_ops;
    d->loads_copy = 1;
    d->impl = g;
    d->ordinal = ordinal;
    d->model = m;
    d->max_batch = max_batch;
    g->cap = cap;
    g->split.min_params = CUDA_SPLIT_MIN_PARAMS;
    if (cuda_block_depths(m, g->depth, ordinal, e)) {
        cuda_close(d);
        return -1;
    }
    g->in_len = m->layers[0].in_len;
    g->nclasses = (int)m->layers[m->nlayers - 1].out_len;
    if (gt_cuda_ctx_open(&g->ctx, ordinal, precision, e)) {
        cuda_close(d);
        return -1;
    }
    snprintf(d->name, sizeof d->name, "%s", g->ctx->name);
    g->nhwc_end = g->ctx->bf16 ? cuda_nhwc_plan(m) : 0;
    if (cuda_alloc_buffers(d, g, e) || cuda_plan_fused(d, g, e) ||
        (!g->fused && cuda_plan_layers(d, g, e))) {
        cuda_close(d);
        return -1;
    }
    *out = d;
    return 0;
}
