/* guard.c - the divergence and stall guard (guard.h): windows of step losses compared with where
 * the run started, the best it reached, and the chance loss ln C. No I/O and no clock: the
 * training loop feeds it and acts on its verdicts, and tests drive it with made-up losses. */
#include "gputrain/guard.h"

#include <math.h>
#include <string.h>

void gt_guard_defaults(gt_guard_cfg *c, int nclasses)
{
    memset(c, 0, sizeof *c);
    c->window = 25;
    c->chance_loss = log(nclasses > 1 ? (double)nclasses : 2.0);
    c->band = 0.1;
    c->climb = 1.5;
    c->good_slack = 0.1;
    c->grace_steps = 0;
    c->stall_steps = 150;
    c->max_recoveries = 6;
}

static void guard_restart(gt_guard *g)
{
    g->sum = 0;
    g->count = 0;
    g->steps = 0;
    g->at_chance = 0;
    g->reference = NAN;
    g->best = NAN;
}

void gt_guard_init(gt_guard *g, const gt_guard_cfg *c)
{
    memset(g, 0, sizeof *g);
    g->cfg = *c;
    if (g->cfg.window < 1)
        g->cfg.window = 1;
    g->lr_scale = 1.0;
    g->last_mean = NAN;
    guard_restart(g);
}

/* The verdict on one finished window whose mean is m, ending at step g->steps. */
static gt_guard_verdict guard_window(gt_guard *g, double m, int n)
{
    const gt_guard_cfg *c = &g->cfg;
    g->last_mean = m;
    if (isnan(g->reference))
        g->reference = m;
    /* The bar: climb times the larger of the start and chance; once a window has been good the
     * start no longer lifts it (a first window above chance is the initialisation's, not a
     * level the run may climb back to). */
    double ref = g->reference > c->chance_loss && !g->goods ? g->reference : c->chance_loss;
    if (m > c->climb * ref)
        return GT_GUARD_DIVERGED;
    /* At chance or worse: a loss above ln C (worse than guessing uniformly) that stays below the
     * divergence bar has learned nothing either. */
    int chance = m >= c->chance_loss - c->band;
    if (!chance) {
        g->at_chance = 0;
    } else {
        /* Only the part of the window past the grace counts, and only until the model has
         * learned: after a good window, chance again is a relapse, not the warm-up's start. */
        uint64_t first = g->steps - (uint64_t)n;
        uint64_t from = first > c->grace_steps || g->goods ? first : c->grace_steps;
        g->at_chance += g->steps > from ? g->steps - from : 0;
        if (g->at_chance >= c->stall_steps)
            return GT_GUARD_STALLED;
        return GT_GUARD_OK;
    }
    int good = isnan(g->best) || m <= g->best + c->good_slack;
    if (isnan(g->best) || m < g->best)
        g->best = m;
    if (!good || m >= c->chance_loss - c->band)
        return GT_GUARD_OK;
    g->goods++;
    return GT_GUARD_GOOD;
}

void gt_guard_wait_longer(gt_guard *g)
{
    g->cfg.stall_steps *= 2;
    g->at_chance = 0;
}

int gt_guard_slow_start(const gt_guard *g)
{
    return g->goods == 0 && g->last_mean < g->cfg.chance_loss;
}

gt_guard_verdict gt_guard_observe(gt_guard *g, double loss)
{
    if (g->ignore > 0) {
        g->ignore--;
        return GT_GUARD_OK;
    }
    if (!isfinite(loss)) {
        g->last_mean = loss;
        return GT_GUARD_DIVERGED;
    }
    g->sum += loss;
    g->count++;
    g->steps++;
    if (g->count < g->cfg.window)
        return GT_GUARD_OK;
    double m = g->sum / g->count;
    int n = g->count;
    g->sum = 0;
    g->count = 0;
    if (!isfinite(m)) {
        g->last_mean = m;
        return GT_GUARD_DIVERGED;
    }
    return guard_window(g, m, n);
}

void gt_guard_recovered(gt_guard *g, int in_flight)
{
    g->recoveries++;
    /* Never a good window: the step size was too large from the first step, and the rollback
     * goes back to the start, so take a bigger step down. */
    g->lr_scale *= g->goods ? 0.5 : 0.25;
    g->ignore = in_flight > 0 ? in_flight : 0;
    guard_restart(g);
}

int gt_guard_exhausted(const gt_guard *g) { return g->recoveries >= g->cfg.max_recoveries; }

int gt_guard_acc_at_chance(double acc, int nclasses)
{
    double chance = 1.0 / (nclasses > 1 ? nclasses : 2);
    return acc <= chance + 0.02;
}

const char *gt_guard_verdict_name(gt_guard_verdict v)
{
    static const char *const names[] = {"ok", "good", "diverged", "stalled"};
    return (unsigned)v < sizeof names / sizeof *names ? names[v] : "unknown";
}
