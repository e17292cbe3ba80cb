/* config.c - the defaults of every run setting (config.h); the command line (cli.c) starts from
 * them and its --help prints them, so each default is written once, here. */
#include "gputrain/config.h"
#include "gputrain/cluster.h" /* GT_CLUSTER_TIMEOUT */

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
    c->stripes = -1;
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
