/* recipe.h - corrections of the training recipe for the worker count and the mode, so that the
 * default recipe (tuned for one worker) trains with any number of workers.
 *
 * Asynchrony acts like extra momentum (Mitliagkas et al. 2016, "Asynchrony begets momentum"):
 * a delay of d updates acts like momentum d / (d + 1). With W workers pushing to one store, each
 * update lands on parameters about W-1 updates newer than those it was computed on; counting half
 * of that delay fits the measurements (the whole of it leaves runs under-trained). Stale
 * aggregated updates (ssp over five or more workers; up to four read fresh parameters) do the same
 * with a share of the staleness in clocks. So the explicit
 * SGD momentum is lowered by the implicit one. A larger effective batch per update (sync and ssp sum W workers' batches) wants
 * a warm-up of the step size (Goyal et al. 2017). Options the user gave (gt_config.given) are
 * never changed, and --literal turns every correction off. With one worker, hogwild and sync are
 * left exactly as given. See docs/convergence-notes.md for the measurements behind each rule. */
#ifndef GT_RECIPE_H
#define GT_RECIPE_H

#include "gputrain/config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_RECIPE_MAX 4    /* changes one recipe can make */
#define GT_RECIPE_LEN 160  /* characters of one change's description */

typedef struct gt_recipe {
    int n;                                   /* changes made */
    char change[GT_RECIPE_MAX][GT_RECIPE_LEN]; /* e.g. "hogwild x4: momentum 0.9 -> 0.3 (...)" */
} gt_recipe;

/* The momentum that asynchrony adds in c's mode with `workers` workers in all (across hosts):
 * 0 for sync, local and allreduce. */
double gt_recipe_implicit_momentum(const gt_config *c, int workers);

/* The delay rules the mode rows name (names.h, gt_mode_row.delay): hogwild's (half the other
 * workers' pushes; --overlap adds its own step in flight) and ssp's (a share of the staleness,
 * beyond the few workers that read fresh parameters). */
double gt_recipe_delay_hogwild(const gt_config *c, int workers);
double gt_recipe_delay_ssp(const gt_config *c, int workers);

/* Steps of linear warm-up that c's mode wants with `workers` workers in all: 0 where each
 * update sees one worker's batch. */
int gt_recipe_warmup_steps(const gt_config *c, int workers);

/* The moving average's decay (--ema) where the learning rate stays constant (gt_recipe_model). */
#define GT_RECIPE_EMA 0.999f

/* The residual networks' default length: on one H200, resnet18 on Fashion-MNIST ended at
 * 0.9510 / 0.9504 / 0.9504 after 25 epochs (seeds 1-3), 0.9492 / 0.9497 / 0.9514 after 20 and
 * 0.9464-0.9485 after 15 (docs/convergence-notes.md). */
#define GT_RECIPE_RESNET_EPOCHS 25

/* The residual networks' learning rate per 128 samples a round of every worker's step takes
 * (gt_recipe_model for the batch, gt_recipe_apply for the workers, in every mode): resnet18 on
 * Fashion-MNIST ended at 0.9506-0.9527 on one H200 (lr 0.05), 2x H200 (lr 0.1) and 4x H200 (lr
 * 0.2, allreduce), seeds 1-3 each, where lr 0.1 at every count gave 0.9492-0.9520 on one GPU and
 * 0.9473-0.9489 on four (docs/convergence-notes.md, section 19). */
#define GT_RECIPE_RESNET_LR128 0.05

