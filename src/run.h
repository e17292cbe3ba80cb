/* run.h - the pieces of a training run, private to src/ (the public face is gputrain/train.h).
 *
 * A run is one `run` struct shared by the calling thread and one worker thread per device. Its
 * state is split into the parts each module owns; r->mu guards every part but the set-up fields
 * (written before the workers start) and the atomics.
 *
 *   run_core.c      failure and the run's progress, shared by every module
 *   run_lr.c        one update's learning rate: progress, schedule, the guard's factor
 *   barrier.c       the barrier over the live workers
 *   report.c        the only writer of terminal lines and JSONL log records
 *   run_guard.c     the divergence and stall guard: rollbacks and the step-size factor
 *   hosts.c         the calls across hosts (MPI): averaging, agreeing on stops and epoch ends
 *   jobs.c          snapshots for the calling thread: evaluations and checkpoints
 *   supervisor.c    signals, the job loop of the calling thread, the stall watchdog
 *   worker.c        one worker's life: pull, compute, leave; the epoch loop and its end
 *   mode_hogwild.c  hogwild and lock-free hogwild, with and without --overlap
 *   mode_clocked.c  the clocked core: shares, slots and claims of sync, ssp, local, allreduce
 *   mode_sync.c, mode_ssp.c, mode_local.c, mode_allreduce.c   one clocked mode each
 *   train.c         the mode table, set-up and teardown (gt_train_run)
 *
 * A mode is one row of the names table (names.c: its word and properties) and one gt_mode_ops
 * (below, its behaviour) in train.c's table. */
#ifndef GT_RUN_H
#define GT_RUN_H

#include "gputrain/train.h"
#include "gputrain/guard.h"
#include "gputrain/ps_save.h"
#include "gputrain/recipe.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/* The shares of a clock (claimed, deposited) are bits of one uint64_t mask, one bit per worker of
 * this host: the worker limit may not pass this. */
#define RUN_SHARE_BITS 64
_Static_assert(GT_MAX_WORKERS <= RUN_SHARE_BITS, "a clock's shares are bits of one uint64_t");

#define RUN_MAX_JOBS 4 /* snapshots waiting for the calling thread; workers wait when full */
#define JOB_EVAL 1
#define JOB_CKPT 2

struct run;
struct worker;

/* A snapshot of the store for the calling thread to evaluate and/or write as a checkpoint. */
typedef struct job {
    int kinds;            /* JOB_EVAL | JOB_CKPT */
    float *params;
    float *state[2];      /* optimizer state (checkpoints only) */
    float *buffers;       /* the store's buffers (batch norm's running statistics); NULL if none */
    float *ema;           /* the store's moving average (--ema), which evaluations use; NULL if
                           * none */
    uint32_t epoch;       /* epochs completed when taken */
    uint64_t step;        /* clocks/batches completed inside the next epoch */
    uint64_t samples, updates;
    double wall;
    double train_loss, train_acc;
    int evaluated;        /* JOB_EVAL done already, by the replicas (allreduce): no params */
    double test_loss, test_acc;
} job;

/* How a mode acts on the guard's verdict (run_guard.c) when --on-diverge recover. */
typedef enum run_rollback {
    ROLLBACK_NOW = 0,      /* the store is restored at once, under r->mu, workers running: a push
                            * or apply in flight meets each stripe before or after its restore */
    ROLLBACK_AT_AVERAGE,   /* replicas hold their own parameters: at the next averaging barrier */
    ROLLBACK_AT_BARRIER,   /* the devices hold identical replicas and the store is current only
                            * when the mode brings it there: the mode saves good points
                            * (guard_save_wanted) and restores at its next barrier
                            * (guard_at_barrier_locked), where every replica reloads the store */
} run_rollback;

/* Leader work of a barrier: runs under r->mu in the last worker to arrive. */
typedef void (*leader_fn)(struct run *r);

/* One mode: what the worker loop, the set-up and the calling thread ask of it. NULL where a mode
 * has nothing to do. */
