/* report.c - the only writer of terminal lines and of the JSONL log.
 *
 * The log (host 0 only) opens with a config record (every setting, the build, the data and the
 * devices), then carries eval and step records, event records (a worker failed, a checkpoint was
 * written, a signal came, and whatever report_event is given), and ends with the summary and one
 * worker record per worker. The terminal gets the evaluation lines (stdout), warnings and the
 * progress bar (stderr); the bar's line is ended or cleared before any other line, so no line is
 * ever printed onto it. */
#include "gputrain/conv_cache.h"
#include "run.h"
#include "gputrain/json.h"
#include "gputrain/names.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef GT_VERSION
#define GT_VERSION "dev"
#endif
#ifdef GT_HAVE_CUDA
#define REPORT_CUDA "true"
#else
#define REPORT_CUDA "false"
#endif
#ifdef GT_HAVE_NCCL
#define REPORT_NCCL "true"
#else
#define REPORT_NCCL "false"
#endif
#ifdef GT_HAVE_MPI
#define REPORT_MPI "true"
#else
#define REPORT_MPI "false"
#endif

/* ---- the terminal ------------------------------------------------------------------------------ */

/* Takes the terminal for a line: the bar's line, if open, is cleared on a terminal and ended
 * elsewhere (a file or pipe keeps every redraw, so it must not run into the next line). */
static void term_begin(run *r)
{
    pthread_mutex_lock(&r->rep.log_mu);
    if (r->rep.bar_drawn) {
        fputs(isatty(2) ? "\r\033[K" : "\n", stderr);
        fflush(stderr);
        r->rep.bar_drawn = 0;
    }
}

static void term_end(run *r)
{
    fflush(stdout);
    fflush(stderr);
    pthread_mutex_unlock(&r->rep.log_mu);
}

/* ---- JSON text ---------------------------------------------------------------------------------- */

/* s as a JSON string: quotes, backslashes and control bytes escaped, invalid UTF-8 as U+FFFD. */
static void put_json_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t left = strlen(s);
    fputc('"', f);
    while (left > 0) {
        size_t n = 1;
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else if (*p < 0x80)
            fputc(*p, f);
        else if ((n = gt_utf8_len(p, left)) > 0)
            fwrite(p, 1, n, f);
        else
            fputs("\\ufffd", f), n = 1;
        p += n;
        left -= n;
    }
    fputc('"', f);
}

/* ,"key":"value" */
static void put_field_str(FILE *f, const char *key, const char *value)
{
    fprintf(f, ",\"%s\":", key);
    put_json_str(f, value);
}

/* ,"key":value in fmt, or null where value is NaN or infinite (JSON has no such numbers): every
 * floating-point field of the log goes through here. */
static void put_field_num(FILE *f, const char *key, const char *fmt, double value)
{
    fprintf(f, ",\"%s\":", key);
    if (isfinite(value))
        fprintf(f, fmt, value);
    else
        fputs("null", f);
}

/* Training wall time as logs count it: from the start of the first run a resumed one goes on. */
static double report_wall_s(const run *r)
{
    return r->wall0 + (r->t0 > 0 ? gt_now() - r->t0 : 0);
}

/* ---- the config record --------------------------------------------------------------------------- */

