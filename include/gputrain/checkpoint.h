/* checkpoint.h - safetensors checkpoints that Python's safetensors and PyTorch read directly.
 *
 * File: 8-byte little-endian header length, a JSON header, then raw little-endian float32 data.
 * Tensors carry the model's PyTorch names and layouts (c1.weight O x I x kH x kW, f1.weight
 * out x in), then the model's buffers with their PyTorch names (batch norm's running_mean,
 * running_var and the rank-0 num_batches_tracked, stored as float32: load_state_dict copies it
 * into PyTorch's int64 buffer); optimizer state follows as "optim.<state>.<tensor>" (state: momentum_buffer, exp_avg,
 * exp_avg_sq, as torch.optim names them), and where the run kept a moving average of the
 * parameters (--ema) it follows as "ema.<tensor>" for every parameter tensor. "__metadata__" (string values, as the format requires)
 * holds format, model_spec, model, mode, epoch, step, samples, updates, seed, data_fingerprint,
 * optimizer, classes (the class names, in label order, as a JSON array of strings inside the
 * string, for up to 256 classes; absent in checkpoints written before it existed) or class_names
 * (the same array for more than 256 classes: a key older gputrains, which refuse a "classes" of
 * more than 256, ignore), wall_ms (optional: files without
 * it read as 0), resize_images ("1" where the run resized its images to in_shape, else absent),
 * input_norm ("M1,M2,.../S1,S2,...", one per input channel, where the model's input step
 * normalises: --normalize; absent: x / 255 alone),
 * batch, workers, epoch_pos, train_samples, lr, momentum, weight_decay (optional: files without
 * them read as 0), "crc32.<tensor>" for every tensor, and header_crc32: the CRC-32 of the 8
 * length bytes and the whole header with its own 8 digits read as "00000000", so that every byte
 * of the file is covered by a CRC (format "gputrain-2"; "gputrain-1" files, which lack it, are
 * refused).
 *
 * A save writes a temporary file in the same folder, fsyncs it, renames it over the target and
 * fsyncs the folder, so at any instant the path holds the old checkpoint or the new one, whole.
 * epoch_pos lets a resume of another layout go on at the same sample of the epoch's order.
 * Loading checks every length, offset and CRC before a byte reaches the caller, and every
 * metadata field: known mode and optimizer, epoch <= 100000, samples, updates, wall_ms < 2^53,
 * step <= samples, lowercase hex CRCs and fingerprint, class names (one per class, valid UTF-8,
 * 1..31 bytes).
 *
 * Class names: a gt_ckpt_meta never owns them, so it is plain data (copy it by value, nothing to
 * free). A save writes meta->nnames names from meta->class_names, an array the caller keeps (the
 * data's, gt_data.class_names). gt_ckpt_read_meta and gt_ckpt_load check the file's names and
 * set nnames to their count (nclasses, or 0 for a file without names) but class_names to NULL;
 * gt_ckpt_read_names returns them in an array of the caller's. A header holds GT_CKPT_MAX_CLASSES
 * names of any 31 bytes (at worst about 15 MB) within the 100,000,000 bytes Python's safetensors
 * reads (gputrain's reader: GT_ST_MAX_HEADER); a save whose header would be larger is refused. */
#ifndef GT_CHECKPOINT_H
#define GT_CHECKPOINT_H

#include "gputrain/config.h" /* GT_RUN_OPTIONS_LEN */
#include "gputrain/data.h"
#include "gputrain/model.h"
#include "gputrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GT_CKPT_MAX_CLASSES 65536 /* class names a checkpoint holds at most (a data set's most
                                   * classes: labels are uint16) */
#define GT_CKPT_NAMELEN GT_CLASS_NAMELEN /* a class name's bytes, with its terminating NUL */

