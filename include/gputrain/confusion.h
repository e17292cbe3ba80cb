/* confusion.h - `gputrain eval --per-class` and `--confusion FILE` (src/confusion.c): a confusion
 * matrix from every test sample's predicted class (gt_device.eval_pred), a per-class accuracy
 * table with the class names, and the matrix written as CSV or JSON. */
#ifndef GT_CONFUSION_H
#define GT_CONFUSION_H

#include "gputrain/data.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_confusion {
    int k;           /* classes */
    uint64_t *count; /* k x k: count[t * k + p], the samples of true class t predicted as p */
    uint64_t n, correct; /* samples, and those on the diagonal */
} gt_confusion;

/* Counts pred[i] against ds->labels[i] for every sample of ds (k classes); a prediction or label
 * outside [0, k) is refused. */
int gt_confusion_build(gt_confusion *cm, const gt_dataset *ds, const int32_t *pred, int k,
                       gt_err *e);
void gt_confusion_free(gt_confusion *cm);
/* The per-class table: each class's samples, hits, accuracy (recall), precision and the class
 * it is most often taken for, then the totals. names: k class names (escaped when printed). */
void gt_confusion_print(FILE *out, const gt_confusion *cm, char (*names)[32]);
/* The matrix into path, written atomically (atomic_file.h): JSON where path ends in ".json"
 * ({"classes": [...], "matrix": [[...], ...], "samples": N, "correct": C}, rows the true
 * classes), else CSV (a header row "true\predicted,NAME,...", then one row per true class). */
int gt_confusion_write(const char *path, const gt_confusion *cm, char (*names)[32], gt_err *e);

#ifdef __cplusplus
}
#endif
#endif
