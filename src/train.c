/* train.c - a training run: one pthread per device around one parameter store.
 *
 * A minibatch flows one way: the epoch's permutation -> a worker's batch -> its device computes
 * the gradient -> the store applies it -> workers pull the new parameters.
 *
 * Modes share two schedules:
 *  - hogwild takes batches from a shared cursor (--balance dynamic) or its own contiguous slice
 *    (static) and pushes each gradient as soon as it has it;
 *  - the clocked modes (sync, ssp, local) split the epoch into clocks: clock c is global batch c
 *    of the permutation, cut into W "shares" of --batch samples. A worker claims its own share of
 *    each clock, and any share a failed worker left behind, so what a clock computes does not
 *    change when a worker leaves. Gradients land in per-share slots and are summed in share order,
 *    which makes sync bit-reproducible whatever the thread timing.
 * The calling thread evaluates snapshots on its own device, writes the log and checkpoints, and
 * watches for signals and stalled workers, so evaluation costs the workers one snapshot copy.
 *
 * Across hosts (one process per host under mpirun, cluster.h) each host keeps its workers and
 * store. A clock is cut into the shares of every host's workers; sync sums each clock's gradient
 * over the hosts, so every store takes the same update; hogwild, ssp and local stay asynchronous
 * inside a host and average the hosts' stores every --sync-every steps and at epoch ends. One
 * thread per host makes each cross-host call, at points every host reaches in the same order, and
 * signals are acted on only where the hosts agree, so that all stop at the same clock. Only host 0
 * evaluates, logs and writes checkpoints. */
#include "gputrain/train.h"
#include "gputrain/checkpoint.h"
#include "gputrain/cluster.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_JOBS 4
#define JOB_EVAL 1
#define JOB_CKPT 2

typedef struct job {
    int kinds;
    float *params;
    float *state[2];
    uint32_t epoch;       /* epochs completed when taken */
    uint64_t step;        /* clocks/batches completed inside the next epoch */
    uint64_t samples, updates;
    double wall;
    double train_loss, train_acc;
} job;

typedef struct range {
    uint32_t lo, hi; /* positions in the permutation */
} range;

struct run;

typedef struct worker {
    struct run *run;
    int index;                 /* also the share it owns in clocked modes */
    gt_device *dev;
    pthread_t thread;
    uint64_t *ver;             /* stripe versions at the last pull */
    /* hogwild --overlap: two parameter, gradient and version buffers, one per step in flight
     * ([0] are dev->params, dev->grad and ver) */
    float *pbuf[2], *gbuf[2];
    uint64_t *vbuf[2];
    int pipe_buf;              /* the buffer the next step takes */
    uint64_t pipe_inflight;    /* its steps begun and not yet pushed */
    float *state[2];           /* local mode: the replica's optimizer state */
    uint64_t local_updates;    /* local mode: the replica's Adam t */
    uint32_t *idx_buf;         /* one batch of sample indices (hogwild ranges) */
    _Atomic uint64_t steps, samples;
    _Atomic uint64_t last_progress_ns;
    _Atomic int alive;
    int stalled_reported;
    double wait_s, t_first, t_last;
    uint64_t slice_pos;        /* hogwild static: batches done in its slice this epoch */
    uint64_t clock;            /* clocked modes: the clock it is working on */
    char error[GT_ERRLEN];
} worker;

typedef struct run {
    const gt_config *cfg;
    const gt_model *m;
    const gt_data *data;
    gt_ps ps;
    int W;                     /* this host's workers at the start: its shares of each clock */
    int H;                     /* hosts (processes) in the run; 1 without MPI */
    int host;                  /* this host's rank: 0 evaluates, logs and checkpoints */
    int Wg;                    /* workers of all hosts: the shares of a clock */
    int share0;                /* global index of this host's first share */
    worker *workers;
    gt_device *evaluator;
    size_t n;                  /* parameters */
    uint32_t ntrain;
    uint32_t *perm;
    uint32_t span_lo, span_n;  /* hogwild: the positions of the permutation this host trains on */
    int batch;
    double t0;
    float *xsnap, *xavg;       /* cross-host averaging: the store as pulled, then the hosts' mean */

    pthread_mutex_t mu;        /* guards everything below */
    pthread_cond_t cv;
    int nlive;
    uint32_t epoch;            /* current epoch (0-based) */
    int halt;                  /* workers leave at the next check */
    int leave;                 /* set by the epoch barrier's leader: every worker leaves there */
    int halt_seen;             /* halt as a barrier's leader saw it: the same for every worker */
    int complete_seen;         /* whether clocks [applied, pending_upto] had all their shares then */
    uint64_t pending_upto;     /* the last clock the workers at a sync/local barrier worked on */
    int failed;                /* a fatal error (error[]) ends the run */
    char error[GT_ERRLEN];
    int bar_count;
    uint64_t bar_gen;
    void (*bar_fn)(struct run *r); /* leader work of the barrier being waited at */
    /* clocked modes */
    uint32_t clocks;           /* clocks per epoch */
    uint64_t start_clock;      /* resumed runs start the first epoch here */
    int R;                     /* clocks in flight: ssp staleness + 1, local --sync-every, sync 1 */
    int nslots;                /* gradient slot rings: R, or 1 for local (replicas to average) */
    float *slots;              /* nslots * W * n */
    uint64_t local_done;       /* local: clocks done when the averaging in progress began */
    uint64_t *claimed, *deposited; /* per ring slot: bit per share */
    uint64_t *slot_read_clock; /* per ring slot: lowest applied count its gradients were read at */
    uint64_t applied;          /* clocks applied this epoch */
    int applying;              /* ssp: a worker is applying clock `applied` */
    uint64_t spread_max;
    /* hogwild */
    uint64_t cursor;           /* dynamic: next batch */
    uint64_t pipe_inflight;    /* --overlap: batches taken and begun but not yet pushed */
    uint32_t nbatches;         /* dynamic: batches per epoch */
    range orphans[GT_MAX_WORKERS * 2];
    int norphans;
    uint64_t host_batches;     /* across hosts: batches completed this epoch, which time the */
    uint64_t xavg_last;        /* averaging rounds; host_batches at the last round */
    int stop_sig;              /* across hosts: the signal the hosts agreed to stop on */
    /* statistics since the last evaluation */
    double loss_acc;
    uint64_t correct_acc, seen_acc;
    _Atomic uint64_t samples_total;
    uint64_t next_eval;        /* samples at which the next mid-epoch evaluation is due */
    uint64_t next_ckpt;        /* clocks/updates at which the next step checkpoint is due */
    uint64_t skipped;
    /* jobs for the calling thread */
    job jobs[MAX_JOBS];
    int njobs;
    int done;
    double t_done;             /* when the last worker finished: training wall time ends here */
    double barrier_wait_s;
    FILE *log;
    pthread_mutex_t log_mu;
} run;

/* ---- signals ---------------------------------------------------------------------------------- */

/* Lock-free atomics are async-signal-safe, and unlike a volatile flag they are not a data race
 * when worker threads read them. */
static _Atomic int g_stop_signal;

static void on_signal(int sig)
{
    if (atomic_exchange(&g_stop_signal, sig))
        _exit(128 + sig);
}

void gt_train_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL); /* a closed terminal saves and exits like SIGTERM */
    signal(SIGPIPE, SIG_IGN);      /* a closed stdout pipe: printing fails with EPIPE, the run goes on */
}

int gt_train_stop_signal(void) { return atomic_load(&g_stop_signal); }

/* Whether a signal stops this host now. Across hosts a signal is acted on only where the hosts
 * agree (hosts_stop_signal), or one host would leave the others waiting in a collective. */
static int stop_asked(const run *r) { return r->H == 1 && atomic_load(&g_stop_signal); }

/* ---- small helpers ---------------------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int is_clocked(const run *r) { return r->cfg->mode != GT_MODE_HOGWILD; }

/* samples_total counts the samples of every host (this host's times H), so progress, and with it
 * the learning rate, is the same on every host and as on one host with all the workers. */
static double run_progress_epochs(const run *r, uint64_t samples_total)
{
    return (double)samples_total / (double)r->ntrain;
}

/* Steps of an epoch as checkpoints count them: clocks, hogwild batches from the shared cursor,
 * or batches of each worker's own slice (--balance static). */
static uint64_t epoch_steps(const run *r)
{
    if (is_clocked(r))
        return r->clocks;
    if (r->cfg->balance == GT_BALANCE_DYNAMIC)
        return r->nbatches;
    return r->span_n / (uint32_t)r->W / (uint32_t)r->batch;
}

/* hogwild: batches this host trains on per epoch. */
static uint64_t hogwild_batches(const run *r)
{
    return r->cfg->balance == GT_BALANCE_DYNAMIC ? r->nbatches : (uint64_t)r->W * epoch_steps(r);
}

/* Ends the run with an error; the caller holds r->mu. */
static void run_fail_locked(run *r, const char *msg)
{
    if (!r->failed) {
        r->failed = 1;
        snprintf(r->error, sizeof r->error, "%s", msg);
    }
    if (r->cfg->mode == GT_MODE_ALLREDUCE)
        gt_cuda_allreduce_abort(); /* workers may be waiting on each other inside NCCL */
    r->halt = 1;
    pthread_cond_broadcast(&r->cv);
}

static void run_fail(run *r, const char *msg)
{
    pthread_mutex_lock(&r->mu);
    run_fail_locked(r, msg);
    pthread_mutex_unlock(&r->mu);
}

/* Posts a job to the calling thread; waits while the queue is full. Caller holds r->mu. */
static void post_job_locked(run *r, const job *j)
{
    while (r->njobs == MAX_JOBS && !r->failed)
        pthread_cond_wait(&r->cv, &r->mu);
    if (r->failed) {
        free(j->params);
        free(j->state[0]);
        free(j->state[1]);
        return;
    }
    r->jobs[r->njobs++] = *j;
    pthread_cond_broadcast(&r->cv);
}

