/* cli.c - the command line. Every option is one row of cli_rows: its name, the form of its value,
 * how it is read (type, bounds), the gt_config field it sets (offsetof), the commands it applies
 * to and its help sentence. The getopt table, the parser, the check that an option belongs to the
 * command, and --help with each option's range and default (read from gt_config_defaults) are all
 * generated from the rows, so none can drift from the others. Each value goes through a strict
 * parser (whole numbers, finite reals, enum words, bounded strings) that refuses anything it cannot
 * read completely, with one line naming the flag and the value. Options must be spelt in full and
 * given at most once, so a typo or a repeated flag never silently changes a run. */
#include "gputrain/model.h" /* GT_SPECLEN, which config.h uses */
#include "gputrain/cli.h"
#include "gputrain/json.h"
#include "gputrain/names.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#ifndef GT_VERSION
#define GT_VERSION "dev"
#endif

#define CLI_MAX_GPU_ORDINAL 1023
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x) /* a limit's digits, for help sentences of hand-parsed options */

/* What this build can run on, for --version (and for scripts that must know, e.g.
 * tests/cli_mpi.sh). */
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

/* The allowed interval of a real-valued option, how the messages state it and how --help does. */
typedef struct cli_range {
    double lo, hi;
    int lo_open, hi_open;
    const char *text;
    const char *help;
} cli_range;

static const cli_range RANGE_POSITIVE = {0, HUGE_VAL, 1, 0, "> 0", "> 0"};
static const cli_range RANGE_NONNEG = {0, HUGE_VAL, 0, 0, ">= 0", ">= 0"};
static const cli_range RANGE_UNIT_LOW = {0, 1, 0, 1, "with 0 <= x < 1", "0 <= x < 1"};
static const cli_range RANGE_UNIT_HIGH = {0, 1, 1, 0, "with 0 < x <= 1", "0 < x <= 1"};

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

/* --data: a folder, or synthetic:CxHxW:K[:N], whose spec is checked here so that a bad one is a
 * command-line error. */
static int cli_parse_data(const char *s, gt_config *c, gt_err *e)
{
    if (cli_copy_string("data", s, c->data, sizeof c->data, e) != 0)
        return -1;
    return gt_synth_check(s, e);
}

/* --image-size HxW, or N for N x N. */
static int cli_parse_image_size(const char *s, gt_config *c, gt_err *e)
{
    size_t nh = strspn(s, "0123456789");
    const char *ws = s[nh] == 'x' ? s + nh + 1 : s;
    size_t nw = strspn(ws, "0123456789");
    unsigned long long h, w;
    if (nh == 0 || nw == 0 || ws[nw])
        return gt_fail(e, "--image-size: '%s' is not HxW or N (whole numbers)", s);
    if (cli_read_digits(s, GT_DATA_MAX_SIDE, &h) || cli_read_digits(ws, GT_DATA_MAX_SIDE, &w) ||
        h < 1 || w < 1)
        return gt_fail(e, "--image-size: %s is out of range (sides 1..%u)", s, GT_DATA_MAX_SIDE);
    c->image_size[0] = (int)h;
    c->image_size[1] = (int)w;
    return 0;
}

/* --augment none, or a list of crop:P and flip. */
static int cli_parse_augment(const char *s, gt_config *c, gt_err *e)
{
    return gt_augment_parse(s, &c->augment, e);
}

/* --normalize none | auto | M1,M2,.../S1,S2,... */
static int cli_parse_normalize(const char *s, gt_config *c, gt_err *e)
{
    c->norm_count = 0;
    if (strcmp(s, "none") == 0 || strcmp(s, "auto") == 0) {
        c->normalize = s[0] == 'a' ? GT_NORMALIZE_AUTO : GT_NORMALIZE_NONE;
        return 0;
    }
    gt_err why;
    if (gt_norm_parse("--normalize", s, &c->norm_given, &c->norm_count, &why) != 0)
        return gt_fail(e, "%s (or none, auto)", why.msg);
    c->normalize = GT_NORMALIZE_GIVEN;
    return 0;
}

/* ---- the rows -------------------------------------------------------------------------------- */

typedef enum cli_type {
    CLI_SWITCH,  /* no value: sets the int field to lo */
    CLI_INT,     /* a whole number lo..hi into an int */
    CLI_U32,     /* a whole number lo..hi into a uint32_t */
    CLI_U64,     /* any whole number 0..2^64-1 into a uint64_t */
    CLI_FLOAT,   /* a real in range into a float */
    CLI_DOUBLE,  /* a real in range into a double */
    CLI_TEXT,    /* a non-empty string into a char array of size bytes */
    CLI_WORD,    /* a word of a name set (names.h) into an enum field */
    CLI_CUSTOM,  /* parse reads the value and sets the fields */
    CLI_HELP,    /* --help: prints the help */
    CLI_VERSION, /* --version: prints the version */
} cli_type;

/* The commands' words, by gt_command: the first word of the command line, and in messages. */
static const char *const cli_commands[] = {"train", "eval", "predict"};
#define CLI_NCOMMANDS ((int)(sizeof cli_commands / sizeof *cli_commands))

/* Bits of the commands an option applies to, by gt_command. */
#define CMD_TRAIN (1u << GT_CMD_TRAIN)
#define CMD_EVAL (1u << GT_CMD_EVAL)
#define CMD_PREDICT (1u << GT_CMD_PREDICT)
#define CMD_ALL (CMD_TRAIN | CMD_EVAL | CMD_PREDICT)

typedef struct cli_row {
    const char *section;  /* non-NULL: --help starts this section with the row */
    const char *name;     /* the flag without its dashes */
    const char *value;    /* its form in --help (N, X, PATH); NULL: none, or a word's list */
    cli_type type;
    size_t field;         /* offsetof(gt_config, ...) of the field set */
    size_t size;          /* CLI_TEXT: the field's capacity */
    long long lo, hi;     /* CLI_INT, CLI_U32: the bounds; CLI_SWITCH: the value set */
    const cli_range *range;                                  /* CLI_FLOAT, CLI_DOUBLE */
    gt_name_set set;                                         /* CLI_WORD */
    int (*parse)(const char *s, gt_config *c, gt_err *e);    /* CLI_CUSTOM */
    unsigned commands;    /* CMD_* bits */
    unsigned given;       /* the GT_GIVEN_* bit the recipe must respect, 0 if none */
    const char *help;     /* what it does; --help adds the range and the default */
    const char *dflt;     /* the default in words where the field's value does not say it */
    void (*more)(FILE *out); /* further --help lines after the entry */
} cli_row;

