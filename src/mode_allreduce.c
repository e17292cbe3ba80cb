/* mode_allreduce.c - allreduce: every GPU keeps a replica; each clock's gradient is summed over
 * the GPUs (peer-to-peer on one host, NCCL across hosts) and every replica takes the same
 * optimizer step on its own GPU. Worker 0 brings its replica into the store where evaluation,
 * checkpoints and the guard's good copies read it; a rollback restores the store at a barrier and
 * every replica reloads it there.
 *
 * The same operations are the device step of other modes (train.c, run_device_step), and of the
 * local mode with its own update: each replica steps on its own gradient, and every --sync-every
 * clocks and at an epoch's last the GPUs average the replicas (local_update); the store is
 * brought up to date there only, where the replicas are one. */
#include "run.h"

#define ALLREDUCE_STOP_EVERY 64 /* clocks between the barriers where a signal is acted on */

/* A step queued on the device and not yet ended. */
typedef struct worker_step {
    int pending, n;
    uint64_t clock;
    gt_step_out o;
} worker_step;

/* One evaluation of the test set split over the replicas, each adding its share. */
typedef struct replica_eval {
    double loss_sum[RUN_SHARE_BITS]; /* per worker, summed in worker order */
    uint64_t correct[RUN_SHARE_BITS];
    uint64_t mask;             /* the workers whose share is in */
    uint64_t step;             /* the clock inside the epoch after which it was taken */
} replica_eval;

/* The run's (r->own) and a worker's (w->own). */
typedef struct allreduce_run {
    replica_eval reval;
} allreduce_run;

typedef struct allreduce_worker {
    worker_step queued;        /* its step queued, not yet ended */
} allreduce_worker;

static allreduce_run *ar(const run *r) { return r->own; }
static allreduce_worker *aw(const worker *w) { return w->own; }

/* An evaluation the replicas made goes into the job, which then needs no parameters for it; the
 * shares are summed in worker order. Caller holds r->mu. */
static void allreduce_snapshot_locked(run *r, job *j)
{
    replica_eval *v = &ar(r)->reval;
    if (!(j->kinds & JOB_EVAL) || v->mask == 0)
        return;
    double loss = 0;
    uint64_t correct = 0;
    for (int i = 0; i < r->W; i++)
        if (v->mask & (1ull << i)) {
            loss += v->loss_sum[i];
            correct += v->correct[i];
        }
    v->mask = 0;
    j->evaluated = 1;
    j->test_loss = loss / r->data->test.n;
    j->test_acc = (double)correct / r->data->test.n;
}

/* The local mode on the device step: replicas step apart and are averaged. */
static int allreduce_is_local(const run *r) { return r->cfg->mode == GT_MODE_LOCAL; }

/* Whether clock c ends with the replicas averaged (mode_local.c's local_clock): always in the
 * allreduce mode, where they never differ, and with one replica. */
static int allreduce_replicas_one(const run *r, uint64_t c)
{
    return !allreduce_is_local(r) || r->W == 1 || (c + 1) % (uint64_t)r->cfg->sync_every == 0 ||
           c + 1 == r->clk.clocks;
}

/* Whether clock c ends at a barrier, where signals and the guard's rollbacks are acted on: every
 * ALLREDUCE_STOP_EVERY clocks; local's replicas only where they are one (as through the store,
 * which stops and rolls back at its averages): at the first average that ends an interval
 * holding a multiple of ALLREDUCE_STOP_EVERY. One worker waits for nobody: a signal is acted on
 * at the next clock. */
static int allreduce_barrier_due(const run *r, uint64_t c)
{
    if (r->Wg == 1 && stop_asked(r))
        return 1;
    if (!allreduce_is_local(r) || r->W == 1)
        return c % ALLREDUCE_STOP_EVERY == ALLREDUCE_STOP_EVERY - 1;
    if (!allreduce_replicas_one(r, c))
        return 0;
    uint64_t k = (uint64_t)r->cfg->sync_every, prev = c + 1 > k ? c + 1 - k : 0;
    return (c + 1) / ALLREDUCE_STOP_EVERY != prev / ALLREDUCE_STOP_EVERY;
}

/* --ema on the device step: replica 0 keeps the moving average on its GPU, taken after the
 * updates where the replicas are one (the clocks gt_ps_ema_span takes; local's averages), from
 * the run's step t as the store's is from its update's number; the store gets it wherever it is
 * brought up to date, and gives it back at the start and after a rollback. Where the replicas
 * evaluate (allreduce_on_replicas) every replica keeps the same average, on the same
 * parameters at the same updates, and evaluates its share of the test set on it. */
