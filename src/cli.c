/* cli.c - the command line. One getopt_long table names every option; each value goes through a
 * strict parser (whole numbers, finite reals, enum words, bounded strings) that refuses anything it
 * cannot read completely, with one line naming the flag and the value. Options must be spelt in
 * full and given at most once, so a typo or a repeated flag never silently changes a run. */
#include "gputrain/model.h" /* GT_SPECLEN, which config.h uses */
#include "gputrain/cli.h"
#include "gputrain/names.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef GT_VERSION
#define GT_VERSION "dev"
#endif

#define CLI_MAX_GPU_ORDINAL 1023

/* What this build can run on, for --version (and for scripts that must know, e.g. tests/cli_mpi.sh). */
#if defined(GT_HAVE_NCCL)
#define CLI_BACKEND_GPU "cpu cuda nccl"
#elif defined(GT_HAVE_CUDA)
#define CLI_BACKEND_GPU "cpu cuda"
#else
#define CLI_BACKEND_GPU "cpu"
#endif
#ifdef GT_HAVE_MPI
#define CLI_BACKENDS CLI_BACKEND_GPU " mpi"
#else
#define CLI_BACKENDS CLI_BACKEND_GPU
#endif

enum cli_opt {
    OPT_GPUS = 256, OPT_MODE, OPT_STRIPES, OPT_STALENESS, OPT_SYNC_EVERY, OPT_BALANCE, OPT_OVERLAP, OPT_TF32,
    OPT_MODEL, OPT_DATA, OPT_TRAIN_SAMPLES, OPT_BATCH, OPT_EPOCHS, OPT_SEED,
    OPT_EVAL_EVERY, OPT_OPTIMIZER, OPT_LR, OPT_MOMENTUM, OPT_NESTEROV, OPT_WEIGHT_DECAY, OPT_BETA1,
    OPT_BETA2, OPT_EPS, OPT_SCHEDULE, OPT_WARMUP, OPT_STEP_EPOCHS, OPT_GAMMA, OPT_CHECKPOINT,
    OPT_CHECKPOINT_EVERY, OPT_KEEP, OPT_RESUME, OPT_INIT, OPT_ALLOW_NONFINITE, OPT_ON_NAN, OPT_INJECT_FAULT,
    OPT_STALL_TIMEOUT, OPT_HOST_TIMEOUT, OPT_LITERAL, OPT_ON_DIVERGE, OPT_LOG, OPT_LOG_STEPS,
    OPT_PROGRESS, OPT_NO_PROGRESS, OPT_QUIET, OPT_IGNORE_CLASSES, OPT_TOP, OPT_HELP, OPT_VERSION,
    OPT_END
};

const struct option gt_cli_options[] = {
    {"gpus", required_argument, NULL, OPT_GPUS},
    {"mode", required_argument, NULL, OPT_MODE},
    {"stripes", required_argument, NULL, OPT_STRIPES},
    {"staleness", required_argument, NULL, OPT_STALENESS},
    {"sync-every", required_argument, NULL, OPT_SYNC_EVERY},
    {"balance", required_argument, NULL, OPT_BALANCE},
    {"overlap", no_argument, NULL, OPT_OVERLAP},
    {"tf32", no_argument, NULL, OPT_TF32},
    {"model", required_argument, NULL, OPT_MODEL},
    {"data", required_argument, NULL, OPT_DATA},
    {"train-samples", required_argument, NULL, OPT_TRAIN_SAMPLES},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
    {"lr", required_argument, NULL, OPT_LR},
    {"momentum", required_argument, NULL, OPT_MOMENTUM},
    {"nesterov", no_argument, NULL, OPT_NESTEROV},
    {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
    {"beta1", required_argument, NULL, OPT_BETA1},
    {"beta2", required_argument, NULL, OPT_BETA2},
    {"eps", required_argument, NULL, OPT_EPS},
    {"schedule", required_argument, NULL, OPT_SCHEDULE},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"step-epochs", required_argument, NULL, OPT_STEP_EPOCHS},
    {"gamma", required_argument, NULL, OPT_GAMMA},
    {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
    {"checkpoint-every", required_argument, NULL, OPT_CHECKPOINT_EVERY},
    {"keep", required_argument, NULL, OPT_KEEP},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"init", required_argument, NULL, OPT_INIT},
    {"allow-nonfinite", no_argument, NULL, OPT_ALLOW_NONFINITE},
    {"on-nan", required_argument, NULL, OPT_ON_NAN},
    {"inject-fault", required_argument, NULL, OPT_INJECT_FAULT},
    {"stall-timeout", required_argument, NULL, OPT_STALL_TIMEOUT},
    {"host-timeout", required_argument, NULL, OPT_HOST_TIMEOUT},
    {"literal", no_argument, NULL, OPT_LITERAL},
    {"on-diverge", required_argument, NULL, OPT_ON_DIVERGE},
    {"log", required_argument, NULL, OPT_LOG},
    {"log-steps", no_argument, NULL, OPT_LOG_STEPS},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"ignore-classes", no_argument, NULL, OPT_IGNORE_CLASSES},
    {"top", required_argument, NULL, OPT_TOP},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* The allowed interval of a real-valued option, and how the messages state it. */