#define F(field_) offsetof(gt_config, field_)
#define FO(field_) offsetof(gt_config, optim.field_)
#define TEXT(field_) F(field_), sizeof(((gt_config *)0)->field_)

static void cli_usage_modes(FILE *out);

static const cli_row cli_rows[] = {
    {.section = "Devices and modes", .name = "gpus", .value = "LIST|all|cpu:N",
     .type = CLI_CUSTOM, .field = F(gpus), .parse = gt_cli_parse_gpus,
     .commands = CMD_TRAIN | CMD_EVAL,
     .help = "GPU ordinals such as 0,1,2,3, every GPU (all), or N CPU worker threads; "
             "1.." CLI_STR(GT_MAX_WORKERS) " workers",
     .dflt = "all GPUs if there are any, else cpu:1"},
    {.name = "mode", .value = "MODE", .type = CLI_WORD, .field = F(mode), .set = GT_NAMES_MODE,
     .commands = CMD_TRAIN, .given = GT_GIVEN_MODE, .more = cli_usage_modes,
     .help = "how the workers combine their gradients",
     .dflt = "hogwild; resnet20 and resnet18 on GPUs: allreduce, unless an option of a mode "
             "is given"},
    {.name = "stripes", .value = "N", .type = CLI_INT, .field = F(stripes), .lo = 0, .hi = 65536,
     .commands = CMD_TRAIN, .given = GT_GIVEN_MODE,
     .help = "hogwild lock stripes (0 is lock-free, true Hogwild: no locks, relaxed atomics; "
             "updates may interleave element-wise and be lost)",
     .dflt = "auto, one per 16 KiB of parameters, 1..256"},
    {.name = "staleness", .value = "N", .type = CLI_INT, .field = F(staleness), .lo = 0,
     .hi = GT_MAX_STALENESS, .commands = CMD_TRAIN, .given = GT_GIVEN_MODE,
     .help = "ssp: steps a worker may run ahead"},
    {.name = "sync-every", .value = "N", .type = CLI_INT, .field = F(sync_every), .lo = 1,
     .hi = 1000000, .commands = CMD_TRAIN, .given = GT_GIVEN_MODE,
     .help = "local: steps between averages; across hosts (mpirun), also hogwild and ssp: steps "
             "between averages of the hosts' stores"},
    {.name = "balance", .type = CLI_WORD, .field = F(balance), .set = GT_NAMES_BALANCE,
     .commands = CMD_TRAIN, .given = GT_GIVEN_MODE,
     .help = "hogwild: dynamic, a free worker takes the next batch, so faster devices do more; "
             "static, equal shares"},
    {.name = "overlap", .type = CLI_SWITCH, .field = F(overlap), .lo = 1, .commands = CMD_TRAIN,
     .given = GT_GIVEN_MODE,
     .help = "hogwild: pull and begin step k+1 before pushing step k, so a GPU computes while the "
             "host pushes; every step misses its predecessor's update (one step more staleness). "
             "With SGD each step starts from the pulled parameters minus its predecessor's plain "
             "SGD step (weight prediction; off with --literal)"},
    {.name = "store-step", .type = CLI_SWITCH, .field = F(store_step), .lo = 1,
     .commands = CMD_TRAIN, .given = GT_GIVEN_MODE,
     .help = "keep the parameter store in every step where the GPUs would take the update "
             "themselves (one GPU, sync and local on the GPUs of one host): slower, but sync and "
             "local then go on without a GPU that fails"},
    {.name = "store-parts", .value = "N", .type = CLI_INT, .field = F(store_parts), .lo = 0,
     .hi = GT_STORE_PARTS_MAX, .commands = CMD_TRAIN, .given = GT_GIVEN_MODE,
     .help = "hogwild, sync and ssp on GPUs: the store step in N parts, each part's gradient "
             "download and store update (hogwild: and parameter upload) overlapping the others' "
             "and, on the layer path, the rest of the backward (hogwild: one worker the same "
             "arithmetic, several each start from what its own push left; sync and ssp: a part "
             "of a clock is applied once every worker's gradient of it is in, the same "
             "arithmetic); 0 or 1: the whole store at once",
     .dflt = "auto: on GPUs for models of at least 1 M parameters up to 16 parts, the first "
             "one the first layers', hogwild's of at least 256 K parameters, sync's and ssp's of "
             "at least 1 M; else whole"},
    {.name = "store-grad", .type = CLI_WORD, .field = F(store_grad), .set = GT_NAMES_STORE_GRAD,
     .commands = CMD_TRAIN, .given = GT_GIVEN_MODE,
     .help = "hogwild's store step in parts: the gradient each part downloads into the store, "
             "fp32, or bf16 (rounded on the GPU: half the bytes over PCIe and through the "
             "host's update; the store and the optimizer stay fp32)",
     .dflt = "auto: bf16 with --precision bf16, else fp32"},
    {.name = "store-threads", .value = "N", .type = CLI_INT, .field = F(store_threads), .lo = 1,
     .hi = 256, .commands = CMD_TRAIN, .given = GT_GIVEN_MODE,
     .help = "threads that share one large push, pull or update of the store (models of 256 K "
             "parameters or more), the worker's own included, in a group per worker; 1: the "
             "worker alone",
     .dflt = "auto, the cores shared between the workers, at most 8 (16 for one worker)"},
    {.name = "exchange", .type = CLI_WORD, .field = F(exchange), .set = GT_NAMES_EXCHANGE,
     .commands = CMD_TRAIN,
     .help = "allreduce, and local on GPUs: how the GPUs of one host exchange gradients; auto, "
             "peer to peer (p2p) where the GPUs reach each other, else NCCL; p2p or nccl insist "
             "on one (across hosts it is always NCCL)"},
    {.name = "precision", .type = CLI_WORD, .field = F(precision), .set = GT_NAMES_PRECISION,
     .commands = CMD_TRAIN | CMD_EVAL,
     .help = "the GPUs' compute: fp32; tf32 (tensor-core products of fp32 data); bf16 "
             "(convolutions and linear layers on bf16 data, fp32 accumulation; resnet20 and "
             "resnet18 keep their activations bf16 channels-last); the store, the optimizer and "
             "batch norm's statistics stay fp32"},
    {.name = "tf32", .type = CLI_SWITCH, .field = F(precision), .lo = GT_PRECISION_TF32,
     .commands = CMD_TRAIN | CMD_EVAL, .help = "--precision tf32"},
    {.name = "conv-cache", .value = "FILE|off", .type = CLI_TEXT, TEXT(conv_cache),
     .commands = CMD_ALL,
     .help = "GPUs: the file that keeps the convolution algorithms timed while the devices open, "
             "so that later runs on the same GPU model and cuDNN take them instead of timing "
             "again (a shorter start-up, the same algorithms run after run); off: time them in "
             "every run",
     .dflt = "$XDG_CACHE_HOME/gputrain/conv-cache, else ~/.cache/gputrain/conv-cache"},
    {.name = "deterministic", .type = CLI_WORD, .field = F(deterministic),
     .set = GT_NAMES_DETERMINISTIC, .commands = CMD_TRAIN,
     .help = "GPUs: on keeps the convolutions' backward to cuDNN's deterministic algorithms (a "
             "seed's run repeats bit for bit); off lets them take the non-deterministic ones too "
             "(sums by atomic adds, PyTorch's default; faster on some shapes, most in fp32); "
             "auto: on, but off with --precision tf32"},

    {.section = "Model and data", .name = "model", .value = "NAME|SPEC|@FILE", .type = CLI_TEXT,
     TEXT(model), .commands = CMD_TRAIN,
     .help = "lenet5, lenet5-classic, mlp, cnn-wide, resnet20, resnet18 (their own recipe), a "
             "layer spec, or @FILE holding one"},
    {.name = "data", .value = "DIR", .type = CLI_CUSTOM, .field = F(data), .parse = cli_parse_data,
     .commands = CMD_ALL,
     .help = "IDX files, CIFAR files or one folder per class; synthetic:CxHxW:K[:N] makes K classes "
             "of N images (50000 train, 10000 test) for throughput runs",
     .dflt = "the usual places"},
    {.name = "image-size", .value = "HxW|N", .type = CLI_CUSTOM, .field = F(image_size),
     .parse = cli_parse_image_size, .commands = CMD_ALL,
     .help = "resize every image of an image folder to HxW (N: NxN)",
     .dflt = "all images share one size"},
    {.name = "augment", .value = "none|crop:P,flip", .type = CLI_CUSTOM, .field = F(augment),
     .parse = cli_parse_augment, .commands = CMD_TRAIN, .given = GT_GIVEN_AUGMENT,
     .help = "training batches only: a random crop of the image padded with P zeros (P 1.."
             CLI_STR(GT_AUGMENT_MAX_PAD) ") and/or a horizontal flip, per sample, drawn from the "
             "seed, the epoch and the sample alone",
     .dflt = "none"},
    {.name = "normalize", .value = "none|auto|M,../S,..", .type = CLI_CUSTOM,
     .field = F(normalize), .parse = cli_parse_normalize, .commands = CMD_TRAIN,
     .given = GT_GIVEN_NORMALIZE,
     .help = "the input step: (x/255 - M) / S per channel (one value, or one per channel); auto, "
             "the training split's per-channel mean and standard deviation; kept in checkpoints, "
             "so eval and predict normalise alike; a resume keeps its checkpoint's",
     .dflt = "auto"},
    {.name = "train-samples", .value = "N", .type = CLI_U32, .field = F(train_samples), .lo = 1,
     .hi = UINT32_MAX, .commands = CMD_TRAIN, .help = "train on the first N samples only",
     .dflt = "all"},
    {.name = "batch", .value = "N", .type = CLI_INT, .field = F(batch), .lo = 1, .hi = GT_MAX_BATCH,
     .commands = CMD_TRAIN | CMD_EVAL, .given = GT_GIVEN_BATCH,
     .help = "samples per step and worker, in every mode"},
    {.name = "epochs", .value = "N", .type = CLI_INT, .field = F(epochs), .lo = 1,
     .hi = GT_MAX_EPOCHS, .commands = CMD_TRAIN, .given = GT_GIVEN_EPOCHS,
     .help = "passes over the training set (resnet20, resnet18: their recipe's 25)"},
    {.name = "seed", .value = "N", .type = CLI_U64, .field = F(seed), .commands = CMD_TRAIN,
     .help = "initialisation and shuffling seed"},
    {.name = "eval-every", .value = "N", .type = CLI_INT, .field = F(eval_every), .lo = 0,
     .hi = INT_MAX, .commands = CMD_TRAIN,
     .help = "evaluate at every multiple of N of the run's step (its optimizer updates: hogwild, "
             "one worker's batch; the other modes, one clock of every worker's batch), also "
             "at epoch ends; 0 = at epoch ends only"},
    {.name = "val-split", .value = "F", .type = CLI_DOUBLE, .field = F(val_split),
     .range = &RANGE_UNIT_LOW, .commands = CMD_TRAIN,
     .help = "hold out this fraction of the training samples (the same ones in every run of the "
             "data: a fixed seeded shuffle) and evaluate them beside the test set (val_acc)",
     .dflt = "none"},
    {.name = "save-best", .value = "PATH", .type = CLI_TEXT, TEXT(save_best),
     .commands = CMD_TRAIN,
     .help = "write a checkpoint here whenever the monitored accuracy improves: validation "
             "with --val-split, else test", .dflt = "none"},
    {.name = "patience", .value = "N", .type = CLI_INT, .field = F(patience), .lo = 0,
     .hi = INT_MAX, .commands = CMD_TRAIN,
     .help = "stop after N evaluations in a row without a better monitored accuracy (early "
             "stopping; --eval-every makes them more often); 0 = never", .dflt = "never"},

    {.section = "Optimisation", .name = "optimizer", .type = CLI_WORD, .field = FO(kind),
     .set = GT_NAMES_OPTIMIZER, .commands = CMD_TRAIN,
     .help = "PyTorch SGD or Adam; adam keeps the --lr default and ignores --momentum"},
    {.name = "lr", .value = "X", .type = CLI_FLOAT, .field = FO(lr), .range = &RANGE_POSITIVE,
     .commands = CMD_TRAIN, .given = GT_GIVEN_LR, .help = "base learning rate"},
    {.name = "momentum", .value = "X", .type = CLI_FLOAT, .field = FO(momentum),
     .range = &RANGE_UNIT_LOW, .commands = CMD_TRAIN, .given = GT_GIVEN_MOMENTUM,
     .help = "SGD momentum"},
    {.name = "nesterov", .type = CLI_SWITCH, .field = FO(nesterov), .lo = 1, .commands = CMD_TRAIN,
     .given = GT_GIVEN_NESTEROV, .help = "SGD Nesterov momentum"},
    {.name = "weight-decay", .value = "X", .type = CLI_FLOAT, .field = FO(weight_decay),
     .range = &RANGE_NONNEG, .commands = CMD_TRAIN, .given = GT_GIVEN_WEIGHT_DECAY,
     .help = "L2 term added to the gradient (with batch norm: not to biases, gamma, beta)"},
    {.name = "beta1", .value = "X", .type = CLI_FLOAT, .field = FO(beta1), .range = &RANGE_UNIT_LOW,
     .commands = CMD_TRAIN, .help = "Adam first-moment decay"},
    {.name = "beta2", .value = "X", .type = CLI_FLOAT, .field = FO(beta2), .range = &RANGE_UNIT_LOW,
     .commands = CMD_TRAIN, .help = "Adam second-moment decay"},
    {.name = "eps", .value = "X", .type = CLI_FLOAT, .field = FO(eps), .range = &RANGE_POSITIVE,
     .commands = CMD_TRAIN, .help = "Adam denominator term"},
    {.name = "schedule", .type = CLI_WORD, .field = FO(schedule), .set = GT_NAMES_SCHEDULE,
     .commands = CMD_TRAIN, .given = GT_GIVEN_SCHEDULE,
     .help = "learning rate after warm-up; cosine decays to 0 at the end of training"},
    {.name = "warmup", .value = "EPOCHS", .type = CLI_FLOAT, .field = FO(warmup_epochs),
     .range = &RANGE_NONNEG, .commands = CMD_TRAIN, .given = GT_GIVEN_WARMUP,
     .help = "linear warm-up from 0 over this many epochs"},
    {.name = "step-epochs", .value = "X", .type = CLI_FLOAT, .field = FO(step_epochs),
     .range = &RANGE_POSITIVE, .commands = CMD_TRAIN,
     .help = "step: multiply the rate by --gamma every X epochs"},
    {.name = "gamma", .value = "X", .type = CLI_FLOAT, .field = FO(gamma),
     .range = &RANGE_UNIT_HIGH, .commands = CMD_TRAIN, .help = "step factor"},
    {.name = "ema", .value = "DECAY", .type = CLI_FLOAT, .field = F(ema),
     .range = &RANGE_UNIT_LOW, .commands = CMD_TRAIN, .given = GT_GIVEN_EMA,
     .help = "evaluate an exponential moving average of the parameters, updated with every "
             "update (decay min(DECAY, (1+t)/(10+t)) at update t; once it spans 100 updates "
             "or more, with one in 2, 4 or 8 standing for them all); checkpoints add it as ema.* "
             "tensors; 0: off",
     .dflt = "0.999 with a constant learning rate (the default schedule); resnet20 and "
             "resnet18 under allreduce: 0.98; else 0"},

    {.section = "Checkpoints and faults", .name = "checkpoint", .value = "PATH", .type = CLI_TEXT,
     TEXT(checkpoint), .commands = CMD_ALL,
     .help = "write checkpoints here; for eval and predict, the one to use"},
    {.name = "checkpoint-every", .value = "N|Ns", .type = CLI_CUSTOM, .field = F(checkpoint_every),
     .parse = cli_parse_checkpoint_every, .commands = CMD_TRAIN,
     .help = "every N epochs, or every N steps with an s suffix, N >= 1",
     .dflt = "at the end only"},
    {.name = "keep", .value = "K", .type = CLI_INT, .field = F(keep), .lo = 0, .hi = GT_MAX_KEEP,
     .commands = CMD_TRAIN, .help = "older checkpoints kept beside the newest"},
    {.name = "resume", .value = "PATH", .type = CLI_TEXT, TEXT(resume), .commands = CMD_TRAIN,
     .help = "continue a run: parameters, optimizer state, progress and the run's own options "
             "(--model, --lr, --epochs, ...) unless given again (not with --init)"},
    {.name = "init", .value = "PATH", .type = CLI_TEXT, TEXT(init), .commands = CMD_TRAIN,
     .help = "start a fresh run from a checkpoint's parameters"},
    {.name = "allow-nonfinite", .type = CLI_SWITCH, .field = F(allow_nonfinite), .lo = 1,
     .commands = CMD_ALL, .help = "load a checkpoint holding NaN or Inf values",
     .dflt = "refused"},
    {.name = "ignore-classes", .type = CLI_SWITCH, .field = F(ignore_classes), .lo = 1,
     .commands = CMD_EVAL | CMD_PREDICT,
     .help = "use a checkpoint whose class names differ from the data's",
     .dflt = "refused"},
    {.name = "no-ema", .type = CLI_SWITCH, .field = F(no_ema), .lo = 1,
     .commands = CMD_EVAL | CMD_PREDICT,
     .help = "use the checkpoint's training parameters, not its moving average (ema.* tensors, "
             "written by train --ema)", .dflt = "the average where the checkpoint has one"},
    {.name = "per-class", .type = CLI_SWITCH, .field = F(per_class), .lo = 1, .commands = CMD_EVAL,
     .help = "also print each class's test accuracy, precision and the class it is most often "
             "taken for"},
    {.name = "confusion", .value = "FILE", .type = CLI_TEXT, TEXT(confusion), .commands = CMD_EVAL,
     .help = "write the test set's confusion matrix (rows: true class) to FILE, JSON where it "
             "ends in .json, else CSV; prints the per-class table too", .dflt = "none"},
    {.name = "top", .value = "K", .type = CLI_INT, .field = F(top), .lo = 1, .hi = GT_MAX_CLASSES,
     .commands = CMD_PREDICT, .help = "classes printed per image"},
    {.name = "on-nan", .type = CLI_WORD, .field = F(on_nan), .set = GT_NAMES_ON_NAN,
     .commands = CMD_TRAIN, .given = GT_GIVEN_ON_NAN,
     .help = "on a non-finite loss, stop the run or skip the update",
     .dflt = "neither; the guard acts as --on-diverge says"},
    {.name = "on-diverge", .type = CLI_WORD, .field = F(on_diverge), .set = GT_NAMES_ON_DIVERGE,
     .commands = CMD_TRAIN,
     .help = "a loss that goes non-finite, climbs well above its start or stays at chance: roll "
             "back to the last good parameters and lower the step size, or stop with an error"},
    {.name = "literal", .type = CLI_SWITCH, .field = F(literal), .lo = 1, .commands = CMD_TRAIN,
     .help = "run the recipe exactly as given: no corrections of momentum, step size or warm-up "
             "for the worker count and mode, no weight prediction for --overlap"},
    {.name = "inject-fault", .value = "WORKER:STEP", .type = CLI_CUSTOM, .field = F(inject_worker),
     .parse = cli_parse_inject_fault, .commands = CMD_TRAIN,
     .help = "make a worker (numbered across hosts under mpirun) fail at its step, to test "
             "recovery", .dflt = "none"},
    {.name = "stall-timeout", .value = "SECONDS", .type = CLI_DOUBLE, .field = F(stall_timeout),
     .range = &RANGE_POSITIVE, .commands = CMD_TRAIN,
     .help = "warn on stderr when a worker makes no progress for this long, once until it moves "
             "again; it is not counted as failed and the run goes on", .dflt = "off"},
    {.name = "host-timeout", .value = "SECONDS", .type = CLI_DOUBLE, .field = F(host_timeout),
     .range = &RANGE_NONNEG, .commands = CMD_TRAIN | CMD_EVAL,
     .help = "under mpirun: a host that waits this long for the others in a collective ends the "
             "run, naming itself; 0 waits forever"},

    {.section = "Output", .name = "log", .value = "FILE", .type = CLI_TEXT, TEXT(log_path),
     .commands = CMD_TRAIN, .help = "write one JSON line per evaluation and event"},
    {.name = "log-steps", .type = CLI_SWITCH, .field = F(log_steps), .lo = 1, .commands = CMD_TRAIN,
     .help = "with --log, also one line per worker batch: its loss, the run's step it went "
             "into and its step in the epoch"},
    {.name = "progress", .type = CLI_SWITCH, .field = F(progress), .lo = 1, .commands = CMD_TRAIN,
     .help = "show a progress line", .dflt = "when stderr is a terminal"},
    {.name = "no-progress", .type = CLI_SWITCH, .field = F(progress), .lo = 0,
     .commands = CMD_TRAIN, .help = "never show it", .dflt = "when stderr is a terminal"},
    {.name = "quiet", .type = CLI_SWITCH, .field = F(quiet), .lo = 1, .commands = CMD_TRAIN,
     .help = "print only the final result line (done: ...) on stdout, and errors and warnings on "
             "stderr; no progress line unless --progress"},
    {.name = "help", .type = CLI_HELP, .commands = CMD_ALL, .help = "print this help and exit"},
    {.name = "version", .type = CLI_VERSION, .commands = CMD_ALL,
     .help = "print the version and exit"},
};