/* Version, build, mode, devices, model and data. */
static void config_run(run *r, FILE *f, const gt_start *start)
{
    const gt_config *c = r->cfg;
    fprintf(f, "{\"type\":\"config\",\"version\":\"%s\",\"cuda\":%s,\"nccl\":%s,\"mpi\":%s",
            GT_VERSION, REPORT_CUDA, REPORT_NCCL, REPORT_MPI);
    put_field_str(f, "revision", GT_REVISION);
    put_field_str(f, "argv", start && start->command ? start->command : "");
    char host[256] = "", when[32] = "";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm utc;
    if (gmtime_r(&now, &utc))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
    put_field_str(f, "host", host);
    put_field_str(f, "started", when);
    put_field_str(f, "mode", r->ops->name);
    put_field_str(f, "step", r->device_step ? "device" : "store");
    fprintf(f, ",\"workers\":%d,\"hosts\":%d,\"devices\":[", r->Wg, r->H);
    for (int i = 0; i < r->W; i++) {
        if (i)
            fputc(',', f);
        put_json_str(f, r->workers[i].dev->name);
    }
    fputc(']', f);
    put_field_str(f, "evaluator", r->evaluator ? r->evaluator->name : "");
    put_field_str(f, "model", r->m->name);
    put_field_str(f, "model_spec", r->m->spec);
    fprintf(f, ",\"parameters\":%zu,\"input\":\"%dx%dx%d\",\"nclasses\":%d", r->n, r->m->in_c,
            r->m->in_h, r->m->in_w, r->m->nclasses);
    put_field_str(f, "data", r->data->dir);
    fprintf(f, ",\"data_fingerprint\":\"%08x\",\"train_samples\":%u,\"test_samples\":%u,"
               "\"val_samples\":%u", r->data->fingerprint, r->ntrain, r->data->test.n, r->data->val.n);
    fprintf(f, ",\"batch\":%d,\"epochs\":%d,\"seed\":%llu,\"eval_every\":%d", c->batch, c->epochs,
            (unsigned long long)c->seed, c->eval_every);
    char aug[32], norm[512];
    gt_augment_format(&c->augment, aug, sizeof aug);
    put_field_str(f, "augment", aug);
    gt_norm_format(&r->m->norm, r->m->in_c, norm, sizeof norm);
    put_field_str(f, "normalize", norm);
    fprintf(f, ",\"val_split\":%g,\"patience\":%d", c->val_split, c->patience);
    put_field_str(f, "save_best", c->save_best);
}

/* The optimizer, its schedule and the mode's own settings. */
static void config_training(run *r, FILE *f)
{
    const gt_config *c = r->cfg;
    const gt_optim_cfg *o = &c->optim;
    put_field_str(f, "optimizer", gt_optimizer_name(o->kind));
    put_field_num(f, "lr", "%g", o->lr);
    put_field_num(f, "momentum", "%g", o->momentum);
    fprintf(f, ",\"nesterov\":%s", o->nesterov ? "true" : "false");
    put_field_num(f, "weight_decay", "%g", o->weight_decay);
    put_field_num(f, "beta1", "%g", o->beta1);
    put_field_num(f, "beta2", "%g", o->beta2);
    put_field_num(f, "eps", "%g", o->eps);
    put_field_str(f, "schedule", gt_schedule_name(o->schedule));
    fprintf(f, ",\"warmup\":%g,\"step_epochs\":%g,\"gamma\":%g", o->warmup_epochs, o->step_epochs,
            o->gamma);
    fprintf(f, ",\"ema\":%g", c->ema); /* evaluations of the moving average (ps.h); 0 = off */
    fprintf(f, ",\"stripes\":%d,\"staleness\":%d,\"sync_every\":%d", r->ps.nstripes,
            c->staleness, c->sync_every); /* stripes: as chosen where --stripes left it open */
    fprintf(f, ",\"store_parts\":%d,\"store_part_first\":%zu", r->store_parts,
            store_parts_first(r)); /* as chosen: 0 where pushes are whole */
    put_field_str(f, "store_grad", r->store_grad_bf16 ? "bf16" : "fp32"); /* as chosen */
    put_field_str(f, "balance", gt_name(GT_NAMES_BALANCE, (int)c->balance));
    fprintf(f, ",\"overlap\":%s,\"overlap_predict\":%s,\"tf32\":%s",
            c->overlap ? "true" : "false", c->overlap_predict ? "true" : "false",
            c->precision == GT_PRECISION_TF32 ? "true" : "false");
    put_field_str(f, "precision", gt_name(GT_NAMES_PRECISION, c->precision));
    put_field_str(f, "deterministic", gt_config_deterministic(c) ? "on" : "off"); /* as applied */
    put_field_str(f, "on_nan", (c->given & GT_GIVEN_ON_NAN) ? gt_name(GT_NAMES_ON_NAN, (int)c->on_nan)
                                                             : "guard");
    put_field_str(f, "on_diverge", gt_name(GT_NAMES_ON_DIVERGE, (int)c->on_diverge));
    fprintf(f, ",\"literal\":%s", c->literal ? "true" : "false");
}

