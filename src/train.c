/* train.c - a training run: one pthread per device around one parameter store.
 *
 * A minibatch flows one way: the epoch's permutation -> a worker's batch -> its device computes
 * the gradient -> the store applies it -> workers pull the new parameters.
 *
 * This file sets a run up, starts its workers, lets the calling thread supervise them
 * (supervisor.c) and tears the run down. The modes are the rows of one table below; each lives in
 * its own file behind a gt_mode_ops (run.h), so a new mode is one file and one row.
 *
 * Across hosts (one process per host under mpirun, cluster.h) each host keeps its workers and
 * store. A clock is cut into the shares of every host's workers; sync sums each clock's gradient
 * over the hosts, so every store takes the same update; hogwild, ssp and local stay asynchronous
 * inside a host and average the hosts' stores every --sync-every steps and at epoch ends. Signals
 * are acted on only where the hosts agree, so that all stop at the same clock. Only host 0
 * evaluates, logs and writes checkpoints. */
#include "run.h"
#include "gputrain/cluster.h"
#include "gputrain/names.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Every mode's behaviour, by its gt_mode value; its name and properties are its row in the
 * names table (names.c). */
static const gt_mode_ops *const modes[] = {
    [GT_MODE_HOGWILD] = &gt_mode_hogwild,
    [GT_MODE_SYNC] = &gt_mode_sync,
    [GT_MODE_SSP] = &gt_mode_ssp,
    [GT_MODE_LOCAL] = &gt_mode_local,
    [GT_MODE_ALLREDUCE] = &gt_mode_allreduce,
};

/* Whether the run's steps take their update on the device (1) or through the store (0). On one
 * host whose workers are distinct GPUs that can update their own parameters (step_queue,
 * reduce_update), the allreduce mode's step computes what other modes compute through the store:
 * sync's sum of every worker's gradient in worker order and one update (with the GPUs' peer
 * exchange, no pull or push in the step), local's replicas stepping apart and averaged between
 * the GPUs, and with one worker every mode's serial SGD (but --overlap's). The store is brought
 * up to date wherever it is read (evaluations, checkpoints, the guard's good copies, the run's
 * end). What is given up: sync and local through the store go on without a GPU that fails; on
 * the device a failed GPU ends the run. --store-step keeps the
 * store in the step (for that, and to measure it). */
static int run_device_step(const gt_config *cfg, gt_device **devices, int ndevices)
{
    if (cfg->mode == GT_MODE_ALLREDUCE)
        return 1; /* its only step */
    if (cfg->store_step)
        return 0;
    /* One worker: hogwild, ssp (nobody to run ahead of) and local (its average is itself) are
     * serial SGD too; --overlap's step runs beside its predecessor's, which is not. local on
     * several GPUs: each replica's step and update on its GPU, the averages between the GPUs
     * (mode_allreduce.c). */
    int same = cfg->mode == GT_MODE_SYNC || cfg->mode == GT_MODE_LOCAL ||
               (ndevices == 1 && !cfg->overlap);
    if (!same || gt_cluster_size() != 1 || cfg->on_nan == GT_NAN_SKIP)
        return 0;
    for (int i = 0; i < ndevices; i++) {
        if (!devices[i]->ops->step_queue || !devices[i]->ops->reduce_update ||
            (cfg->ema > 0 && !devices[i]->ops->ema_update))
            return 0;
        for (int j = 0; j < i; j++)
            if (devices[j]->ordinal == devices[i]->ordinal)
                return 0; /* two workers on one GPU: the exchange takes one rank a GPU */
    }
    return 1;
}

/* The run executes mode exec's operations under the name of the mode asked for (row); a clocked
 * mode runs on the clocked core where it names nothing else, and gets its own state, zeroed. */
