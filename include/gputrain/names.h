/* names.h - every set of words that stands for an enum: run modes, optimizers, learning-rate
 * schedules, --balance, --on-nan, --on-diverge and --exchange. Each set is one table (src/names.c) whose rows give the word,
 * the value and the value's properties; the command line parses with it, --help lists it, and the
 * log, the summary and checkpoints write the word from it, so a new mode or optimizer is one row
 * here and never a string written again elsewhere. Layer kinds (layer_kinds.h) and optimizers
 * (optim.h) have their own tables with their functions; the optimizer set reads optim.h's. */
#ifndef GT_NAMES_H
#define GT_NAMES_H

#include "gputrain/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gt_name_set {
    GT_NAMES_MODE = 0, /* gt_mode, --mode */
    GT_NAMES_OPTIMIZER, /* gt_opt_kind, --optimizer */
    GT_NAMES_SCHEDULE, /* gt_sched_kind, --schedule */
    GT_NAMES_BALANCE,  /* gt_balance, --balance */
    GT_NAMES_ON_NAN,   /* gt_on_nan, --on-nan */
    GT_NAMES_ON_DIVERGE, /* gt_on_diverge, --on-diverge */
    GT_NAMES_EXCHANGE, /* gt_exchange, --exchange */
    GT_NAMES_PRECISION, /* gt_precision, --precision */
    GT_NAMES_STORE_GRAD, /* gt_store_grad, --store-grad */
    GT_NAMES_DETERMINISTIC, /* gt_deterministic, --deterministic */
} gt_name_set;

/* The delay in updates that a mode's asynchrony adds with `workers` workers in all, which the
 * recipe's momentum rule counts (recipe.h). */
typedef double (*gt_mode_delay_fn)(const gt_config *c, int workers);

/* A mode's row: what the command line, the recipe and the terminal need to know of it. Its
 * behaviour is its gt_mode_ops (src/mode_*.c). */
typedef struct gt_mode_row {
    gt_name_head head;
    int clocked;       /* workers step in clocks and meet at a barrier (all but hogwild) */
    int needs_nccl;    /* runs only on GPUs with NCCL (the device's reduce_update) */
    int sums_shares;   /* an update sums every worker's batch: the recipe warms the lr up */
    int async_variants; /* takes --overlap and --stripes 0 (lock-free), named after it */
    int bounded;       /* takes --staleness: workers run apart up to a bound (the clock spread) */
    int resume_approx; /* replicas since their last average are not in a checkpoint */
    int store_parts;   /* takes --store-parts: its store step goes in parts beside the backward
                        * (store_parts.c) */
    gt_mode_delay_fn delay; /* the delay its asynchrony adds (recipe.c); NULL: none */
    const char *help;  /* --help text, lines separated by '\n' */
} gt_mode_row;

/* The word for value in set, or "?" when no row has it (a value that cannot come from a parse). */
const char *gt_name(gt_name_set set, int value);

/* The value of word in set into *value; -1 when no row has that word. */
int gt_name_value(gt_name_set set, const char *word, int *value);

/* gt_name_value for the command line: -1 with "--FLAG: 'WORD' is not one of a, b, c" in e. */
int gt_name_parse(gt_name_set set, const char *flag, const char *word, int *value, gt_err *e);

/* Room for any set's words joined by a separator of up to two characters, as --help and the
 * parser's errors list them (test_cli checks that every set fits). */
#define GT_NAMES_LIST_LEN 128

/* The words of set in table order, separated by sep, into buf: 0, or -1 when they do not all fit
 * in size (buf then holds the words that do). */
int gt_name_list(gt_name_set set, const char *sep, char *buf, size_t size);

/* The row of a mode, NULL when none has that value (the optimizer's: gt_optimizer_row_of). */
const gt_mode_row *gt_mode_row_of(gt_mode m);
/* Mode rows in table order, for --help: row i for i in [0, gt_mode_count()). */
int gt_mode_count(void);
const gt_mode_row *gt_mode_row_at(int i);

/* Shorthands for the sets the rest of the code names most. parse returns 0, or -1 (no message)
 * for a word that is in no row. */
const char *gt_mode_name(gt_mode m);
/* The mode as the terminal and the recipe name it, with hogwild's variant: "hogwild lock-free",
 * "hogwild --overlap", "sync". A static string. */
const char *gt_mode_label(const gt_config *c);
int gt_mode_parse(const char *word, gt_mode *out);
const char *gt_optimizer_name(gt_opt_kind k);
const char *gt_schedule_name(gt_sched_kind k);

#ifdef __cplusplus
}
#endif
#endif
