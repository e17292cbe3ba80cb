/* config.h - everything a run is told on the command line, with defaults (src/config.c).
 * src/cli.c fills it; src/train.c and src/main.c read it. */
#ifndef GT_CONFIG_H
#define GT_CONFIG_H

#include "gputrain/optim.h"
#include "gputrain/data.h"
#include "gputrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_MAX_WORKERS 64

/* ssp keeps one gradient slot per clock in flight, and a worker runs at most --staleness clocks
 * ahead of the oldest unapplied one: staleness + 1 slots, each holding every worker's gradient.
 * More staleness than this is moot and costs that memory, so --staleness above it is refused. */
#define GT_MAX_STALENESS 63

/* Limits of other options, written once for the parser, --help and the checkpoints that must
 * hold what a run may record. */
#define GT_MAX_BATCH 65536   /* --batch: samples per step and worker */
#define GT_MAX_EPOCHS 100000 /* --epochs, and the epoch a checkpoint may claim */
#define GT_MAX_KEEP 1000     /* --keep: older checkpoints beside the newest */

typedef enum gt_mode {
    GT_MODE_HOGWILD = 0, /* asynchronous pushes under stripe locks (--stripes 0: no locks) */
    GT_MODE_SYNC,        /* one aggregated update per step, all workers on the same parameters */
    GT_MODE_SSP,         /* aggregated per clock, a worker at most --staleness clocks ahead */
    GT_MODE_LOCAL,       /* local replicas averaged every --sync-every steps */
    GT_MODE_ALLREDUCE,   /* all-reduce between GPUs (peer to peer, or NCCL) */
} gt_mode;

typedef enum gt_balance { GT_BALANCE_DYNAMIC = 0, GT_BALANCE_STATIC } gt_balance;
typedef enum gt_on_nan { GT_NAN_STOP = 0, GT_NAN_SKIP } gt_on_nan;
typedef enum gt_command { GT_CMD_TRAIN = 0, GT_CMD_EVAL, GT_CMD_PREDICT } gt_command;
typedef enum gt_on_diverge { GT_DIVERGE_RECOVER = 0, GT_DIVERGE_STOP } gt_on_diverge;
/* --exchange: how the GPUs of one host exchange gradients in allreduce (and local's averages). */
typedef enum gt_exchange { GT_EXCHANGE_AUTO = 0, GT_EXCHANGE_P2P, GT_EXCHANGE_NCCL } gt_exchange;

/* --precision: what the GPUs compute in (the CPU backend always computes in fp32). */
typedef enum gt_precision {
    GT_PRECISION_FP32 = 0, /* fp32 everywhere, no tensor cores (the parity reference) */
    GT_PRECISION_TF32,     /* fp32 data; cuBLAS and cuDNN may round products to TF32 */
    GT_PRECISION_BF16,     /* convolutions and linear layers multiply bf16 copies of their
                              inputs and weights, accumulating in fp32 (outputs rounded to bf16,
                              then kept fp32); everything else as fp32 */
} gt_precision;

/* --deterministic: whether the GPUs' convolutions keep to cuDNN's deterministic algorithms in
 * their backward directions, or may take the non-deterministic ones (sums by atomic adds: often
 * faster, not bit-reproducible). */
typedef enum gt_deterministic {
    GT_DETERMINISTIC_AUTO = 0, /* on, but off with --precision tf32 */
    GT_DETERMINISTIC_ON,
    GT_DETERMINISTIC_OFF,
} gt_deterministic;

/* --store-grad: the gradient hogwild's store step in parts downloads into the store. */
typedef enum gt_store_grad {
    GT_STORE_GRAD_AUTO = 0, /* bf16 where the GPUs compute in bf16, else fp32 */
    GT_STORE_GRAD_FP32,
    GT_STORE_GRAD_BF16,     /* rounded to bf16 on the GPU; the store and optimizer stay fp32 */
} gt_store_grad;