typedef struct gt_mode_ops {
    /* Copied at set-up (train.c) from the mode's row of the names table (names.h), which is their
     * one source: a mode file leaves them out. */
    const char *name;        /* as logs and checkpoints write it */
    int clocked;             /* runs on the clocked core (mode_clocked.c) */
    /* The mode's own. */
    int replicas;            /* every worker keeps its own replica that takes the same step: a
                              * worker that fails ends the run, and signals are acted on only at
                              * the mode's own barrier */
    int hosts_rounds;        /* across hosts, the stores are averaged in rounds */
    int hosts_average;       /* across hosts, the stores are averaged at epoch ends too */
    run_rollback rollback;   /* the guard's rollback (runs across hosts stop instead) */
    int slot_shares;         /* clocked: share_done puts each share's gradient in its slot of
                              * the clock (clocked_slot), where a device may write it directly */
    /* The mode's own state: r->own (run_state bytes, zeroed before check) and each worker's
     * w->own (worker_state bytes, zeroed before init), of types its file defines; free releases
     * what init put in them (and gives the devices their own buffers back). */
    size_t run_state, worker_state;
    void (*free)(struct run *r);
    /* Set-up before the store: the mode's own refusals of the settings, its devices' set-up. */
    int (*check)(struct run *r, gt_device **devices, gt_err *e);
    /* Set-up after the store, before the workers start: buffers, resumed positions. */
    int (*init)(struct run *r, gt_device **devices, const gt_start *start, gt_err *e);
    /* A worker thread's first act; -1 ends the run (the worker's error says why). */
    int (*worker_start)(struct run *r, struct worker *w);
    /* One epoch of one worker from step `first` (a resumed run's position), or until a halt. */
    void (*epoch)(struct run *r, struct worker *w, uint64_t first);
    /* Clocked modes: the epoch's start, one clock and the epoch's end for one worker. */
    int (*clocked_begin)(struct run *r, struct worker *w);
    int (*clock)(struct run *r, struct worker *w, uint64_t c);
    int (*clocked_end)(struct run *r, struct worker *w, uint64_t done);
    /* Clocked modes: where a computed share goes (rc 1: the gradient is dropped, --on-nan skip). */
    int (*share_done)(struct run *r, struct worker *w, uint64_t clock, int share, int rc);
    /* Clocked modes (NULL: worker_compute): a share's step, its gradient into w->dev->grad as
     * worker_compute's (0; 1: dropped, --on-nan skip; -1: the worker failed). */
    int (*share_compute)(struct run *r, struct worker *w, uint64_t clock, int share,
                         const gt_batch *b, gt_step_out *o);
    /* Clocked modes in parts (clocked_apply.c): applies the parts of the clocks' applies that are
     * ready, where a part has landed and no worker waits to take it. Caller holds r->mu. */
    void (*apply_ready_locked)(struct run *r, struct worker *w);
    /* Whether the epoch's batches are all done. Caller holds r->mu. */
    int (*epoch_complete_locked)(struct run *r);
    /* Steps of an epoch as checkpoints count them; where an interrupted run stands in it. */
    uint64_t (*epoch_steps)(const struct run *r);
    uint64_t (*stop_step)(const struct run *r);
    /* The epoch's end, under r->mu in the barrier's leader: positions back to the start. */
    void (*epoch_reset)(struct run *r);
    /* Its part of a snapshot the calling thread will take (allreduce: the evaluation its
     * replicas made). Caller holds r->mu. */
    void (*snapshot_locked)(struct run *r, job *j);
    /* A fatal error: release workers that wait on each other outside r->mu. */
    void (*abort)(void);
} gt_mode_ops;

typedef struct worker {
    struct run *run;
    int index;                 /* also the share it owns in clocked modes */
    gt_device *dev;
    pthread_t thread;
    uint64_t *ver;             /* stripe versions at the last pull */
    void *own;                 /* the mode's state for this worker (gt_mode_ops.worker_state) */
    _Atomic uint64_t steps, samples;
    _Atomic uint64_t last_progress_ns;
    _Atomic int alive;
    int stalled_reported;      /* the watchdog warned and the worker has not moved since */
    double t_first, t_last;    /* when its first and its last step ended (its busy time) */
    /* Where its steps' time went, summed over the run (gt_worker_stats; docs/internals.md, "Where
     * a step's time goes"): every mode adds to these with gt_now() around its phases. */
    double pull_s;             /* the store to the device (or its buffer), upload included */
    double device_s;           /* the device's step: forward, backward, gradient download */
    double push_s;             /* the store's update work it does: push, stripe applies, own step */
    double wait_s;             /* barriers, staleness gates, queued steps waited for */
    uint64_t clock;            /* clocked modes: the clock it is working on (ssp's spread) */
    char error[GT_ERRLEN];
} worker;