typedef struct cli_range {
    double lo, hi;
    int lo_open, hi_open;
    const char *text;
} cli_range;

static const cli_range RANGE_POSITIVE = {0, HUGE_VAL, 1, 0, "> 0"};
static const cli_range RANGE_NONNEG = {0, HUGE_VAL, 0, 0, ">= 0"};
static const cli_range RANGE_UNIT_LOW = {0, 1, 0, 1, "with 0 <= x < 1"};
static const cli_range RANGE_UNIT_HIGH = {0, 1, 1, 0, "with 0 < x <= 1"};

static const char *cli_option_name(int val)
{
    for (const struct option *o = gt_cli_options; o->name; o++)
        if (o->val == val)
            return o->name;
    return "?";
}

/* A whole number: optional '-', then decimal digits and nothing else (no spaces, no '+'). */
static int cli_parse_ll(const char *flag, const char *s, long long lo, long long hi, long long *out,
                        gt_err *e)
{
    const char *digits = s[0] == '-' ? s + 1 : s;
    if (!isdigit((unsigned char)digits[0]))
        return gt_fail(e, "--%s: '%s' is not a whole number", flag, s);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end)
        return gt_fail(e, "--%s: '%s' is not a whole number", flag, s);
    if (errno == ERANGE || v < lo || v > hi)
        return gt_fail(e, "--%s: %s is out of range (%lld..%lld)", flag, s, lo, hi);
    *out = v;
    return 0;
}

static int cli_parse_int(const char *flag, const char *s, int lo, int hi, int *out, gt_err *e)
{
    long long v;
    if (cli_parse_ll(flag, s, lo, hi, &v, e))
        return -1;
    *out = (int)v;
    return 0;
}

static int cli_parse_u64(const char *flag, const char *s, uint64_t *out, gt_err *e)
{
    if (!isdigit((unsigned char)s[0]))
        return gt_fail(e, "--%s: '%s' is not a non-negative whole number", flag, s);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        return gt_fail(e, "--%s: '%s' is not a non-negative whole number", flag, s);
    if (errno == ERANGE)
        return gt_fail(e, "--%s: %s is out of range (0..%" PRIu64 ")", flag, s, UINT64_MAX);
    *out = (uint64_t)v;
    return 0;
}

/* The leading decimal digits of s (at least one) as a number up to max; -1 if there are none or
 * the number is larger. */
static int cli_read_digits(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!isdigit((unsigned char)s[0]))
        return -1;
    errno = 0;
    *out = strtoull(s, NULL, 10);
    return errno == ERANGE || *out > max ? -1 : 0;
}

static int cli_in_range(double v, const cli_range *r)
{
    if (!isfinite(v))
        return 0;
    if (r->lo_open ? !(v > r->lo) : !(v >= r->lo))
        return 0;
    return r->hi_open ? v < r->hi : v <= r->hi;
}

/* The whole of s as a decimal real (no leading space, no hex, inf or nan). */
static int cli_read_real(const char *flag, const char *s, double *out, gt_err *e)
{
    char *end = NULL;
    /* decimal only: strtod would also take hex floats (0x1p-4), inf and nan */
    if (s[0] && !isspace((unsigned char)s[0]) && strspn(s, "0123456789.eE+-") == strlen(s))
        *out = strtod(s, &end);
    if (!end || end == s || *end)
        return gt_fail(e, "--%s: '%s' is not a number", flag, s);
    return 0;
}

static int cli_parse_double(const char *flag, const char *s, const cli_range *r, double *out,
                            gt_err *e)
{
    double v = 0;
    if (cli_read_real(flag, s, &v, e))
        return -1;
    if (!cli_in_range(v, r))
        return gt_fail(e, "--%s: '%s' must be a finite number %s", flag, s, r->text);
    *out = v;
    return 0;
}

/* The range is checked on the float actually stored, so that 1e39 (beyond float) or, for
 * --momentum, 0.9999999999 (1.0f) are refused, each saying why. */