/* A copy of the store for a job: parameters always, optimizer state for checkpoints. Caller holds
 * r->mu; the store's own stripe locks keep each stripe consistent. */
static int snapshot_locked(run *r, job *j, int kinds, uint32_t epoch, uint64_t step)
{
    memset(j, 0, sizeof *j);
    j->kinds = kinds;
    j->params = malloc(r->n * sizeof(float));
    if (!j->params)
        return -1;
    gt_ps_pull(&r->ps, j->params, NULL);
    if (kinds & JOB_CKPT) {
        for (int i = 0; i < r->ps.nstate; i++) {
            j->state[i] = malloc(r->n * sizeof(float));
            if (!j->state[i])
                return -1;
            for (int s = 0; s < r->ps.nranges; s++) {
                gt_stripe *st = &r->ps.stripes[s];
                if (r->ps.nstripes)
                    pthread_mutex_lock(&st->lock);
                for (size_t k = st->lo; k < st->hi; k++)
                    __atomic_load(&r->ps.state[i][k], &j->state[i][k], __ATOMIC_RELAXED);
                if (r->ps.nstripes)
                    pthread_mutex_unlock(&st->lock);
            }
        }
    }
    j->epoch = epoch;
    j->step = step;
    j->samples = atomic_load(&r->samples_total);
    j->updates = atomic_load(&r->ps.updates);
    j->wall = gt_now() - r->t0;
    if (kinds & JOB_EVAL) {
        j->train_loss = r->seen_acc ? r->loss_acc / (double)r->seen_acc : NAN;
        j->train_acc = r->seen_acc ? (double)r->correct_acc / (double)r->seen_acc : NAN;
        r->loss_acc = 0;
        r->correct_acc = r->seen_acc = 0;
    }
    return 0;
}

/* Only host 0 evaluates and checkpoints; the others just start their next statistics window at
 * the same point, since the hosts' windows are summed at epoch ends. */
static void post_snapshot_locked(run *r, int kinds, uint32_t epoch, uint64_t step)
{
    job j;
    if (r->host != 0) {
        r->loss_acc = 0;
        r->correct_acc = r->seen_acc = 0;
        return;
    }
    if (snapshot_locked(r, &j, kinds, epoch, step) != 0) {
        free(j.params);
        free(j.state[0]);
        free(j.state[1]);
        run_fail_locked(r, "out of memory for a snapshot of the parameters");
        return;
    }
    post_job_locked(r, &j);
}

/* Mid-epoch evaluation and step checkpoints fall due by samples and clocks. Caller holds r->mu. */
static void maybe_post_due_locked(run *r, uint64_t step_in_epoch, uint64_t clocks_total)
{
    int kinds = 0;
    uint64_t samples = atomic_load(&r->samples_total);
    if (r->next_eval && samples >= r->next_eval) {
        if (step_in_epoch < epoch_steps(r)) /* at the epoch's end its own evaluation follows */
            kinds |= JOB_EVAL;
        uint64_t every = (uint64_t)r->cfg->eval_every * (uint64_t)r->batch * (uint64_t)r->Wg;
        while (r->next_eval <= samples)
            r->next_eval += every;
    }
    if (r->next_ckpt && clocks_total >= r->next_ckpt) {
        kinds |= JOB_CKPT;
        while (r->next_ckpt <= clocks_total)
            r->next_ckpt += (uint64_t)r->cfg->checkpoint_every;
    }
    if (kinds)
        post_snapshot_locked(r, kinds, r->epoch, step_in_epoch);
}

static void account_step_locked(run *r, worker *w, const gt_step_out *o, int n)
{
    r->loss_acc += o->loss_sum;
    r->correct_acc += (uint64_t)o->correct;
    r->seen_acc += (uint64_t)n;
    atomic_fetch_add(&r->samples_total, (uint64_t)n * (uint64_t)r->H);
    atomic_fetch_add(&w->steps, 1);
    atomic_fetch_add(&w->samples, (uint64_t)n);
    atomic_store(&w->last_progress_ns, now_ns());
}

static void log_step(run *r, worker *w, uint64_t step, double loss, int n)
{
    if (!r->log || !r->cfg->log_steps)
        return;
    pthread_mutex_lock(&r->log_mu);
    fprintf(r->log, "{\"type\":\"step\",\"worker\":%d,\"epoch\":%u,\"step\":%llu,\"loss\":%.9g}\n",
            r->share0 + w->index, r->epoch + 1, (unsigned long long)step, loss / n);
    pthread_mutex_unlock(&r->log_mu);
}

/* ---- barrier over the live workers ------------------------------------------------------------ */

typedef void (*leader_fn)(run *r);

static void barrier_complete_locked(run *r)
{
    leader_fn fn = r->bar_fn;
    r->bar_count = 0;
    r->bar_fn = NULL;
    if (fn)
        fn(r);
    r->bar_gen++;
    pthread_cond_broadcast(&r->cv);
}

/* Waits for every live worker; the last to arrive runs fn (under r->mu) before releasing them.
 * Live workers always wait at the same barrier, so the first arrival's fn is everyone's. */
static void run_barrier(run *r, worker *w, leader_fn fn)
{
    double t = gt_now();
    pthread_mutex_lock(&r->mu);
    uint64_t gen = r->bar_gen;
    if (r->bar_count == 0)
        r->bar_fn = fn;
    if (++r->bar_count >= r->nlive) {
        barrier_complete_locked(r);
    } else {
        while (gen == r->bar_gen)
            pthread_cond_wait(&r->cv, &r->mu);
    }
    double waited = gt_now() - t;
    w->wait_s += waited;
    r->barrier_wait_s += waited;
    pthread_mutex_unlock(&r->mu);
}

static int shares_complete_locked(run *r, uint64_t from, uint64_t upto);

/* Leader work of the barriers inside sync and local clocks: whether every share is in and whether
 * to halt, as one thread saw it, so every worker released from the barrier takes the same branch
 * (a survivor depositing a left-over share right after the barrier must not split them). */
static void capture_clock_leader(run *r)
{
    r->halt_seen = r->halt;
    r->complete_seen = shares_complete_locked(r, r->applied, r->pending_upto);
}

/* A worker leaves the run. Its shares and batches go to the survivors; a barrier waiting only on
 * it completes. Caller holds r->mu. */
static void worker_leave_locked(run *r, worker *w, const char *why)
{
    atomic_store(&w->alive, 0);
    if (why != w->error)
        snprintf(w->error, sizeof w->error, "%s", why);
    r->nlive--;
    fprintf(stderr, "gputrain: warning: worker %d (%s) left the run: %s\n", r->share0 + w->index,
            w->dev->name, why);
    /* Shares it claimed but never delivered go back to the pool. */
    for (int k = 0; k < r->R && r->claimed; k++)
        r->claimed[k] &= r->deposited[k] | ~(1ull << w->index);
    if (r->nlive == 0) {
        run_fail_locked(r, "every worker failed");
        return;
    }
    if (r->bar_count > 0 && r->bar_count >= r->nlive)
        barrier_complete_locked(r);
    pthread_cond_broadcast(&r->cv);
}

/* ---- across hosts ----------------------------------------------------------------------------- */

/* Averages this host's store with the other hosts' (a hierarchical parameter server): a snapshot
 * is summed over the hosts, and the store moves from the snapshot to the mean, keeping what its
 * workers pushed meanwhile. Optimizer state stays with each host's store. */
static int hosts_average(run *r, gt_err *e)
{
    gt_ps_pull(&r->ps, r->xsnap, NULL);
    memcpy(r->xavg, r->xsnap, r->n * sizeof(float));
    if (gt_cluster_sum_floats(r->xavg, r->n, "the parameters (host average)", e) != 0)
        return -1;
    for (size_t i = 0; i < r->n; i++)
        r->xavg[i] /= (float)r->H;
    gt_ps_rebase_stripes(&r->ps, 0, r->ps.nranges, r->xsnap, r->xavg);
    return 0;
}

/* The hosts agree on stopping: the signal any of them received (the highest), or 0. -1 when the
 * call failed. */
static int hosts_stop_signal(gt_err *e)
{
    int64_t sig = atomic_load(&g_stop_signal);
    if (gt_cluster_max_i64(&sig, 1, "the stop flag", e) != 0)
        return -1;
    return (int)sig;
}

/* Acts on an agreement: an MPI failure ends the run, an agreed signal halts it here as on every
 * other host. Caller holds r->mu. */
static void hosts_agreed_locked(run *r, int sig, const gt_err *e)
{
    if (sig < 0) {
        run_fail_locked(r, e->msg);
    } else if (sig > 0) {
        r->stop_sig = sig;
        r->halt = 1;
        pthread_cond_broadcast(&r->cv);
    }
}

/* One averaging round of hogwild, ssp or local mode: average the stores, agree on stopping. */
static int hosts_round(run *r, gt_err *e)
{
    if (hosts_average(r, e) != 0)
        return -1;
    return hosts_stop_signal(e);
}

/* ---- one batch on the device ------------------------------------------------------------------ */

/* The fault injector (--inject-fault): -1 with the worker's error set when this worker is to fail
 * before its step number `done`. */
static int worker_injected(run *r, worker *w, uint64_t done)
{
    const gt_config *cfg = r->cfg;
    if (cfg->inject_worker == r->share0 + w->index && cfg->inject_step >= 0 &&
        done == (uint64_t)cfg->inject_step) {
        snprintf(w->error, sizeof w->error, "injected fault at step %llu", (unsigned long long)done);
        return -1;
    }
    return 0;
}

