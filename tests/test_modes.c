/* test_modes.c - the training modes on CPU workers, end to end through gt_train_run:
 * sync over W workers equals one worker at W times the batch, ssp honours its staleness bound,
 * reads fresh parameters when its workers are balanced (on a simulated clock) and at 0 equals
 * sync, every mode learns, failed workers hand their data to the survivors, and
 * non-finite losses stop the run or are skipped; the CPU evaluate's per-sample predictions; --ema
 * evaluates the moving average.
 * "Every mode" is every row of the modes table (names.c) that CPU workers run, so a new mode is
 * tested here without editing this file. Runs
 * under ThreadSanitizer in CI (GT_QUICK=1 shrinks the runs there). */
#include "gputrain/cli.h"
#include "gputrain/names.h"
#include "gputrain/train.h"
#include "test_util.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static gt_data g_data;
static int g_quick;
/* ssp's pace, simulated (gt_ssp_clock): with g_sim set, a worker's clock advances by its own steps
 * only, SIM_STEP_S each, g_slow_factor times that on worker g_slow (-1: none), so that ssp sees
 * balanced workers or a straggler by construction, whatever else the machine runs (ctest runs
 * tests side by side on CI's 2 cores). g_ahead > 0: worker g_slow's step k also waits until every
 * other worker has begun its step k + g_ahead (or its last, g_last_step), so that the others are
 * that far ahead whatever the scheduler does; if they never get there (ssp held them back), it
 * gives up after AHEAD_GIVE_UP_S and the run goes on without the wait (g_ahead_gave_up). */
#define SIM_STEP_S 0.006
#define AHEAD_GIVE_UP_S 60
static int g_sim;
static int g_slow = -1;
static double g_slow_factor = 1;
static int g_ahead;
static uint64_t g_last_step;
static int g_ahead_gave_up;
static _Thread_local double t_sim_s = 1.0; /* this worker's simulated clock, from 1 s */
static pthread_mutex_t g_steps_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_steps_cv = PTHREAD_COND_INITIALIZER;
static uint64_t g_begun[8]; /* steps each worker has begun (g_steps_mu) */
static int g_nworkers;
static gt_device_ops g_sim_ops;
static int (*g_fast_step)(gt_device *, const gt_batch *, gt_step_out *, gt_err *);
/* Sanitizer builds (GT_QUICK=1) run 10-50x slower: there a small network on fewer samples keeps
 * every thread interleaving exercised without the minutes. */
static const char *g_model = "lenet5";

typedef struct outcome {
    int rc;
    char err[GT_ERRLEN];
    gt_run_result *res;
    double step_loss[64]; /* mean loss of each of the first steps (clocks), from --log-steps */
    int nsteps;
} outcome;

static void base_config(gt_config *c, const char *mode, int workers, int batch)
{
    gt_config_defaults(c);
    snprintf(c->model, sizeof c->model, "%s", g_model);
    c->cpu_workers = workers;
    c->batch = batch;
    c->epochs = 1;
    c->quiet = 1;
    c->progress = 0;
    CHECK_MSG(gt_mode_parse(mode, &c->mode) == 0, "no mode '%s' in the names table", mode);
}

/* Row i of the modes table when CPU workers can run it (allreduce needs NCCL), else NULL. */
static const gt_mode_row *cpu_mode(int i)
{
    const gt_mode_row *row = gt_mode_row_at(i);
    CHECK(row != NULL);
    return row && !row->needs_nccl ? row : NULL;
}

static double sim_clock(void) { return t_sim_s; }

/* Whether every worker but `slow` has begun its step `upto` (or its last). Caller holds
 * g_steps_mu. */
static int others_ahead_locked(int slow, uint64_t upto)
{
    if (upto > g_last_step)
        upto = g_last_step;
    for (int i = 0; i < g_nworkers; i++)
        if (i != slow && g_begun[i] <= upto)
            return 0;
    return 1;
}

/* Worker g_slow before its step k: waits for the others to begin step k + g_ahead. Caller holds
 * g_steps_mu. */
static void wait_ahead_locked(uint64_t k)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += AHEAD_GIVE_UP_S;
    while (!g_ahead_gave_up && !others_ahead_locked(g_slow, k + (uint64_t)g_ahead))
        if (pthread_cond_timedwait(&g_steps_cv, &g_steps_mu, &until) == ETIMEDOUT)
            g_ahead_gave_up = 1;
}

static int sim_train_step(gt_device *d, const gt_batch *b, gt_step_out *out, gt_err *e)
{
    int slow = d->ordinal == g_slow;
    pthread_mutex_lock(&g_steps_mu);
    uint64_t k = g_begun[d->ordinal]++;
    pthread_cond_broadcast(&g_steps_cv);
    if (slow && g_ahead > 0)
        wait_ahead_locked(k);
    pthread_mutex_unlock(&g_steps_mu);
    t_sim_s += SIM_STEP_S * (slow ? g_slow_factor : 1);
    return g_fast_step(d, b, out, e);
}

