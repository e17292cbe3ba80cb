/* ps.h - the parameter store: parameters and optimizer state in pinned host memory, split into
 * cache-line-aligned stripes, each with its own lock and version counter.
 *
 * push   applies one worker's gradient with the optimizer, stripe by stripe, each under its lock,
 *        starting at a stripe that depends on the worker so that workers rarely meet.
 * pull   copies the parameters out, each stripe under its lock, and records the stripe versions,
 *        so the store can tell how stale a gradient was when it is applied.
 * stripes == 0 is lock-free Hogwild: no locks, every access a relaxed atomic (see optim.h).
 * A large push, pull or stripe apply is shared with a few helper threads the store owns
 * (src/ps_pool.c); every stripe is still locked and applied as one piece, so the bits are the same.
 * The clocked modes (src/mode_clocked.c) split an update's stripes between workers with
 * gt_ps_apply_stripes, gt_ps_store_stripes and gt_ps_stripes_span.
 *
 * A model with batch norm also has buffers (running statistics, model.h), which the store keeps
 * beside the parameters under one lock of their own (they are small: resnet18's are 9,620
 * floats): every step a worker pushes folds its batch's statistics into them (gt_ps_push_stats),
 * so they are the running statistics of every batch trained, in the order the store took them.
 *
 * With an exponential moving average (gt_ps_init_ema, --ema DECAY) the store also keeps ema, n
 * floats in the same stripes: every update applied to a stripe, under its lock (relaxed atomics
 * in the lock-free store), is followed by ema = d*ema + (1-d)*p over that stripe, where
 * d = gt_ps_ema_decay(DECAY, t, 1) for the update's number t. A local-mode average that replaces
 * a stripe (gt_ps_store_stripes) counts as one update standing for the steps it averages. */
#ifndef GT_PS_H
#define GT_PS_H

#include "gputrain/model.h"
#include "gputrain/optim.h"
#include <pthread.h>
#include <stdatomic.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GT_STALE_BINS 64 /* staleness histogram: 0..62 exact, 63 = 63 or more */

#define GT_PS_MAX_POOLS 8 /* walks that use helper threads at once, at most */

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
    /* helper threads for large pushes, pulls and stripe applies (src/ps_pool.c) */
    struct gt_ps_pool *pools[GT_PS_MAX_POOLS]; /* each serves one walk at a time */
    int npools;                 /* 0 until started, and where none would help */
    _Atomic int pool_state;     /* 0 undecided, 1 being started, 2 decided */
    size_t pool_min;            /* a walk over at least this many parameters uses a pool */
    int threads;                /* threads of a large walk, its caller included, where the store
                                   starts its own (--store-threads); 0: gt_ps_default_threads */
    /* batch norm's running statistics (gt_ps_init_buffers): NULL for a model without them */
    float *buffers;             /* model->nbuffers floats */
    const gt_model *model;      /* their layout, for gt_model_fold_stats */
    pthread_mutex_t buffer_lock;
    /* exponential moving average of the parameters (gt_ps_init_ema): NULL when off */
    float *ema;                 /* n floats, in the parameters' stripes */
    float ema_decay;            /* DECAY of --ema, 0 < DECAY < 1 */
} gt_ps;

/* Default stripe count: enough that W workers starting at different stripes rarely collide, each
 * stripe at least 16 KiB so a lock round-trip is small next to its update. */
int gt_ps_default_stripes(size_t n);

int gt_ps_init(gt_ps *ps, size_t n, int nstripes, const gt_optim_cfg *optim, gt_err *e);
void gt_ps_free(gt_ps *ps);

/* Gives the store the model's buffers, at their initial values (nothing for a model without). */
int gt_ps_init_buffers(gt_ps *ps, const gt_model *m, gt_err *e);
/* Copies the buffers into dst (nothing where there are none). */
void gt_ps_pull_buffers(gt_ps *ps, float *dst);
/* Overwrites the buffers with src (a resumed checkpoint, a replica's, a rollback). */
void gt_ps_store_buffers(gt_ps *ps, const float *src);
/* Folds one step's batch statistics into the buffers (gt_model_fold_stats), under their lock. */
void gt_ps_push_stats(gt_ps *ps, const float *stats);

/* Starts the moving average at the current parameters (or at src, e.g. a resumed checkpoint's
 * ema tensors, when non-NULL), with decay 0 < decay < 1. Call before any worker runs. */
