/* jobs.c - snapshots of the store that workers post for the calling thread, which evaluates them
 * on its own device and writes checkpoints, so evaluation costs the workers one copy. allreduce's
 * replicas evaluate shares of the test set themselves and post the result instead. */
#include "run.h"
#include "gputrain/names.h"
#include "gputrain/checkpoint.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A snapshot array of r->n floats: a spare one that a finished job left, else a new one. A
 * large model's array (resnet18: 45 MB) is past malloc's mmap threshold, so a new one arrives
 * unmapped and the copy into it faults its pages in one by one (~15 ms for 45 MB), which every
 * evaluation's snapshot paid under r->mu. Spares are swapped in and out atomically (any thread
 * may take or leave one); at most RUN_MAX_JOBS + 2 wait, freed at the run's end. */
static float *snap_alloc(run *r)
{
    for (int i = 0; i < RUN_MAX_JOBS + 2; i++) {
        float *p = atomic_exchange(&r->jq.spare[i], NULL);
        if (p)
            return p;
    }
    return malloc(r->n * sizeof(float));
}

static void snap_release(run *r, float *p)
{
    for (int i = 0; p && i < RUN_MAX_JOBS + 2; i++) {
        float *empty = NULL;
        if (atomic_compare_exchange_strong(&r->jq.spare[i], &empty, p))
            return;
    }
    free(p);
}

/* Frees a job's snapshot (the job itself is a value), keeping its large arrays as spares. */
void job_free(run *r, job *j)
{
    snap_release(r, j->params);
    snap_release(r, j->state[0]);
    snap_release(r, j->state[1]);
    snap_release(r, j->ema);
    free(j->buffers);
    j->params = j->state[0] = j->state[1] = j->ema = j->buffers = NULL;
}

/* At the run's end: the spares. */
void jobs_spares_free(run *r)
{
    for (int i = 0; i < RUN_MAX_JOBS + 2; i++)
        free(atomic_exchange(&r->jq.spare[i], NULL));
}

/* Posts a job to the calling thread; waits while the queue is full. Jobs enter the queue in the
 * order their snapshots were taken, whichever waiting worker wakes first (a ticket each): the
 * log's evaluations stay in step order. With --patience an evaluation also waits for the one
 * before it to be judged, so that a run told to stop takes no further evaluation (it is dropped;
 * a checkpoint due with it is still written). Caller holds r->mu. */
static void post_job_locked(run *r, job *j)
{
    int judged = r->cfg->patience > 0 && (j->kinds & JOB_EVAL);
    uint64_t ticket = r->jq.tickets++;
    while ((ticket != r->jq.served || r->jq.n == RUN_MAX_JOBS ||
            (judged && (r->jq.n > 0 || r->jq.handling))) && !r->failed)
        pthread_cond_wait(&r->cv, &r->mu);
    r->jq.served++;
    pthread_cond_broadcast(&r->cv); /* the next ticket's turn */
    if (judged && atomic_load(&r->jq.stop_early))
        j->kinds &= ~JOB_EVAL;
    if (r->failed || !j->kinds) {
        job_free(r, j);
        return;
    }
    r->jq.q[r->jq.n++] = *j;
    pthread_cond_broadcast(&r->cv);
}

/* A copy of the store for a job: parameters (unless the replicas evaluated an evaluation-only
 * job), optimizer state for checkpoints. Caller holds r->mu; the store's own stripe locks keep
 * each stripe consistent. */
int jobs_snapshot_locked(run *r, job *j, int kinds, uint32_t epoch, uint64_t step)
{
    memset(j, 0, sizeof *j);
    j->kinds = kinds;
    if (r->ops->snapshot_locked)
        r->ops->snapshot_locked(r, j);
    if (!(j->evaluated && kinds == JOB_EVAL)) {
        j->params = snap_alloc(r);
        if (!j->params)
            return -1;
        gt_ps_pull(&r->ps, j->params, NULL);
    }
    if (r->ps.ema && (j->params || (kinds & JOB_CKPT))) {
        j->ema = snap_alloc(r);
        if (!j->ema)
            return -1;
        gt_ps_pull_ema(&r->ps, j->ema);
    }
    if (r->ps.buffers && (j->params || (kinds & JOB_CKPT))) {
        j->buffers = malloc(r->m->nbuffers * sizeof(float));
        if (!j->buffers)
            return -1;
        gt_ps_pull_buffers(&r->ps, j->buffers);
    }
    if ((kinds & JOB_CKPT) || ((kinds & JOB_EVAL) && r->cfg->save_best[0])) { /* a best to save */
        for (int i = 0; i < r->ps.nstate; i++) {
            j->state[i] = snap_alloc(r);
            if (!j->state[i])
                return -1;
            gt_ps_pull_state(&r->ps, i, j->state[i]);
        }
    }
    j->epoch = epoch;
    j->step = step;
    j->samples = atomic_load(&r->stats.samples_total);
    j->updates = atomic_load(&r->ps.updates);
    j->wall = r->wall0 + gt_now() - r->t0; /* counts on from a resumed run's time */
    if (kinds & JOB_EVAL) {
        j->train_loss = r->stats.seen_acc ? r->stats.loss_acc / (double)r->stats.seen_acc : NAN;
        j->train_acc = r->stats.seen_acc ? (double)r->stats.correct_acc / (double)r->stats.seen_acc : NAN;
        r->stats.loss_acc = 0;
        r->stats.correct_acc = r->stats.seen_acc = 0;
    }
    return 0;
}

