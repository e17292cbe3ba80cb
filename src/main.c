/* main.c - the gputrain command: parse, load data, build the model, open the devices, train or
 * evaluate, report. The only place that prints an error and chooses the exit code.
 *
 * Start-up overlaps its two slow parts: the data loads on a thread of its own while the model is
 * built from the data's header and the devices open for it, each GPU on a thread of its own.
 * Errors still come in the order of a start-up done one step after the other: the data's, the
 * command line's, the checkpoint's, then the devices'.
 *
 * Under mpirun every host runs this same program; host 0 prints, and an error on any host ends
 * the processes of every host (gt_cluster_abort), so none is left waiting for it. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "gputrain/atomic_file.h"
#include "gputrain/checkpoint.h"
#include "gputrain/confusion.h"
#include "gputrain/conv_cache.h"
#include "gputrain/cli.h"
#include "gputrain/cluster.h"
#include "gputrain/names.h"
#include "gputrain/predict.h"
#include "gputrain/recipe.h"
#include "gputrain/train.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Exit codes: a value on the command line that cannot work, and anything else that failed. */
enum { EXIT_USAGE = 2, EXIT_FAILED = 1 };

/* Prints the error; across hosts, names this host (the message may not) and ends every host's
 * process. Returns the exit code. */
static int die(const gt_err *e, int code)
{
    if (gt_cluster_size() > 1) {
        fprintf(stderr, "gputrain: host %d (%s): %s\n", gt_cluster_rank(), gt_cluster_host(), e->msg);
        fflush(stderr);
        gt_cluster_abort(code);
    } else {
        fprintf(stderr, "gputrain: %s\n", e->msg);
        gt_cluster_finalize();
    }
    return code;
}

/* One GPU's open (context, handles, buffers) on a thread of its own; on the first GPU the
 * evaluator's follows on the same thread, not beside it: for a model the fused kernels cannot
 * run, each device times cuDNN's algorithms as it opens, and two doing so on one GPU at once
 * would slow each other's timings. */
typedef struct gpu_open_job {
    gt_device **out, **evaluator; /* evaluator: NULL but on the first GPU of host 0 */
    const gt_model *m;
    int batch, ordinal, precision;
    int rc, ev_rc;
    gt_err err, ev_err;
} gpu_open_job;

static void *gpu_open_run(void *arg)
{
    gpu_open_job *j = arg;
    gt_precision prec = (gt_precision)j->precision;
    j->rc = gt_cuda_device_open(j->out, j->m, j->batch, j->ordinal, prec, &j->err);
    if (j->rc == 0 && j->evaluator)
        j->ev_rc = gt_cuda_device_open(j->evaluator, j->m, j->batch, j->ordinal, prec, &j->ev_err);
    return NULL;
}

/* The file of the GPUs' convolution choices (--conv-cache, conv_cache.h) into path: the flag's,
 * or the default file (gt_conv_cache_default_path); "" for none. */
static void conv_cache_path(const gt_config *c, char *path, size_t cap)
{
    path[0] = '\0';
    if (strcmp(c->conv_cache, "off") == 0)
        return;
    if (c->conv_cache[0])
        snprintf(path, cap, "%s", c->conv_cache);
    else
        gt_conv_cache_default_path(path, cap);
}

/* Reads the choices of earlier runs into the cache before the GPUs open. A file --conv-cache
 * names that cannot be used is an error; the default file's problems are a warning, and the run
 * times its convolutions as it would without one. */
static int conv_cache_open(const gt_config *c, const char *path, gt_err *e)
{
    struct stat st;
    int given = c->conv_cache[0] != '\0';
    gt_err err = {{0}};
    int bad = 0, rc = 0;
    if (!path[0])
        return 0;
    if (given) { /* the load refuses what is not a regular file (gt_open_regular) */
        char dir[GT_PATHLEN];
        snprintf(dir, sizeof dir, "%s", path);
        const char *d = dirname(dir);
        if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode))
            rc = gt_fail(&err, "--conv-cache: folder '%s' of '%s' does not exist", d, path);
    }
    if (rc == 0)
        rc = gt_conv_cache_load(path, &bad, &err);
    if (rc != 0 && given) {
        *e = err;
        return -1;
    }
    if (rc != 0)
        fprintf(stderr, "gputrain: warning: %s; the convolutions are timed as without it\n", err.msg);
    else if (bad > 0)
        fprintf(stderr, "gputrain: warning: --conv-cache '%s': %d unreadable line%s skipped (their "
                        "convolutions are timed again)\n", path, bad, bad == 1 ? "" : "s");
    return 0;
}

/* Opens the workers' GPUs at once, one thread each (in turn where a thread cannot start), and
 * the evaluator where evaluator is non-NULL. On a failure closes every one that opened and
 * reports the first error in --gpus order, the evaluator's last: the error that opening them one
 * after the other would have stopped at. */
static int open_gpus(const gt_config *cfg, const gt_model *m, gt_device **devs, int *ndevs,
                     gt_device **evaluator, gt_err *e)
{
    gpu_open_job job[GT_MAX_WORKERS];
    pthread_t thread[GT_MAX_WORKERS];
    int started[GT_MAX_WORKERS] = {0}, n = cfg->ngpus, rc = 0;
    gt_device *ev = NULL;
    char cache[GT_PATHLEN];
    conv_cache_path(cfg, cache, sizeof cache);
    if (conv_cache_open(cfg, cache, e) != 0)
        return -1;
    gt_cuda_set_deterministic(gt_config_deterministic(cfg));
    for (int i = 0; i < n; i++) {
        devs[i] = NULL;
        job[i] = (gpu_open_job){&devs[i], i == 0 && evaluator ? &ev : NULL, m, cfg->batch,
                                cfg->gpus[i], cfg->precision, 0, 0, {{0}}, {{0}}};
        started[i] = n > 1 && pthread_create(&thread[i], NULL, gpu_open_run, &job[i]) == 0;
        if (!started[i])
            gpu_open_run(&job[i]);
    }
    for (int i = 0; i < n; i++) {
        if (started[i])
            pthread_join(thread[i], NULL);
        if (job[i].rc != 0 && rc == 0) {
            *e = job[i].err;
            rc = -1;
        }
    }
    if (rc == 0 && n > 0 && job[0].ev_rc != 0) {
        *e = job[0].ev_err;
        rc = -1;
    }
    for (int i = 0; rc != 0 && i < n; i++) {
        gt_device_close(devs[i]);
        devs[i] = NULL;
    }
    if (rc != 0)
        gt_device_close(ev);
    else if (evaluator)
        *evaluator = ev;
    *ndevs = rc != 0 ? 0 : n;
    gt_err ce = {{0}};
    if (rc == 0 && gt_conv_cache_save(&ce) != 0) /* what the devices timed, for the next run */
        fprintf(stderr, "gputrain: warning: %s; the convolutions' choices are not kept\n", ce.msg);
    return rc;
}

/* Opens one device per worker, and the evaluator (a device of its own on the first GPU, or the
 * CPU) where evaluator is non-NULL: only host 0 evaluates. */