static int allreduce_ema_fail(worker *w, const gt_err *e)
{
    snprintf(w->error, sizeof w->error, "%s", e->msg);
    return -1;
}

static int allreduce_ema_get(run *r, worker *w)
{
    gt_err e = {{0}};
    return w->dev->ops->ema_get(w->dev, r->ps.ema, &e) ? allreduce_ema_fail(w, &e) : 0;
}

/* Several replicas evaluate the parameters themselves, each GPU a share of the test set, which
 * costs each 1/W of an evaluation and no copy; one GPU leaves it to the evaluator beside it (its
 * own context on the same GPU), which overlaps the training instead. */
static int allreduce_on_replicas(const run *r)
{
    /* --val-split and --save-best go to the evaluator: the held-out set, a copy to save. With
     * --ema every replica evaluates the average it keeps (allreduce_keeps_ema). A model with
     * batch norm stays on the replicas, which first take replica 0's running statistics
     * (allreduce_share_buffers). */
    return r->W > 1 && !allreduce_is_local(r) && r->data->val.n == 0 && !r->cfg->save_best[0];
}

/* Whether worker w's replica keeps the moving average. */
static int allreduce_keeps_ema(const run *r, const worker *w)
{
    return r->ps.ema && (w->index == 0 || allreduce_on_replicas(r));
}

static int allreduce_ema_load(run *r, worker *w)
{
    gt_err e = {{0}};
    if (!allreduce_keeps_ema(r, w))
        return 0;
    return w->dev->ops->ema_set(w->dev, r->ps.ema, &e) ? allreduce_ema_fail(w, &e) : 0;
}

static int allreduce_ema_update(run *r, worker *w, uint64_t c)
{
    gt_err e = {{0}};
    if (!allreduce_keeps_ema(r, w) || !allreduce_replicas_one(r, c))
        return 0;
    uint64_t t = r->clk.updates0 + c + 1;
    unsigned span = allreduce_is_local(r) ? local_span(r, c) : gt_ps_ema_span(r->ps.ema_decay, t);
    if (span == 0) /* an update the average skips (gt_ps_ema_span), as the store's do */
        return 0;
    float decay = gt_ps_ema_decay(r->ps.ema_decay, t, span);
    return w->dev->ops->ema_update(w->dev, decay, &e) ? allreduce_ema_fail(w, &e) : 0;
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
    gt_ps_store_stripes(&r->ps, 0, r->ps.nranges, w->dev->params, 0);
    gt_ps_store_buffers(&r->ps, w->dev->buffers); /* replica 0's running statistics, as DDP */
    /* The moving average is replica 0's (allreduce_ema_update). */
    if (r->ps.ema && allreduce_ema_get(r, w) != 0)
        return -1;
    return 0;
}

/* The stop check of allreduce: every worker must leave at the same clock or the others would wait
 * in the all-reduce forever, so a signal is acted on at a barrier every ALLREDUCE_STOP_EVERY
 * clocks, where across
 * hosts the hosts agree. */
static void allreduce_stop_leader(run *r)
{
    guard_at_barrier_locked(r);
    if (r->H > 1 && !r->failed) {
        gt_err e = {{0}};
        int sig = hosts_stop_signal(&e);
        hosts_agreed_locked(r, sig, &e);
    } else if (stop_asked(r)) {
        r->halt = 1;
    }
}

/* A replica takes the store's parameters and optimizer state: at the start, and after a rollback
 * restored the store. */