#define CLI_NROWS ((int)(sizeof cli_rows / sizeof *cli_rows))
_Static_assert(sizeof(gt_mode) == sizeof(int) && sizeof(gt_opt_kind) == sizeof(int) &&
               sizeof(gt_sched_kind) == sizeof(int) && sizeof(gt_balance) == sizeof(int) &&
               sizeof(gt_on_nan) == sizeof(int) && sizeof(gt_on_diverge) == sizeof(int) &&
               sizeof(gt_exchange) == sizeof(int), "CLI_WORD sets an enum field as an int");
#define CLI_OPT0 256 /* getopt's value of row 0, above every short option */

/* The getopt table of the rows, built once. */
const struct option *gt_cli_options(void)
{
    static struct option opts[CLI_NROWS + 1];
    if (!opts[0].name)
        for (int i = 0; i < CLI_NROWS; i++) {
            int takes = cli_rows[i].type != CLI_SWITCH && cli_rows[i].type != CLI_HELP &&
                        cli_rows[i].type != CLI_VERSION;
            opts[i] = (struct option){cli_rows[i].name, takes ? required_argument : no_argument,
                                      NULL, CLI_OPT0 + i};
        }
    return opts;
}

/* The options that shape a run, which a --resume takes again from the checkpoint's run unless its
 * own command line gives them (docs/internals.md, "What a resume takes again"): not the devices,
 * data paths, seed (the checkpoint's anyway), outputs, faults or timeouts. */
