/* predict.h - `gputrain predict`: a checkpoint's top classes for image files and IDX samples, on
 * the CPU reference network, and the model and class-name checks that eval and predict share. */
#ifndef GT_PREDICT_H
#define GT_PREDICT_H

#include "gputrain/checkpoint.h"
#include "gputrain/config.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether a checkpoint's nnames class names (from gt_ckpt_read_names) are the data's: 0 when they
 * are, when the checkpoint holds none (nnames 0: a warning line goes to warn) or when ignore is
 * set; else -1 with a message naming the first class that differs. */
int gt_predict_check_classes(const char *path, const gt_class_name *names, int nnames,
                             const gt_data *d, int ignore, FILE *warn, gt_err *e);

/* The model a checkpoint's model_spec describes (path names the checkpoint in messages), for
 * in_c x in_h x in_w inputs and nclasses classes. The spec is spec text, never "@FILE" or a
 * built-in name, and must be exactly as gputrain writes it (canonical, and of the model the
 * metadata names unless that is "custom"): a spec edited by hand is refused, not run. */
int gt_predict_model(const char *path, const gt_ckpt_meta *meta, int in_c, int in_h, int in_w,
                     int nclasses, gt_model *m, gt_err *e);

/* Runs the predict command (c->items: image files, or SPLIT:FIRST[-LAST] ranges of the IDX or
 * folder dataset of --data), printing one line per image or sample to out: its top c->top classes
 * with probabilities, and for dataset samples the true label; with samples, a last line gives the
 * accuracy over them. An image of another size is resized to the model's input; one far from it,
 * or looking inverted next to the training images, gets a warning line on stderr. *usage is set
 * when the error is in a command-line item. */
int gt_predict_run(const gt_config *c, FILE *out, int *usage, gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
