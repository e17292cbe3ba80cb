/* ps.c - the parameter store: flat parameters and optimizer state in pinned host memory, split
 * into cache-line-aligned stripes, each with a lock and a version counter.
 *
 * Workers never hold more than one stripe lock, so there is no lock order to get wrong. A push
 * walks the stripes starting at one that depends on the worker, so W workers pushing at once
 * start in different places and mostly never meet. Lock waits are timed only when a trylock
 * fails, so an uncontended store pays no clock reads. */
#include "gputrain/ps.h"
#include "gputrain/bf16.h"
#include "gputrain/device.h"
#include "ps_pool.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#define GT_FLOATS_PER_LINE (GT_CACHELINE / sizeof(float))

int gt_ps_default_stripes(size_t n)
{
    size_t s = n / 4096; /* 16 KiB of floats each */
    if (s < 1)
        s = 1;
    if (s > 256)
        s = 256;
    return (int)s;
}

static void ps_layout_stripes(gt_ps *ps)
{
    size_t lines = (ps->n + GT_FLOATS_PER_LINE - 1) / GT_FLOATS_PER_LINE;
    for (int s = 0; s < ps->nranges; s++) {
        size_t lo = lines * (size_t)s / (size_t)ps->nranges * GT_FLOATS_PER_LINE;
        size_t hi = lines * (size_t)(s + 1) / (size_t)ps->nranges * GT_FLOATS_PER_LINE;
        ps->stripes[s].lo = lo < ps->n ? lo : ps->n;
        ps->stripes[s].hi = hi < ps->n ? hi : ps->n;
    }
}

int gt_ps_init(gt_ps *ps, size_t n, int nstripes, const gt_optim_cfg *optim, gt_err *e)
{
    memset(ps, 0, sizeof *ps);
    if (n == 0)
        return gt_fail(e, "parameter store: model has no parameters");
    size_t lines = (n + GT_FLOATS_PER_LINE - 1) / GT_FLOATS_PER_LINE;
    if (nstripes < 0)
        nstripes = gt_ps_default_stripes(n);
    if ((size_t)nstripes > lines)
        return gt_fail(e, "--stripes: %d is more than the %zu cache lines of the %zu parameters",
                       nstripes, lines, n);
    ps->n = n;
    ps->optim = *optim;
    ps->nstripes = nstripes;
    /* Lock-free mode still walks ranges, so workers start in different places; it just takes no
     * lock. */
    ps->nranges = nstripes > 0 ? nstripes : gt_ps_default_stripes(n);
    ps->nstate = gt_optim_nstate(optim);
    ps->params = gt_host_alloc(n * sizeof(float));
    for (int i = 0; i < ps->nstate; i++)
        ps->state[i] = gt_host_alloc(n * sizeof(float));
    ps->stripes = gt_alloc((size_t)ps->nranges * sizeof(gt_stripe));
    if (!ps->params || !ps->stripes || (ps->nstate > 0 && !ps->state[0]) ||
        (ps->nstate > 1 && !ps->state[1])) {
        gt_ps_free(ps);
        return gt_fail(e, "parameter store: out of memory for %zu parameters", n);
    }
    memset(ps->params, 0, n * sizeof(float));
    for (int i = 0; i < ps->nstate; i++)
        memset(ps->state[i], 0, n * sizeof(float));
    for (int s = 0; s < ps->nranges; s++) {
        pthread_mutex_init(&ps->stripes[s].lock, NULL);
        atomic_init(&ps->stripes[s].version, 0);
    }
    ps_layout_stripes(ps);
    return 0;
}

int gt_ps_init_buffers(gt_ps *ps, const gt_model *m, gt_err *e)
{
    if (m->nbuffers == 0)
        return 0;
    ps->buffers = gt_alloc(m->nbuffers * sizeof(float));
    if (!ps->buffers)
        return gt_fail(e, "parameter store: out of memory for %zu buffer values", m->nbuffers);
    ps->model = m;
    pthread_mutex_init(&ps->buffer_lock, NULL);
    gt_model_init_buffers(m, ps->buffers);
    return 0;
}