/* barrier.c: the barrier over the live workers. */
typedef struct run_barrier_state {
    int count;                 /* workers waiting */
    uint64_t gen;              /* completed barriers: a waiter leaves when it changes */
    leader_fn fn;              /* leader work of the barrier being waited at */
    double wait_s;             /* time all workers spent waiting at barriers */
} run_barrier_state;

/* mode_clocked.c and the clocked modes: clocks, shares and gradient slots. */
typedef struct run_clocked {
    uint32_t clocks;           /* clocks per epoch */
    int R;                     /* clocks in flight: ssp staleness + 1, local --sync-every, sync 1 */
    int nslots;                /* gradient slot rings: R, or 1 for local (replicas to average) */
    float *slots;              /* nslots * W * n */
    uint64_t *claimed, *deposited; /* per ring slot: bit per share */
    uint64_t *slot_read_clock; /* per ring slot: lowest applied count its gradients were read at */
    float *stat_slots;         /* R * W * nbuffers: each share's batch statistics (batch norm),
                                  folded into the store in share order when its clock is applied */
    uint64_t *stats_in;        /* per ring slot: bit per share whose statistics are in */
    uint64_t applied;          /* clocks applied this epoch */
    uint64_t updates0;         /* the run's step (ps.updates) before this epoch's clock 0: clock c
                                * is step updates0 + c + 1 (modulo 2^64: a resumed run of fewer
                                * workers starts past clock 0 with fewer steps done) */
    uint64_t spread_max;       /* largest gap between the fastest and slowest worker clock */
    uint64_t pending_upto;     /* the last clock the workers at a sync/local barrier worked on */
    int halt_seen;             /* halt as a barrier's leader saw it: the same for every worker */
    int complete_seen;         /* whether clocks [applied, pending_upto] had all their shares then */
    /* clocked_apply.c: with the store step in parts (r->store_parts, sync and ssp) a worker's own
     * share lands in its slot part by part and each part of a clock is applied once every share's
     * is in; a share claimed from a failed worker is computed into the worker's own buffer, and
     * share_done copies what no apply has taken. The apply of clock `applied` in progress, in
     * apply_parts parts of the stripes that any worker takes once their gradients are in (0
     * parts: none in progress) */
    int apply_parts, apply_done;
    int apply_finishing;       /* ssp: its last steps (the round across hosts, the fold) run */
    int apply_round;           /* ssp: the apply ends with a round across hosts */
    unsigned char part_state[GT_STORE_PARTS_MAX]; /* each part open, taken or applied */
    uint64_t apply_t;          /* its update number, epoch and gradient scale */
    double apply_epoch;
    float apply_scale;
    uint64_t *landed;          /* in parts: per ring slot and part, the shares whose gradient of
                                * the part is in the slot (R x store_parts) */
    int order[GT_STORE_PARTS_MAX]; /* in parts: the order a device that does not mark takes them */
    int idle;                  /* workers waiting on r->cv that take parts as they become ready */
    /* clocked_apply.c: a lone worker on one host (sync, ssp) computes on its own copy of the
     * parameters, which each apply writes as it updates the store (NULL: on the store in place) */
    float *copy;
    uint64_t *copy_ver;        /* the stripes' versions the copy holds */
} run_clocked;

/* store_parts.c: the store step in parts. */
typedef struct run_parts {
    int part_s[GT_STORE_PARTS_MAX + 1];    /* part k is stripes [part_s[k], part_s[k + 1]) */
    size_t bounds[GT_STORE_PARTS_MAX + 1]; /* and parameters [bounds[k], bounds[k + 1]) */
} run_parts;

/* hosts.c: averaging across hosts. */
typedef struct run_hosts {
    float *xsnap, *xavg;       /* the store as pulled, then the hosts' mean */
    int stop_sig;              /* the signal the hosts agreed to stop on */
} run_hosts;

/* run_core.c: training statistics since the last evaluation, and totals. */
typedef struct run_stats {
    double loss_acc;
    uint64_t correct_acc, seen_acc;
    _Atomic uint64_t samples_total; /* of every host: this host's times H */
    uint64_t skipped;          /* gradients dropped under --on-nan skip */
} run_stats;