/* A step's loss and gradient (d->grad) are finite: 0; else 1 after --on-nan's action. */
static int worker_check(run *r, worker *w, const gt_step_out *o, uint64_t step)
{
    const gt_config *cfg = r->cfg;
    int grad_ok = w->dev->keep_grad || o->grad_status == GT_GRAD_FINITE ||
                  (o->grad_status == GT_GRAD_UNCHECKED && gt_all_finite(w->dev->grad, r->n));
    if (isfinite(o->loss_sum) && grad_ok)
        return 0;
    char msg[GT_ERRLEN];
    snprintf(msg, sizeof msg, "non-finite %s at epoch %u step %llu on worker %d (%s)",
             isfinite(o->loss_sum) ? "gradient" : "loss", r->epoch + 1, (unsigned long long)step,
             r->share0 + w->index, w->dev->name);
    if (cfg->on_nan == GT_NAN_SKIP) {
        pthread_mutex_lock(&r->mu);
        r->skipped++;
        pthread_mutex_unlock(&r->mu);
        return 1;
    }
    run_fail(r, msg);
    return 1;
}

/* Forward and backward on the device; checks the fault injector and non-finite results.
 * Returns 0, 1 when the gradient must be dropped (--on-nan skip), -1 when the worker failed. */
static int worker_compute(run *r, worker *w, const gt_batch *b, gt_step_out *o, uint64_t step)
{
    gt_err e = {{0}};
    if (worker_injected(r, w, atomic_load(&w->steps)))
        return -1;
    if (w->dev->ops->train_step(w->dev, b, o, &e) != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    return worker_check(r, w, o, step);
}

static int worker_pull(run *r, worker *w)
{
    gt_err e = {{0}};
    gt_ps_pull(&r->ps, w->dev->params, w->ver);
    if (w->dev->ops->load_params(w->dev, &e) != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    return 0;
}

static void worker_mark_time(worker *w)
{
    double t = gt_now();
    if (w->t_first == 0)
        w->t_first = t;
    w->t_last = t;
}

/* ---- hogwild ---------------------------------------------------------------------------------- */

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
    if (r->cfg->balance == GT_BALANCE_DYNAMIC) {
        if (r->cursor < r->nbatches) {
            out->lo = r->span_lo + (uint32_t)r->cursor * b;
            out->hi = out->lo + b;
            r->cursor++;
            got = 1;
        }
    } else {
        uint32_t slice = r->span_n / (uint32_t)r->W;
        uint32_t steps = slice / b;
        if (w->slice_pos < steps) {
            out->lo = r->span_lo + (uint32_t)w->index * slice + (uint32_t)w->slice_pos * b;
            out->hi = out->lo + b;
            w->slice_pos++;
            got = 1;
        }
    }
    if (!got && r->norphans > 0) {
        range *o = &r->orphans[r->norphans - 1];
        out->lo = o->lo;
        out->hi = o->hi - o->lo > b ? o->lo + b : o->hi;
        o->lo = out->hi;
        if (o->lo >= o->hi)
            r->norphans--;
        got = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return got;
}

static void hogwild_orphan_locked(run *r, uint32_t lo, uint32_t hi)
{
    if (lo < hi && r->norphans < (int)(sizeof r->orphans / sizeof *r->orphans))
        r->orphans[r->norphans++] = (range){lo, hi};
}

/* hogwild across hosts: every --sync-every x W batches this host completes, the worker that
 * completed the batch averages the hosts' stores while the others go on. Every host's part of the
 * epoch holds the same number of batches, so every host averages at the same counts; rounds run
 * one at a time, in order, and the epoch's last is left to its end. Caller holds r->mu, which is
 * released during the round. */
static void hogwild_hosts_round_locked(run *r)
{
    uint64_t every = (uint64_t)r->cfg->sync_every * (uint64_t)r->W;
    uint64_t due = ++r->host_batches;
    if (r->H == 1 || due % every != 0 || due >= hogwild_batches(r))
        return;
    while (!r->halt && r->xavg_last + every < due)
        pthread_cond_wait(&r->cv, &r->mu);
    if (r->halt)
        return;
    gt_err e = {{0}};
    pthread_mutex_unlock(&r->mu);
    int sig = hosts_round(r, &e);
    pthread_mutex_lock(&r->mu);
    r->xavg_last = due;
    hosts_agreed_locked(r, sig, &e);
    pthread_cond_broadcast(&r->cv);
}

/* A worker that failed with range rg taken: its batches go to the others, and it leaves. */
static void hogwild_fail(run *r, worker *w, const range *rg, int nrg)
{
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < nrg; i++)
        hogwild_orphan_locked(r, rg[i].lo, rg[i].hi);
    if (r->cfg->balance == GT_BALANCE_STATIC && nrg > 0) {
        uint32_t slice = r->span_n / (uint32_t)r->W;
        uint32_t end = r->span_lo + (uint32_t)w->index * slice +
                       slice / (uint32_t)r->batch * (uint32_t)r->batch;
        hogwild_orphan_locked(r, rg[nrg - 1].hi, end);
    }
    r->pipe_inflight -= w->pipe_inflight;
    w->pipe_inflight = 0;
    worker_leave_locked(r, w, w->error);
    pthread_mutex_unlock(&r->mu);
}

/* After a step's push: telemetry, evaluations and checkpoints that fell due (at the position of
 * the batches pushed so far), the stop check and the rounds across hosts. */
static void hogwild_done(run *r, worker *w, const gt_step_out *o, int n, uint64_t step)
{
    log_step(r, w, step, o->loss_sum, n);
    worker_mark_time(w);
    pthread_mutex_lock(&r->mu);
    if (w->pipe_inflight) {
        w->pipe_inflight--;
        r->pipe_inflight--;
    }
    account_step_locked(r, w, o, n);
    maybe_post_due_locked(r, r->cfg->balance == GT_BALANCE_DYNAMIC
                                 ? r->cursor - r->pipe_inflight
                                 : w->slice_pos - w->pipe_inflight,
                          atomic_load(&r->ps.updates));
    if (stop_asked(r))
        r->halt = 1;
    hogwild_hosts_round_locked(r);
    pthread_mutex_unlock(&r->mu);
}

static void hogwild_epoch(run *r, worker *w)
{
    const gt_config *cfg = r->cfg;
    range rg;
    while (hogwild_next(r, w, &rg)) {
        gt_batch b = {.ds = &r->data->train, .idx = r->perm + rg.lo, .n = (int)(rg.hi - rg.lo),
                      .epoch = r->epoch, .seed = cfg->seed};
        uint64_t step = atomic_load(&w->steps);
        gt_step_out o = {0};
        int rc = worker_pull(r, w);
        if (rc == 0)
            rc = worker_compute(r, w, &b, &o, step);
        if (rc < 0) {
            hogwild_fail(r, w, &rg, 1);
            return;
        }
        if (rc == 0)
            gt_ps_push(&r->ps, w->index, r->W, w->dev->grad, 1.0f, w->ver,
                       run_progress_epochs(r, atomic_load(&r->samples_total)));
        hogwild_done(r, w, &o, b.n, step);
    }
}

/* ---- hogwild --overlap ------------------------------------------------------------------------- */

/* One step of the overlapped loop: its batch, the buffers it pulled into and its results. */
typedef struct pipe_step {
    range rg;
    gt_batch b;
    uint64_t step;
    int buf;
    gt_step_out o;
} pipe_step;

/* Pulls into the step's buffers and begins it on the device (a device without step_begin, the
 * CPU, computes it here: the same schedule, so the same arithmetic). */
static int pipe_begin(run *r, worker *w, pipe_step *p)
{
    gt_device *d = w->dev;
    gt_err e = {{0}};
    if (worker_injected(r, w, p->step))
        return -1;
    d->params = w->pbuf[p->buf];
    d->grad = w->gbuf[p->buf];
    gt_ps_pull(&r->ps, d->params, w->vbuf[p->buf]);
    int rc = d->ops->step_begin ? d->ops->step_begin(d, &p->b, &e)
                                : d->ops->load_params(d, &e) || d->ops->train_step(d, &p->b, &p->o, &e);
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
    if (d->ops->step_end && d->ops->step_end(d, &p->o, &e)) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    d->grad = w->gbuf[p->buf];
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
                              .n = (int)(p->rg.hi - p->rg.lo), .epoch = r->epoch, .seed = cfg->seed};
            p->step = atomic_load(&w->steps) + (uint64_t)nq;
            p->o = (gt_step_out){0};
            p->buf = w->pipe_buf;
            w->pipe_buf ^= 1;
            pthread_mutex_lock(&r->mu);
            w->pipe_inflight++;
            r->pipe_inflight++;
            pthread_mutex_unlock(&r->mu);
            nq++;
            if (pipe_begin(r, w, p) < 0)
                goto failed;
            p = &q[(head + nq) % 2];
        }
        if (nq == 0)
            return;
        pipe_step *o = &q[head];
        int rc = pipe_end(r, w, o);
        if (rc < 0)
            goto failed;
        if (rc == 0)
            gt_ps_push(&r->ps, w->index, r->W, w->gbuf[o->buf], 1.0f, w->vbuf[o->buf],
                       run_progress_epochs(r, atomic_load(&r->samples_total)));
        hogwild_done(r, w, &o->o, o->b.n, o->step);
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

/* ---- clocked modes: sync, ssp, local ---------------------------------------------------------- */

static float *slot_of(run *r, uint64_t clock, int share)
{
    return r->slots + ((size_t)(clock % (uint64_t)r->nslots) * (size_t)r->W + (size_t)share) * r->n;
}

static uint64_t full_mask(const run *r)
{
    return r->W == 64 ? ~0ull : (1ull << r->W) - 1;
}

/* Claims an unclaimed share of a clock in [applied, upto]: the worker's own share of `upto`, or
 * one a failed worker left behind. Returns the share or -1. Caller holds r->mu. */