static const char *const cli_resumable[] = {
    "mode", "stripes", "staleness", "sync-every", "balance", "overlap", "store-step", "store-parts",
    "store-grad", "exchange", "precision", "tf32", "deterministic", "model", "image-size",
    "augment", "normalize", "train-samples", "batch", "epochs", "eval-every", "val-split", "save-best", "patience",
    "optimizer", "lr", "momentum", "nesterov", "weight-decay", "beta1", "beta2", "eps", "schedule",
    "warmup", "step-epochs", "gamma", "ema", "on-nan", "on-diverge", "literal"};

static int cli_resumes(const cli_row *r)
{
    for (size_t i = 0; i < sizeof cli_resumable / sizeof cli_resumable[0]; i++)
        if (strcmp(r->name, cli_resumable[i]) == 0)
            return 1;
    return 0;
}

static const cli_row *cli_row_of(int opt)
{
    return opt >= CLI_OPT0 && opt < CLI_OPT0 + CLI_NROWS ? &cli_rows[opt - CLI_OPT0] : NULL;
}

/* The commands of bits, "train, eval", into buf. */
static const char *cli_command_list(unsigned bits, char *buf, size_t size)
{
    buf[0] = 0;
    for (int k = 0; k < CLI_NCOMMANDS; k++)
        if (bits & (1u << k))
            snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", buf[0] ? ", " : "",
                     cli_commands[k]);
    return buf;
}