/* --normalize: how the model's input step normalises each channel (gt_input_norm, model.h). */
typedef enum gt_normalize {
    GT_NORMALIZE_NONE = 0,
    GT_NORMALIZE_AUTO,
    GT_NORMALIZE_GIVEN,
} gt_normalize;

/* Bits of gt_config.given: options the command line set, which the recipe never overrides. */
#define GT_GIVEN_LR (1u << 0)
#define GT_GIVEN_MOMENTUM (1u << 1)
#define GT_GIVEN_WARMUP (1u << 2)
#define GT_GIVEN_ON_NAN (1u << 3)
#define GT_GIVEN_BATCH (1u << 4)
#define GT_GIVEN_NESTEROV (1u << 5)
#define GT_GIVEN_WEIGHT_DECAY (1u << 6)
#define GT_GIVEN_SCHEDULE (1u << 7)
#define GT_GIVEN_AUGMENT (1u << 8)
#define GT_GIVEN_NORMALIZE (1u << 9)
#define GT_GIVEN_EMA (1u << 10)
#define GT_GIVEN_EPOCHS (1u << 11)
#define GT_GIVEN_MODE (1u << 12) /* --mode, or an option of a store mode (--stripes, ...) */

#define GT_RUN_OPTIONS_LEN 16384 /* bytes of gt_config.run_options, its NUL included */

#define GT_MAX_ITEMS 1024 /* images and ranges one predict command takes */

/* --store-parts: the most parts, and auto's count where the model is large enough (mode_hogwild.c;
 * 16 beside the backward: calls 50-51, 8 before it went there) */
#define GT_STORE_PARTS_MAX 64
#define GT_STORE_PARTS_AUTO 16
#define GT_STORE_PARTS_MIN_PARAMS ((size_t)1 << 20)

