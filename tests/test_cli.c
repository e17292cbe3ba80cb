/* test_cli.c - the command line: every good form sets the right fields, every bad one is refused
 * with one line naming the flag and the value, and --help covers every option and mode. */
#include "gputrain/model.h" /* GT_SPECLEN, which config.h uses */
#include "gputrain/cli.h"
#include "gputrain/names.h"
#include "gputrain/checkpoint.h"
#include "test_util.h"

#include <getopt.h>

#define MAXARGS 16

/* Runs gt_cli_parse on "gputrain" followed by words (NULL-terminated), on writable copies. */
static int parse_words(const char *const *words, gt_config *c, gt_err *e, FILE *out)
{
    char *argv[MAXARGS + 2];
    int argc = 0;
    argv[argc++] = strdup("gputrain");
    for (int i = 0; i < MAXARGS && words[i]; i++)
        argv[argc++] = strdup(words[i]);
    argv[argc] = NULL;
    e->msg[0] = 0;
    int rc = gt_cli_parse(argc, argv, c, out, e);
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    return rc;
}

/* The configuration field named name, as a double; NAN for an unknown name. */
static double field(const gt_config *c, const char *name)
{
    static const char *names[] = {
        "command", "cpu_workers", "ngpus", "gpu0", "gpu1", "gpu2", "gpus_all", "gpus_given",
        "train_samples", "epochs", "batch", "kind", "lr", "momentum", "nesterov", "weight_decay",
        "beta1", "beta2", "eps", "schedule", "warmup", "step_epochs", "gamma", "total_epochs",
        "seed", "mode", "stripes", "staleness", "sync_every", "balance", "eval_every", "progress",
        "quiet", "checkpoint_every", "checkpoint_every_steps", "keep", "on_nan", "inject_worker",
        "inject_step", "stall_timeout", "precision", "log_steps", "overlap", "host_timeout",
        "allow_nonfinite", "literal", "on_diverge", "given", "ignore_classes", "top", "nitems",
        "exchange", "image_h", "image_w", "store_step", "augment_pad", "augment_flip",
        "normalize", "norm_count", "norm_mean1", "norm_std1", "val_split", "patience", "per_class",
        "ema", "no_ema", "store_parts", "store_threads", "store_grad", "deterministic"};
    const gt_optim_cfg *o = &c->optim;
    double v[] = {
        c->command, c->cpu_workers, c->ngpus, c->gpus[0], c->gpus[1], c->gpus[2], c->gpus_all,
        c->gpus_given, c->train_samples, c->epochs, c->batch, o->kind, o->lr, o->momentum,
        o->nesterov, o->weight_decay, o->beta1, o->beta2, o->eps, o->schedule, o->warmup_epochs,
        o->step_epochs, o->gamma, o->total_epochs, (double)c->seed, c->mode, c->stripes,
        c->staleness, c->sync_every, c->balance, c->eval_every, c->progress, c->quiet,
        c->checkpoint_every, c->checkpoint_every_steps, c->keep, c->on_nan, c->inject_worker,
        c->inject_step, c->stall_timeout, c->precision, c->log_steps, c->overlap, c->host_timeout,
        c->allow_nonfinite, c->literal, c->on_diverge, c->given, c->ignore_classes, c->top,
        c->nitems, c->exchange, c->image_size[0], c->image_size[1], c->store_step,
        c->augment.pad, c->augment.flip, c->normalize, c->norm_count, c->norm_given.mean[1],
        c->norm_given.std[1], c->val_split, c->patience, c->per_class, c->ema, c->no_ema,
        c->store_parts, c->store_threads, c->store_grad, c->deterministic};
    _Static_assert(sizeof names / sizeof *names == sizeof v / sizeof *v, "one value per name");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(names[i], name) == 0)
            return v[i];
    return NAN;
}

static const char *string_field(const gt_config *c, const char *name)
{
    if (strcmp(name, "model") == 0) return c->model;
    if (strcmp(name, "data") == 0) return c->data;
    if (strcmp(name, "log") == 0) return c->log_path;
    if (strcmp(name, "conv_cache") == 0) return c->conv_cache;
    if (strcmp(name, "checkpoint") == 0) return c->checkpoint;
    if (strcmp(name, "resume") == 0) return c->resume;
    if (strcmp(name, "init") == 0) return c->init;
    if (strcmp(name, "save_best") == 0) return c->save_best;
    if (strcmp(name, "confusion") == 0) return c->confusion;
    return NULL;
}

typedef struct good_case {
    const char *args[MAXARGS];
    const char *field;  /* a numeric field (see field()) or a string field (see string_field()) */
    double value;
    const char *text;   /* expected value of a string field, NULL for numeric ones */
} good_case;