/* Checkpoints, faults, the log itself, and where this run starts. */
static void config_files(run *r, FILE *f)
{
    const gt_config *c = r->cfg;
    put_field_str(f, "checkpoint", c->checkpoint);
    fprintf(f, ",\"checkpoint_every\":%d", c->checkpoint_every);
    put_field_str(f, "checkpoint_unit", c->checkpoint_every_steps ? "steps" : "epochs");
    fprintf(f, ",\"keep\":%d", c->keep);
    put_field_str(f, "resume", c->resume);
    put_field_str(f, "init", c->init);
    fprintf(f, ",\"allow_nonfinite\":%s,\"log_steps\":%s", c->allow_nonfinite ? "true" : "false",
            c->log_steps ? "true" : "false");
    if (c->inject_worker >= 0)
        fprintf(f, ",\"inject_fault\":\"%d:%d\"", c->inject_worker, c->inject_step);
    else
        fputs(",\"inject_fault\":null", f);
    fprintf(f, ",\"stall_timeout\":%g,\"host_timeout\":%g", c->stall_timeout, c->host_timeout);
    fprintf(f, ",\"start_epoch\":%u,\"start_step\":%llu,\"start_epoch_step\":%llu,\"start_samples\":%llu,"
               "\"start_wall_s\":%.4f}\n", r->epoch, (unsigned long long)atomic_load(&r->ps.updates),
            (unsigned long long)r->start_clock, (unsigned long long)r->samples0, r->wall0);
}

/* Opens path for the log without blocking: a FIFO with no reader is refused (ENXIO) instead of
 * hanging the run; once open, writes block as usual (a slow reader slows the run, never drops
 * records). */
static FILE *log_open(const char *path, int append, gt_err *e)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | O_NOCTTY |
                        (append ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0 && errno == ENXIO) {
        gt_fail(e, "--log: '%s' is a FIFO with no reader: start its reader first", path);
        return NULL;
    }
    int flags = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    FILE *f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, "a") : NULL;
    if (!f) {
        gt_fail(e, "--log: cannot open '%s' for writing: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return f;
}

/* Opens --log (host 0 only; appended to when resuming) and writes its config record. */
int report_open(run *r, const gt_start *start, gt_err *e)
{
    int resumed = start->resumed != NULL;
    const gt_config *cfg = r->cfg;
    if (!cfg->log_path[0] || r->host != 0)
        return 0;
    r->rep.log = log_open(cfg->log_path, resumed, e);
    if (!r->rep.log)
        return -1;
    config_run(r, r->rep.log, start);
    config_training(r, r->rep.log);
    config_files(r, r->rep.log);
    fflush(r->rep.log);
    return 0;
}

/* ---- event records -------------------------------------------------------------------------------- */

/* An event record's start, at training time wall_s and samples; fields follow, then
 * event_end_locked. Caller holds rep.log_mu. */
static void event_begin_at_locked(run *r, const char *event, double wall_s, uint64_t samples)
{
    fprintf(r->rep.log, "{\"type\":\"event\",\"event\":\"%s\"", event);
    put_field_num(r->rep.log, "wall_s", "%.4f", wall_s);
    fprintf(r->rep.log, ",\"samples\":%llu", (unsigned long long)samples);
}

/* An event record's start, now. Caller holds rep.log_mu. */
static void event_begin_locked(run *r, const char *event)
{
    event_begin_at_locked(r, event, report_wall_s(r), atomic_load(&r->stats.samples_total));
}

static void event_end_locked(run *r)
{
    fputs("}\n", r->rep.log);
    fflush(r->rep.log);
}

/* An event with a message: what other parts of the run (guards, recoveries) record. */
void report_event(run *r, const char *event, const char *message)
{
    if (!r->rep.log)
        return;
    pthread_mutex_lock(&r->rep.log_mu);
    event_begin_locked(r, event);
    put_field_str(r->rep.log, "message", message ? message : "");
    event_end_locked(r);
    pthread_mutex_unlock(&r->rep.log_mu);
}

/* A checkpoint was written of the state at the run's step `step`, epoch_step steps into the
 * epoch after `epoch` completed ones, after `samples` samples and wall_s of training (the
 * state's, not the write's end): where a resume of it starts. */
void report_checkpoint(run *r, const char *path, uint32_t epoch, uint64_t step, uint64_t epoch_step,
                       uint64_t samples, double wall_s)
{
    if (!r->rep.log)
        return;
    pthread_mutex_lock(&r->rep.log_mu);
    event_begin_at_locked(r, "checkpoint_written", wall_s, samples);
    put_field_str(r->rep.log, "path", path);
    fprintf(r->rep.log, ",\"epoch\":%u,\"step\":%llu,\"epoch_step\":%llu", epoch,
            (unsigned long long)step, (unsigned long long)epoch_step);
    event_end_locked(r);
    pthread_mutex_unlock(&r->rep.log_mu);
}

static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "signal";
    }
}