static int run_set_ops(run *r, gt_mode exec, const gt_mode_row *row, gt_err *e)
{
    gt_mode_ops *o = &r->mode_ops;
    *o = *modes[exec];
    o->name = row->head.name;
    o->clocked = gt_mode_row_of(exec)->clocked;
    if (o->clocked) {
        o->epoch = o->epoch ? o->epoch : clocked_epoch;
        if (!o->epoch_complete_locked)
            o->epoch_complete_locked = clocked_epoch_complete_locked;
        o->epoch_steps = o->epoch_steps ? o->epoch_steps : clocked_epoch_steps;
        o->stop_step = o->stop_step ? o->stop_step : clocked_stop_step;
        o->epoch_reset = o->epoch_reset ? o->epoch_reset : clocked_epoch_reset;
    }
    r->ops = o;
    free(r->own);
    r->own = calloc(1, o->run_state ? o->run_state : 1);
    return r->own ? 0 : gt_fail(e, "out of memory");
}

/* The run's shape: workers, hosts and the checks that need nothing allocated. */
static int run_shape(run *r, const gt_config *cfg, gt_device **devices, int ndevices,
                     const gt_start *start, gt_err *e)
{
    const gt_mode_row *row = gt_mode_row_of(cfg->mode);
    if (!row || (size_t)cfg->mode >= sizeof modes / sizeof *modes || !modes[cfg->mode])
        return gt_fail(e, "--mode: unknown mode %d", (int)cfg->mode);
    if (ndevices < 1 || ndevices > GT_MAX_WORKERS)
        return gt_fail(e, "--gpus: %d workers (1..%d supported)", ndevices, GT_MAX_WORKERS);
    r->device_step = run_device_step(cfg, devices, ndevices);
    if (run_set_ops(r, r->device_step ? GT_MODE_ALLREDUCE : cfg->mode, row, e) != 0)
        return -1;
    r->H = gt_cluster_size();
    r->host = gt_cluster_rank();
    r->Wg = r->H * r->W;
    r->share0 = r->host * r->W;
    if (hosts_check_same(r, start, e) != 0)
        return -1;
    if (r->H > 1 && cfg->patience > 0) /* host 0 evaluates: the others would not know to stop */
        return gt_fail(e, "--patience %d: not under mpirun (several hosts) yet; run one host or "
                          "leave --patience out", cfg->patience);
    if (r->ops->check && r->ops->check(r, devices, e) != 0) {
        if (!r->device_step || cfg->mode == GT_MODE_ALLREDUCE)
            return -1;
        /* No exchange between these GPUs (peer access and NCCL both failed): the store's path. */
        r->device_step = 0;
        *e = (gt_err){{0}};
        if (run_set_ops(r, cfg->mode, row, e) != 0 ||
            (r->ops->check && r->ops->check(r, devices, e) != 0))
            return -1;
    }
    uint64_t per_clock = (uint64_t)r->Wg * (uint64_t)r->batch;
    if (r->ops->clocked && per_clock > r->ntrain)
        return gt_fail(e, "--batch: %d x %d workers%s is more than the %u training samples", r->batch,
                       r->Wg, r->H > 1 ? " of all hosts" : "", r->ntrain);
    r->clk.clocks = (uint32_t)(r->ntrain / per_clock);
    return 0;
}

/* The store, the permutation, the workers and the host-averaging buffers. */
static int run_alloc(run *r, gt_device **devices, const gt_start *start, gt_err *e)
{
    const gt_config *cfg = r->cfg;
    if (gt_ps_init(&r->ps, r->n, cfg->stripes, &cfg->optim, e) != 0)
        return -1;
    r->ps.threads = cfg->store_threads;
    memcpy(r->ps.params, start->params, r->n * sizeof(float));
    for (int i = 0; i < r->ps.nstate && start->state && i < start->nstate; i++)
        memcpy(r->ps.state[i], start->state[i], r->n * sizeof(float));
    if (gt_ps_init_buffers(&r->ps, r->m, e) != 0)
        return -1;
    gt_ps_store_buffers(&r->ps, start->buffers);
    if (cfg->ema > 0 && gt_ps_init_ema(&r->ps, cfg->ema, start->ema, e) != 0)
        return -1;
    r->perm = gt_alloc((size_t)r->ntrain * sizeof(uint32_t));
    r->workers = calloc((size_t)r->W, sizeof(worker));
    if (!r->perm || !r->workers)
        return gt_fail(e, "out of memory for %u training samples", r->ntrain);
    if (r->H > 1 && r->ops->hosts_rounds) {
        r->hosts.xsnap = gt_alloc(r->n * sizeof(float));
        r->hosts.xavg = gt_alloc(r->n * sizeof(float));
        if (!r->hosts.xsnap || !r->hosts.xavg)
            return gt_fail(e, "out of memory for averaging %zu parameters across hosts", r->n);
    }
    for (int i = 0; i < r->W; i++) {
        worker *w = &r->workers[i];
        w->run = r;
        w->index = i;
        w->dev = devices[i];
        atomic_init(&w->alive, 1);
        w->ver = calloc((size_t)r->ps.nranges, sizeof(uint64_t));
        w->own = calloc(1, r->ops->worker_state ? r->ops->worker_state : 1);
        if (!w->ver || !w->own)
            return gt_fail(e, "out of memory");
    }
    r->nlive = r->W;
    return 0;
}