void gt_ps_pull_buffers(gt_ps *ps, float *dst)
{
    if (!ps->buffers || !dst)
        return;
    pthread_mutex_lock(&ps->buffer_lock);
    memcpy(dst, ps->buffers, ps->model->nbuffers * sizeof(float));
    pthread_mutex_unlock(&ps->buffer_lock);
}

void gt_ps_store_buffers(gt_ps *ps, const float *src)
{
    if (!ps->buffers || !src)
        return;
    pthread_mutex_lock(&ps->buffer_lock);
    memcpy(ps->buffers, src, ps->model->nbuffers * sizeof(float));
    pthread_mutex_unlock(&ps->buffer_lock);
}

void gt_ps_push_stats(gt_ps *ps, const float *stats)
{
    if (!ps->buffers || !stats)
        return;
    pthread_mutex_lock(&ps->buffer_lock);
    gt_model_fold_stats(ps->model, ps->buffers, stats);
    pthread_mutex_unlock(&ps->buffer_lock);
}

int gt_ps_init_ema(gt_ps *ps, float decay, const float *src, gt_err *e)
{
    if (!(decay > 0 && decay < 1))
        return gt_fail(e, "--ema: %g is not a decay with 0 < DECAY < 1", (double)decay);
    ps->ema = gt_alloc(ps->n * sizeof(float));
    if (!ps->ema)
        return gt_fail(e, "parameter store: out of memory for the moving average of %zu "
                       "parameters", ps->n);
    memcpy(ps->ema, src ? src : ps->params, ps->n * sizeof(float));
    ps->ema_decay = decay;
    return 0;
}

float gt_ps_ema_decay(float decay, uint64_t t, unsigned span)
{
    if (span > 1) { /* the span's updates' decays, each as span 1 gives it */
        double d = 1.0;
        for (unsigned i = 0; i < span; i++)
            d *= (double)gt_ps_ema_decay(decay, t >= i ? t - i : 0, 1);
        return (float)d;
    }
    float warm = (float)((1.0 + (double)t) / (10.0 + (double)t));
    return warm < decay ? warm : decay;
}

/* The stride of the average at update t: the largest power of two, at most 8, whose updates
 * weigh at most 2% of the average ((1 - d) * stride <= 0.02 for d = gt_ps_ema_decay(decay, t,
 * 1)); never smaller at a later update, since d only grows. 1 while the average is shorter than
 * 100 updates (0.999's warm-up: 1 to update 889, 2 from 890, 4 from 1790, 8 from 3590). */
static unsigned ps_ema_stride(float decay, uint64_t t)
{
    double w = 1.0 - (double)gt_ps_ema_decay(decay, t, 1);
    unsigned k = 1;
    while (k < 8 && w * (double)(2 * k) <= 0.02 * (1 + 1e-6)) /* float d's rounding */
        k *= 2;
    return k;
}

unsigned gt_ps_ema_span(float decay, uint64_t t)
{
    if (t == 0 || t % ps_ema_stride(decay, t) != 0)
        return 0;
    uint64_t prev = t - 1; /* the last update that took it (0: the start) */
    while (prev > 0 && prev % ps_ema_stride(decay, prev) != 0)
        prev--;
    return (unsigned)(t - prev);
}

/* Copies one array between dst and src over every stripe, each under its lock, where nothing
 * else writes it (a plain copy), or with relaxed atomics in the lock-free store. */
static void ps_copy_striped(gt_ps *ps, float *dst, const float *src)
{
    for (int s = 0; s < ps->nranges; s++) {
        gt_stripe *st = &ps->stripes[s];
        if (ps->nstripes) {
            pthread_mutex_lock(&st->lock);
            memcpy(dst + st->lo, src + st->lo, (st->hi - st->lo) * sizeof(float));
            pthread_mutex_unlock(&st->lock);
            continue;
        }
        for (size_t i = st->lo; i < st->hi; i++) {
            float v;
            __atomic_load(&src[i], &v, __ATOMIC_RELAXED);
            __atomic_store(&dst[i], &v, __ATOMIC_RELAXED);
        }
    }
}

void gt_ps_pull_ema(gt_ps *ps, float *dst)
{
    if (ps->ema && dst)
        ps_copy_striped(ps, dst, ps->ema);
}