/* --patience ran out (jobs.c): the event record; the done: line says it too (main.c). */
void report_early_stop(run *r, const gt_run_result *res)
{
    if (!r->rep.log)
        return;
    pthread_mutex_lock(&r->rep.log_mu);
    event_begin_locked(r, "stopped_early");
    fprintf(r->rep.log, ",\"evaluations\":%d,\"best_step\":%llu", res->stopped_early,
            (unsigned long long)res->best_step);
    put_field_num(r->rep.log, "best_acc", "%.6f", res->best_acc);
    event_end_locked(r);
    pthread_mutex_unlock(&r->rep.log_mu);
}

/* A signal asked the run to stop. */
void report_signal(run *r, int sig)
{
    if (!r->rep.log)
        return;
    pthread_mutex_lock(&r->rep.log_mu);
    event_begin_locked(r, "signal");
    fprintf(r->rep.log, ",\"signal\":%d", sig);
    put_field_str(r->rep.log, "name", signal_name(sig));
    event_end_locked(r);
    pthread_mutex_unlock(&r->rep.log_mu);
}

/* ---- training records and lines ------------------------------------------------------------------- */

/* One training step's mean loss (--log-steps): the run's step (the update its gradient went into)
 * and where it stands in its epoch (the clock; hogwild, the batch's index in the epoch's order). */
void report_step(run *r, worker *w, uint64_t step, uint64_t epoch_step, double loss, int n)
{
    if (!r->rep.log || !r->cfg->log_steps)
        return;
    pthread_mutex_lock(&r->rep.log_mu);
    fprintf(r->rep.log, "{\"type\":\"step\",\"worker\":%d,\"epoch\":%u,\"step\":%llu,\"epoch_step\":%llu",
            r->share0 + w->index, r->epoch + 1, (unsigned long long)step,
            (unsigned long long)epoch_step);
    put_field_num(r->rep.log, "loss", "%.9g", loss / n);
    fprintf(r->rep.log, ",\"wall_s\":%.6f}\n", report_wall_s(r));
    pthread_mutex_unlock(&r->rep.log_mu);
}

/* One evaluation: a log record and, unless --quiet, a terminal line whose throughput is this
 * run's own (a resumed run's samples and time since it began). */
void report_point(run *r, const gt_eval_point *p)
{
    const gt_config *cfg = r->cfg;
    term_begin(r);
    if (r->rep.log) {
        FILE *f = r->rep.log;
        fprintf(f, "{\"type\":\"eval\",\"epoch\":%u,\"step\":%llu,\"samples\":%llu", p->epoch,
                (unsigned long long)p->step, (unsigned long long)p->samples);
        put_field_num(f, "wall_s", "%.4f", p->wall_s);
        put_field_num(f, "train_loss", "%.6f", p->train_loss);
        put_field_num(f, "train_acc", "%.6f", p->train_acc);
        put_field_num(f, "test_loss", "%.6f", p->test_loss);
        put_field_num(f, "test_acc", "%.6f", p->test_acc);
        put_field_str(f, "params", cfg->ema > 0 ? "ema" : "trained"); /* what was evaluated */
        if (r->data->val.n) {
            put_field_num(f, "val_loss", "%.6f", p->val_loss);
            put_field_num(f, "val_acc", "%.6f", p->val_acc);
        }
        put_field_num(f, "lr", "%.6g", gt_optim_lr(&cfg->optim, run_progress_epochs(r, p->samples)));
        fprintf(f, ",\"mode\":\"%s\",\"workers\":%d}\n", r->ops->name, r->Wg);
        fflush(r->rep.log);
    }
    if (!cfg->quiet) {
        double run_s = p->wall_s - r->wall0;
        double sps = run_s > 0 ? (double)(p->samples - r->samples0) / run_s : 0;
        char val[48] = "";
        if (r->data->val.n)
            snprintf(val, sizeof val, "  val loss %.4f acc %.4f", p->val_loss, p->val_acc);
        printf("epoch %3u  step %7llu  train loss %.4f acc %.4f%s  test loss %.4f acc %.4f  %9.0f samples/s  %7.1f s\n",
               p->epoch, (unsigned long long)p->step, p->train_loss, p->train_acc, val,
               p->test_loss, p->test_acc, sps, p->wall_s);
    }
    term_end(r);
}