static int cli_parse_float(const char *flag, const char *s, const cli_range *r, float *out,
                           gt_err *e)
{
    double v = 0;
    if (cli_read_real(flag, s, &v, e))
        return -1;
    if (!cli_in_range(v, r))
        return gt_fail(e, "--%s: '%s' must be a finite number %s", flag, s, r->text);
    if (!(fabs(v) <= FLT_MAX))
        return gt_fail(e, "--%s: '%s' is beyond a float's range: must be a finite number %s and "
                       "at most %.7g", flag, s, r->text, (double)FLT_MAX);
    if (!cli_in_range((float)v, r))
        return gt_fail(e, "--%s: '%s' is %g as a float: must be a finite number %s", flag, s,
                       (double)(float)v, r->text);
    *out = (float)v;
    return 0;
}

static int cli_copy_string(const char *flag, const char *s, char *dst, size_t cap, gt_err *e)
{
    size_t n = strlen(s);
    if (n == 0)
        return gt_fail(e, "--%s: the value '' is empty", flag);
    if (n >= cap)
        return gt_fail(e, "--%s: '%.60s...' is longer than %zu characters", flag, s, cap - 1);
    memcpy(dst, s, n + 1);
    return 0;
}

/* One GPU ordinal from a --gpus list element, checked against those already listed. */
static int cli_parse_gpu_ordinal(const char *s, size_t len, const int *gpus, int n, int *out,
                                 gt_err *e)
{
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return gt_fail(e, "--gpus: '%.*s' is not a GPU ordinal (0..%d)", (int)len, s,
                           CLI_MAX_GPU_ORDINAL);
        v = v * 10 + (s[i] - '0');
        if (v > CLI_MAX_GPU_ORDINAL)
            return gt_fail(e, "--gpus: %.*s is out of range (0..%d)", (int)len, s,
                           CLI_MAX_GPU_ORDINAL);
    }
    for (int i = 0; i < n; i++)
        if (gpus[i] == v)
            return gt_fail(e, "--gpus: GPU %d listed twice", v);
    *out = v;
    return 0;
}

static int cli_parse_gpu_list(const char *s, gt_config *c, gt_err *e)
{
    int gpus[GT_MAX_WORKERS];
    int n = 0;
    for (const char *p = s;; p++) {
        size_t len = strcspn(p, ",");
        if (len == 0)
            return gt_fail(e, "--gpus: '%s' has an empty element", s);
        if (n == GT_MAX_WORKERS)
            return gt_fail(e, "--gpus: '%s' lists more than %d GPUs", s, GT_MAX_WORKERS);
        if (cli_parse_gpu_ordinal(p, len, gpus, n, &gpus[n], e))
            return -1;
        n++;
        p += len;
        if (!*p)
            break;
    }
    memcpy(c->gpus, gpus, sizeof gpus[0] * (size_t)n);
    c->ngpus = n;
    return 0;
}

int gt_cli_parse_gpus(const char *s, gt_config *c, gt_err *e)
{
    int cpu = 0;
    if (!s || !*s)
        return gt_fail(e, "--gpus: '' is empty (give GPU ordinals like 0,1, 'all' or cpu:N)");
    if (strncmp(s, "cpu:", 4) == 0) {
        unsigned long long n;
        if (!s[4] || strspn(s + 4, "0123456789") != strlen(s + 4))
            return gt_fail(e, "--gpus: '%s' is not cpu:N with N a whole number", s);
        if (cli_read_digits(s + 4, GT_MAX_WORKERS, &n) || n < 1)
            return gt_fail(e, "--gpus: %s is out of range (cpu:1..cpu:%d)", s, GT_MAX_WORKERS);
        cpu = (int)n;
    } else if (strcmp(s, "all") != 0) {
        if (cli_parse_gpu_list(s, c, e))
            return -1;
    }
    c->cpu_workers = cpu;
    c->gpus_all = strcmp(s, "all") == 0;
    if (cpu || c->gpus_all)
        c->ngpus = 0;
    c->gpus_given = 1;
    return 0;
}

static int cli_parse_checkpoint_every(const char *s, gt_config *c, gt_err *e)
{
    size_t ndigits = strspn(s, "0123456789");
    int steps = ndigits > 0 && strcmp(s + ndigits, "s") == 0;
    unsigned long long v;
    if (ndigits == 0 || (s[ndigits] && !steps))
        return gt_fail(e, "--checkpoint-every: '%s' is not N (epochs) or Ns (steps), N >= 1", s);
    if (cli_read_digits(s, INT_MAX, &v) || v < 1)
        return gt_fail(e, "--checkpoint-every: %s is out of range (1..%d)", s, INT_MAX);
    c->checkpoint_every = (int)v;
    c->checkpoint_every_steps = steps;
    return 0;
}