/* Steps on the simulated clock (a CPU device's ordinal is its worker's index). */
static void simulate(gt_device *d)
{
    g_sim_ops = *d->ops;
    g_fast_step = g_sim_ops.train_step;
    g_sim_ops.train_step = sim_train_step;
    d->ops = &g_sim_ops;
}

/* The clocks of an epoch of `workers` at `batch`. */
static uint64_t epoch_clocks(int workers, int batch)
{
    return g_data.train.n / ((uint64_t)workers * (uint64_t)batch);
}

static outcome train(gt_config *c)
{
    outcome o = {0};
    gt_err e = {{0}};
    gt_model m;
    char log[] = "/tmp/gt_modes_XXXXXX";
    int fd = mkstemp(log);
    close(fd);
    snprintf(c->log_path, sizeof c->log_path, "%s", log);
    c->log_steps = 1;
    o.res = calloc(1, sizeof *o.res);
    CHECK(gt_model_build(c->model, 1, 28, 28, 10, &m, &e) == 0);
    float *params = gt_alloc(m.nparams * sizeof(float));
    gt_model_init_params(&m, params, c->seed);
    gt_device *devs[8], *ev;
    for (int i = 0; i < c->cpu_workers; i++)
        CHECK(gt_cpu_device_open(&devs[i], &m, c->batch, i, &e) == 0);
    if (g_sim) {
        for (int i = 0; i < c->cpu_workers; i++)
            simulate(devs[i]);
        memset(g_begun, 0, sizeof g_begun);
        g_nworkers = c->cpu_workers;
        g_last_step = epoch_clocks(c->cpu_workers, c->batch) - 1;
        g_ahead_gave_up = 0;
        gt_ssp_clock = sim_clock;
    }
    CHECK(gt_cpu_device_open(&ev, &m, c->batch, 99, &e) == 0);
    gt_start start = {.params = params};
    o.rc = gt_train_run(c, &m, &g_data, devs, c->cpu_workers, ev, &start, o.res, &e);
    gt_ssp_clock = gt_now;
    snprintf(o.err, sizeof o.err, "%s", e.msg);
    for (int i = 0; i < c->cpu_workers; i++)
        gt_device_close(devs[i]);
    gt_device_close(ev);
    gt_free(params);
    o.nsteps = gt_test_step_losses(log, c->cpu_workers, o.step_loss, 64);
    unlink(log);
    return o;
}

/* Sync with 2 workers at batch 32 computes what 1 worker at batch 64 computes. */
static void test_sync_equivalence(void)
{
    gt_config a, b;
    base_config(&a, "sync", 1, 64);
    base_config(&b, "sync", 2, 32);
    a.optim.momentum = b.optim.momentum = 0.9f;
    outcome oa = train(&a), ob = train(&b);
    CHECK(oa.rc == 0 && ob.rc == 0);
    int steps = g_quick ? 10 : 40;
    CHECK_MSG(oa.nsteps >= steps && ob.nsteps >= steps, "%d and %d steps logged", oa.nsteps, ob.nsteps);
    for (int i = 0; i < steps && i < oa.nsteps && i < ob.nsteps; i++)
        CHECK_MSG(fabs(oa.step_loss[i] - ob.step_loss[i]) <= 1e-4 * fabs(oa.step_loss[i]),
                  "step %d: 1x64 loss %.9g, 2x32 loss %.9g", i, oa.step_loss[i], ob.step_loss[i]);
    CHECK(oa.res->samples == ob.res->samples);
    CHECK(ob.res->stale_max == 0);
    gt_run_result_free(oa.res);
    free(oa.res);
    gt_run_result_free(ob.res);
    free(ob.res);
}

static void check_same_steps(const outcome *a, const outcome *b, const char *what);

/* SSP never lets the workers' clocks spread more than s; at s = 0 it computes what sync does, bit
 * for bit (gradients are summed in share order in both). */
