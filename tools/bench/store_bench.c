/* store_bench.c - what the host side of the parameter store costs per step, with the real
 * src/ps.c and src/optim.c and no device: W threads act as workers.
 * -p hogwild (the default): each loops pull -> finite check of its gradient -> push, as the
 *   hogwild mode (src/mode_hogwild.c) does, with nothing between (the worst contention; a GPU
 *   worker spends its compute time between pull and push).
 * -p sync: each loops over the clocks of sync mode (src/mode_sync.c): pull -> finite check of its
 *   gradient slot (where a device writes its gradient) -> barrier -> its part of the summed
 *   slots' update (gt_ps_apply_stripes_sum), split by stripe across the workers -> barrier.
 * Usage: store_bench [-p hogwild|sync] [-s STEPS] [-r REPEATS] [-w W[,W...]] [-t T[,T...]]
 *                    [-o sgd|adam] [-m MODEL[,MODEL...]]
 *        defaults: -p hogwild -s 200 -r 3 -w 1,2 -o sgd -m lenet5,cnn-wide (SGD momentum 0.9,
 *        default stripes, the store's default threads). -t: the store's threads per walk, in a
 *        group for each worker (gt_ps_set_pools; its repeats interleave, so that load drift hits
 *        each count alike).
 *        Each row is the repeat with the least host time per step, so that other load on a shared
 *        machine shows up as little as it can.
 * Prints a markdown table: per worker step, the mean microseconds of the pull (gt_ps_pull), the
 * finite check (gt_all_finite, where a worker's device step would be), the push (gt_ps_push;
 * sync: its stripes' apply), the wait (sync: the two barriers of a clock; hogwild has none) -
 * gputrain's own breakdown of a worker's step (docs/internals.md, "Where a step's time goes") -
 * the lock wait of pulls and pushes together (the store's telemetry), and apply = push - lock
 * wait (exact when pulls never wait, as with one worker; otherwise a lower bound); the host time
 * a step (sync: the wall time of a clock); then the store's throughput in worker steps per
 * second, all workers. */
#include "gputrain/model.h"
#include "gputrain/optim.h"
#include "gputrain/ps.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORKERS 64
#define MAX_MODELS 8
#define WARM_STEPS 5

typedef struct bench_cfg {
    int sync; /* -p sync */
    int steps, repeats;
    int nw, workers[MAX_WORKERS];
    int nt, threads[MAX_WORKERS]; /* store threads; none given: one run with the default */
    int nm;
    const char *models[MAX_MODELS];
    gt_optim_cfg optim;
} bench_cfg;

typedef struct bench_worker {
    gt_ps *ps;
    pthread_barrier_t *start;
    pthread_barrier_t *clock;  /* -p sync: the workers' barrier */
    int index, nworkers, steps;
    float *params, *grad;      /* -p sync: grad is the worker's slot, slot 0 the first */
    float *slot0;
    uint64_t *ver;
    double pull, finite, push, wait; /* seconds, summed over the measured steps */
    double t_start, t_end;     /* clock at the first and after the last measured step */
    int bad;                   /* a gradient the finite check refused (a bug in this tool) */
} bench_worker;

/* One sync clock k: the slots stay as the workers left them (slot 0 accumulates the sum, as in
 * the mode, where a device then overwrites it; the values stay small and finite). */
