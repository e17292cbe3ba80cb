/* mode_clocked.c - the core of the clocked modes (sync, ssp, local, allreduce). Clock c is global
 * batch c of the permutation, cut into the shares of every host's workers (--batch samples each).
 * A worker claims its own share of each clock, and any share a failed worker left behind, so what
 * a clock computes does not change when a worker leaves. Gradients land in per-share slots and
 * are summed in share order, which makes sync bit-reproducible whatever the thread timing. */
#include "run.h"

#include <stdlib.h>
#include <string.h>

/* Floats from one slot to the next: whole cache lines, so every slot starts on a line as a
 * device's own gradient buffer does, and two workers writing neighbouring slots at once never
 * share one. */
static size_t clocked_slot_stride(const run *r)
{
    size_t line = GT_CACHELINE / sizeof(float);
    return (r->n + line - 1) / line * line;
}

/* The gradient slot of one share of a clock. */
float *clocked_slot(run *r, uint64_t clock, int share)
{
    size_t ring = (size_t)(clock % (uint64_t)r->clk.nslots);
    return r->clk.slots + (ring * (size_t)r->W + (size_t)share) * clocked_slot_stride(r);
}

/* The bits of every share of this host. */
uint64_t clocked_full_mask(const run *r)
{
    return r->W == RUN_SHARE_BITS ? ~0ull : (1ull << r->W) - 1;
}

/* Claims an unclaimed share of a clock in [applied, upto]: the worker's own share of `upto`, or
 * one a failed worker left behind. Returns the share or -1. Caller holds r->mu. */
int clocked_claim_share_locked(run *r, worker *w, uint64_t upto, uint64_t *clock_out)
{
    for (uint64_t c = r->clk.applied; c <= upto && c < r->clk.applied + (uint64_t)r->clk.R; c++) {
        uint64_t *cl = &r->clk.claimed[c % (uint64_t)r->clk.R];
        for (int s = 0; s < r->W; s++) {
            int mine = s == w->index && c == upto;
            if ((*cl & (1ull << s)) || (!mine && atomic_load(&r->workers[s].alive)))
                continue;
            *cl |= 1ull << s;
            *clock_out = c;
            return s;
        }
    }
    return -1;
}

/* The samples of one of this host's shares: clock c's global batch holds every host's shares in
 * host order. */
void clocked_gather_share(run *r, uint64_t clock, int share, gt_batch *b)
{
    size_t pos = ((size_t)clock * (size_t)r->Wg + (size_t)(r->share0 + share)) * (size_t)r->batch;
    b->ds = &r->data->train;
    b->idx = r->perm + pos;
    b->n = r->batch;
    b->epoch = r->epoch;
    b->seed = r->cfg->seed;
    b->aug = &r->cfg->augment;
}

/* Sums the slots of one clock in share order into share 0's slot, over stripes [s_lo, s_hi). */
void clocked_reduce_slots(run *r, uint64_t clock, int s_lo, int s_hi)
{
    size_t lo, hi;
    gt_ps_stripes_span(&r->ps, s_lo, s_hi, &lo, &hi);
    float *dst = clocked_slot(r, clock, 0);
    for (int s = 1; s < r->W; s++) {
        const float *src = clocked_slot(r, clock, s);
        for (size_t i = lo; i < hi; i++)
            dst[i] += src[i];
    }
}

/* Applies clock c's gradient, summed over this host's shares and scaled by gscale, to stripes
 * [s_lo, s_hi) as update t. The sum is taken stripe by stripe inside the store's walk, in share
 * order (the bits of clocked_reduce_slots), so the store's helper threads share it too; each
 * stripe is then copied into a lone worker's copy (clocked_apply.c). */
void clocked_apply(run *r, uint64_t clock, int s_lo, int s_hi, float gscale, uint64_t t,
                   double epoch)
{
    float *rest[RUN_SHARE_BITS];
    for (int s = 1; s < r->W; s++)
        rest[s - 1] = clocked_slot(r, clock, s);
    gt_ps_apply_stripes_out(&r->ps, s_lo, s_hi, clocked_slot(r, clock, 0), rest, r->W - 1, gscale,
                            t, epoch, r->clk.copy, r->clk.copy_ver);
}