/* Only host 0 evaluates and checkpoints; the others just start their next statistics window at
 * the same point, since the hosts' windows are summed at epoch ends. */
void jobs_post_snapshot_locked(run *r, int kinds, uint32_t epoch, uint64_t step)
{
    job j;
    if (r->host != 0) {
        r->stats.loss_acc = 0;
        r->stats.correct_acc = r->stats.seen_acc = 0;
        return;
    }
    if (jobs_snapshot_locked(r, &j, kinds, epoch, step) != 0) {
        job_free(r, &j);
        run_fail_locked(r, "out of memory for a snapshot of the parameters");
        return;
    }
    post_job_locked(r, &j);
}

/* Mid-epoch evaluation and step checkpoints fall due by the run's step (ps.updates, optimizer
 * updates since the run began): --eval-every N at every multiple of N, --checkpoint-every Ns every
 * N steps. Caller holds r->mu. */
void jobs_post_due_locked(run *r, uint64_t step_in_epoch)
{
    int kinds = 0;
    uint64_t updates = atomic_load(&r->ps.updates);
    if (r->jq.next_eval && updates >= r->jq.next_eval) {
        if (step_in_epoch < r->ops->epoch_steps(r)) /* at the epoch's end its own evaluation follows */
            kinds |= JOB_EVAL;
        uint64_t every = (uint64_t)r->cfg->eval_every;
        r->jq.next_eval = (updates / every + 1) * every;
    }
    if (r->jq.next_ckpt && updates >= r->jq.next_ckpt) {
        kinds |= JOB_CKPT;
        while (r->jq.next_ckpt <= updates)
            r->jq.next_ckpt += (uint64_t)r->cfg->checkpoint_every;
    }
    if (kinds)
        jobs_post_snapshot_locked(r, kinds, r->epoch, step_in_epoch);
}

/* Loss and accuracy of a snapshot on the test set and, with --val-split, the held-out samples,
 * on the calling thread's own device: of its moving average where it has one (--ema), with the
 * store's running statistics. */
static int evaluate_snapshot(run *r, const job *j, gt_eval_point *p, gt_err *e)
{
    gt_device *d = r->evaluator;
    const gt_dataset *sets[2] = {&r->data->test, &r->data->val};
    double *out[2][2] = {{&p->test_loss, &p->test_acc}, {&p->val_loss, &p->val_acc}};
    memcpy(d->params, j->ema ? j->ema : j->params, r->n * sizeof(float));
    if (j->buffers)
        memcpy(d->buffers, j->buffers, r->m->nbuffers * sizeof(float));
    if (d->ops->load_params(d, e) != 0)
        return -1;
    for (int k = 0; k < 2; k++) {
        gt_step_out o = {0};
        if (sets[k]->n == 0)
            continue;
        if (d->ops->evaluate(d, sets[k], 0, sets[k]->n, &o, e) != 0)
            return -1;
        *out[k][0] = o.loss_sum / sets[k]->n;
        *out[k][1] = (double)o.correct / sets[k]->n;
    }
    return 0;
}

/* Which accuracy --save-best and --patience watch: validation's with --val-split, else test's. */
const char *jobs_best_of(const run *r) { return r->data->val.n ? "val" : "test"; }

/* Writes a snapshot with optimizer state to path (--checkpoint, or --save-best's file, kept
 * alone), with what resuming it needs: the run's best evaluation so far (res) among it. */