static int cli_parse_inject_fault(const char *s, gt_config *c, gt_err *e)
{
    size_t nworker = strspn(s, "0123456789");
    const char *step = s + nworker + 1;
    size_t nstep = s[nworker] == ':' ? strspn(step, "0123456789") : 0;
    unsigned long long w, t;
    if (nworker == 0 || nstep == 0 || step[nstep])
        return gt_fail(e, "--inject-fault: '%s' is not WORKER:STEP (two whole numbers)", s);
    if (cli_read_digits(s, GT_MAX_WORKERS - 1, &w) || cli_read_digits(step, INT_MAX, &t))
        return gt_fail(e, "--inject-fault: %s is out of range (worker 0..%d, step 0..%d)", s,
                       GT_MAX_WORKERS - 1, INT_MAX);
    c->inject_worker = (int)w;
    c->inject_step = (int)t;
    return 0;
}

static int cli_parse_train_samples(const char *s, gt_config *c, gt_err *e)
{
    long long v;
    if (cli_parse_ll("train-samples", s, 1, UINT32_MAX, &v, e))
        return -1;
    c->train_samples = (uint32_t)v;
    return 0;
}

/* The options whose value is a word of a name table (names.h), and the field each one sets. */
static int cli_apply_enum(int opt, const char *arg, gt_config *c, gt_err *e)
{
    static const struct {
        int opt;
        gt_name_set set;
    } enums[] = {{OPT_MODE, GT_NAMES_MODE}, {OPT_BALANCE, GT_NAMES_BALANCE},
                 {OPT_OPTIMIZER, GT_NAMES_OPTIMIZER}, {OPT_SCHEDULE, GT_NAMES_SCHEDULE},
                 {OPT_ON_NAN, GT_NAMES_ON_NAN}, {OPT_ON_DIVERGE, GT_NAMES_ON_DIVERGE}};
    int v, found = -1;
    for (size_t i = 0; i < sizeof enums / sizeof *enums; i++)
        if (enums[i].opt == opt)
            found = (int)i;
    if (found < 0)
        return gt_fail(e, "--%s: no parser for this option", cli_option_name(opt));
    if (gt_name_parse(enums[found].set, cli_option_name(opt), arg, &v, e))
        return -1;
    switch (enums[found].set) {
    case GT_NAMES_MODE: c->mode = (gt_mode)v; break;
    case GT_NAMES_BALANCE: c->balance = (gt_balance)v; break;
    case GT_NAMES_OPTIMIZER: c->optim.kind = (gt_opt_kind)v; break;
    case GT_NAMES_SCHEDULE: c->optim.schedule = (gt_sched_kind)v; break;
    case GT_NAMES_ON_NAN: c->on_nan = (gt_on_nan)v; break;
    case GT_NAMES_ON_DIVERGE: c->on_diverge = (gt_on_diverge)v; break;
    }
    return 0;
}