static const good_case GOOD[] = {
    {{NULL}, "command", GT_CMD_TRAIN, NULL},
    {{NULL}, "epochs", 10, NULL},
    {{NULL}, "batch", 64, NULL},
    {{NULL}, "lr", 0.05, NULL},
    {{NULL}, "momentum", 0.9, NULL},
    {{NULL}, "ema", 0, NULL},
    {{NULL}, "kind", GT_OPT_SGD, NULL},
    {{NULL}, "schedule", GT_SCHED_CONSTANT, NULL},
    {{NULL}, "total_epochs", 10, NULL},
    {{NULL}, "seed", 1, NULL},
    {{NULL}, "mode", GT_MODE_HOGWILD, NULL},
    {{NULL}, "stripes", -1, NULL},
    {{NULL}, "staleness", 2, NULL},
    {{NULL}, "sync_every", 4, NULL},
    {{NULL}, "balance", GT_BALANCE_DYNAMIC, NULL},
    {{NULL}, "eval_every", 0, NULL},
    {{NULL}, "gpus_given", 0, NULL},
    {{NULL}, "gpus_all", 1, NULL},
    {{NULL}, "cpu_workers", 0, NULL},
    {{NULL}, "progress", -1, NULL},
    {{NULL}, "inject_worker", -1, NULL},
    {{NULL}, "inject_step", -1, NULL},
    {{NULL}, "keep", 0, NULL},
    {{NULL}, "train_samples", 0, NULL},
    {{NULL}, "on_nan", GT_NAN_STOP, NULL},
    {{NULL}, "stall_timeout", 0, NULL},
    {{NULL}, "host_timeout", 300, NULL},
    {{NULL}, "model", 0, "lenet5"},
    {{NULL}, "data", 0, ""},
    {{NULL}, "checkpoint", 0, ""},
    {{"train"}, "command", GT_CMD_TRAIN, NULL},
    {{"train", "--epochs", "3"}, "epochs", 3, NULL},
    {{"eval", "--checkpoint", "m.st"}, "command", GT_CMD_EVAL, NULL},
    {{"eval", "--checkpoint", "m.st", "--batch", "256"}, "batch", 256, NULL},
    {{"eval", "--checkpoint", "m.st", "--ignore-classes"}, "ignore_classes", 1, NULL},
    {{NULL}, "top", 3, NULL},
    {{NULL}, "image_h", 0, NULL},
    {{"--image-size", "48x64"}, "image_h", 48, NULL},
    {{NULL}, "augment_pad", 0, NULL},
    {{"--augment", "crop:2,flip"}, "augment_pad", 2, NULL},
    {{"--augment", "crop:2,flip"}, "augment_flip", 1, NULL},
    {{"--augment", "flip"}, "augment_pad", 0, NULL},
    {{"--augment", "none"}, "augment_flip", 0, NULL},
    {{NULL}, "normalize", GT_NORMALIZE_AUTO, NULL},
    {{"--normalize", "auto"}, "normalize", GT_NORMALIZE_AUTO, NULL},
    {{"--normalize", "none"}, "normalize", GT_NORMALIZE_NONE, NULL},
    {{"--normalize", "0.4914,0.4822,0.4465/0.247,0.2435,0.2616"}, "normalize", GT_NORMALIZE_GIVEN,
     NULL},
    {{"--normalize", "0.4914,0.4822,0.4465/0.247,0.2435,0.2616"}, "norm_count", 3, NULL},
    {{"--normalize", "0.4914,0.5,0.4465/0.247,0.25,0.2616"}, "norm_mean1", 0.5, NULL},
    {{"--normalize", "0.4914,0.5,0.4465/0.247,0.25,0.2616"}, "norm_std1", 0.25, NULL},
    {{"--normalize", "0.5/0.25"}, "norm_count", 1, NULL},
    {{"--image-size", "48x64"}, "image_w", 64, NULL},
    {{"predict", "--checkpoint", "m.st", "--image-size", "32", "a.png"}, "image_w", 32, NULL},
    {{"predict", "--checkpoint", "m.st", "a.png"}, "command", GT_CMD_PREDICT, NULL},
    {{"predict", "--checkpoint", "m.st", "--top", "5", "a.png"}, "top", 5, NULL},
    {{"predict", "a.png", "--checkpoint", "m.st", "test:0-9", "--top", "2"}, "nitems", 2, NULL},
    {{"predict", "--checkpoint", "m.st", "a.png", "--", "--top", "b"}, "nitems", 3, NULL},
    {{"--gpus", "0,1,3"}, "ngpus", 3, NULL},
    {{"--gpus", "0,1,3"}, "gpu0", 0, NULL},
    {{"--gpus", "0,1,3"}, "gpu1", 1, NULL},
    {{"--gpus", "0,1,3"}, "gpu2", 3, NULL},
    {{"--gpus", "0,1,3"}, "gpus_all", 0, NULL},
    {{"--gpus", "0,1,3"}, "gpus_given", 1, NULL},
    {{"--gpus", "0,1,3"}, "cpu_workers", 0, NULL},
    {{"--gpus=2"}, "gpu0", 2, NULL},
    {{"--gpus=2"}, "ngpus", 1, NULL},
    {{"--gpus", "all"}, "gpus_all", 1, NULL},
    {{"--gpus", "all"}, "gpus_given", 1, NULL},
    {{"--gpus", "all"}, "ngpus", 0, NULL},
    {{"--gpus", "cpu:4"}, "cpu_workers", 4, NULL},
    {{"--gpus", "cpu:4"}, "gpus_all", 0, NULL},
    {{"--gpus", "cpu:4"}, "ngpus", 0, NULL},
    {{"--gpus", "cpu:64"}, "cpu_workers", 64, NULL},
    {{"--mode", "sync"}, "mode", GT_MODE_SYNC, NULL},
    {{"--mode", "ssp"}, "mode", GT_MODE_SSP, NULL},
    {{"--mode", "local"}, "mode", GT_MODE_LOCAL, NULL},
    {{"--mode", "allreduce"}, "mode", GT_MODE_ALLREDUCE, NULL},
    {{"--mode", "hogwild"}, "mode", GT_MODE_HOGWILD, NULL},
    {{"--stripes", "0"}, "stripes", 0, NULL},
    {{"--stripes", "65536"}, "stripes", 65536, NULL},
    {{"--staleness", "0"}, "staleness", 0, NULL},
    {{"--staleness", "63"}, "staleness", GT_MAX_STALENESS, NULL},
    {{"--sync-every", "1"}, "sync_every", 1, NULL},
    {{"--sync-every", "1000000"}, "sync_every", 1000000, NULL},
    {{"--balance", "static"}, "balance", GT_BALANCE_STATIC, NULL},
    {{"--balance", "dynamic"}, "balance", GT_BALANCE_DYNAMIC, NULL},
    {{"--tf32"}, "precision", GT_PRECISION_TF32, NULL},
    {{"--precision", "bf16"}, "precision", GT_PRECISION_BF16, NULL},
    {{"--precision", "fp32"}, "precision", GT_PRECISION_FP32, NULL},
    {{NULL}, "deterministic", GT_DETERMINISTIC_AUTO, NULL},
    {{"--deterministic", "off"}, "deterministic", GT_DETERMINISTIC_OFF, NULL},
    {{"--deterministic", "on", "--tf32"}, "deterministic", GT_DETERMINISTIC_ON, NULL},
    {{"--overlap"}, "overlap", 1, NULL},
    {{NULL}, "store_step", 0, NULL},
    {{"--store-step"}, "store_step", 1, NULL},
    {{NULL}, "store_parts", -1, NULL},
    {{NULL}, "store_threads", 0, NULL},
    {{"--store-threads", "16"}, "store_threads", 16, NULL},
    {{"--store-threads", "1"}, "store_threads", 1, NULL},
    {{"--store-parts", "8"}, "store_parts", 8, NULL},
    {{"--store-parts", "0", "--overlap"}, "store_parts", 0, NULL},
    {{"--store-parts", "64", "--stripes", "64"}, "store_parts", 64, NULL},
    {{"--store-parts", "6", "--mode", "ssp"}, "store_parts", 6, NULL},
    {{"--store-parts", "5", "--mode", "sync"}, "store_parts", 5, NULL},
    {{NULL}, "store_grad", GT_STORE_GRAD_AUTO, NULL},
    {{"--store-grad", "bf16"}, "store_grad", GT_STORE_GRAD_BF16, NULL},
    {{"--store-grad", "fp32", "--mode", "sync"}, "store_grad", GT_STORE_GRAD_FP32, NULL},
    {{"--store-grad", "bf16", "--store-parts", "4"}, "store_grad", GT_STORE_GRAD_BF16, NULL},
    {{"--overlap", "--mode", "hogwild"}, "overlap", 1, NULL},
    {{"--model", "mlp"}, "model", 0, "mlp"},
    {{"--model", "@net.txt"}, "model", 0, "@net.txt"},
    {{"--data", "/tmp/fm"}, "data", 0, "/tmp/fm"},
    {{"--train-samples", "1000"}, "train_samples", 1000, NULL},
    {{"--train-samples", "4294967295"}, "train_samples", 4294967295.0, NULL},
    {{"--batch", "1"}, "batch", 1, NULL},
    {{"--batch=65536"}, "batch", 65536, NULL},
    {{"--epochs", "100000"}, "epochs", 100000, NULL},
    {{"--epochs", "7"}, "total_epochs", 7, NULL},
    {{"--epochs", "007"}, "epochs", 7, NULL},
    {{"--seed", "0"}, "seed", 0, NULL},
    {{"--seed", "123456789"}, "seed", 123456789, NULL},
    {{"--eval-every", "100"}, "eval_every", 100, NULL},
    {{"--optimizer", "adam"}, "kind", GT_OPT_ADAM, NULL},
    {{"--optimizer", "adam"}, "lr", 0.05, NULL},
    {{"--optimizer", "sgd"}, "kind", GT_OPT_SGD, NULL},
    {{"--lr", "1e-3"}, "lr", 1e-3, NULL},
    {{"--lr", "0.5"}, "lr", 0.5, NULL},
    {{"--momentum", "0"}, "momentum", 0, NULL},
    {{"--momentum", "0.99"}, "momentum", 0.99, NULL},
    {{"--nesterov"}, "nesterov", 1, NULL},
    {{"--weight-decay", "5e-4"}, "weight_decay", 5e-4, NULL},
    {{"--weight-decay", "0"}, "weight_decay", 0, NULL},
    {{"--beta1", "0"}, "beta1", 0, NULL},
    {{"--beta2", "0.98"}, "beta2", 0.98, NULL},
    {{"--eps", "1e-6"}, "eps", 1e-6, NULL},
    {{"--schedule", "step"}, "schedule", GT_SCHED_STEP, NULL},
    {{"--schedule", "cosine"}, "schedule", GT_SCHED_COSINE, NULL},
    {{"--schedule", "constant"}, "schedule", GT_SCHED_CONSTANT, NULL},
    {{"--warmup", "0.5"}, "warmup", 0.5, NULL},
    {{"--warmup", "0"}, "warmup", 0, NULL},
    {{"--step-epochs", "2.5"}, "step_epochs", 2.5, NULL},
    {{"--gamma", "1"}, "gamma", 1, NULL},
    {{"--gamma", "0.5"}, "gamma", 0.5, NULL},
    {{"--ema", "0.999"}, "ema", 0.999f, NULL},
    {{"--ema", "0.5", "--mode", "local"}, "ema", 0.5, NULL},
    {{"eval", "--checkpoint", "m.st", "--no-ema"}, "no_ema", 1, NULL},
    {{"predict", "--checkpoint", "m.st", "--no-ema", "a.png"}, "no_ema", 1, NULL},
    {{"--checkpoint", "a.st"}, "checkpoint", 0, "a.st"},
    {{"--checkpoint-every", "2"}, "checkpoint_every", 2, NULL},
    {{"--checkpoint-every", "2"}, "checkpoint_every_steps", 0, NULL},
    {{"--checkpoint-every", "500s"}, "checkpoint_every", 500, NULL},
    {{"--checkpoint-every", "500s"}, "checkpoint_every_steps", 1, NULL},
    {{"--keep", "1000"}, "keep", 1000, NULL},
    {{"--keep", "0"}, "keep", 0, NULL},
    {{"--resume", "r.st"}, "resume", 0, "r.st"},
    {{"--init", "i.st"}, "init", 0, "i.st"},
    {{"--allow-nonfinite"}, "allow_nonfinite", 1, NULL},
    {{"--on-nan", "skip"}, "on_nan", GT_NAN_SKIP, NULL},
    {{"--on-nan", "stop"}, "on_nan", GT_NAN_STOP, NULL},
    {{"--on-nan", "stop"}, "given", GT_GIVEN_ON_NAN, NULL},
    {{NULL}, "given", 0, NULL},
    {{NULL}, "literal", 0, NULL},
    {{"--literal"}, "literal", 1, NULL},
    {{NULL}, "on_diverge", GT_DIVERGE_RECOVER, NULL},
    {{"--on-diverge", "stop"}, "on_diverge", GT_DIVERGE_STOP, NULL},
    {{"--on-diverge", "recover"}, "on_diverge", GT_DIVERGE_RECOVER, NULL},
    {{NULL}, "exchange", GT_EXCHANGE_AUTO, NULL},
    {{"--exchange", "nccl"}, "exchange", GT_EXCHANGE_NCCL, NULL},
    {{"--exchange", "p2p"}, "exchange", GT_EXCHANGE_P2P, NULL},
    /* the options that eval and predict read besides --checkpoint */
    {{"eval", "--checkpoint", "m.st", "--data", "d", "--gpus", "cpu:2", "--tf32",
      "--allow-nonfinite", "--host-timeout", "5"}, "cpu_workers", 2, NULL},
    {{"predict", "--checkpoint", "m.st", "--data", "d", "--allow-nonfinite", "--ignore-classes",
      "a.png"}, "ignore_classes", 1, NULL},
    {{"--lr", "0.1", "--momentum", "0.5", "--warmup", "1"}, "given",
     GT_GIVEN_LR | GT_GIVEN_MOMENTUM | GT_GIVEN_WARMUP, NULL},
    {{"--inject-fault", "1:20"}, "inject_worker", 1, NULL},
    {{"--inject-fault", "1:20"}, "inject_step", 20, NULL},
    {{"--inject-fault", "0:0"}, "inject_step", 0, NULL},
    {{"--stall-timeout", "2.5"}, "stall_timeout", 2.5, NULL},
    {{"--host-timeout", "0"}, "host_timeout", 0, NULL},
    {{"--host-timeout", "30"}, "host_timeout", 30, NULL},
    {{"--log", "run.jsonl"}, "log", 0, "run.jsonl"},
    {{NULL}, "conv_cache", 0, ""},
    {{"--conv-cache", "off"}, "conv_cache", 0, "off"},
    {{"predict", "--checkpoint", "m.st", "--conv-cache", "/tmp/c", "a.png"}, "conv_cache", 0, "/tmp/c"},
    {{"--progress"}, "progress", 1, NULL},
    {{"--no-progress"}, "progress", 0, NULL},
    {{"--quiet"}, "quiet", 1, NULL},
    {{"--log-steps"}, "log_steps", 1, NULL},
    {{NULL}, "val_split", 0, NULL},
    {{NULL}, "patience", 0, NULL},
    {{NULL}, "save_best", 0, ""},
    {{"--val-split", "0.1"}, "val_split", 0.1, NULL},
    {{"--val-split", "0"}, "val_split", 0, NULL},
    {{"--save-best", "best.st"}, "save_best", 0, "best.st"},
    {{"--patience", "5"}, "patience", 5, NULL},
    {{"eval", "--checkpoint", "m.st", "--per-class"}, "per_class", 1, NULL},
    {{"eval", "--checkpoint", "m.st", "--confusion", "cm.json"}, "confusion", 0, "cm.json"},
    {{"--epochs", "2", "--"}, "epochs", 2, NULL},
    {{"--mode", "ssp", "--staleness", "3", "--gpus", "cpu:2", "--batch", "32"}, "staleness", 3,
     NULL},
    {{"--mode", "ssp", "--staleness", "3", "--gpus", "cpu:2", "--batch", "32"}, "batch", 32, NULL},
};