static void sync_bench_clock(bench_worker *w, int k)
{
    double t0 = gt_now();
    gt_ps_pull(w->ps, w->params, NULL);
    double t1 = gt_now();
    w->bad |= !gt_all_finite(w->grad, w->ps->n);
    double t2 = gt_now();
    pthread_barrier_wait(w->clock);
    double t3 = gt_now();
    int nr = w->ps->nranges, W = w->nworkers; /* split as clocked_my_stripes splits it */
    int s_lo = (int)((int64_t)nr * w->index / W), s_hi = (int)((int64_t)nr * (w->index + 1) / W);
    float *rest[MAX_WORKERS];
    for (int i = 1; i < w->nworkers; i++)
        rest[i - 1] = w->slot0 + (size_t)i * w->ps->n;
    gt_ps_apply_stripes_sum(w->ps, s_lo, s_hi, w->slot0, rest, w->nworkers - 1, 1.0f,
                            (uint64_t)(k + WARM_STEPS + 1), 0.0);
    double t4 = gt_now();
    pthread_barrier_wait(w->clock);
    double t5 = gt_now();
    if (k >= 0) {
        w->pull += t1 - t0;
        w->finite += t2 - t1;
        w->push += t4 - t3;
        w->wait += (t3 - t2) + (t5 - t4);
    }
}

static void *bench_worker_loop(void *arg)
{
    bench_worker *w = arg;
    for (int k = -WARM_STEPS; k < w->steps; k++) {
        if (k == 0) { /* twice: the main thread reads the lock-wait counter in between */
            pthread_barrier_wait(w->start);
            pthread_barrier_wait(w->start);
            w->t_start = gt_now();
        }
        if (w->clock) {
            sync_bench_clock(w, k);
            continue;
        }
        double t0 = gt_now();
        gt_ps_pull(w->ps, w->params, w->ver);
        double t1 = gt_now();
        w->bad |= !gt_all_finite(w->grad, w->ps->n);
        double t2 = gt_now();
        gt_ps_push(w->ps, w->index, w->nworkers, w->grad, 1.0f, w->ver, 0.0);
        double t3 = gt_now();
        if (k >= 0) {
            w->pull += t1 - t0;
            w->finite += t2 - t1;
            w->push += t3 - t2;
        }
    }
    w->t_end = gt_now();
    return NULL;
}

static int bench_worker_init(bench_worker *w, gt_ps *ps, pthread_barrier_t *start, int index,
                             const bench_cfg *c, int W, float *slots, pthread_barrier_t *clock)
{
    *w = (bench_worker){
        .ps = ps, .start = start, .index = index, .nworkers = W, .steps = c->steps};
    if (c->sync)
        w->clock = clock, w->slot0 = slots;
    w->params = gt_alloc(ps->n * sizeof(float));
    w->grad = c->sync ? slots + (size_t)index * ps->n : gt_alloc(ps->n * sizeof(float));
    w->ver = gt_alloc((size_t)ps->nranges * sizeof(uint64_t));
    if (!w->params || !w->grad || !w->ver)
        return -1;
    /* Small, varied and finite, so the parameters neither blow up nor sit at zero. */
    for (size_t i = 0; i < ps->n; i++)
        w->grad[i] = 1e-4f * (float)((int)((i * 7919u + (size_t)index * 104729u) % 17u) - 8);
    return 0;
}

static void bench_worker_free(bench_worker *w)
{
    gt_free(w->params);
    if (!w->clock)
        gt_free(w->grad);
    gt_free(w->ver);
}

/* One run's means per worker step, in seconds, and the store's steps per second. */
typedef struct bench_row {
    int nranges;
    double pull, finite, push, wait, lock_wait, host, rate;
} bench_row;

