/* test_guard.c - the divergence and stall guard's state machine (guard.h), driven with made-up
 * loss sequences: healthy, non-finite, climbing, stuck at chance (with and without a warm-up),
 * a relapse to chance or above it inside a warm-up, dead after a blow-up, recoveries and their
 * limit. */
#include "gputrain/guard.h"

#include "test_util.h"

/* Feeds n losses from f(i); returns the index of the first verdict v (or -1) and counts GOODs. */
typedef double (*loss_fn)(int i);

static int feed_until(gt_guard *g, loss_fn f, int n, gt_guard_verdict v, int *goods)
{
    for (int i = 0; i < n; i++) {
        gt_guard_verdict got = gt_guard_observe(g, f(i));
        if (goods && got == GT_GUARD_GOOD)
            (*goods)++;
        if (got == v)
            return i;
    }
    return -1;
}

static double healthy(int i) { return 2.3 * exp(-i / 200.0) + 0.3 + 0.05 * sin(i * 1.7); }
static double at_chance(int i) { return log(10.0) + 0.005 * sin(i * 0.9); }
static double climbing(int i) { return i < 100 ? healthy(i) : 1.0 + 0.05 * (i - 100); }
static double learn_then_die(int i) { return i < 150 ? healthy(i) : i < 160 ? 2.48 : at_chance(i); }
static double slow_start(int i) { return log(10.0) - 0.03 + 0.005 * sin(i * 0.9); }
static double dead_above(int i) { return log(10.0) + 0.03 + 0.005 * sin(i * 0.9); }
static double nan_at_60(int i) { return i == 60 ? NAN : healthy(i); }
/* stuck a little worse than guessing (2 GPUs, allreduce at lr 1.0 sat at 2.36-2.41) */
static double stuck_worse(int i) { return log(10.0) + 0.11 + 0.02 * sin(i * 0.9); }

static void test_defaults(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    CHECK_CLOSE(c.chance_loss, log(10.0), 1e-12);
    CHECK(c.window >= 1 && c.window <= 50);
    /* a stall is reported within 200 steps of its start (worst case: a window and stall_steps) */
    CHECK(c.stall_steps + (uint64_t)c.window <= 200);
    gt_guard_defaults(&c, 1); /* one class: no division by zero, a finite chance loss */
    CHECK(isfinite(c.chance_loss) && c.chance_loss > 0);
}

static void test_healthy_never_trips(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    gt_guard g;
    gt_guard_init(&g, &c);
    int goods = 0;
    CHECK(feed_until(&g, healthy, 5000, GT_GUARD_DIVERGED, &goods) < 0);
    gt_guard_init(&g, &c);
    CHECK(feed_until(&g, healthy, 5000, GT_GUARD_STALLED, NULL) < 0);
    CHECK_MSG(goods > 100, "goods %d", goods); /* good points keep coming while it learns */
    CHECK(g.lr_scale == 1.0 && g.recoveries == 0);
}

static void test_nonfinite_at_once(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    gt_guard g;
    gt_guard_init(&g, &c);
    CHECK(feed_until(&g, nan_at_60, 1000, GT_GUARD_DIVERGED, NULL) == 60);
    gt_guard_init(&g, &c);
    CHECK(gt_guard_observe(&g, INFINITY) == GT_GUARD_DIVERGED);
    CHECK(gt_guard_observe(&g, -INFINITY) == GT_GUARD_DIVERGED);
}

static void test_climb(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    gt_guard g;
    gt_guard_init(&g, &c);
    int at = feed_until(&g, climbing, 2000, GT_GUARD_DIVERGED, NULL);
    /* the loss passes 1.5 * ln 10 = 3.45 at step 150; noticed within a window or two */
    CHECK_MSG(at >= 150 && at < 150 + 2 * c.window, "at %d", at);
    CHECK(g.last_mean > c.climb * c.chance_loss);
}

