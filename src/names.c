/* names.c - the name tables of names.h. Each set is an array of rows that begin with a
 * gt_name_head; one descriptor per set (where its rows are, their size and count) lets a single
 * lookup, parse and list serve every set, whatever else its rows hold. */
#include "gputrain/names.h"
#include "gputrain/recipe.h"

#include <stdio.h>
#include <string.h>

static const gt_mode_row mode_rows[] = {
    {.head = {"hogwild", GT_MODE_HOGWILD}, .async_variants = 1, .store_parts = 1, .delay = gt_recipe_delay_hogwild,
     .help = "asynchronous pushes under per-stripe locks: the fastest wall time, with\n"
             "gradients a little stale; lower --momentum as workers grow."},
    {.head = {"sync", GT_MODE_SYNC}, .clocked = 1, .sums_shares = 1, .store_parts = 1,
     .help = "one aggregated update per step, equal to one worker at W times the\n"
             "batch; deterministic, and the reference for accuracy."},
    {.head = {"ssp", GT_MODE_SSP}, .clocked = 1, .sums_shares = 1, .bounded = 1, .store_parts = 1,
     .delay = gt_recipe_delay_ssp,
     .help = "bounded staleness: a worker waits for peers of its own pace and runs at\n"
             "most --staleness steps ahead of a slower one (0 = sync); for workers of\n"
             "uneven speed."},
    {.head = {"local", GT_MODE_LOCAL}, .clocked = 1, .resume_approx = 1,
     .help = "each worker trains its own replica, averaged every --sync-every\n"
             "steps: the least communication."},
    {.head = {"allreduce", GT_MODE_ALLREDUCE}, .clocked = 1, .needs_nccl = 1, .sums_shares = 1,
     .help = "GPUs only: gradients summed over the GPUs (peer to peer in one\n"
             "process, NCCL across hosts; --exchange), the same math as sync."},
};

static const gt_name_head schedule_rows[] = {
    {"constant", GT_SCHED_CONSTANT},
    {"step", GT_SCHED_STEP},
    {"cosine", GT_SCHED_COSINE},
};

static const gt_name_head balance_rows[] = {
    {"dynamic", GT_BALANCE_DYNAMIC},
    {"static", GT_BALANCE_STATIC},
};

static const gt_name_head on_nan_rows[] = {
    {"stop", GT_NAN_STOP},
    {"skip", GT_NAN_SKIP},
};

static const gt_name_head on_diverge_rows[] = {
    {"recover", GT_DIVERGE_RECOVER},
    {"stop", GT_DIVERGE_STOP},
};

static const gt_name_head exchange_rows[] = {
    {"auto", GT_EXCHANGE_AUTO},
    {"p2p", GT_EXCHANGE_P2P},
    {"nccl", GT_EXCHANGE_NCCL},
};

static const gt_name_head precision_rows[] = {
    {"fp32", GT_PRECISION_FP32},
    {"tf32", GT_PRECISION_TF32},
    {"bf16", GT_PRECISION_BF16},
};

static const gt_name_head store_grad_rows[] = {
    {"auto", GT_STORE_GRAD_AUTO},
    {"fp32", GT_STORE_GRAD_FP32},
    {"bf16", GT_STORE_GRAD_BF16},
};

static const gt_name_head deterministic_rows[] = {
    {"auto", GT_DETERMINISTIC_AUTO},
    {"on", GT_DETERMINISTIC_ON},
    {"off", GT_DETERMINISTIC_OFF},
};

#define NAMES_SET(rows) {(rows), sizeof *(rows), (int)(sizeof(rows) / sizeof *(rows))}