/* Sets the field that option opt controls from its value arg. */
static int cli_apply(int opt, const char *arg, gt_config *c, gt_err *e)
{
    const char *flag = cli_option_name(opt);
    gt_optim_cfg *o = &c->optim;
    switch (opt) {
    case OPT_GPUS: return gt_cli_parse_gpus(arg, c, e);
    case OPT_STRIPES: return cli_parse_int(flag, arg, 0, 65536, &c->stripes, e);
    case OPT_STALENESS: return cli_parse_int(flag, arg, 0, GT_MAX_STALENESS, &c->staleness, e);
    case OPT_SYNC_EVERY: return cli_parse_int(flag, arg, 1, 1000000, &c->sync_every, e);
    case OPT_TF32: c->tf32 = 1; return 0;
    case OPT_OVERLAP: c->overlap = 1; return 0;
    case OPT_MODEL: return cli_copy_string(flag, arg, c->model, sizeof c->model, e);
    case OPT_DATA: return cli_copy_string(flag, arg, c->data, sizeof c->data, e);
    case OPT_TRAIN_SAMPLES: return cli_parse_train_samples(arg, c, e);
    case OPT_BATCH: return cli_parse_int(flag, arg, 1, GT_MAX_BATCH, &c->batch, e);
    case OPT_EPOCHS: return cli_parse_int(flag, arg, 1, GT_MAX_EPOCHS, &c->epochs, e);
    case OPT_SEED: return cli_parse_u64(flag, arg, &c->seed, e);
    case OPT_EVAL_EVERY: return cli_parse_int(flag, arg, 0, INT_MAX, &c->eval_every, e);
    case OPT_LR: return cli_parse_float(flag, arg, &RANGE_POSITIVE, &o->lr, e);
    case OPT_MOMENTUM: return cli_parse_float(flag, arg, &RANGE_UNIT_LOW, &o->momentum, e);
    case OPT_NESTEROV: o->nesterov = 1; return 0;
    case OPT_WEIGHT_DECAY: return cli_parse_float(flag, arg, &RANGE_NONNEG, &o->weight_decay, e);
    case OPT_BETA1: return cli_parse_float(flag, arg, &RANGE_UNIT_LOW, &o->beta1, e);
    case OPT_BETA2: return cli_parse_float(flag, arg, &RANGE_UNIT_LOW, &o->beta2, e);
    case OPT_EPS: return cli_parse_float(flag, arg, &RANGE_POSITIVE, &o->eps, e);
    case OPT_WARMUP: return cli_parse_float(flag, arg, &RANGE_NONNEG, &o->warmup_epochs, e);
    case OPT_STEP_EPOCHS: return cli_parse_float(flag, arg, &RANGE_POSITIVE, &o->step_epochs, e);
    case OPT_GAMMA: return cli_parse_float(flag, arg, &RANGE_UNIT_HIGH, &o->gamma, e);
    case OPT_CHECKPOINT: return cli_copy_string(flag, arg, c->checkpoint, sizeof c->checkpoint, e);
    case OPT_CHECKPOINT_EVERY: return cli_parse_checkpoint_every(arg, c, e);
    case OPT_KEEP: return cli_parse_int(flag, arg, 0, GT_MAX_KEEP, &c->keep, e);
    case OPT_RESUME: return cli_copy_string(flag, arg, c->resume, sizeof c->resume, e);
    case OPT_INIT: return cli_copy_string(flag, arg, c->init, sizeof c->init, e);
    case OPT_INJECT_FAULT: return cli_parse_inject_fault(arg, c, e);
    case OPT_STALL_TIMEOUT:
        return cli_parse_double(flag, arg, &RANGE_POSITIVE, &c->stall_timeout, e);
    case OPT_HOST_TIMEOUT:
        return cli_parse_double(flag, arg, &RANGE_NONNEG, &c->host_timeout, e);
    case OPT_LOG: return cli_copy_string(flag, arg, c->log_path, sizeof c->log_path, e);
    case OPT_LOG_STEPS: c->log_steps = 1; return 0;
    case OPT_LITERAL: c->literal = 1; return 0;
    case OPT_PROGRESS: c->progress = 1; return 0;
    case OPT_NO_PROGRESS: c->progress = 0; return 0;
    case OPT_QUIET: c->quiet = 1; return 0;
    case OPT_ALLOW_NONFINITE: c->allow_nonfinite = 1; return 0;
    case OPT_IGNORE_CLASSES: c->ignore_classes = 1; return 0;
    case OPT_TOP: return cli_parse_int(flag, arg, 1, GT_MAX_CLASSES, &c->top, e);
    default: return cli_apply_enum(opt, arg, c, e);
    }
}

/* getopt_long accepts unambiguous prefixes ("--epo"); refusing them keeps scripts valid when a
 * new option later makes a prefix ambiguous. */
static int cli_spelt_in_full(const char *word, const char *name)
{
    size_t n = strlen(name);
    return strncmp(word, "--", 2) == 0 && strncmp(word + 2, name, n) == 0 &&
           (word[2 + n] == 0 || word[2 + n] == '=');
}

/* The message for getopt's '?' (unknown option, or a value given to a flag) and ':' (no value). */
static int cli_fail_getopt(int ret, const char *word, gt_err *e)
{
    if (ret == ':')
        return gt_fail(e, "--%s needs a value", cli_option_name(optopt));
    if (optopt >= OPT_GPUS)
        return gt_fail(e, "--%s takes no value (got '%s')", cli_option_name(optopt), word);
    if (word[0] == '-' && word[1] != '-')
        return gt_fail(e, "unknown option '%s' (options start with --)", word);
    return gt_fail(e, "unknown option '%s'", word);
}

/* The GT_GIVEN_* bit of an option the recipe could change, 0 for the others. */
static unsigned cli_given_bit(int opt)
{
    switch (opt) {
    case OPT_LR: return GT_GIVEN_LR;
    case OPT_MOMENTUM: return GT_GIVEN_MOMENTUM;
    case OPT_WARMUP: return GT_GIVEN_WARMUP;
    case OPT_ON_NAN: return GT_GIVEN_ON_NAN;
    default: return 0;
    }
}

/* Each option at most once; --progress and --no-progress count as one setting. */
static int cli_check_repeat(int opt, const char **seen, gt_err *e)
{
    int slot = (opt == OPT_NO_PROGRESS ? OPT_PROGRESS : opt) - OPT_GPUS;
    const char *name = cli_option_name(opt);
    if (seen[slot] && strcmp(seen[slot], name) == 0)
        return gt_fail(e, "--%s given twice", name);
    if (seen[slot])
        return gt_fail(e, "--%s and --%s contradict each other", seen[slot], name);
    seen[slot] = name;
    return 0;
}

