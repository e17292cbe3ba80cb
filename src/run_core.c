/* run_core.c - what every part of a run shares: ending it with an error, and counting its
 * progress (samples, loss, accuracy) so that evaluation and the learning rate see one total. */
#include "run.h"

#include <stdio.h>
#include <time.h>

/* Ends the run with an error; the caller holds r->mu. */
void run_fail_locked(run *r, const char *msg)
{
    if (!r->failed) {
        r->failed = 1;
        snprintf(r->error, sizeof r->error, "%s", msg);
    }
    if (r->ops->abort)
        r->ops->abort(); /* workers may be waiting on each other outside r->mu */
    r->halt = 1;
    pthread_cond_broadcast(&r->cv);
}

void run_fail(run *r, const char *msg)
{
    pthread_mutex_lock(&r->mu);
    run_fail_locked(r, msg);
    pthread_mutex_unlock(&r->mu);
}

/* Waits on r->cv for at most `seconds` (none when not positive). r->cv waits on the default,
 * real-time clock. Caller holds r->mu. */
void run_wait_locked(run *r, double seconds)
{
    if (seconds <= 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double ns = (double)ts.tv_nsec + seconds * 1e9;
    time_t whole = (time_t)(ns / 1e9);
    ts.tv_sec += whole;
    ts.tv_nsec = (long)(ns - (double)whole * 1e9);
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

/* samples_total counts the samples of every host (this host's times H), so progress, and with it
 * the learning rate, is the same on every host and as on one host with all the workers. */
double run_progress_epochs(const run *r, uint64_t samples_total)
{
    return (double)samples_total / (double)r->ntrain;
}

run_lr run_lr_at(run *r, uint64_t t, uint64_t samples, int nsum)
{
    run_lr lr = {.epoch = run_progress_epochs(r, samples)};
    if (t > 0)
        lr.st = gt_optim_prepare(&r->cfg->optim, t, lr.epoch);
    lr.gscale = guard_scale(r) / (float)nsum; /* nsum 1: the factor itself, exactly */
    return lr;
}

run_lr run_lr_now(run *r, uint64_t t, int nsum)
{
    return run_lr_at(r, t, atomic_load(&r->stats.samples_total), nsum);
}

/* Counts one computed step in the run's statistics and the worker's, and shows its loss to the
 * guard (run_guard.c). Caller holds r->mu. */
void run_account_step_locked(run *r, worker *w, const gt_step_out *o, int n)
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