/* Indexed by gt_name_set. */
static const struct {
    const void *rows;
    size_t stride;
    int n;
} name_sets[] = {
    [GT_NAMES_MODE] = NAMES_SET(mode_rows),
    [GT_NAMES_OPTIMIZER] = {gt_optimizer_rows, sizeof *gt_optimizer_rows, GT_OPT_KINDS},
    [GT_NAMES_SCHEDULE] = NAMES_SET(schedule_rows),
    [GT_NAMES_BALANCE] = NAMES_SET(balance_rows),
    [GT_NAMES_ON_NAN] = NAMES_SET(on_nan_rows),
    [GT_NAMES_ON_DIVERGE] = NAMES_SET(on_diverge_rows),
    [GT_NAMES_EXCHANGE] = NAMES_SET(exchange_rows),
    [GT_NAMES_PRECISION] = NAMES_SET(precision_rows),
    [GT_NAMES_STORE_GRAD] = NAMES_SET(store_grad_rows),
    [GT_NAMES_DETERMINISTIC] = NAMES_SET(deterministic_rows),
};

/* Row i of set as its head (every row struct starts with one); NULL past the end. */
static const gt_name_head *name_row(gt_name_set set, int i)
{
    if ((unsigned)set >= sizeof name_sets / sizeof *name_sets || i < 0 || i >= name_sets[set].n)
        return NULL;
    return (const gt_name_head *)((const char *)name_sets[set].rows +
                                  (size_t)i * name_sets[set].stride);
}

static const gt_name_head *name_row_of(gt_name_set set, int value)
{
    const gt_name_head *h;
    for (int i = 0; (h = name_row(set, i)) != NULL; i++)
        if (h->value == value)
            return h;
    return NULL;
}

const char *gt_name(gt_name_set set, int value)
{
    const gt_name_head *h = name_row_of(set, value);
    return h ? h->name : "?";
}

int gt_name_value(gt_name_set set, const char *word, int *value)
{
    const gt_name_head *h;
    for (int i = 0; word && (h = name_row(set, i)) != NULL; i++)
        if (strcmp(h->name, word) == 0) {
            *value = h->value;
            return 0;
        }
    return -1;
}

int gt_name_list(gt_name_set set, const char *sep, char *buf, size_t size)
{
    const gt_name_head *h;
    size_t used = 0;
    if (size == 0)
        return -1;
    buf[0] = 0;
    for (int i = 0; (h = name_row(set, i)) != NULL; i++) {
        const char *parts[2] = {i ? sep : "", h->name};
        for (int p = 0; p < 2; p++) {
            size_t n = strlen(parts[p]);
            if (used + n >= size)
                return -1;
            memcpy(buf + used, parts[p], n + 1);
            used += n;
        }
    }
    return 0;
}

int gt_name_parse(gt_name_set set, const char *flag, const char *word, int *value, gt_err *e)
{
    if (gt_name_value(set, word, value) == 0)
        return 0;
    char list[GT_NAMES_LIST_LEN];
    gt_name_list(set, ", ", list, sizeof list);
    return gt_fail(e, "--%s: '%s' is not one of %s", flag, word, list);
}

const gt_mode_row *gt_mode_row_of(gt_mode m)
{
    return (const gt_mode_row *)name_row_of(GT_NAMES_MODE, (int)m);
}

int gt_mode_count(void)
{
    return name_sets[GT_NAMES_MODE].n;
}

const gt_mode_row *gt_mode_row_at(int i)
{
    return (const gt_mode_row *)name_row(GT_NAMES_MODE, i);
}

const char *gt_mode_name(gt_mode m)
{
    return gt_name(GT_NAMES_MODE, (int)m);
}

const char *gt_mode_label(const gt_config *c)
{
    static _Thread_local char label[48];
    const gt_mode_row *row = gt_mode_row_of(c->mode);
    const char *variant = !row || !row->async_variants ? ""
                          : c->stripes == 0            ? " lock-free"
                          : c->overlap                 ? " --overlap"
                                                       : "";
    snprintf(label, sizeof label, "%s%s", gt_mode_name(c->mode), variant);
    return label;
}

const char *gt_optimizer_name(gt_opt_kind k)
{
    return gt_name(GT_NAMES_OPTIMIZER, (int)k);
}

const char *gt_schedule_name(gt_sched_kind k)
{
    return gt_name(GT_NAMES_SCHEDULE, (int)k);
}

int gt_mode_parse(const char *word, gt_mode *out)
{
    int v;
    if (gt_name_value(GT_NAMES_MODE, word, &v))
        return -1;
    *out = (gt_mode)v;
    return 0;
}