static int open_devices(const gt_config *c, const gt_model *m, gt_device **devs, int *ndevs,
                        gt_device **evaluator, gt_err *e)
{
    gt_config cfg = *c;
    if (cfg.cpu_workers == 0 && (cfg.gpus_all || !cfg.gpus_given)) {
        int have = gt_cuda_device_count(); /* CPU workers never bring CUDA up */
        if (have == 0 && cfg.gpus_given)
            return gt_fail(e, "--gpus: 'all' asked for GPUs, but none was found");
        if (have == 0)
            cfg.cpu_workers = 1;
        if (have > GT_MAX_WORKERS)
            return gt_fail(e, "--gpus: %s finds %d GPUs, more than the %d workers a run can have; "
                           "list at most %d with --gpus 0,1,...", cfg.gpus_given ? "'all'" : "the default",
                           have, GT_MAX_WORKERS, GT_MAX_WORKERS);
        cfg.ngpus = have;
        for (int i = 0; i < cfg.ngpus; i++)
            cfg.gpus[i] = i;
    }
    *ndevs = 0;
    if (cfg.cpu_workers > 0) {
        for (int i = 0; i < cfg.cpu_workers; i++) {
            if (gt_cpu_device_open(&devs[i], m, cfg.batch, i, e) != 0)
                return -1;
            *ndevs = i + 1;
        }
        return evaluator ? gt_cpu_device_open(evaluator, m, cfg.batch, cfg.cpu_workers, e) : 0;
    }
    return open_gpus(&cfg, m, devs, ndevs, evaluator, e);
}

/* Open MPI binds each process to one core when it starts few of them, which suits one process
 * per core, not one process per host whose workers are threads: say so. */
static void warn_cpu_binding(int nworkers)
{
    cpu_set_t set;
    if (gt_cluster_size() > 1 && sched_getaffinity(0, sizeof set, &set) == 0 &&
        CPU_COUNT(&set) < nworkers)
        fprintf(stderr, "gputrain: warning: host %d (%s) may use %d CPU%s for %d workers (mpirun "
                        "binds processes to cores: add --bind-to none)\n", gt_cluster_rank(),
                gt_cluster_host(), CPU_COUNT(&set), CPU_COUNT(&set) == 1 ? "" : "s", nworkers);
}

static void close_devices(gt_device **devs, int n, gt_device *evaluator)
{
    for (int i = 0; i < n; i++)
        gt_device_close(devs[i]);
    gt_device_close(evaluator);
}

/* What start-up prepares for training: when the process was launched, and the model and the
 * devices (one per worker, and host 0's evaluator) opened for it while the data loaded. */
typedef struct setup {
    double launched;                      /* on gt_now's clock */
    double data_s, devices_s;             /* the data load's and the devices' own time; -1: not yet */
    gt_model *m;                          /* NULL: no model built, no device open */
    gt_device *devs[GT_MAX_WORKERS], *ev;
    int n;                                /* devs[0, n) are open */
    int opened;                           /* open_devices ran for m: its result in rc, err */
    int rc;
    gt_err err;
} setup;

/* Builds the model for samples of ch x h x w and k classes. */
static int setup_model(const gt_config *c, int ch, int h, int w, int k, setup *s, gt_err *e)
{
    s->m = malloc(sizeof *s->m);
    if (!s->m)
        return gt_fail(e, "out of memory");
    if (gt_model_build(c->model, ch, h, w, k, s->m, e) != 0) {
        free(s->m);
        s->m = NULL;
        return -1;
    }
    gt_config_norm_mark(c, s->m); /* its values once the data is in: train_model */
    return 0;
}

/* Opens the devices for s->m; whether they opened is kept in s->rc and s->err. */
static void setup_open(const gt_config *c, setup *s)
{
    double t = gt_now();
    s->rc = open_devices(c, s->m, s->devs, &s->n, gt_cluster_rank() == 0 ? &s->ev : NULL,
                         &s->err);
    s->devices_s = (s->devices_s > 0 ? s->devices_s : 0) + gt_now() - t; /* a reopen adds */
    s->opened = 1;
}

/* Closes the devices and frees the model; launched stays. */
static void setup_close(setup *s)
{
    close_devices(s->devs, s->n, s->ev);
    free(s->m);
    memset(s->devs, 0, sizeof s->devs);
    s->m = NULL;
    s->ev = NULL;
    s->n = s->opened = s->rc = 0;
}

/* When this process was launched, on gt_now's clock: its start as the kernel records it (to the
 * clock tick, 10 ms), so that start-up counts the loading of the program and its libraries
 * before main. Where /proc cannot tell, or says more than a few seconds (a wrapper that exec'd
 * into gputrain late), the time main began. */