static void test_ssp(void)
{
    int bounds[] = {0, 1, 3};
    for (int i = 0; i < 3; i++) {
        gt_config c;
        base_config(&c, "ssp", 3, 32);
        c.staleness = bounds[i];
        outcome o = train(&c);
        CHECK(o.rc == 0);
        CHECK_MSG(o.res->clock_spread_max <= (uint64_t)bounds[i], "staleness %d: spread %llu",
                  bounds[i], (unsigned long long)o.res->clock_spread_max);
        CHECK(o.res->stale_max <= (uint64_t)bounds[i]);
        gt_run_result_free(o.res);
        free(o.res);
    }
    gt_config s, p;
    base_config(&s, "sync", 2, 32);
    base_config(&p, "ssp", 2, 32);
    p.staleness = 0;
    outcome os = train(&s), op = train(&p);
    CHECK(os.rc == 0 && op.rc == 0);
    CHECK(os.nsteps > 10 && os.nsteps == op.nsteps);
    for (int i = 0; i < os.nsteps && i < op.nsteps; i++)
        CHECK_MSG(os.step_loss[i] == op.step_loss[i], "step %d: sync %.9g ssp(0) %.9g", i,
                  os.step_loss[i], op.step_loss[i]);
    CHECK(os.res->final_test_acc == op.res->final_test_acc);
    CHECK(os.res->final_test_loss == op.res->final_test_loss);
    gt_run_result_free(os.res);
    free(os.res);
    gt_run_result_free(op.res);
    free(op.res);
    /* A lone worker computes on what its last apply left, whatever its bound: sync's steps; and
     * those are hogwild's lone worker's, bit for bit (the copy its applies keep is the store). */
    gt_config s1, p1, h1;
    base_config(&s1, "sync", 1, 32);
    base_config(&p1, "ssp", 1, 32);
    base_config(&h1, "hogwild", 1, 32);
    p1.staleness = 2;
    outcome o1 = train(&s1), q1 = train(&p1), g1 = train(&h1);
    check_same_steps(&o1, &q1, "ssp at one worker against sync");
    check_same_steps(&o1, &g1, "hogwild at one worker against sync");
    gt_run_result_free(g1.res);
    free(g1.res);
    gt_run_result_free(o1.res);
    free(o1.res);
    gt_run_result_free(q1.res);
    free(q1.res);
}

/* The bound is a limit, not a target. Balanced workers (on the simulated clock) compute on fresh
 * parameters: on every clock once each has finished one and so has a pace, which leaves clocks
 * 1 .. s + 1 at most min(c, s) stale, where running ahead to the bound makes every clock about s
 * stale. A worker 4x slower than the others still lets them run ahead to the bound, which then
 * holds them: held until they are s clocks ahead, they read clock c at c - s, so its staleness is
 * exactly min(c, s). */
static void test_ssp_fresh(void)
{
    int s = 3;
    gt_config c;
    base_config(&c, "ssp", 2, 32);
    c.staleness = s;
    g_sim = 1;
    outcome o = train(&c);
    CHECK(o.rc == 0);
    uint64_t n = epoch_clocks(2, 32);
    printf("ssp s=%d balanced  staleness mean %.2f max %llu\n", s, o.res->stale_mean,
           (unsigned long long)o.res->stale_max);
    CHECK(o.res->stale_max <= (uint64_t)s && o.res->clock_spread_max <= (uint64_t)s);
    CHECK_MSG(o.res->stale_mean * (double)n <= s * (s + 1) / 2 + s + 1e-9,
              "balanced: staleness mean %.3f over %llu clocks", o.res->stale_mean,
              (unsigned long long)n);
    gt_run_result_free(o.res);
    free(o.res);
    g_slow = 2;
    g_slow_factor = 4;
    g_ahead = s;
    base_config(&c, "ssp", 3, 32);
    c.staleness = s;
    o = train(&c);
    g_sim = g_ahead = 0;
    g_slow = -1;
    CHECK(o.rc == 0);
    CHECK_MSG(!g_ahead_gave_up, "straggler: the others were not %d clocks ahead within %d s", s,
              AHEAD_GIVE_UP_S);
    n = epoch_clocks(3, 32);
    double mean = (s * (s - 1) / 2 + (double)s * (double)(n - (uint64_t)s)) / (double)n;
    printf("ssp s=%d straggler staleness mean %.2f spread max %llu\n", s, o.res->stale_mean,
           (unsigned long long)o.res->clock_spread_max);
    CHECK_MSG(o.res->clock_spread_max == (uint64_t)s, "straggler: spread %llu",
              (unsigned long long)o.res->clock_spread_max);
    CHECK(o.res->stale_max == (uint64_t)s);
    CHECK_MSG(fabs(o.res->stale_mean - mean) < 1e-9, "straggler: staleness mean %.6f, not %.6f",
              o.res->stale_mean, mean);
    gt_run_result_free(o.res);
    free(o.res);
}

/* One mode (variant: "", "-lockfree", "-static", "-ema" or "-lockfree-ema") learns: lenet5 on 2 CPU workers, one epoch
 * of the loaded samples. */
