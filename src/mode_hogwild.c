/* mode_hogwild.c - hogwild: batches from a shared cursor (--balance dynamic) or each worker's own
 * contiguous slice (static), each gradient pushed as soon as it is computed; lock-free where the
 * store has no stripes (--stripes 0). With --overlap step k + 1 is begun before step k is pushed.
 * In parts (--store-parts) a push also pulls: each part of the stripes is updated and copied out
 * under its locks as its gradient arrives, and the device uploads it while the next part comes,
 * so the worker's next step starts from what its own exchange pulled.
 * Across hosts each host trains its part of the permutation and the stores are averaged every
 * --sync-every x W batches and at epoch ends. */
#include "run.h"

#include <stdlib.h>
#include <string.h>

#define HOGWILD_ORPHANS_PER_WORKER 3

typedef struct range {
    uint32_t lo, hi; /* positions in the permutation */
} range;

/* The run's (r->own): the epoch's batches and the rounds across hosts. */
typedef struct hogwild_run {
    uint32_t span_lo, span_n;  /* the positions of the permutation this host trains on */
    uint32_t nbatches;         /* dynamic: batches per epoch */
    uint64_t cursor;           /* dynamic: next batch */
    uint64_t pipe_inflight;    /* --overlap: batches taken and begun but not yet pushed */
    range *orphans;            /* batches failed workers left, for the others: room for 3 per */
    int norphans;              /* worker (two in flight and a static slice's rest) */
    uint64_t host_batches;     /* across hosts: batches completed this epoch, which time the */
    uint64_t xavg_last;        /* averaging rounds; host_batches at the last round */
} hogwild_run;

/* A worker's (w->own). */
typedef struct hogwild_worker {
    /* --overlap: two parameter, gradient and version buffers, one per step in flight ([0] are
     * dev->params, dev->grad and the worker's ver) */
    float *pbuf[2], *gbuf[2];
    uint64_t *vbuf[2];
    int pipe_buf;              /* the buffer the next step takes */
    uint64_t pipe_inflight;    /* its steps begun and not yet pushed */
    uint64_t slice_pos;        /* --balance static: batches done in its slice this epoch */
    int order[GT_STORE_PARTS_MAX]; /* in parts: the order it takes them, from its own first */
    unsigned restores_now;     /* in parts: the guard's rollbacks as of its latest batch */
    unsigned restores_seen;    /* and as of its latest whole pull */
} hogwild_worker;

static hogwild_run *hog(const run *r) { return r->own; }
static hogwild_worker *hw(const worker *w) { return w->own; }

/* Steps of an epoch as checkpoints count them: batches from the shared cursor, or batches of
 * each worker's own slice (--balance static). */
static uint64_t hogwild_epoch_steps(const run *r)
{
    if (r->cfg->balance == GT_BALANCE_DYNAMIC)
        return hog(r)->nbatches;
    return hog(r)->span_n / (uint32_t)r->W / (uint32_t)r->batch;
}

/* Batches this host trains on per epoch. */
static uint64_t hogwild_batches(const run *r)
{
    return r->cfg->balance == GT_BALANCE_DYNAMIC ? hog(r)->nbatches
                                                 : (uint64_t)r->W * hogwild_epoch_steps(r);
}