/* One run of model m with W workers. */
static int bench_run(const bench_cfg *c, const gt_model *m, int W, int threads, bench_row *row,
                     gt_err *e)
{
    gt_ps ps;
    if (gt_ps_init(&ps, m->nparams, -1, &c->optim, e) != 0)
        return -1;
    /* As the store's default would: a group of helpers per worker (in sync, as the mode starts
     * them; in hogwild, the first push does where none are given). */
    int npools = gt_ps_default_pools(W);
    if (threads == 0 && c->sync)
        threads = gt_ps_default_threads(W);
    if (threads > 0 && gt_ps_set_pools(&ps, npools, threads, GT_PS_POOL_MIN, e) != 0) {
        gt_ps_free(&ps);
        return -1;
    }
    gt_model_init_params(m, ps.params, 1);
    bench_worker w[MAX_WORKERS];
    pthread_t t[MAX_WORKERS];
    pthread_barrier_t start, clock;
    pthread_barrier_init(&start, NULL, (unsigned)W + 1);
    pthread_barrier_init(&clock, NULL, (unsigned)W);
    float *slots = c->sync ? gt_alloc((size_t)W * ps.n * sizeof(float)) : NULL;
    int rc = c->sync && !slots ? -1 : 0, nstarted = 0;
    for (int i = 0; i < W && rc == 0; i++) {
        rc = bench_worker_init(&w[i], &ps, &start, i, c, W, slots, &clock);
        if (rc == 0)
            rc = pthread_create(&t[i], NULL, bench_worker_loop, &w[i]);
        nstarted += rc == 0;
    }
    if (rc != 0) {
        fprintf(stderr, "store_bench: cannot start worker %d\n", nstarted);
        exit(1);
    }
    pthread_barrier_wait(&start);
    uint64_t wait0 = atomic_load(&ps.lock_wait_ns);
    pthread_barrier_wait(&start);
    double pull = 0, finite = 0, push = 0, waited = 0, t0 = 0, t1 = 0;
    int bad = 0;
    for (int i = 0; i < W; i++) {
        pthread_join(t[i], NULL);
        pull += w[i].pull;
        finite += w[i].finite;
        push += w[i].push;
        waited += w[i].wait;
        bad |= w[i].bad;
        t0 = i == 0 || w[i].t_start < t0 ? w[i].t_start : t0;
        t1 = w[i].t_end > t1 ? w[i].t_end : t1;
        bench_worker_free(&w[i]);
    }
    double wall = t1 - t0, steps = (double)W * c->steps;
    double wait = (double)(atomic_load(&ps.lock_wait_ns) - wait0) * 1e-9;
    *row = (bench_row){.nranges = ps.nranges,
                       .pull = pull / steps,
                       .finite = finite / steps,
                       .push = push / steps,
                       .wait = waited / steps,
                       .lock_wait = wait / steps,
                       .host = c->sync ? wall / c->steps : (pull + finite + push) / steps,
                       .rate = steps / wall};
    gt_free(slots);
    pthread_barrier_destroy(&clock);
    pthread_barrier_destroy(&start);
    gt_ps_free(&ps);
    if (bad)
        return gt_fail(e, "store_bench: a gradient failed the finite check");
    return 0;
}

/* The best of c->repeats runs per store thread count, one table row each. */
static int bench_rows_print(const bench_cfg *c, const gt_model *m, const char *name, int W,
                            gt_err *e)
{
    bench_row best[MAX_WORKERS], r;
    int nt = c->nt ? c->nt : 1;
    for (int k = 0; k < c->repeats; k++)
        for (int t = 0; t < nt; t++) {
            if (bench_run(c, m, W, c->nt ? c->threads[t] : 0, &r, e) != 0)
                return -1;
            if (k == 0 || r.host < best[t].host)
                best[t] = r;
        }
    for (int t = 0; t < nt; t++) {
        bench_row *b = &best[t];
        char threads[16] = "default";
        if (c->nt)
            snprintf(threads, sizeof threads, "%d", c->threads[t]);
        printf("| %s | %zu | %d | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f "
               "| %.0f |\n",
               name, m->nparams, W, threads, b->nranges, 1e6 * b->pull, 1e6 * b->finite,
               1e6 * b->push, 1e6 * b->wait, 1e6 * b->lock_wait, 1e6 * (b->push - b->lock_wait),
               1e6 * b->host, b->rate);
    }
    return 0;
}

static int parse_list(char *s, const char *flag, int (*each)(bench_cfg *, const char *),
                      bench_cfg *c)
{
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ","))
        if (each(c, tok) != 0) {
            fprintf(stderr, "store_bench: %s: bad value '%s'\n", flag, tok);
            return -1;
        }
    return 0;
}