/* Samples of every host in one epoch: what the bar counts to. */
static uint64_t epoch_samples(const run *r)
{
    if (r->ops->clocked)
        return (uint64_t)r->clk.clocks * (uint64_t)r->Wg * (uint64_t)r->batch;
    uint64_t batches = r->ops->epoch_steps(r);
    if (r->cfg->balance == GT_BALANCE_STATIC)
        batches *= (uint64_t)r->W;
    return batches * (uint64_t)r->batch * (uint64_t)r->H;
}

/* Whether to draw the bar: --progress, or by default when stderr is a terminal and not --quiet. */
static int progress_on(const run *r)
{
    return r->cfg->progress > 0 || (r->cfg->progress < 0 && !r->cfg->quiet && isatty(2));
}

/* The progress bar on standard error, redrawn in place: the share done, the epoch, the mean
 * training loss since the last evaluation, this run's own throughput and the time left at that
 * rate. final draws it at its end and takes it away (a terminal's line is cleared, a file's
 * ended), so that no frozen bar stands between the last evaluation and the summary. */
void report_progress(run *r, uint32_t epoch, double loss, int final)
{
    if (!progress_on(r))
        return;
    uint64_t total = epoch_samples(r) * (uint64_t)r->cfg->epochs;
    uint64_t samples = atomic_load(&r->stats.samples_total);
    double frac = total ? (double)samples / (double)total : 1;
    if (frac > 1)
        frac = 1;
    int width = 30, filled = (int)(frac * width);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    double wall = (final && r->t_done > 0 ? r->t_done : gt_now()) - r->t0;
    double rate = wall > 0 ? (double)(samples - r->samples0) / wall : 0;
    uint32_t shown = epoch + 1 > (uint32_t)r->cfg->epochs ? (uint32_t)r->cfg->epochs : epoch + 1;
    char extra[64] = "";
    if (isfinite(loss))
        snprintf(extra, sizeof extra, "  loss %.4f", loss);
    if (rate > 0 && total > samples)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "  %.0f s left",
                 (double)(total - samples) / rate + 0.5);
    pthread_mutex_lock(&r->rep.log_mu); /* a redraw overwrites the bar's own line */
    fprintf(stderr, "\r[%s] %5.1f%%  epoch %u/%d  %8.0f samples/s%s%s", bar, 100 * frac, shown,
            r->cfg->epochs, rate, extra, isatty(2) ? "\033[K" : "");
    r->rep.bar_drawn = 1;
    if (final) {
        fputs(isatty(2) ? "\r\033[K" : "\n", stderr);
        r->rep.bar_drawn = 0;
    }
    fflush(stderr);
    pthread_mutex_unlock(&r->rep.log_mu);
}

/* The warning line and the event record of a worker that leaves the run. */
void report_worker_left(run *r, worker *w, const char *why)
{
    term_begin(r);
    fprintf(stderr, "gputrain: warning: worker %d (%s) left the run: %s\n", r->share0 + w->index,
            w->dev->name, why);
    if (r->rep.log) {
        event_begin_locked(r, "worker_failed");
        fprintf(r->rep.log, ",\"worker\":%d", r->share0 + w->index);
        put_field_str(r->rep.log, "device", w->dev->name);
        put_field_str(r->rep.log, "reason", why);
        event_end_locked(r);
    }
    term_end(r);
}

/* The watchdog's warning line: a worker idle for idle seconds. */
void report_stall(run *r, worker *w, double idle)
{
    term_begin(r);
    fprintf(stderr, "gputrain: warning: worker %d (%s) made no progress for %.1f s (--stall-timeout %g)\n",
            r->share0 + w->index, w->dev->name, idle, r->cfg->stall_timeout);
    term_end(r);
}

/* The warning line (host 0) and the event record of a resume whose checkpoint step lies past this
 * run's steps per epoch: the epoch restarts from its first batch. The record's epoch and
 * epoch_step are the checkpoint's (completed epochs, steps into the next), as in
 * checkpoint_written; step is the run's. */