/* Sets the field that row r controls from its value arg. */
static int cli_apply(const cli_row *r, const char *arg, gt_config *c, gt_err *e)
{
    char *f = (char *)c + r->field;
    long long v;
    switch (r->type) {
    case CLI_SWITCH: *(int *)f = (int)r->lo; return 0;
    case CLI_INT: return cli_parse_int(r->name, arg, (int)r->lo, (int)r->hi, (int *)f, e);
    case CLI_U32:
        if (cli_parse_ll(r->name, arg, r->lo, r->hi, &v, e))
            return -1;
        *(uint32_t *)f = (uint32_t)v;
        return 0;
    case CLI_U64: return cli_parse_u64(r->name, arg, (uint64_t *)f, e);
    case CLI_FLOAT: return cli_parse_float(r->name, arg, r->range, (float *)f, e);
    case CLI_DOUBLE: return cli_parse_double(r->name, arg, r->range, (double *)f, e);
    case CLI_TEXT: return cli_copy_string(r->name, arg, f, r->size, e);
    case CLI_WORD: return gt_name_parse(r->set, r->name, arg, (int *)f, e);
    case CLI_CUSTOM: return r->parse(arg, c, e);
    case CLI_HELP:
    case CLI_VERSION: break;
    }
    return gt_fail(e, "--%s: no parser for this option", r->name);
}