static void test_stall_from_start(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    gt_guard g;
    gt_guard_init(&g, &c);
    int at = feed_until(&g, at_chance, 1000, GT_GUARD_STALLED, NULL);
    CHECK_MSG(at >= (int)c.stall_steps - 1 && at < 200, "at %d", at);
    /* worse than chance but under the divergence bar is a stall too */
    gt_guard_init(&g, &c);
    at = feed_until(&g, stuck_worse, 1000, GT_GUARD_STALLED, NULL);
    CHECK_MSG(at >= (int)c.stall_steps - 1 && at < 200, "worse than chance: at %d", at);
    /* never a good point while at chance */
    gt_guard_init(&g, &c);
    int goods = 0;
    feed_until(&g, at_chance, 140, GT_GUARD_STALLED, &goods);
    CHECK(goods == 0);
}

/* A stall that never left chance but sits below it is a slow start: waiting longer doubles the
 * patience and counts afresh. One at or above chance (a step size too large), or after the run
 * had learned (test_dead_after_blowup), is not. */
static void test_slow_start_waits(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    gt_guard g;
    gt_guard_init(&g, &c);
    int first = feed_until(&g, slow_start, 1000, GT_GUARD_STALLED, NULL);
    CHECK(first >= 0 && gt_guard_slow_start(&g));
    gt_guard_wait_longer(&g);
    CHECK(g.cfg.stall_steps == 2 * c.stall_steps && g.recoveries == 0 && g.lr_scale == 1.0);
    int second = feed_until(&g, slow_start, 1000, GT_GUARD_STALLED, NULL);
    CHECK_MSG(second >= (int)(2 * c.stall_steps) - 1 && second < (int)(2 * c.stall_steps) + 50,
              "second stall after %d steps", second);
    gt_guard_init(&g, &c);
    CHECK(feed_until(&g, dead_above, 1000, GT_GUARD_STALLED, NULL) >= 0 && !gt_guard_slow_start(&g));
    gt_guard_init(&g, &c);
    CHECK(feed_until(&g, learn_then_die, 2000, GT_GUARD_STALLED, NULL) >= 0 &&
          !gt_guard_slow_start(&g));
}

static void test_stall_grace(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    c.grace_steps = 500; /* a warm-up: chance is expected for its first 500 steps */
    gt_guard g;
    gt_guard_init(&g, &c);
    int at = feed_until(&g, at_chance, 2000, GT_GUARD_STALLED, NULL);
    CHECK_MSG(at >= 500 + (int)c.stall_steps - 1 && at < 500 + 200, "at %d", at);
}

/* Learns, then falls back to chance (above it) inside a long warm-up's grace: a relapse, not
 * the warm-up's start, so it counts (4 GPUs at batch 256 a GPU fell to chance in the 4th epoch of
 * a 4-epoch warm-up, under the climb bar of a high first window). */
static double relapse(int i) { return i < 25 ? 3.0 : i < 300 ? healthy(i) : dead_above(i); }
/* ... or blows up to 1.8x chance: under the first window's bar (1.5 x 3.0), over chance's. */
static double relapse_high(int i) { return i < 25 ? 3.0 : i < 300 ? healthy(i) : 4.1; }

static void test_relapse_in_grace(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    c.grace_steps = 1000;
    gt_guard g;
    gt_guard_init(&g, &c);
    CHECK(feed_until(&g, relapse, 2000, GT_GUARD_DIVERGED, NULL) < 0); /* bar: 1.5 x 3.0 */
    gt_guard_init(&g, &c);
    int at = feed_until(&g, relapse, 2000, GT_GUARD_STALLED, NULL);
    CHECK_MSG(at >= 300 + (int)c.stall_steps - 1 && at < 300 + 200, "at %d", at);
    /* never learned: the grace still covers the warm-up's steps at chance */
    gt_guard_init(&g, &c);
    CHECK(feed_until(&g, dead_above, 1000, GT_GUARD_STALLED, NULL) < 0);
    /* a high first window lifts the climb's bar only until the run has learned */
    gt_guard_init(&g, &c);
    at = feed_until(&g, relapse_high, 2000, GT_GUARD_DIVERGED, NULL);
    CHECK_MSG(at >= 300 && at < 300 + 2 * (int)c.window, "at %d", at);
    gt_guard_init(&g, &c);
    CHECK(feed_until(&g, relapse_high, 300, GT_GUARD_DIVERGED, NULL) < 0);
}