/* Starts the store's helper threads for the clocked modes, which call no push (what starts them
 * in hogwild): a group per worker, so that the workers' pulls at the start of a clock each find
 * one, the cores shared between the groups. */
int clocked_start_store_threads(run *r, gt_err *e)
{
    return gt_ps_start_threads(&r->ps, r->W, e);
}

/* One share's batch statistics of a clock (the models with batch norm). */
static float *clocked_stat_slot(run *r, uint64_t clock, int share)
{
    size_t ring = (size_t)(clock % (uint64_t)r->clk.R);
    return r->clk.stat_slots + (ring * (size_t)r->W + (size_t)share) * r->m->nbuffers;
}

/* Folds the batch statistics of clock c's shares into the store's running statistics in share
 * order, as the clock's gradients are summed, so that sync's buffers are reproducible too; a
 * dropped share has none. Call once per clock, when it is applied. Caller holds r->mu. */
void clocked_fold_stats_locked(run *r, uint64_t clock)
{
    if (!r->clk.stats_in)
        return;
    uint64_t *in = &r->clk.stats_in[clock % (uint64_t)r->clk.R];
    for (int s = 0; s < r->W; s++)
        if (*in & (1ull << s))
            gt_ps_push_stats(&r->ps, clocked_stat_slot(r, clock, s));
    *in = 0;
}

/* A computed share's batch statistics go to their slot, for its clock's fold. */
void clocked_stats_store(run *r, worker *w, uint64_t clock, int share)
{
    if (!r->clk.stats_in)
        return;
    memcpy(clocked_stat_slot(r, clock, share), w->dev->stats, r->m->nbuffers * sizeof(float));
    pthread_mutex_lock(&r->mu);
    r->clk.stats_in[clock % (uint64_t)r->clk.R] |= 1ull << share;
    pthread_mutex_unlock(&r->mu);
}

/* share_done of the modes that sum shares: the gradient goes to its slot (where the device did
 * not write it there itself), or zeros where it was dropped (--on-nan skip), so the sum keeps its
 * order; in parts, only what no apply has taken (clocked_apply.c). */
int clocked_slot_store(run *r, worker *w, uint64_t clock, int share, int rc)
{
    double t0 = gt_now(); /* handing the gradient to the store: the worker's push */
    float *slot = clocked_slot(r, clock, share);
    if (r->store_parts)
        clocked_parts_store(r, w, clock, share, rc);
    else if (rc != 0)
        memset(slot, 0, r->n * sizeof(float));
    else if (w->dev->grad != slot)
        memcpy(slot, w->dev->grad, r->n * sizeof(float));
    if (rc == 0)
        clocked_stats_store(r, w, clock, share);
    w->push_s += gt_now() - t0;
    return 0;
}

/* The most gradient slots a ring may have for devices to write into them directly. */
#define CLOCKED_DIRECT_SLOTS 4

/* Computes one share of a clock and hands it to the mode (a slot, or local mode's own step).
 * Returns 0, or -1 when the worker failed. */