void report_resume_restart(run *r, uint64_t step, uint64_t epoch_steps)
{
    if (r->host != 0)
        return;
    term_begin(r);
    fprintf(stderr, "gputrain: warning: --resume: the checkpoint is at step %llu of its epoch, past "
                    "this run's %llu steps per epoch (another --batch, --gpus or host count); epoch "
                    "%u restarts from its first batch\n",
            (unsigned long long)step, (unsigned long long)epoch_steps, r->epoch + 1);
    if (r->rep.log) {
        event_begin_locked(r, "resume_restarts_epoch");
        fprintf(r->rep.log, ",\"epoch\":%u,\"step\":%llu,\"epoch_step\":%llu,\"steps_per_epoch\":%llu",
                r->epoch, (unsigned long long)atomic_load(&r->ps.updates), (unsigned long long)step,
                (unsigned long long)epoch_steps);
        event_end_locked(r);
    }
    term_end(r);
}

/* ---- the last records ----------------------------------------------------------------------------- */

/* The summary's step phases: this host's workers together, a step's mean (workers that took no
 * step or timed nothing leave none). */
static void report_phases(FILE *f, const gt_run_result *res)
{
    gt_worker_stats all = {0};
    for (int i = 0; i < res->nworkers; i++) {
        const gt_worker_stats *s = &res->workers[i];
        all.steps += s->steps;
        all.pull_s += s->pull_s;
        all.device_s += s->device_s;
        all.push_s += s->push_s;
        all.wait_s += s->wait_s;
    }
    double us[GT_PHASES], share;
    if (!gt_worker_phases_us(&all, res->wall_s * res->nworkers, us, &share))
        return;
    put_field_num(f, "pull_us", "%.2f", us[0]);
    put_field_num(f, "device_us", "%.2f", us[1]);
    put_field_num(f, "push_us", "%.2f", us[2]);
    put_field_num(f, "wait_us", "%.2f", us[3]);
    put_field_num(f, "phases_share", "%.4f", share);
}

/* The run's summary: wall_s and samples count from the start of the first run a resumed one goes
 * on; run_wall_s, run_samples and samples_per_s are this run's own, and startup_s this process's
 * time from its launch to the start of training, of which startup_data_s loaded the data while
 * startup_devices_s opened the devices (side by side; -1 where not measured), then startup_run_s
 * set the run up (the store, the mode's state, the log, the guard), conv_searches of
 * the GPUs' convolution choices this process timed and conv_from_file it took from --conv-cache's
 * file (conv_cache.h). stale_max is exact; stale_p99 comes from the
 * histogram, and stale_p99_capped says it is its last bin (the true p99 is that or more). */