typedef struct gt_ckpt_meta {
    char model_spec[GT_SPECLEN];
    char model[32];
    char mode[16];
    char optimizer[16];       /* "sgd" or "adam": which state tensors are present */
    int in_c, in_h, in_w, nclasses;
    uint32_t epoch;           /* completed epochs */
    uint64_t step;            /* steps completed inside the current epoch (per-worker clock) */
    uint64_t samples;         /* samples trained on since the start */
    uint64_t updates;         /* optimizer updates applied (Adam's t) */
    uint64_t seed;
    uint32_t data_fingerprint;
    int resized;              /* 1: trained on images resized to in_h x in_w (--image-size) */
    gt_input_norm norm;       /* the input step's normalisation (--normalize); off where absent */
    int nnames;               /* class names: nclasses, or 0 (a checkpoint written without) */
    const gt_class_name *class_names; /* save: the nnames names, borrowed (never owned or freed
                                       * here); NULL after a read (gt_ckpt_read_names gives them) */
    uint64_t wall_ms;         /* training wall time up to the checkpoint, over every run resumed
                               * into it; 0 where the file does not say */
    /* The run that wrote it (0 where the file predates them): its layout, which says which
     * samples of the epoch's permutation `step` covered, and the settings a resume may change. */
    uint64_t batch;           /* --batch, per worker */
    uint64_t workers;         /* workers of every host */
    uint64_t epoch_pos;       /* samples of the epoch's permutation done, a prefix of it (step x
                               * gt_ckpt_step_samples); 0 at an epoch's start or where the samples
                               * done are no prefix */
    uint64_t train_samples;   /* training samples of its data */
    double lr, momentum, weight_decay; /* as it ran them (after the recipe's corrections) */
    int has_ema;              /* the file holds ema.<tensor> for every parameter tensor (a moving
                               * average, --ema); set on reading, ignored on saving */
    /* The run's best evaluation so far, which --save-best and --patience go on from after a
     * resume: best_acc of the monitored accuracy best_of ("val" with --val-split, else "test"),
     * at step best_step, and the evaluations since; best_acc < 0: none (not written). */
    double best_acc;
    uint64_t best_step, since_best;
    char best_of[8];
    /* The options of the run's command line that a resume takes again unless given again
     * (gt_config.run_options, cli.h gt_cli_resume_args); "" where the file has none. */
    char run_options[GT_RUN_OPTIONS_LEN];
} gt_ckpt_meta;

/* Writes a checkpoint atomically. state: gt_optim_nstate(optim) arrays of m->nparams (may be 0).
 * keep > 0: the previous checkpoint is kept as PATH.1 (PATH.1 moves to PATH.2, ... up to PATH.keep)
 * by hard links renamed over them, so no name ever goes missing. A save of the state already at
 * PATH (its position and every tensor's CRC) replaces it without rotating, so the last distinct
 * checkpoint is never pushed out by a copy of the newest. */
int gt_ckpt_save(const char *path, const gt_model *m, const float *params,
                 const float *buffers, float *const *state, int nstate, const gt_ckpt_meta *meta,
                 int keep, gt_err *e);

/* gt_ckpt_save, with the moving average ema (m->nparams floats) as ema.<tensor>; NULL: none. */
int gt_ckpt_save_ema(const char *path, const gt_model *m, const float *params, const float *ema,
                     const float *buffers, float *const *state, int nstate,
                     const gt_ckpt_meta *meta, int keep, gt_err *e);

/* Samples of the epoch's permutation one step covers where a layout trains each epoch as a
 * prefix of it: a clocked mode's clock (every worker's batch), hogwild's shared cursor or a single
 * slice on one host (a batch). 0 where the samples done are no prefix (hogwild's slices of several
 * workers, or several hosts' spans). */
uint64_t gt_ckpt_step_samples(int clocked, int slices, int workers, int hosts, int batch);

/* Reads only the metadata (enough to rebuild the model; gt_ckpt_load then checks every tensor's
 * name and shape against the model built). */
int gt_ckpt_read_meta(const char *path, gt_ckpt_meta *meta, gt_err *e);

/* gt_ckpt_read_meta, and the class names it checked: *names gets meta->nnames of them, malloc'd
 * (the caller free()s them), or NULL where the file holds none (meta->nnames 0). meta->class_names
 * stays NULL, so a copy of the meta never points at the caller's array. */
int gt_ckpt_read_names(const char *path, gt_ckpt_meta *meta, gt_class_name **names, gt_err *e);

#define GT_CKPT_ALLOW_NONFINITE 1u /* gt_ckpt_load flag: accept NaN and Inf values */

/* Loads the parameters of m (names, shapes and CRCs must match), its buffers (m->nbuffers floats;
 * buffers may be NULL to check them only) and, when state is non-NULL and nstate > 0, the
 * optimizer state (its absence is an error then). A NaN or Inf among the values
 * loaded is refused unless flags has GT_CKPT_ALLOW_NONFINITE. */
int gt_ckpt_load(const char *path, const gt_model *m, float *params, float *buffers,
                 float *const *state, int nstate, gt_ckpt_meta *meta, unsigned flags, gt_err *e);

/* gt_ckpt_load, and where the file has a moving average (meta->has_ema; a file with some but not
 * all ema tensors is refused) and ema is non-NULL, that into ema (m->nparams floats); ema is left
 * alone where the file has none. gt_ckpt_load checks the ema tensors' CRCs and skips them. */
int gt_ckpt_load_ema(const char *path, const gt_model *m, float *params, float *ema,
                     float *buffers, float *const *state, int nstate, gt_ckpt_meta *meta,
                     unsigned flags, gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