/* Where the run starts: a resumed run's epoch, counters and step in the epoch; when the first
 * evaluation and step checkpoint fall due. A step checkpoint at an epoch's last step resumes at
 * the next epoch's start, as an interrupted run's does. Returns 1 when the resumed step lies past
 * this run's epoch (a checkpoint of another --batch, --gpus or host count: the file does not say
 * which samples of the epoch its steps covered), so the epoch restarts from its first batch. */
static int run_position(run *r, const gt_start *start)
{
    const gt_config *cfg = r->cfg;
    int restarts = 0;
    if (start->resumed) {
        r->epoch = start->resumed->epoch;
        atomic_store(&r->stats.samples_total, start->resumed->samples);
        atomic_store(&r->ps.updates, start->resumed->updates);
        r->start_clock = start->resumed->step;
        r->wall0 = (double)start->resumed->wall_ms * 1e-3;
        uint64_t steps = r->ops->epoch_steps(r);
        if (r->start_clock == steps)
            r->epoch++;
        restarts = r->start_clock > steps;
        if (r->start_clock >= steps)
            r->start_clock = 0;
    }
    r->samples0 = atomic_load(&r->stats.samples_total);
    r->clk.applied = r->start_clock;
    uint64_t updates = atomic_load(&r->ps.updates);
    r->clk.updates0 = updates - r->start_clock; /* wraps where fewer steps cover more clocks */
    if (cfg->eval_every > 0) /* at multiples of N of the run's step, a resumed run's included */
        r->jq.next_eval = (updates / (uint64_t)cfg->eval_every + 1) * (uint64_t)cfg->eval_every;
    if (cfg->checkpoint[0] && cfg->checkpoint_every_steps && cfg->checkpoint_every > 0)
        r->jq.next_ckpt = updates + (uint64_t)cfg->checkpoint_every;
    return restarts;
}

/* Sets the run up; on failure run_free undoes what was done. */
static int run_init(run *r, const gt_config *cfg, const gt_model *m, const gt_data *data,
                    gt_device **devices, int ndevices, gt_device *evaluator, const gt_start *start,
                    gt_err *e)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->m = m;
    r->data = data;
    r->W = ndevices;
    r->n = m->nparams;
    r->ntrain = data->train.n;
    r->batch = cfg->batch;
    r->evaluator = evaluator;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->rep.log_mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (run_shape(r, cfg, devices, ndevices, start, e) != 0 ||
        run_alloc(r, devices, start, e) != 0)
        return -1;
    int restarts = run_position(r, start);
    if (r->ops->init(r, devices, start, e) != 0)
        return -1;
    gt_permutation(r->perm, r->ntrain, cfg->seed, r->epoch);
    if (report_open(r, start, e) != 0)
        return -1;
    if (restarts)
        report_resume_restart(r, start->resumed->step, r->ops->epoch_steps(r));
    report_recipe(r, start->recipe);
    report_device_step(r);
    if (r->cfg->store_grad == GT_STORE_GRAD_BF16 && !r->store_grad_bf16)
        report_note(r, "--store-grad bf16 changes nothing in this run: only hogwild's store step "
                       "in parts takes the gradient in bf16, and here the pushes are whole or the "
                       "GPU takes the device step (--store-parts, --store-step)");
    return guard_init(r, e);
}