typedef struct bad_case {
    const char *args[MAXARGS];
    const char *flag;   /* the message must contain both */
    const char *value;
} bad_case;

static const bad_case BAD[] = {
    {{"--gpus", ""}, "--gpus", "''"},
    {{"--gpus", "0,,1"}, "--gpus", "'0,,1'"},
    {{"--gpus", ",1"}, "--gpus", "',1'"},
    {{"--gpus", "0,"}, "--gpus", "'0,'"},
    {{"--gpus", "0,0"}, "--gpus", "GPU 0 listed twice"},
    {{"--overlap", "--mode", "ssp"}, "--overlap", "'ssp'"},
    {{"--store-parts", "4", "--mode", "local"}, "--store-parts 4", "'local'"},
    {{"--store-parts", "2", "--overlap"}, "--store-parts 2", "--overlap"},
    {{"--store-parts", "8", "--stripes", "0"}, "--store-parts 8", "--stripes 0"},
    {{"--store-parts", "65"}, "--store-parts", "65"},
    {{"--store-grad", "fp16"}, "--store-grad", "fp16"},
    {{"--store-grad", "bf16", "--mode", "sync"}, "--store-grad bf16", "sync"},
    {{"--store-grad", "bf16", "--mode", "ssp", "--store-parts", "4"}, "--store-grad bf16", "fp32"},
    {{"--store-grad", "bf16", "--overlap"}, "--store-grad bf16", "--overlap"},
    {{"--store-grad", "bf16", "--stripes", "0"}, "--store-grad bf16", "--stripes 0"},
    {{"--store-grad", "bf16", "--store-parts", "1"}, "--store-grad bf16", "--store-parts 0 or 1"},
    {{"--store-parts", "-1"}, "--store-parts", "-1"},
    {{"--store-threads", "0"}, "--store-threads", "0"},
    {{"--store-threads", "257"}, "--store-threads", "257"},
    {{"--mode", "allreduce", "--gpus", "cpu:2"}, "--mode allreduce", "cpu:2"},
    {{"--mode", "allreduce", "--on-nan", "skip"}, "--on-nan skip", "allreduce"},
    {{"--gpus", "2,1,2"}, "--gpus", "GPU 2 listed twice"},
    {{"--gpus", "-1"}, "--gpus", "'-1'"},
    {{"--gpus", "abc"}, "--gpus", "'abc'"},
    {{"--gpus", "0,1x"}, "--gpus", "'1x'"},
    {{"--gpus", " 1"}, "--gpus", "' 1'"},
    {{"--gpus", "1024"}, "--gpus", "1024"},
    {{"--gpus", "ALL"}, "--gpus", "'ALL'"},
    {{"--gpus", "cpu:0"}, "--gpus", "cpu:0 is out of range"},
    {{"--gpus", "cpu:abc"}, "--gpus", "'cpu:abc'"},
    {{"--gpus", "cpu:"}, "--gpus", "'cpu:'"},
    {{"--gpus", "cpu:65"}, "--gpus", "cpu:65"},
    {{"--gpus", "cpu:2x"}, "--gpus", "'cpu:2x'"},
    {{"--batch", "0"}, "--batch", "0 is out of range (1..65536)"},
    {{"--batch", "65537"}, "--batch", "65537"},
    {{"--batch", ""}, "--batch", "'' is not a whole number"},
    {{"--batch"}, "--batch", "needs a value"},
    {{"--batch", " 5"}, "--batch", "' 5'"},
    {{"--batch", "5.0"}, "--batch", "'5.0'"},
    {{"--batch", "0x10"}, "--batch", "'0x10'"},
    {{"--batch", "+5"}, "--batch", "'+5'"},
    {{"--batch", "-5"}, "--batch", "-5"},
    {{"--batch", "12abc"}, "--batch", "'12abc' is not a whole number"},
    {{"--epochs", "12abc"}, "--epochs", "'12abc'"},
    {{"--epochs", "0"}, "--epochs", "0 is out of range"},
    {{"--epochs", "100001"}, "--epochs", "100001"},
    {{"--epochs", "99999999999999999999"}, "--epochs", "99999999999999999999"},
    {{"--epochs", "1", "--epochs", "2"}, "--epochs", "given twice"},
    {{"--lr", "nan"}, "--lr", "'nan' is not a number"},
    {{"--lr", "0x1p-4"}, "--lr", "'0x1p-4' is not a number"},
    {{"--lr", "inf"}, "--lr", "'inf'"},
    {{"--lr", "1e999"}, "--lr", "'1e999'"},
    {{"--lr", "1e39"}, "--lr", "'1e39'"},
    {{"--lr", "0"}, "--lr", "'0'"},
    {{"--lr", "-0.1"}, "--lr", "'-0.1'"},
    {{"--lr", "abc"}, "--lr", "'abc' is not a number"},
    {{"--lr", ""}, "--lr", "''"},
    {{"--lr", " 0.1"}, "--lr", "' 0.1'"},
    {{"--lr", "0.1 "}, "--lr", "'0.1 '"},
    {{"--momentum", "1"}, "--momentum", "'1'"},
    {{"--momentum", "-0.1"}, "--momentum", "'-0.1'"},
    {{"--momentum", "0.99999999999"}, "--momentum", "'0.99999999999'"},
    {{"--weight-decay", "-1"}, "--weight-decay", "'-1'"},
    {{"--beta1", "1"}, "--beta1", "'1'"},
    {{"--beta2", "-0.5"}, "--beta2", "'-0.5'"},
    {{"--eps", "0"}, "--eps", "'0'"},
    {{"--gamma", "0"}, "--gamma", "'0'"},
    {{"--ema", "1"}, "--ema", "'1'"},
    {{"--ema", "-0.5"}, "--ema", "'-0.5'"},
    {{"--ema", "nan"}, "--ema", "'nan'"},
    {{"eval", "--checkpoint", "m.st", "--ema", "0.9"}, "--ema", "does not apply to eval"},
    {{"train", "--no-ema"}, "--no-ema", "does not apply to train"},
    {{"--gamma", "1.5"}, "--gamma", "'1.5'"},
    {{"--warmup", "-1"}, "--warmup", "'-1'"},
    {{"--step-epochs", "0"}, "--step-epochs", "'0'"},
    {{"--seed", "-1"}, "--seed", "'-1'"},
    {{"--seed", "1.5"}, "--seed", "'1.5'"},
    {{"--seed", "18446744073709551616"}, "--seed", "18446744073709551616"},
    {{"--train-samples", "0"}, "--train-samples", "0 is out of range"},
    {{"--train-samples", "4294967296"}, "--train-samples", "4294967296"},
    {{"--stripes", "-1"}, "--stripes", "-1 is out of range (0..65536)"},
    {{"--stripes", "65537"}, "--stripes", "65537"},
    {{"--staleness", "-1"}, "--staleness", "-1"},
    {{"--staleness", "64"}, "--staleness", "64 is out of range (0..63)"},
    {{"--staleness", "1000000"}, "--staleness", "1000000 is out of range (0..63)"},
    {{"--sync-every", "0"}, "--sync-every", "0 is out of range"},
    {{"--eval-every", "-1"}, "--eval-every", "-1"},
    {{"--mode", "foo"}, "--mode", "'foo' is not one of hogwild, sync, ssp, local, allreduce"},
    {{"--mode", "Sync"}, "--mode", "'Sync'"},
    {{"--mode", ""}, "--mode", "''"},
    {{"--balance", "fair"}, "--balance", "'fair' is not one of dynamic, static"},
    {{"--optimizer", "rmsprop"}, "--optimizer", "'rmsprop' is not one of sgd, adam"},
    {{"--schedule", "linear"}, "--schedule", "'linear' is not one of constant, step, cosine"},
    {{"--on-nan", "ignore"}, "--on-nan", "'ignore' is not one of stop, skip"},
    {{"--on-diverge", "skip"}, "--on-diverge", "'skip' is not one of recover, stop"},
    {{"--checkpoint-every", "0"}, "--checkpoint-every", "0 is out of range"},
    {{"--checkpoint-every", "0s"}, "--checkpoint-every", "0s"},
    {{"--checkpoint-every", "3x"}, "--checkpoint-every", "'3x'"},
    {{"--checkpoint-every", "s"}, "--checkpoint-every", "'s'"},
    {{"--checkpoint-every", "3ss"}, "--checkpoint-every", "'3ss'"},
    {{"--checkpoint-every", "-1"}, "--checkpoint-every", "'-1'"},
    {{"--checkpoint-every", "99999999999"}, "--checkpoint-every", "99999999999"},
    {{"--keep", "1001"}, "--keep", "1001"},
    {{"--keep", "-1"}, "--keep", "-1"},
    {{"--inject-fault", "1"}, "--inject-fault", "'1'"},
    {{"--inject-fault", "1:"}, "--inject-fault", "'1:'"},
    {{"--inject-fault", ":1"}, "--inject-fault", "':1'"},
    {{"--inject-fault", "1:2:3"}, "--inject-fault", "'1:2:3'"},
    {{"--inject-fault", "-1:2"}, "--inject-fault", "'-1:2'"},
    {{"--inject-fault", "a:b"}, "--inject-fault", "'a:b'"},
    {{"--inject-fault", "64:1"}, "--inject-fault", "64:1"},
    {{"--stall-timeout", "0"}, "--stall-timeout", "'0'"},
    {{"--host-timeout", "-1"}, "--host-timeout", "'-1'"},
    {{"--host-timeout", "soon"}, "--host-timeout", "'soon'"},
    {{"--stall-timeout", "nan"}, "--stall-timeout", "'nan'"},
    {{"--stall-timeout", "inf"}, "--stall-timeout", "'inf'"},
    {{"--val-split", "1"}, "--val-split", "'1'"},
    {{"--val-split", "-0.1"}, "--val-split", "'-0.1'"},
    {{"--val-split", "x"}, "--val-split", "'x'"},
    {{"--val-split", "nan"}, "--val-split", "'nan'"},
    {{"--patience", "-1"}, "--patience", "-1"},
    {{"--patience", "two"}, "--patience", "'two'"},
    {{"--save-best", ""}, "--save-best", "''"},
    {{"eval", "--checkpoint", "m.st", "--patience", "3"}, "--patience", "eval"},
    {{"eval", "--checkpoint", "m.st", "--confusion", ""}, "--confusion", "''"},
    {{"--per-class"}, "--per-class", "train"},
    {{"predict", "--checkpoint", "m.st", "--confusion", "x.csv", "a.png"}, "--confusion", "predict"},
    {{"--resume", "a", "--init", "b"}, "--resume 'a'", "--init 'b'"},
    {{"--model", ""}, "--model", "''"},
    {{"--data", ""}, "--data", "''"},
    {{"--log", ""}, "--log", "''"},
    {{"--conv-cache", ""}, "--conv-cache", "''"},
    {{"--checkpoint", ""}, "--checkpoint", "''"},
    {{"--unknown"}, "unknown option", "'--unknown'"},
    {{"--foo=3"}, "unknown option", "'--foo=3'"},
    {{"--epo", "3"}, "unknown option", "'--epo'"},
    {{"--s", "3"}, "unknown option", "'--s'"},
    {{"-x"}, "unknown option", "'-x'"},
    {{"-gpus", "0,1"}, "unknown option", "'-gpus'"},
    {{"--nesterov=1"}, "--nesterov", "'--nesterov=1'"},
    {{"--nesterov", "--nesterov"}, "--nesterov", "given twice"},
    {{"--batch", "8", "--batch=8"}, "--batch", "given twice"},
    {{"--progress", "--no-progress"}, "--progress", "--no-progress"},
    {{"eval"}, "eval", "--checkpoint PATH is required"},
    {{"eval", "--data", "x"}, "eval", "--checkpoint PATH is required"},
    {{"predict", "a.png"}, "predict", "--checkpoint PATH is required"},
    {{"predict", "--", "--checkpoint", "m.st"}, "predict", "--checkpoint PATH is required"},
    {{"predict", "--checkpoint", "m.st"}, "predict", "at least one image"},
    {{"predict", "--checkpoint", "m.st", "--top", "0", "a.png"}, "--top", "0 is out of range"},
    {{"--image-size", "32x"}, "--image-size", "'32x' is not HxW or N"},
    {{"--augment", "crop:0"}, "--augment", "crop padding 0 is out of range (1..64)"},
    {{"--normalize", "0.5"}, "--normalize", "'0.5' is not M1,M2,.../S1,S2,..."},
    {{"--normalize", "0.5,/0.2"}, "--normalize", "is not M1,M2"},
    {{"--normalize", "0.5,0.4/0.2"}, "--normalize", "has 2 means and 1 standard deviations"},
    {{"--normalize", "0.5/0"}, "--normalize", "standard deviation 0 is not positive"},
    {{"--normalize", "0.5/nan"}, "--normalize", "is not M1,M2"},
    {{"--normalize", "0.5/0.2x"}, "--normalize", "is not M1,M2"},
    {{"--normalize", "Auto"}, "--normalize", "(or none, auto)"},
    {{"--augment", "rotate"}, "--augment", "'rotate' is not none or a list of crop:P and flip"},
    {{"--image-size", "x32"}, "--image-size", "'x32' is not HxW or N"},
    {{"--image-size", "32x0"}, "--image-size", "32x0 is out of range"},
    {{"--image-size", "4097"}, "--image-size", "4097 is out of range (sides 1..4096)"},
    {{"--data", "synthetic:3x32"}, "--data", "'synthetic:3x32' is not synthetic:CxHxW:K"},
    {{"x"}, "unexpected argument", "'x'"},
    {{"--epochs", "2", "x"}, "unexpected argument", "'x'"},
    {{"train", "eval"}, "unexpected argument", "'eval'"},
    /* an option the command does not read is refused, not ignored */
    {{"eval", "--checkpoint", "m.st", "--log", "l.jsonl"},
     "--log", "does not apply to eval (only to train)"},
    {{"eval", "--checkpoint", "m.st", "--epochs", "3"}, "--epochs", "does not apply to eval"},
    {{"eval", "--checkpoint", "m.st", "--lr", "0.1"}, "--lr", "does not apply to eval"},
    {{"eval", "--checkpoint", "m.st", "--mode", "sync"}, "--mode", "does not apply to eval"},
    {{"eval", "--checkpoint", "m.st", "--resume", "r.st"}, "--resume", "does not apply to eval"},
    {{"eval", "--checkpoint", "m.st", "--top", "2"},
     "--top", "does not apply to eval (only to predict)"},
    {{"predict", "--checkpoint", "m.st", "--epochs", "3", "a.png"},
     "--epochs", "does not apply to predict"},
    {{"predict", "--checkpoint", "m.st", "--gpus", "0", "a.png"},
     "--gpus", "does not apply to predict (only to train, eval)"},
    {{"predict", "--checkpoint", "m.st", "--batch", "8", "a.png"},
     "--batch", "does not apply to predict"},
    {{"--top", "2"}, "--top", "does not apply to train (only to predict)"},
    {{"train", "--ignore-classes"},
     "--ignore-classes", "does not apply to train (only to eval, predict)"},
    {{"--exchange", "ring"}, "--exchange", "'ring' is not one of auto, p2p, nccl"},
    {{"--precision", "fp16"}, "--precision", "'fp16' is not one of fp32, tf32, bf16"},
    {{"--deterministic", "yes"}, "--deterministic", "'yes' is not one of auto, on, off"},
    {{"eval", "--checkpoint", "m.st", "--deterministic", "off"}, "--deterministic",
     "does not apply to eval"},
    {{"eval", "--checkpoint", "m.st", "--exchange", "p2p"}, "--exchange", "does not apply to eval"},
    {{"--epochs", "2", "--", "x"}, "unexpected argument", "'x'"},
    {{"--epochs", "2", "--", "--batch", "3"}, "unexpected argument", "'--batch'"},
};

