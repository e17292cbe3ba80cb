/* recipe.c - corrections of the recipe for the worker count and mode (recipe.h). Pure: a config
 * in, a config and a list of sentences out; report.c prints and logs them. */
#include "gputrain/recipe.h"
#include "gputrain/names.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ssp over this many workers or fewer keeps the recipe of sync (docs/convergence-notes.md,
 * section 9): a worker waits for peers of its pace, so they read fresh parameters. Measured: 2 and
 * 4 GPUs (10 seeds) and 4 CPU workers (3 seeds) ended higher with sync's recipe than with plain
 * SGD; 8 CPU workers on 2 cores (stale mean 1.7) diverged with it on one seed of two. */
#define RECIPE_SSP_FRESH_WORKERS 4

/* The delay, in updates, that the momentum rule counts in a mode whose row names one: the
 * Mitliagkas et al. rule (d updates of delay act like momentum d / (d + 1)) with d fitted to
 * 10-epoch lenet5 runs on 1, 2 and 4 GPUs (docs/convergence-notes.md, section 7). Counting the
 * whole delay over-corrects: the run keeps too little momentum and ends under-trained. */
double gt_recipe_delay_hogwild(const gt_config *c, int workers)
{
    /* W - 1 other workers push between a pull and its push; half of that fits. --overlap adds
     * the worker's own step in flight: W / 2 (one worker: 0.5, momentum 0.57). */
    if (c->overlap)
        return workers / 2.0;
    return (workers - 1) / 2.0;
}

double gt_recipe_delay_ssp(const gt_config *c, int workers)
{
    /* A few workers of one pace compute on fresh parameters (mode_ssp.c waits for the clocks
     * before one's own where they are due): sync's recipe. With more, a clock's gradient is up
     * to `staleness` clocks old and a mean over W batches, which damps the echo:
     * staleness x (W - 1) / 16 (8 workers: momentum 0.43 at s = 2, 0.26 at s = 4). */
    if (workers <= RECIPE_SSP_FRESH_WORKERS)
        return 0.0;
    return (double)c->staleness * (workers - 1) / 16.0;
}

static const gt_mode_row *recipe_row(const gt_config *c)
{
    static const gt_mode_row none = {.head = {"?", -1}};
    const gt_mode_row *row = gt_mode_row_of(c->mode);
    return row ? row : &none;
}

static double recipe_delay(const gt_config *c, int workers)
{
    const gt_mode_row *row = recipe_row(c);
    return row->delay ? row->delay(c, workers) : 0.0;
}

double gt_recipe_implicit_momentum(const gt_config *c, int workers)
{
    double d = recipe_delay(c, workers);
    return d / (d + 1.0);
}

/* Linear warm-up length: RECIPE_WARMUP_STEPS updates for each worker beyond the first, where
 * one update sums every worker's batch. */
#define RECIPE_WARMUP_STEPS 25
/* ... but at most this share of the run's epochs. */
#define RECIPE_WARMUP_SHARE 0.2

int gt_recipe_warmup_steps(const gt_config *c, int workers)
{
    if (!recipe_row(c)->sums_shares || workers < 2)
        return 0;
    return RECIPE_WARMUP_STEPS * (workers - 1);
}

static void recipe_note(gt_recipe *r, const gt_config *c, int workers, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void recipe_note(gt_recipe *r, const gt_config *c, int workers, const char *fmt, ...)
{
    if (r->n >= GT_RECIPE_MAX)
        return;
    char *dst = r->change[r->n++];
    int k = snprintf(dst, GT_RECIPE_LEN, "%s x%d: ", gt_mode_label(c), workers);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst + k, GT_RECIPE_LEN - (size_t)k, fmt, ap);
    va_end(ap);
}

/* x rounded to 1 / scale (scale 100: two decimals), so that what is printed is what runs. */
static double recipe_round(double x, double scale) { return floor(x * scale + 0.5) / scale; }

/* The momentum as written (0.9, not the float 0.89999998). */
static double recipe_momentum_written(const gt_config *c)
{
    return recipe_round((double)c->optim.momentum, 1e4);
}

