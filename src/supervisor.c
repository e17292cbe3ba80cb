/* supervisor.c - the calling thread while the workers train: it runs the jobs they post, acts on
 * SIGINT/SIGTERM and warns about workers that stall. */
#include "run.h"

#include <signal.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

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

/* Whether a signal, or --patience run out, stops this host now. Across hosts a signal is acted
 * on only where the hosts agree (hosts_stop_signal), or one host would leave the others waiting
 * in a collective (--patience is a single host's). */
int stop_asked(const run *r)
{
    return (r->H == 1 && atomic_load(&g_stop_signal)) || atomic_load(&r->jq.stop_early);
}

/* Warns once about each live worker that has made no progress for --stall-timeout seconds. */
static void watchdog(run *r)
{
    double limit = r->cfg->stall_timeout;
    if (limit <= 0)
        return;
    uint64_t now = gt_now_ns();
    for (int i = 0; i < r->W; i++) {
        worker *w = &r->workers[i];
        if (!atomic_load(&w->alive))
            continue;
        double idle = (double)(now - atomic_load(&w->last_progress_ns)) * 1e-9;
        if (idle > limit && !w->stalled_reported) {
            report_stall(r, w, idle);
            w->stalled_reported = 1;
        } else if (idle <= limit) {
            w->stalled_reported = 0;
        }
    }
}

/* Logs the signal that asks this run to stop, once: this host's own, or across hosts the one
 * the hosts agreed on (sig_host, read under r->mu). */
static void note_signal(run *r, int sig_host, int *noted)
{
    int sig = atomic_load(&g_stop_signal);
    if (!sig)
        sig = sig_host;
    if (sig && !*noted) {
        report_signal(r, sig);
        *noted = 1;
    }
}

/* Runs jobs until every worker has finished; returns -1 on the first job error. */
int supervise(run *r, gt_run_result *res, gt_err *e)
{
    int rc = 0, noted = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->jq.n > 0) {
            job j = r->jq.q[0];
            memmove(r->jq.q, r->jq.q + 1, (size_t)(r->jq.n - 1) * sizeof *r->jq.q);
            r->jq.n--;
            r->jq.handling = 1;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            int jr = rc == 0 ? jobs_handle(r, &j, res, e) : (job_free(r, &j), 0);
            pthread_mutex_lock(&r->mu);
            r->jq.handling = 0;
            pthread_cond_broadcast(&r->cv);
            if (jr != 0 && rc == 0) {
                rc = -1;
                run_fail_locked(r, e->msg);
            }
        }
        if (r->done == r->W)
            break;
        if (stop_asked(r) && !r->halt && !r->ops->replicas) {
            r->halt = 1;
            pthread_cond_broadcast(&r->cv);
        }
        run_wait_locked(r, 0.1);
        uint32_t epoch = r->epoch;
        int sig_host = r->hosts.stop_sig;
        double loss = r->stats.seen_acc ? r->stats.loss_acc / (double)r->stats.seen_acc : NAN;
        pthread_mutex_unlock(&r->mu);
        note_signal(r, sig_host, &noted);
        watchdog(r);
        report_progress(r, epoch, loss, 0);
        pthread_mutex_lock(&r->mu);
    }
    uint32_t epoch = r->epoch;
    int sig_host = r->hosts.stop_sig;
    pthread_mutex_unlock(&r->mu);
    note_signal(r, sig_host, &noted);
    report_progress(r, epoch, NAN, 1);
    return rc;
}