int gt_ps_init_ema(gt_ps *ps, float decay, const float *src, gt_err *e);
/* The decay of update t (1-based): min(decay, (1 + t) / (10 + t)), the usual warm-up (timm,
 * TensorFlow's num_updates), so that the first evaluations are not the initial weights'; where
 * one update stands for span steps ending at t (local's averages, gt_ps_ema_span), the product of
 * those steps' decays, so that the average's horizon counts steps in every mode. */
float gt_ps_ema_decay(float decay, uint64_t t, unsigned span);
/* Whether update t (1-based) takes the average, and for how many updates it stands (0: it does
 * not): every update while the average is shorter than 100 updates, then one in 2, 4 or 8 as long
 * as their weight stays within 2% of the average, standing for the updates since the last one
 * (gt_ps_ema_decay's span), so that every update is counted once, as if the parameters had
 * stood at the latest over the ones skipped. A long average gains nothing from each update (at
 * 0.999 it is 1,000 updates long) and each costs a pass over the parameters and the average.
 * The store's updates and the device step's use it alike, so the two keep the same bits. */
unsigned gt_ps_ema_span(float decay, uint64_t t);
/* Copies the moving average into dst, each stripe under its lock (nothing where it is off). */
void gt_ps_pull_ema(gt_ps *ps, float *dst);
/* Overwrites the moving average with src, each stripe under its lock (a rollback). */
void gt_ps_store_ema(gt_ps *ps, const float *src);

/* Copies the parameters into dst; ver (nranges entries, may be NULL) receives stripe versions. */
void gt_ps_pull(gt_ps *ps, float *dst, uint64_t *ver);
/* Brings dst up to date with the parameters where a stripe's version differs from ver's (each
 * such stripe copied with streaming stores under its lock, its version into ver): a copy that
 * the applies keep (gt_ps_apply_stripes_out) and anything else that wrote the store (a rollback,
 * a resume) has left behind. ver entries of UINT64_MAX match no version. */
void gt_ps_pull_stale(gt_ps *ps, float *dst, uint64_t *ver);

/* One optimizer update with gradient g*gscale, stripe by stripe starting at the worker's stripe;
 * ver: versions recorded at the pull the gradient was computed from (NULL: not tracked).
 * epoch: training progress for the schedule. Returns the staleness (max over stripes). */
uint64_t gt_ps_push(gt_ps *ps, int worker, int nworkers, const float *g, float gscale,
                    const uint64_t *ver, double epoch);
/* gt_ps_push, giving the update's own number (1-based) in *update: the store's count may move on
 * before the caller reads it, when another push lands. */
uint64_t gt_ps_push_numbered(gt_ps *ps, int worker, int nworkers, const float *g, float gscale,
                             const uint64_t *ver, double epoch, uint64_t *update);
/* gt_ps_push_numbered and the next step's pull in one walk: each stripe, under the lock its update
 * took, copied into dst as the update left it, its version into ver (a push then gt_ps_pull with one
 * worker, bit for bit; with several, each stripe as this update left it, not as the others' pushes
 * left it by the time a later pull would read it). dst is written with streaming stores (an upload's
 * source). The lock-free store pushes, then pulls. */
uint64_t gt_ps_push_pull(gt_ps *ps, int worker, int nworkers, const float *g, float gscale,
                         uint64_t *ver, double epoch, uint64_t *update, float *dst);

/* One worker's update applied part by part (hogwild's store step in parts, --store-parts): begin
 * numbers it as gt_ps_push_numbered does (u->t); each part applies it to stripes [s_lo, s_hi)
 * from g, the versions g was computed from in ver, then, under the same lock, copies each stripe
 * as the update left it into dst (NULL: the caller reads the store itself) and its version into
 * ver: a push and the next step's pull of those stripes in one walk. Parts may come in any order and each stripe once; end records the
 * staleness (the largest over the parts) and returns it. With one worker, pushing every stripe
 * this way and then computing on dst is gt_ps_push and gt_ps_pull, bit for bit. A striped store
 * only (the lock-free store has one range: parts do nothing there). */
typedef struct gt_ps_update {
    uint64_t t;                 /* the update's number (1-based) */
    gt_optim_step step;
    float gscale;
    int worker, nworkers;
    uint64_t stale;
} gt_ps_update;
void gt_ps_update_begin(gt_ps *ps, gt_ps_update *u, int worker, int nworkers, float gscale,
                        double epoch);
void gt_ps_update_part(gt_ps *ps, gt_ps_update *u, int s_lo, int s_hi, const float *g,
                       uint64_t *ver, float *dst);
/* gt_ps_update_part from a bf16 gradient (bf16.h; --store-grad bf16): the same bits as
 * gt_ps_update_part from g widened to fp32, reading half the gradient's bytes. */