static void recipe_momentum(gt_config *c, int workers, gt_recipe *r)
{
    double implicit = gt_recipe_implicit_momentum(c, workers);
    if (c->optim.kind != GT_OPT_SGD || (c->given & GT_GIVEN_MOMENTUM) || implicit <= 0 ||
        c->optim.momentum <= 0)
        return;
    double want = recipe_momentum_written(c) - implicit;
    float m = want > 0 ? (float)recipe_round(want, 100.0) : 0.0f;
    recipe_note(r, c, workers, "momentum %g -> %g (asynchrony adds ~%.2g; --momentum sets it)",
                (double)c->optim.momentum, (double)m, implicit);
    c->optim.momentum = m;
}

static void recipe_warmup(gt_config *c, int workers, uint32_t ntrain, gt_recipe *r)
{
    int steps = gt_recipe_warmup_steps(c, workers);
    if (steps == 0 || (c->given & GT_GIVEN_WARMUP) || c->optim.warmup_epochs > 0 || ntrain == 0)
        return;
    double epochs = (double)steps * (double)workers * (double)c->batch / (double)ntrain;
    if (epochs > c->epochs * RECIPE_WARMUP_SHARE) { /* small data sets: a share of the run */
        epochs = c->epochs * RECIPE_WARMUP_SHARE;
        steps = (int)(epochs * ntrain / ((double)workers * c->batch));
        if (steps < 1)
            return;
    }
    c->optim.warmup_epochs = (float)epochs;
    recipe_note(r, c, workers,
                "lr warm-up over %d updates (%.3g epochs; batch %d per update; --warmup sets it)",
                steps, epochs, workers * c->batch);
}

/* The share of momentum's step size, lr / (1 - momentum), that ssp's plain SGD keeps. */
#define RECIPE_SSP_STEP_SHARE 0.4

/* ssp over more than RECIPE_SSP_FRESH_WORKERS workers: plain SGD at RECIPE_SSP_STEP_SHARE of
 * the step size momentum gave (lr 0.05, momentum 0.9 -> lr 0.2, momentum 0). Stale clock sums
 * and momentum echo each other: 10-epoch lenet5 runs on 4 GPUs ended 1.5-2 points higher this way
 * than with the momentum rule (docs/convergence-notes.md, section 8). Returns 1 when it changed
 * the recipe. */
static int recipe_ssp_plain(gt_config *c, int workers, gt_recipe *r)
{
    if (!recipe_row(c)->bounded || c->staleness == 0 || workers <= RECIPE_SSP_FRESH_WORKERS ||
        c->optim.kind != GT_OPT_SGD ||
        c->optim.momentum <= 0 || c->optim.nesterov || (c->given & (GT_GIVEN_MOMENTUM | GT_GIVEN_LR)))
        return 0;
    double lr = RECIPE_SSP_STEP_SHARE * (double)c->optim.lr / (1.0 - recipe_momentum_written(c));
    float lr3 = (float)recipe_round(lr, 1e3); /* as printed */
    recipe_note(r, c, workers, "momentum %g -> 0, lr %g -> %g (stale clocks echo momentum: plain "
                "SGD at %g x lr / (1 - momentum); --momentum or --lr sets them)",
                (double)c->optim.momentum, (double)c->optim.lr, (double)lr3, RECIPE_SSP_STEP_SHARE);
    c->optim.momentum = 0.0f;
    c->optim.lr = lr3;
    return 1;
}

/* --overlap with SGD: weight prediction (mode_hogwild.c's pipe_begin). A step begun before its
 * predecessor's push starts from the pulled parameters minus that push's plain SGD step, so a
 * worker's own steps are not stale to it. On 2 CPU workers, 2 epochs, seeds 1-3 it lifted the
 * test accuracy from 0.76 to 0.78 (1 worker: 0.81 -> 0.82, 4 workers: 0.66 -> 0.73;
 * docs/convergence-notes.md, section 11); the momentum term stays out (a worker's own velocity
 * in its place did worse). */
static void recipe_predict(gt_config *c, int workers, gt_recipe *r)
{
    if (!recipe_row(c)->async_variants || !c->overlap || c->optim.kind != GT_OPT_SGD)
        return;
    c->overlap_predict = 1;
    recipe_note(r, c, workers, "weight prediction (a step starts from its pull minus its "
                "predecessor's SGD step, in flight; --literal turns it off)");
}

int gt_recipe_is_resnet(const gt_config *c)
{
    return strcmp(c->model, "resnet20") == 0 || strcmp(c->model, "resnet18") == 0;
}