static double launch_time(void)
{
    double now = gt_now();
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[len] = '\0';
    const char *p = strrchr(buf, ')'); /* after the command name, which may hold anything */
    unsigned long long start;
    struct timespec boot;
    long tick = sysconf(_SC_CLK_TCK);
    if (!p || tick <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0 ||
        sscanf(p + 1, " %*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                      "%*s %llu", &start) != 1) /* fields 3 to 21, then 22: starttime */
        return now;
    double age = (double)boot.tv_sec + 1e-9 * (double)boot.tv_nsec - (double)start / (double)tick;
    return age >= 0 && age < 5 ? now - age : now;
}

/* The result: the `done:` line (also under --quiet; host 0 only) with the training time and the
 * start-up before it (launch to training), ending with the signal that interrupted the run; then
 * unless --quiet one line per worker, the contention figures and the checkpoint written.
 * Throughput is this run's own: a resumed run's samples and time since it began. */
static void print_summary(const gt_config *c, const gt_run_result *res, gt_device **devs)
{
    if (gt_cluster_rank() != 0)
        return;
    char hosts[48] = "", acc[64] = "not evaluated", before[64] = "", parts[64] = "";
    if (res->nhosts > 1)
        snprintf(hosts, sizeof hosts, " on each of %d hosts (host 0's below)", res->nhosts);
    if (res->npoints > 0 && c->val_split > 0)
        snprintf(acc, sizeof acc, "val acc %.4f, test acc %.4f",
                 res->points[res->npoints - 1].val_acc, res->final_test_acc);
    else if (res->npoints > 0)
        snprintf(acc, sizeof acc, "test acc %.4f", res->final_test_acc);
    if (res->npoints > 0 && c->ema > 0) /* evaluations of the moving average (--ema) */
        snprintf(acc + strlen(acc), sizeof acc - strlen(acc), " (ema %g)", (double)c->ema);
    if (res->resumed_samples > 0)
        snprintf(before, sizeof before, " (%llu since epoch 0)", (unsigned long long)res->samples);
    if (res->startup_data_s >= 0 && res->startup_devices_s >= 0)
        snprintf(parts, sizeof parts, ": data %.2f s beside devices %.2f s", res->startup_data_s,
                 res->startup_devices_s);
    char stopped[160] = "";
    if (res->interrupted)
        snprintf(stopped, sizeof stopped, "; interrupted by signal %d", res->interrupted);
    else if (res->stopped_early)
        snprintf(stopped, sizeof stopped, "; stopped early: no better %s acc in %d evaluations "
                 "(best %.4f at step %llu)", c->val_split > 0 ? "val" : "test", res->stopped_early,
                 res->best_acc, (unsigned long long)res->best_step);
    printf("done: %s, %d worker%s%s, %llu samples%s in %.2f s (startup %.2f s%s): %.0f samples/s, %s%s\n",
           gt_mode_name(c->mode), res->nworkers, res->nworkers == 1 ? "" : "s", hosts,
           (unsigned long long)(res->samples - res->resumed_samples), before, res->wall_s,
           res->startup_s, parts, res->samples_per_s, acc, stopped);
    if (c->quiet)
        return;
    for (int i = 0; i < res->nworkers; i++) {
        const gt_worker_stats *s = &res->workers[i];
        char phases[192] = "";
        double us[GT_PHASES], share;
        /* hogwild in parts: the next step's pull rides with the push, and the gradient's
         * download too (ssp's parts are applied beside the download, which stays the device's) */
        int hog_parts = res->store_parts && c->mode == GT_MODE_HOGWILD;
        const char *push = res->store_grad_bf16 ? "bf16 download/push/pull"
                           : hog_parts          ? "download/push/pull"
                                                : "push/apply";
        if (gt_worker_phases_us(s, res->wall_s, us, &share))
            snprintf(phases, sizeof phases,
                     "  us a step: pull %.1f device %.1f %s %.1f wait %.1f (%.0f%% of wall)",
                     us[0], us[1], push, us[2], us[3], 100 * share);
        printf("  worker %d %-28s %7llu steps %9.0f samples/s%s%s%s\n", i, devs[i]->name,
               (unsigned long long)s->steps, s->busy_s > 0 ? s->samples / s->busy_s : 0.0, phases,
               s->failed ? "  FAILED: " : "", s->failed ? s->error : "");
    }
    printf("  staleness max %llu mean %.2f p99 %s%.0f; lock wait %.2f%%, barrier wait %.2f%% of worker time",
           (unsigned long long)res->stale_max, res->stale_mean, res->stale_p99_capped ? ">=" : "",
           res->stale_p99,
           100 * res->lock_wait_share, 100 * res->barrier_wait_share);
    if (gt_mode_row_of(c->mode)->bounded)
        printf("; clock spread max %llu", (unsigned long long)res->clock_spread_max);
    if (res->skipped_nonfinite)
        printf("; %llu non-finite gradients skipped", (unsigned long long)res->skipped_nonfinite);
    printf("\n");
    if (res->checkpoint_written[0])
        printf("checkpoint: %s\n", res->checkpoint_written);
    if (res->best_written[0])
        printf("best: %s (%s acc %.4f at step %llu)\n", res->best_written,
               c->val_split > 0 ? "val" : "test", res->best_acc, (unsigned long long)res->best_step);
}

/* The workers' device names for the start-up header, comma-separated. */
static void device_names(gt_device *const *devs, int n, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", devs[i]->name);
}

static unsigned ckpt_flags(const gt_config *c)
{
    return c->allow_nonfinite ? GT_CKPT_ALLOW_NONFINITE : 0;
}

/* The model a checkpoint was written for, on this data. */
static int model_from_checkpoint(const char *path, const gt_data *d, gt_model *m, gt_ckpt_meta *meta,
                                 gt_class_name **names, gt_err *e)
{
    if (gt_ckpt_read_names(path, meta, names, e) != 0)
        return -1;
    if (meta->in_c != d->train.c || meta->in_h != d->train.h || meta->in_w != d->train.w ||
        meta->nclasses != d->train.nclasses)
        return gt_fail(e, "%s: checkpoint is for %dx%dx%d inputs and %d classes, the data has %dx%dx%d and %d",
                       path, meta->in_c, meta->in_h, meta->in_w, meta->nclasses, d->train.c,
                       d->train.h, d->train.w, d->train.nclasses);
    return gt_predict_model(path, meta, d->train.c, d->train.h, d->train.w, d->train.nclasses, m, e);
}

/* eval --per-class and --confusion: the table of the evaluation's predictions, and the matrix
 * written; the matrix's hits must be the evaluation's own (correct). */
static int eval_per_class(const gt_config *c, const gt_data *d, const int32_t *pred, int k,
                          int correct, gt_err *e)
{
    gt_confusion cm;
    if (gt_confusion_build(&cm, &d->test, pred, k, e) != 0)
        return -1;
    int rc = 0;
    if (cm.correct != (uint64_t)correct)
        rc = gt_fail(e, "eval: the predictions hit %llu test samples, the evaluation counted %d",
                     (unsigned long long)cm.correct, correct);
    if (rc == 0 && !c->quiet)
        gt_confusion_print(stdout, &cm, (char (*)[32])d->class_names);
    if (rc == 0 && c->confusion[0]) {
        rc = gt_confusion_write(c->confusion, &cm, (char (*)[32])d->class_names, e);
        if (rc == 0 && !c->quiet)
            printf("confusion matrix: %s\n", c->confusion);
    }
    gt_confusion_free(&cm);
    return rc;
}

static int cmd_eval(const gt_config *c, const gt_data *d, gt_err *e)
{
    gt_model m;
    gt_ckpt_meta meta;
    gt_class_name *names = NULL; /* the checkpoint's, checked against the data's */
    int rc = model_from_checkpoint(c->checkpoint, d, &m, &meta, &names, e);
    if (rc == 0)
        rc = gt_predict_check_classes(c->checkpoint, names, names ? meta.nnames : 0, d,
                                      c->ignore_classes, stderr, e);
    free(names);
    if (rc != 0)
        return -1;
    gt_device *devs[GT_MAX_WORKERS] = {0}, *ev = NULL;
    int n = 0;
    rc = open_devices(c, &m, devs, &n, &ev, e);
    if (rc == 0) /* the moving average copied over the parameters where the file has one */
        rc = gt_ckpt_load_ema(c->checkpoint, &m, ev->params, c->no_ema ? NULL : ev->params,
                              ev->buffers, NULL, 0, &meta, ckpt_flags(c), e);
    gt_step_out o = {0};
    int per_class = c->per_class || c->confusion[0];
    int32_t *pred = per_class ? malloc(((size_t)d->test.n + 1) * sizeof *pred) : NULL;
    if (rc == 0 && per_class && !pred)
        rc = gt_fail(e, "out of memory for %u predictions", d->test.n);
    if (rc == 0)
        rc = ev->ops->load_params(ev, e);
    if (rc == 0) {
        ev->eval_pred = pred;
        rc = ev->ops->evaluate(ev, &d->test, 0, d->test.n, &o, e);
        ev->eval_pred = NULL;
    }
    char shown[4 * GT_PATHLEN];
    if (rc == 0)
        printf("%s: model %s%s, epoch %u, on %s: test loss %.4f acc %.4f (%d/%u)\n",
               gt_escape(shown, sizeof shown, c->checkpoint), m.name,
               !meta.has_ema ? "" : c->no_ema ? " (training parameters, not its moving average)"
                                              : " (moving average of the parameters)",
               meta.epoch, ev->name,
               o.loss_sum / d->test.n, (double)o.correct / d->test.n, o.correct, d->test.n);
    if (rc == 0 && per_class)
        rc = eval_per_class(c, d, pred, m.nclasses, o.correct, e);
    free(pred);
    close_devices(devs, n, ev);
    return rc;
}

/* Whether a and b name one file: the same inode when both exist, else the same resolved path
 * (folder through realpath, then the file name). */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ra[PATH_MAX], rb[PATH_MAX], da[GT_PATHLEN], db[GT_PATHLEN], fa[GT_PATHLEN], fb[GT_PATHLEN];
    snprintf(da, sizeof da, "%s", a);
    snprintf(db, sizeof db, "%s", b);
    snprintf(fa, sizeof fa, "%s", a);
    snprintf(fb, sizeof fb, "%s", b);
    if (!realpath(dirname(da), ra) || !realpath(dirname(db), rb))
        return 0;
    return strcmp(ra, rb) == 0 && strcmp(basename(fa), basename(fb)) == 0;
}

/* The files a run reads, each with its flag: the log (path) may be none of them, nor may
 * --save-best's file. */
static int is_input(const gt_config *c, const char *path, const char **flag)
{
    const char *const inputs[][2] = {{"--resume", c->resume}, {"--init", c->init},
                                     {"--model", c->model[0] == '@' ? c->model + 1 : ""}};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
        if (inputs[i][1][0] && same_file(path, inputs[i][1])) {
            *flag = inputs[i][0];
            return 1;
        }
    return 0;
}

/* Whether path (the log, --save-best's file) is the checkpoint, one of its rotated copies
 * PATH.1 .. PATH.keep or its lock file: the one it is, in name. */
static int is_checkpoint_file(const gt_config *c, const char *path, char *name, size_t cap)
{
    for (int k = 0; c->checkpoint[0] && k <= c->keep + 1; k++) {
        if (k == 0)
            snprintf(name, cap, "%s", c->checkpoint);
        else if (k <= c->keep)
            snprintf(name, cap, "%s.%d", c->checkpoint, k);
        else
            snprintf(name, cap, "%s.lock", c->checkpoint);
        if (same_file(path, name))
            return 1;
    }
    return 0;
}

/* Path problems found before any training: the log is no input and none of the checkpoint's
 * files (exit 2, a command-line error), and the checkpoint (ckflag: the flag that named it) and
 * its rotation targets can be written and are locked for this run (the lock's fd in *lock, held
 * until exit), and so is --save-best's file (*best_lock). */
static int check_paths(const gt_config *c, const char *ckflag, int *lock, int *best_lock, int *usage,
                       gt_err *e)
{
    char name[GT_PATHLEN + 16];
    const char *flag;
    *usage = 1;
    if (c->log_path[0] && is_input(c, c->log_path, &flag))
        return gt_fail(e, "--log and %s name the same file '%s': refusing to overwrite an input",
                       flag, c->log_path);
    if (c->log_path[0] && is_checkpoint_file(c, c->log_path, name, sizeof name))
        return gt_fail(e, "--log and --checkpoint%s name the same file '%s': choose another log",
                       c->keep ? " --keep" : "", name);
    if (c->save_best[0] && c->log_path[0] && same_file(c->log_path, c->save_best))
        return gt_fail(e, "--log and --save-best name the same file '%s': choose another log",
                       c->save_best);
    if (c->save_best[0] && is_input(c, c->save_best, &flag))
        return gt_fail(e, "--save-best and %s name the same file '%s': refusing to overwrite an "
                          "input", flag, c->save_best);
    if (c->save_best[0] && is_checkpoint_file(c, c->save_best, name, sizeof name))
        return gt_fail(e, "--save-best and %s%s name the same file '%s': the best state and the "
                          "latest would overwrite each other", ckflag, c->keep ? " --keep" : "",
                       name);
    *usage = 0;
    if (c->checkpoint[0] &&
        (*lock = gt_atomic_prepare(c->checkpoint, ckflag, c->keep, e)) < 0)
        return -1;
    if (c->save_best[0] && (*best_lock = gt_atomic_prepare(c->save_best, "--save-best", 0, e)) < 0)
        return -1;
    return 0;
}

/* Whether an existing file path lies in the data folder, where a file it overwrites may be data. */
static int in_data_folder(const char *path, const gt_data *d)
{
    char dir[PATH_MAX], file[PATH_MAX];
    if (!path[0] || !realpath(d->dir, dir) || !realpath(path, file))
        return 0; /* not there yet: no data file it could be */
    size_t n = strlen(dir);
    return strncmp(file, dir, n) == 0 && (file[n] == '/' || dir[n - 1] == '/');
}

/* Whether the log or --save-best's file (train) or the confusion matrix (eval) lies in the data
 * folder (checked once the data is found: --data may be left to the default search), or the
 * matrix is the checkpoint it comes from. Exit 2. */
static int check_log_data(const gt_config *c, const gt_data *d, gt_err *e)
{
    const char *flag = c->command == GT_CMD_EVAL ? "--confusion" : "--log";
    const char *path = c->command == GT_CMD_EVAL ? c->confusion : c->log_path;
    if (in_data_folder(path, d))
        return gt_fail(e, "%s '%s' is a file in the data folder '%s': refusing to overwrite it",
                       flag, path, d->dir);
    if (c->command == GT_CMD_TRAIN && in_data_folder(c->save_best, d))
        return gt_fail(e, "--save-best '%s' is a file in the data folder '%s': refusing to "
                          "overwrite it", c->save_best, d->dir);
    if (c->command == GT_CMD_EVAL && path[0] && same_file(path, c->checkpoint))
        return gt_fail(e, "--confusion and --checkpoint name the same file '%s': refusing to "
                          "overwrite the checkpoint", path);
    return 0;
}

/* Initial parameters, buffers (batch norm's running statistics) and optimizer state: fresh,
 * --init weights and buffers, or a --resume checkpoint, with its moving average into ema (when
 * non-NULL: --ema) where it has one (meta->has_ema). */
static int load_start(const gt_config *c, const gt_model *m, const gt_data *d, float *params,
                      float *ema, float *buffers, float **state, int nstate, gt_ckpt_meta *meta,
                      int *resumed, gt_err *e)
{
    *resumed = 0;
    if (c->resume[0]) {
        if (gt_ckpt_load_ema(c->resume, m, params, ema, buffers, state, nstate, meta,
                             ckpt_flags(c), e) != 0)
            return -1;
        if (!gt_norm_equal(&meta->norm, &m->norm, m->in_c)) {
            char was[512], now[512];
            gt_norm_format(&meta->norm, m->in_c, was, sizeof was);
            gt_norm_format(&m->norm, m->in_c, now, sizeof now);
            return gt_fail(e, "--resume: %s was trained with input normalisation %s, this run's "
                           "--normalize gives %s", c->resume, was, now);
        }
        *resumed = 1;
        return 0;
    }
    if (c->init[0]) {
        gt_ckpt_meta tmp;
        return gt_ckpt_load(c->init, m, params, buffers, NULL, 0, &tmp, ckpt_flags(c), e);
    }
    gt_model_init_params(m, params, c->seed);
    if (buffers)
        gt_model_init_buffers(m, buffers);
    return 0;
}

/* Whether the run's workers are GPUs (--gpus LIST, or all of them where there are any). */
static int run_on_gpus(const gt_config *c)
{
    if (c->cpu_workers > 0)
        return 0;
    return c->gpus_given && !c->gpus_all ? c->ngpus > 0 : gt_cuda_device_count() > 0;
}

/* Workers in the whole run, as open_devices will open them on each host. */
static int run_workers(const gt_config *c)
{
    int n = c->cpu_workers;
    if (n == 0 && (c->gpus_all || !c->gpus_given)) {
        int have = gt_cuda_device_count();
        n = have == 0 ? 1 : have < GT_MAX_WORKERS ? have : GT_MAX_WORKERS; /* more: refused when opened */
    } else if (n == 0) {
        n = c->ngpus;
    }
    return n * gt_cluster_size();
}

/* Where a resumed epoch goes on: at the checkpoint's sample of the epoch's permutation, counted in
 * this run's steps (meta->step is rewritten). A checkpoint of another --batch, worker count or
 * mode continues exactly where the samples it had done are the start of the epoch's order and
 * this run's step divides them; otherwise it is refused (exit 2) with the reason. */
static int resume_position(const gt_config *c, uint32_t ntrain, gt_ckpt_meta *meta, gt_err *e)
{
    if (meta->step == 0 || meta->batch == 0) /* an epoch's start, or a file without its layout */
        return 0;
    int hosts = gt_cluster_size(), workers = run_workers(c) / hosts;
    uint64_t unit = gt_ckpt_step_samples(gt_mode_row_of(c->mode)->clocked,
                                         c->balance == GT_BALANCE_STATIC, workers, hosts, c->batch);
    uint64_t pos = meta->epoch_pos;
    int same = meta->batch == (uint64_t)c->batch && meta->workers == (uint64_t)(workers * hosts);
    if (pos == 0 && same && unit == 0) { /* the same slices: each goes on from the slowest's step */
        uint64_t part = ntrain / (uint64_t)hosts /
                        (uint64_t)(c->balance == GT_BALANCE_STATIC ? workers : 1) / (uint64_t)c->batch;
        if (meta->step < part && !c->quiet && gt_cluster_rank() == 0)
            fprintf(stderr, "gputrain: warning: --resume: %s stopped inside epoch %u with each "
                            "worker (or host) on a part of its own; every part goes on from step "
                            "%llu, whatever it had done: batches may be trained twice or left out "
                            "(a checkpoint at an epoch's end resumes exactly)\n", c->resume,
                    meta->epoch + 1, (unsigned long long)meta->step);
        return 0;
    }
    if (pos == 0)
        return gt_fail(e, "--resume: %s stopped inside epoch %u with %llu workers x batch %llu, "
                       "whose samples done are not the start of the epoch's order (hogwild "
                       "--balance static or several hosts): resume with that layout, or from a "
                       "checkpoint at an epoch's end", c->resume, meta->epoch + 1,
                       (unsigned long long)meta->workers, (unsigned long long)meta->batch);
    if (pos + pos / meta->step > ntrain) { /* its epoch was done: only its dropped tail was left */
        meta->epoch++;
        meta->step = meta->epoch_pos = 0;
        return 0;
    }
    if (unit == 0 || pos % unit != 0)
        return gt_fail(e, "--resume: %s stopped at sample %llu of epoch %u's order; this run's "
                       "steps (%d workers x --batch %d%s) cannot start there: resume with "
                       "--batch and a worker count whose step divides %llu (%s ran %llu workers "
                       "x batch %llu), or from a checkpoint at an epoch's end", c->resume,
                       (unsigned long long)pos, meta->epoch + 1, workers * hosts, c->batch,
                       unit == 0 ? ", each on a slice of its own" : "", (unsigned long long)pos,
                       c->resume, (unsigned long long)meta->workers,
                       (unsigned long long)meta->batch);
    if (!same && !c->quiet && gt_cluster_rank() == 0)
        printf("note: --resume: epoch %u goes on at sample %llu of its order, step %llu of this "
               "run's %d workers x batch %d\n", meta->epoch + 1, (unsigned long long)pos,
               (unsigned long long)(pos / unit), workers * hosts, c->batch);
    meta->step = pos / unit;
    return 0;
}

/* The model for this data: the one start-up built, with its devices open, where the data has
 * the shape start-up read from its header; else (devices closed) one built now, *usage set where
 * --model does not build; its --normalize values set from the data. */
static int train_model(const gt_config *c, const gt_data *d, setup *s, int *usage, gt_err *e)
{
    const gt_dataset *t = &d->train;
    const gt_model *m = s->m;
    if (!(m && m->in_c == t->c && m->in_h == t->h && m->in_w == t->w &&
          m->nclasses == t->nclasses)) {
        setup_close(s);
        if (setup_model(c, t->c, t->h, t->w, t->nclasses, s, e) != 0) {
            *usage = 1;
            return -1;
        }
    }
    if (gt_config_norm_resolve(c, t, s->m, e) != 0) {
        *usage = 1;
        return -1;
    }
    return 0;
}

/* Prints the start-up header: model, data, mode, workers, devices; and the resumed position. */
static void print_header(const gt_config *c, const gt_data *d, const setup *s, int resumed,
                         const gt_ckpt_meta *meta)
{
    warn_cpu_binding(s->n);
    char hosts[32] = "";
    if (gt_cluster_size() > 1)
        snprintf(hosts, sizeof hosts, " on each of %d hosts", gt_cluster_size());
    char names[4096];
    device_names(s->devs, s->n, names, sizeof names);
    if (!c->quiet)
        printf("gputrain: %s (%zu parameters) on %s, %s, %d worker%s x batch %d%s, %u train / %u test samples (%s)\n",
               s->m->name, s->m->nparams, d->dir, gt_mode_label(c), s->n,
               s->n == 1 ? "" : "s", c->batch, hosts, d->train.n, d->test.n, names);
    if (resumed && !c->quiet && meta->step == 0)
        printf("resuming %s at step %llu (the start of epoch %u; seed %llu); saving to %s\n",
               c->resume, (unsigned long long)meta->updates, meta->epoch + 1,
               (unsigned long long)meta->seed, c->checkpoint);
    else if (resumed && !c->quiet) /* meta->step: in this run's steps (resume_position) */
        printf("resuming %s at step %llu (%llu steps into epoch %u; seed %llu); saving to %s\n",
               c->resume, (unsigned long long)meta->updates, (unsigned long long)meta->step,
               meta->epoch + 1, (unsigned long long)meta->seed, c->checkpoint);
    fflush(stdout); /* before the progress bar on stderr */
}

/* *usage is set when the error is in a command-line value (--model), not in a run. The recipe's
 * corrections for the run's worker count (recipe.h) apply to a copy of the config. The devices
 * are those start-up opened (s), or are opened here; the caller closes them. */
static int cmd_train(const gt_config *given, const char *command, const gt_data *d, setup *s,
                     gt_run_result *res, int *interrupted, int *usage, gt_err *e)
{
    gt_config cc = *given;
    const gt_config *c = &cc;
    gt_recipe rec;
    int workers = run_workers(c);
    if (c->inject_worker >= workers) { /* would never fire: refused, not ignored */
        *usage = 1;
        return gt_fail(e, "--inject-fault %d:%d: train runs %d worker%s, numbered 0..%d",
                       c->inject_worker, c->inject_step, workers, workers == 1 ? "" : "s",
                       workers - 1);
    }
    gt_recipe_apply(&cc, workers, d->train.n, &rec);
    if (train_model(c, d, s, usage, e) != 0)
        return -1;
    const gt_model *m = s->m;
    cc.optim.decay_end = m->ndecay < m->nparams ? m->ndecay : 0;
    int nstate = gt_optim_nstate(&c->optim);
    float *params = gt_alloc(m->nparams * sizeof(float));
    float *state[2] = {NULL, NULL};
    for (int i = 0; i < nstate; i++)
        state[i] = gt_alloc(m->nparams * sizeof(float));
    float *buffers = m->nbuffers ? gt_alloc(m->nbuffers * sizeof(float)) : NULL;
    float *ema = c->ema > 0 && c->resume[0] ? gt_alloc(m->nparams * sizeof(float)) : NULL;
    if (!params || (nstate > 0 && !state[0]) || (nstate > 1 && !state[1]) ||
        (m->nbuffers && !buffers) || (c->ema > 0 && c->resume[0] && !ema)) {
        gt_free(ema);
        gt_free(params);
        gt_free(buffers);
        gt_free(state[0]);
        gt_free(state[1]);
        return gt_fail(e, "out of memory for %zu parameters", m->nparams);
    }
    gt_ckpt_meta meta;
    int resumed = 0;
    int rc = load_start(c, m, d, params, ema, buffers, state, nstate, &meta, &resumed, e);
    if (rc == 0 && resumed && resume_position(c, d->train.n, &meta, e) != 0) {
        *usage = 1;
        rc = -1;
    }
    if (rc == 0 && !s->opened)
        setup_open(c, s);
    if (rc == 0 && s->rc != 0) {
        *e = s->err;
        rc = -1;
    }
    if (rc == 0) {
        print_header(c, d, s, resumed, &meta);
        gt_start start = {.params = params, .state = state, .nstate = nstate, .buffers = buffers,
                          .ema = resumed && meta.has_ema ? ema : NULL,
                          .resumed = resumed ? &meta : NULL, .recipe = &rec,
                          .launched = s->launched, .data_s = s->data_s,
                          .devices_s = s->devices_s, .command = command};
        gt_train_install_signals();
        rc = gt_train_run(c, m, d, s->devs, s->n, s->ev, &start, res, e);
        if (rc == 0)
            print_summary(c, res, s->devs);
        *interrupted = res->interrupted;
        if (rc == 0 && res->interrupted && !c->quiet)
            printf("interrupted by signal %d%s%s\n", res->interrupted,
                   res->checkpoint_written[0] ? "; state saved to " : "", res->checkpoint_written);
    }
    gt_free(params);
    gt_free(ema);
    gt_free(buffers);
    gt_free(state[0]);
    gt_free(state[1]);
    return rc;
}

/* Whether flag was given on the command line (options are spelt in full: --seed or --seed=N). */
static int flag_given(int argc, char **argv, const char *flag)
{
    size_t n = strlen(flag);
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strncmp(argv[i], flag, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '='))
            return 1;
    return 0;
}