void gt_ps_store_ema(gt_ps *ps, const float *src)
{
    if (ps->ema && src)
        ps_copy_striped(ps, ps->ema, src);
}

/* ema = d*ema + (1-d)*p over one stripe after its update t, which stands for span steps; the
 * caller holds its lock (or runs lock-free, where every access is a relaxed atomic as the
 * parameters' are). */
static void ps_ema_range(gt_ps *ps, const gt_stripe *st, uint64_t t, unsigned span)
{
    if (!ps->ema)
        return;
    float d = gt_ps_ema_decay(ps->ema_decay, t, span), c = 1.0f - d;
    if (ps->nstripes > 0) {
        for (size_t i = st->lo; i < st->hi; i++)
            ps->ema[i] = d * ps->ema[i] + c * ps->params[i];
        return;
    }
    for (size_t i = st->lo; i < st->hi; i++) {
        float a, p;
        __atomic_load(&ps->ema[i], &a, __ATOMIC_RELAXED);
        __atomic_load(&ps->params[i], &p, __ATOMIC_RELAXED);
        a = d * a + c * p;
        __atomic_store(&ps->ema[i], &a, __ATOMIC_RELAXED);
    }
}

void gt_ps_free(gt_ps *ps)
{
    gt_free(ps->ema);
    if (ps->buffers) {
        pthread_mutex_destroy(&ps->buffer_lock);
        gt_free(ps->buffers);
    }
    for (int i = 0; i < ps->npools; i++)
        gt_ps_pool_destroy(ps->pools[i]);
    if (ps->stripes)
        for (int s = 0; s < ps->nranges; s++)
            pthread_mutex_destroy(&ps->stripes[s].lock);
    gt_free(ps->stripes);
    gt_host_free(ps->params);
    for (int i = 0; i < 2; i++)
        gt_host_free(ps->state[i]);
    memset(ps, 0, sizeof *ps);
}

static void ps_lock(gt_ps *ps, gt_stripe *st)
{
    if (pthread_mutex_trylock(&st->lock) == 0)
        return;
    uint64_t t0 = gt_now_ns();
    pthread_mutex_lock(&st->lock);
    atomic_fetch_add_explicit(&ps->lock_wait_ns, gt_now_ns() - t0, memory_order_relaxed);
}

static void relaxed_copy(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        __atomic_load(&src[i], &dst[i], __ATOMIC_RELAXED);
}

/* Copies n floats into a buffer the host does not read again (a device's upload source),
 * bypassing the caches where it can: a plain store first reads each line it writes, twice the
 * memory traffic of the copy. Fenced, so the device's copy engine that reads dst after this
 * thread's hand-off sees every float. */
static void copy_out(float *dst, const float *src, size_t n)
{
#if defined(__SSE__)
    if (((uintptr_t)dst & 15) == 0) {
        size_t i = 0;
        for (; i + 4 <= n; i += 4)
            _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
        for (; i < n; i++)
            dst[i] = src[i];
        _mm_sfence();
        return;
    }
#endif
    memcpy(dst, src, n * sizeof(float));
}

/* A walk over a run of stripes, cut into parts that the store's helper threads may share: stripe
 * (first + i) % nranges for i in [0, count). */
typedef struct ps_walk {
    gt_ps *ps;
    int first, count, nparts;
    float *dst;                /* pull: destination; push: where gt_ps_update_part copies the
                                  stripes it updated (NULL: nowhere) */
    int pulls;                 /* push: gt_ps_update_part's, which pulls what it updated */
    uint64_t *ver;             /* pull: versions out; push: versions of the gradient's pull */
    const float *g;            /* push: gradient */
    const uint16_t *g_half;    /* push: the gradient in bf16, in place of g (no addends) */
    float *const *addends;     /* apply: g += addends[k] stripe by stripe, in order, first */
    int naddends;
    float gscale;
    const gt_optim_step *step;
    uint64_t t;                /* push, apply: the update's number (the moving average's decay) */
    unsigned ema_span;         /* push, apply: gt_ps_ema_span of t; 0: the average stays */
    _Atomic uint64_t result;   /* push: staleness (max) */
} ps_walk;

static int ps_pools_get(gt_ps *ps, size_t nparams, int nworkers);

