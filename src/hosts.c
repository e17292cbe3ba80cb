/* hosts.c - the calls across hosts (one process per host under mpirun, cluster.h): the same-run
 * check at start, averaging of the stores, and agreeing on stops and on epoch ends. One thread
 * per host makes each call, at points every host reaches in the same order. */
#include "run.h"
#include "gputrain/cluster.h"

#include <string.h>

/* Across hosts every process must train the same model on the same data from the same start with
 * the same settings and as many workers, or the collectives would mix unlike things; a host that
 * differs is named. */
int hosts_check_same(run *r, const gt_start *start, gt_err *e)
{
    if (r->H == 1)
        return 0;
    const gt_config *c = r->cfg;
    uint64_t settings[] = {c->mode, (uint64_t)c->batch, (uint64_t)c->epochs, c->seed,
                           (uint64_t)c->sync_every, (uint64_t)c->staleness, c->balance,
                           (uint64_t)(int64_t)c->stripes, (uint64_t)c->eval_every, r->n};
    uint32_t crc = gt_crc32(gt_crc32(0, settings, sizeof settings), &c->optim, sizeof c->optim);
    const struct {
        const char *what;
        uint64_t v;
    } checks[] = {
        {"--gpus: the number of workers", (uint64_t)r->W},
        {"the command line (mode, batch, epochs, seed, optimizer, model size)", crc},
        {"--data: the data fingerprint", r->data->fingerprint},
        {"the starting parameters (--seed, --init or --resume file)",
         gt_crc32(0, start->params, r->n * sizeof(float))},
    };
    for (size_t i = 0; i < sizeof checks / sizeof *checks; i++) {
        uint64_t lo, hi;
        if (gt_cluster_range_u64(checks[i].v, &lo, &hi, checks[i].what, e) != 0)
            return -1;
        if (lo != hi)
            return gt_fail(e, "%s differs between hosts: this host (%d) has %llu, the hosts have "
                              "%llu to %llu; every host must run the same", checks[i].what, r->host,
                           (unsigned long long)checks[i].v, (unsigned long long)lo,
                           (unsigned long long)hi);
    }
    return 0;
}

/* Averages this host's store with the other hosts' (a hierarchical parameter server): a snapshot
 * is summed over the hosts, and the store moves from the snapshot to the mean, keeping what its
 * workers pushed meanwhile. Optimizer state stays with each host's store. */
int hosts_average(run *r, gt_err *e)
{
    gt_ps_pull(&r->ps, r->hosts.xsnap, NULL);
    memcpy(r->hosts.xavg, r->hosts.xsnap, r->n * sizeof(float));
    if (gt_cluster_sum_floats(r->hosts.xavg, r->n, "the parameters (host average)", e) != 0)
        return -1;
    for (size_t i = 0; i < r->n; i++)
        r->hosts.xavg[i] /= (float)r->H;
    gt_ps_rebase_stripes(&r->ps, 0, r->ps.nranges, r->hosts.xsnap, r->hosts.xavg);
    return 0;
}

/* The hosts agree on stopping: the signal any of them received (the highest), or 0. -1 when the
 * call failed. */
int hosts_stop_signal(gt_err *e)
{
    int64_t sig = gt_train_stop_signal();
    if (gt_cluster_max_i64(&sig, 1, "the stop flag", e) != 0)
        return -1;
    return (int)sig;
}

/* Acts on an agreement: an MPI failure ends the run, an agreed signal halts it here as on every
 * other host. Caller holds r->mu. */
void hosts_agreed_locked(run *r, int sig, const gt_err *e)
{
    if (sig < 0) {
        run_fail_locked(r, e->msg);
    } else if (sig > 0) {
        r->hosts.stop_sig = sig;
        r->halt = 1;
        pthread_cond_broadcast(&r->cv);
    }
}

/* One averaging round of hogwild, ssp or local mode: average the stores, agree on stopping. */
int hosts_round(run *r, gt_err *e)
{
    if (hosts_average(r, e) != 0)
        return -1;
    return hosts_stop_signal(e);
}

/* Across hosts an epoch ends on every host or on none: the hosts agree on stopping and on whether
 * each finished the epoch (one that stopped short did not); then the stores are averaged where
 * the mode says so (hogwild, ssp) and the training statistics summed, so host 0 reports the whole epoch. Returns
 * whether the epoch ends; complete: whether this host finished it. Caller holds r->mu. */
int hosts_epoch_end_locked(run *r, int complete)
{
    gt_err e = {{0}};
    int64_t agree[2] = {gt_train_stop_signal(), !complete};
    if (gt_cluster_max_i64(agree, 2, "the end-of-epoch agreement", &e) != 0) {
        run_fail_locked(r, e.msg);
        return 0;
    }
    hosts_agreed_locked(r, (int)agree[0], &e);
    if (agree[1])
        return 0;
    double stats[3] = {r->stats.loss_acc, (double)r->stats.correct_acc, (double)r->stats.seen_acc};
    if ((r->ops->hosts_average && hosts_average(r, &e) != 0) ||
        gt_cluster_sum_doubles(stats, 3, "the training statistics", &e) != 0) {
        run_fail_locked(r, e.msg);
        return 0;
    }
    r->stats.loss_acc = stats[0];
    r->stats.correct_acc = (uint64_t)stats[1];
    r->stats.seen_acc = (uint64_t)stats[2];
    return 1;
}