/* What --resume must keep from the checkpoint, before training: the same optimizer (its state is
 * in the file), data (the position counts its samples) and seed (the data order). Another value
 * on the command line is a command-line error (exit 2), naming the flag and both values. */
static int resume_same(const gt_config *c, const gt_data *d, const gt_ckpt_meta *meta, int argc,
                       char **argv, gt_err *e)
{
    if (strcmp(meta->optimizer, gt_optimizer_name(c->optim.kind)) != 0)
        return gt_fail(e, "--optimizer %s: %s was trained with --optimizer %s (its state is in the "
                       "file); resume with --optimizer %s", gt_optimizer_name(c->optim.kind),
                       c->resume, meta->optimizer, meta->optimizer);
    int limited = flag_given(argc, argv, "--train-samples");
    if (meta->train_samples && meta->train_samples != d->train.n && c->val_split > 0 &&
        meta->data_fingerprint == d->fingerprint)
        return gt_fail(e, "--val-split %g: %s was trained on %llu training samples, this run on "
                       "%u (%u held out); resume with the --val-split that run took (none if it "
                       "took none)", c->val_split, c->resume,
                       (unsigned long long)meta->train_samples, d->train.n, d->val.n);
    if (meta->train_samples && meta->train_samples != d->train.n && limited)
        return gt_fail(e, "--train-samples: %s was trained on %llu training samples, this run has "
                       "%u; resume with --train-samples %llu", c->resume,
                       (unsigned long long)meta->train_samples, d->train.n,
                       (unsigned long long)meta->train_samples);
    if (meta->train_samples && meta->train_samples != d->train.n)
        return gt_fail(e, "--data: %s was trained on other data or a part of it (%llu training "
                       "samples, fingerprint %08x; this data %s: %u, %08x); resume with its "
                       "--data, and --train-samples %llu or its --val-split if that run took a "
                       "part", c->resume,
                       (unsigned long long)meta->train_samples, meta->data_fingerprint, d->dir,
                       d->train.n, d->fingerprint, (unsigned long long)meta->train_samples);
    if (meta->data_fingerprint != d->fingerprint)
        return gt_fail(e, "--data: %s was trained on other data (fingerprint %08x, this data %s: "
                       "%08x)", c->resume, meta->data_fingerprint, d->dir, d->fingerprint);
    if (flag_given(argc, argv, "--seed") && c->seed != meta->seed)
        return gt_fail(e, "--seed %llu: %s was trained with --seed %llu; resuming under another seed "
                       "changes the data order (leave --seed out to keep the checkpoint's)",
                       (unsigned long long)c->seed, c->resume, (unsigned long long)meta->seed);
    return 0;
}