/* Runs fn over the walk's parts, on a free group of helpers where the walk is large. */
static void ps_walk_run(ps_walk *w, gt_ps_pool_fn fn, int nworkers)
{
    gt_ps *ps = w->ps;
    int npools = ps_pools_get(ps, (size_t)w->count * ps->n / (size_t)ps->nranges, nworkers);
    for (int i = 0; i < npools; i++) {
        gt_ps_pool *pool = ps->pools[i];
        /* A few parts a thread, so a thread held up by another worker's lock leaves its share. */
        int parts = 4 * (gt_ps_pool_helpers(pool) + 1);
        w->nparts = parts < w->count ? parts : w->count;
        if (gt_ps_pool_try_run(pool, fn, w, w->nparts) == 0)
            return;
    }
    w->nparts = 1;
    fn(w, 0);
}

static gt_stripe *ps_walk_stripe(const ps_walk *w, int i)
{
    return &w->ps->stripes[(w->first + i) % w->ps->nranges];
}

static void ps_pull_part(void *arg, int part)
{
    ps_walk *w = arg;
    gt_ps *ps = w->ps;
    for (int i = w->count * part / w->nparts; i < w->count * (part + 1) / w->nparts; i++) {
        gt_stripe *st = ps_walk_stripe(w, i);
        size_t s = (size_t)(st - ps->stripes);
        if (ps->nstripes == 0) {
            if (w->ver)
                w->ver[s] = atomic_load_explicit(&st->version, memory_order_acquire);
            relaxed_copy(w->dst + st->lo, ps->params + st->lo, st->hi - st->lo);
            continue;
        }
        ps_lock(ps, st);
        if (w->ver)
            w->ver[s] = atomic_load_explicit(&st->version, memory_order_relaxed);
        memcpy(w->dst + st->lo, ps->params + st->lo, (st->hi - st->lo) * sizeof(float));
        pthread_mutex_unlock(&st->lock);
    }
}

void gt_ps_pull(gt_ps *ps, float *dst, uint64_t *ver)
{
    ps_walk w = {.ps = ps, .count = ps->nranges, .dst = dst, .ver = ver};
    ps_walk_run(&w, ps_pull_part, 0);
}

/* gt_ps_pull_stale's walk: the stripes whose version is not ver's, copied out under their
 * locks (the lock-free store's element by element). */
static void ps_pull_stale_part(void *arg, int part)
{
    ps_walk *w = arg;
    gt_ps *ps = w->ps;
    for (int i = w->count * part / w->nparts; i < w->count * (part + 1) / w->nparts; i++) {
        gt_stripe *st = ps_walk_stripe(w, i);
        size_t s = (size_t)(st - ps->stripes), len = st->hi - st->lo;
        if (atomic_load_explicit(&st->version, memory_order_acquire) == w->ver[s])
            continue;
        if (ps->nstripes == 0) {
            w->ver[s] = atomic_load_explicit(&st->version, memory_order_acquire);
            relaxed_copy(w->dst + st->lo, ps->params + st->lo, len);
            continue;
        }
        ps_lock(ps, st);
        w->ver[s] = atomic_load_explicit(&st->version, memory_order_relaxed);
        copy_out(w->dst + st->lo, ps->params + st->lo, len);
        pthread_mutex_unlock(&st->lock);
    }
}

void gt_ps_pull_stale(gt_ps *ps, float *dst, uint64_t *ver)
{
    int stale = 0;
    for (int s = 0; s < ps->nranges && !stale; s++)
        stale = atomic_load_explicit(&ps->stripes[s].version, memory_order_acquire) != ver[s];
    if (!stale) /* the usual case: the applies kept dst */
        return;
    ps_walk w = {.ps = ps, .count = ps->nranges, .dst = dst, .ver = ver};
    ps_walk_run(&w, ps_pull_stale_part, 0);
}

