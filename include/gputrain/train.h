/* train.h - a training run: workers (one pthread per device) around one parameter store, in the
 * mode the configuration names, with evaluation, telemetry, logging, checkpoints and faults. */
#ifndef GT_TRAIN_H
#define GT_TRAIN_H

#include "gputrain/config.h"
#include "gputrain/device.h"
#include "gputrain/model.h"
#include "gputrain/ps.h"
#include "gputrain/checkpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_eval_point {
    uint32_t epoch;       /* 1-based epoch the point belongs to */
    uint64_t step;        /* global optimizer updates */
    uint64_t samples;
    double wall_s;
    double train_loss, train_acc; /* since the previous point */
    double test_loss, test_acc;
    double val_loss, val_acc;     /* --val-split's held-out samples; NAN without */
} gt_eval_point;

typedef struct gt_worker_stats {
    uint64_t steps, samples;
    double busy_s;        /* time from its first to its last step */
    /* Where its time went, in seconds summed over the run, in every mode (docs/internals.md):
     * the store's parameters to the device (upload included where separable), the device's step
     * (gradient download included), the store's update work it did (hogwild's push, sync's and
     * ssp's stripe applies, local's own step and averaging, allreduce's reduce-update), and waits
     * (barriers, staleness gates, queued steps). */
    double pull_s, device_s, push_s, wait_s;
    int failed;           /* left the run */
    char error[GT_ERRLEN];
} gt_worker_stats;

typedef struct gt_run_result {
    int npoints;
    int cap_points;               /* room in points (it grows; gt_run_result_free frees it) */
    gt_eval_point *points;        /* every evaluation, in order */
    double wall_s;                /* this run's training time, evaluation excluded where it overlaps */
    double startup_s;             /* from the process's launch (gt_start.launched) to training */
    double startup_data_s;        /* of which the data load took this long (beside the devices) */
    double startup_devices_s;     /* and opening the devices this long (-1: either unknown) */
    double startup_run_s;         /* then setting the run up: the store, the mode's state on the
                                     devices, the log, the guard's first copy */
    double samples_per_s;         /* this run's: (samples - resumed_samples) / wall_s */
    uint64_t samples;             /* of every host, since epoch 0 (a resumed run's included) */
    uint64_t resumed_samples;     /* samples the resumed checkpoint had trained; 0 for a fresh run */
    double resumed_wall_s;        /* its training time (0 where it did not record it) */
    int nworkers;                 /* this host's workers (workers[] below) */
    int nhosts;                   /* processes (hosts) the run spanned, 1 without MPI */
    gt_worker_stats workers[GT_MAX_WORKERS];
    uint64_t stale_max;
    int store_parts;            /* the store step in this many parts (hogwild, sync, ssp; 0: whole) */
    size_t store_part_first;    /* ... the first of them this many parameters (the first layers') */
    int store_grad_bf16;        /* ... downloading the gradient in bf16 (--store-grad) */
    double stale_mean, stale_p99;
    int stale_p99_capped;         /* stale_p99 is the histogram's last bin: the true p99 is that or more */
    double lock_wait_share, barrier_wait_share;
    uint64_t clock_spread_max;    /* ssp: largest gap between fastest and slowest worker clock */
    uint64_t skipped_nonfinite;
    int interrupted;              /* signal number that stopped the run, 0 if none */
    char checkpoint_written[GT_PATHLEN];
    double final_test_acc, final_test_loss;
    double best_acc;              /* the best monitored accuracy (val's with --val-split, else
                                     test's); -1 before any evaluation */
    uint64_t best_step;           /* the run's step it was reached at */
    int stopped_early;            /* --patience: evaluations without improvement that stopped it */
    char best_written[GT_PATHLEN];/* --save-best: the file, once written */
} gt_run_result;

/* Where a run starts: fresh (epoch 0, no state) or from a checkpoint. */
typedef struct gt_start {
    const float *params;          /* initial parameters */
    float *const *state;          /* optimizer state arrays to start from, or NULL (zeros) */
    int nstate;
    const float *buffers;         /* the model's buffers to start from (batch norm's running
                                   * statistics), or NULL: their initial values */
    const float *ema;             /* --ema: the moving average to start from (a resumed
                                   * checkpoint's ema tensors), or NULL: the parameters */
    const gt_ckpt_meta *resumed;  /* non-NULL when resuming: epoch, step, samples, updates */
    const struct gt_recipe *recipe; /* the corrections made to the config, reported; may be NULL */
    double launched;              /* when the process was launched, on gt_now's clock; 0: unknown */
    double data_s, devices_s;     /* start-up's data load and device opening, each its own time;
                                   * -1: not measured */
    const char *command;          /* the command line as given, for the log; may be NULL */
} gt_start;

/* Trains model on data with the devices (one worker each) as cfg says; evaluator is a device of
 * its own that the calling thread evaluates snapshots on while the workers go on. Returns 0, or -1 with e
 * set (every worker failed, a checkpoint that could not be written, a non-finite loss under
 * --on-nan stop); an interrupted run returns 0 with res->interrupted set.
 * Across hosts (cluster.h) every process calls this with as many devices and the same settings;
 * only host 0 evaluates (the others may pass a NULL evaluator), logs and writes checkpoints. */
int gt_train_run(const gt_config *cfg, const gt_model *model, const gt_data *data,
                 gt_device **devices, int ndevices, gt_device *evaluator, const gt_start *start,
                 gt_run_result *res, gt_err *e);

/* The clock ssp's pacing reads (gt_now's seconds), on each worker's own thread: how long its
 * clocks take and when it gives up waiting for fresh parameters. A test sets a simulated one
 * before a run, so that workers are balanced or slow by construction whatever else the machine
 * runs (tests/test_modes.c). */
extern double (*gt_ssp_clock)(void);

/* Frees what a run's result holds (not res itself); res may be NULL. */
void gt_run_result_free(gt_run_result *res);

/* A worker's mean microseconds a step in its phases (gt_worker_stats: pull, device, push, wait)
 * into us[GT_PHASES], and into *share the fraction of wall_s they cover together; 0 where the
 * worker took no step or timed nothing. */
#define GT_PHASES 4
int gt_worker_phases_us(const gt_worker_stats *s, double wall_s, double us[GT_PHASES],
                        double *share);

/* Signal handling for a run: the first SIGINT/SIGTERM/SIGHUP asks the run to stop after the
 * current step (and write its checkpoint); a second one exits at once. SIGPIPE is ignored, so a
 * closed stdout (gputrain | head) does not end the run. */
void gt_train_install_signals(void);
/* The signal that stopped the last run, or 0. */
int gt_train_stop_signal(void);

#ifdef __cplusplus
}
#endif
#endif