static void mode_learns(const char *mode, const char *variant)
{
    gt_config c;
    /* The recipe that reaches 0.74-0.78 in every mode on 6,000 samples (a sweep over batch, lr,
     * schedule and betas on seeds 1-3); sanitizer builds train on less with larger batches and
     * only check that the run learns. Where the result depends on how the workers interleave
     * (hogwild, ssp, local), 28 runs on 2 cores at load 9-17 gave 0.737-0.767, so 0.70 is more
     * than 5 standard deviations below; under a sanitizer 20 runs gave 0.50-0.59 against 0.3. */
    base_config(&c, mode, 2, g_quick ? 8 : 1);
    c.optim.kind = GT_OPT_ADAM;
    c.optim.lr = 5e-3f;
    c.optim.beta2 = 0.99f;
    c.optim.schedule = GT_SCHED_COSINE;
    c.optim.warmup_epochs = 0.15f;
    c.optim.total_epochs = 1;
    if (strncmp(variant, "-lockfree", 9) == 0)
        c.stripes = 0;
    if (strstr(variant, "-ema")) /* the evaluation is of the moving average */
        c.ema = 0.99f;
    if (strcmp(variant, "-static") == 0)
        c.balance = GT_BALANCE_STATIC;
    if (strcmp(variant, "-parts") == 0) { /* the store step in parts (the quick model: 1 stripe) */
        c.stripes = 8;
        c.store_parts = 4;
    }
    outcome o = train(&c);
    double need = g_quick ? 0.3 : 0.70;
    CHECK_MSG(o.rc == 0, "%s%s: %s", mode, variant, o.err);
    CHECK_MSG(o.res->final_test_acc >= need, "%s%s: test accuracy %.4f < %.2f", mode, variant,
              o.res->final_test_acc, need);
    CHECK(o.res->npoints == 1);
    CHECK(o.res->workers[0].steps > 0 && o.res->workers[1].steps > 0);
    printf("%s%-*s acc %.4f  %6.0f samples/s\n", mode, 17 - (int)strlen(mode), variant,
           o.res->final_test_acc, o.res->samples_per_s);
    gt_run_result_free(o.res);
    free(o.res);
}

/* Every mode of the names table that CPU workers run learns, also evaluated on its moving average
 * (--ema); an unclocked one (workers take batches themselves) also lock-free (--stripes 0, with
 * and without --ema) and with --balance static. */
static void test_every_mode_learns(void)
{
    for (int i = 0; i < gt_mode_count(); i++) {
        const gt_mode_row *row = cpu_mode(i);
        if (!row)
            continue;
        mode_learns(row->head.name, "");
        mode_learns(row->head.name, "-ema");
        if (!row->clocked) {
            mode_learns(row->head.name, "-lockfree");
            mode_learns(row->head.name, "-lockfree-ema");
            mode_learns(row->head.name, "-static");
        }
        if (row->async_variants)
            mode_learns(row->head.name, "-parts");
    }
}

static void outcome_free(outcome *o)
{
    gt_run_result_free(o->res);
    free(o->res);
}

/* Two runs that must compute the same arithmetic: both ran, and every logged step's loss and the
 * final accuracy are equal, bit for bit. */
static void check_same_steps(const outcome *a, const outcome *b, const char *what)
{
    CHECK_MSG(a->rc == 0 && b->rc == 0, "%s: %s %s", what, a->err, b->err);
    CHECK(a->nsteps == b->nsteps && a->nsteps > 3);
    for (int k = 0; k < a->nsteps && k < b->nsteps; k++)
        CHECK_MSG(a->step_loss[k] == b->step_loss[k], "%s, step %d: %.9g against %.9g", what, k,
                  a->step_loss[k], b->step_loss[k]);
    CHECK(a->rc || b->rc || a->res->final_test_acc == b->res->final_test_acc);
}

/* hogwild --overlap: each step is computed on parameters that miss its predecessor's update. With
 * one worker that is exact: step k + 1's loss is the loss at the parameters before step k's push,
 * so step 1's loss equals a run's whose lr is 0 (parameters never move), and every push but the
 * first is one update stale. It learns; a failed worker's two batches in flight go to the other;
 * every sample of the epoch is trained on. */