static int cli_check_combination(const gt_config *c, gt_err *e)
{
    if (c->resume[0] && c->init[0])
        return gt_fail(e, "--resume '%s' and --init '%s' cannot be used together", c->resume,
                       c->init);
    if (c->command != GT_CMD_TRAIN && !c->checkpoint[0])
        return gt_fail(e, "%s: --checkpoint PATH is required",
                       c->command == GT_CMD_EVAL ? "eval" : "predict");
    if (c->command == GT_CMD_PREDICT && c->nitems == 0)
        return gt_fail(e, "predict: name at least one image file or IDX range (test:0-9)");
    if (c->overlap && c->mode != GT_MODE_HOGWILD)
        return gt_fail(e, "--overlap: only --mode hogwild overlaps its pushes, not '%s'",
                       gt_mode_name(c->mode));
    const gt_mode_row *mode = gt_mode_row_of(c->mode);
    if (mode && mode->needs_nccl && c->cpu_workers > 0)
        return gt_fail(e, "--mode %s: needs GPUs and NCCL, not --gpus cpu:%d (use --mode sync "
                       "for the same math)", gt_mode_name(c->mode), c->cpu_workers);
    if (mode && mode->needs_nccl && c->on_nan == GT_NAN_SKIP)
        return gt_fail(e, "--on-nan skip: not available with --mode %s, where every GPU must "
                       "take the same step", gt_mode_name(c->mode));
    return 0;
}

/* predict: takes the word at optind as an image or range, or with rest every word left (those
 * after "--"); getopt then goes on with the options after it. */
static int cli_add_items(int argc, char **argv, gt_config *c, int rest, gt_err *e)
{
    do {
        if (c->nitems == GT_MAX_ITEMS)
            return gt_fail(e, "predict: more than %d images or ranges", GT_MAX_ITEMS);
        c->items[c->nitems++] = argv[optind++];
    } while (rest && optind < argc);
    return 0;
}

/* Runs getopt over argv[0..argc) (argv[0] a program or command word). Returns 0 when every option
 * was read, 1 after printing help or the version, -1 on the first bad one. */
static int cli_parse_options(int argc, char **argv, gt_config *c, FILE *out, gt_err *e)
{
    const char *seen[OPT_END - OPT_GPUS] = {0};
    int index = -1;
    opterr = 0;
    optind = 0;
    for (;;) {
        int at = optind > 0 ? optind : 1;
        const char *word = at < argc ? argv[at] : "";
        if (c->command == GT_CMD_PREDICT && optind > 0 && strcmp(word, "--") == 0) {
            optind++; /* getopt's own "--" handling would go back to an item already taken */
            return optind < argc ? cli_add_items(argc, argv, c, 1, e) : 0;
        }
        int opt = getopt_long(argc, argv, "+:h", gt_cli_options, &index);
        if (opt == -1 && c->command == GT_CMD_PREDICT && optind < argc) {
            if (cli_add_items(argc, argv, c, optind == 2 && strcmp(argv[1], "--") == 0, e) != 0)
                return -1;
            if (optind < argc)
                continue;
            break;
        }
        if (opt == -1)
            break;
        if (opt == '?' || opt == ':')
            return cli_fail_getopt(opt, word, e);
        if (opt != 'h' && !cli_spelt_in_full(word, gt_cli_options[index].name))
            return gt_fail(e, "unknown option '%s' (write --%s in full)", word,
                           gt_cli_options[index].name);
        if (opt == 'h' || opt == OPT_HELP) {
            gt_cli_usage(out);
            return 1;
        }
        if (opt == OPT_VERSION) {
            fprintf(out, "gputrain %s (%s)\n", GT_VERSION, CLI_BACKENDS);
            return 1;
        }
        if (cli_check_repeat(opt, seen, e) || cli_apply(opt, optarg, c, e))
            return -1;
        c->given |= cli_given_bit(opt);
    }
    if (optind < argc)
        return gt_fail(e, "unexpected argument '%s'", argv[optind]);
    return 0;
}

int gt_cli_parse(int argc, char **argv, gt_config *c, FILE *out, gt_err *e)
{
    gt_config_defaults(c);
    if (argc < 1 || !argv)
        return 0;
    int skip = 0;
    if (argc > 1 && strcmp(argv[1], "train") == 0) {
        skip = 1;
    } else if (argc > 1 && strcmp(argv[1], "eval") == 0) {
        c->command = GT_CMD_EVAL;
        skip = 1;
    } else if (argc > 1 && strcmp(argv[1], "predict") == 0) {
        c->command = GT_CMD_PREDICT;
        skip = 1;
    }
    int rc = cli_parse_options(argc - skip, argv + skip, c, out, e);
    if (rc)
        return rc;
    c->optim.total_epochs = (float)c->epochs;
    return cli_check_combination(c, e);
}