/* The recipe a built-in model trains with by default (resnet20, resnet18: the residual networks'
 * of the PyTorch reference, GT_RECIPE_RESNET_EPOCHS long: batch 128, random crop with 2 pixels of
 * padding and a flip, SGD lr GT_RECIPE_RESNET_LR128 x batch / 128 with Nesterov momentum 0.9,
 * weight decay 5e-4 (not on biases and batch norm's gamma and beta, model.h ndecay), one epoch's
 * warm-up, then cosine to 0), for every setting the command line left open; other models keep
 * the general defaults; under allreduce their evaluations are of a short moving average
 * (GT_RECIPE_RESNET_EMA). Then, for every model: where the command line left --ema open and the
 * schedule is constant, evaluations are of the moving average (c->ema = GT_RECIPE_EMA). Applied
 * once, after parsing, before the worker-count corrections. Writes a description of the residual
 * networks' recipe into note (cap bytes; "" when nothing). gpus: the run's GPU workers (on
 * every host; 0: CPU workers). The residual networks train with --mode allreduce on GPUs unless
 * the command line chose a mode or gave an option of one: on 4 H200, resnet18 on Fashion-MNIST
 * ran at 146.6-148.5 k samples/s to 0.9502-0.9517 under allreduce and 60.7 k to 0.9431 under
 * hogwild (results/resnet-2026-11-27-c25-c155); and with batch GT_RECIPE_RESNET_BATCH_ONE on a
 * single GPU. */
void gt_recipe_model(gt_config *c, int gpus, char *note, size_t cap);

/* The learning rate one epoch of the residual networks' warm-up carries (gt_recipe_apply): where
 * the workers' round scales the lr beyond it, the warm-up grows with it (lr 0.2: 2 epochs), at
 * most a fifth of the run. resnet18 over 2 H200 at 512 samples an update and lr 0.2 (4 x 128's),
 * seeds 1-4: with one epoch, seed 1 diverged after it (rolled back, ended 0.9367); with two,
 * 0.9493-0.9513 and no run below 0.73 after its first epoch (call 66,
 * results/resnet-2026-11-27-c25-c155). Over 4 H200 at lr 0.2 one run in six fell to 0.09 after
 * its first epoch (call 61) and calls 34-36 rolled back 2 of 16; with two, 0.9483-0.9520 and
 * none rolled back (call 68, seeds 1-5). */
#define GT_RECIPE_RESNET_WARMUP_LR 0.1

/* The moving average the residual networks' evaluations (and checkpoints' ema.* tensors) take
 * under allreduce (--ema; the other modes and CPU workers: none, not measured). resnet18 on
 * Fashion-MNIST over 4 H200 reached 0.94 after 4.0-6.4 s of training with it (11 runs, 10 under
 * 6 s) against 5.3-6.2 s without (10 runs), on one H200 after 11.4-13.3 s against 14.9-18.5 s
 * (8 runs each); the final accuracy level (means 0.9502 / 0.9502 and 0.9513 / 0.9512); 0.99 and
 * 0.995 lagged more (calls 129-131, docs/convergence-notes.md, section 26). */
#define GT_RECIPE_RESNET_EMA 0.98f

/* The residual networks' batch where one GPU trains alone (128 elsewhere; the lr follows it):
 * resnet18 on Fashion-MNIST on one H200, seeds 1-7, reached 0.94 after 15.9-18.8 s of training
 * at 58-61 k samples/s and ended at 0.9499-0.9525 (mean 0.9510), where batch 128 took 24.1-25.8 s
 * at 42-43 k to 0.9508-0.9520 (5 runs, mean 0.9514). 256 a GPU over 4 GPUs (lr 0.4) ended at
 * 0.935 (calls 59-61, results/resnet-2026-11-27-c25-c155), and with its 4-epoch warm-up at
 * 0.8997-0.9479 (call 75; 192 a GPU: 0.9475-0.9503 with rollbacks). */
#define GT_RECIPE_RESNET_BATCH_ONE 256

/* c's model is one of the residual built-ins, which have their own recipe (gt_recipe_model). */
int gt_recipe_is_resnet(const gt_config *c);

/* Corrects c in place for `workers` workers in all and `ntrain` training samples, and lists what
 * it changed in r (r->n == 0: nothing): the residual networks' lr times the workers, the momentum
 * asynchrony leaves, sync's warm-up, ssp's plain SGD, --overlap's weight prediction. A no-op with
 * c->literal. */
void gt_recipe_apply(gt_config *c, int workers, uint32_t ntrain, gt_recipe *r);

#ifdef __cplusplus
}
#endif
#endif
