/* barrier.c - the barrier over the live workers. The last to arrive runs the barrier's leader
 * work under r->mu before releasing the others; a worker that leaves completes a barrier that
 * waited only on it (worker_leave_locked).
 *
 * GPU workers spend a step waiting on their device, so their host threads are mostly idle: a
 * waiter there first spins on the barrier's generation for a short while, off the lock, before it
 * sleeps on the condition variable. A sleeping thread's wake-up costs tens of microseconds, which
 * at lenet5's ~0.15 ms step and two barriers a sync clock is a large share of the step. CPU workers
 * compute on the host's cores, where a spinning waiter would take a core from a worker, so they
 * only sleep. */
#include "run.h"

#include <unistd.h>

enum { BARRIER_SPIN_NS = 200000 };

/* Releases the barrier's waiters after its leader work. Caller holds r->mu. */
void barrier_complete_locked(run *r)
{
    leader_fn fn = r->bar.fn;
    r->bar.count = 0;
    r->bar.fn = NULL;
    if (fn)
        fn(r);
    __atomic_add_fetch(&r->bar.gen, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&r->cv);
}

/* Whether waiters may spin: GPU workers, and more cores than live workers. */
static int barrier_may_spin(const run *r)
{
    static long cores_seen;
    long cores = __atomic_load_n(&cores_seen, __ATOMIC_RELAXED);
    if (!cores) {
        cores = sysconf(_SC_NPROCESSORS_ONLN);
        __atomic_store_n(&cores_seen, cores, __ATOMIC_RELAXED);
    }
    return r->cfg->cpu_workers == 0 && cores > r->nlive;
}

/* Spins, off the lock, until the barrier's generation moves on or the budget is spent. */
static void barrier_spin(run *r, uint64_t gen)
{
    uint64_t until = gt_now_ns() + BARRIER_SPIN_NS;
    while (__atomic_load_n(&r->bar.gen, __ATOMIC_ACQUIRE) == gen && gt_now_ns() < until) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* Waits for every live worker; the last to arrive runs fn (under r->mu) before releasing them.
 * Live workers always wait at the same barrier, so the first arrival's fn is everyone's. With
 * help, a waiting worker calls it each time it wakes (under r->mu, which help may release: the
 * parts of a clock's apply that became ready, clocked_apply.c) and counts among the idle workers
 * meanwhile, so that a part that becomes ready wakes it; the time help takes is its own phase's,
 * not the barrier's. */
void run_barrier_help(run *r, worker *w, leader_fn fn, void (*help)(run *r, worker *w))
{
    double t = gt_now(), busy = w->push_s;
    pthread_mutex_lock(&r->mu);
    uint64_t gen = r->bar.gen;
    if (r->bar.count == 0)
        r->bar.fn = fn;
    if (++r->bar.count >= r->nlive) {
        barrier_complete_locked(r);
    } else {
        if (!help && barrier_may_spin(r)) {
            pthread_mutex_unlock(&r->mu);
            barrier_spin(r, gen);
            pthread_mutex_lock(&r->mu);
        }
        while (gen == r->bar.gen) {
            if (help) {
                help(r, w);
                if (gen != r->bar.gen)
                    break;
                r->clk.idle++;
            }
            pthread_cond_wait(&r->cv, &r->mu);
            if (help)
                r->clk.idle--;
        }
    }
    double helped = w->push_s - busy;
    r->bar.wait_s += gt_now() - t - helped;
    pthread_mutex_unlock(&r->mu);
    /* The worker's wait ends once it runs again: the unlock may hand the CPU to a thread it
     * woke (more threads than cores), and that time is the barrier's too. */
    w->wait_s += gt_now() - t - helped;
}

void run_barrier(run *r, worker *w, leader_fn fn) { run_barrier_help(r, w, fn, NULL); }