static void test_good_forms(void)
{
    for (size_t i = 0; i < sizeof GOOD / sizeof *GOOD; i++) {
        const good_case *t = &GOOD[i];
        gt_config c;
        gt_err e;
        int rc = parse_words(t->args, &c, &e, stdout);
        CHECK_MSG(rc == 0, "good case %zu (%s): rc %d: %s", i, t->field, rc, e.msg);
        if (rc != 0)
            continue;
        if (t->text) {
            const char *s = string_field(&c, t->field);
            CHECK_MSG(s && strcmp(s, t->text) == 0, "good case %zu: %s is '%s', expected '%s'", i,
                      t->field, s ? s : "(no such field)", t->text);
        } else {
            double v = field(&c, t->field);
            CHECK_MSG(fabs(v - t->value) <= 1e-6 * fmax(1.0, fabs(t->value)),
                      "good case %zu: %s is %.9g, expected %.9g", i, t->field, v, t->value);
        }
    }
}

static void test_bad_forms(void)
{
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        const bad_case *t = &BAD[i];
        gt_config c;
        gt_err e;
        int rc = parse_words(t->args, &c, &e, stdout);
        CHECK_MSG(rc == -1, "bad case %zu (%s %s): rc %d", i, t->flag, t->value, rc);
        CHECK_MSG(strstr(e.msg, t->flag) && strstr(e.msg, t->value),
                  "bad case %zu: message \"%s\" lacks \"%s\" or \"%s\"", i, e.msg, t->flag,
                  t->value);
        CHECK_MSG(!strchr(e.msg, '\n'), "bad case %zu: message has a newline", i);
    }
}

