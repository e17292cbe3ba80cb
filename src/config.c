/* config.c - the defaults of every run setting (config.h); the command line (cli.c) starts from
 * them and its --help prints them, so each default is written once, here. */
#include "gputrain/config.h"
#include "gputrain/cluster.h" /* GT_CLUSTER_TIMEOUT */

#include <stdio.h>
#include <string.h>

void gt_config_defaults(gt_config *c)
{
    memset(c, 0, sizeof *c);
    c->command = GT_CMD_TRAIN;
    c->gpus_all = 1;
    strcpy(c->model, "lenet5");
    c->epochs = 10;
    c->batch = 64;
    gt_optim_defaults(&c->optim);
    c->optim.step_epochs = 5.0f; /* what --schedule step uses unless --step-epochs says */
    c->optim.gamma = 0.1f;
    c->optim.total_epochs = (float)c->epochs;
    c->seed = 1;
    c->mode = GT_MODE_HOGWILD;
    c->normalize = GT_NORMALIZE_AUTO; /* docs/convergence-notes.md, section 19 */
    c->stripes = -1;
    c->store_parts = -1;
    c->staleness = 2;
    c->sync_every = 4;
    c->balance = GT_BALANCE_DYNAMIC;
    c->progress = -1;
    c->on_nan = GT_NAN_STOP;
    c->inject_worker = -1;
    c->inject_step = -1;
    c->host_timeout = GT_CLUSTER_TIMEOUT;
    c->top = 3;
    c->exchange = GT_EXCHANGE_AUTO;
}

int gt_config_deterministic(const gt_config *c)
{
    if (c->deterministic != GT_DETERMINISTIC_AUTO)
        return c->deterministic == GT_DETERMINISTIC_ON;
    return c->precision != GT_PRECISION_TF32;
}

void gt_config_norm_mark(const gt_config *c, gt_model *m)
{
    memset(&m->norm, 0, sizeof m->norm);
    if (c->normalize == GT_NORMALIZE_NONE)
        return;
    m->norm.on = 1;
    for (int i = 0; i < GT_NORM_MAX_C; i++)
        m->norm.std[i] = 1.0f;
}

int gt_config_norm_resolve(const gt_config *c, const gt_dataset *train, gt_model *m, gt_err *e)
{
    gt_config_norm_mark(c, m);
    int ch = m->in_c;
    switch (c->normalize) {
    case GT_NORMALIZE_NONE:
        return 0;
    case GT_NORMALIZE_AUTO:
        return gt_data_channel_stats(train, &m->norm, e);
    case GT_NORMALIZE_GIVEN:
        if (c->norm_count != 1 && c->norm_count != ch) {
            char given[512];
            gt_norm_format(&c->norm_given, c->norm_count, given, sizeof given);
            return gt_fail(e, "--normalize %s: %d values per list for %d-channel data (give 1 "
                           "or %d)", given, c->norm_count, ch, ch);
        }
        if (ch > GT_NORM_MAX_C)
            return gt_fail(e, "--normalize: the data has %d channels (at most %d)", ch,
                           GT_NORM_MAX_C);
        for (int i = 0; i < ch; i++) {
            int k = c->norm_count == 1 ? 0 : i;
            m->norm.mean[i] = c->norm_given.mean[k];
            m->norm.std[i] = c->norm_given.std[k];
        }
        return 0;
    }
    return gt_fail(e, "--normalize: unknown setting %d", (int)c->normalize);
}