static int add_workers(bench_cfg *c, const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > MAX_WORKERS || c->nw == MAX_WORKERS)
        return -1;
    c->workers[c->nw++] = (int)v;
    return 0;
}

static int add_threads(bench_cfg *c, const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 64 || c->nt == MAX_WORKERS)
        return -1;
    c->threads[c->nt++] = (int)v;
    return 0;
}

static int add_model(bench_cfg *c, const char *s)
{
    if (c->nm == MAX_MODELS)
        return -1;
    c->models[c->nm++] = s;
    return 0;
}

static int parse_args(int argc, char **argv, bench_cfg *c)
{
    gt_optim_defaults(&c->optim);
    c->steps = 200;
    c->repeats = 3;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (i + 1 >= argc || strlen(f) != 2 || f[0] != '-') {
            fprintf(stderr, "usage: store_bench [-p hogwild|sync] [-s STEPS] [-r REPEATS] "
                            "[-w W[,W...]] [-t T[,T...]] [-o sgd|adam] [-m MODEL[,MODEL...]]\n");
            return -1;
        }
        char *v = argv[++i], *end;
        if (f[1] == 's' || f[1] == 'r') {
            long s = strtol(v, &end, 10);
            if (*end || s < 1 || s > 1000000) {
                fprintf(stderr, "store_bench: -%c: bad count '%s'\n", f[1], v);
                return -1;
            }
            *(f[1] == 's' ? &c->steps : &c->repeats) = (int)s;
        } else if (f[1] == 'w' && parse_list(v, "-w", add_workers, c) != 0) {
            return -1;
        } else if (f[1] == 't' && parse_list(v, "-t", add_threads, c) != 0) {
            return -1;
        } else if (f[1] == 'm' && parse_list(v, "-m", add_model, c) != 0) {
            return -1;
        } else if (f[1] == 'o') {
            if (strcmp(v, "sgd") != 0 && strcmp(v, "adam") != 0) {
                fprintf(stderr, "store_bench: -o: bad optimizer '%s' (sgd or adam)\n", v);
                return -1;
            }
            c->optim.kind = strcmp(v, "adam") == 0 ? GT_OPT_ADAM : GT_OPT_SGD;
        } else if (f[1] == 'p') {
            if (strcmp(v, "hogwild") != 0 && strcmp(v, "sync") != 0) {
                fprintf(stderr, "store_bench: -p: bad path '%s' (hogwild or sync)\n", v);
                return -1;
            }
            c->sync = strcmp(v, "sync") == 0;
        } else if (strchr("srwtmop", f[1]) == NULL) {
            fprintf(stderr, "store_bench: unknown flag '%s'\n", f);
            return -1;
        }
    }
    if (c->nw == 0)
        c->workers[c->nw++] = 1, c->workers[c->nw++] = 2;
    if (c->nm == 0)
        c->models[c->nm++] = "lenet5", c->models[c->nm++] = "cnn-wide";
    return 0;
}

int main(int argc, char **argv)
{
    static gt_model m[MAX_MODELS];
    bench_cfg c = {0};
    gt_err e = {""};
    if (parse_args(argc, argv, &c) != 0)
        return 2;
    for (int i = 0; i < c.nm; i++)
        if (gt_model_build(c.models[i], 1, 28, 28, 10, &m[i], &e) != 0) {
            fprintf(stderr, "store_bench: -m: %s\n", e.msg);
            return 2;
        }
    printf("| model | params | W | threads | stripes | pull us | finite us | push us | wait us "
           "| lock wait us | apply us | host us/step | store steps/s |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < c.nm; i++)
        for (int k = 0; k < c.nw; k++)
            if (bench_rows_print(&c, &m[i], c.models[i], c.workers[k], &e) != 0) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
    return 0;
}