void gt_ps_update_part_bf16(gt_ps *ps, gt_ps_update *u, int s_lo, int s_hi, const uint16_t *g,
                            uint64_t *ver, float *dst);
uint64_t gt_ps_update_end(gt_ps *ps, gt_ps_update *u);

/* Applies one update to stripes [s_lo, s_hi) only, with update number t (sync and ssp split or
 * delegate the update of a clock this way). */
void gt_ps_apply_stripes(gt_ps *ps, int s_lo, int s_hi, const float *g, float gscale,
                         uint64_t t, double epoch);

/* gt_ps_apply_stripes of the sum g + addends[0] + ... + addends[naddends - 1], added in that
 * order into g (which holds the sum afterwards) stripe by stripe, just before each stripe's
 * update: the same bits as summing the whole arrays first, in one walk that the helper threads
 * share. */
void gt_ps_apply_stripes_sum(gt_ps *ps, int s_lo, int s_hi, float *g, float *const *addends,
                             int naddends, float gscale, uint64_t t, double epoch);
/* gt_ps_apply_stripes_sum that also copies each stripe, as its update left it, into dst with
 * streaming stores under its lock, and its version into ver: a copy that a device's copy engine
 * reads faster than the store's own lines, which the update leaves modified in the cores' caches
 * (sync's and ssp's lone worker). dst NULL: gt_ps_apply_stripes_sum. */
void gt_ps_apply_stripes_out(gt_ps *ps, int s_lo, int s_hi, float *g, float *const *addends,
                             int naddends, float gscale, uint64_t t, double epoch, float *dst,
                             uint64_t *ver);

/* Overwrites stripes [s_lo, s_hi) of the parameters with src (local-mode averaging); with a
 * moving average, it stands for the span steps after the store's update count (the caller's
 * clock, not yet moved), and its number is the last of them (gt_ps_ema_decay). span 0: the
 * parameters are replaced and the average is left as it is (allreduce brings its own). */
void gt_ps_store_stripes(gt_ps *ps, int s_lo, int s_hi, const float *src, unsigned span);

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

/* The pct-th percentile (1..100) of the staleness observed: the smallest staleness with at least
 * pct% of the observations at or below it; 0 when there are none. *capped (may be NULL) is set to
 * 1 when that is the histogram's last bin, GT_STALE_BINS - 1, which counts every staleness from
 * there up, so the true percentile is that or more; to 0 otherwise. (stale_max is exact.) */
uint64_t gt_ps_stale_percentile(gt_ps *ps, int pct, int *capped);

/* A walk over fewer parameters than this runs on its caller alone: below it, waking helpers costs
 * more than they save (a lenet5 push is ~9 us). */
#define GT_PS_POOL_MIN ((size_t)256 * 1024)

/* Threads that run one large walk together, its caller included, when nworkers workers walk the
 * store at once: the host's online cores shared between them, at most GT_PS_THREADS_MOST (one
 * walk is bound by memory bandwidth, which a few cores fill; more walks at once share it), or
 * GT_PS_THREADS_MOST_ONE for a lone worker, at least 1. Measured on a 64-core 4x H200 host
 * (docs/perf-notes.md, "The store step in parts"): one worker's resnet18 step gained 4-9% from 8
 * to 16 threads and lost from 16 to 24; four workers at 16 each ran cnn-wide 15% slower. */
#define GT_PS_THREADS_MOST 8
#define GT_PS_THREADS_MOST_ONE 16
int gt_ps_default_threads(int nworkers);

/* Gives the store npools (1..GT_PS_MAX_POOLS) groups of nthreads - 1 helper threads (nthreads <= 1:
 * none) for pushes, pulls and stripe applies of at least min_params parameters: a walk takes a
 * free group, or runs alone where every group is busy. Call once, before any worker runs; without
 * it, the first push of at least GT_PS_POOL_MIN parameters starts the default helpers for its
 * nworkers (gt_ps_start_threads). */
int gt_ps_set_pools(gt_ps *ps, int npools, int nthreads, size_t min_params, gt_err *e);

/* Groups of helpers when nworkers workers walk the store at once: one a worker, at most
 * GT_PS_MAX_POOLS. */
int gt_ps_default_pools(int nworkers);

/* The default helpers for nworkers workers (gt_ps_default_pools groups of
 * gt_ps_default_threads), for walks of at least GT_PS_POOL_MIN parameters. */
int gt_ps_start_threads(gt_ps *ps, int nworkers, gt_err *e);

/* True when every element of g[0..n) is finite. */
int gt_all_finite(const float *g, size_t n);

#ifdef __cplusplus
}
#endif
#endif