/* Frees what run_init made; the mode gives the devices their own buffers back. */
static void run_free(run *r)
{
    if (r->ops && r->ops->free && r->own)
        r->ops->free(r);
    for (int i = 0; r->workers && i < r->W; i++) {
        free(r->workers[i].ver);
        free(r->workers[i].own);
    }
    free(r->own);
    free(r->workers);
    gt_free(r->perm);
    gt_host_free(r->clk.slots);
    gt_free(r->hosts.xsnap);
    gt_free(r->hosts.xavg);
    free(r->clk.claimed);
    free(r->clk.deposited);
    free(r->clk.slot_read_clock);
    free(r->clk.stat_slots);
    free(r->clk.stats_in);
    for (int i = 0; i < r->jq.n; i++)
        job_free(r, &r->jq.q[i]);
    jobs_spares_free(r);
    guard_free(r);
    gt_ps_free(&r->ps);
    if (r->rep.log)
        fclose(r->rep.log);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->rep.log_mu);
    pthread_cond_destroy(&r->cv);
}

/* The result's figures from the workers' and the store's counters. */
static void fill_result(run *r, gt_run_result *res, double wall)
{
    res->nworkers = r->W;
    res->nhosts = r->H;
    res->wall_s = wall;
    res->samples = atomic_load(&r->stats.samples_total);
    res->resumed_samples = r->samples0;
    res->resumed_wall_s = r->wall0;
    double busy = 0;
    for (int i = 0; i < r->W; i++) {
        worker *w = &r->workers[i];
        gt_worker_stats *s = &res->workers[i];
        s->steps = atomic_load(&w->steps);
        s->samples = atomic_load(&w->samples);
        s->busy_s = w->t_last > w->t_first ? w->t_last - w->t_first : 0;
        s->wait_s = w->wait_s;
        s->pull_s = w->pull_s;
        s->device_s = w->device_s;
        s->push_s = w->push_s;
        s->failed = !atomic_load(&w->alive);
        snprintf(s->error, sizeof s->error, "%s", w->error);
        busy += wall;
    }
    uint64_t count = atomic_load(&r->ps.stale_count);
    res->stale_max = atomic_load(&r->ps.stale_max);
    res->store_parts = r->store_parts;
    res->store_part_first = store_parts_first(r);
    res->store_grad_bf16 = r->store_grad_bf16;
    res->stale_mean = count ? (double)atomic_load(&r->ps.stale_sum) / (double)count : 0;
    res->stale_p99 = (double)gt_ps_stale_percentile(&r->ps, 99, &res->stale_p99_capped);
    res->lock_wait_share = busy > 0 ? (double)atomic_load(&r->ps.lock_wait_ns) * 1e-9 / busy : 0;
    res->barrier_wait_share = busy > 0 ? r->bar.wait_s / busy : 0;
    res->clock_spread_max = r->clk.spread_max;
    res->skipped_nonfinite = r->stats.skipped;
}

_Static_assert(GT_MAX_WORKERS < 100, "run_error leaves room for a two-digit worker count");

/* The run's error: the first fatal one, or where all failed (but not as the guard's stop made
 * them: failed_first) every worker's, as many as fit in one message and then how many more
 * (each worker's own line was reported when it left). */
static void run_error(run *r, gt_err *e)
{
    if (r->nlive > 0 || r->failed_first) {
        gt_fail(e, "%s", r->error);
        return;
    }
    char buf[GT_ERRLEN] = "every worker failed:", one[160];
    size_t len = strlen(buf);
    for (int i = 0; i < r->W; i++) {
        int n = snprintf(one, sizeof one, " worker %d (%.40s): %.80s;", r->share0 + i,
                         r->workers[i].dev->name, r->workers[i].error);
        /* but the last, leave room for " and N more" (N <= GT_MAX_WORKERS, two digits) */
        size_t room = sizeof buf - len - (i + 1 < r->W ? sizeof " and 64 more" : 1);
        if ((size_t)n > room) {
            snprintf(buf + len, sizeof buf - len, " and %d more", r->W - i);
            break;
        }
        memcpy(buf + len, one, (size_t)n + 1);
        len += (size_t)n;
    }
    gt_fail(e, "%s", buf);
}