/* Every option must be exercised by some good case, so none is left untested. */
static void test_every_option_has_a_good_case(void)
{
    for (const struct option *o = gt_cli_options(); o->name; o++) {
        if (strcmp(o->name, "help") == 0 || strcmp(o->name, "version") == 0)
            continue;
        char flag[64], prefix[64];
        snprintf(flag, sizeof flag, "--%s", o->name);
        snprintf(prefix, sizeof prefix, "--%s=", o->name);
        int found = 0;
        for (size_t i = 0; i < sizeof GOOD / sizeof *GOOD && !found; i++)
            for (int a = 0; a < MAXARGS && GOOD[i].args[a] && !found; a++)
                found = strcmp(GOOD[i].args[a], flag) == 0 ||
                        strncmp(GOOD[i].args[a], prefix, strlen(prefix)) == 0;
        CHECK_MSG(found, "no good case uses %s", flag);
    }
}

static void test_gpu_list_limits(void)
{
    gt_config c;
    gt_err e;
    char list[1024] = "";
    for (int i = 0; i < GT_MAX_WORKERS; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? "," : "", i);
    gt_config_defaults(&c);
    CHECK(gt_cli_parse_gpus(list, &c, &e) == 0);
    CHECK(c.ngpus == GT_MAX_WORKERS && c.gpus[GT_MAX_WORKERS - 1] == GT_MAX_WORKERS - 1);

    snprintf(list + strlen(list), sizeof list - strlen(list), ",%d", GT_MAX_WORKERS);
    gt_config_defaults(&c);
    CHECK(gt_cli_parse_gpus(list, &c, &e) == -1);
    CHECK(strstr(e.msg, "--gpus") && strstr(e.msg, "more than"));
    CHECK(c.ngpus == 0 && c.gpus_given == 0); /* a refused list leaves the config alone */

    gt_config_defaults(&c);
    CHECK(gt_cli_parse_gpus("0,1", &c, &e) == 0 && c.ngpus == 2);
    CHECK(gt_cli_parse_gpus("cpu:3", &c, &e) == 0 && c.ngpus == 0 && c.cpu_workers == 3);
    CHECK(gt_cli_parse_gpus("all", &c, &e) == 0 && c.cpu_workers == 0 && c.gpus_all == 1);
}

