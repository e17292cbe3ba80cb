/* report.c - the only writer of terminal lines and of the JSONL log: step and evaluation
 * records, the run's summary, worker warnings and the progress bar. */
#include "run.h"
#include "gputrain/names.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

/* One training step's mean loss (--log-steps). */
void report_step(run *r, worker *w, uint64_t step, double loss, int n)
{
    if (!r->rep.log || !r->cfg->log_steps)
        return;
    pthread_mutex_lock(&r->rep.log_mu);
    fprintf(r->rep.log, "{\"type\":\"step\",\"worker\":%d,\"epoch\":%u,\"step\":%llu,\"loss\":%.9g}\n",
            r->share0 + w->index, r->epoch + 1, (unsigned long long)step, loss / n);
    pthread_mutex_unlock(&r->rep.log_mu);
}

/* One evaluation: a log record and, unless --quiet, a terminal line. */
void report_point(run *r, const gt_eval_point *p)
{
    const gt_config *cfg = r->cfg;
    if (r->rep.log) {
        pthread_mutex_lock(&r->rep.log_mu);
        fprintf(r->rep.log,
                "{\"type\":\"eval\",\"epoch\":%u,\"step\":%llu,\"samples\":%llu,\"wall_s\":%.4f,"
                "\"train_loss\":%.6f,\"train_acc\":%.6f,\"test_loss\":%.6f,\"test_acc\":%.6f,"
                "\"lr\":%.6g,\"mode\":\"%s\",\"workers\":%d}\n",
                p->epoch, (unsigned long long)p->step, (unsigned long long)p->samples, p->wall_s,
                isnan(p->train_loss) ? 0.0 : p->train_loss, isnan(p->train_acc) ? 0.0 : p->train_acc,
                p->test_loss, p->test_acc,
                gt_optim_lr(&cfg->optim, run_progress_epochs(r, p->samples)), r->ops->name, r->Wg);
        fflush(r->rep.log);
        pthread_mutex_unlock(&r->rep.log_mu);
    }
    if (!cfg->quiet) {
        double sps = p->wall_s > 0 ? (double)p->samples / p->wall_s : 0;
        printf("epoch %3u  step %7llu  train loss %.4f acc %.4f  test loss %.4f acc %.4f  %9.0f samples/s  %7.1f s\n",
               p->epoch, (unsigned long long)p->step, p->train_loss, p->train_acc, p->test_loss,
               p->test_acc, sps, p->wall_s);
        fflush(stdout);
    }
}

/* The progress bar on standard error (--progress), redrawn in place; final ends its line. */
void report_progress(run *r, uint32_t epoch, int final)
{
    if (r->cfg->progress <= 0 && !(r->cfg->progress < 0 && isatty(2)))
        return;
    uint64_t per_epoch = r->ops->clocked ? (uint64_t)r->clk.clocks * r->Wg * r->batch : r->ntrain;
    uint64_t total = per_epoch * (uint64_t)r->cfg->epochs;
    uint64_t samples = atomic_load(&r->stats.samples_total);
    double frac = total ? (double)samples / (double)total : 1;
    if (frac > 1)
        frac = 1;
    int width = 30, filled = (int)(frac * width);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    double wall = gt_now() - r->t0;
    fprintf(stderr, "\r[%s] %5.1f%%  epoch %u/%d  %8.0f samples/s", bar, 100 * frac,
            epoch + 1 > (uint32_t)r->cfg->epochs ? (uint32_t)r->cfg->epochs : epoch + 1,
            r->cfg->epochs, wall > 0 ? samples / wall : 0);
    if (final)
        fputc('\n', stderr);
}

/* The warning line of a worker that leaves the run. */
void report_worker_left(run *r, worker *w, const char *why)
{
    fprintf(stderr, "gputrain: warning: worker %d (%s) left the run: %s\n", r->share0 + w->index,
            w->dev->name, why);
}

/* The watchdog's warning line: a worker idle for idle seconds. */
void report_stall(run *r, worker *w, double idle)
{
    fprintf(stderr, "gputrain: warning: worker %d (%s) made no progress for %.1f s (--stall-timeout %g)\n",
            r->share0 + w->index, w->dev->name, idle, r->cfg->stall_timeout);
}