/* Interrupted: the workers have stopped at step boundaries; save where the run stands. */
static int save_interrupted(run *r, gt_run_result *res, gt_err *e)
{
    job j;
    uint64_t step = r->ops->stop_step(r);
    /* Across hosts, host 0 may have finished an epoch that another host stopped short of, so
     * that no host ended it: resume at the next one. */
    uint32_t epoch = r->epoch;
    if (step >= r->ops->epoch_steps(r)) {
        epoch++;
        step = 0;
    }
    pthread_mutex_lock(&r->mu);
    int rc = jobs_snapshot_locked(r, &j, JOB_CKPT, epoch, step);
    pthread_mutex_unlock(&r->mu);
    if (rc != 0 || jobs_write_checkpoint(r, &j, res, e) != 0)
        rc = -1;
    job_free(r, &j);
    return rc;
}

/* Starts one thread per worker; a worker that cannot start fails the run and counts as done. */
static int start_workers(run *r)
{
    for (int i = 0; i < r->W; i++) {
        if (pthread_create(&r->workers[i].thread, NULL, worker_main, &r->workers[i]) != 0) {
            run_fail(r, "could not start a worker thread");
            pthread_mutex_lock(&r->mu);
            r->done += r->W - i;
            pthread_mutex_unlock(&r->mu);
            return i;
        }
    }
    return r->W;
}

int gt_train_run(const gt_config *cfg, const gt_model *model, const gt_data *data,
                 gt_device **devices, int ndevices, gt_device *evaluator, const gt_start *start,
                 gt_run_result *res, gt_err *e)
{
    memset(res, 0, sizeof *res);
    res->best_acc = -1;
    run *r = calloc(1, sizeof *r);
    if (!r)
        return gt_fail(e, "out of memory");
    double t_init = gt_now();
    if (run_init(r, cfg, model, data, devices, ndevices, evaluator, start, e) != 0) {
        run_free(r);
        free(r);
        return -1;
    }
    /* A resumed run goes on from its best evaluation (--save-best's file is replaced only by a
     * better one, --patience counts on), where it watched the same accuracy. */
    const gt_ckpt_meta *rm = start->resumed;
    if (rm && rm->best_acc >= 0 && strcmp(rm->best_of, jobs_best_of(r)) == 0) {
        res->best_acc = rm->best_acc;
        res->best_step = rm->best_step;
        r->jq.since_best = rm->since_best > INT_MAX ? INT_MAX : (int)rm->since_best;
    }
    r->t0 = gt_now();
    res->startup_s = start->launched > 0 ? r->t0 - start->launched : 0;
    res->startup_run_s = r->t0 - t_init;
    res->startup_data_s = start->data_s;
    res->startup_devices_s = start->devices_s;
    int started = start_workers(r);
    int rc = supervise(r, res, e);
    for (int i = 0; i < started; i++)
        pthread_join(r->workers[i].thread, NULL);
    /* Training time: until the last worker finished, not the final evaluation after it. */
    double wall = (r->t_done > 0 ? r->t_done : gt_now()) - r->t0;
    fill_result(r, res, wall);
    res->samples_per_s = wall > 0 ? (double)(res->samples - res->resumed_samples) / wall : 0;
    res->interrupted = r->H > 1 ? r->hosts.stop_sig : gt_train_stop_signal();
    if (rc == 0 && r->failed) {
        rc = -1;
        run_error(r, e);
    }
    if (rc == 0 && (res->interrupted || res->stopped_early) && cfg->checkpoint[0] && r->host == 0)
        rc = save_interrupted(r, res, e);
    if (rc == 0 && !res->interrupted)
        rc = guard_final(r, res, e);
    rc = report_close(r, res, rc, e);
    run_free(r);
    free(r);
    return rc;
}

void gt_run_result_free(gt_run_result *res)
{
    if (!res)
        return;
    free(res->points);
    res->points = NULL;
    res->npoints = res->cap_points = 0;
}