/* Settings a resume may change: a note: line for each that differs from the checkpoint's run
 * (lr and momentum as that run took them, after the recipe's corrections). */
static void resume_notes(const gt_config *c, const gt_ckpt_meta *meta, int argc, char **argv)
{
    const struct { const char *what; double was, now; int given; } rows[] = { /* what: "%g" */
        {"--lr %g", meta->lr, c->optim.lr, flag_given(argc, argv, "--lr")},
        {"--momentum %g", meta->momentum, c->optim.momentum, flag_given(argc, argv, "--momentum")},
        {"--weight-decay %g", meta->weight_decay, c->optim.weight_decay, 1},
        {"--batch %g", (double)meta->batch, c->batch, 1},
        {"%g workers", (double)meta->workers, run_workers(c), 1},
    };
    if (c->quiet || gt_cluster_rank() != 0 || meta->batch == 0) /* 0: a file without them */
        return;
    char now[48], was[48];
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (!rows[i].given || rows[i].was == rows[i].now)
            continue;
        snprintf(now, sizeof now, rows[i].what, rows[i].now);
        snprintf(was, sizeof was, rows[i].what, rows[i].was);
        printf("note: --resume: %s from here on (%s ran with %s)\n", now, c->resume, was);
    }
    if (strcmp(meta->mode, gt_mode_name(c->mode)) != 0)
        printf("note: --resume: --mode %s from here on (%s ran with --mode %s)\n",
               gt_mode_name(c->mode), c->resume, meta->mode);
}