/* The residual networks' recipe (gt_recipe_model). */
static void recipe_resnet(gt_config *c, int gpus, char *note, size_t cap)
{
    if (!gt_recipe_is_resnet(c))
        return;
    unsigned g = c->given;
    /* allreduce takes no --on-nan skip (every GPU must take the same step) */
    if (gpus && !(g & GT_GIVEN_MODE) && c->on_nan != GT_NAN_SKIP)
        c->mode = GT_MODE_ALLREDUCE;
    if (!(g & GT_GIVEN_EPOCHS)) {
        c->epochs = GT_RECIPE_RESNET_EPOCHS;
        c->optim.total_epochs = (float)c->epochs; /* the schedule's length (cli.c set it) */
    }
    if (!(g & GT_GIVEN_BATCH))
        c->batch = gpus == 1 ? GT_RECIPE_RESNET_BATCH_ONE : 128;
    if (!(g & GT_GIVEN_AUGMENT))
        c->augment = (gt_augment){.pad = 2, .flip = 1};
    if (c->mode == GT_MODE_ALLREDUCE && !(g & GT_GIVEN_EMA)) /* where it was measured */
        c->ema = GT_RECIPE_RESNET_EMA;
    if (c->optim.kind != GT_OPT_SGD)
        return;
    if (!(g & GT_GIVEN_LR))
        c->optim.lr = (float)(GT_RECIPE_RESNET_LR128 * c->batch / 128.0);
    if (!(g & GT_GIVEN_MOMENTUM))
        c->optim.momentum = 0.9f;
    if (!(g & GT_GIVEN_NESTEROV))
        c->optim.nesterov = 1;
    if (!(g & GT_GIVEN_WEIGHT_DECAY))
        c->optim.weight_decay = 5e-4f;
    if (!(g & GT_GIVEN_SCHEDULE))
        c->optim.schedule = GT_SCHED_COSINE;
    if (!(g & GT_GIVEN_WARMUP) && c->epochs > 1)
        c->optim.warmup_epochs = 1.0f;
    int chose_mode = c->mode == GT_MODE_ALLREDUCE && !(g & GT_GIVEN_MODE);
    char ema[64] = "";
    if (c->ema > 0)
        snprintf(ema, sizeof ema, ", evaluations of the moving average %g", (double)c->ema);
    snprintf(note, cap,
             "%s's recipe: %s%d epoch%s, batch %d, augment crop:%d%s, normalize %s, lr %g%s, "
             "momentum %g, weight decay %g, warm-up %g epoch, %s%s (flags set any of them)",
             c->model, chose_mode ? "mode allreduce, " : "",
             c->epochs, c->epochs == 1 ? "" : "s", c->batch,
             c->augment.pad, c->augment.flip ? ",flip" : "",
             c->normalize == GT_NORMALIZE_AUTO ? "auto" : c->normalize ? "given" : "none",
             (double)c->optim.lr,
             c->optim.nesterov ? " Nesterov" : "", (double)c->optim.momentum,
             (double)c->optim.weight_decay, (double)c->optim.warmup_epochs,
             gt_schedule_name(c->optim.schedule), ema);
}

void gt_recipe_model(gt_config *c, int gpus, char *note, size_t cap)
{
    note[0] = '\0';
    recipe_resnet(c, gpus, note, cap);
    /* A constant learning rate ends wherever its last steps' noise left it: evaluating the
     * moving average takes that out (docs/convergence-notes.md, section 16: every mode on 4 GPUs
     * and one GPU's sync ended higher or level with it). A decaying schedule has already
     * averaged its end (the residual networks' cosine: an average over 1,000 updates lagged
     * behind; under allreduce they take a short one, GT_RECIPE_RESNET_EMA). */
    if (!(c->given & GT_GIVEN_EMA) && c->optim.schedule == GT_SCHED_CONSTANT)
        c->ema = GT_RECIPE_EMA;
}

/* The residual networks' warm-up where the workers' round scaled the lr: an epoch for each
 * GT_RECIPE_RESNET_WARMUP_LR of it (recipe.h), at most RECIPE_WARMUP_SHARE of the run, never
 * shorter than the recipe's; a given --warmup stays. */