static int jobs_write_checkpoint_to(run *r, const job *j, const gt_run_result *res,
                                    const char *path, int keep, gt_err *e)
{
    const gt_config *cfg = r->cfg;
    gt_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.model_spec, sizeof meta.model_spec, "%s", r->m->spec);
    snprintf(meta.model, sizeof meta.model, "%s", r->m->name);
    snprintf(meta.mode, sizeof meta.mode, "%s", r->ops->name);
    snprintf(meta.optimizer, sizeof meta.optimizer, "%s", gt_optimizer_name(cfg->optim.kind));
    meta.in_c = r->m->in_c;
    meta.in_h = r->m->in_h;
    meta.in_w = r->m->in_w;
    meta.nclasses = r->m->nclasses;
    meta.epoch = j->epoch;
    meta.step = j->step;
    meta.samples = j->samples;
    meta.updates = j->updates;
    meta.seed = cfg->seed;
    meta.data_fingerprint = r->data->fingerprint;
    meta.resized = cfg->image_size[0] > 0;
    /* The data's class names, borrowed for the save (a data set has at most GT_CKPT_MAX_CLASSES). */
    meta.nnames = r->data->class_names ? r->m->nclasses : 0;
    meta.class_names = r->data->class_names;
    meta.wall_ms = (uint64_t)llround(j->wall * 1e3);
    meta.batch = (uint64_t)r->batch;
    meta.workers = (uint64_t)r->Wg;
    meta.epoch_pos = j->step * gt_ckpt_step_samples(r->ops->clocked,
                                                    cfg->balance == GT_BALANCE_STATIC, r->W, r->H,
                                                    r->batch);
    meta.train_samples = r->ntrain;
    meta.lr = cfg->optim.lr;
    meta.momentum = cfg->optim.momentum;
    meta.weight_decay = cfg->optim.weight_decay;
    meta.best_acc = res->best_acc;
    meta.best_step = res->best_step;
    meta.since_best = (uint64_t)r->jq.since_best;
    snprintf(meta.best_of, sizeof meta.best_of, "%s", jobs_best_of(r));
    snprintf(meta.run_options, sizeof meta.run_options, "%s", cfg->run_options);
    float *const state[2] = {j->state[0], j->state[1]};
    if (gt_ckpt_save_ema(path, r->m, j->params, j->ema, j->buffers, state, r->ps.nstate, &meta,
                         keep, e) != 0)
        return -1;
    report_checkpoint(r, path, j->epoch, j->updates, j->step, j->samples, j->wall);
    return 0;
}

/* Writes a snapshot with optimizer state as --checkpoint. */
int jobs_write_checkpoint(run *r, const job *j, gt_run_result *res, gt_err *e)
{
    if (jobs_write_checkpoint_to(r, j, res, r->cfg->checkpoint, r->cfg->keep, e) != 0)
        return -1;
    snprintf(res->checkpoint_written, sizeof res->checkpoint_written, "%s", r->cfg->checkpoint);
    return 0;
}

/* After an evaluation: the monitored accuracy (validation's with --val-split, else test's)
 * against the best so far; --save-best writes the snapshot when it improves, --patience stops
 * the run after that many evaluations in a row without. */
static int jobs_monitor(run *r, const job *j, const gt_eval_point *p, gt_run_result *res,
                        gt_err *e)
{
    const gt_config *cfg = r->cfg;
    double acc = r->data->val.n ? p->val_acc : p->test_acc;
    if (acc > res->best_acc) {
        res->best_acc = acc;
        res->best_step = p->step;
        r->jq.since_best = 0;
        if (cfg->save_best[0] && j->params) {
            if (jobs_write_checkpoint_to(r, j, res, cfg->save_best, 0, e) != 0)
                return -1;
            snprintf(res->best_written, sizeof res->best_written, "%s", cfg->save_best);
        }
        return 0;
    }
    if (++r->jq.since_best >= cfg->patience && cfg->patience > 0 &&
        !atomic_exchange(&r->jq.stop_early, 1)) {
        res->stopped_early = r->jq.since_best;
        report_early_stop(r, res);
    }
    return 0;
}

/* Keeps every evaluation: the array grows as points come. */
static int result_add_point(gt_run_result *res, const gt_eval_point *p, gt_err *e)
{
    if (res->npoints == res->cap_points) {
        int cap = res->cap_points ? 2 * res->cap_points : 64;
        gt_eval_point *grown = realloc(res->points, (size_t)cap * sizeof *grown);
        if (!grown)
            return gt_fail(e, "out of memory for %d evaluation points", cap);
        res->points = grown;
        res->cap_points = cap;
    }
    res->points[res->npoints++] = *p;
    return 0;
}

/* Evaluates and/or writes one job's snapshot, then frees it. */
int jobs_handle(run *r, job *j, gt_run_result *res, gt_err *e)
{
    int rc = 0;
    if (j->kinds & JOB_EVAL) {
        gt_eval_point p = {.epoch = j->step ? j->epoch + 1 : j->epoch,
                           .step = j->updates,
                           .samples = j->samples,
                           .wall_s = j->wall,
                           .train_loss = j->train_loss,
                           .train_acc = j->train_acc,
                           .val_loss = NAN,
                           .val_acc = NAN};
        if (j->evaluated) {
            p.test_loss = j->test_loss;
            p.test_acc = j->test_acc;
        } else {
            rc = evaluate_snapshot(r, j, &p, e);
        }
        if (rc == 0)
            rc = result_add_point(res, &p, e);
        if (rc == 0) {
            res->final_test_acc = p.test_acc;
            res->final_test_loss = p.test_loss;
            report_point(r, &p);
            rc = jobs_monitor(r, j, &p, res, e);
        }
    }
    if (rc == 0 && (j->kinds & JOB_CKPT))
        rc = jobs_write_checkpoint(r, j, res, e);
    job_free(r, j);
    return rc;
}