/* What --resume keeps from the checkpoint, before training (resume_same), its seed, and whether
 * anything is left to train. 0 to go on, 1 when the run is already finished, -1 on error
 * (*usage: exit 2). */
static int resume_settings(gt_config *c, const gt_data *d, int argc, char **argv, int *usage,
                           gt_err *e)
{
    gt_ckpt_meta meta;
    *usage = 0;
    if (gt_ckpt_read_meta(c->resume, &meta, e) != 0)
        return -1;
    if (resume_same(c, d, &meta, argc, argv, e) != 0) {
        *usage = 1;
        return -1;
    }
    c->seed = meta.seed;
    if (meta.epoch >= (uint32_t)c->epochs) {
        if (gt_cluster_rank() == 0) /* the result line, also under --quiet */
            printf("nothing to train: the checkpoint %s is at epoch %u of %d\n", c->resume,
                   meta.epoch, c->epochs);
        return 1;
    }
    resume_notes(c, &meta, argc, argv);
    if (gt_mode_row_of(c->mode)->resume_approx && !c->quiet)
        fprintf(stderr, "gputrain: warning: --mode %s resumes approximately (the workers' "
                        "models since their last average are not in a checkpoint)\n",
                gt_mode_name(c->mode));
    return 0;
}

/* A command-line error found after parsing: one line, exit 2 on every host. */
static int usage_error(const gt_err *e)
{
    fprintf(stderr, "gputrain: %s (see gputrain --help)\n", e->msg);
    gt_cluster_abort(2);
    gt_cluster_finalize();
    return 2;
}