/* ---- the parser ------------------------------------------------------------------------------ */

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
    const cli_row *r = cli_row_of(optopt);
    if (ret == ':' && r)
        return gt_fail(e, "--%s needs a value", r->name);
    if (r)
        return gt_fail(e, "--%s takes no value (got '%s')", r->name, word);
    if (word[0] == '-' && word[1] != '-')
        return gt_fail(e, "unknown option '%s' (options start with --)", word);
    return gt_fail(e, "unknown option '%s'", word);
}

/* Each option at most once; options that set one field (--progress, --no-progress) count as one
 * setting. seen[i] is set for each row given. */
static int cli_check_repeat(const cli_row *r, unsigned char *seen, gt_err *e)
{
    for (int i = 0; i < CLI_NROWS; i++) {
        if (!seen[i] || cli_rows[i].field != r->field)
            continue;
        if (&cli_rows[i] == r)
            return gt_fail(e, "--%s given twice", r->name);
        return gt_fail(e, "--%s and --%s contradict each other", cli_rows[i].name, r->name);
    }
    seen[r - cli_rows] = 1;
    return 0;
}

/* An option that the command does not read is refused rather than silently ignored. */
static int cli_check_command(const cli_row *r, gt_command cmd, gt_err *e)
{
    char have[32], want[32];
    if (r->commands & (1u << cmd))
        return 0;
    return gt_fail(e, "--%s does not apply to %s (only to %s)", r->name,
                   cli_command_list(1u << cmd, have, sizeof have),
                   cli_command_list(r->commands, want, sizeof want));
}

/* Whether c's other options keep the store step whole (--store-parts and --store-grad need it in
 * parts), with the reason in why. */
static int cli_pushes_whole(const gt_config *c, char *why, size_t cap)
{
    const gt_mode_row *row = gt_mode_row_of(c->mode);
    if (!row || !row->store_parts)
        snprintf(why, cap, "only --mode hogwild, sync and ssp push in parts, not '%s'",
                 gt_mode_name(c->mode));
    else if (c->overlap)
        snprintf(why, cap, "--overlap pushes whole steps");
    else if (c->stripes == 0)
        snprintf(why, cap, "the lock-free store (--stripes 0) has no stripes to part");
    else
        return 0;
    return 1;
}

static int cli_check_combination(const gt_config *c, gt_err *e)
{
    if (c->resume[0] && c->init[0])
        return gt_fail(e, "--resume '%s' and --init '%s' cannot be used together", c->resume,
                       c->init);
    if (c->command != GT_CMD_TRAIN && !c->checkpoint[0])
        return gt_fail(e, "%s: --checkpoint PATH is required", cli_commands[c->command]);
    if (c->command == GT_CMD_PREDICT && c->nitems == 0)
        return gt_fail(e, "predict: name at least one image file or IDX range (test:0-9)");
    const gt_mode_row *mode = gt_mode_row_of(c->mode);
    if (c->overlap && mode && !mode->async_variants)
        return gt_fail(e, "--overlap: only --mode hogwild overlaps its pushes, not '%s'",
                       gt_mode_name(c->mode));
    char why[96];
    int whole = cli_pushes_whole(c, why, sizeof why);
    if (c->store_parts > 1 && whole)
        return gt_fail(e, "--store-parts %d: %s", c->store_parts, why);
    if (c->store_grad == GT_STORE_GRAD_BF16 && !whole && c->mode != GT_MODE_HOGWILD)
        snprintf(why, sizeof why, "%s sums its workers' gradients in fp32",
                 gt_mode_name(c->mode));
    if (c->store_grad == GT_STORE_GRAD_BF16 &&
        (whole || c->mode != GT_MODE_HOGWILD || c->store_parts == 0 || c->store_parts == 1))
        return gt_fail(e, "--store-grad bf16 needs hogwild's store step in parts: %s",
                       whole || c->mode != GT_MODE_HOGWILD
                           ? why
                           : "--store-parts 0 or 1 pushes whole steps");
    if (mode && mode->needs_nccl && c->cpu_workers > 0)
        return gt_fail(e, "--mode %s: needs GPUs and NCCL, not --gpus cpu:%d (use --mode sync "
                       "for the same math)", gt_mode_name(c->mode), c->cpu_workers);
    if (mode && mode->needs_nccl && c->on_nan == GT_NAN_SKIP)
        return gt_fail(e, "--on-nan skip: not available with --mode %s, where every GPU must "
                       "take the same step", gt_mode_name(c->mode));
    return 0;
}
static int cli_add_items(int argc, char **argv, gt_config *c, int rest, gt_err *e)
{
    do {
        if (c->nitems == GT_MAX_ITEMS)
            return gt_fail(e, "predict: more than %d images or ranges", GT_MAX_ITEMS);
        c->items[c->nitems++] = argv[optind++];
    } while (rest && optind < argc);
    return 0;
}

/* ---- what --resume takes again ------------------------------------------------------------- */

/* Appends s to buf (cap bytes, *len used) as the inside of a JSON string, leaving room for a
 * closing quote and bracket; 0, or -1 when full. */
static int cli_json_put(char *buf, size_t cap, size_t *len, const char *s)
{
    size_t n = *len + 3 <= cap ? gt_json_escape(buf + *len, cap - *len - 2, s) : (size_t)-1;
    if (n == (size_t)-1)
        return -1;
    *len += n;
    return 0;
}

/* Adds option r (value arg, NULL for a switch) to c->run_options, the JSON array of the options
 * a resumed run takes again. Past GT_RUN_OPTIONS_LEN the list is dropped whole (a resume then
 * takes nothing again, as before the list existed), never cut short. */