static void test_overlap(void)
{
    gt_config a, frozen, serial;
    base_config(&a, "hogwild", 1, 32);
    base_config(&frozen, "hogwild", 1, 32);
    base_config(&serial, "hogwild", 1, 32);
    a.overlap = frozen.overlap = 1;
    /* Momentum 0.9 and a stale gradient diverge at the default lr; Adam's recipe above does not. */
    gt_config *all[] = {&a, &frozen, &serial};
    for (int i = 0; i < 3; i++) {
        all[i]->optim.kind = GT_OPT_ADAM;
        all[i]->optim.lr = 4e-3f;
    }
    frozen.optim.lr = 0.0f;
    outcome oa = train(&a), of = train(&frozen), os = train(&serial);
    CHECK_MSG(oa.rc == 0 && of.rc == 0 && os.rc == 0, "%s %s %s", oa.err, of.err, os.err);
    CHECK(oa.nsteps > 3 && of.nsteps > 3 && os.nsteps > 3);
    CHECK(oa.step_loss[0] == os.step_loss[0] && oa.step_loss[0] == of.step_loss[0]);
    CHECK_MSG(oa.step_loss[1] == of.step_loss[1], "step 1: overlap %.9g, lr 0 %.9g",
              oa.step_loss[1], of.step_loss[1]);
    CHECK(os.step_loss[1] != of.step_loss[1]);
    CHECK(oa.step_loss[2] != of.step_loss[2]);
    /* every push but the first: (steps - 1) / steps */
    CHECK_MSG(oa.res->stale_max == 1 && oa.res->stale_mean > 0.95, "staleness max %llu mean %.3f",
              (unsigned long long)oa.res->stale_max, oa.res->stale_mean);
    CHECK(os.res->stale_max == 0);
    CHECK(oa.res->samples == os.res->samples);
    printf("overlap           acc %.4f (serial %.4f)\n", oa.res->final_test_acc,
           os.res->final_test_acc);
    CHECK_MSG(oa.res->final_test_acc > (g_quick ? 0.3 : 0.5), "overlap: test accuracy %.4f",
              oa.res->final_test_acc);
    gt_run_result_free(oa.res);
    free(oa.res);
    gt_run_result_free(of.res);
    free(of.res);
    gt_run_result_free(os.res);
    free(os.res);
    /* Weight prediction (--overlap's default with SGD) undoes the one step of staleness that one
     * worker has: with plain SGD, the predicted parameters are the store's after the push still
     * in flight, bit for bit, so the run is the serial one. */
    gt_config pa, ps;
    base_config(&pa, "hogwild", 1, 32);
    base_config(&ps, "hogwild", 1, 32);
    pa.overlap = pa.overlap_predict = 1;
    pa.optim.momentum = ps.optim.momentum = 0.0f;
    outcome op = train(&pa), oser = train(&ps);
    check_same_steps(&op, &oser, "predicted against serial");
    CHECK(op.res->stale_max == 1); /* the store still counts the push as one update stale */
    gt_run_result_free(op.res);
    free(op.res);
    gt_run_result_free(oser.res);
    free(oser.res);
    for (int balance = 0; balance < 2; balance++) {
        gt_config c, ref;
        base_config(&c, "hogwild", 2, 16);
        base_config(&ref, "hogwild", 2, 16);
        c.overlap = ref.overlap = 1;
        c.balance = ref.balance = balance ? GT_BALANCE_STATIC : GT_BALANCE_DYNAMIC;
        c.inject_worker = 1;
        c.inject_step = 3;
        outcome o = train(&c), r = train(&ref);
        CHECK_MSG(o.rc == 0 && r.rc == 0, "overlap with a fault: %s %s", o.err, r.err);
        CHECK(o.res->workers[1].failed && strstr(o.res->workers[1].error, "injected"));
        CHECK(o.res->workers[1].steps == 2);
        CHECK_MSG(o.res->samples == r.res->samples, "overlap %s: %llu samples, reference %llu",
                  balance ? "static" : "dynamic", (unsigned long long)o.res->samples,
                  (unsigned long long)r.res->samples);
        gt_run_result_free(o.res);
        free(o.res);
        gt_run_result_free(r.res);
        free(r.res);
    }
}

/* The store step of `mode` in `parts` parts survives: a worker that fails at its step 3 leaves
 * its batches to the other, which trains as many samples as a run without the fault; a gradient
 * dropped at every step (--on-nan skip) leaves the run going. */
static void check_parts_survive(const char *mode, int parts)
{
    gt_config c, ref;
    base_config(&c, mode, 2, 16);
    base_config(&ref, mode, 2, 16);
    c.stripes = ref.stripes = 8; /* the quick model is one default stripe */
    c.store_parts = ref.store_parts = parts;
    c.inject_worker = 1;
    c.inject_step = 3;
    outcome o = train(&c), r = train(&ref);
    CHECK_MSG(o.rc == 0 && r.rc == 0, "%s in parts with a fault: %s %s", mode, o.err, r.err);
    CHECK(o.rc || (o.res->workers[1].failed && o.res->workers[1].steps == 3));
    CHECK(o.rc || r.rc || o.res->samples == r.res->samples);
    outcome_free(&o);
    outcome_free(&r);
    base_config(&c, mode, 2, 32);
    c.stripes = 8;
    c.store_parts = parts;
    c.optim.lr = 1e30f;
    c.on_nan = GT_NAN_SKIP;
    o = train(&c);
    CHECK_MSG(o.rc == 0 && o.res->skipped_nonfinite > 0, "%s in parts, --on-nan skip: %s", mode,
              o.err);
    outcome_free(&o);
}