static void test_dead_after_blowup(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    gt_guard g;
    gt_guard_init(&g, &c);
    int at = feed_until(&g, learn_then_die, 2000, GT_GUARD_STALLED, NULL);
    CHECK_MSG(at > 150 && at < 160 + 200, "at %d", at);
}

static void test_recover_and_limit(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    c.max_recoveries = 3;
    gt_guard g;
    gt_guard_init(&g, &c);
    CHECK(gt_guard_observe(&g, NAN) == GT_GUARD_DIVERGED);
    gt_guard_recovered(&g, 4);
    /* no window was ever good: back to the start, with a quarter of the step size */
    CHECK(g.lr_scale == 0.25 && g.recoveries == 1 && !gt_guard_exhausted(&g));
    /* the 4 steps in flight from before the rollback are not held against it */
    for (int i = 0; i < 4; i++)
        CHECK(gt_guard_observe(&g, NAN) == GT_GUARD_OK);
    CHECK(gt_guard_observe(&g, NAN) == GT_GUARD_DIVERGED);
    CHECK(feed_until(&g, healthy, 100, GT_GUARD_GOOD, NULL) >= 0);
    gt_guard_recovered(&g, 0); /* after a good window: half */
    CHECK(g.lr_scale == 0.125 && !gt_guard_exhausted(&g));
    gt_guard_recovered(&g, 0);
    CHECK(g.lr_scale == 0.0625 && gt_guard_exhausted(&g));
    /* after a recovery the stall count starts over */
    gt_guard_init(&g, &c);
    for (int i = 0; i < 100; i++)
        CHECK(gt_guard_observe(&g, at_chance(i)) == GT_GUARD_OK);
    gt_guard_recovered(&g, 0);
    int at = feed_until(&g, at_chance, 1000, GT_GUARD_STALLED, NULL);
    CHECK_MSG(at >= (int)c.stall_steps - 1, "at %d", at);
}

static void test_good_only_near_best(void)
{
    gt_guard_cfg c;
    gt_guard_defaults(&c, 10);
    c.window = 1;
    gt_guard g;
    gt_guard_init(&g, &c);
    CHECK(gt_guard_observe(&g, 1.0) == GT_GUARD_GOOD);
    CHECK(gt_guard_observe(&g, 0.8) == GT_GUARD_GOOD);
    CHECK(gt_guard_observe(&g, 0.85) == GT_GUARD_GOOD); /* within good_slack of the best */
    CHECK(gt_guard_observe(&g, 1.2) == GT_GUARD_OK);    /* worse: not a point to return to */
    CHECK(gt_guard_observe(&g, 2.0) == GT_GUARD_OK);    /* below climb * chance: not yet a trip */
    CHECK(gt_guard_observe(&g, 4.0) == GT_GUARD_DIVERGED);
}

static void test_acc_at_chance(void)
{
    CHECK(gt_guard_acc_at_chance(0.1000, 10));
    CHECK(gt_guard_acc_at_chance(0.1150, 10));
    CHECK(!gt_guard_acc_at_chance(0.1500, 10));
    CHECK(!gt_guard_acc_at_chance(0.8, 10));
    CHECK(gt_guard_acc_at_chance(0.51, 2));
    CHECK(strcmp(gt_guard_verdict_name(GT_GUARD_STALLED), "stalled") == 0);
    CHECK(strcmp(gt_guard_verdict_name(GT_GUARD_DIVERGED), "diverged") == 0);
}

int main(void)
{
    test_defaults();
    test_healthy_never_trips();
    test_nonfinite_at_once();
    test_climb();
    test_stall_from_start();
    test_slow_start_waits();
    test_stall_grace();
    test_relapse_in_grace();
    test_dead_after_blowup();
    test_recover_and_limit();
    test_good_only_near_best();
    test_acc_at_chance();
    TEST_DONE();
}
