/* guard.h - the divergence and stall guard: a pure state machine fed with training losses.
 *
 * Losses arrive one per step (per worker step in the asynchronous modes) and are averaged over
 * windows of `window` steps. At the end of each window the guard compares the window's mean
 * with the reference (the first window after a start or a recovery) and the chance loss ln C:
 *  - a non-finite loss is a divergence at once;
 *  - a mean above `climb` times max(reference, chance) is a divergence (times chance alone once
 *    a window has been good);
 *  - means at chance or worse (above chance_loss - `band`, below the divergence bar) for
 *    `stall_steps` steps in a row, counted after `grace_steps` (a warm-up) or after a good
 *    window (a relapse within the warm-up counts), are a stall;
 *  - a finite mean that is neither, and within `good_slack` of the best mean so far and below
 *    the chance band, makes the current parameters a good point to return to.
 * With window 25, grace 0 and stall_steps 150, a stall is reported at most 175 steps after it
 * begins, and a divergence at most one window after the climb. The caller acts on the verdict
 * (rolls back and calls gt_guard_recovered, or stops); the guard itself has no side effects. */
#ifndef GT_GUARD_H
#define GT_GUARD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_guard_verdict {
    GT_GUARD_OK = 0,   /* nothing to do */
    GT_GUARD_GOOD,     /* a healthy window ended: the current parameters are worth keeping */
    GT_GUARD_DIVERGED, /* non-finite loss or a loss well above where it started */
    GT_GUARD_STALLED,  /* loss at chance for stall_steps steps past the grace */
} gt_guard_verdict;

typedef struct gt_guard_cfg {
    int window;           /* steps averaged per decision, >= 1 */
    double chance_loss;   /* ln C for C classes */
    double band;          /* mean >= chance_loss - band counts as "at chance" (or worse) */
    double climb;         /* divergence when mean > climb * max(reference, chance_loss) */
    double good_slack;    /* a window is good when mean <= best + good_slack */
    uint64_t grace_steps; /* steps at chance that are expected (warm-up), not counted until
                             a good window: a relapse to chance after one counts */
    uint64_t stall_steps; /* steps at chance, after the grace, that make a stall */
    int max_recoveries;   /* recoveries after which gt_guard_exhausted is true */
} gt_guard_cfg;

typedef struct gt_guard {
    gt_guard_cfg cfg;
    double sum;           /* losses of the window in progress */
    int count;            /* steps in it */
    int ignore;           /* steps still to skip (in flight from before a recovery) */
    uint64_t steps;       /* steps observed since the start or the last recovery */
    uint64_t at_chance;   /* steps at chance in a row, past the grace */
    double reference;     /* mean of the first window; NAN until it ends */
    double best;          /* lowest window mean; NAN until one ends */
    double last_mean;     /* the last window's mean (what a verdict was about) */
    int recoveries;       /* times gt_guard_recovered was called */
    uint64_t goods;       /* GT_GUARD_GOOD verdicts since gt_guard_init */
    double lr_scale;      /* 1, halved at each recovery (quartered before any good window) */
} gt_guard;

/* Defaults for C classes: window 25, band 0.1, climb 1.5, good_slack 0.1, stall_steps 150,
 * grace 0, at most 6 recoveries. */
void gt_guard_defaults(gt_guard_cfg *c, int nclasses);

void gt_guard_init(gt_guard *g, const gt_guard_cfg *c);

/* One step's mean loss. Returns the verdict; anything but GT_GUARD_OK comes at most once per
 * window, except a non-finite loss, which is GT_GUARD_DIVERGED at once. */
gt_guard_verdict gt_guard_observe(gt_guard *g, double loss);

/* The caller rolled back and lowers the step size: halves lr_scale (quarters it when no window
 * was ever good, so the rollback went back to the start), counts the recovery,
 * starts over (a new reference, the grace again) and skips the next `in_flight` steps, which
 * were computed from parameters before the rollback. */
void gt_guard_recovered(gt_guard *g, int in_flight);

/* Whether a stall is a slow start rather than a dead or diverging run: no window was ever good
 * (nothing learned yet, so nothing better to return to) and the last window's mean is below the
 * chance loss (moving the right way; a step size too large sits at or above it). A lower step
 * size would only slow a slow start more. */
int gt_guard_slow_start(const gt_guard *g);
/* Lets a slow start run on: doubles stall_steps and counts the steps at chance afresh. */
void gt_guard_wait_longer(gt_guard *g);
/* Whether max_recoveries were spent: the next trip must stop the run. */
int gt_guard_exhausted(const gt_guard *g);

/* Whether a test accuracy is at chance for C classes (within 2 points of 1/C). */
int gt_guard_acc_at_chance(double acc, int nclasses);

const char *gt_guard_verdict_name(gt_guard_verdict v); /* "ok", "good", "diverged", "stalled" */

#ifdef __cplusplus
}
#endif
#endif