static int allreduce_load(run *r, worker *w)
{
    gt_err e = {{0}};
    if (worker_pull(r, w) != 0 ||
        w->dev->ops->set_state(w->dev, r->ps.state[0], r->ps.state[1], &e) != 0) {
        if (e.msg[0])
            snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    return allreduce_ema_load(r, w);
}

/* Worker 0 after update t: the store is brought up to date where an evaluation on the evaluator
 * (one GPU) or a checkpoint is due, or the guard wants a good copy. Called and returns with r->mu
 * held. */
static int allreduce_after_update_locked(run *r, worker *w, uint64_t c, uint64_t t)
{
    atomic_store(&r->ps.updates, t);
    int due = (r->jq.next_eval && t >= r->jq.next_eval) || (r->jq.next_ckpt && t >= r->jq.next_ckpt);
    int save = guard_save_wanted_locked(r);
    if (!due && !save)
        return 0;
    double since = gt_now();
    pthread_mutex_unlock(&r->mu);
    int rc = allreduce_publish(r, w);
    pthread_mutex_lock(&r->mu);
    if (rc != 0)
        return -1;
    if (save)
        guard_saved_locked(r, t, due ? 0 : since); /* a publish due anyway costs the copy nothing */
    if (due) {
        r->clk.applied = c + 1;
        jobs_post_due_locked(r, c + 1);
    }
    return 0;
}

/* Batch norm before the replicas evaluate: each holds the running statistics of its own batches,
 * the run's are replica 0's (what checkpoints keep), so every replica takes those, as DDP's
 * broadcast_buffers makes rank 0's everyone's, and every share is evaluated as a checkpoint
 * would be. Worker 0 brings its statistics into the store; after a barrier the others load them.
 * Every worker of the host calls it at the same clock. */
static int allreduce_share_buffers(run *r, worker *w)
{
    gt_err e = {{0}};
    if (r->m->nbuffers == 0)
        return 0;
    int rc = 0;
    if (w->index == 0) {
        rc = w->dev->ops->get_buffers(w->dev, &e);
        if (rc == 0)
            gt_ps_store_buffers(&r->ps, w->dev->buffers);
    }
    run_barrier(r, w, NULL);
    if (rc == 0 && w->index != 0) {
        gt_ps_pull_buffers(&r->ps, w->dev->buffers);
        rc = w->dev->ops->load_buffers(w->dev, &e);
    }
    if (rc != 0)
        snprintf(w->error, sizeof w->error, "%s", e.msg);
    return rc;
}

/* The replica's share of an evaluation: test samples [n k / W, n (k + 1) / W) for worker k, on
 * its own GPU and parameters (every replica holds the same), into ar(r)->reval. Only host 0
 * evaluates. */
static int allreduce_eval_share(run *r, worker *w)
{
    if (r->host != 0)
        return 0;
    if (allreduce_share_buffers(r, w) != 0)
        return -1;
    const gt_dataset *t = &r->data->test;
    uint32_t lo = (uint32_t)((uint64_t)t->n * (uint64_t)w->index / (uint64_t)r->W);
    uint32_t hi = (uint32_t)((uint64_t)t->n * (uint64_t)(w->index + 1) / (uint64_t)r->W);
    gt_step_out o = {0};
    gt_err e = {{0}};
    if (w->dev->ops->evaluate(w->dev, t, lo, hi, &o, &e) != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    pthread_mutex_lock(&r->mu);
    ar(r)->reval.loss_sum[w->index] = o.loss_sum;
    ar(r)->reval.correct[w->index] = o.correct;
    ar(r)->reval.mask |= 1ull << w->index;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Leader of the evaluation barrier: the replicas' shares become the evaluation job. */
static void allreduce_eval_leader(run *r)
{
    jobs_post_snapshot_locked(r, JOB_EVAL, r->epoch, ar(r)->reval.step);
}

/* --eval-every N: after every step of the run (r->clk.updates0 + c + 1, the same on every worker)
 * that is a multiple of N but an epoch's last, whose evaluation follows at the epoch's end. */
static int allreduce_eval_due(const run *r, uint64_t c)
{
    uint64_t every = (uint64_t)r->cfg->eval_every;
    return every && allreduce_on_replicas(r) && c + 1 < r->clk.clocks &&
           (r->clk.updates0 + c + 1) % every == 0;
}

/* A mid-epoch evaluation on the replicas: each evaluates its share; they meet at a barrier, whose
 * leader posts the result. */
static int allreduce_evaluate(run *r, worker *w, uint64_t c)
{
    if (allreduce_eval_share(r, w) != 0)
        return -1;
    pthread_mutex_lock(&r->mu);
    ar(r)->reval.step = c + 1;
    pthread_mutex_unlock(&r->mu);
    run_barrier(r, w, allreduce_eval_leader);
    return 0;
}

/* Every ALLREDUCE_STOP_EVERY clocks: the barrier where signals and the guard's rollback are acted
 * on; a replica reloads the store when a rollback happened there. */
static int allreduce_barrier(run *r, worker *w)
{
    pthread_mutex_lock(&r->mu);
    unsigned restores = r->guard.restores;
    pthread_mutex_unlock(&r->mu);
    run_barrier(r, w, allreduce_stop_leader);
    pthread_mutex_lock(&r->mu);
    int reload = r->guard.restores != restores;
    pthread_mutex_unlock(&r->mu);
    return reload ? allreduce_load(r, w) : 0;
}

/* Queues clock c's step on the device into *q (step_queue), or computes it now where the device
 * cannot queue; its results come from allreduce_step_end. */
static int allreduce_step_queue(run *r, worker *w, uint64_t c, worker_step *q)
{
    gt_batch b;
    gt_err e = {{0}};
    clocked_gather_share(r, c, w->index, &b);
    /* The steps done before this one: those accounted and the one still queued. */
    if (worker_injected(r, w, atomic_load(&w->steps) + (uint64_t)aw(w)->queued.pending))
        return -1;
    double t0 = gt_now(); /* the worker's device phase: queuing the step (or taking it) */
    int rc = w->dev->ops->step_queue ? w->dev->ops->step_queue(w->dev, &b, &e)
                                     : w->dev->ops->train_step(w->dev, &b, &q->o, &e);
    w->device_s += gt_now() - t0;
    if (rc != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    *q = (worker_step){.pending = 1, .n = b.n, .clock = c, .o = q->o};
    return 0;
}

/* The oldest queued step's results (aw(w)->queued), once the device has them: checked, reported and
 * accounted, and where due the store brought up to date and the replicas evaluated. The
 * parameters on the device are then those after this step's update: the next clock's update is
 * queued only after this. */
static int allreduce_step_end(run *r, worker *w)
{
    gt_err e = {{0}};
    worker_step *q = &aw(w)->queued;
    q->pending = 0;
    double t0 = gt_now(); /* waiting for the queued step: the worker's wait */
    int bad = w->dev->ops->step_queue && w->dev->ops->step_end(w->dev, &q->o, &e) != 0;
    w->wait_s += gt_now() - t0;
    if (bad) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    uint64_t c = q->clock;
    if (worker_check(r, w, &q->o, c) < 0)
        return -1;
    uint64_t t = r->clk.updates0 + c + 1; /* the run's step */
    report_step(r, w, t, c, q->o.loss_sum, q->n);
    worker_mark_time(w);
    pthread_mutex_lock(&r->mu);
    worker_account_step_locked(r, w, &q->o, q->n);
    int publish = w->index == 0 && allreduce_replicas_one(r, c);
    int rc = publish ? allreduce_after_update_locked(r, w, c, t) : 0;
    pthread_mutex_unlock(&r->mu);
    if (rc != 0 || (allreduce_eval_due(r, c) && allreduce_evaluate(r, w, c) != 0))
        return -1;
    return 0;
}

/* One clock of allreduce: the worker's share, the gradient summed over the GPUs and one
 * optimizer update of every replica on its own GPU. No host traffic but the loss. Pipelined:
 * clock c's step is queued before clock c - 1's results are waited for, so the device computes
 * while the host accounts them, and c's update is queued after that, so that what the host does
 * with c - 1's results (a checkpoint, an evaluation, the guard's good copy) sees the parameters
 * after update c - 1. Every device does its work in the unpipelined order, so the bits are the
 * same. At a barrier and an epoch's last clock nothing is left queued. */
static int allreduce_clock(run *r, worker *w, uint64_t c)
{
    worker_step cur = {0};
    gt_err e = {{0}};
    if (allreduce_step_queue(r, w, c, &cur) != 0 ||
        (aw(w)->queued.pending && allreduce_step_end(r, w) != 0))
        return -1;
    aw(w)->queued = cur;
    uint64_t t = (uint64_t)r->epoch * r->clk.clocks + c + 1;
    /* Where the run stands, for the warm-up and the schedule, from the update's number: the same
     * on every replica whatever the timing (the samples counter is not: each worker adds its own
     * steps as it accounts them), and what sync's apply sees, every share of the clock in. */
    /* The guard's factor changes only at the barrier, where every replica waits: all read the
     * same. local averages replicas that each took their own gradient; allreduce, the mean. */
    int local = allreduce_is_local(r);
    run_lr lr = run_lr_at(r, t, t * (uint64_t)r->Wg * (uint64_t)r->batch, local ? 1 : r->Wg);
    double t0 = gt_now(); /* the update (queued or taken): the worker's push */
    int rc = local ? w->dev->ops->local_update(w->dev, &r->cfg->optim, &lr.st, lr.gscale,
                                               r->W > 1 && allreduce_replicas_one(r, c), &e)
                   : w->dev->ops->reduce_update(w->dev, &r->cfg->optim, &lr.st, lr.gscale, &e);
    w->push_s += gt_now() - t0;
    if (rc != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    if (allreduce_ema_update(r, w, c) != 0)
        return -1;
    int barrier = allreduce_barrier_due(r, c);
    if ((barrier || c + 1 == r->clk.clocks) && allreduce_step_end(r, w) != 0)
        return -1;
    return barrier ? allreduce_barrier(r, w) : 0;
}

/* Every replica starts from the store: parameters and (resumed) optimizer state. */
static int allreduce_start(run *r, worker *w)
{
    w->dev->keep_grad = 1;
    w->dev->eval_ema = r->ps.ema && allreduce_on_replicas(r);
    return allreduce_load(r, w);
}

/* Whether the store must hold where the replicas stand at the end of an epoch that ran `done`
 * clocks: where something reads it there (a checkpoint, the evaluator: one GPU, --ema,
 * --val-split, --save-best, local), where the run ends (its result, an interrupted run's save)
 * and across hosts (whose agreement at the epoch's end may stop the run after this). On one host
 * a halt is decided at the barriers between clocks, so r->halt holds its final value here. An
 * epoch evaluated on the replicas otherwise leaves the store as it was: bringing resnet18's
 * parameters and momentum in costs every GPU a wait of milliseconds at the next all-reduce. */
static int allreduce_publish_due(run *r, uint64_t done)
{
    pthread_mutex_lock(&r->mu);
    uint32_t next = r->epoch + 1;
    int due = !allreduce_on_replicas(r) || r->H > 1 || done < r->clk.clocks || r->halt ||
              r->failed || next >= (uint32_t)r->cfg->epochs || epoch_checkpoint_due(r, next);
    pthread_mutex_unlock(&r->mu);
    return due;
}

/* At an epoch's end the replicas evaluate their shares for the epoch's evaluation (several GPUs),
 * and worker 0 brings where the replicas stand into the store where something reads it there
 * (allreduce_publish_due). */
static int allreduce_end(run *r, worker *w, uint64_t done)
{
    /* A run halted between barriers (a failure elsewhere) may leave a step queued. */
    if (aw(w)->queued.pending && allreduce_step_end(r, w) != 0)
        return -1;
    if (allreduce_on_replicas(r) && done == r->clk.clocks && allreduce_eval_share(r, w) != 0)
        return -1;
    if (w->index != 0)
        return 0;
    int rc = allreduce_publish_due(r, done) ? allreduce_publish(r, w) : 0;
    pthread_mutex_lock(&r->mu);
    if (rc != 0)
        run_fail_locked(r, w->error);
    r->clk.applied = done;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Every device must all-reduce (NCCL), and every GPU take the same step. */
static int allreduce_check(run *r, gt_device **devices, gt_err *e)
{
    for (int i = 0; i < r->W; i++)
        if (!devices[i]->ops->reduce_update || (r->cfg->ema > 0 && !devices[i]->ops->ema_update))
            return gt_fail(e, "--mode allreduce: needs GPUs and NCCL; %s has no all-reduce "
                              "(use --mode sync for the same math)", devices[i]->name);
    if (r->cfg->on_nan == GT_NAN_SKIP)
        return gt_fail(e, "--on-nan skip: not available with --mode allreduce, where every GPU "
                          "must take the same step");
    if (gt_cuda_allreduce_init(devices, r->W, &r->cfg->optim, r->cfg->exchange, e) != 0)
        return -1;
    /* local on the device step: its averages take the peer exchange (train.c then keeps the
     * store in the step where there is none). */
    for (int i = 0; allreduce_is_local(r) && i < r->W; i++)
        if (!devices[i]->ops->local_update || !gt_cuda_allreduce_averages(devices[i]))
            return gt_fail(e, "--mode local: %s cannot average replicas on the GPUs",
                           devices[i]->name);
    return 0;
}

static int allreduce_init(run *r, gt_device **devices, const gt_start *start, gt_err *e)
{
    (void)devices;
    (void)start;
    if (allreduce_on_replicas(r))
        r->jq.next_eval = 0; /* evaluations fall due by clock: allreduce_eval_due */
    return clocked_init(r, 1, 1, e);
}

const gt_mode_ops gt_mode_allreduce = {
    .run_state = sizeof(allreduce_run),
    .worker_state = sizeof(allreduce_worker),
    .snapshot_locked = allreduce_snapshot_locked,
    .rollback = ROLLBACK_AT_BARRIER,
    .replicas = 1,
    .check = allreduce_check,
    .init = allreduce_init,
    .worker_start = allreduce_start,
    .clock = allreduce_clock,
    .clocked_end = allreduce_end,
    .abort = gt_cuda_allreduce_abort,
};