static void report_summary(run *r, const gt_run_result *res)
{
    const gt_config *cfg = r->cfg;
    FILE *f = r->rep.log;
    fprintf(f, "{\"type\":\"summary\",\"mode\":\"%s\",\"workers\":%d,\"hosts\":%d,\"model\":\"%s\","
               "\"batch\":%d,\"optimizer\":\"%s\"", r->ops->name, r->Wg, r->H, r->m->name, cfg->batch,
            gt_optimizer_name(cfg->optim.kind));
    put_field_num(f, "lr", "%g", cfg->optim.lr);
    put_field_num(f, "momentum", "%g", cfg->optim.momentum);
    put_field_num(f, "weight_decay", "%g", cfg->optim.weight_decay);
    put_field_str(f, "schedule", gt_schedule_name(cfg->optim.schedule));
    put_field_num(f, "warmup", "%g", cfg->optim.warmup_epochs);
    fprintf(f, ",\"seed\":%llu,\"epochs\":%d,\"stripes\":%d,\"samples\":%llu",
            (unsigned long long)cfg->seed, cfg->epochs, r->ps.nstripes, (unsigned long long)res->samples);
    put_field_num(f, "wall_s", "%.4f", res->resumed_wall_s + res->wall_s);
    fprintf(f, ",\"run_samples\":%llu", (unsigned long long)(res->samples - res->resumed_samples));
    put_field_num(f, "run_wall_s", "%.4f", res->wall_s);
    put_field_num(f, "startup_s", "%.4f", res->startup_s);
    put_field_num(f, "startup_data_s", "%.4f", res->startup_data_s);
    put_field_num(f, "startup_devices_s", "%.4f", res->startup_devices_s);
    put_field_num(f, "startup_run_s", "%.4f", res->startup_run_s);
    unsigned long conv_hits, conv_searches, conv_from_file = gt_conv_cache_file_hits();
    gt_conv_cache_counts(&conv_hits, &conv_searches);
    fprintf(f, ",\"conv_searches\":%lu,\"conv_from_file\":%lu", conv_searches, conv_from_file);
    put_field_num(f, "samples_per_s", "%.1f", res->samples_per_s);
    fprintf(f, ",\"stale_max\":%llu", (unsigned long long)res->stale_max);
    put_field_num(f, "stale_mean", "%.4f", res->stale_mean);
    put_field_num(f, "stale_p99", "%.0f", res->stale_p99);
    fprintf(f, ",\"stale_p99_capped\":%s", res->stale_p99_capped ? "true" : "false");
    put_field_num(f, "lock_wait_share", "%.6f", res->lock_wait_share);
    put_field_num(f, "barrier_wait_share", "%.6f", res->barrier_wait_share);
    report_phases(f, res);
    fprintf(f, ",\"clock_spread_max\":%llu,\"skipped_nonfinite\":%llu",
            (unsigned long long)res->clock_spread_max, (unsigned long long)res->skipped_nonfinite);
    put_field_num(f, "test_acc", "%.6f", res->npoints > 0 ? res->final_test_acc : NAN);
    fprintf(f, ",\"interrupted\":%d,\"stopped_early\":%s", res->interrupted,
            res->stopped_early ? "true" : "false");
    put_field_num(f, "best_acc", "%.6f", res->best_acc >= 0 ? res->best_acc : NAN);
    fprintf(f, ",\"best_step\":%llu", (unsigned long long)res->best_step);
    put_field_str(f, "data", r->data->dir);
    fprintf(f, ",\"version\":\"%s\"}\n", GT_VERSION);
}

/* Reporting's arithmetic, shared with main.c's terminal summary (train.h). */
int gt_worker_phases_us(const gt_worker_stats *s, double wall_s, double us[GT_PHASES],
                        double *share)
{
    double sec[GT_PHASES] = {s->pull_s, s->device_s, s->push_s, s->wait_s}, sum = 0;
    for (int k = 0; k < GT_PHASES; k++)
        sum += sec[k] > 0 ? sec[k] : 0;
    if (s->steps == 0 || sum <= 0)
        return 0;
    for (int k = 0; k < GT_PHASES; k++)
        us[k] = 1e6 * (sec[k] > 0 ? sec[k] : 0) / (double)s->steps;
    *share = wall_s > 0 ? sum / wall_s : 0;
    return 1;
}

/* One record per worker of this host; a failed one says why. */
static void report_workers(run *r, const gt_run_result *res)
{
    for (int i = 0; i < r->W; i++) {
        const gt_worker_stats *s = &res->workers[i];
        FILE *f = r->rep.log;
        fprintf(f, "{\"type\":\"worker\",\"worker\":%d,\"steps\":%llu,\"samples\":%llu",
                r->share0 + i, (unsigned long long)s->steps, (unsigned long long)s->samples);
        put_field_num(f, "samples_per_s", "%.1f", s->busy_s > 0 ? s->samples / s->busy_s : 0);
        put_field_num(f, "wait_s", "%.4f", s->wait_s);
        fprintf(f, ",\"failed\":%d", s->failed);
        double us[GT_PHASES], share;
        if (gt_worker_phases_us(s, res->wall_s, us, &share)) {
            put_field_num(f, "pull_us", "%.2f", us[0]);
            put_field_num(f, "device_us", "%.2f", us[1]);
            put_field_num(f, "push_us", "%.2f", us[2]);
            put_field_num(f, "wait_us", "%.2f", us[3]);
            put_field_num(f, "phases_share", "%.4f", share);
        }
        put_field_str(r->rep.log, "device", r->workers[i].dev->name);
        if (s->failed)
            put_field_str(r->rep.log, "reason", s->error);
        fputs("}\n", r->rep.log);
    }
}

/* Ends the log with the run's summary and one record per worker (after a run_failed event with
 * the error when rc is -1), and closes it. Returns rc, or
 * -1 with e set when rc was 0 and the log could not be written. */