/* Each mode's row: its name, then its help lines under one another. */
static void cli_usage_modes(FILE *out)
{
    for (int i = 0; i < gt_mode_count(); i++) {
        const gt_mode_row *row = gt_mode_row_at(i);
        const char *line = row->help;
        fprintf(out, "      %-10s ", row->head.name);
        for (;;) {
            size_t n = strcspn(line, "\n");
            fprintf(out, "%.*s\n", (int)n, line);
            if (!line[n])
                break;
            line += n + 1;
            fprintf(out, "%17s", "");
        }
    }
}

static void cli_usage_devices(FILE *out, const gt_config *d)
{
    fprintf(out,
        "Devices and modes:\n"
        "  --gpus LIST|all|cpu:N  GPU ordinals such as 0,1,2,3, every GPU (all), or N CPU worker\n"
        "                         threads; 1..%d workers (default: all GPUs if there are any,\n"
        "                         else cpu:1)\n"
        "  --mode MODE            how the workers combine their gradients (default %s):\n",
        GT_MAX_WORKERS, gt_mode_name(d->mode));
    cli_usage_modes(out);
    fprintf(out,
        "  --stripes N            hogwild lock stripes, 0..65536 (default: auto, one per 16 KiB\n"
        "                         of parameters, 1..256). 0 is lock-free, true\n"
        "                         Hogwild: no locks, relaxed atomics; updates may interleave\n"
        "                         element-wise and be lost\n"
        "  --staleness N          ssp: steps a worker may run ahead, 0..%d (default %d)\n"
        "  --sync-every N         local: steps between averages; across hosts (mpirun), also\n"
        "                         hogwild and ssp: steps between averages of the hosts' stores,\n"
        "                         1..1000000 (default %d)\n"
        "  --balance static|dynamic\n"
        "                         hogwild: dynamic, a free worker takes the next batch, so faster\n"
        "                         devices do more; static, equal shares (default %s)\n"
        "  --overlap              hogwild: pull and begin step k+1 before pushing step k, so\n"
        "                         a GPU computes while the host pushes; every step misses its\n"
        "                         predecessor's update (one step more staleness; default off).\n"
        "                         With SGD each step starts from the pulled parameters minus\n"
        "                         its predecessor's plain SGD step (weight prediction; off\n"
        "                         with --literal)\n"
        "  --tf32                 allow TF32 tensor-core math on GPUs (default off)\n\n",
        GT_MAX_STALENESS, d->staleness, d->sync_every, gt_name(GT_NAMES_BALANCE, (int)d->balance));
}

static void cli_usage_model(FILE *out, const gt_config *d)
{
    fprintf(out,
        "Model and data:\n"
        "  --model NAME|SPEC|@FILE  lenet5, lenet5-classic, mlp, cnn-wide, a layer spec, or @FILE\n"
        "                         holding one (default %s)\n"
        "  --data DIR             IDX files or one folder per class (default: the usual places)\n"
        "  --train-samples N      train on the first N samples only, N >= 1 (default: all)\n"
        "  --batch N              samples per step and worker, in every mode, 1..%d\n"
        "                         (default %d)\n"
        "  --epochs N             passes over the training set, 1..%d (default %d)\n"
        "  --seed N               initialisation and shuffling seed, 0..2^64-1\n"
        "                         (default %" PRIu64 ")\n"
        "  --eval-every N         evaluate every N steps of each worker, also at epoch ends;\n"
        "                         0 = at epoch ends only, 0..%d (default %d)\n\n",
        d->model, GT_MAX_BATCH, d->batch, GT_MAX_EPOCHS, d->epochs, d->seed, INT_MAX,
        d->eval_every);
}

static void cli_usage_optim(FILE *out, const gt_optim_cfg *o)
{
    char words[2][GT_NAMES_LIST_LEN];
    gt_name_list(GT_NAMES_OPTIMIZER, "|", words[0], sizeof words[0]);
    gt_name_list(GT_NAMES_SCHEDULE, "|", words[1], sizeof words[1]);
    fprintf(out,
        "Optimisation:\n"
        "  --optimizer %-10s PyTorch SGD or Adam (default %s); adam keeps the --lr default\n"
        "                         and ignores --momentum\n"
        "  --lr X                 base learning rate, > 0 (default %g)\n"
        "  --momentum X           SGD momentum, 0 <= x < 1 (default %g)\n"
        "  --nesterov             SGD Nesterov momentum (default off)\n"
        "  --weight-decay X       L2 term added to the gradient, >= 0 (default %g)\n"
        "  --beta1 X              Adam first-moment decay, 0 <= x < 1 (default %g)\n"
        "  --beta2 X              Adam second-moment decay, 0 <= x < 1 (default %g)\n"
        "  --eps X                Adam denominator term, > 0 (default %g)\n"
        "  --schedule %s\n"
        "                         learning rate after warm-up; cosine decays to 0 at the end of\n"
        "                         training (default %s)\n"
        "  --warmup EPOCHS        linear warm-up from 0 over this many epochs, >= 0 (default %g)\n"
        "  --step-epochs X        step: multiply the rate by --gamma every X epochs, > 0\n"
        "                         (default %g)\n"
        "  --gamma X              step factor, 0 < x <= 1 (default %g)\n\n",
        words[0], gt_optimizer_name(o->kind), o->lr, o->momentum, o->weight_decay, o->beta1,
        o->beta2, o->eps, words[1], gt_schedule_name(o->schedule), o->warmup_epochs, o->step_epochs,
        o->gamma);
}