/* jobs.c: the queue to the calling thread and when the next jobs fall due. */
typedef struct run_jobs {
    job q[RUN_MAX_JOBS];
    int n;
    uint64_t next_eval;        /* samples at which the next mid-epoch evaluation is due */
    uint64_t next_ckpt;        /* the run's step at which the next step checkpoint is due */
    int handling;              /* the calling thread is handling a job it took off the queue */
    uint64_t tickets, served;  /* posts in the order their snapshots were taken: each waiting
                                  post holds a ticket and enters the queue on its turn */
    int since_best;            /* evaluations since the monitored accuracy last improved */
    _Atomic int stop_early;    /* --patience ran out: stop_asked says so to the workers */
    float *_Atomic spare[RUN_MAX_JOBS + 2]; /* freed snapshot arrays of r->n floats, taken again
                                             * by the next snapshot (job_free, jobs.c) */
} run_jobs;

/* run_guard.c: the divergence guard (guard.h), fed every step's loss under r->mu. */
typedef struct run_guard {
    gt_guard g;
    gt_ps_saved good;          /* the last good store: parameters and optimizer state */
    uint64_t good_step;        /* ps.updates when `good` was taken */
    double saved_at;           /* gt_now() then */
    double save_cost_s;        /* what taking it cost: the mode's bringing the store up to date
                                * (allreduce: from the GPU) and the copy */
    int pending;               /* ROLLBACK_AT_AVERAGE/_AT_BARRIER: a verdict to act on there */
    int save_wanted;           /* ROLLBACK_AT_BARRIER: a good window asks the mode for a copy */
    unsigned restores;         /* rollbacks done so far (a replica reloads when it moves) */
    char note[256];            /* the last non-finite loss or gradient, for the message */
    _Atomic float scale;       /* the step-size factor every gradient is scaled by (1 until a trip) */
} run_guard;

/* report.c: the JSONL log (host 0 only). */
typedef struct run_report {
    FILE *log;
    pthread_mutex_t log_mu;    /* guards the log (step records come from every worker) and the
                                * terminal's lines */
    int bar_drawn;             /* the progress bar's line is open: ended before any other line */
} run_report;

typedef struct run {
    /* set up before the workers start, read-only afterwards */
    const gt_config *cfg;
    const gt_model *m;
    const gt_data *data;
    gt_mode_ops mode_ops;      /* the mode's operations, with its row's name and properties */
    const gt_mode_ops *ops;    /* &mode_ops */
    int device_step;           /* the steps take their update on the GPUs (train.c) */
    int store_parts;           /* the store step in this many parts (hogwild, ssp:
                                  store_parts.c; 0: whole, as in every other mode) */
    int store_grad_bf16;       /* its parts download the gradient in bf16 (--store-grad) */
    run_parts parts;           /* where the parts lie in the stripes and the parameters */
    gt_ps ps;
    int W;                     /* this host's workers at the start: its shares of each clock */
    int H;                     /* hosts (processes) in the run; 1 without MPI */
    int host;                  /* this host's rank: 0 evaluates, logs and checkpoints */
    int Wg;                    /* workers of all hosts: the shares of a clock */
    int share0;                /* global index of this host's first share */
    worker *workers;
    gt_device *evaluator;
    size_t n;                  /* parameters */
    uint32_t ntrain;
    uint32_t *perm;            /* this epoch's permutation (the epoch's barrier leader renews it) */
    int batch;
    double t0;
    uint64_t samples0;         /* samples_total when this run began (a resumed checkpoint's) */
    double wall0;              /* training wall time before this run (a resumed checkpoint's):
                                * logged wall_s counts up from it */

    pthread_mutex_t mu;        /* guards what follows but atomics */
    pthread_cond_t cv;
    int nlive;                 /* workers alive */
    uint32_t epoch;            /* current epoch (0-based) */
    uint64_t start_clock;      /* resumed runs start the first epoch at this step */
    int halt;                  /* workers leave at the next check */
    int leave;                 /* set by the epoch barrier's leader: every worker leaves there */
    int failed;                /* a fatal error (error[]) ends the run */
    int failed_first;          /* error[] is the cause even where every worker then left (the
                                * guard's stop: the workers' aborts follow from it) */
    char error[GT_ERRLEN];
    int done;                  /* workers that have finished */
    double t_done;             /* when the last worker finished: training wall time ends here */
    run_barrier_state bar;
    run_clocked clk;
    void *own;                 /* the mode's own state (gt_mode_ops.run_state) */
    run_hosts hosts;
    run_stats stats;
    run_jobs jq;
    run_report rep;
    run_guard guard;
} run;