static void cli_keep_option(gt_config *c, const cli_row *r, const char *arg, size_t *len)
{
    char *buf = c->run_options;
    size_t at = *len;
    if (at == SIZE_MAX)
        return; /* dropped already */
    if (at == 0)
        buf[at++] = '[';
    else
        buf[at - 1] = ','; /* the closing bracket */
    buf[at++] = '"';
    if (cli_json_put(buf, GT_RUN_OPTIONS_LEN, &at, "--") != 0 ||
        cli_json_put(buf, GT_RUN_OPTIONS_LEN, &at, r->name) != 0 ||
        (arg && (cli_json_put(buf, GT_RUN_OPTIONS_LEN, &at, "=") != 0 ||
                 cli_json_put(buf, GT_RUN_OPTIONS_LEN, &at, arg) != 0))) {
        buf[0] = 0;
        *len = SIZE_MAX;
        return;
    }
    memcpy(buf + at, "\"]", 3); /* cli_json_put left room */
    *len = at + 2;
}

/* The row a command-line word names ("--name" or "--name=value"), or NULL. */
static const cli_row *cli_row_named(const char *word)
{
    if (strncmp(word, "--", 2) != 0)
        return NULL;
    size_t n = strcspn(word + 2, "=");
    for (int i = 0; i < CLI_NROWS; i++)
        if (strlen(cli_rows[i].name) == n && strncmp(cli_rows[i].name, word + 2, n) == 0)
            return &cli_rows[i];
    return NULL;
}

/* Whether argv[1..argc) sets the field that row r sets (r itself, or a row for the same field:
 * --tf32 and --precision). Values are skipped, so a value is never taken for an option. */
static int cli_argv_sets(int argc, char **argv, const cli_row *r)
{
    for (int i = 1; i < argc; i++) {
        const cli_row *g = cli_row_named(argv[i]);
        if (!g)
            continue;
        if (g->field == r->field && g->type != CLI_HELP && g->type != CLI_VERSION)
            return 1;
        int takes = g->type != CLI_SWITCH && g->type != CLI_HELP && g->type != CLI_VERSION;
        if (takes && !strchr(argv[i], '='))
            i++;
    }
    return 0;
}

void gt_cli_free_args(char **argv)
{
    if (!argv)
        return;
    for (char **p = argv; *p; p++)
        free(*p);
    free(argv);
}

int gt_cli_resume_args(const char *run_options, const char *model, int argc, char **argv,
                       int *out_argc, char ***out_argv, char *carried, size_t cap, gt_err *e)
{
    size_t len = strlen(run_options);
    char *text = malloc(len + 1);
    gt_json_doc d = {0};
    *out_argc = 0;
    *out_argv = NULL;
    if (carried && cap)
        carried[0] = 0;
    if (!text)
        return gt_fail(e, "out of memory for the options of a resumed run");
    memcpy(text, run_options, len + 1);
    int n = gt_json_parse(&d, text, len) == 0 && d.nodes[0].type == GT_JSON_ARRAY
                ? d.nodes[0].count : -1;
    char **out = n >= 0 ? calloc((size_t)(argc + n + 1), sizeof *out) : NULL;
    int k = 0, rc = n < 0 ? gt_fail(e, "its run's options are not a JSON array of strings") : 0;
    if (rc == 0 && !out)
        rc = gt_fail(e, "out of memory for the options of a resumed run");
    int first = argc > 1 && strncmp(argv[1], "--", 2) != 0 ? 2 : 1; /* a command word stays 2nd */
    for (int i = 0; rc == 0 && i < first; i++)
        rc = (out[k++] = strdup(argv[i])) ? 0 : gt_fail(e, "out of memory");
    for (int j = rc == 0 ? d.nodes[0].child : -1; j >= 0 && rc == 0; j = d.nodes[j].next) {
        const char *w = d.nodes[j].type == GT_JSON_STRING ? d.nodes[j].str : "";
        const cli_row *r = cli_row_named(w);
        if (!r || !cli_resumes(r)) {
            rc = gt_fail(e, "its run's options hold '%.60s', not an option a resume takes again",
                         w);
            break;
        }
        if (cli_argv_sets(argc, argv, r))
            continue; /* given again: the command line's */
        char *word = NULL;
        if (model && strcmp(r->name, "model") == 0) { /* the checkpoint's, not a file's today */
            size_t n = strlen("--model=") + strlen(model) + 1;
            if ((word = malloc(n)) != NULL)
                snprintf(word, n, "--model=%s", model);
            w = word ? word : w;
        } else {
            word = strdup(w);
        }
        rc = (out[k++] = word) ? 0 : gt_fail(e, "out of memory");
        if (rc == 0 && carried && strlen(carried) + strlen(w) + 2 < cap)
            snprintf(carried + strlen(carried), cap - strlen(carried), "%s%s",
                     carried[0] ? " " : "", w);
    }
    for (int i = first; rc == 0 && i < argc; i++)
        rc = (out[k++] = strdup(argv[i])) ? 0 : gt_fail(e, "out of memory");
    gt_json_free(&d);
    free(text);
    if (rc != 0) {
        gt_cli_free_args(out);
        return -1;
    }
    *out_argc = k;
    *out_argv = out;
    return 0;
}

/* Runs getopt over argv[0..argc) (argv[0] a program or command word). Returns 0 when every option
 * was read, 1 after printing help or the version, -1 on the first bad one. */
static int cli_parse_options(int argc, char **argv, gt_config *c, FILE *out, gt_err *e)
{
    const struct option *opts = gt_cli_options();
    unsigned char seen[CLI_NROWS] = {0};
    size_t kept = 0; /* bytes of c->run_options written */
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
        int opt = getopt_long(argc, argv, "+:h", opts, &index);
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
        if (opt != 'h' && !cli_spelt_in_full(word, opts[index].name))
            return gt_fail(e, "unknown option '%s' (write --%s in full)", word, opts[index].name);
        const cli_row *r = cli_row_of(opt);
        if (opt == 'h' || r->type == CLI_HELP) {
            gt_cli_usage(out);
            return 1;
        }
        if (r->type == CLI_VERSION) {
            fprintf(out, "gputrain %s (%s)\n", GT_VERSION, CLI_BACKENDS);
            return 1;
        }
        if (cli_check_command(r, c->command, e) || cli_check_repeat(r, seen, e) ||
            cli_apply(r, optarg, c, e))
            return -1;
        c->given |= r->given;
        if (cli_resumes(r))
            cli_keep_option(c, r, optarg, &kept);
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
    for (int k = 0; argc > 1 && k < CLI_NCOMMANDS && !skip; k++)
        if (strcmp(argv[1], cli_commands[k]) == 0) {
            c->command = (gt_command)k;
            skip = 1;
        }
    int rc = cli_parse_options(argc - skip, argv + skip, c, out, e);
    if (rc)
        return rc;
    c->optim.total_epochs = (float)c->epochs;
    return cli_check_combination(c, e);
}