/* Whether --model builds on this data; the model itself is built again in cmd_train. */
static int check_model_spec(const gt_config *c, const gt_data *d, gt_err *e)
{
    gt_model *m = malloc(sizeof *m);
    if (!m)
        return gt_fail(e, "out of memory");
    int rc = gt_model_build(c->model, d->train.c, d->train.h, d->train.w, d->train.nclasses, m, e);
    free(m);
    return rc;
}

/* The data load, and the pinning of its images, on a thread of its own. */
typedef struct data_job {
    const gt_config *c;
    gt_data *data;
    int rc;
    int usage;      /* the error is the command line's (--val-split leaves a side empty) */
    double seconds; /* the load's own time */
    gt_err err;
} data_job;

/* The GPU whose context pins the images for the workers' and the evaluator's copies: the first
 * the run uses, so that no other GPU gets a context; -1 for CPU workers, which copy nothing. */
static int pin_device(const gt_config *c)
{
    if (c->cpu_workers > 0)
        return -1;
    if (c->gpus_given && !c->gpus_all)
        return c->ngpus > 0 ? c->gpus[0] : -1;
    return gt_cuda_device_count() > 0 ? 0 : -1;
}

static void *data_job_run(void *arg)
{
    data_job *j = arg;
    const gt_dataset *t = &j->data->train;
    double t0 = gt_now();
    j->rc = gt_data_load_sized(j->c->data, j->c->train_samples, j->c->image_size, j->data, &j->err);
    if (j->rc == 0 && j->c->command == GT_CMD_TRAIN && j->c->val_split > 0) {
        j->usage = gt_data_val_check(t->n, j->c->val_split, &j->err) != 0;
        j->rc = gt_data_split_val(j->data, j->c->val_split, &j->err);
        if (j->rc != 0)
            gt_data_free(j->data); /* loaded, but refused: the caller gets no data */
    }
    int dev = j->rc == 0 ? pin_device(j->c) : -1;
    if (dev >= 0) {
        const gt_dataset *v = &j->data->test, *h = &j->data->val;
        gt_host_register(dev, t->images, (size_t)t->n * t->c * t->h * t->w);
        gt_host_register(dev, v->images, (size_t)v->n * v->c * v->h * v->w);
        if (h->n)
            gt_host_register(dev, h->images, (size_t)h->n * h->c * h->h * h->w);
    }
    j->seconds = gt_now() - t0;
    return NULL;
}

static void data_release(gt_data *d)
{
    gt_host_unregister(d->train.images);
    gt_host_unregister(d->test.images);
    if (d->val.n)
        gt_host_unregister(d->val.images);
    gt_data_free(d);
}

/* Loads the data on a thread of its own (here, where none starts) while, for training, the model
 * is built from the data's header and the devices are opened for it (s). A device's error waits
 * in s until training would have opened them; the data's comes out here: -1, or -2 where
 * it is the command line's (exit 2). */
static int load_while_opening(const gt_config *c, gt_data *data, setup *s, gt_err *e)
{
    data_job job = {.c = c, .data = data};
    pthread_t t;
    int threaded = pthread_create(&t, NULL, data_job_run, &job) == 0;
    if (!threaded)
        data_job_run(&job);
    int ch, h, w, k;
    gt_err ignored; /* a --model that does not build is reported once the data is in */
    if (c->command != GT_CMD_EVAL && gt_data_probe(c->data, &ch, &h, &w, &k) == 0 &&
        setup_model(c, ch, h, w, k, s, &ignored) == 0)
        setup_open(c, s);
    if (threaded)
        pthread_join(t, NULL);
    s->data_s = job.seconds;
    if (job.rc != 0) {
        setup_close(s);
        *e = job.err;
        return job.usage ? -2 : -1;
    }
    return 0;
}

/* The command line as a shell would take it back (words with other than [-+=:,./@%_A-Za-z0-9]
 * single-quoted), cut at cap - 1 bytes; for the log. */
static void command_line(int argc, char **argv, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < argc && n + 1 < cap; i++) {
        const char *a = argv[i];
        int plain = *a && strspn(a, "-+=:,./@%_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                    "0123456789") == strlen(a);
        int k = snprintf(buf + n, cap - n, plain ? "%s%s" : "%s'%s'", i ? " " : "", a);
        n = k < 0 || (size_t)k >= cap - n ? cap - 1 : n + (size_t)k;
    }
}