static void recipe_resnet_warmup(gt_config *c, int workers, gt_recipe *r)
{
    double was = c->optim.warmup_epochs, want = c->optim.lr / GT_RECIPE_RESNET_WARMUP_LR;
    if ((c->given & GT_GIVEN_WARMUP) || was <= 0)
        return;
    want = recipe_round(want, 100.0);
    if (want > c->epochs * RECIPE_WARMUP_SHARE)
        want = recipe_round(c->epochs * RECIPE_WARMUP_SHARE, 100.0);
    if (want <= was)
        return;
    recipe_note(r, c, workers, "lr warm-up %g -> %g epochs (an epoch for each %g of lr; "
                "--warmup sets it)", was, want, GT_RECIPE_RESNET_WARMUP_LR);
    c->optim.warmup_epochs = (float)want;
}

/* The residual networks' lr follows the samples a round of W workers' steps takes (the linear
 * scaling rule of Goyal et al. 2017, "Accurate, large minibatch SGD"): W x the recipe's lr
 * (GT_RECIPE_RESNET_LR128 per 128 samples) in every mode. Where an update sums W batches (sync,
 * ssp, allreduce) that is the rule for their sum; in the store's asynchronous modes and local,
 * whose updates take one batch each, it is what measured best on resnet20 over 4 GPUs: lr 0.2
 * ended 0.4-0.9 points above lr 0.1 and 0.8-1.0 above lr 0.05 in every mode (hogwild's momentum
 * rule leaves them 0.3 of momentum, docs/convergence-notes.md, section 19). */
static void recipe_resnet_lr(gt_config *c, int workers, gt_recipe *r)
{
    if (!gt_recipe_is_resnet(c) || workers < 2 || c->optim.kind != GT_OPT_SGD ||
        (c->given & GT_GIVEN_LR))
        return;
    float lr = (float)((double)c->optim.lr * workers);
    recipe_note(r, c, workers, "lr %g -> %g (%d workers x batch %d: lr %g per 128 samples a "
                "round; --lr sets it)", (double)c->optim.lr, (double)lr, workers, c->batch,
                GT_RECIPE_RESNET_LR128);
    c->optim.lr = lr;
    recipe_resnet_warmup(c, workers, r);
}

/* hogwild's lr from 4 workers on, beside the momentum rule it was measured with (lenet5, 4x H200,
 * 10 epochs, seeds 1-10, docs/convergence-notes.md, section 20): with the stripes lr 0.075 ended
 * 0.3 points above lr 0.05 (0.1 lower, with its two worst runs); lock-free, whose concurrent
 * pushes lose some of each other's updates element-wise, lr 0.1 ended 0.7 above 0.05 with every
 * seed higher. --overlap measured no gain and keeps the lr; more workers keep the factor of 4. */
#define RECIPE_HOGWILD_LR_WORKERS 4
#define RECIPE_HOGWILD_LR_STRIPED 1.5
#define RECIPE_HOGWILD_LR_LOCKFREE 2.0

static void recipe_hogwild_lr(gt_config *c, int workers, gt_recipe *r)
{
    if (!recipe_row(c)->async_variants || c->overlap || workers < RECIPE_HOGWILD_LR_WORKERS ||
        gt_recipe_is_resnet(c) || c->optim.kind != GT_OPT_SGD || c->optim.momentum <= 0 ||
        (c->given & (GT_GIVEN_LR | GT_GIVEN_MOMENTUM)))
        return;
    double f = c->stripes == 0 ? RECIPE_HOGWILD_LR_LOCKFREE : RECIPE_HOGWILD_LR_STRIPED;
    float lr = (float)recipe_round((double)c->optim.lr * f, 1e4); /* as printed */
    recipe_note(r, c, workers, "lr %g -> %g (x%g from %d workers%s; --lr sets it)",
                (double)c->optim.lr, (double)lr, f, RECIPE_HOGWILD_LR_WORKERS,
                c->stripes == 0 ? ": lock-free pushes lose some updates" : "");
    c->optim.lr = lr;
}

void gt_recipe_apply(gt_config *c, int workers, uint32_t ntrain, gt_recipe *r)
{
    r->n = 0;
    if (c->literal || (workers < 2 && !(recipe_row(c)->async_variants && c->overlap)))
        return;
    recipe_resnet_lr(c, workers, r);
    recipe_hogwild_lr(c, workers, r);
    if (!recipe_ssp_plain(c, workers, r))
        recipe_momentum(c, workers, r);
    recipe_warmup(c, workers, ntrain, r);
    recipe_predict(c, workers, r);
}
