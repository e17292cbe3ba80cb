/* ps_pool.c - persistent helper threads for the parameter store's large pushes and pulls.
 *
 * A job is published under the pool's mutex with a new generation number; helpers wake, copy it
 * and take part numbers from an atomic counter, as does the caller. The caller returns only when
 * every part has run and no helper still holds the job, so the job (often on the caller's stack)
 * is never read after the call, and a slow helper can never take a part of the next job with the
 * previous job's function. */
#include "ps_pool.h"
#include "gputrain/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct gt_ps_pool {
    pthread_mutex_t busy;      /* held by the caller whose job runs */
    pthread_mutex_t lock;      /* guards the fields below */
    pthread_cond_t work, done; /* a job was published / a helper finished one */
    uint64_t generation;       /* counts published jobs */
    gt_ps_pool_fn fn;
    void *arg;
    int nparts;
    int parts_done, active;    /* of the current job; helpers that hold it */
    int stop;
    _Atomic int next;          /* next part to take */
    int nhelpers;
    pthread_t *threads;
};

/* Takes and runs parts of the job until none is left; returns how many it ran. */
static int pool_take_parts(gt_ps_pool *p, gt_ps_pool_fn fn, void *arg, int nparts)
{
    int ran = 0;
    for (int i; (i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < nparts;) {
        fn(arg, i);
        ran++;
    }
    return ran;
}

static void *pool_helper(void *arg)
{
    gt_ps_pool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->generation == seen && !p->stop)
            pthread_cond_wait(&p->work, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        gt_ps_pool_fn fn = p->fn;
        void *job = p->arg;
        int nparts = p->nparts;
        p->active++;
        pthread_mutex_unlock(&p->lock);
        int ran = pool_take_parts(p, fn, job, nparts);
        pthread_mutex_lock(&p->lock);
        p->active--;
        p->parts_done += ran;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

gt_ps_pool *gt_ps_pool_create(int nhelpers)
{
    if (nhelpers < 1)
        return NULL;
    gt_ps_pool *p = calloc(1, sizeof *p);
    pthread_t *threads = calloc((size_t)nhelpers, sizeof *threads);
    if (!p || !threads) {
        free(p);
        free(threads);
        return NULL;
    }
    p->threads = threads;
    pthread_mutex_init(&p->busy, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    for (; p->nhelpers < nhelpers; p->nhelpers++)
        if (pthread_create(&p->threads[p->nhelpers], NULL, pool_helper, p) != 0) {
            gt_ps_pool_destroy(p);
            return NULL;
        }
    return p;
}

void gt_ps_pool_destroy(gt_ps_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->nhelpers; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->busy);
    free(p->threads);
    free(p);
}

int gt_ps_pool_helpers(const gt_ps_pool *p) { return p->nhelpers; }

int gt_ps_pool_try_run(gt_ps_pool *p, gt_ps_pool_fn fn, void *arg, int nparts)
{
    if (pthread_mutex_trylock(&p->busy) != 0)
        return -1;
    pthread_mutex_lock(&p->lock);
    /* A helper that woke late for the previous job may still hold it: let it see that job's
     * counter exhausted before the counter restarts. */
    while (p->active > 0)
        pthread_cond_wait(&p->done, &p->lock);
    p->fn = fn;
    p->arg = arg;
    p->nparts = nparts;
    p->parts_done = 0;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->generation++;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    int ran = pool_take_parts(p, fn, arg, nparts);
    pthread_mutex_lock(&p->lock);
    p->parts_done += ran;
    while (p->parts_done < nparts || p->active > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->busy);
    return 0;
}