/* ---- --help ---------------------------------------------------------------------------------- */

#define USAGE_COLUMN 25 /* where the help sentences start */
#define USAGE_WIDTH 92  /* the longest line */

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

/* The range a row's value must lie in, as --help states it; "" when the sentence says it. */
static const char *cli_usage_range(const cli_row *r, char *buf, size_t size)
{
    switch (r->type) {
    case CLI_INT:
    case CLI_U32: snprintf(buf, size, "%lld..%lld", r->lo, r->hi); return buf;
    case CLI_U64: return "0..2^64-1";
    case CLI_FLOAT:
    case CLI_DOUBLE: return r->range->help;
    case CLI_SWITCH:
    case CLI_TEXT:
    case CLI_WORD:
    case CLI_CUSTOM:
    case CLI_HELP:
    case CLI_VERSION: break;
    }
    return "";
}

/* A row's default, read from the default configuration d: "(default 10)", "(default: none)". */
static void cli_usage_default(const cli_row *r, const gt_config *d, char *buf, size_t size)
{
    const char *f = (const char *)d + r->field;
    if (r->dflt) {
        snprintf(buf, size, "(default: %s)", r->dflt);
        return;
    }
    switch (r->type) {
    case CLI_SWITCH: snprintf(buf, size, "(default off)"); return;
    case CLI_INT: snprintf(buf, size, "(default %d)", *(const int *)f); return;
    case CLI_U32: snprintf(buf, size, "(default %" PRIu32 ")", *(const uint32_t *)f); return;
    case CLI_U64: snprintf(buf, size, "(default %" PRIu64 ")", *(const uint64_t *)f); return;
    case CLI_FLOAT: snprintf(buf, size, "(default %g)", *(const float *)f); return;
    case CLI_DOUBLE: snprintf(buf, size, "(default %g)", *(const double *)f); return;
    case CLI_TEXT:
        snprintf(buf, size, f[0] ? "(default %s)" : "(default: none)", f);
        return;
    case CLI_WORD: snprintf(buf, size, "(default %s)", gt_name(r->set, *(const int *)f)); return;
    case CLI_CUSTOM:
    case CLI_HELP:
    case CLI_VERSION: break;
    }
    buf[0] = 0;
}

/* Writes text from column col on, wrapped at USAGE_WIDTH, continuation lines at column indent. */
static void cli_usage_wrap(FILE *out, const char *text, int col, int indent)
{
    while (*text) {
        size_t room = (size_t)(USAGE_WIDTH - col), n = strlen(text);
        if (n > room) {
            n = room;
            while (n > 0 && text[n] != ' ')
                n--;
            if (n == 0)
                n = strcspn(text, " ");
        }
        fprintf(out, "%.*s\n", (int)n, text);
        text += n;
        text += strspn(text, " ");
        if (*text)
            fprintf(out, "%*s", indent, "");
        col = indent;
    }
}

/* One row's entry: the flag and its value, then its sentence, range and default. */
static void cli_usage_row(FILE *out, const cli_row *r, const gt_config *d)
{
    char value[GT_NAMES_LIST_LEN], range[64], dflt[128], text[1024];
    if (r->value)
        snprintf(value, sizeof value, " %s", r->value);
    else if (r->type == CLI_WORD && gt_name_list(r->set, "|", value + 1, sizeof value - 1) == 0)
        value[0] = ' ';
    else
        value[0] = 0;
    int col = fprintf(out, "  --%s%s", r->name, value);
    if (col < USAGE_COLUMN - 1)
        col += fprintf(out, "%*s", USAGE_COLUMN - col, "");
    else
        col += fprintf(out, "  ");
    const char *rg = cli_usage_range(r, range, sizeof range);
    cli_usage_default(r, d, dflt, sizeof dflt);
    char cmds[32] = "";
    if (r->commands != CMD_TRAIN && r->type != CLI_HELP && r->type != CLI_VERSION) {
        cli_command_list(r->commands, cmds, sizeof cmds - 2);
        strcat(cmds, ": ");
    }
    snprintf(text, sizeof text, "%s%s%s%s%s%s", cmds, r->help, rg[0] ? ", " : "", rg,
             dflt[0] ? " " : "", dflt);
    cli_usage_wrap(out, text, col, USAGE_COLUMN);
    if (r->more)
        r->more(out);
}

/* A command's synopsis from the rows that apply to it: --checkpoint PATH, which eval and predict
 * require, then each other option in brackets, then the words that follow (rest). */
static void cli_usage_synopsis(FILE *out, gt_command cmd, const char *rest)
{
    char text[1024];
    int n = snprintf(text, sizeof text, "--checkpoint PATH");
    for (int i = 0; i < CLI_NROWS; i++) {
        const cli_row *r = &cli_rows[i];
        if (!(r->commands & (1u << cmd)) || strcmp(r->name, "checkpoint") == 0 ||
            r->type == CLI_HELP || r->type == CLI_VERSION)
            continue;
        n += snprintf(text + n, sizeof text - (size_t)n, " [--%s%s%s]", r->name,
                      r->value ? " " : "", r->value ? r->value : "");
    }
    if (rest[0])
        snprintf(text + n, sizeof text - (size_t)n, " %s", rest);
    cli_usage_wrap(out, text, fprintf(out, "  gputrain %s ", cli_commands[cmd]), 4);
}

void gt_cli_usage(FILE *out)
{
    gt_config d;
    gt_config_defaults(&d);
    fprintf(out,
        "Usage: gputrain [train|eval|predict] [options]\n"
        "  train (the default) trains a model; eval measures a saved checkpoint:\n");
    cli_usage_synopsis(out, GT_CMD_EVAL, "");
    fprintf(out,
        "  predict prints each image's top classes (PNG/JPEG files, or IDX ranges such as\n"
        "  test:0-9 of --data's splits, with the true label):\n");
    cli_usage_synopsis(out, GT_CMD_PREDICT, "IMAGE|SPLIT:FIRST-LAST...");
    fprintf(out,
        "Options are spelt in full and given at most once. They are train's unless their entry\n"
        "names the commands they apply to; a command refuses the options of others.\n");
    for (int i = 0; i < CLI_NROWS; i++) {
        if (cli_rows[i].section)
            fprintf(out, "\n%s:\n", cli_rows[i].section);
        cli_usage_row(out, &cli_rows[i], &d);
    }
}
