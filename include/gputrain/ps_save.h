/* ps_save.h - a copy of the parameter store kept in memory (parameters, optimizer state, buffers and
 * the moving average of --ema), taken
 * and put back stripe by stripe under the stripes' locks while workers may be pushing: the
 * divergence guard's "last good point" (guard.h). The update counter is not part of it, so
 * progress, schedules and checkpoints keep counting across a rollback. */
#ifndef GT_PS_SAVE_H
#define GT_PS_SAVE_H

#include "gputrain/ps.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_ps_saved {
    size_t n;          /* parameters */
    int nstate;        /* optimizer state arrays */
    float *params;     /* n */
    float *state[2];   /* n each, NULL where unused */
    float *buffers;    /* the store's buffers (batch norm's running statistics), NULL if none */
    float *ema;        /* n: the store's moving average (--ema), NULL if none */
} gt_ps_saved;

/* Room for a copy of ps. */
int gt_ps_saved_alloc(gt_ps_saved *s, const gt_ps *ps, gt_err *e);
void gt_ps_saved_free(gt_ps_saved *s);

/* Copies the store's parameters and optimizer state into s; each stripe is consistent. */
void gt_ps_save(gt_ps *ps, gt_ps_saved *s);

/* Puts s back into the store, each stripe under its lock (relaxed atomic stores when lock-free),
 * and bumps the stripe versions so the next pushes count the rollback as an update. */
void gt_ps_restore(gt_ps *ps, const gt_ps_saved *s);

#ifdef __cplusplus
}
#endif
#endif