int report_close(run *r, const gt_run_result *res, int rc, gt_err *e)
{
    if (!r->rep.log)
        return rc;
    if (rc != 0)
        report_event(r, "run_failed", e->msg);
    report_summary(r, res);
    report_workers(r, res);
    if (fclose(r->rep.log) != 0 && rc == 0)
        rc = gt_fail(e, "--log: writing '%s' failed: %s", r->cfg->log_path, strerror(errno));
    r->rep.log = NULL;
    return rc;
}

/* The recipe's corrections (recipe.h): a terminal line each, unless --quiet, and a log record each. */
void report_recipe(run *r, const gt_recipe *rec)
{
    if (!rec || r->host != 0)
        return;
    for (int i = 0; i < rec->n && !r->cfg->quiet; i++)
        printf("recipe: %s%s\n", rec->change[i], i + 1 == rec->n ? " [--literal: no corrections]" : "");
    fflush(stdout);
    if (!r->rep.log)
        return;
    pthread_mutex_lock(&r->rep.log_mu);
    for (int i = 0; i < rec->n; i++)
        fprintf(r->rep.log, "{\"type\":\"recipe\",\"change\":\"%s\"}\n", rec->change[i]);
    pthread_mutex_unlock(&r->rep.log_mu);
}

/* The steps on the GPUs, update included (train.c, run_device_step): a terminal line unless
 * --quiet; the config record's "step" says it too. */
void report_device_step(run *r)
{
    if (!r->device_step || r->cfg->mode == GT_MODE_ALLREDUCE || r->cfg->quiet || r->host != 0)
        return;
    if (r->W == 1)
        printf("note: one worker: %s runs each step on %s, the update included, and brings the "
               "store up to date where it is read (the same serial SGD; --store-step puts "
               "the store in the step)\n", r->ops->name, r->workers[0].dev->name);
    else if (r->cfg->mode == GT_MODE_LOCAL)
        printf("note: local on %d GPUs steps each replica and averages them every %d clocks on "
               "the GPUs (the same means); the store is brought up to date at the averages, and a "
               "GPU that fails ends the run (--store-step: through the store, where the "
               "others go on)\n", r->W, r->cfg->sync_every);
    else
        printf("note: %s on %d GPUs sums their gradients over the GPUs in worker order and takes "
               "the update on each, as allreduce does (the same sums); the store is brought up to "
               "date where it is read, and a GPU that fails ends the run (--store-step: "
               "through the store, where the others go on)\n", r->ops->name, r->W);
    fflush(stdout);
}

/* The guard's event (run_guard.c): `what` is "diverged" or "stalled", `action` what was done. A
 * terminal line when print (a run that stops says it in its error instead) and a log record. */
void report_guard(run *r, const char *what, const char *action, int print)
{
    const gt_guard *g = &r->guard.g;
    double loss = g->last_mean;
    unsigned long long step = (unsigned long long)atomic_load(&r->ps.updates);
    term_begin(r);
    if (print && r->host == 0)
        fprintf(stderr, "gputrain: %s at update %llu (loss %.4g, chance %.4g): %s; lower --lr or "
                        "--momentum%s, or --on-diverge stop\n", what, step, loss,
                g->cfg.chance_loss, action, strcmp(what, "stalled") == 0 ? ", or add --warmup" : "");
    if (!r->rep.log) {
        term_end(r);
        return;
    }
    uint32_t epochs = (uint32_t)r->cfg->epochs;
    fprintf(r->rep.log, "{\"type\":\"%s\",\"epoch\":%u,\"step\":%llu", what,
            r->epoch < epochs ? r->epoch + 1 : epochs, step);
    put_field_num(r->rep.log, "loss", "%.6g", loss);
    fprintf(r->rep.log, ",\"action\":\"%s\"", action);
    put_field_num(r->rep.log, "lr_scale", "%g", g->lr_scale);
    fputs("}\n", r->rep.log);
    fflush(r->rep.log);
    term_end(r);
}

/* A line for the user that is neither an error nor a warning, on the terminal and in the log. */
void report_note(run *r, const char *message)
{
    term_begin(r);
    if (r->host == 0 && !r->cfg->quiet)
        fprintf(stderr, "gputrain: note: %s\n", message);
    term_end(r);
    report_event(r, "note", message);
}