typedef struct gt_config {
    gt_command command;
    /* devices: either CPU workers or a list of GPU ordinals */
    int cpu_workers;              /* > 0 for --gpus cpu:N */
    int ngpus;                    /* > 0 for a GPU list */
    int gpus[GT_MAX_WORKERS];
    int gpus_all;                 /* --gpus all: resolved when devices are opened */
    int gpus_given;               /* --gpus was on the command line (else: all GPUs, or cpu:1 without) */

    char model[GT_SPECLEN];       /* built-in name, spec text or @file */
    char data[GT_PATHLEN];        /* "" = default search */
    uint32_t train_samples;       /* 0 = all */
    int image_size[2];            /* --image-size: height, width folder images are resized to; 0 0 = none */
    gt_augment augment;           /* --augment: training batches' crop and flip (data.h) */
    gt_normalize normalize;       /* --normalize: none, auto (the training split's statistics) or
                                     the values in norm_given */
    gt_input_norm norm_given;     /* --normalize M1,.../S1,...: the values given */
    int norm_count;               /* how many per list: 1 (every channel) or one per channel */
    int epochs;
    int batch;                    /* per worker, in every mode */
    gt_optim_cfg optim;
    uint64_t seed;

    gt_mode mode;
    int stripes;                  /* 0 = lock-free Hogwild */
    int staleness;                /* ssp */
    int sync_every;               /* local */
    gt_balance balance;
    int overlap;                  /* hogwild: begin step k+1 before pushing step k */
    int store_step;               /* --store-step: the store in every step, never the device step */
    int store_threads;            /* --store-threads: threads of one large walk of the store,
                                     its worker included (0: auto, gt_ps_default_threads) */
    int store_parts;              /* --store-parts: hogwild's store step in this many parts, whose
                                     download, update and upload overlap (0, 1: whole; -1: auto,
                                     GT_STORE_PARTS_AUTO on GPUs for large models) */
    int store_grad;               /* gt_store_grad (--store-grad) */
    int overlap_predict;          /* --overlap: step k+1 starts from its pulled parameters minus
                                     step k's plain SGD step (recipe.c; off with --literal) */
    int eval_every;               /* at multiples of this many of the run's steps (optimizer
                                     updates); 0 = end of each epoch only */
    double val_split;             /* fraction of the training samples held out for validation
                                     (gt_data_split_val); 0 = none */
    char save_best[GT_PATHLEN];   /* checkpoint written whenever the monitored accuracy (val's,
                                     else test's) improves; "" = none */
    int patience;                 /* stop after this many evaluations without improvement; 0 = never */

    char log_path[GT_PATHLEN];    /* JSONL, "" = none */
    char conv_cache[GT_PATHLEN];  /* --conv-cache: the GPUs' convolution choices between runs;
                                     "" the default file, "off" none */
    int log_steps;                /* also log every step's loss (for exact-resume checks) */
    int progress;                 /* -1 auto (terminal), 0 off, 1 on */
    int quiet;

    /* checkpoints and faults */
    char checkpoint[GT_PATHLEN];  /* "" = none */
    int checkpoint_every;         /* in units below; 0 = only at the end */
    int checkpoint_every_steps;   /* 1: checkpoint_every counts steps, 0: epochs */
    int keep;                     /* older checkpoints kept beside the newest */
    char resume[GT_PATHLEN];
    char init[GT_PATHLEN];
    int allow_nonfinite;          /* load checkpoints holding NaN or Inf values */
    float ema;                    /* --ema DECAY: evaluate and checkpoint an exponential moving
                                     average of the parameters (ps.h); 0 = off */
    int no_ema;                   /* eval, predict: --no-ema, the checkpoint's training parameters
                                     even where it holds ema tensors */
    gt_on_nan on_nan;
    int inject_worker, inject_step; /* --inject-fault WORKER:STEP, -1 = none */
    double stall_timeout;         /* seconds, 0 = off */
    double host_timeout;          /* seconds a host waits in a collective; 0 = forever */

    /* recipe corrections and the divergence guard (recipe.h, guard.h) */
    unsigned given;               /* GT_GIVEN_* bits of the options the command line set */
    char run_options[GT_RUN_OPTIONS_LEN]; /* the options given that a --resume of this run's
                                     checkpoints takes again (cli.c): a JSON array of "--name=value"
                                     and "--switch" strings; "" = none, or too many to keep */
    int literal;                  /* --literal: the recipe exactly as given, no corrections */
    gt_on_diverge on_diverge;     /* a diverged or stalled run: roll back and go on, or stop */

    /* GPU options */
    int precision;                /* gt_precision (--precision; --tf32 is --precision tf32) */
    int deterministic;            /* gt_deterministic (--deterministic) */
    gt_exchange exchange;         /* auto: peer to peer where it works, else NCCL */

    /* eval and predict */
    int ignore_classes;           /* eval, predict: use a checkpoint whose class names differ */
    int top;                      /* predict: classes printed per image */
    int per_class;                /* eval: the per-class accuracy table */
    char confusion[GT_PATHLEN];   /* eval: the confusion matrix's file (CSV, or JSON by its
                                     .json ending); "" = none */
    int nitems;                   /* predict: image files and IDX ranges, in command-line order */
    const char *items[GT_MAX_ITEMS]; /* pointers into argv */
} gt_config;

/* Every field at its default: what a run does when the command line says nothing. */
void gt_config_defaults(gt_config *c);

/* --deterministic as it applies to c's run: whether the GPUs' convolutions keep to deterministic
 * algorithms (auto: all but --precision tf32). */
int gt_config_deterministic(const gt_config *c);

/* --normalize on a model built for it: gt_config_norm_mark turns m->norm on (values mean 0, std 1
 * until resolved) where c asks for any, as soon as the model is built, so that a device opened
 * before the data is in knows it (the fused CUDA step does not normalise); gt_config_norm_resolve
 * sets its values once the training split is in (auto: its statistics; given: one value for every
 * channel or one per channel). -1 with a one-line message naming --normalize. */
void gt_config_norm_mark(const gt_config *c, gt_model *m);
int gt_config_norm_resolve(const gt_config *c, const gt_dataset *train, gt_model *m, gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
