/* ps.h - the parameter store: parameters and optimizer state in pinned host memory, split into
 * cache-line-aligned stripes, each with its own lock and version counter.
 *
 * push   applies one worker's gradient with the optimizer, stripe by stripe, each under its lock,
 *        starting at a stripe that depends on the worker so that workers rarely meet.
 * pull   copies the parameters out, each stripe under its lock, and records the stripe versions,
 *        so the store can tell how stale a gradient was when it is applied.
 * stripes == 0 is lock-free Hogwild: no locks, every access a relaxed atomic (see optim.h).
 * The clocked modes (src/mode_clocked.c) split an update's stripes between workers with
 * gt_ps_apply_stripes, gt_ps_store_stripes and gt_ps_stripes_span. */
#ifndef GT_PS_H
#define GT_PS_H

#include "gputrain/optim.h"
#include <pthread.h>
#include <stdatomic.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GT_STALE_BINS 64 /* staleness histogram: 0..62 exact, 63 = 63 or more */

typedef struct gt_stripe {
    pthread_mutex_t lock;
    _Atomic uint64_t version;   /* updates applied to this stripe */
    size_t lo, hi;              /* parameter range [lo, hi) */
    char pad[GT_CACHELINE];     /* keeps neighbouring stripes' locks off one cache line */
} gt_stripe;

typedef struct gt_ps {
    size_t n;                   /* parameters */
    float *params;              /* n, pinned where CUDA exists */
    float *state[2];            /* optimizer state arrays (NULL where unused) */
    int nstate;
    gt_optim_cfg optim;
    int nstripes;               /* 0 = lock-free: one lock-free pseudo-stripe covers everything */
    int nranges;                /* max(nstripes, 1) */
    gt_stripe *stripes;
    _Atomic uint64_t updates;   /* optimizer updates applied (Adam's t) */
    _Atomic uint64_t nonfinite; /* gradients refused for NaN/Inf */
    /* telemetry */
    _Atomic uint64_t lock_wait_ns;
    _Atomic uint64_t stale_hist[GT_STALE_BINS];
    _Atomic uint64_t stale_max;
    _Atomic uint64_t stale_sum, stale_count;
} gt_ps;

/* Default stripe count: enough that W workers starting at different stripes rarely collide, each
 * stripe at least 16 KiB so a lock round-trip is small next to its update. */
int gt_ps_default_stripes(size_t n);

int gt_ps_init(gt_ps *ps, size_t n, int nstripes, const gt_optim_cfg *optim, gt_err *e);
void gt_ps_free(gt_ps *ps);

/* Copies the parameters into dst; ver (nranges entries, may be NULL) receives stripe versions. */
void gt_ps_pull(gt_ps *ps, float *dst, uint64_t *ver);

/* One optimizer update with gradient g*gscale, stripe by stripe starting at the worker's stripe;
 * ver: versions recorded at the pull the gradient was computed from (NULL: not tracked).
 * epoch: training progress for the schedule. Returns the staleness (max over stripes). */
uint64_t gt_ps_push(gt_ps *ps, int worker, int nworkers, const float *g, float gscale,
                    const uint64_t *ver, double epoch);

/* Applies one update to stripes [s_lo, s_hi) only, with update number t (sync and ssp split or
 * delegate the update of a clock this way). */
void gt_ps_apply_stripes(gt_ps *ps, int s_lo, int s_hi, const float *g, float gscale,
                         uint64_t t, double epoch);

/* Overwrites stripes [s_lo, s_hi) of the parameters with src (local-mode averaging). */
void gt_ps_store_stripes(gt_ps *ps, int s_lo, int s_hi, const float *src);

/* Moves stripes [s_lo, s_hi) from the base `from` to the base `to`, keeping what was pushed since
 * `from` was pulled: p = to + (p - from), each stripe under its lock (cross-host averaging; where
 * nothing was pushed meanwhile the stripes become `to` exactly). */
void gt_ps_rebase_stripes(gt_ps *ps, int s_lo, int s_hi, const float *from, const float *to);

/* Copies optimizer state array i (< nstate) into dst, each stripe under its lock (not counted as
 * lock wait: checkpoint snapshots are rare). */
void gt_ps_pull_state(gt_ps *ps, int i, float *dst);

/* The parameter range [lo, hi) that stripes [s_lo, s_hi) cover (stripes are contiguous and in
 * order); empty when s_lo >= s_hi. Lets a caller work on its part of a split update without
 * walking the stripes itself. */
void gt_ps_stripes_span(const gt_ps *ps, int s_lo, int s_hi, size_t *lo, size_t *hi);

/* Adds one staleness observation (the clocked modes measure it themselves). */
void gt_ps_note_staleness(gt_ps *ps, uint64_t stale);

/* True when every element of g[0..n) is finite. */
int gt_all_finite(const float *g, size_t n);

#ifdef __cplusplus
}
#endif
#endif