/* hogwild's store step in parts (--store-parts), where the CPU device has its whole gradient and
 * the parts run one after another: one worker computes what the whole push and pull compute, bit
 * for bit; two hand a failed worker's batch on and go on after dropped gradients (that they
 * learn: test_every_mode_learns). */
static void test_store_parts(void)
{
    gt_config a, whole;
    base_config(&a, "hogwild", 1, 32);
    base_config(&whole, "hogwild", 1, 32);
    a.stripes = whole.stripes = 8; /* the quick model is one default stripe */
    a.store_parts = 4;
    whole.store_parts = 0;
    outcome oa = train(&a), ow = train(&whole);
    check_same_steps(&oa, &ow, "in parts against whole");
    CHECK(oa.res->stale_max == 0 && ow.res->stale_max == 0);
    /* the first part is the first layers' (store_parts.c): the stripe holding the end of the last
     * tensor within half an even part (the convolutions), not an even quarter */
    gt_model m;
    gt_err e = {{0}};
    CHECK(gt_model_build(g_model, 1, 28, 28, 10, &m, &e) == 0);
    size_t end = gt_model_tensors_end_within(&m, m.nparams / 8);
    CHECK_MSG(end > 0 && oa.res->store_part_first >= end && oa.res->store_part_first < m.nparams / 4,
              "the first of 4 parts holds %zu of %zu parameters (its tensors end at %zu)",
              oa.res->store_part_first, m.nparams, end);
    CHECK(!oa.res->store_grad_bf16); /* auto: CPU workers compute in fp32 */
    /* --store-grad bf16: the store takes each gradient rounded to bf16; the first step starts from
     * the same parameters, the next ones from updates within bf16's rounding of fp32's, and the
     * run learns as well */
    gt_config h = a;
    h.store_grad = GT_STORE_GRAD_BF16;
    outcome oh = train(&h);
    CHECK_MSG(oh.rc == 0 && oh.res->store_grad_bf16, "bf16 gradient: %s", oh.err);
    CHECK(oh.rc || (oh.nsteps == oa.nsteps && oh.step_loss[0] == oa.step_loss[0]));
    int differ = 0;
    for (int k = 1; oh.rc == 0 && k < oh.nsteps; k++) {
        differ |= oh.step_loss[k] != oa.step_loss[k];
        CHECK_MSG(k > 8 || fabs(oh.step_loss[k] - oa.step_loss[k]) <= 0.01 * oa.step_loss[k],
                  "bf16 gradient, step %d: loss %.6g against fp32's %.6g", k, oh.step_loss[k],
                  oa.step_loss[k]);
    }
    CHECK(oh.rc || differ);
    printf("store step in parts, one CPU worker: test accuracy %.4f with fp32 gradients, %.4f "
           "with bf16\n", oa.res->final_test_acc, oh.res->final_test_acc);
    CHECK(oh.rc || fabs(oh.res->final_test_acc - oa.res->final_test_acc) <= 0.05);
    outcome_free(&oh);
    outcome_free(&oa);
    outcome_free(&ow);
    check_parts_survive("hogwild", 3);
}

/* `mode` at `workers` in `parts` parts (ssp at --staleness `staleness`) computes what `ref` with
 * as many workers computes whole: the same steps, bit for bit, and the same final test loss. */
static void check_parts_exact(const char *mode, const char *ref, int workers, int parts,
                              int staleness)
{
    gt_config p, w;
    base_config(&p, mode, workers, 32);
    base_config(&w, ref, workers, 32);
    p.stripes = w.stripes = 8; /* the quick model is one default stripe */
    p.store_parts = parts;
    w.store_parts = 0;
    p.staleness = w.staleness = staleness; /* read by ssp only */
    outcome op = train(&p), ow = train(&w);
    char what[96];
    snprintf(what, sizeof what, "%s x%d in %d parts against %s whole", mode, workers, parts, ref);
    check_same_steps(&op, &ow, what);
    CHECK(op.rc || ow.rc || (op.res->store_parts == parts && ow.res->store_parts == 0));
    CHECK(op.rc || ow.rc || op.res->final_test_loss == ow.res->final_test_loss);
    outcome_free(&op);
    outcome_free(&ow);
}

/* sync's and ssp's store step in parts (--store-parts): a part of a clock is applied as soon as
 * every share's gradient of it is in, summed in share order as the whole clock's apply sums it, so
 * sync in parts computes what sync whole computes, bit for bit, at 1 and 3 workers, and so does
 * ssp at --staleness 0 (two workers) and at one worker; ahead of each other (--staleness 2, three
 * workers) ssp's workers keep the bound; a failed worker's share is taken over, and a dropped
 * gradient (--on-nan skip) leaves the parts already applied as they were. */
