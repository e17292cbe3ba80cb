/* ps_pool.h - the parameter store's small pool of helper threads, private to src/ps.c.
 *
 * A large push or pull is cut into parts (runs of stripes); the calling worker and the helpers
 * take parts until none is left. The threads are started once, with the store, and sleep on a
 * condition variable between jobs, so a step creates no thread. One job runs at a time: a caller
 * that finds the pool busy (another worker's push) does its job alone, as the store always did. */
#ifndef GT_PS_POOL_H
#define GT_PS_POOL_H

typedef struct gt_ps_pool gt_ps_pool;

/* One part of a job: fn(arg, part) for part in [0, nparts). */
typedef void (*gt_ps_pool_fn)(void *arg, int part);

/* Starts nhelpers threads (>= 1); NULL when out of memory or a thread cannot be created. */
gt_ps_pool *gt_ps_pool_create(int nhelpers);

/* Stops and joins the helpers. The pool must be idle. */
void gt_ps_pool_destroy(gt_ps_pool *p);

/* Helper threads (the caller makes one more). */
int gt_ps_pool_helpers(const gt_ps_pool *p);

/* Runs every part on the helpers and the calling thread and returns 0 once all are done; returns
 * -1 at once, running nothing, when another caller's job holds the pool. */
int gt_ps_pool_try_run(gt_ps_pool *p, gt_ps_pool_fn fn, void *arg, int nparts);

#endif