/* The next range of permutation positions this worker trains on, or 0 when its epoch is done. */
static int hogwild_next(run *r, worker *w, range *out)
{
    uint32_t b = (uint32_t)r->batch;
    int got = 0;
    pthread_mutex_lock(&r->mu);
    if (r->halt) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    hw(w)->restores_now = r->guard.restores;
    if (r->cfg->balance == GT_BALANCE_DYNAMIC) {
        if (hog(r)->cursor < hog(r)->nbatches) {
            out->lo = hog(r)->span_lo + (uint32_t)hog(r)->cursor * b;
            out->hi = out->lo + b;
            hog(r)->cursor++;
            got = 1;
        }
    } else {
        uint32_t slice = hog(r)->span_n / (uint32_t)r->W;
        uint32_t steps = slice / b;
        if (hw(w)->slice_pos < steps) {
            out->lo = hog(r)->span_lo + (uint32_t)w->index * slice + (uint32_t)hw(w)->slice_pos * b;
            out->hi = out->lo + b;
            hw(w)->slice_pos++;
            got = 1;
        }
    }
    if (!got && hog(r)->norphans > 0) {
        range *o = &hog(r)->orphans[hog(r)->norphans - 1];
        out->lo = o->lo;
        out->hi = o->hi - o->lo > b ? o->lo + b : o->hi;
        o->lo = out->hi;
        if (o->lo >= o->hi)
            hog(r)->norphans--;
        got = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return got;
}

/* Leaves [lo, hi) to the other workers. A worker fails once and leaves at most three ranges
 * (two in flight and its static slice's rest), which orphans has room for. */
static void hogwild_orphan_locked(run *r, uint32_t lo, uint32_t hi)
{
    if (lo >= hi)
        return;
    if (hog(r)->norphans == HOGWILD_ORPHANS_PER_WORKER * r->W) {
        run_fail_locked(r, "hogwild: more batches left by failed workers than there is room for");
        return;
    }
    hog(r)->orphans[hog(r)->norphans++] = (range){lo, hi};
}

/* hogwild across hosts: every --sync-every x W batches this host completes, the worker that
 * completed the batch averages the hosts' stores while the others go on. Every host's part of the
 * epoch holds the same number of batches, so every host averages at the same counts; rounds run
 * one at a time, in order, and the epoch's last is left to its end.
 * Counts one completed batch; when that makes a round due, waits for the previous round to end
 * and returns the count the round is for, else 0. Caller holds r->mu (the wait releases it). */
static uint64_t hogwild_round_turn_locked(run *r)
{
    uint64_t every = (uint64_t)r->cfg->sync_every * (uint64_t)r->W;
    uint64_t due = ++hog(r)->host_batches;
    if (r->H == 1 || due % every != 0 || due >= hogwild_batches(r))
        return 0;
    while (!r->halt && hog(r)->xavg_last + every < due)
        pthread_cond_wait(&r->cv, &r->mu);
    return r->halt ? 0 : due;
}

/* The round hogwild_round_turn_locked made due, outside r->mu. */
static void hogwild_hosts_round(run *r, uint64_t due)
{
    gt_err e = {{0}};
    int sig = hosts_round(r, &e);
    pthread_mutex_lock(&r->mu);
    hog(r)->xavg_last = due;
    hosts_agreed_locked(r, sig, &e);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* A worker that failed with range rg taken: its batches go to the others, and it leaves. */
static void hogwild_fail(run *r, worker *w, const range *rg, int nrg)
{
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < nrg; i++)
        hogwild_orphan_locked(r, rg[i].lo, rg[i].hi);
    if (r->cfg->balance == GT_BALANCE_STATIC && nrg > 0) {
        uint32_t slice = hog(r)->span_n / (uint32_t)r->W;
        uint32_t end = hog(r)->span_lo + (uint32_t)w->index * slice +
                       slice / (uint32_t)r->batch * (uint32_t)r->batch;
        hogwild_orphan_locked(r, rg[nrg - 1].hi, end);
    }
    hog(r)->pipe_inflight -= hw(w)->pipe_inflight;
    hw(w)->pipe_inflight = 0;
    worker_leave_locked(r, w, w->error);
    pthread_mutex_unlock(&r->mu);
}

/* The step every part of the epoch has done, as a checkpoint or evaluation taken now records it:
 * dynamic, the batches taken from the cursor less those in flight; static, the slowest slice's
 * (less its steps in flight), from which every slice goes on at a resume. Caller holds r->mu. */
static uint64_t hogwild_done_step_locked(const run *r)
{
    if (r->cfg->balance == GT_BALANCE_DYNAMIC)
        return hog(r)->cursor - hog(r)->pipe_inflight;
    uint64_t step = UINT64_MAX;
    for (int i = 0; i < r->W; i++) {
        const hogwild_worker *h = hw(&r->workers[i]);
        if (h->slice_pos - h->pipe_inflight < step)
            step = h->slice_pos - h->pipe_inflight;
    }
    return step;
}

/* After a step's push: telemetry, evaluations and checkpoints that fell due (at the position of
 * the batches pushed so far), the stop check and the rounds across hosts. */
static void hogwild_done(run *r, worker *w, const gt_step_out *o, int n, uint32_t lo, uint64_t t)
{
    /* the run's step: this push's own update number t; a step that pushed nothing (a skipped
     * non-finite gradient, t = 0) takes the store's count */
    report_step(r, w, t ? t : atomic_load(&r->ps.updates), lo / (uint32_t)r->batch, o->loss_sum,
                n);
    worker_mark_time(w);
    pthread_mutex_lock(&r->mu);
    if (hw(w)->pipe_inflight) {
        hw(w)->pipe_inflight--;
        hog(r)->pipe_inflight--;
    }
    worker_account_step_locked(r, w, o, n);
    jobs_post_due_locked(r, hogwild_done_step_locked(r));
    if (stop_asked(r))
        r->halt = 1;
    uint64_t round = hogwild_round_turn_locked(r);
    pthread_mutex_unlock(&r->mu);
    if (round)
        hogwild_hosts_round(r, round);
}

/* The store step in parts: one update, part by part, each part's stripes copied out as it left
 * them (gt_ps_update_part); the device overlaps the parts' downloads and uploads with it
 * (device.h's exchange). */
typedef struct hogwild_xchg {
    run *r;
    worker *w;
    gt_ps_update u;
    double t_first; /* when the first part landed (0: none yet) */
} hogwild_xchg;

static void hogwild_part(void *arg, int k)
{
    hogwild_xchg *x = arg;
    const run_parts *h = &x->r->parts;
    if (x->t_first == 0)
        x->t_first = gt_now();
    const gt_device *d = x->w->dev;
    if (d->grad_bf16)
        gt_ps_update_part_bf16(&x->r->ps, &x->u, h->part_s[k], h->part_s[k + 1], d->grad_half,
                               x->w->ver, d->params);
    else
        gt_ps_update_part(&x->r->ps, &x->u, h->part_s[k], h->part_s[k + 1], d->grad, x->w->ver,
                          d->params);
}

/* Pushes the step's gradient and pulls the next step's parameters, in parts (store_parts_step's
 * exchange, arg a hogwild_xchg that it fills); 0, 1 where a part's gradient was not finite (it and
 * the parts after it were not pushed) or -1 with the worker's error set. Then x->u.t is the
 * update's number and x->t_first when the first part landed (else when the exchange ended). */
static int hogwild_exchange(run *r, worker *w, void *arg)
{
    hogwild_xchg *x = arg;
    gt_device *d = w->dev;
    gt_err e = {{0}};
    run_lr lr = run_lr_now(r, 0, 1);
    *x = (hogwild_xchg){.r = r, .w = w};
    gt_ps_update_begin(&r->ps, &x->u, w->index, r->W, lr.gscale, lr.epoch);
    /* Each part is copied out of the store into the device's own buffer with streaming stores
     * (gt_ps_update_part) and uploaded from there, a lone worker's too: on an H200's host a copy
     * engine read the store's lines that the apply had just left modified in the cores' caches
     * at 21-31 GB/s, the copy at ~50, and the exchange need not wait for the uploads to end
     * (cnn-wide through the store on one GPU +28%, call 161). */
    int rc = d->ops->exchange(d, r->store_parts, r->parts.bounds, hw(w)->order, d->params,
                              hogwild_part, x, &e);
    gt_ps_update_end(&r->ps, &x->u);
    if (rc < 0)
        snprintf(w->error, sizeof w->error, "%s", e.msg);
    if (x->t_first == 0)
        x->t_first = gt_now();
    return rc < 0 ? -1 : rc;
}

/* One epoch of one worker: pull, compute, push, batch after batch. A push pulls the next step's
 * parameters in the same walk (in parts, each part as it lands); a whole pull comes first in an
 * epoch, after a dropped gradient and after the guard rolled the store back. */
static void hogwild_epoch(run *r, worker *w)
{
    const gt_config *cfg = r->cfg;
    range rg;
    int held = 0; /* the device has its last exchange's pull */
    while (hogwild_next(r, w, &rg)) {
        gt_batch b = {.ds = &r->data->train, .idx = r->perm + rg.lo, .n = (int)(rg.hi - rg.lo),
                      .epoch = r->epoch, .seed = cfg->seed, .aug = &cfg->augment};
        uint64_t step = atomic_load(&w->steps);
        gt_step_out o = {0};
        /* The phases' clock: pull (the upload, after a whole pull where one is due), device
         * (step, download), push (with the next step's copy out; in parts: with the download and
         * the uploads, beside the backward, from the first part's landing on). */
        double t0 = gt_now();
        int rc = 0;
        int pull = !held || hw(w)->restores_now != hw(w)->restores_seen;
        if (pull) {
            hw(w)->restores_seen = hw(w)->restores_now;
            gt_ps_pull(&r->ps, w->dev->params, w->ver);
        }
        if (pull || !r->store_parts) /* in parts the exchange uploaded them */
            rc = worker_load(w);
        double t1 = gt_now(), t2 = t1;
        uint64_t t = 0;
        if (rc == 0 && r->store_parts) {
            /* the device phase ends when the first part lands */
            hogwild_xchg x = {0};
            rc = store_parts_step(r, w, &b, &o, step, hogwild_exchange, &x);
            t = x.u.t;
            if (x.t_first > 0)
                t2 = x.t_first;
        } else if (rc == 0) {
            rc = worker_compute(r, w, &b, &o, step);
            t2 = gt_now();
            if (rc == 0) {
                run_lr lr = run_lr_now(r, 0, 1);
                gt_ps_push_pull(&r->ps, w->index, r->W, w->dev->grad, lr.gscale, w->ver,
                                lr.epoch, &t, w->dev->params);
            }
        }
        if (rc < 0) {
            hogwild_fail(r, w, &rg, 1);
            return;
        }
        held = rc == 0;
        if (rc == 0)
            gt_ps_push_stats(&r->ps, w->dev->stats);
        double t3 = gt_now();
        w->pull_s += t1 - t0;
        w->device_s += t2 - t1;
        w->push_s += t3 - t2;
        hogwild_done(r, w, &o, b.n, rg.lo, t);
    }
}

/* One step of the overlapped loop: its batch, the buffers it pulled into and its results. */
typedef struct pipe_step {
    range rg;
    gt_batch b;
    uint64_t step;
    int buf;
    gt_step_out o;
} pipe_step;

/* Pulls into the step's buffers and begins it on the device (a device without step_begin, the
 * CPU, computes it here: the same schedule, so the same arithmetic). With a step prev still in
 * flight, its push is missing from what was pulled: with weight prediction (--overlap's default)
 * the step starts from the pulled parameters minus prev's plain SGD step, on the device from
 * prev's gradient there (the CPU's is here already), so a worker's own steps are not stale to
 * it; the momentum term of that push and the other workers' pushes still are. */
static int pipe_begin(run *r, worker *w, pipe_step *p, const pipe_step *prev)
{
    gt_device *d = w->dev;
    gt_err e = {{0}};
    if (worker_injected(r, w, p->step))
        return -1;
    d->params = hw(w)->pbuf[p->buf];
    d->grad = hw(w)->gbuf[p->buf];
    double t0 = gt_now();
    gt_ps_pull(&r->ps, d->params, hw(w)->vbuf[p->buf]);
    double t1 = gt_now();
    w->pull_s += t1 - t0;
    gt_predict pr;
    d->predict = NULL;
    if (prev && r->cfg->overlap_predict) {
        /* The scalars prev's push will take: its update number may differ by the other
         * workers' pushes in between, which moves only Adam's (not predicted) and a schedule by
         * a fraction of a step. */
        run_lr lr = run_lr_now(r, atomic_load(&r->ps.updates) + 1, 1);
        pr = (gt_predict){.cfg = &r->ps.optim, .st = lr.st, .gscale = lr.gscale};
        if (d->ops->step_begin)
            d->predict = &pr;
        else
            gt_optim_predict(pr.cfg, &pr.st, d->params, hw(w)->gbuf[prev->buf], pr.gscale, r->n);
    }
    int rc = d->ops->step_begin ? d->ops->step_begin(d, &p->b, &e)
                                : d->ops->load_params(d, &e) || d->ops->train_step(d, &p->b, &p->o, &e);
    d->predict = NULL;
    w->device_s += gt_now() - t1;
    if (rc) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    return 0;
}

/* Waits for the step and checks it as worker_compute does: 0, 1 (drop it) or -1. */
static int pipe_end(run *r, worker *w, pipe_step *p)
{
    gt_device *d = w->dev;
    gt_err e = {{0}};
    double t0 = gt_now();
    int bad = d->ops->step_begin && d->ops->step_end(d, &p->o, &e);
    w->device_s += gt_now() - t0;
    if (bad) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    d->grad = hw(w)->gbuf[p->buf];
    return worker_check(r, w, &p->o, p->step);
}

/* hogwild with --overlap: step k + 1 is pulled and begun before step k's gradient is pushed, so
 * the device computes while the host pushes. Each step then misses its predecessor's update: one
 * step more staleness, which the store's staleness telemetry counts. */
static void hogwild_epoch_overlap(run *r, worker *w)
{
    const gt_config *cfg = r->cfg;
    pipe_step q[2];
    int head = 0, nq = 0, more = 1;
    for (;;) {
        pipe_step *p = &q[(head + nq) % 2];
        while (more && nq < 2 && (more = hogwild_next(r, w, &p->rg))) {
            p->b = (gt_batch){.ds = &r->data->train, .idx = r->perm + p->rg.lo,
                              .n = (int)(p->rg.hi - p->rg.lo), .epoch = r->epoch,
                              .seed = cfg->seed, .aug = &cfg->augment};
            p->step = atomic_load(&w->steps) + (uint64_t)nq;
            p->o = (gt_step_out){0};
            p->buf = hw(w)->pipe_buf;
            hw(w)->pipe_buf ^= 1;
            pthread_mutex_lock(&r->mu);
            hw(w)->pipe_inflight++;
            hog(r)->pipe_inflight++;
            pthread_mutex_unlock(&r->mu);
            nq++;
            if (pipe_begin(r, w, p, nq == 2 ? &q[head] : NULL) < 0)
                goto failed;
            p = &q[(head + nq) % 2];
        }
        if (nq == 0)
            return;
        pipe_step *o = &q[head];
        int rc = pipe_end(r, w, o);
        if (rc < 0)
            goto failed;
        double t0 = gt_now();
        uint64_t t = 0;
        if (rc == 0) {
            run_lr lr = run_lr_now(r, 0, 1);
            gt_ps_push_numbered(&r->ps, w->index, r->W, hw(w)->gbuf[o->buf], lr.gscale,
                                hw(w)->vbuf[o->buf], lr.epoch, &t);
            gt_ps_push_stats(&r->ps, w->dev->stats); /* step_end left the ended step's */
        }
        w->push_s += gt_now() - t0;
        hogwild_done(r, w, &o->o, o->b.n, o->rg.lo, t);
        head = (head + 1) % 2;
        nq--;
    }
failed:;
    /* Every batch still in flight goes to the others, oldest first. */
    range rg[2];
    for (int i = 0; i < nq; i++)
        rg[i] = q[(head + i) % 2].rg;
    hogwild_fail(r, w, rg, nq);
}

/* The mode's epoch: overlapped (--overlap) or one step at a time. */
static void hogwild_run_epoch(run *r, worker *w, uint64_t first)
{
    (void)first; /* a resumed position is in the cursor and slices already */
    if (r->cfg->overlap)
        hogwild_epoch_overlap(r, w);
    else
        hogwild_epoch(r, w);
}

/* Whether this epoch's batches are all done. Caller holds r->mu. */
static int hogwild_epoch_complete_locked(run *r)
{
    if (hog(r)->norphans > 0)
        return 0;
    if (r->cfg->balance == GT_BALANCE_DYNAMIC)
        return hog(r)->cursor >= hog(r)->nbatches;
    for (int i = 0; i < r->W; i++)
        if (atomic_load(&r->workers[i].alive) && hw(&r->workers[i])->slice_pos < hogwild_epoch_steps(r))
            return 0;
    return 1;
}

/* Where an interrupted run stands: the cursor, or the slowest worker's slice. */
static uint64_t hogwild_stop_step(const run *r)
{
    if (r->cfg->balance == GT_BALANCE_DYNAMIC)
        return hog(r)->cursor;
    uint64_t step = UINT64_MAX;
    for (int i = 0; i < r->W; i++)
        if (hw(&r->workers[i])->slice_pos < step)
            step = hw(&r->workers[i])->slice_pos;
    return step;
}

/* The epoch's end: the cursor, slices and round counts back to the start. */
static void hogwild_epoch_reset(run *r)
{
    hog(r)->cursor = 0;
    hog(r)->host_batches = hog(r)->xavg_last = 0;
    for (int i = 0; i < r->W; i++)
        hw(&r->workers[i])->slice_pos = 0;
}

/* Each host trains its own part of the permutation; --balance static cuts it into W slices. */
static int hogwild_check(run *r, gt_device **devices, gt_err *e)
{
    (void)devices;
    hog(r)->span_n = r->ntrain / (uint32_t)r->H;
    hog(r)->span_lo = (uint32_t)r->host * hog(r)->span_n;
    if ((uint64_t)r->batch * (r->cfg->balance == GT_BALANCE_STATIC ? r->W : 1) > hog(r)->span_n)
        return gt_fail(e, "--batch: %d x %d workers%s is more than the %u training samples",
                       r->batch, r->Wg, r->H > 1 ? " of all hosts" : "", r->ntrain);
    hog(r)->nbatches = hog(r)->span_n / (uint32_t)r->batch;
    return 0;
}

/* Whether the parts download the gradient in bf16 (--store-grad; auto: where the GPUs compute in
 * bf16, whose convolutions' weight gradients are bf16 values already). */
static int hogwild_grad_bf16(const gt_config *c)
{
    if (c->store_grad == GT_STORE_GRAD_AUTO)
        return c->precision == GT_PRECISION_BF16 && c->cpu_workers == 0;
    return c->store_grad == GT_STORE_GRAD_BF16;
}

/* The store step in parts (store_parts.c). Each worker lists them from its own first (as a
 * whole push starts at its own stripe), so workers rarely wait on each other's locks; a GPU's
 * backward that marks them takes them as it finishes them (device.h's exchange). */
static void hogwild_parts_init(run *r)
{
    /* no part below the walk that wakes the store's helper threads (GT_PS_POOL_MIN): a part
     * applied by its worker alone took cnn-wide's step from 1.8 to 3.6 ms (call 51). Not 1 M as
     * sync's and ssp's where workers share the store: a worker's parts carry its pull too, and
     * resnet18 over 2 GPUs on Fashion-MNIST ended 0.9401 and 0.9415 (seed 1) and 0.9384 (seed 2)
     * in 10 parts against 0.9465, 0.9438 and 0.9440 in 16, no faster (calls 108, 112). A lone
     * worker's parts are the whole push and pull whatever their size (nobody else writes the
     * store between them), so it takes sync's: cnn-wide on one GPU ran 10-17% faster in 3 to 6
     * parts than in 12 (call 107). */
    size_t part_min = r->Wg == 1 ? STORE_PART_MIN_APPLY : GT_PS_POOL_MIN;
    int parts = store_parts_init(r, hogwild_grad_bf16(r->cfg), part_min);
    for (int i = 0; parts && i < r->W; i++)
        store_parts_order(r, (int)((int64_t)i * parts / r->W), hw(&r->workers[i])->order);
}

/* --overlap's second buffers, the failed workers' batches, the store step's parts and the resumed
 * positions. */
static int hogwild_init(run *r, gt_device **devices, const gt_start *start, gt_err *e)
{
    (void)start;
    hogwild_parts_init(r);
    hog(r)->orphans = calloc((size_t)(HOGWILD_ORPHANS_PER_WORKER * r->W), sizeof(range));
    if (!hog(r)->orphans)
        return gt_fail(e, "out of memory");
    for (int i = 0; r->cfg->overlap && i < r->W; i++) {
        worker *w = &r->workers[i];
        hw(w)->pbuf[0] = w->dev->params;
        hw(w)->gbuf[0] = w->dev->grad;
        hw(w)->vbuf[0] = w->ver;
        hw(w)->pbuf[1] = gt_host_alloc(r->n * sizeof(float));
        hw(w)->gbuf[1] = gt_host_alloc(r->n * sizeof(float));
        hw(w)->vbuf[1] = calloc((size_t)r->ps.nranges, sizeof(uint64_t));
        if (!hw(w)->pbuf[1] || !hw(w)->gbuf[1] || !hw(w)->vbuf[1])
            return gt_fail(e, "out of memory for --overlap's second buffers");
    }
    hog(r)->cursor = r->start_clock;
    int slices = r->cfg->balance == GT_BALANCE_STATIC;
    for (int i = 0; slices && i < r->W; i++)
        hw(&r->workers[i])->slice_pos = r->start_clock; /* a resumed step counts batches of a slice */
    uint64_t every = (uint64_t)r->cfg->sync_every * (uint64_t)r->W;
    hog(r)->host_batches = r->start_clock * (slices ? (uint64_t)r->W : 1);
    hog(r)->xavg_last = hog(r)->host_batches - hog(r)->host_batches % every;
    return 0;
}

/* The devices get their own buffers back. */
static void hogwild_free(run *r)
{
    store_parts_free(r);
    for (int i = 0; r->workers && i < r->W; i++) {
        hogwild_worker *h = hw(&r->workers[i]);
        if (!h)
            continue;
        if (h->pbuf[0]) {
            r->workers[i].dev->params = h->pbuf[0];
            r->workers[i].dev->grad = h->gbuf[0];
        }
        gt_host_free(h->pbuf[1]);
        gt_host_free(h->gbuf[1]);
        free(h->vbuf[1]);
    }
    free(hog(r)->orphans);
}

const gt_mode_ops gt_mode_hogwild = {
    .run_state = sizeof(hogwild_run),
    .worker_state = sizeof(hogwild_worker),
    .free = hogwild_free,
    .rollback = ROLLBACK_NOW,
    .hosts_rounds = 1,
    .hosts_average = 1,
    .check = hogwild_check,
    .init = hogwild_init,
    .epoch = hogwild_run_epoch,
    .epoch_complete_locked = hogwild_epoch_complete_locked,
    .epoch_steps = hogwild_epoch_steps,
    .stop_step = hogwild_stop_step,
    .epoch_reset = hogwild_epoch_reset,
};
