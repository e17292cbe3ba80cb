/* barrier.c - the barrier over the live workers. The last to arrive runs the barrier's leader
 * work under r->mu before releasing the others; a worker that leaves completes a barrier that
 * waited only on it (worker_leave_locked). */
#include "run.h"

/* Releases the barrier's waiters after its leader work. Caller holds r->mu. */
void barrier_complete_locked(run *r)
{
    leader_fn fn = r->bar.fn;
    r->bar.count = 0;
    r->bar.fn = NULL;
    if (fn)
        fn(r);
    r->bar.gen++;
    pthread_cond_broadcast(&r->cv);
}

/* Waits for every live worker; the last to arrive runs fn (under r->mu) before releasing them.
 * Live workers always wait at the same barrier, so the first arrival's fn is everyone's. */
void run_barrier(run *r, worker *w, leader_fn fn)
{
    double t = gt_now();
    pthread_mutex_lock(&r->mu);
    uint64_t gen = r->bar.gen;
    if (r->bar.count == 0)
        r->bar.fn = fn;
    if (++r->bar.count >= r->nlive) {
        barrier_complete_locked(r);
    } else {
        while (gen == r->bar.gen)
            pthread_cond_wait(&r->cv, &r->mu);
    }
    double waited = gt_now() - t;
    w->wait_s += waited;
    r->bar.wait_s += waited;
    pthread_mutex_unlock(&r->mu);
}
