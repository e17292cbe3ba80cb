/* worker.c - one worker's life: its epochs in the run's mode, the steps on its device (pull,
 * compute, check, count), the epoch barrier's leader work, and leaving the run when it fails. */
#include "run.h"

#include <math.h>
#include <stdio.h>

/* The fault injector (--inject-fault): -1 with the worker's error set when this worker is to fail
 * before its step number `done`. */
int worker_injected(run *r, worker *w, uint64_t done)
{
    const gt_config *cfg = r->cfg;
    if (cfg->inject_worker == r->share0 + w->index && cfg->inject_step >= 0 &&
        done == (uint64_t)cfg->inject_step) {
        snprintf(w->error, sizeof w->error, "injected fault at step %llu", (unsigned long long)done);
        return -1;
    }
    return 0;
}

/* A step's loss and gradient (d->grad) are finite: 0; else 1 after the guard's action or, where
 * --on-nan was given, --on-nan's. */
int worker_check(run *r, worker *w, const gt_step_out *o, uint64_t step)
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
    if (guard_nonfinite(r, msg))
        return 1;
    if (cfg->on_nan == GT_NAN_SKIP) {
        pthread_mutex_lock(&r->mu);
        r->stats.skipped++;
        pthread_mutex_unlock(&r->mu);
        return 1;
    }
    run_fail(r, msg);
    return 1;
}

/* Counts one computed step in the run's statistics and the worker's, and shows its loss to the
 * guard (run_guard.c). Caller holds r->mu. */
void worker_account_step_locked(run *r, worker *w, const gt_step_out *o, int n)
{
    guard_observe_locked(r, o->loss_sum / n);
    r->stats.loss_acc += o->loss_sum;
    r->stats.correct_acc += (uint64_t)o->correct;
    r->stats.seen_acc += (uint64_t)n;
    atomic_fetch_add(&r->stats.samples_total, (uint64_t)n * (uint64_t)r->H);
    atomic_fetch_add(&w->steps, 1);
    atomic_fetch_add(&w->samples, (uint64_t)n);
    atomic_store(&w->last_progress_ns, gt_now_ns());
}

/* Forward and backward on the device; checks the fault injector and non-finite results.
 * Returns 0, 1 when the gradient must be dropped (--on-nan skip), -1 when the worker failed. */
int worker_compute(run *r, worker *w, const gt_batch *b, gt_step_out *o, uint64_t step)
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

/* Pulls the store's parameters (and buffers) onto the worker's device; -1 with its error set. */
int worker_pull(run *r, worker *w)
{
    gt_ps_pull(&r->ps, w->dev->params, w->ver);
    gt_ps_pull_buffers(&r->ps, w->dev->buffers);
    return worker_load(w);
}

/* Loads the pulled parameters (dev->params) onto the worker's device; -1 with its error set. */
int worker_load(worker *w)
{
    gt_err e = {{0}};
    if (w->dev->ops->load_params(w->dev, &e) != 0) {
        snprintf(w->error, sizeof w->error, "%s", e.msg);
        return -1;
    }
    return 0;
}

/* The seconds the worker spent in its pull, device and push phases so far: a wait that does some
 * of that work itself (ssp's waiting worker helps apply and compute) counts only the rest. */
double worker_phases_s(const worker *w) { return w->pull_s + w->device_s + w->push_s; }

/* Notes a step's end for the worker's busy time. */
void worker_mark_time(worker *w)
{
    double t = gt_now();
    if (w->t_first == 0)
        w->t_first = t;
    w->t_last = t;
}

/* A worker leaves the run. Its shares and batches go to the survivors; a barrier waiting only on
 * it completes. Caller holds r->mu. */
void worker_leave_locked(run *r, worker *w, const char *why)
{
    atomic_store(&w->alive, 0);
    if (why != w->error)
        snprintf(w->error, sizeof w->error, "%s", why);
    r->nlive--;
    report_worker_left(r, w, why);
    /* Clocked modes: shares it claimed but never delivered go back to the pool. */
    for (int k = 0; k < r->clk.R && r->clk.claimed; k++)
        r->clk.claimed[k] &= r->clk.deposited[k] | ~(1ull << w->index);
    if (r->nlive == 0) {
        run_fail_locked(r, "every worker failed");
        return;
    }
    if (r->bar.count > 0 && r->bar.count >= r->nlive)
        barrier_complete_locked(r);
    pthread_cond_broadcast(&r->cv);
}

/* A worker of a mode whose replicas cannot go on without it ends the run with its error. Caller
 * holds r->mu. */
void worker_fail_run_locked(run *r, worker *w)
{
    char msg[GT_ERRLEN];
    snprintf(msg, sizeof msg, "worker %d (%.60s): %.400s", r->share0 + w->index, w->dev->name,
             w->error);
    run_fail_locked(r, msg);
}

/* Whether --checkpoint-every N (epochs) writes a checkpoint at the end of the epoch that makes
 * `done` epochs (the run's last and a halt write one too: epoch_end_leader). */
int epoch_checkpoint_due(const run *r, uint32_t done)
{
    const gt_config *cfg = r->cfg;
    return cfg->checkpoint[0] && !cfg->checkpoint_every_steps && cfg->checkpoint_every > 0 &&
           done % (uint32_t)cfg->checkpoint_every == 0;
}

/* Last worker at the end of an epoch: evaluation snapshot, checkpoint, next permutation. A run
 * stopped by a signal part-way through an epoch posts nothing: the calling thread saves it. */
static void epoch_end_leader(run *r)
{
    /* Workers decide to leave here, all together: a halt seen at different instants before the
     * barrier would send one worker home while another waits for it at the next one. */
    r->leave = r->halt;
    if (r->failed || !(r->H > 1 ? hosts_epoch_end_locked(r, r->ops->epoch_complete_locked(r))
                                 : r->ops->epoch_complete_locked(r)))
        return;
    const gt_config *cfg = r->cfg;
    uint32_t done = r->epoch + 1;
    int last = done >= (uint32_t)cfg->epochs || r->halt;
    int kinds = JOB_EVAL;
    if (cfg->checkpoint[0] && (last || epoch_checkpoint_due(r, done)))
        kinds |= JOB_CKPT;
    jobs_post_snapshot_locked(r, kinds, done, 0);
    r->epoch = done;
    r->clk.updates0 += r->clk.clocks; /* every clock of the epoch was a step */
    r->start_clock = 0;
    r->ops->epoch_reset(r);
    if (!last)
        gt_permutation(r->perm, r->ntrain, cfg->seed, r->epoch);
}

/* A worker thread: the mode's start, then its epochs, each ended at the epoch barrier. */
void *worker_main(void *arg)
{
    worker *w = arg;
    run *r = w->run;
    atomic_store(&w->last_progress_ns, gt_now_ns());
    if (r->ops->worker_start && r->ops->worker_start(r, w) != 0) {
        pthread_mutex_lock(&r->mu);
        worker_fail_run_locked(r, w);
        worker_leave_locked(r, w, w->error);
        r->done++;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int stop = r->leave || r->epoch >= (uint32_t)r->cfg->epochs;
        uint64_t first = r->start_clock;
        pthread_mutex_unlock(&r->mu);
        if (stop || !atomic_load(&w->alive))
            break;
        r->ops->epoch(r, w, first);
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