static int claim_share_locked(run *r, worker *w, uint64_t upto, uint64_t *clock_out)
{
    for (uint64_t c = r->applied; c <= upto && c < r->applied + (uint64_t)r->R; c++) {
        uint64_t *cl = &r->claimed[c % (uint64_t)r->R];
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

static int claim_and_compute(run *r, worker *w, uint64_t upto);

/* The samples of one of this host's shares: clock c's global batch holds every host's shares in
 * host order. */
static void gather_share(run *r, uint64_t clock, int share, gt_batch *b)
{
    size_t pos = ((size_t)clock * (size_t)r->Wg + (size_t)(r->share0 + share)) * (size_t)r->batch;
    b->ds = &r->data->train;
    b->idx = r->perm + pos;
    b->n = r->batch;
    b->epoch = r->epoch;
    b->seed = r->cfg->seed;
}

/* Sums the slots of one clock in share order into share 0's slot, over stripes [s_lo, s_hi). */
static void reduce_slots(run *r, uint64_t clock, int s_lo, int s_hi)
{
    float *dst = slot_of(r, clock, 0);
    for (int s = 1; s < r->W; s++) {
        const float *src = slot_of(r, clock, s);
        for (int k = s_lo; k < s_hi; k++)
            for (size_t i = r->ps.stripes[k].lo; i < r->ps.stripes[k].hi; i++)
                dst[i] += src[i];
    }
}

/* The scale of a clock's summed gradient: the mean over every host's shares in sync, where all
 * hosts apply the same sum; over this host's in ssp, whose store is averaged with the others'. */
static float clock_gscale(const run *r)
{
    return 1.0f / (float)(r->cfg->mode == GT_MODE_SYNC ? r->Wg : r->W);
}

/* Applies clock c's summed gradient to stripes [s_lo, s_hi). */
static void apply_clock(run *r, uint64_t clock, int s_lo, int s_hi, uint64_t t, double epoch)
{
    reduce_slots(r, clock, s_lo, s_hi);
    gt_ps_apply_stripes(&r->ps, s_lo, s_hi, slot_of(r, clock, 0), clock_gscale(r), t, epoch);
}

/* Computes one share of a clock into its slot (local mode: one local optimizer step instead).
 * Returns 0, or -1 when the worker failed. */
static int clocked_share(run *r, worker *w, uint64_t clock, int share)
{
    gt_batch b;
    gt_step_out o = {0};
    gather_share(r, clock, share, &b);
    int rc = worker_compute(r, w, &b, &o, clock);
    if (rc < 0)
        return -1;
    float *slot = r->cfg->mode == GT_MODE_LOCAL ? NULL : slot_of(r, clock, share);
    if (slot) {
        if (rc == 0)
            memcpy(slot, w->dev->grad, r->n * sizeof(float));
        else
            memset(slot, 0, r->n * sizeof(float));
    } else if (rc == 0) {
        gt_err e = {{0}};
        gt_optim_step st = gt_optim_prepare(&r->cfg->optim, ++w->local_updates,
                                            run_progress_epochs(r, atomic_load(&r->samples_total)));
        gt_optim_apply(&r->cfg->optim, &st, w->dev->params, w->dev->grad, 1.0f, w->state[0],
                       w->state[1], r->n);
        if (w->dev->ops->load_params(w->dev, &e) != 0) {
            snprintf(w->error, sizeof w->error, "%s", e.msg);
            return -1;
        }
    }
    log_step(r, w, clock, o.loss_sum, b.n);
    worker_mark_time(w);
    pthread_mutex_lock(&r->mu);
    account_step_locked(r, w, &o, b.n);
    r->deposited[clock % (uint64_t)r->R] |= 1ull << share;
    /* ssp: a worker whose share of its clock is in is at the next clock from now on, so that one
     * that starts a clock the moment this one is applied measures the spread right. */
    if (r->cfg->mode == GT_MODE_SSP && clock == w->clock)
        w->clock = clock + 1;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* ssp: whoever finds the oldest clock complete applies it, in clock order, outside the run lock
 * (the applying flag keeps it to one thread at a time). Caller holds r->mu. */
static void ssp_apply_ready_locked(run *r)
{
    while (!r->applying && r->deposited[r->applied % (uint64_t)r->R] == full_mask(r)) {
        uint64_t c = r->applied, k = c % (uint64_t)r->R;
        r->applying = 1;
        uint64_t t = atomic_load(&r->ps.updates) + 1;
        double ep = run_progress_epochs(r, atomic_load(&r->samples_total));
        /* Across hosts, every --sync-every clocks; the epoch's last round is left to its end. */
        int round = r->H > 1 && !r->halt && (c + 1) % (uint64_t)r->cfg->sync_every == 0 &&
                    c + 1 < r->clocks;
        gt_err e = {{0}};
        int sig = 0;
        pthread_mutex_unlock(&r->mu);
        apply_clock(r, c, 0, r->ps.nranges, t, ep);
        if (round)
            sig = hosts_round(r, &e);
        pthread_mutex_lock(&r->mu);
        hosts_agreed_locked(r, sig, &e);
        atomic_store(&r->ps.updates, t);
        gt_ps_note_staleness(&r->ps, c - r->slot_read_clock[k]);
        r->claimed[k] = r->deposited[k] = 0;
        r->slot_read_clock[k] = UINT64_MAX;
        r->applied = c + 1;
        r->applying = 0;
        maybe_post_due_locked(r, r->applied, (uint64_t)r->epoch * r->clocks + r->applied);
        pthread_cond_broadcast(&r->cv);
    }
}

static void sync_after_apply_leader(run *r)
{
    uint64_t c = r->applied;
    gt_ps_note_staleness(&r->ps, 0);
    r->claimed[c % (uint64_t)r->R] = 0;
    r->deposited[c % (uint64_t)r->R] = 0;
    r->applied = c + 1;
    atomic_fetch_add(&r->ps.updates, 1);
    maybe_post_due_locked(r, r->applied, (uint64_t)r->epoch * r->clocks + r->applied);
    if (stop_asked(r))
        r->halt = 1;
}

/* sync across hosts: the clock's gradient, summed over this host's shares, is summed over the
 * hosts, so every host applies the same update to its store; and the hosts agree on stopping. */
static void sync_hosts_leader(run *r)
{
    gt_err e = {{0}};
    if (r->failed)
        return;
    int sig = -1;
    if (gt_cluster_sum_floats(slot_of(r, r->applied, 0), r->n, "the sync gradient", &e) == 0)
        sig = hosts_stop_signal(&e);
    hosts_agreed_locked(r, sig, &e);
}

static int live_rank_locked(run *r, worker *w, int *nlive)
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

/* One clock of sync mode: everyone computes on the same parameters; the summed gradient is
 * applied, split by stripe across the live workers, between two barriers. A share whose worker
 * failed during the clock is taken by a survivor after the first barrier. */
static int sync_clock(run *r, worker *w, uint64_t c)
{
    if (worker_pull(r, w) != 0)
        return -1;
    for (;;) {
        if (claim_and_compute(r, w, c) != 0)
            return -1;
        pthread_mutex_lock(&r->mu);
        r->pending_upto = c;
        pthread_mutex_unlock(&r->mu);
        run_barrier(r, w, capture_clock_leader);
        pthread_mutex_lock(&r->mu);
        int complete = r->complete_seen, halt = r->halt_seen;
        pthread_mutex_unlock(&r->mu);
        if (complete)
            break;
        if (halt)
            return 0;
    }
    int nlive;
    pthread_mutex_lock(&r->mu);
    int rank = live_rank_locked(r, w, &nlive);
    uint64_t t = atomic_load(&r->ps.updates) + 1;
    double ep = run_progress_epochs(r, atomic_load(&r->samples_total));
    pthread_mutex_unlock(&r->mu);
    int s_lo = (int)((int64_t)r->ps.nranges * rank / nlive);
    int s_hi = (int)((int64_t)r->ps.nranges * (rank + 1) / nlive);
    if (r->H == 1) {
        apply_clock(r, c, s_lo, s_hi, t, ep);
    } else {
        /* Sum this host's shares, then the hosts' sums; apply what is then in slot 0 once. */
        reduce_slots(r, c, s_lo, s_hi);
        run_barrier(r, w, sync_hosts_leader);
        gt_ps_apply_stripes(&r->ps, s_lo, s_hi, slot_of(r, c, 0), clock_gscale(r), t, ep);
    }
    run_barrier(r, w, sync_after_apply_leader);
    return 0;
}

/* The clock of the slowest live worker. Caller holds r->mu. */
static uint64_t slowest_clock_locked(run *r)
{
    uint64_t m = UINT64_MAX;
    for (int i = 0; i < r->W; i++)
        if (atomic_load(&r->workers[i].alive) && r->workers[i].clock < m)
            m = r->workers[i].clock;
    return m;
}

/* One clock of ssp: wait until at most `staleness` clocks are unapplied, compute on whatever the
 * store holds, deposit; whoever completes the oldest clock applies it. */
static int ssp_clock(run *r, worker *w, uint64_t c)
{
    uint64_t s = (uint64_t)r->R - 1; /* --staleness, capped by the clocks the slots hold */
    double t = gt_now();
    pthread_mutex_lock(&r->mu);
    while (!r->halt && r->applied + s < c)
        pthread_cond_wait(&r->cv, &r->mu);
    w->wait_s += gt_now() - t;
    if (r->halt) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    w->clock = c;
    uint64_t spread = c - slowest_clock_locked(r);
    if (spread > r->spread_max)
        r->spread_max = spread;
    uint64_t *read_at = &r->slot_read_clock[c % (uint64_t)r->R];
    if (r->applied < *read_at)
        *read_at = r->applied;
    pthread_mutex_unlock(&r->mu);
    if (worker_pull(r, w) != 0 || claim_and_compute(r, w, c) != 0)
        return -1;
    pthread_mutex_lock(&r->mu);
    w->clock = c + 1;
    ssp_apply_ready_locked(r);
    if (stop_asked(r)) {
        r->halt = 1;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Claims and computes shares of clocks up to `upto` until none is left. */
static int claim_and_compute(run *r, worker *w, uint64_t upto)
{
    for (;;) {
        uint64_t cc;
        pthread_mutex_lock(&r->mu);
        int share = claim_share_locked(r, w, upto, &cc);
        pthread_mutex_unlock(&r->mu);
        if (share < 0)
            return 0;
        if (clocked_share(r, w, cc, share) != 0)
            return -1;
    }
}

/* Whether every share of clocks [from, upto] is in. Caller holds r->mu. */
static int shares_complete_locked(run *r, uint64_t from, uint64_t upto)
{
    for (uint64_t c = from; c <= upto; c++)
        if (r->deposited[c % (uint64_t)r->R] != full_mask(r))
            return 0;
    return 1;
}

/* local mode: after the second averaging barrier the store holds the host's average; across
 * hosts it becomes the average of the hosts' (every host has as many replicas, so this is the
 * mean of all replicas) before anyone pulls it. */
static void local_average_leader(run *r)
{
    for (uint64_t c = r->applied; c < r->local_done; c++)
        r->claimed[c % (uint64_t)r->R] = r->deposited[c % (uint64_t)r->R] = 0;
    r->applied = r->local_done;
    atomic_store(&r->ps.updates, (uint64_t)r->epoch * r->clocks + r->applied);
    if (r->H > 1 && !r->failed) {
        gt_err e = {{0}};
        int sig = hosts_round(r, &e);
        hosts_agreed_locked(r, sig, &e);
    }
    maybe_post_due_locked(r, r->applied, (uint64_t)r->epoch * r->clocks + r->applied);
    if (stop_asked(r))
        r->halt = 1;
}

/* Averages the live replicas into the store, stripes split across the live workers, and pulls
 * the average back. First every share of the interval must be in: a share a failed worker left is
 * trained by a survivor. Optimizer state stays with each replica, as in Darknet. */
static int local_average(run *r, worker *w, uint64_t upto)
{
    for (;;) {
        if (claim_and_compute(r, w, upto) != 0)
            return -1;
        pthread_mutex_lock(&r->mu);
        r->pending_upto = upto;
        pthread_mutex_unlock(&r->mu);
        run_barrier(r, w, capture_clock_leader);
        pthread_mutex_lock(&r->mu);
        int complete = r->complete_seen, halt = r->halt_seen;
        r->local_done = upto + 1;
        pthread_mutex_unlock(&r->mu);
        if (complete)
            break;
        if (halt)
            return 0;
    }
    memcpy(slot_of(r, 0, w->index), w->dev->params, r->n * sizeof(float));
    run_barrier(r, w, NULL);
    int nlive;
    pthread_mutex_lock(&r->mu);
    int rank = live_rank_locked(r, w, &nlive);
    pthread_mutex_unlock(&r->mu);
    int s_lo = (int)((int64_t)r->ps.nranges * rank / nlive);
    int s_hi = (int)((int64_t)r->ps.nranges * (rank + 1) / nlive);
    float *dst = slot_of(r, 0, w->index);
    for (int k = s_lo; k < s_hi; k++) {
        for (size_t i = r->ps.stripes[k].lo; i < r->ps.stripes[k].hi; i++) {
            double sum = 0;
            for (int s = 0; s < r->W; s++)
                if (atomic_load(&r->workers[s].alive))
                    sum += slot_of(r, 0, s)[i];
            dst[i] = (float)(sum / nlive);
        }
    }
    gt_ps_store_stripes(&r->ps, s_lo, s_hi, dst);
    run_barrier(r, w, local_average_leader);
    return worker_pull(r, w);
}

/* One clock of local mode: a local step on the worker's own share of the clock, and on shares a
 * failed worker left in this averaging interval. */
static int local_clock(run *r, worker *w, uint64_t c)
{
    if (claim_and_compute(r, w, c) != 0)
        return -1;
    if ((c + 1) % (uint64_t)r->cfg->sync_every == 0 || c + 1 == r->clocks)
        return local_average(r, w, c);
    return 0;
}

/* allreduce: worker 0 brings the replica's parameters and optimizer state into the store, where
 * evaluation and checkpoints read them. The other workers never touch the store. */
static int allreduce_publish(run *r, worker *w)
{
    gt_err e = {{0}};
    if (w->dev->ops->get_params(w->dev, r->ps.state[0], r->ps.state[1], &e) != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    gt_ps_store_stripes(&r->ps, 0, r->ps.nranges, w->dev->params);
    return 0;
}

/* The stop check of allreduce: every worker must leave at the same clock or the others would wait
 * in the all-reduce forever, so a signal is acted on at a barrier every 64 clocks, where across
 * hosts the hosts agree. */
static void allreduce_stop_leader(run *r)
{
    if (r->H > 1 && !r->failed) {
        gt_err e = {{0}};
        int sig = hosts_stop_signal(&e);
        hosts_agreed_locked(r, sig, &e);
    } else if (stop_asked(r)) {
        r->halt = 1;
    }
}

/* One clock of allreduce: the worker's share, the gradient summed over the GPUs by NCCL and one
 * optimizer update of every replica on its own GPU. No host traffic but the loss. */
static int allreduce_clock(run *r, worker *w, uint64_t c)
{
    gt_batch b;
    gt_step_out o = {0};
    gt_err e = {{0}};
    gather_share(r, c, w->index, &b);
    if (worker_compute(r, w, &b, &o, c) < 0)
        return -1;
    uint64_t t = (uint64_t)r->epoch * r->clocks + c + 1;
    gt_optim_step st = gt_optim_prepare(&r->cfg->optim, t, run_progress_epochs(r, atomic_load(&r->samples_total)));
    if (w->dev->ops->reduce_update(w->dev, &r->cfg->optim, &st, 1.0f / (float)r->Wg, &e) != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    log_step(r, w, c, o.loss_sum, b.n);
    worker_mark_time(w);
    pthread_mutex_lock(&r->mu);
    account_step_locked(r, w, &o, b.n);
    if (w->index == 0) {
        atomic_store(&r->ps.updates, t);
        uint64_t total = (uint64_t)r->epoch * r->clocks + c + 1;
        int due = (r->next_eval && atomic_load(&r->samples_total) >= r->next_eval) ||
                  (r->next_ckpt && total >= r->next_ckpt);
        if (due) {
            pthread_mutex_unlock(&r->mu);
            if (allreduce_publish(r, w) != 0)
                return -1;
            pthread_mutex_lock(&r->mu);
            r->applied = c + 1;
            maybe_post_due_locked(r, c + 1, total);
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (c % 64 == 63)
        run_barrier(r, w, allreduce_stop_leader);
    return 0;
}

static void clocked_epoch(run *r, worker *w, uint64_t first_clock)
{
    if (r->cfg->mode == GT_MODE_LOCAL && worker_pull(r, w) != 0) {
        pthread_mutex_lock(&r->mu);
        worker_leave_locked(r, w, w->error);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    uint64_t done = first_clock;
    for (uint64_t c = first_clock; c < r->clocks; c++, done = c) {
        pthread_mutex_lock(&r->mu);
        int halt = r->halt;
        pthread_mutex_unlock(&r->mu);
        if (halt)
            break;
        int rc;
        if (r->cfg->mode == GT_MODE_SYNC)
            rc = sync_clock(r, w, c);
        else if (r->cfg->mode == GT_MODE_ALLREDUCE)
            rc = allreduce_clock(r, w, c);
        else if (r->cfg->mode == GT_MODE_SSP)
            rc = ssp_clock(r, w, c);
        else
            rc = local_clock(r, w, c);
        if (rc != 0) {
            pthread_mutex_lock(&r->mu);
            if (r->cfg->mode == GT_MODE_ALLREDUCE) {
                /* Replicas cannot go on without one of them: end the run, and release the GPUs
                 * that wait for this one in the all-reduce. */
                char msg[GT_ERRLEN];
                snprintf(msg, sizeof msg, "worker %d (%.60s): %.400s", r->share0 + w->index,
                         w->dev->name, w->error);
                run_fail_locked(r, msg);
            }
            worker_leave_locked(r, w, w->error);
            pthread_mutex_unlock(&r->mu);
            return;
        }
    }
    if (r->cfg->mode == GT_MODE_ALLREDUCE && w->index == 0) {
        /* Where the replicas stand, for the epoch's evaluation or an interrupted run's checkpoint. */
        int rc = allreduce_publish(r, w);
        pthread_mutex_lock(&r->mu);
        if (rc != 0)
            run_fail_locked(r, w->error);
        r->applied = done;
        pthread_mutex_unlock(&r->mu);
    }
    if (r->cfg->mode == GT_MODE_SSP) {
        /* Drain: help finish shares of clocks that are still open, then wait for all applies. */
        pthread_mutex_lock(&r->mu);
        for (;;) {
            uint64_t cc;
            int share = claim_share_locked(r, w, r->clocks - 1, &cc);
            if (share >= 0) {
                pthread_mutex_unlock(&r->mu);
                if (clocked_share(r, w, cc, share) != 0) {
                    pthread_mutex_lock(&r->mu);
                    worker_leave_locked(r, w, w->error);
                    pthread_mutex_unlock(&r->mu);
                    return;
                }
                pthread_mutex_lock(&r->mu);
                continue;
            }
            ssp_apply_ready_locked(r);
            if (r->halt || r->applied >= r->clocks)
                break;
            pthread_cond_wait(&r->cv, &r->mu);
        }
        pthread_mutex_unlock(&r->mu);
    }
}

/* ---- epochs ----------------------------------------------------------------------------------- */

/* Whether this epoch's batches are all done. Caller holds r->mu. */
static int epoch_complete_locked(run *r)
{
    if (is_clocked(r))
        return r->applied >= r->clocks;
    if (r->norphans > 0)
        return 0;
    if (r->cfg->balance == GT_BALANCE_DYNAMIC)
        return r->cursor >= r->nbatches;
    for (int i = 0; i < r->W; i++)
        if (atomic_load(&r->workers[i].alive) && r->workers[i].slice_pos < epoch_steps(r))
            return 0;
    return 1;
}

/* Across hosts an epoch ends on every host or on none: the hosts agree on stopping and on whether
 * each finished the epoch (one that stopped short did not); then the stores of hogwild and ssp
 * are averaged and the training statistics summed, so host 0 reports the whole epoch. Returns
 * whether the epoch ends. Caller holds r->mu. */
static int hosts_epoch_end_locked(run *r)
{
    gt_err e = {{0}};
    int64_t agree[2] = {atomic_load(&g_stop_signal), !epoch_complete_locked(r)};
    if (gt_cluster_max_i64(agree, 2, "the end-of-epoch agreement", &e) != 0) {
        run_fail_locked(r, e.msg);
        return 0;
    }
    hosts_agreed_locked(r, (int)agree[0], &e);
    if (agree[1])
        return 0;
    double stats[3] = {r->loss_acc, (double)r->correct_acc, (double)r->seen_acc};
    int average = r->cfg->mode == GT_MODE_HOGWILD || r->cfg->mode == GT_MODE_SSP;
    if ((average && hosts_average(r, &e) != 0) ||
        gt_cluster_sum_doubles(stats, 3, "the training statistics", &e) != 0) {
        run_fail_locked(r, e.msg);
        return 0;
    }
    r->loss_acc = stats[0];
    r->correct_acc = (uint64_t)stats[1];
    r->seen_acc = (uint64_t)stats[2];
    return 1;
}

/* Last worker at the end of an epoch: evaluation snapshot, checkpoint, next permutation. A run
 * stopped by a signal part-way through an epoch posts nothing: the calling thread saves it. */
static void epoch_end_leader(run *r)
{
    /* Workers decide to leave here, all together: a halt seen at different instants before the
     * barrier would send one worker home while another waits for it at the next one. */
    r->leave = r->halt;
    if (r->failed || !(r->H > 1 ? hosts_epoch_end_locked(r) : epoch_complete_locked(r)))
        return;
    const gt_config *cfg = r->cfg;
    uint32_t done = r->epoch + 1;
    int last = done >= (uint32_t)cfg->epochs || r->halt;
    int kinds = JOB_EVAL;
    if (cfg->checkpoint[0] &&
        (last || (!cfg->checkpoint_every_steps && cfg->checkpoint_every > 0 &&
                  done % (uint32_t)cfg->checkpoint_every == 0)))
        kinds |= JOB_CKPT;
    post_snapshot_locked(r, kinds, done, 0);
    r->epoch = done;
    r->applied = 0;
    r->cursor = 0;
    r->start_clock = 0;
    r->host_batches = r->xavg_last = 0;
    for (int k = 0; k < r->R; k++) {
        r->claimed[k] = r->deposited[k] = 0;
        r->slot_read_clock[k] = UINT64_MAX;
    }
    for (int i = 0; i < r->W; i++) {
        r->workers[i].slice_pos = 0;
        r->workers[i].clock = 0;
    }
    if (!last)
        gt_permutation(r->perm, r->ntrain, cfg->seed, r->epoch);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    run *r = w->run;
    atomic_store(&w->last_progress_ns, now_ns());
    if (r->cfg->mode == GT_MODE_ALLREDUCE) {
        /* Every replica starts from the store: parameters and (resumed) optimizer state. */
        gt_err e = {{0}};
        w->dev->keep_grad = 1;
        if (worker_pull(r, w) != 0 ||
            w->dev->ops->set_state(w->dev, r->ps.state[0], r->ps.state[1], &e) != 0) {
            if (e.msg[0])
                snprintf(w->error, sizeof w->error, "%s", e.msg);
            pthread_mutex_lock(&r->mu);
            char msg[GT_ERRLEN];
            snprintf(msg, sizeof msg, "worker %d (%.60s): %.400s", r->share0 + w->index,
                     w->dev->name, w->error);
            run_fail_locked(r, msg);
            worker_leave_locked(r, w, w->error);
            r->done++;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            return NULL;
        }
    }
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int stop = r->leave || r->epoch >= (uint32_t)r->cfg->epochs;
        uint64_t first = r->start_clock;
        pthread_mutex_unlock(&r->mu);
        if (stop || !atomic_load(&w->alive))
            break;
        if (is_clocked(r))
            clocked_epoch(r, w, first);
        else if (r->cfg->overlap)
            hogwild_epoch_overlap(r, w);
        else
            hogwild_epoch(r, w);
        if (!atomic_load(&w->alive))
            break;
        run_barrier(r, w, epoch_end_leader);
    }
    pthread_mutex_lock(&r->mu);
    if (++r->done == r->W)
        r->t_done = gt_now();
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* ---- the calling thread: evaluation, log, checkpoints, signals, watchdog ----------------------- */

static int evaluate_snapshot(run *r, const float *params, double *loss, double *acc, gt_err *e)
{
    gt_device *d = r->evaluator;
    gt_step_out o = {0};
    memcpy(d->params, params, r->n * sizeof(float));
    if (d->ops->load_params(d, e) != 0)
        return -1;
    if (d->ops->evaluate(d, &r->data->test, 0, r->data->test.n, &o, e) != 0)
        return -1;
    *loss = o.loss_sum / r->data->test.n;
    *acc = (double)o.correct / r->data->test.n;
    return 0;
}

static const char *mode_name(gt_mode m)
{
    static const char *names[] = {"hogwild", "sync", "ssp", "local", "allreduce"};
    return names[m];
}

static int write_checkpoint(run *r, const job *j, gt_run_result *res, gt_err *e)
{
    const gt_config *cfg = r->cfg;
    gt_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model_spec, sizeof meta.model_spec, "%s", r->m->spec);
    snprintf(meta.model, sizeof meta.model, "%s", r->m->name);
    snprintf(meta.mode, sizeof meta.mode, "%s", mode_name(cfg->mode));
    snprintf(meta.optimizer, sizeof meta.optimizer, "%s", cfg->optim.kind == GT_OPT_ADAM ? "adam" : "sgd");
    meta.in_c = r->m->in_c;
    meta.in_h = r->m->in_h;
    meta.in_w = r->m->in_w;
    meta.nclasses = r->m->nclasses;
    meta.epoch = j->epoch;
    meta.step = j->step;
    meta.samples = j->samples;
    meta.updates = j->updates;
    meta.seed = cfg->seed;
    meta.data_fingerprint = r->data->fingerprint;
    float *const state[2] = {j->state[0], j->state[1]};
    if (gt_ckpt_save(cfg->checkpoint, r->m, j->params, state, r->ps.nstate, &meta, cfg->keep, e) != 0)
        return -1;
    snprintf(res->checkpoint_written, sizeof res->checkpoint_written, "%s", cfg->checkpoint);
    return 0;
}

static void log_point(run *r, const gt_eval_point *p)
{
    const gt_config *cfg = r->cfg;
    if (r->log) {
        pthread_mutex_lock(&r->log_mu);
        fprintf(r->log,
                "{\"type\":\"eval\",\"epoch\":%u,\"step\":%llu,\"samples\":%llu,\"wall_s\":%.4f,"
                "\"train_loss\":%.6f,\"train_acc\":%.6f,\"test_loss\":%.6f,\"test_acc\":%.6f,"
                "\"lr\":%.6g,\"mode\":\"%s\",\"workers\":%d}\n",
                p->epoch, (unsigned long long)p->step, (unsigned long long)p->samples, p->wall_s,
                isnan(p->train_loss) ? 0.0 : p->train_loss, isnan(p->train_acc) ? 0.0 : p->train_acc,
                p->test_loss, p->test_acc,
                gt_optim_lr(&cfg->optim, run_progress_epochs(r, p->samples)), mode_name(cfg->mode), r->Wg);
        fflush(r->log);
        pthread_mutex_unlock(&r->log_mu);
    }
    if (!cfg->quiet) {
        double sps = p->wall_s > 0 ? (double)p->samples / p->wall_s : 0;
        printf("epoch %3u  step %7llu  train loss %.4f acc %.4f  test loss %.4f acc %.4f  %9.0f samples/s  %7.1f s\n",
               p->epoch, (unsigned long long)p->step, p->train_loss, p->train_acc, p->test_loss,
               p->test_acc, sps, p->wall_s);
        fflush(stdout);
    }
}

static int handle_job(run *r, job *j, gt_run_result *res, gt_err *e)
{
    int rc = 0;
    if (j->kinds & JOB_EVAL) {
        gt_eval_point p = {.epoch = j->step ? j->epoch + 1 : j->epoch,
                           .step = j->updates,
                           .samples = j->samples,
                           .wall_s = j->wall,
                           .train_loss = j->train_loss,
                           .train_acc = j->train_acc};
        rc = evaluate_snapshot(r, j->params, &p.test_loss, &p.test_acc, e);
        if (rc == 0) {
            if (res->npoints < (int)(sizeof res->points / sizeof *res->points))
                res->points[res->npoints++] = p;
            res->final_test_acc = p.test_acc;
            res->final_test_loss = p.test_loss;
            log_point(r, &p);
        }
    }
    if (rc == 0 && (j->kinds & JOB_CKPT))
        rc = write_checkpoint(r, j, res, e);
    free(j->params);
    free(j->state[0]);
    free(j->state[1]);
    return rc;
}

static void watchdog(run *r)
{
    double limit = r->cfg->stall_timeout;
    if (limit <= 0)
        return;
    uint64_t now = now_ns();
    for (int i = 0; i < r->W; i++) {
        worker *w = &r->workers[i];
        if (!atomic_load(&w->alive))
            continue;
        double idle = (double)(now - atomic_load(&w->last_progress_ns)) * 1e-9;
        if (idle > limit && !w->stalled_reported) {
            fprintf(stderr, "gputrain: warning: worker %d (%s) made no progress for %.1f s (--stall-timeout %g)\n",
                    r->share0 + i, w->dev->name, idle, limit);
            w->stalled_reported = 1;
        } else if (idle <= limit) {
            w->stalled_reported = 0;
        }
    }
}

static void progress_bar(run *r, uint32_t epoch, int final)
{
    if (r->cfg->progress <= 0 && !(r->cfg->progress < 0 && isatty(2)))
        return;
    uint64_t per_epoch = is_clocked(r) ? (uint64_t)r->clocks * r->Wg * r->batch : r->ntrain;
    uint64_t total = per_epoch * (uint64_t)r->cfg->epochs;
    uint64_t samples = atomic_load(&r->samples_total);
    double frac = total ? (double)samples / (double)total : 1;
    if (frac > 1)
        frac = 1;
    int width = 30, filled = (int)(frac * width);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    double wall = gt_now() - r->t0;
    fprintf(stderr, "\r[%s] %5.1f%%  epoch %u/%d  %8.0f samples/s", bar, 100 * frac,
            epoch + 1 > (uint32_t)r->cfg->epochs ? (uint32_t)r->cfg->epochs : epoch + 1,
            r->cfg->epochs, wall > 0 ? samples / wall : 0);
    if (final)
        fputc('\n', stderr);
}

/* Runs jobs until every worker has finished; returns -1 on the first job error. */
static int supervise(run *r, gt_run_result *res, gt_err *e)
{
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->njobs > 0) {
            job j = r->jobs[0];
            memmove(r->jobs, r->jobs + 1, (size_t)(r->njobs - 1) * sizeof *r->jobs);
            r->njobs--;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            int jr = rc == 0 ? handle_job(r, &j, res, e) : (free(j.params), free(j.state[0]), free(j.state[1]), 0);
            pthread_mutex_lock(&r->mu);
            if (jr != 0 && rc == 0) {
                rc = -1;
                run_fail_locked(r, e->msg);
            }
        }
        if (r->done == r->W)
            break;
        if (stop_asked(r) && !r->halt && r->cfg->mode != GT_MODE_ALLREDUCE) {
            r->halt = 1;
            pthread_cond_broadcast(&r->cv);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        uint32_t epoch = r->epoch;
        pthread_mutex_unlock(&r->mu);
        watchdog(r);
        progress_bar(r, epoch, 0);
        pthread_mutex_lock(&r->mu);
    }
    uint32_t epoch = r->epoch;
    pthread_mutex_unlock(&r->mu);
    progress_bar(r, epoch, 1);
    return rc;
}

/* ---- setting up and tearing down --------------------------------------------------------------- */

/* Across hosts every process must train the same model on the same data from the same start with
 * the same settings and as many workers, or the collectives would mix unlike things; a host that
 * differs is named. */
static int hosts_check_same(run *r, const gt_start *start, gt_err *e)
{
    if (r->H == 1)
        return 0;
    const gt_config *c = r->cfg;
    uint64_t settings[] = {c->mode, (uint64_t)c->batch, (uint64_t)c->epochs, c->seed,
                           (uint64_t)c->sync_every, (uint64_t)c->staleness, c->balance,
                           (uint64_t)(int64_t)c->stripes, (uint64_t)c->eval_every, r->n};
    uint32_t crc = gt_crc32(gt_crc32(0, settings, sizeof settings), &c->optim, sizeof c->optim);
    const struct {
        const char *what;
        uint64_t v;
    } checks[] = {
        {"--gpus: the number of workers", (uint64_t)r->W},
        {"the command line (mode, batch, epochs, seed, optimizer, model size)", crc},
        {"--data: the data fingerprint", r->data->fingerprint},
        {"the starting parameters (--seed, --init or --resume file)",
         gt_crc32(0, start->params, r->n * sizeof(float))},
    };
    for (size_t i = 0; i < sizeof checks / sizeof *checks; i++) {
        uint64_t lo, hi;
        if (gt_cluster_range_u64(checks[i].v, &lo, &hi, checks[i].what, e) != 0)
            return -1;
        if (lo != hi)
            return gt_fail(e, "%s differs between hosts: this host (%d) has %llu, the hosts have "
                              "%llu to %llu; every host must run the same", checks[i].what, r->host,
                           (unsigned long long)checks[i].v, (unsigned long long)lo,
                           (unsigned long long)hi);
    }
    return 0;
}

static int run_init(run *r, const gt_config *cfg, const gt_model *m, const gt_data *data,
                    gt_device **devices, int ndevices, gt_device *evaluator, const gt_start *start,
                    gt_err *e)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->m = m;
    r->data = data;
    r->W = ndevices;
    r->n = m->nparams;
    r->ntrain = data->train.n;
    r->batch = cfg->batch;
    r->evaluator = evaluator;
    if (ndevices < 1 || ndevices > GT_MAX_WORKERS)
        return gt_fail(e, "--gpus: %d workers (1..%d supported)", ndevices, GT_MAX_WORKERS);
    r->H = gt_cluster_size();
    r->host = gt_cluster_rank();
    r->Wg = r->H * r->W;
    r->share0 = r->host * r->W;
    r->span_n = is_clocked(r) ? r->ntrain : r->ntrain / (uint32_t)r->H;
    r->span_lo = is_clocked(r) ? 0 : (uint32_t)r->host * r->span_n;
    if (hosts_check_same(r, start, e) != 0)
        return -1;
    if (cfg->mode == GT_MODE_ALLREDUCE) {
        for (int i = 0; i < ndevices; i++)
            if (!devices[i]->ops->reduce_update)
                return gt_fail(e, "--mode allreduce: needs GPUs and NCCL; %s has no all-reduce "
                                  "(use --mode sync for the same math)", devices[i]->name);
        if (cfg->on_nan == GT_NAN_SKIP)
            return gt_fail(e, "--on-nan skip: not available with --mode allreduce, where every GPU "
                              "must take the same step");
        if (gt_cuda_allreduce_init(devices, ndevices, &cfg->optim, e) != 0)
            return -1;
    }
    uint64_t per_clock = (uint64_t)r->Wg * (uint64_t)r->batch;
    if (is_clocked(r) ? per_clock > r->ntrain : (uint64_t)r->batch * (cfg->balance == GT_BALANCE_STATIC ? r->W : 1) > r->span_n)
        return gt_fail(e, "--batch: %d x %d workers%s is more than the %u training samples", r->batch,
                       r->Wg, r->H > 1 ? " of all hosts" : "", r->ntrain);
    r->clocks = (uint32_t)(r->ntrain / per_clock);
    r->nbatches = r->span_n / (uint32_t)r->batch;
    if (gt_ps_init(&r->ps, r->n, cfg->stripes, &cfg->optim, e) != 0)
        return -1;
    memcpy(r->ps.params, start->params, r->n * sizeof(float));
    for (int i = 0; i < r->ps.nstate && start->state && i < start->nstate; i++)
        memcpy(r->ps.state[i], start->state[i], r->n * sizeof(float));
    r->perm = gt_alloc((size_t)r->ntrain * sizeof(uint32_t));
    r->workers = calloc((size_t)r->W, sizeof(worker));
    if (!r->perm || !r->workers)
        return gt_fail(e, "out of memory for %u training samples", r->ntrain);
    if (is_clocked(r)) {
        r->R = cfg->mode == GT_MODE_SSP ? cfg->staleness + 1 : 1;
        if (r->R > 64)
            r->R = 64; /* more staleness than 64 clocks in flight is moot, and costs memory */
        r->nslots = r->R;
        if (cfg->mode == GT_MODE_LOCAL) {
            r->R = cfg->sync_every < (int)r->clocks ? cfg->sync_every : (int)r->clocks;
            r->nslots = 1;
        }
        size_t slots = (size_t)r->nslots * (size_t)r->W * r->n;
        if (slots / r->n != (size_t)r->nslots * (size_t)r->W)
            return gt_fail(e, "--staleness: %d needs too much memory", cfg->staleness);
        r->slots = gt_host_alloc(slots * sizeof(float));
        r->claimed = calloc((size_t)r->R, sizeof(uint64_t));
        r->deposited = calloc((size_t)r->R, sizeof(uint64_t));
        r->slot_read_clock = malloc((size_t)r->R * sizeof(uint64_t));
        if (!r->slots || !r->claimed || !r->deposited || !r->slot_read_clock)
            return gt_fail(e, "out of memory for %d x %d gradient slots of %zu parameters", r->R,
                           r->W, r->n);
        for (int k = 0; k < r->R; k++)
            r->slot_read_clock[k] = UINT64_MAX;
    }
    if (r->H > 1 && cfg->mode != GT_MODE_SYNC && cfg->mode != GT_MODE_ALLREDUCE) {
        r->xsnap = gt_alloc(r->n * sizeof(float));
        r->xavg = gt_alloc(r->n * sizeof(float));
        if (!r->xsnap || !r->xavg)
            return gt_fail(e, "out of memory for averaging %zu parameters across hosts", r->n);
    }
    for (int i = 0; i < r->W; i++) {
        worker *w = &r->workers[i];
        w->run = r;
        w->index = i;
        w->dev = devices[i];
        atomic_init(&w->alive, 1);
        w->ver = calloc((size_t)r->ps.nranges, sizeof(uint64_t));
        if (!w->ver)
            return gt_fail(e, "out of memory");
        if (cfg->overlap) {
            w->pbuf[0] = w->dev->params;
            w->gbuf[0] = w->dev->grad;
            w->vbuf[0] = w->ver;
            w->pbuf[1] = gt_host_alloc(r->n * sizeof(float));
            w->gbuf[1] = gt_host_alloc(r->n * sizeof(float));
            w->vbuf[1] = calloc((size_t)r->ps.nranges, sizeof(uint64_t));
            if (!w->pbuf[1] || !w->gbuf[1] || !w->vbuf[1])
                return gt_fail(e, "out of memory for --overlap's second buffers");
        }
        if (cfg->mode == GT_MODE_LOCAL)
            for (int k = 0; k < r->ps.nstate; k++)
                if (!(w->state[k] = gt_alloc(r->n * sizeof(float))))
                    return gt_fail(e, "out of memory for local optimizer state");
    }
    r->nlive = r->W;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->log_mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (start->resumed) {
        r->epoch = start->resumed->epoch;
        atomic_store(&r->samples_total, start->resumed->samples);
        atomic_store(&r->ps.updates, start->resumed->updates);
        r->start_clock = start->resumed->step;
        if (is_clocked(r) ? r->start_clock >= r->clocks : r->start_clock >= r->nbatches)
            r->start_clock = 0;
        r->cursor = r->start_clock;
        if (cfg->mode == GT_MODE_LOCAL)
            for (int i = 0; i < r->W; i++)
                r->workers[i].local_updates = start->resumed->updates;
    }
    /* Hogwild static slices: a resumed step counts batches of each worker's slice. */
    if (cfg->balance == GT_BALANCE_STATIC && !is_clocked(r))
        for (int i = 0; i < r->W; i++)
            r->workers[i].slice_pos = r->start_clock;
    r->applied = r->start_clock;
    if (!is_clocked(r)) {
        uint64_t every = (uint64_t)cfg->sync_every * (uint64_t)r->W;
        r->host_batches = r->start_clock * (cfg->balance == GT_BALANCE_STATIC ? (uint64_t)r->W : 1);
        r->xavg_last = r->host_batches - r->host_batches % every;
    }
    if (cfg->eval_every > 0)
        r->next_eval = atomic_load(&r->samples_total) + (uint64_t)cfg->eval_every * (uint64_t)r->batch * (uint64_t)r->Wg;
    if (cfg->checkpoint[0] && cfg->checkpoint_every_steps && cfg->checkpoint_every > 0) {
        uint64_t done = is_clocked(r) ? (uint64_t)r->epoch * r->clocks + r->start_clock
                                      : atomic_load(&r->ps.updates);
        r->next_ckpt = done + (uint64_t)cfg->checkpoint_every;
    }
    gt_permutation(r->perm, r->ntrain, cfg->seed, r->epoch);
    if (cfg->log_path[0] && r->host == 0) {
        r->log = fopen(cfg->log_path, start->resumed ? "a" : "w");
        if (!r->log)
            return gt_fail(e, "--log: cannot open '%s' for writing: %s", cfg->log_path, strerror(errno));
    }
    return 0;
}

static void run_free(run *r)
{
    if (r->workers)
        for (int i = 0; i < r->W; i++) {
            worker *w = &r->workers[i];
            if (w->pbuf[0]) { /* the device gets its own buffers back */
                w->dev->params = w->pbuf[0];
                w->dev->grad = w->gbuf[0];
            }
            gt_host_free(w->pbuf[1]);
            gt_host_free(w->gbuf[1]);
            free(w->vbuf[1]);
            free(r->workers[i].ver);
            gt_free(r->workers[i].state[0]);
            gt_free(r->workers[i].state[1]);
        }
    free(r->workers);
    gt_free(r->perm);
    gt_host_free(r->slots);
    gt_free(r->xsnap);
    gt_free(r->xavg);
    free(r->claimed);
    free(r->deposited);
    free(r->slot_read_clock);
    for (int i = 0; i < r->njobs; i++) {
        free(r->jobs[i].params);
        free(r->jobs[i].state[0]);
        free(r->jobs[i].state[1]);
    }
    gt_ps_free(&r->ps);
}

static void fill_result(run *r, gt_run_result *res, double wall)
{
    res->nworkers = r->W;
    res->nhosts = r->H;
    res->wall_s = wall;
    res->samples = atomic_load(&r->samples_total);
    double busy = 0;
    for (int i = 0; i < r->W; i++) {
        worker *w = &r->workers[i];
        gt_worker_stats *s = &res->workers[i];
        s->steps = atomic_load(&w->steps);
        s->samples = atomic_load(&w->samples);
        s->busy_s = w->t_last > w->t_first ? w->t_last - w->t_first : 0;
        s->wait_s = w->wait_s;
        s->failed = !atomic_load(&w->alive);
        snprintf(s->error, sizeof s->error, "%s", w->error);
        busy += wall;
    }
    uint64_t count = atomic_load(&r->ps.stale_count);
    res->stale_max = atomic_load(&r->ps.stale_max);
    res->stale_mean = count ? (double)atomic_load(&r->ps.stale_sum) / (double)count : 0;
    uint64_t acc = 0;
    res->stale_p99 = 0;
    for (int b = 0; b < GT_STALE_BINS && count; b++) {
        acc += atomic_load(&r->ps.stale_hist[b]);
        if (acc * 100 >= count * 99) {
            res->stale_p99 = b;
            break;
        }
    }
    res->lock_wait_share = busy > 0 ? (double)atomic_load(&r->ps.lock_wait_ns) * 1e-9 / busy : 0;
    res->barrier_wait_share = busy > 0 ? r->barrier_wait_s / busy : 0;
    res->clock_spread_max = r->spread_max;
    res->skipped_nonfinite = r->skipped;
}

int gt_train_run(const gt_config *cfg, const gt_model *model, const gt_data *data,
                 gt_device **devices, int ndevices, gt_device *evaluator, const gt_start *start,
                 gt_run_result *res, gt_err *e)
{
    memset(res, 0, sizeof *res);
    run *r = calloc(1, sizeof *r);
    if (!r)
        return gt_fail(e, "out of memory");
    if (run_init(r, cfg, model, data, devices, ndevices, evaluator, start, e) != 0) {
        run_free(r);
        free(r);
        return -1;
    }
    r->t0 = gt_now();
    int started = 0, rc = 0;
    for (int i = 0; i < r->W; i++) {
        if (pthread_create(&r->workers[i].thread, NULL, worker_main, &r->workers[i]) != 0) {
            run_fail(r, "could not start a worker thread");
            pthread_mutex_lock(&r->mu);
            r->done += r->W - i;
            pthread_mutex_unlock(&r->mu);
            break;
        }
        started++;
    }
    rc = supervise(r, res, e);
    for (int i = 0; i < started; i++)
        pthread_join(r->workers[i].thread, NULL);
    /* Training time: until the last worker finished, not the final evaluation after it. */
    double wall = (r->t_done > 0 ? r->t_done : gt_now()) - r->t0;
    fill_result(r, res, wall);
    res->samples_per_s = wall > 0 ? (double)res->samples / wall : 0;
    res->interrupted = r->H > 1 ? r->stop_sig : atomic_load(&g_stop_signal);
    if (rc == 0 && r->failed) {
        rc = -1;
        if (r->nlive == 0) {
            char buf[GT_ERRLEN] = "every worker failed:";
            for (int i = 0; i < r->W; i++) {
                size_t len = strlen(buf);
                snprintf(buf + len, sizeof buf - len, " worker %d (%.40s): %.80s;", r->share0 + i,
                         r->workers[i].dev->name, r->workers[i].error);
            }
            gt_fail(e, "%s", buf);
        } else {
            gt_fail(e, "%s", r->error);
        }
    }
    if (rc == 0 && res->interrupted && cfg->checkpoint[0] && r->host == 0) {
        /* Interrupted: the workers have stopped at step boundaries; save where the run stands. */
        job j;
        uint64_t step = is_clocked(r) ? r->applied
                                      : (cfg->balance == GT_BALANCE_DYNAMIC ? r->cursor : UINT64_MAX);
        if (!is_clocked(r) && cfg->balance == GT_BALANCE_STATIC)
            for (int i = 0; i < r->W; i++)
                if (r->workers[i].slice_pos < step)
                    step = r->workers[i].slice_pos;
        /* Across hosts, host 0 may have finished an epoch that another host stopped short of, so
         * that no host ended it: resume at the next one. */
        uint32_t epoch = r->epoch;
        if (step >= epoch_steps(r)) {
            epoch++;
            step = 0;
        }
        pthread_mutex_lock(&r->mu);
        int sr = snapshot_locked(r, &j, JOB_CKPT, epoch, step);
        pthread_mutex_unlock(&r->mu);
        if (sr != 0 || write_checkpoint(r, &j, res, e) != 0)
            rc = -1;
        free(j.params);
        free(j.state[0]);
        free(j.state[1]);
    }
    if (r->log) {
        fprintf(r->log,
                "{\"type\":\"summary\",\"mode\":\"%s\",\"workers\":%d,\"hosts\":%d,\"model\":\"%s\",\"batch\":%d,"
                "\"optimizer\":\"%s\",\"lr\":%g,\"momentum\":%g,\"seed\":%llu,\"epochs\":%d,"
                "\"stripes\":%d,\"samples\":%llu,\"wall_s\":%.4f,"
                "\"samples_per_s\":%.1f,\"stale_max\":%llu,\"stale_mean\":%.4f,\"stale_p99\":%.0f,"
                "\"lock_wait_share\":%.6f,\"barrier_wait_share\":%.6f,\"clock_spread_max\":%llu,"
                "\"skipped_nonfinite\":%llu,\"test_acc\":%.6f,\"interrupted\":%d}\n",
                mode_name(cfg->mode), r->Wg, r->H, r->m->name, cfg->batch,
                cfg->optim.kind == GT_OPT_ADAM ? "adam" : "sgd", cfg->optim.lr, cfg->optim.momentum,
                (unsigned long long)cfg->seed, cfg->epochs, r->ps.nstripes, (unsigned long long)res->samples, res->wall_s,
                res->samples_per_s, (unsigned long long)res->stale_max, res->stale_mean,
                res->stale_p99, res->lock_wait_share, res->barrier_wait_share,
                (unsigned long long)res->clock_spread_max, (unsigned long long)res->skipped_nonfinite,
                res->final_test_acc, res->interrupted);
        for (int i = 0; i < r->W; i++) {
            gt_worker_stats *s = &res->workers[i];
            fprintf(r->log,
                    "{\"type\":\"worker\",\"worker\":%d,\"device\":\"%s\",\"steps\":%llu,\"samples\":%llu,"
                    "\"samples_per_s\":%.1f,\"wait_s\":%.4f,\"failed\":%d}\n",
                    i, r->workers[i].dev->name, (unsigned long long)s->steps,
                    (unsigned long long)s->samples, s->busy_s > 0 ? s->samples / s->busy_s : 0,
                    s->wait_s, s->failed);
        }
        if (fclose(r->log) != 0 && rc == 0)
            rc = gt_fail(e, "--log: writing '%s' failed: %s", cfg->log_path, strerror(errno));
        r->log = NULL;
    }
    run_free(r);
    free(r);
    return rc;
}