static void cli_usage_checkpoints(FILE *out, const gt_config *d)
{
    fprintf(out,
        "Checkpoints and faults:\n"
        "  --checkpoint PATH      write checkpoints here; for eval, the one to measure\n"
        "                         (default: none)\n"
        "  --checkpoint-every N|Ns  every N epochs, or every N steps with an s suffix, N >= 1\n"
        "                         (default: at the end only)\n"
        "  --keep K               older checkpoints kept beside the newest, 0..%d (default %d)\n"
        "  --resume PATH          continue a run: parameters, optimizer state and progress\n"
        "                         (default: none; not with --init)\n"
        "  --init PATH            start a fresh run from a checkpoint's parameters\n"
        "                         (default: none)\n"
        "  --allow-nonfinite      load a checkpoint holding NaN or Inf values (default: refused)\n"
        "  --ignore-classes       eval, predict: use a checkpoint whose class names differ\n"
        "                         from the data's (default: refused)\n"
        "  --top K                predict: classes printed per image, 1..%d (default %d)\n"
        "  --on-nan stop|skip     on a non-finite loss, stop the run or skip the update\n"
        "                         (default: neither; the guard acts as --on-diverge says)\n"
        "  --on-diverge recover|stop  a loss that goes non-finite, climbs well above its start\n"
        "                         or stays at chance: roll back to the last good parameters\n"
        "                         and lower the step size, or stop with an error (default %s)\n"
        "  --literal              run the recipe exactly as given: no corrections of momentum,\n"
        "                         step size or warm-up for the worker count and mode, no\n"
        "                         weight prediction for --overlap\n"
        "                         (default off)\n"
        "  --inject-fault WORKER:STEP  make a worker (numbered across hosts under mpirun) fail\n"
        "                         at its step, to test recovery\n"
        "                         (default: none)\n"
        "  --stall-timeout SECONDS  warn on stderr when a worker makes no progress for this\n"
        "                         long, once until it moves again; it is not counted as failed\n"
        "                         and the run goes on, > 0 (default: off)\n"
        "  --host-timeout SECONDS  under mpirun: a host that waits this long for the others in\n"
        "                         a collective ends the run, naming itself; 0 waits forever\n"
        "                         (default %g)\n\n",
        GT_MAX_KEEP, d->keep, GT_MAX_CLASSES, d->top, gt_name(GT_NAMES_ON_DIVERGE, (int)d->on_diverge), d->host_timeout);
}

static void cli_usage_output(FILE *out)
{
    fprintf(out,
        "Output:\n"
        "  --log FILE             write one JSON line per evaluation and event (default: none)\n"
        "  --log-steps            with --log, also one line per training step with its loss (default: off)\n"
        "  --progress             show a progress line (default: when stderr is a terminal)\n"
        "  --no-progress          never show it (default: when stderr is a terminal)\n"
        "  --quiet                print only the final result line (done: ...) on stdout, and\n"
        "                         errors and warnings on stderr; no progress line unless\n"
        "                         --progress (default off)\n"
        "  --help                 print this help and exit\n"
        "  --version              print the version and exit\n");
}

void gt_cli_usage(FILE *out)
{
    gt_config d;
    gt_config_defaults(&d);
    fprintf(out,
        "Usage: gputrain [train|eval|predict] [options]\n"
        "  train (the default) trains a model; eval measures a saved checkpoint:\n"
        "  gputrain eval --checkpoint PATH [--data DIR] [--gpus LIST] [--batch N]\n"
        "  predict prints each image's top classes (PNG/JPEG files, or IDX ranges such as\n"
        "  test:0-9 of --data's splits, with the true label):\n"
        "  gputrain predict --checkpoint PATH [--top K] [--data DIR] IMAGE|SPLIT:FIRST-LAST...\n"
        "Options are spelt in full and given at most once.\n\n");
    cli_usage_devices(out, &d);
    cli_usage_model(out, &d);
    cli_usage_optim(out, &d.optim);
    cli_usage_checkpoints(out, &d);
    cli_usage_output(out);
}