int clocked_share(run *r, worker *w, uint64_t clock, int share)
{
    gt_batch b;
    gt_step_out o = {0};
    clocked_gather_share(r, clock, share, &b);
    /* The device writes the gradient straight into the share's slot (pinned like its own buffer),
     * saving a copy of the whole gradient a share (resnet18's 45 MB: ~6 ms of ssp's 8 ms push
     * on one H200). A GPU keeps a step graph per host gradient buffer, input slot and batch shape
     * (16 at most: a worker's own share takes 2 x 2 x nslots of them), so only where the slots
     * are few: sync's one ring, ssp up to s = 3 (the default is 2). A share read part by part
     * as it lands goes there always (its step's graph downloads nothing), and one taken over from
     * a failed worker never (an apply may be reading the parts that worker landed). */
    float *own = w->dev->grad;
    int direct = r->store_parts ? share == w->index : r->clk.nslots <= CLOCKED_DIRECT_SLOTS;
    if (r->ops->slot_shares && direct)
        w->dev->grad = clocked_slot(r, clock, share);
    /* the device's phase, less the store's work the mode did meanwhile (its push) */
    double t0 = gt_now(), pushed = w->push_s;
    int rc = r->ops->share_compute ? r->ops->share_compute(r, w, clock, share, &b, &o)
                                   : worker_compute(r, w, &b, &o, clock);
    w->device_s += gt_now() - t0 - (w->push_s - pushed);
    if (rc >= 0) /* share_done adds its own time to the worker's phases */
        rc = r->ops->share_done(r, w, clock, share, rc) != 0 ? -1 : rc;
    w->dev->grad = own;
    if (rc < 0)
        return -1;
    report_step(r, w, r->clk.updates0 + clock + 1, clock, o.loss_sum, b.n);
    worker_mark_time(w);
    pthread_mutex_lock(&r->mu);
    worker_account_step_locked(r, w, &o, b.n);
    r->clk.deposited[clock % (uint64_t)r->clk.R] |= 1ull << share;
    /* A worker whose share of its clock is in is at the next clock from now on, so that in ssp one
     * that starts a clock the moment this one is applied measures the spread right. */
    if (clock == w->clock)
        w->clock = clock + 1;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Claims and computes shares of clocks up to `upto` until none is left. */
int clocked_claim_and_compute(run *r, worker *w, uint64_t upto)
{
    for (;;) {
        uint64_t cc;
        pthread_mutex_lock(&r->mu);
        int share = clocked_claim_share_locked(r, w, upto, &cc);
        pthread_mutex_unlock(&r->mu);
        if (share < 0)
            return 0;
        if (clocked_share(r, w, cc, share) != 0)
            return -1;
    }
}

/* Whether every share of clocks [from, upto] is in. Caller holds r->mu. */
static int clocked_shares_complete_locked(run *r, uint64_t from, uint64_t upto)
{
    for (uint64_t c = from; c <= upto; c++)
        if (r->clk.deposited[c % (uint64_t)r->clk.R] != clocked_full_mask(r))
            return 0;
    return 1;
}

/* Leader work of the barriers inside sync and local clocks: whether every share is in and whether
 * to halt, as one thread saw it, so every worker released from the barrier takes the same branch
 * (a survivor depositing a left-over share right after the barrier must not split them). */
static void capture_clock_leader(run *r)
{
    r->clk.halt_seen = r->halt;
    r->clk.complete_seen = clocked_shares_complete_locked(r, r->clk.applied, r->clk.pending_upto);
}

/* The worker's place among the live workers. Caller holds r->mu. */
static int clocked_live_rank_locked(run *r, worker *w, int *nlive)
{
    int rank = 0, n = 0;
    for (int i = 0; i < r->W; i++) {
        if (!atomic_load(&r->workers[i].alive))
            continue;
        if (i == w->index)
            rank = n;
        n++;
    }
    *nlive = n;
    return rank;
}

/* Stripes [s_lo, s_hi): the worker's part of an update split across the live workers. */
void clocked_my_stripes(run *r, worker *w, int *s_lo, int *s_hi, int *nlive)
{
    pthread_mutex_lock(&r->mu);
    int rank = clocked_live_rank_locked(r, w, nlive);
    pthread_mutex_unlock(&r->mu);
    *s_lo = (int)((int64_t)r->ps.nranges * rank / *nlive);
    *s_hi = (int)((int64_t)r->ps.nranges * (rank + 1) / *nlive);
}

/* Computes shares up to clock `upto` until every share of clocks [applied, upto] is in, a
 * survivor taking those of workers that failed meanwhile. Every live worker calls it and meets the
 * others at a barrier; returns 1 when all shares are in, 0 when the run halts, -1 when the worker
 * failed. */
int clocked_fill(run *r, worker *w, uint64_t upto)
{
    for (;;) {
        if (clocked_claim_and_compute(r, w, upto) != 0)
            return -1;
        pthread_mutex_lock(&r->mu);
        r->clk.pending_upto = upto;
        pthread_mutex_unlock(&r->mu);
        /* in parts, a worker whose shares are in applies the clock's parts as they come */
        run_barrier_help(r, w, capture_clock_leader,
                         r->store_parts ? r->ops->apply_ready_locked : NULL);
        pthread_mutex_lock(&r->mu);
        int complete = r->clk.complete_seen, halt = r->clk.halt_seen;
        pthread_mutex_unlock(&r->mu);
        if (complete)
            return 1;
        if (halt)
            return 0;
    }
}

/* A worker that failed leaves; in a mode of replicas it ends the run, which also releases the
 * workers waiting for it (in allreduce, inside NCCL). */
static void clocked_leave(run *r, worker *w)
{
    pthread_mutex_lock(&r->mu);
    if (r->ops->replicas)
        worker_fail_run_locked(r, w);
    worker_leave_locked(r, w, w->error);
    pthread_mutex_unlock(&r->mu);
}

/* One epoch of a clocked mode for one worker: the mode's clocks from first_clock, then its end. */
void clocked_epoch(run *r, worker *w, uint64_t first_clock)
{
    const gt_mode_ops *ops = r->ops;
    if (ops->clocked_begin && ops->clocked_begin(r, w) != 0) {
        clocked_leave(r, w);
        return;
    }
    uint64_t done = first_clock;
    for (uint64_t c = first_clock; c < r->clk.clocks; c++, done = c) {
        pthread_mutex_lock(&r->mu);
        int halt = r->halt;
        pthread_mutex_unlock(&r->mu);
        if (halt)
            break;
        if (ops->clock(r, w, c) != 0) {
            clocked_leave(r, w);
            return;
        }
    }
    if (ops->clocked_end && ops->clocked_end(r, w, done) != 0)
        clocked_leave(r, w);
}

/* Set-up of the clocked core: R clocks in flight, nslots rings of gradient slots. */
int clocked_init(run *r, int R, int nslots, gt_err *e)
{
    r->clk.R = R;
    r->clk.nslots = nslots;
    size_t stride = clocked_slot_stride(r);
    size_t slots = (size_t)nslots * (size_t)r->W * stride;
    if (slots / stride != (size_t)nslots * (size_t)r->W)
        return gt_fail(e, "--staleness: %d needs too much memory", r->cfg->staleness);
    r->clk.slots = gt_host_alloc(slots * sizeof(float));
    r->clk.claimed = calloc((size_t)R, sizeof(uint64_t));
    r->clk.deposited = calloc((size_t)R, sizeof(uint64_t));
    r->clk.slot_read_clock = malloc((size_t)R * sizeof(uint64_t));
    if (!r->clk.slots || !r->clk.claimed || !r->clk.deposited || !r->clk.slot_read_clock)
        return gt_fail(e, "out of memory for %d x %d gradient slots of %zu parameters", R, r->W,
                       r->n);
    for (int k = 0; k < R; k++)
        r->clk.slot_read_clock[k] = UINT64_MAX;
    size_t nb = r->m->nbuffers;
    if (nb) {
        r->clk.stat_slots = malloc((size_t)R * (size_t)r->W * nb * sizeof(float));
        r->clk.stats_in = calloc((size_t)R, sizeof(uint64_t));
        if (!r->clk.stat_slots || !r->clk.stats_in)
            return gt_fail(e, "out of memory for %d x %d batch-norm statistics of %zu values", R,
                           r->W, nb);
    }
    return 0;
}

/* The table entries every clocked mode shares: an epoch is its clocks, applied in order. */
int clocked_epoch_complete_locked(run *r) { return r->clk.applied >= r->clk.clocks; }

uint64_t clocked_epoch_steps(const run *r) { return r->clk.clocks; }

uint64_t clocked_stop_step(const run *r) { return r->clk.applied; }

void clocked_epoch_reset(run *r)
{
    r->clk.applied = 0;
    for (int k = 0; k < r->clk.R; k++) {
        r->clk.claimed[k] = r->clk.deposited[k] = 0;
        if (r->clk.stats_in)
            r->clk.stats_in[k] = 0;
        r->clk.slot_read_clock[k] = UINT64_MAX;
    }
    for (int i = 0; i < r->W; i++)
        r->workers[i].clock = 0;
}