/* One update's learning rate, prepared in one place (run_lr_now, run_lr_at): where the run
 * stands in epochs (the input of the warm-up and --schedule), the update's scalars there (the
 * rate, Adam's bias corrections) and the factor its gradient takes (the guard's, over the number
 * of gradients summed: their mean). */
typedef struct run_lr {
    double epoch;
    gt_optim_step st; /* for an update numbered by its caller; the store prepares its own from
                         epoch and its update number (gt_ps_push, gt_ps_apply_stripes) */
    float gscale;
} run_lr;

/* run_core.c */
void run_fail_locked(run *r, const char *msg);
void run_fail(run *r, const char *msg);
double run_progress_epochs(const run *r, uint64_t samples_total);
void run_wait_locked(run *r, double seconds);

/* run_lr.c: the one call for an update's learning rate: update t (from 1; 0 when the store
 * numbers it) of nsum summed gradients, at the run's progress now, or at samples (every host's)
 * for run_lr_at. */
run_lr run_lr_now(run *r, uint64_t t, int nsum);
run_lr run_lr_at(run *r, uint64_t t, uint64_t samples, int nsum);

/* barrier.c */
void barrier_complete_locked(run *r);
void run_barrier(run *r, worker *w, leader_fn fn);
void run_barrier_help(run *r, worker *w, leader_fn fn, void (*help)(run *r, worker *w));

/* report.c */
int report_open(run *r, const gt_start *start, gt_err *e);
void report_event(run *r, const char *event, const char *message);
void report_note(run *r, const char *message);
void report_checkpoint(run *r, const char *path, uint32_t epoch, uint64_t step, uint64_t epoch_step,
                       uint64_t samples, double wall_s);
void report_signal(run *r, int sig);
void report_step(run *r, worker *w, uint64_t step, uint64_t epoch_step, double loss, int n);
void report_point(run *r, const gt_eval_point *p);
void report_worker_left(run *r, worker *w, const char *why);
void report_stall(run *r, worker *w, double idle);
void report_resume_restart(run *r, uint64_t step, uint64_t epoch_steps);
void report_progress(run *r, uint32_t epoch, double loss, int final);
int report_close(run *r, const gt_run_result *res, int rc, gt_err *e);
void report_recipe(run *r, const gt_recipe *rec);
void report_device_step(run *r);
void report_guard(run *r, const char *what, const char *action, int print);
void report_early_stop(run *r, const gt_run_result *res);

/* run_guard.c */
int guard_init(run *r, gt_err *e);
void guard_free(run *r);
float guard_scale(run *r);
void guard_observe_locked(run *r, double loss);
int guard_nonfinite(run *r, const char *msg);
int guard_pending_locked(run *r);
int guard_save_wanted_locked(run *r);
void guard_saved_locked(run *r, uint64_t step, double since);
void guard_at_barrier_locked(run *r);
int guard_final(run *r, const gt_run_result *res, gt_err *e);

/* supervisor.c */
int stop_asked(const run *r);
int supervise(run *r, gt_run_result *res, gt_err *e);

/* hosts.c */
int hosts_check_same(run *r, const gt_start *start, gt_err *e);
int hosts_average(run *r, gt_err *e);
int hosts_stop_signal(gt_err *e);
void hosts_agreed_locked(run *r, int sig, const gt_err *e);
int hosts_round(run *r, gt_err *e);
int hosts_epoch_end_locked(run *r, int complete);

/* jobs.c */
void job_free(run *r, job *j);
void jobs_spares_free(run *r);
int jobs_snapshot_locked(run *r, job *j, int kinds, uint32_t epoch, uint64_t step);
void jobs_post_snapshot_locked(run *r, int kinds, uint32_t epoch, uint64_t step);
void jobs_post_due_locked(run *r, uint64_t step_in_epoch);
int jobs_handle(run *r, job *j, gt_run_result *res, gt_err *e);
int jobs_write_checkpoint(run *r, const job *j, gt_run_result *res, gt_err *e);
/* "val" or "test": the accuracy --save-best and --patience watch in this run. */
const char *jobs_best_of(const run *r);