static void test_clocked_parts(void)
{
    check_parts_exact("sync", "sync", 1, 4, 0);
    check_parts_exact("sync", "sync", 3, 4, 0);
    check_parts_survive("sync", 3);
    check_parts_exact("ssp", "sync", 2, 4, 0);
    check_parts_exact("ssp", "ssp", 1, 3, 2);
    gt_config c;
    base_config(&c, "ssp", 3, 16);
    c.stripes = 8;
    c.store_parts = 5;
    c.staleness = 2;
    outcome o = train(&c);
    CHECK_MSG(o.rc == 0, "ssp s=2 in parts: %s", o.err);
    CHECK(o.rc || o.res->clock_spread_max <= 2);
    CHECK(o.rc || o.res->stale_max <= 2);
    printf("ssp s=2 in 5 parts, 3 CPU workers: test accuracy %.4f\n",
           o.rc ? 0.0 : o.res->final_test_acc);
    outcome_free(&o);
    check_parts_survive("ssp", 4);
}

/* A failed worker leaves; the survivors train on its data; when all fail the run fails. Every
 * mode of the names table that CPU workers run. */
static void test_faults(void)
{
    int workers[] = {2, 4};
    for (int wi = 0; wi < 2; wi++)
        for (int i = 0; i < gt_mode_count(); i++) {
            const gt_mode_row *row = cpu_mode(i);
            if (!row)
                continue;
            const char *mode = row->head.name;
            gt_config c, ref;
            base_config(&c, mode, workers[wi], 16);
            base_config(&ref, mode, workers[wi], 16);
            c.inject_worker = 1;
            c.inject_step = 3;
            outcome o = train(&c), r = train(&ref);
            CHECK_MSG(o.rc == 0, "%s x%d: %s", mode, workers[wi], o.err);
            CHECK(o.res->workers[1].failed && strstr(o.res->workers[1].error, "injected"));
            CHECK(o.res->workers[1].steps == 3);
            CHECK(!o.res->workers[0].failed);
            /* Every sample the reference run trained on was trained on here too, except, in
             * hogwild, at most the failed worker's in-flight batch, which is re-queued. */
            CHECK_MSG(o.res->samples == r.res->samples, "%s x%d: %llu samples, reference %llu",
                      mode, workers[wi], (unsigned long long)o.res->samples,
                      (unsigned long long)r.res->samples);
            CHECK(o.res->npoints == 1);
            gt_run_result_free(o.res);
            free(o.res);
            gt_run_result_free(r.res);
            free(r.res);
        }
    gt_config c;
    base_config(&c, "sync", 1, 16);
    c.inject_worker = 0;
    c.inject_step = 2;
    outcome o = train(&c);
    CHECK(o.rc != 0 && strstr(o.err, "every worker failed") && strstr(o.err, "injected"));
    gt_run_result_free(o.res);
    free(o.res);
}

/* A diverging run stops with the step and worker named; --on-nan skip drops and counts. */
static void test_nan(void)
{
    gt_config c;
    base_config(&c, "hogwild", 2, 32);
    c.optim.lr = 1e30f;
    outcome o = train(&c);
    CHECK(o.rc != 0);
    CHECK_MSG(strstr(o.err, "non-finite") && strstr(o.err, "worker") && strstr(o.err, "step"), "%s", o.err);
    gt_run_result_free(o.res);
    free(o.res);
    base_config(&c, "sync", 2, 32);
    c.optim.lr = 1e30f;
    c.on_nan = GT_NAN_SKIP;
    o = train(&c);
    CHECK(o.rc == 0);
    CHECK(o.res->skipped_nonfinite > 0);
    gt_run_result_free(o.res);
    free(o.res);
}

/* A mode that needs NCCL refuses CPU workers with an error naming it. */
static void test_nccl_modes_refused(void)
{
    int refused = 0;
    for (int i = 0; i < gt_mode_count(); i++) {
        const gt_mode_row *row = gt_mode_row_at(i);
        if (!row || !row->needs_nccl)
            continue;
        gt_config c;
        base_config(&c, row->head.name, 2, 32);
        outcome o = train(&c);
        CHECK_MSG(o.rc != 0 && strstr(o.err, row->head.name), "%s on CPU workers: rc %d, '%s'",
                  row->head.name, o.rc, o.err);
        gt_run_result_free(o.res);
        free(o.res);
        refused++;
    }
    CHECK(refused > 0);
}

/* Every evaluation is kept, however many: --eval-every 1 evaluates after each clock (more points
 * than the result's first allocation holds), and the epoch's end adds none of its own at the last. */