/* The log's last records: the run and each of this host's workers. */
static void report_summary(run *r, const gt_run_result *res)
{
    const gt_config *cfg = r->cfg;
    fprintf(r->rep.log,
            "{\"type\":\"summary\",\"mode\":\"%s\",\"workers\":%d,\"hosts\":%d,\"model\":\"%s\",\"batch\":%d,"
            "\"optimizer\":\"%s\",\"lr\":%g,\"momentum\":%g,\"seed\":%llu,\"epochs\":%d,"
            "\"stripes\":%d,\"samples\":%llu,\"wall_s\":%.4f,"
            "\"samples_per_s\":%.1f,\"stale_max\":%llu,\"stale_mean\":%.4f,\"stale_p99\":%.0f,"
            "\"lock_wait_share\":%.6f,\"barrier_wait_share\":%.6f,\"clock_spread_max\":%llu,"
            "\"skipped_nonfinite\":%llu,\"test_acc\":%.6f,\"interrupted\":%d}\n",
            r->ops->name, r->Wg, r->H, r->m->name, cfg->batch,
            gt_optimizer_name(cfg->optim.kind), cfg->optim.lr, cfg->optim.momentum,
            (unsigned long long)cfg->seed, cfg->epochs, r->ps.nstripes, (unsigned long long)res->samples, res->wall_s,
            res->samples_per_s, (unsigned long long)res->stale_max, res->stale_mean,
            res->stale_p99, res->lock_wait_share, res->barrier_wait_share,
            (unsigned long long)res->clock_spread_max, (unsigned long long)res->skipped_nonfinite,
            res->final_test_acc, res->interrupted);
    for (int i = 0; i < r->W; i++) {
        const gt_worker_stats *s = &res->workers[i];
        fprintf(r->rep.log,
                "{\"type\":\"worker\",\"worker\":%d,\"device\":\"%s\",\"steps\":%llu,\"samples\":%llu,"
                "\"samples_per_s\":%.1f,\"wait_s\":%.4f,\"failed\":%d}\n",
                i, r->workers[i].dev->name, (unsigned long long)s->steps,
                (unsigned long long)s->samples, s->busy_s > 0 ? s->samples / s->busy_s : 0,
                s->wait_s, s->failed);
    }
}

/* Ends the log with the run's summary and one record per worker, and closes it. Returns rc, or
 * -1 with e set when rc was 0 and the log could not be written. */
int report_close(run *r, const gt_run_result *res, int rc, gt_err *e)
{
    if (!r->rep.log)
        return rc;
    report_summary(r, res);
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

/* The guard's event (run_guard.c): `what` is "diverged" or "stalled", `action` what was done. A
 * terminal line when print (a run that stops says it in its error instead) and a log record. */
void report_guard(run *r, const char *what, const char *action, int print)
{
    const gt_guard *g = &r->guard.g;
    double loss = g->last_mean;
    unsigned long long step = (unsigned long long)atomic_load(&r->ps.updates);
    if (print && r->host == 0)
        fprintf(stderr, "gputrain: %s at update %llu (loss %.4g, chance %.4g): %s; lower --lr or "
                        "--momentum%s, or --on-diverge stop\n", what, step, loss,
                g->cfg.chance_loss, action, strcmp(what, "stalled") == 0 ? ", or add --warmup" : "");
    if (!r->rep.log)
        return;
    pthread_mutex_lock(&r->rep.log_mu);
    uint32_t epochs = (uint32_t)r->cfg->epochs;
    fprintf(r->rep.log, "{\"type\":\"%s\",\"epoch\":%u,\"step\":%llu,\"loss\":", what,
            r->epoch < epochs ? r->epoch + 1 : epochs, step);
    fprintf(r->rep.log, isfinite(loss) ? "%.6g" : "null", loss);
    fprintf(r->rep.log, ",\"action\":\"%s\",\"lr_scale\":%g}\n", action, g->lr_scale);
    fflush(r->rep.log);
    pthread_mutex_unlock(&r->rep.log_mu);
}
