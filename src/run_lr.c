/* run_lr.c - one update's learning rate, prepared in one place: the run's progress in epochs
 * (which the schedule and the warm-up read), the optimizer's step scalars for update t, and the
 * factor the gradients are scaled by (the guard's step size over the gradients summed). Every mode
 * calls it once an update, so the schedule means the same in each. */
#include "run.h"

#include <stdatomic.h>

run_lr run_lr_at(run *r, uint64_t t, uint64_t samples, int nsum)
{
    run_lr lr = {.epoch = run_progress_epochs(r, samples)};
    if (t > 0)
        lr.st = gt_optim_prepare(&r->cfg->optim, t, lr.epoch);
    lr.gscale = guard_scale(r) / (float)nsum; /* nsum 1: the factor itself, exactly */
    return lr;
}

run_lr run_lr_now(run *r, uint64_t t, int nsum)
{
    return run_lr_at(r, t, atomic_load(&r->stats.samples_total), nsum);
}