static void test_every_evaluation_kept(void)
{
    gt_config c;
    base_config(&c, "sync", 1, 16);
    c.eval_every = 1;
    /* Every clock evaluates: 10,000 test images each time took a minute of CPU (under a sanitizer
     * many), and the count of the points is what is checked. */
    uint32_t ntest = g_data.test.n;
    if (g_data.test.n > 500)
        g_data.test.n = 500;
    outcome o = train(&c);
    g_data.test.n = ntest;
    CHECK(o.rc == 0);
    int clocks = (int)(g_data.train.n / 16);
    CHECK(clocks > 64 && o.res->npoints == clocks);
    for (int i = 1; i < o.res->npoints; i++)
        CHECK(o.res->points[i].samples > o.res->points[i - 1].samples);
    gt_run_result_free(o.res);
    CHECK(o.res->points == NULL && o.res->npoints == 0);
    free(o.res);
}

/* --ema: sync on one worker trains the same parameters with or without it (the run is
 * deterministic), so what differs is what is evaluated: with a decay near 0 the average is the
 * parameters (the same accuracy, loss within rounding), with 0.999 it is not (another loss), and
 * it has learned. */
static void test_ema_evaluated(void)
{
    double loss[3], acc[3];
    float decay[3] = {0, 1e-6f, 0.999f};
    for (int k = 0; k < 3; k++) {
        gt_config c;
        base_config(&c, "sync", 1, 32);
        c.ema = decay[k];
        outcome o = train(&c);
        CHECK_MSG(o.rc == 0, "--ema %g: %s", (double)decay[k], o.err);
        CHECK(o.res->npoints == 1);
        loss[k] = o.res->final_test_loss;
        acc[k] = o.res->final_test_acc;
        gt_run_result_free(o.res);
        free(o.res);
    }
    printf("sync --ema: off loss %.5f acc %.4f, 1e-6 loss %.5f acc %.4f, 0.999 loss %.5f acc %.4f\n",
           loss[0], acc[0], loss[1], acc[1], loss[2], acc[2]);
    CHECK_CLOSE(loss[1], loss[0], 1e-4);
    CHECK(fabs(acc[1] - acc[0]) <= 0.002);
    CHECK_MSG(fabs(loss[2] - loss[0]) > 1e-3, "--ema 0.999 evaluated loss %.6f, the parameters' "
              "%.6f", loss[2], loss[0]);
    CHECK(acc[2] > 0.5);
}

/* The CPU backend's evaluate with eval_pred: each sample of [lo, hi) gets its predicted class
 * (nothing outside the range is written), the predictions' hits are the evaluation's count, and
 * the loss is the one without predictions. */
static void test_eval_predictions(void)
{
    gt_err e = {{0}};
    gt_model m;
    CHECK(gt_model_build(g_model, 1, 28, 28, 10, &m, &e) == 0);
    gt_device *d;
    CHECK(gt_cpu_device_open(&d, &m, 32, 0, &e) == 0);
    gt_model_init_params(&m, d->params, 3);
    const gt_dataset *t = &g_data.test;
    uint32_t lo = 100, hi = t->n < 2300 ? t->n : 2300; /* past one evaluation chunk (1024) */
    int32_t *pred = malloc(t->n * sizeof *pred);
    for (uint32_t i = 0; i < t->n; i++)
        pred[i] = -7;
    gt_step_out plain = {0}, with = {0};
    CHECK(d->ops->load_params(d, &e) == 0);
    CHECK(d->ops->evaluate(d, t, lo, hi, &plain, &e) == 0);
    d->eval_pred = pred;
    CHECK(d->ops->evaluate(d, t, lo, hi, &with, &e) == 0);
    d->eval_pred = NULL;
    int hits = 0, bad = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        if (i < lo || i >= hi) {
            bad += pred[i] != -7;
            continue;
        }
        bad += pred[i] < 0 || pred[i] >= 10;
        hits += pred[i] == t->labels[i];
    }
    CHECK_MSG(bad == 0, "%d predictions out of range or outside [%u, %u)", bad, lo, hi);
    CHECK(hits == with.correct && with.correct == plain.correct && with.loss_sum == plain.loss_sum);
    gt_device_close(d);
    free(pred);
}

int main(void)
{
    const char *dir = gt_test_fmnist_dir();
    if (!dir) {
        printf("skipped: Fashion-MNIST not found\n");
        return GT_SKIP;
    }
    g_quick = getenv("GT_QUICK") && atoi(getenv("GT_QUICK"));
    if (g_quick)
        g_model = "conv:4:5 relu maxpool:4 fc:32 relu fc:10";
    gt_err e;
    if (gt_data_load(dir, g_quick ? 1200 : 6000, &g_data, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    test_nccl_modes_refused();
    test_sync_equivalence();
    test_ssp();
    test_ssp_fresh();
    test_every_mode_learns();
    test_faults();
    test_overlap();
    test_store_parts();
    test_clocked_parts();
    test_nan();
    test_every_evaluation_kept();
    test_eval_predictions();
    test_ema_evaluated();
    gt_data_free(&g_data);
    TEST_DONE();
}