/* Without --normalize, a resume takes its checkpoint's input step to the bit: a run at another
 * default (x / 255 alone before auto was the default) goes on as it was trained. */
static void resume_keep_norm(gt_config *c, const gt_ckpt_meta *meta)
{
    if (c->given & GT_GIVEN_NORMALIZE)
        return;
    if (!meta->norm.on) {
        c->normalize = GT_NORMALIZE_NONE;
        return;
    }
    if (meta->in_c < 1 || meta->in_c > GT_NORM_MAX_C)
        return; /* the load refuses the checkpoint */
    c->normalize = GT_NORMALIZE_GIVEN;
    c->norm_given = meta->norm;
    c->norm_count = meta->in_c;
}

/* --resume: the options of the checkpoint's run that the command line leaves out (cli.h
 * gt_cli_resume_args) are parsed again into c with the command line's own, so the run goes on
 * with its --lr, --schedule, --epochs, --model, ... and its input step (resume_keep_norm);
 * carried (cap bytes) gets them for a note. A checkpoint that cannot be read is left to the
 * resume itself to report. 0, or -1 with a command-line error in e. */
static int resume_carry(gt_config *c, int argc, char **argv, char *carried, size_t cap, gt_err *e)
{
    carried[0] = 0;
    if (c->command != GT_CMD_TRAIN || !c->resume[0])
        return 0;
    char path[GT_PATHLEN];
    snprintf(path, sizeof path, "%s", c->resume);
    gt_ckpt_meta *meta = malloc(sizeof *meta);
    gt_err unread = {{0}};
    if (!meta)
        return gt_fail(e, "out of memory reading %s", path);
    if (gt_ckpt_read_meta(path, meta, &unread) != 0) {
        free(meta);
        return 0; /* the load says why */
    }
    int rc = 0;
    if (meta->run_options[0]) {
        int n = 0;
        char **args = NULL;
        const char *model = gt_model_builtin_spec(meta->model) ? meta->model : meta->model_spec;
        rc = gt_cli_resume_args(meta->run_options, model, argc, argv, &n, &args, carried, cap, e);
        if (rc == 0) {
            rc = gt_cli_parse(n, args, c, stdout, e) == 0 ? 0 : -1;
            gt_cli_free_args(args);
        }
    }
    if (rc == 0)
        resume_keep_norm(c, meta);
    free(meta);
    if (rc != 0) {
        char why[GT_ERRLEN];
        snprintf(why, sizeof why, "%s", e->msg);
        return gt_fail(e, "--resume %s: %s", path, why);
    }
    return 0;
}

int main(int argc, char **argv)
{
    setup su = {.launched = launch_time(), .data_s = -1, .devices_s = -1};
    char command[2048];
    command_line(argc, argv, command, sizeof command);
    gt_config c;
    gt_err e = {{0}};
    int pr = gt_cli_parse(argc, argv, &c, stdout, &e);
    if (pr == 1)
        return 0;
    if (pr != 0) {
        fprintf(stderr, "gputrain: %s (see gputrain --help)\n", e.msg);
        return EXIT_USAGE;
    }
    if (c.command == GT_CMD_PREDICT) { /* one process, on the CPU */
        int usage = 0;
        if (gt_predict_run(&c, stdout, &usage, &e) == 0)
            return 0;
        fprintf(stderr, "gputrain: %s\n", e.msg);
        return usage ? EXIT_USAGE : EXIT_FAILED;
    }
    char carried[GT_RUN_OPTIONS_LEN];
    if (resume_carry(&c, argc, argv, carried, sizeof carried, &e) != 0) {
        fprintf(stderr, "gputrain: %s\n", e.msg);
        return EXIT_USAGE;
    }
    gt_cluster_set_timeout(c.host_timeout);
    if (gt_cluster_init(&e) != 0)
        return die(&e, EXIT_FAILED);
    char model_note[GT_RECIPE_LEN * 2] = "";
    if (c.command == GT_CMD_TRAIN) /* the device count only where it matters */
        gt_recipe_model(&c, gt_recipe_is_resnet(&c) && run_on_gpus(&c) ? run_workers(&c) : 0,
                        model_note, sizeof model_note);
    if (gt_cluster_rank() != 0) {
        c.quiet = 1;
        c.progress = 0;
    }
    if (carried[0] && !c.quiet)
        printf("note: --resume: the run's own %s again (a flag given here replaces its own)\n",
               carried);
    if (model_note[0] && !c.quiet)
        printf("note: %s\n", model_note);
    struct stat rs; /* a resumed run saves to its file (one that is no file is refused on reading) */
    const char *ckflag = "--checkpoint";
    if (c.command != GT_CMD_EVAL && c.resume[0] && !c.checkpoint[0] && stat(c.resume, &rs) == 0 &&
        S_ISREG(rs.st_mode)) {
        snprintf(c.checkpoint, sizeof c.checkpoint, "%s", c.resume);
        ckflag = "--resume";
    }
    int lock = -1, best_lock = -1, usage = 0; /* the checkpoints' locks: held until the end */
    if (c.command != GT_CMD_EVAL && gt_cluster_rank() == 0 &&
        check_paths(&c, ckflag, &lock, &best_lock, &usage, &e) != 0)
        return usage ? usage_error(&e) : die(&e, EXIT_FAILED);

    gt_data data;
    int loaded = load_while_opening(&c, &data, &su, &e);
    if (loaded != 0)
        return loaded == -2 ? usage_error(&e) : die(&e, EXIT_FAILED);
    if (gt_cluster_rank() == 0 && check_log_data(&c, &data, &e) != 0) {
        setup_close(&su);
        data_release(&data);
        return usage_error(&e);
    }
    if (c.command != GT_CMD_EVAL && check_model_spec(&c, &data, &e) != 0) {
        setup_close(&su);
        data_release(&data);
        return usage_error(&e); /* a bad --model is a command-line error */
    }
    int left = c.command != GT_CMD_EVAL && c.resume[0]
                   ? resume_settings(&c, &data, argc, argv, &usage, &e) : 0;
    if (left != 0) {
        setup_close(&su);
        data_release(&data);
        if (left < 0)
            return usage ? usage_error(&e) : die(&e, EXIT_FAILED);
        gt_cluster_finalize();
        return 0;
    }
    int rc, interrupted = 0;
    usage = 0;
    if (c.command == GT_CMD_EVAL) {
        rc = gt_cluster_rank() == 0 ? cmd_eval(&c, &data, &e) : 0;
    } else {
        gt_run_result *res = calloc(1, sizeof *res);
        rc = res ? cmd_train(&c, command, &data, &su, res, &interrupted, &usage, &e)
                 : gt_fail(&e, "out of memory");
        gt_run_result_free(res);
        free(res);
    }
    setup_close(&su);
    data_release(&data);
    if (rc != 0)
        return die(&e, usage ? EXIT_USAGE : EXIT_FAILED);
    gt_cluster_finalize();
    if (interrupted)
        return 128 + interrupted;
    return 0;
}