static void ps_record_staleness(gt_ps *ps, uint64_t stale)
{
    atomic_fetch_add_explicit(&ps->stale_hist[stale < GT_STALE_BINS - 1 ? stale : GT_STALE_BINS - 1],
                              1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ps->stale_sum, stale, memory_order_relaxed);
    atomic_fetch_add_explicit(&ps->stale_count, 1, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&ps->stale_max, memory_order_relaxed);
    while (stale > m &&
           !atomic_compare_exchange_weak_explicit(&ps->stale_max, &m, stale, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

void gt_ps_note_staleness(gt_ps *ps, uint64_t stale) { ps_record_staleness(ps, stale); }

uint64_t gt_ps_stale_percentile(gt_ps *ps, int pct, int *capped)
{
    uint64_t count = atomic_load_explicit(&ps->stale_count, memory_order_relaxed), acc = 0;
    uint64_t b = 0;
    while (count > 0 && b < GT_STALE_BINS - 1) {
        acc += atomic_load_explicit(&ps->stale_hist[b], memory_order_relaxed);
        if (acc * 100 >= count * (uint64_t)pct)
            break;
        b++;
    }
    if (capped)
        *capped = count > 0 && b == GT_STALE_BINS - 1;
    return b;
}

/* Elements [at, at + n) of one update, g their gradient; the caller holds their stripe's lock
 * (or runs lock-free). */
static void ps_apply_span(gt_ps *ps, size_t at, size_t n, const float *g, float gscale,
                          const gt_optim_step *step)
{
    float *s0 = ps->state[0] ? ps->state[0] + at : NULL;
    float *s1 = ps->state[1] ? ps->state[1] + at : NULL;
    gt_optim_apply_at(&ps->optim, step, at, ps->params + at, g, gscale, s0, s1, n,
                      ps->nstripes == 0);
}

/* A bf16 gradient is widened this many elements at a time into a block on the stack, which
 * stays in the core's L1: the update reads 2 bytes of gradient an element from memory, not 4. */
#define PS_WIDEN_BLOCK 2048

/* One stripe's update from the walk's gradient, fp32 or bf16. */
static void ps_apply_range(gt_ps *ps, const gt_stripe *st, const ps_walk *w)
{
    size_t lo = st->lo, len = st->hi - st->lo;
    if (!w->g_half) {
        ps_apply_span(ps, lo, len, w->g + lo, w->gscale, w->step);
        return;
    }
    float block[PS_WIDEN_BLOCK];
    for (size_t i = 0; i < len; i += PS_WIDEN_BLOCK) {
        size_t n = len - i < PS_WIDEN_BLOCK ? len - i : PS_WIDEN_BLOCK;
        gt_bf16_widen_n(w->g_half + lo + i, block, n);
        ps_apply_span(ps, lo + i, n, block, w->gscale, w->step);
    }
}

/* Sums the walk's addends into its gradient over one stripe, in their order, so each element
 * gets the same sum, bit for bit, as a reduction over the whole arrays would give. */
static void ps_sum_range(const ps_walk *w, const gt_stripe *st)
{
    float *g = (float *)w->g;
    for (int k = 0; k < w->naddends; k++) {
        const float *a = w->addends[k];
        for (size_t i = st->lo; i < st->hi; i++)
            g[i] += a[i];
    }
}

/* One stripe's share of a push, its lock held (or lock-free): the version, the update, the
 * moving average and, with pulls, the stripe copied out as the update left it; then unlocked. */
static void ps_push_stripe(ps_walk *w, gt_stripe *st, uint64_t *stale)
{
    gt_ps *ps = w->ps;
    uint64_t v = atomic_fetch_add_explicit(&st->version, 1, memory_order_acq_rel);
    if (w->ver) {
        uint64_t d = v - w->ver[st - ps->stripes];
        if (d > *stale)
            *stale = d;
    }
    ps_apply_range(ps, st, w);
    if (w->ema_span)
        ps_ema_range(ps, st, w->t, w->ema_span);
    if (w->pulls) { /* gt_ps_update_part: the stripe as this update left it, its version */
        if (w->dst)
            copy_out(w->dst + st->lo, ps->params + st->lo, st->hi - st->lo);
        if (w->ver)
            w->ver[st - ps->stripes] = v + 1;
    }
    if (ps->nstripes > 0)
        pthread_mutex_unlock(&st->lock);
}

/* Stripes a push walk passes over while another push holds them (PS_PUSH_LATER at most), to
 * update them after the rest of its run: several workers pushing the same layers at once
 * otherwise queue on each stripe in turn (resnet18's hogwild over 4 GPUs waited on locks for
 * a fifth of its time). Each stripe's update is the same whenever it is made. */
#define PS_PUSH_LATER 256

static void ps_push_part(void *arg, int part)
{
    ps_walk *w = arg;
    gt_ps *ps = w->ps;
    uint64_t stale = 0;
    int later[PS_PUSH_LATER], nlater = 0;
    for (int i = w->count * part / w->nparts; i < w->count * (part + 1) / w->nparts; i++) {
        gt_stripe *st = ps_walk_stripe(w, i);
        ps_sum_range(w, st);
        if (ps->nstripes > 0 && pthread_mutex_trylock(&st->lock) != 0) {
            if (nlater < PS_PUSH_LATER) {
                later[nlater++] = i;
                continue;
            }
            ps_lock(ps, st);
        }
        ps_push_stripe(w, st, &stale);
    }
    for (int k = 0; k < nlater; k++) {
        gt_stripe *st = ps_walk_stripe(w, later[k]);
        ps_lock(ps, st);
        ps_push_stripe(w, st, &stale);
    }
    uint64_t m = atomic_load_explicit(&w->result, memory_order_relaxed);
    while (stale > m && !atomic_compare_exchange_weak_explicit(&w->result, &m, stale,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed))
        ;
}

uint64_t gt_ps_push(gt_ps *ps, int worker, int nworkers, const float *g, float gscale,
                    const uint64_t *ver, double epoch)
{
    return gt_ps_push_numbered(ps, worker, nworkers, g, gscale, ver, epoch, NULL);
}

/* Update u applied to count stripes from first (gt_ps_push's whole walk, or a part), its
 * staleness joining u's; with pulls, each stripe is then copied out (dst) and its version kept. */
static void ps_update_walk(gt_ps *ps, gt_ps_update *u, int first, int count, const float *g,
                           const uint16_t *g_half, uint64_t *ver, float *dst, int pulls)
{
    ps_walk w = {.ps = ps, .first = first, .count = count, .dst = dst, .pulls = pulls, .ver = ver,
                 .g = g, .g_half = g_half, .gscale = u->gscale, .step = &u->step, .t = u->t,
                 .ema_span = gt_ps_ema_span(ps->ema_decay, u->t)};
    ps_walk_run(&w, ps_push_part, u->nworkers > 0 ? u->nworkers : 1);
    uint64_t stale = atomic_load_explicit(&w.result, memory_order_relaxed);
    if (stale > u->stale)
        u->stale = stale;
}

/* One update over every stripe, starting at the worker's; with pulls, each stripe is copied out
 * into dst under its lock as the update left it. */
static uint64_t ps_push_walk(gt_ps *ps, int worker, int nworkers, const float *g, float gscale,
                             uint64_t *ver, double epoch, uint64_t *update, float *dst, int pulls)
{
    gt_ps_update u;
    gt_ps_update_begin(ps, &u, worker, nworkers, gscale, epoch);
    if (update)
        *update = u.t;
    int start = nworkers > 0 ? (int)((int64_t)worker * ps->nranges / nworkers) : 0;
    ps_update_walk(ps, &u, start, ps->nranges, g, NULL, ver, dst, pulls);
    return ver ? gt_ps_update_end(ps, &u) : u.stale;
}

uint64_t gt_ps_push_numbered(gt_ps *ps, int worker, int nworkers, const float *g, float gscale,
                             const uint64_t *ver, double epoch, uint64_t *update)
{
    /* without pulls the walk only reads the versions */
    return ps_push_walk(ps, worker, nworkers, g, gscale, (uint64_t *)ver, epoch, update, NULL, 0);
}

uint64_t gt_ps_push_pull(gt_ps *ps, int worker, int nworkers, const float *g, float gscale,
                         uint64_t *ver, double epoch, uint64_t *update, float *dst)
{
    if (ps->nstripes > 0)
        return ps_push_walk(ps, worker, nworkers, g, gscale, ver, epoch, update, dst, 1);
    /* lock-free: no lock to copy under; the pull reads element by element after the push */
    uint64_t stale = gt_ps_push_numbered(ps, worker, nworkers, g, gscale, ver, epoch, update);
    gt_ps_pull(ps, dst, ver);
    return stale;
}

void gt_ps_update_begin(gt_ps *ps, gt_ps_update *u, int worker, int nworkers, float gscale,
                        double epoch)
{
    u->t = atomic_fetch_add_explicit(&ps->updates, 1, memory_order_relaxed) + 1;
    u->step = gt_optim_prepare(&ps->optim, u->t, epoch);
    u->gscale = gscale;
    u->worker = worker;
    u->nworkers = nworkers;
    u->stale = 0;
}

void gt_ps_update_part(gt_ps *ps, gt_ps_update *u, int s_lo, int s_hi, const float *g,
                       uint64_t *ver, float *dst)
{
    if (s_hi > s_lo && ps->nstripes > 0)
        ps_update_walk(ps, u, s_lo, s_hi - s_lo, g, NULL, ver, dst, 1);
}

void gt_ps_update_part_bf16(gt_ps *ps, gt_ps_update *u, int s_lo, int s_hi, const uint16_t *g,
                            uint64_t *ver, float *dst)
{
    if (s_hi > s_lo && ps->nstripes > 0)
        ps_update_walk(ps, u, s_lo, s_hi - s_lo, NULL, g, ver, dst, 1);
}

uint64_t gt_ps_update_end(gt_ps *ps, gt_ps_update *u)
{
    ps_record_staleness(ps, u->stale);
    return u->stale;
}

void gt_ps_apply_stripes(gt_ps *ps, int s_lo, int s_hi, const float *g, float gscale, uint64_t t,
                         double epoch)
{
    /* With no addends the walk only reads g. */
    gt_ps_apply_stripes_sum(ps, s_lo, s_hi, (float *)g, NULL, 0, gscale, t, epoch);
}

void gt_ps_apply_stripes_sum(gt_ps *ps, int s_lo, int s_hi, float *g, float *const *addends,
                             int naddends, float gscale, uint64_t t, double epoch)
{
    gt_ps_apply_stripes_out(ps, s_lo, s_hi, g, addends, naddends, gscale, t, epoch, NULL, NULL);
}

void gt_ps_apply_stripes_out(gt_ps *ps, int s_lo, int s_hi, float *g, float *const *addends,
                             int naddends, float gscale, uint64_t t, double epoch, float *dst,
                             uint64_t *ver)
{
    gt_optim_step step = gt_optim_prepare(&ps->optim, t, epoch);
    if (s_hi <= s_lo)
        return;
    /* with dst, the walk copies each stripe out as a push's pull does (ver: its versions) */
    ps_walk w = {.ps = ps, .first = s_lo, .count = s_hi - s_lo, .g = g, .addends = addends,
                 .naddends = naddends, .gscale = gscale, .step = &step, .t = t,
                 .ema_span = gt_ps_ema_span(ps->ema_decay, t), .dst = dst, .pulls = dst != NULL,
                 .ver = dst ? ver : NULL};
    ps_walk_run(&w, ps_push_part, 0);
}

void gt_ps_store_stripes(gt_ps *ps, int s_lo, int s_hi, const float *src, unsigned span)
{
    /* the update stands for the span steps after the store's count: its number is the last's;
     * span 0 replaces the parameters and leaves the average to the caller */
    uint64_t t = atomic_load_explicit(&ps->updates, memory_order_relaxed) + span;
    for (int s = s_lo; s < s_hi; s++) {
        gt_stripe *st = &ps->stripes[s];
        if (ps->nstripes > 0)
            ps_lock(ps, st);
        atomic_fetch_add_explicit(&st->version, 1, memory_order_acq_rel);
        if (ps->nstripes > 0)
            memcpy(ps->params + st->lo, src + st->lo, (st->hi - st->lo) * sizeof(float));
        else
            for (size_t i = st->lo; i < st->hi; i++)
                __atomic_store(&ps->params[i], (float *)&src[i], __ATOMIC_RELAXED);
        if (span > 0)
            ps_ema_range(ps, st, t, span);
        if (ps->nstripes > 0)
            pthread_mutex_unlock(&st->lock);
    }
}

void gt_ps_rebase_stripes(gt_ps *ps, int s_lo, int s_hi, const float *from, const float *to)
{
    for (int s = s_lo; s < s_hi; s++) {
        gt_stripe *st = &ps->stripes[s];
        if (ps->nstripes > 0)
            ps_lock(ps, st);
        atomic_fetch_add_explicit(&st->version, 1, memory_order_acq_rel);
        for (size_t i = st->lo; i < st->hi; i++) {
            float p;
            __atomic_load(&ps->params[i], &p, __ATOMIC_RELAXED);
            p = to[i] + (p - from[i]);
            __atomic_store(&ps->params[i], &p, __ATOMIC_RELAXED);
        }
        if (ps->nstripes > 0)
            pthread_mutex_unlock(&st->lock);
    }
}

int gt_all_finite(const float *g, size_t n)
{
    /* Inf and NaN are the floats whose exponent bits are all ones. An integer test vectorises;
     * a float one (x - x != 0) would not without -ffast-math, and costs 3-6x more per step. */
    const uint32_t *bits = (const uint32_t *)(const void *)g;
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |= (bits[i] & 0x7f800000u) == 0x7f800000u;
    return !bad;
}

int gt_ps_default_threads(int nworkers)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long t = cores / (nworkers > 1 ? nworkers : 1);
    long most = nworkers > 1 ? GT_PS_THREADS_MOST : GT_PS_THREADS_MOST_ONE;
    return t < 1 ? 1 : t > most ? (int)most : (int)t;
}

int gt_ps_default_pools(int nworkers)
{
    return nworkers < 1 ? 1 : nworkers < GT_PS_MAX_POOLS ? nworkers : GT_PS_MAX_POOLS;
}

int gt_ps_start_threads(gt_ps *ps, int nworkers, gt_err *e)
{
    int threads = ps->threads > 0 ? ps->threads : gt_ps_default_threads(nworkers);
    return gt_ps_set_pools(ps, gt_ps_default_pools(nworkers), threads, GT_PS_POOL_MIN, e);
}

int gt_ps_set_pools(gt_ps *ps, int npools, int nthreads, size_t min_params, gt_err *e)
{
    if (npools < 1 || npools > GT_PS_MAX_POOLS)
        return gt_fail(e, "parameter store: %d groups of helper threads (1..%d)", npools,
                       GT_PS_MAX_POOLS);
    int undecided = 0;
    if (!atomic_compare_exchange_strong(&ps->pool_state, &undecided, 1))
        return gt_fail(e, "parameter store: helper threads are already set");
    ps->pool_min = min_params;
    int failed = 0;
    for (int i = 0; nthreads > 1 && i < npools && !failed; i++) {
        ps->pools[i] = gt_ps_pool_create(nthreads - 1);
        failed = !ps->pools[i];
        ps->npools += !failed;
    }
    if (failed) { /* all or none */
        for (int i = 0; i < ps->npools; i++)
            gt_ps_pool_destroy(ps->pools[i]);
        ps->npools = 0;
    }
    atomic_store_explicit(&ps->pool_state, 2, memory_order_release);
    if (failed)
        return gt_fail(e, "parameter store: cannot start %d x %d helper threads", npools,
                       nthreads - 1);
    return 0;
}

/* How many groups of helpers a walk over nparams parameters may try (ps->pools). The first large
 * push (nworkers > 0) starts the default: a group per worker, so that pushes and pulls of
 * different workers each find one; a walk that finds them being started runs alone. */
static int ps_pools_get(gt_ps *ps, size_t nparams, int nworkers)
{
    int state = atomic_load_explicit(&ps->pool_state, memory_order_acquire);
    if (state == 2)
        return nparams >= ps->pool_min ? ps->npools : 0;
    if (state == 0 && nworkers > 0 && nparams >= GT_PS_POOL_MIN)
        gt_ps_start_threads(ps, nworkers, NULL);
    return 0;
}

void gt_ps_pull_state(gt_ps *ps, int i, float *dst) { ps_copy_striped(ps, dst, ps->state[i]); }

void gt_ps_stripes_span(const gt_ps *ps, int s_lo, int s_hi, size_t *lo, size_t *hi)
{
    if (s_lo >= s_hi) {
        *lo = *hi = 0;
        return;
    }
    *lo = ps->stripes[s_lo].lo;
    *hi = ps->stripes[s_hi - 1].hi;
}