static void test_long_strings(void)
{
    static char spec[GT_SPECLEN + 1], path[GT_PATHLEN + 1];
    gt_config c;
    gt_err e;
    memset(spec, 'x', GT_SPECLEN - 1);
    const char *fits[] = {"--model", spec, NULL};
    CHECK(parse_words(fits, &c, &e, stdout) == 0 && strlen(c.model) == GT_SPECLEN - 1);
    spec[GT_SPECLEN - 1] = 'x';
    const char *too_long[] = {"--model", spec, NULL};
    CHECK(parse_words(too_long, &c, &e, stdout) == -1 && strstr(e.msg, "--model") &&
          strstr(e.msg, "xxxx"));
    memset(path, 'p', GT_PATHLEN);
    const char *long_path[] = {"--checkpoint", path, NULL};
    CHECK(parse_words(long_path, &c, &e, stdout) == -1 && strstr(e.msg, "--checkpoint"));
}

static void test_seed_range(void)
{
    gt_config c;
    gt_err e;
    const char *max[] = {"--seed", "18446744073709551615", NULL};
    CHECK(parse_words(max, &c, &e, stdout) == 0 && c.seed == UINT64_MAX);
}

/* --deterministic as it applies: auto is on but with --precision tf32; on and off are kept. */
static void test_deterministic_rule(void)
{
    static const struct {
        int given, precision, on;
    } rows[] = {
        {GT_DETERMINISTIC_AUTO, GT_PRECISION_FP32, 1}, {GT_DETERMINISTIC_AUTO, GT_PRECISION_BF16, 1},
        {GT_DETERMINISTIC_AUTO, GT_PRECISION_TF32, 0}, {GT_DETERMINISTIC_ON, GT_PRECISION_TF32, 1},
        {GT_DETERMINISTIC_OFF, GT_PRECISION_FP32, 0}, {GT_DETERMINISTIC_OFF, GT_PRECISION_BF16, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        gt_config c;
        gt_config_defaults(&c);
        c.deterministic = rows[i].given;
        c.precision = rows[i].precision;
        CHECK_MSG(gt_config_deterministic(&c) == rows[i].on, "row %zu", i);
    }
}

/* The text of an option's entry in the help: from its line to the next option line. */
static int help_entry(const char *help, const char *name, char *entry, size_t cap)
{
    char key[64];
    int n = snprintf(key, sizeof key, "\n  --%s", name);
    for (const char *p = strstr(help, key); p; p = strstr(p + 1, key)) {
        char next = p[n];
        if (next != ' ' && next != '\n')
            continue;
        const char *end = strstr(p + n, "\n  --");
        const char *blank = strstr(p + n, "\n\n");
        if (!end || (blank && blank < end))
            end = blank ? blank : p + strlen(p);
        snprintf(entry, cap, "%.*s", (int)(end - p), p);
        return 0;
    }
    return -1;
}

static void test_help(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    gt_config c;
    gt_err e;
    const char *help[] = {"--help", NULL};
    CHECK(parse_words(help, &c, &e, out) == 1);
    fclose(out);
    for (const struct option *o = gt_cli_options(); o->name; o++) {
        char entry[2048];
        CHECK_MSG(help_entry(text, o->name, entry, sizeof entry) == 0, "--help lacks --%s",
                  o->name);
        if (o->has_arg == no_argument && (strcmp(o->name, "help") == 0 ||
                                          strcmp(o->name, "version") == 0))
            continue;
        CHECK_MSG(strstr(entry, "default"), "--help gives no default for --%s", o->name);
    }
    char entry[2048], range[32];
    snprintf(range, sizeof range, "0..%d", GT_MAX_STALENESS);
    CHECK_MSG(help_entry(text, "staleness", entry, sizeof entry) == 0 && strstr(entry, range),
              "--help does not give --staleness's range %s", range);
    const char *words[] = {"hogwild", "sync", "ssp", "local", "allreduce", "lock-free",
                           "Devices and modes", "Model and data", "Optimisation",
                           "Checkpoints and faults", "Output", "16 KiB"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        CHECK_MSG(strstr(text, words[i]), "--help does not mention %s", words[i]);
    free(text);

    text = NULL;
    out = open_memstream(&text, &len);
    const char *short_help[] = {"-h", NULL};
    CHECK(parse_words(short_help, &c, &e, out) == 1);
    fclose(out);
    CHECK(len > 1000 && strstr(text, "Usage: gputrain"));
    free(text);
}

static void test_version_and_order(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    gt_config c;
    gt_err e;
    const char *version[] = {"--version", NULL};
    CHECK(parse_words(version, &c, &e, out) == 1);
    fclose(out);
    CHECK(strncmp(text, "gputrain ", 9) == 0 && len > 10 && text[len - 1] == '\n');
    free(text);

    /* options are read in order: help before a bad option wins, after one loses */
    out = open_memstream(&text, &len);
    const char *help_first[] = {"--help", "--bogus", NULL};
    CHECK(parse_words(help_first, &c, &e, out) == 1);
    const char *bad_first[] = {"--bogus", "--help", NULL};
    CHECK(parse_words(bad_first, &c, &e, out) == -1 && strstr(e.msg, "--bogus"));
    fclose(out);
    free(text);
}

/* A second parse starts from the defaults, not from what the first one set. */
static void test_repeated_parses(void)
{
    gt_config c;
    gt_err e;
    const char *first[] = {"--epochs", "3", "--nesterov", "--gpus", "0,1", NULL};
    CHECK(parse_words(first, &c, &e, stdout) == 0 && c.epochs == 3 && c.optim.nesterov == 1);
    const char *second[] = {"--batch", "8", NULL};
    CHECK(parse_words(second, &c, &e, stdout) == 0);
    CHECK(c.epochs == 10 && c.optim.nesterov == 0 && c.batch == 8 && c.ngpus == 0 &&
          c.gpus_given == 0);
    CHECK(gt_cli_parse(1, (char *[]){"gputrain", NULL}, &c, stdout, &e) == 0 && c.batch == 64);
}

/* Every row of every name table reads back to itself through the parser and the command line;
 * an unknown word or value is refused, never mapped to a neighbour. */
static void test_name_tables(void)
{
    static const gt_name_set sets[] = {GT_NAMES_MODE, GT_NAMES_OPTIMIZER, GT_NAMES_SCHEDULE,
                                       GT_NAMES_BALANCE, GT_NAMES_ON_NAN, GT_NAMES_ON_DIVERGE,
                                       GT_NAMES_EXCHANGE};
    static const char *const flags[] = {"--mode", "--optimizer", "--schedule", "--balance",
                                        "--on-nan", "--on-diverge", "--exchange"};
    static const char *const fields[] = {"mode", "kind", "schedule", "balance", "on_nan",
                                         "on_diverge", "exchange"};
    for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
        char list[GT_NAMES_LIST_LEN];
        CHECK_MSG(gt_name_list(sets[s], ", ", list, sizeof list) == 0, "%s's words do not fit "
                  "GT_NAMES_LIST_LEN", flags[s]);
        CHECK(gt_name_list(sets[s], ", ", list, 4) == -1 && strlen(list) < 4);
        gt_name_list(sets[s], " ", list, sizeof list);
        int rows = 0, v = -1;
        for (char *w = strtok(list, " "); w; w = strtok(NULL, " "), rows++) {
            CHECK_MSG(gt_name_value(sets[s], w, &v) == 0 && strcmp(gt_name(sets[s], v), w) == 0,
                      "%s %s does not read back", flags[s], w);
            gt_config c;
            gt_err e;
            const char *args[] = {flags[s], w, NULL};
            if (strcmp(w, "allreduce") == 0)
                continue; /* the default --gpus is fine for it; checked in BAD for cpu:N */
            CHECK_MSG(parse_words(args, &c, &e, stdout) == 0 && field(&c, fields[s]) == v,
                      "%s %s: %s", flags[s], w, e.msg);
        }
        CHECK_MSG(rows >= 2, "%s has %d words", flags[s], rows);
        CHECK(gt_name_value(sets[s], "no-such-word", &v) == -1);
        CHECK(gt_name_value(sets[s], NULL, &v) == -1);
        CHECK(strcmp(gt_name(sets[s], 1000), "?") == 0 && strcmp(gt_name(sets[s], -1), "?") == 0);
    }
    gt_mode m;
    int k = -1;
    CHECK(gt_mode_parse("ssp", &m) == 0 && m == GT_MODE_SSP && gt_mode_parse("SSP", &m) == -1);
    CHECK(gt_name_value(GT_NAMES_OPTIMIZER, "adam", &k) == 0 && k == GT_OPT_ADAM);
    CHECK(gt_name_value(GT_NAMES_OPTIMIZER, "rmsprop", &k) == -1 && k == GT_OPT_ADAM);
    CHECK(gt_name_value(GT_NAMES_SCHEDULE, "cosine", &k) == 0 && k == GT_SCHED_COSINE);
    CHECK(strcmp(gt_optimizer_name(GT_OPT_SGD), "sgd") == 0);
    CHECK(gt_optimizer_row_of(GT_OPT_ADAM)->nstate == 2 && gt_mode_row_of(GT_MODE_SYNC)->clocked &&
          !gt_mode_row_of(GT_MODE_HOGWILD)->clocked && gt_mode_row_of((gt_mode)99) == NULL);
    CHECK(gt_mode_count() == 5 && gt_mode_row_at(gt_mode_count()) == NULL);
    /* checkpoints store the mode's and the optimizer's word in fixed fields */
    gt_ckpt_meta meta;
    for (int i = 0; i < gt_mode_count(); i++)
        CHECK(strlen(gt_mode_row_at(i)->head.name) < sizeof meta.mode);
    for (int k = 0; gt_optimizer_row_of((gt_opt_kind)k); k++)
        CHECK(strlen(gt_optimizer_name((gt_opt_kind)k)) < sizeof meta.optimizer);
}

/* What a --resume takes again: the options given that shape the run are kept as a JSON array of
 * "--name=value" and "--switch" strings (values escaped), the others not; a resumed command line
 * puts the kept ones that it does not set itself before its own, keeps its command word, treats
 * rows of one field as one (--tf32 and --precision), and refuses a list naming other options. */
static void test_resume_options(void)
{
    gt_config c;
    gt_err e;
    const char *given[] = {"--gpus", "cpu:2", "--lr", "0.01", "--nesterov", "--schedule", "cosine",
                           "--model", "conv:4:3 \"q\" relu fc:10", "--tf32", "--checkpoint",
                           "ck", "--epochs", "3", NULL};
    CHECK(parse_words(given, &c, &e, stdout) == 0);
    CHECK_MSG(strcmp(c.run_options, "[\"--lr=0.01\",\"--nesterov\",\"--schedule=cosine\","
                                    "\"--model=conv:4:3 \\\"q\\\" relu fc:10\",\"--tf32\","
                                    "\"--epochs=3\"]") == 0,
              "run_options %s", c.run_options);
    /* a list past GT_RUN_OPTIONS_LEN is dropped whole, never cut: a spec of control bytes
     * escapes to 6 bytes each; every length around the limit, for the bounds of each append */
    static char wide[GT_SPECLEN];
    const char *big[] = {"--lr", "0.01", "--model", wide, "--epochs", "3", NULL};
    wide[0] = 1;
    CHECK(parse_words(big, &c, &e, stdout) == 0);
    size_t base = strlen(c.run_options) - 6; /* ["--lr=0.01","--model=","--epochs=3"] */
    int near = (int)((GT_RUN_OPTIONS_LEN - base) / 6);
    for (int at = near - 8; at < near + 8; at++) {
        memset(wide, 1, (size_t)at);
        wide[at] = 0;
        CHECK(parse_words(big, &c, &e, stdout) == 0);
        size_t want = base + 6 * (size_t)at;
        CHECK_MSG(want < GT_RUN_OPTIONS_LEN ? strlen(c.run_options) == want
                                            : c.run_options[0] == 0,
                  "spec of %d bytes: run_options of %zu bytes", at, strlen(c.run_options));
    }
    const char *det[] = {"--gpus", "cpu:2", "--deterministic", "off", NULL};
    CHECK(parse_words(det, &c, &e, stdout) == 0 &&
          strcmp(c.run_options, "[\"--deterministic=off\"]") == 0);
    const char *none[] = {"--gpus", "cpu:2", "--seed", "3", NULL};
    CHECK(parse_words(none, &c, &e, stdout) == 0 && c.run_options[0] == 0);

    char *argv[] = {"gputrain", "train", "--lr=0.02", "--precision", "bf16", "--resume", "ck",
                    NULL};
    char carried[256], **out = NULL;
    int n = 0;
    CHECK(gt_cli_resume_args("[\"--lr=0.01\",\"--nesterov\",\"--schedule=cosine\",\"--tf32\"]",
                             NULL, 7, argv, &n, &out, carried, sizeof carried, &e) == 0);
    const char *want[] = {"gputrain", "train", "--nesterov", "--schedule=cosine", "--lr=0.02",
                          "--precision", "bf16", "--resume", "ck"};
    CHECK(n == 9 && out && out[9] == NULL);
    for (int i = 0; out && i < n && i < 9; i++)
        CHECK_MSG(strcmp(out[i], want[i]) == 0, "word %d: %s, not %s", i, out[i], want[i]);
    CHECK_MSG(strcmp(carried, "--nesterov --schedule=cosine") == 0, "carried: %s", carried);
    CHECK(gt_cli_parse(n, out, &c, stdout, &e) == 0 && c.optim.lr == 0.02f &&
          c.optim.nesterov == 1 && c.optim.schedule == GT_SCHED_COSINE);
    gt_cli_free_args(out);
    /* a value that looks like an option is a value: --model's text does not set --lr */
    char *spec_argv[] = {"gputrain", "--model", "--lr", NULL};
    CHECK(gt_cli_resume_args("[\"--lr=0.01\"]", NULL, 3, spec_argv, &n, &out, NULL, 0, &e) == 0 &&
          n == 4 && strcmp(out[1], "--lr=0.01") == 0);
    gt_cli_free_args(out);
    CHECK(gt_cli_resume_args("[\"--inject-fault=0:3\"]", NULL, 1, argv, &n, &out, NULL, 0, &e) ==
              -1 &&
          strstr(e.msg, "--inject-fault") && out == NULL);
    CHECK(gt_cli_resume_args("{\"lr\":\"1\"}", NULL, 1, argv, &n, &out, NULL, 0, &e) == -1 &&
          strstr(e.msg, "not a JSON array"));
    /* a kept --model is the checkpoint's (its spec file may be gone); one given again wins */
    char *plain[] = {"gputrain", "--epochs", "2", NULL};
    CHECK(gt_cli_resume_args("[\"--model=@net.spec\",\"--lr=0.01\"]", "conv:4:3 fc:10", 3, plain,
                             &n, &out, carried, sizeof carried, &e) == 0 &&
          n == 5 && strcmp(out[1], "--model=conv:4:3 fc:10") == 0 &&
          strcmp(carried, "--model=conv:4:3 fc:10 --lr=0.01") == 0);
    gt_cli_free_args(out);
    char *given_model[] = {"gputrain", "--model", "mlp", NULL};
    CHECK(gt_cli_resume_args("[\"--model=@net.spec\"]", "conv:4:3 fc:10", 3, given_model, &n, &out,
                             NULL, 0, &e) == 0 &&
          n == 3 && strcmp(out[2], "mlp") == 0);
    gt_cli_free_args(out);
}

int main(void)
{
    test_name_tables();
    test_good_forms();
    test_bad_forms();
    test_every_option_has_a_good_case();
    test_gpu_list_limits();
    test_long_strings();
    test_seed_range();
    test_deterministic_rule();
    test_help();
    test_version_and_order();
    test_repeated_parses();
    test_resume_options();
    TEST_DONE();
}