/* worker.c */
int worker_injected(run *r, worker *w, uint64_t done);
int worker_check(run *r, worker *w, const gt_step_out *o, uint64_t step);
void worker_account_step_locked(run *r, worker *w, const gt_step_out *o, int n);
int worker_compute(run *r, worker *w, const gt_batch *b, gt_step_out *o, uint64_t step);
int worker_pull(run *r, worker *w);
int worker_load(worker *w);
void worker_mark_time(worker *w);
double worker_phases_s(const worker *w);
void worker_leave_locked(run *r, worker *w, const char *why);
void worker_fail_run_locked(run *r, worker *w);
int epoch_checkpoint_due(const run *r, uint32_t done);
void *worker_main(void *arg);

/* store_parts.c: the store step in parts (hogwild, sync, ssp), each part exchanged as the backward
 * finishes it (device.h's exchange) */
/* The least parameters of a part where each part's apply is a walk of its own and no other worker
 * reads the store between the parts (sync, ssp; hogwild's lone worker): on one H200 cnn-wide
 * (3.3 M) in 12 parts of 275 K ran 15% slower than whole under sync, in 3 parts 8-10% faster
 * (calls 103-104); resnet18 (11.2 M) gained as much in 10 as in 16 (call 105). */
#define STORE_PART_MIN_APPLY ((size_t)1 << 20)
int store_parts_init(run *r, int grad_bf16, size_t part_min);
void store_parts_order(const run *r, int first, int *order);
size_t store_parts_first(const run *r);
void store_parts_free(run *r);
int store_parts_step(run *r, worker *w, const gt_batch *b, gt_step_out *o, uint64_t step,
                     int (*exchange)(run *r, worker *w, void *arg), void *arg);

/* mode_clocked.c: the core the clocked modes share */
int clocked_init(run *r, int R, int nslots, gt_err *e);
int clocked_start_store_threads(run *r, gt_err *e);
void clocked_epoch(run *r, worker *w, uint64_t first_clock);
int clocked_epoch_complete_locked(run *r);
uint64_t clocked_epoch_steps(const run *r);
uint64_t clocked_stop_step(const run *r);
void clocked_epoch_reset(run *r);
float *clocked_slot(run *r, uint64_t clock, int share);
int clocked_slot_store(run *r, worker *w, uint64_t clock, int share, int rc);
void clocked_stats_store(run *r, worker *w, uint64_t clock, int share);
void clocked_fold_stats_locked(run *r, uint64_t clock);
void clocked_gather_share(run *r, uint64_t clock, int share, gt_batch *b);
int clocked_claim_share_locked(run *r, worker *w, uint64_t upto, uint64_t *clock_out);
int clocked_share(run *r, worker *w, uint64_t clock, int share);
int clocked_claim_and_compute(run *r, worker *w, uint64_t upto);
int clocked_fill(run *r, worker *w, uint64_t upto);
void clocked_my_stripes(run *r, worker *w, int *s_lo, int *s_hi, int *nlive);
void clocked_reduce_slots(run *r, uint64_t clock, int s_lo, int s_hi);
void clocked_apply(run *r, uint64_t clock, int s_lo, int s_hi, float gscale, uint64_t t,
                   double epoch);
uint64_t clocked_full_mask(const run *r);

/* clocked_apply.c: a clock's apply in parts any worker takes (sync, ssp) */
int clocked_parts_init(run *r, gt_err *e);
void clocked_copy_pull(run *r, worker *w);
void clocked_parts_free(run *r);
void clocked_parts_epoch_reset(run *r);
int clocked_apply_begin_locked(run *r);
int clocked_apply_one_locked(run *r, worker *w);
void clocked_apply_end_locked(run *r, uint64_t clock);
int clocked_share_compute(run *r, worker *w, uint64_t clock, int share, const gt_batch *b,
                          gt_step_out *o);
void clocked_parts_store(run *r, worker *w, uint64_t clock, int share, int rc);

/* the modes (one file each) */
/* The clocks the local mode's average after clock c stands for: those since the previous average
 * (every --sync-every clocks and at an epoch's last), which the moving average counts as steps
 * (mode_local.c). */
unsigned local_span(const run *r, uint64_t c);

extern const gt_mode_ops gt_mode_hogwild, gt_mode_sync, gt_mode_ssp, gt_mode_local,
    gt_mode_allreduce;

#endif
