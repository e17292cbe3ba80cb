/* test_ps.c - the parameter store: no lost update under concurrent pushes for several stripe
 * counts, stripe layout, versions and staleness, pulls, the moving average of --ema, and refused
 * configurations; a push that pulls in the same walk. Runs under
 * ThreadSanitizer in CI. */
#include "gputrain/bf16.h"
#include "gputrain/ps.h"
#include "gputrain/ps_save.h"
#include "test_util.h"

#include <pthread.h>

#define NPARAM 5003 /* not a multiple of a cache line, on purpose */
#define PUSHES 200
#define THREADS 4

typedef struct pusher {
    gt_ps *ps;
    int index;
    float *grad;
    float *pulled;
    uint64_t *ver;
} pusher;

static void *push_loop(void *arg)
{
    pusher *p = arg;
    for (int k = 0; k < PUSHES; k++) {
        gt_ps_pull(p->ps, p->pulled, p->ver);
        gt_ps_push(p->ps, p->index, THREADS, p->grad, 1.0f, p->ver, 0.0);
    }
    return NULL;
}

static gt_optim_cfg plain_sgd(void)
{
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.lr = 1.0f;
    c.momentum = 0.0f;
    return c;
}

/* Every thread pushes gradient (index+1) * (1 + i % 3) PUSHES times with plain SGD at lr 1; the
 * store must end at exactly minus the sum (small integers are exact in float). threads: the
 * store's threads for every walk (1: no helpers), in npools groups that walks use at once. */
static void test_no_lost_update(int stripes, int npools, int threads)
{
    gt_optim_cfg c = plain_sgd();
    gt_ps ps;
    gt_err e;
    CHECK(gt_ps_init(&ps, NPARAM, stripes, &c, &e) == 0);
    CHECK(gt_ps_set_pools(&ps, npools, threads, 0, &e) == 0);
    CHECK(ps.npools == (threads > 1 ? npools : 0));
    pusher p[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        p[i].ps = &ps;
        p[i].index = i;
        p[i].grad = gt_alloc(NPARAM * sizeof(float));
        p[i].pulled = gt_alloc(NPARAM * sizeof(float));
        p[i].ver = calloc((size_t)ps.nranges, sizeof(uint64_t));
        for (int k = 0; k < NPARAM; k++)
            p[i].grad[k] = (float)((i + 1) * (1 + k % 3));
        pthread_create(&t[i], NULL, push_loop, &p[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    int wrong = 0;
    for (int k = 0; k < NPARAM; k++) {
        double expect = 0;
        for (int i = 0; i < THREADS; i++)
            expect -= (double)PUSHES * (i + 1) * (1 + k % 3);
        wrong += ps.params[k] != (float)expect;
    }
    CHECK_MSG(wrong == 0, "stripes %d: %d of %d parameters lost updates", stripes, wrong, NPARAM);
    CHECK(atomic_load(&ps.updates) == THREADS * PUSHES);
    for (int s = 0; s < ps.nranges; s++)
        CHECK(atomic_load(&ps.stripes[s].version) == THREADS * PUSHES);
    CHECK(atomic_load(&ps.stale_count) == THREADS * PUSHES);
    CHECK(atomic_load(&ps.stale_max) <= (uint64_t)(THREADS - 1) * PUSHES);
    for (int i = 0; i < THREADS; i++) {
        gt_free(p[i].grad);
        gt_free(p[i].pulled);
        free(p[i].ver);
    }
    gt_ps_free(&ps);
}

/* Lock-free mode may lose updates by design, but must be free of data races (TSan) and every
 * parameter must end between 0 and the lock-protected result. */
static void test_lock_free_bounds(void)
{
    gt_optim_cfg c = plain_sgd();
    gt_ps ps;
    gt_err e;
    CHECK(gt_ps_init(&ps, NPARAM, 0, &c, &e) == 0);
    CHECK(ps.nstripes == 0 && ps.nranges >= 1);
    pusher p[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        p[i] = (pusher){&ps, i, gt_alloc(NPARAM * sizeof(float)), gt_alloc(NPARAM * sizeof(float)),
                        calloc((size_t)ps.nranges, sizeof(uint64_t))};
        for (int k = 0; k < NPARAM; k++)
            p[i].grad[k] = 1.0f;
        pthread_create(&t[i], NULL, push_loop, &p[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    int out = 0;
    for (int k = 0; k < NPARAM; k++)
        out += !(ps.params[k] <= -PUSHES && ps.params[k] >= -(float)THREADS * PUSHES);
    CHECK_MSG(out == 0, "%d parameters outside [-%d, -%d]", out, THREADS * PUSHES, PUSHES);
    for (int i = 0; i < THREADS; i++) {
        gt_free(p[i].grad);
        gt_free(p[i].pulled);
        free(p[i].ver);
    }
    gt_ps_free(&ps);
}

static void test_layout(void)
{
    gt_optim_cfg c = plain_sgd();
    gt_err e;
    int counts[] = {1, 2, 3, 7, 16, 100, 313};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        gt_ps ps;
        CHECK(gt_ps_init(&ps, NPARAM, counts[i], &c, &e) == 0);
        CHECK(ps.nranges == counts[i]);
        CHECK(ps.stripes[0].lo == 0 && ps.stripes[ps.nranges - 1].hi == NPARAM);
        for (int s = 0; s < ps.nranges; s++) {
            CHECK(ps.stripes[s].lo % 16 == 0);
            CHECK(ps.stripes[s].hi > ps.stripes[s].lo);
            if (s > 0)
                CHECK(ps.stripes[s].lo == ps.stripes[s - 1].hi);
        }
        CHECK(((uintptr_t)ps.params % GT_CACHELINE) == 0);
        gt_ps_free(&ps);
    }
    gt_ps sp;
    CHECK(gt_ps_init(&sp, NPARAM, 7, &c, &e) == 0);
    size_t lo, hi;
    gt_ps_stripes_span(&sp, 2, 5, &lo, &hi);
    CHECK(lo == sp.stripes[2].lo && hi == sp.stripes[4].hi);
    gt_ps_stripes_span(&sp, 0, sp.nranges, &lo, &hi);
    CHECK(lo == 0 && hi == NPARAM);
    gt_ps_stripes_span(&sp, 3, 3, &lo, &hi);
    CHECK(lo == hi);
    gt_ps_free(&sp);
    CHECK(gt_ps_default_stripes(44426) >= 4);
    CHECK(gt_ps_default_stripes(10) == 1);
    gt_ps ps;
    CHECK(gt_ps_init(&ps, 100, 50, &c, &e) != 0);
    CHECK(strstr(e.msg, "--stripes") && strstr(e.msg, "50"));
    CHECK(gt_ps_init(&ps, 0, 1, &c, &e) != 0);
}

/* Versions and staleness: a gradient computed before another push is 1 stale on every stripe. */
static void test_staleness(void)
{
    gt_optim_cfg c = plain_sgd();
    gt_ps ps;
    gt_err e;
    CHECK(gt_ps_init(&ps, NPARAM, 4, &c, &e) == 0);
    float *g = gt_alloc(NPARAM * sizeof(float)), *buf = gt_alloc(NPARAM * sizeof(float));
    uint64_t va[4], vb[4];
    for (int k = 0; k < NPARAM; k++)
        g[k] = 0.5f;
    gt_ps_pull(&ps, buf, va);
    gt_ps_pull(&ps, buf, vb);
    uint64_t t1 = 0, t2 = 0;
    CHECK(gt_ps_push_numbered(&ps, 0, 2, g, 1.0f, va, 0.0, &t1) == 0);
    CHECK(gt_ps_push_numbered(&ps, 1, 2, g, 1.0f, vb, 0.0, &t2) == 1);
    CHECK(t1 == 1 && t2 == 2); /* each push's own update number */
    gt_ps_pull(&ps, buf, va);
    CHECK(va[0] == 2 && va[3] == 2);
    CHECK(buf[0] == -1.0f && buf[NPARAM - 1] == -1.0f);
    CHECK(atomic_load(&ps.stale_hist[0]) == 1 && atomic_load(&ps.stale_hist[1]) == 1);
    /* gscale and apply_stripes touch only their stripes */
    gt_ps_apply_stripes(&ps, 1, 2, g, 2.0f, 3, 0.0);
    gt_ps_pull(&ps, buf, NULL);
    CHECK(buf[ps.stripes[0].lo] == -1.0f);
    CHECK(buf[ps.stripes[1].lo] == -2.0f);
    CHECK(buf[ps.stripes[2].lo] == -1.0f);
    gt_ps_store_stripes(&ps, 3, 4, g, 1);
    gt_ps_pull(&ps, buf, NULL);
    CHECK(buf[NPARAM - 1] == 0.5f && buf[ps.stripes[2].lo] == -1.0f);
    CHECK(gt_all_finite(g, NPARAM));
    g[77] = NAN;
    CHECK(!gt_all_finite(g, NPARAM));
    g[77] = INFINITY;
    CHECK(!gt_all_finite(g, NPARAM));
    gt_free(g);
    gt_free(buf);
    gt_ps_free(&ps);
}

/* The staleness percentile: exact below the histogram's last bin; at it (GT_STALE_BINS - 1 counts
 * every staleness from there up) it says it is capped, while stale_max stays exact. */
static void test_stale_percentile(void)
{
    gt_optim_cfg c = plain_sgd();
    gt_ps ps;
    gt_err e;
    int capped = -1;
    const uint64_t last = GT_STALE_BINS - 1;
    CHECK(gt_ps_init(&ps, 64, 1, &c, &e) == 0);
    CHECK(gt_ps_stale_percentile(&ps, 99, &capped) == 0 && capped == 0); /* nothing observed */
    for (int i = 0; i < 99; i++)
        gt_ps_note_staleness(&ps, 5);
    gt_ps_note_staleness(&ps, 200); /* 1% beyond the last bin: p99 is still exact */
    CHECK(gt_ps_stale_percentile(&ps, 99, &capped) == 5 && capped == 0);
    CHECK(gt_ps_stale_percentile(&ps, 100, &capped) == last && capped == 1);
    CHECK(atomic_load(&ps.stale_max) == 200);
    gt_ps_note_staleness(&ps, last - 1); /* 100 of 101 at or below the bin before the last */
    CHECK(gt_ps_stale_percentile(&ps, 99, &capped) == last - 1 && capped == 0);
    gt_ps_note_staleness(&ps, 1000); /* 100 of 102: p99 lies in the last bin */
    CHECK(gt_ps_stale_percentile(&ps, 99, &capped) == last && capped == 1);
    CHECK(atomic_load(&ps.stale_max) == 1000);
    gt_ps_free(&ps);
    CHECK(gt_ps_init(&ps, 64, 1, &c, &e) == 0);
    for (int i = 0; i < 100; i++)
        gt_ps_note_staleness(&ps, last - 1);
    CHECK(gt_ps_stale_percentile(&ps, 99, NULL) == last - 1);
    CHECK(gt_ps_stale_percentile(&ps, 99, &capped) == last - 1 && capped == 0);
    gt_ps_note_staleness(&ps, last); /* exactly the last bin's first value: capped too */
    CHECK(gt_ps_stale_percentile(&ps, 100, &capped) == last && capped == 1);
    CHECK(atomic_load(&ps.stale_max) == last);
    gt_ps_free(&ps);
}

/* Momentum state lives in the store and is updated with the parameters. */
static void test_momentum_state(void)
{
    gt_optim_cfg c = plain_sgd();
    c.momentum = 0.5f;
    c.lr = 0.25f;
    gt_ps ps;
    gt_err e;
    CHECK(gt_ps_init(&ps, 64, 2, &c, &e) == 0);
    CHECK(ps.nstate == 1 && ps.state[0]);
    float g[64];
    for (int k = 0; k < 64; k++)
        g[k] = 1.0f;
    gt_ps_push(&ps, 0, 1, g, 1.0f, NULL, 0.0);
    gt_ps_push(&ps, 0, 1, g, 1.0f, NULL, 0.0);
    CHECK(ps.state[0][5] == 1.5f);            /* buf: 1, then 0.5*1 + 1 */
    CHECK(ps.params[5] == -(0.25f + 0.375f)); /* p -= lr*buf twice */
    float st[64];
    gt_ps_pull_state(&ps, 0, st);
    CHECK(memcmp(st, ps.state[0], sizeof st) == 0);
    gt_ps_free(&ps);
}

/* The guard's copy (ps_save.h) takes parameters, momentum and buffers, plain copies under the
 * stripe locks or relaxed atomics in the lock-free store alike, and a restore puts them back
 * whole and bumps every stripe's version, so the next push counts the rollback as an update. */
static void test_save_restore(int stripes)
{
    enum { N = 1000 };
    gt_optim_cfg c = plain_sgd();
    c.momentum = 0.5f;
    c.lr = 0.25f;
    gt_ps ps;
    gt_err e;
    CHECK(gt_ps_init(&ps, N, stripes, &c, &e) == 0 && ps.nstate == 1);
    float g[N], p0[N], s0[N], got[N];
    for (int k = 0; k < N; k++)
        g[k] = (float)(k % 7) - 3.0f;
    gt_ps_push(&ps, 0, 1, g, 1.0f, NULL, 0.0);
    gt_ps_push(&ps, 0, 1, g, 1.0f, NULL, 0.0);
    gt_ps_pull(&ps, p0, NULL);
    gt_ps_pull_state(&ps, 0, s0);
    gt_ps_saved saved;
    CHECK(gt_ps_saved_alloc(&saved, &ps, &e) == 0);
    gt_ps_save(&ps, &saved);
    CHECK(memcmp(saved.params, p0, sizeof p0) == 0 && memcmp(saved.state[0], s0, sizeof s0) == 0);
    uint64_t v0 = atomic_load(&ps.stripes[ps.nranges - 1].version);
    for (int k = 0; k < 3; k++)
        gt_ps_push(&ps, 0, 1, g, 1.0f, NULL, 0.0);
    gt_ps_pull(&ps, got, NULL);
    CHECK(memcmp(got, p0, sizeof got) != 0);
    gt_ps_restore(&ps, &saved);
    gt_ps_pull(&ps, got, NULL);
    CHECK(memcmp(got, p0, sizeof got) == 0);
    gt_ps_pull_state(&ps, 0, got);
    CHECK(memcmp(got, s0, sizeof got) == 0);
    CHECK(atomic_load(&ps.stripes[ps.nranges - 1].version) == v0 + 3 + 1);
    gt_ps_saved_free(&saved);
    gt_ps_free(&ps);
}

/* Helper threads change who applies a stripe, not the arithmetic: pushes with them give the same
 * bits, parameters and optimizer state, as pushes without, for SGD with momentum and Adam. */
static void test_helpers_same_bits(gt_opt_kind kind)
{
    enum { N = 70001, PUSHN = 5 };
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.kind = kind;
    c.weight_decay = 1e-3f;
    gt_ps a, b;
    gt_err e;
    CHECK(gt_ps_init(&a, N, 37, &c, &e) == 0 && gt_ps_init(&b, N, 37, &c, &e) == 0);
    CHECK(gt_ps_set_pools(&a, 1, 1, 0, &e) == 0 && gt_ps_set_pools(&b, 1, 3, 0, &e) == 0);
    CHECK(b.npools == 1 && a.npools == 0);
    CHECK(gt_ps_set_pools(&b, 1, 2, 0, &e) != 0 && strstr(e.msg, "already"));
    float *g = gt_alloc(N * sizeof(float)), *pulled = gt_alloc(N * sizeof(float));
    uint64_t va[37], vb[37];
    for (int k = 0; k < PUSHN; k++) {
        gt_ps_pull(&a, pulled, va);
        gt_ps_pull(&b, g, vb);
        CHECK(memcmp(pulled, g, N * sizeof(float)) == 0);
        for (int i = 0; i < N; i++)
            g[i] = (float)((i * 7 + k * 13) % 29 - 14) / 16.0f;
        if (k == 2) { /* a stale gradient: another push lands between pull and push */
            gt_ps_push(&a, 1, 2, g, 0.5f, NULL, 0.0);
            gt_ps_push(&b, 1, 2, g, 0.5f, NULL, 0.0);
        }
        CHECK(gt_ps_push(&a, 0, 2, g, 1.0f, va, 0.1) == gt_ps_push(&b, 0, 2, g, 1.0f, vb, 0.1));
    }
    gt_ps_apply_stripes(&a, 3, 30, g, 2.0f, 9, 0.2);
    gt_ps_apply_stripes(&b, 3, 30, g, 2.0f, 9, 0.2);
    CHECK(memcmp(a.params, b.params, N * sizeof(float)) == 0);
    for (int i = 0; i < a.nstate; i++)
        CHECK(memcmp(a.state[i], b.state[i], N * sizeof(float)) == 0);
    CHECK(atomic_load(&a.stale_max) == 1 && atomic_load(&b.stale_max) == 1);
    gt_free(g);
    gt_free(pulled);
    gt_ps_free(&a);
    gt_ps_free(&b);
}

/* An update in parts (gt_ps_update_*), its parts in any order, is a push then a pull, bit for bit:
 * the parameters, optimizer state, moving average, the copy out, the versions and the staleness,
 * also where another push landed between the pull and the update, with and without helpers. */
static void test_update_parts(int threads)
{
    enum { N = 70001, S = 37, PUSHN = 5 };
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.momentum = 0.9f;
    c.weight_decay = 1e-3f;
    gt_ps a, b, n; /* n: parts that copy nowhere (the caller reads the store itself) */
    gt_ps q;       /* q: the whole push that pulls (gt_ps_push_pull) */
    gt_err e;
    CHECK(gt_ps_init(&a, N, S, &c, &e) == 0 && gt_ps_init(&b, N, S, &c, &e) == 0);
    CHECK(gt_ps_init(&n, N, S, &c, &e) == 0 && gt_ps_init(&q, N, S, &c, &e) == 0);
    CHECK(gt_ps_set_pools(&q, 1, threads, 0, &e) == 0 && gt_ps_init_ema(&q, 0.9f, NULL, &e) == 0);
    CHECK(gt_ps_set_pools(&a, 1, threads, 0, &e) == 0 && gt_ps_set_pools(&b, 1, threads, 0, &e) == 0);
    CHECK(gt_ps_init_ema(&a, 0.9f, NULL, &e) == 0 && gt_ps_init_ema(&b, 0.9f, NULL, &e) == 0);
    CHECK(gt_ps_init_ema(&n, 0.9f, NULL, &e) == 0);
    float *g = gt_alloc(N * sizeof(float)), *pa = gt_alloc(N * sizeof(float));
    float *pb = gt_alloc(N * sizeof(float)), *pq = gt_alloc(N * sizeof(float));
    uint64_t va[S], vb[S], vn[S], vq[S];
    gt_ps_pull(&q, pq, vq);
    gt_ps_pull(&a, pa, va);
    gt_ps_pull(&b, pb, vb);
    gt_ps_pull(&n, pb, vn);
    const int parts[][2] = {{20, 37}, {0, 9}, {9, 20}}; /* a worker's rotated order */
    for (int k = 0; k < PUSHN; k++) {
        for (int i = 0; i < N; i++)
            g[i] = (float)((i * 7 + k * 13) % 29 - 14) / 16.0f;
        if (k == 2) { /* a stale gradient: another push lands between pull and push */
            gt_ps_push(&a, 1, 2, g, 0.5f, NULL, 0.0);
            gt_ps_push(&b, 1, 2, g, 0.5f, NULL, 0.0);
            gt_ps_push(&n, 1, 2, g, 0.5f, NULL, 0.0);
            gt_ps_push(&q, 1, 2, g, 0.5f, NULL, 0.0);
        }
        uint64_t tq = 0, sq = gt_ps_push_pull(&q, 0, 2, g, 1.0f, vq, 0.1, &tq, pq);
        gt_ps_update un;
        gt_ps_update_begin(&n, &un, 0, 2, 1.0f, 0.1);
        gt_ps_update_part(&n, &un, 0, S, g, vn, NULL);
        uint64_t sn = gt_ps_update_end(&n, &un);
        uint64_t ta = 0, sa = gt_ps_push_numbered(&a, 0, 2, g, 1.0f, va, 0.1, &ta);
        gt_ps_pull(&a, pa, va);
        gt_ps_update u;
        gt_ps_update_begin(&b, &u, 0, 2, 1.0f, 0.1);
        for (int p = 0; p < 3; p++)
            gt_ps_update_part(&b, &u, parts[p][0], parts[p][1], g, vb, pb);
        CHECK_MSG(gt_ps_update_end(&b, &u) == sa && u.t == ta, "push %d: staleness %llu, %llu",
                  k, (unsigned long long)u.stale, (unsigned long long)sa);
        CHECK(memcmp(pa, pb, N * sizeof(float)) == 0 && memcmp(va, vb, sizeof va) == 0);
        CHECK(sn == sa && memcmp(va, vn, sizeof va) == 0);
        CHECK(memcmp(pa, n.params, N * sizeof(float)) == 0);
        CHECK(sq == sa && tq == ta && memcmp(pa, pq, N * sizeof(float)) == 0 &&
              memcmp(va, vq, sizeof va) == 0);
    }
    CHECK(memcmp(a.ema, q.ema, N * sizeof(float)) == 0);
    CHECK(memcmp(a.params, b.params, N * sizeof(float)) == 0);
    CHECK(memcmp(a.ema, b.ema, N * sizeof(float)) == 0);
    for (int i = 0; i < a.nstate; i++)
        CHECK(memcmp(a.state[i], b.state[i], N * sizeof(float)) == 0);
    CHECK(atomic_load(&a.stale_max) == 1 && atomic_load(&b.stale_max) == 1);
    CHECK(atomic_load(&a.stale_count) == atomic_load(&b.stale_count));
    gt_free(pa);
    gt_free(pb);
    gt_free(pq);
    gt_ps_free(&a);
    gt_ps_free(&b);
    gt_ps_free(&n);
    gt_ps_free(&q);
    /* lock-free: the push, then the pull */
    CHECK(gt_ps_init(&a, N, 0, &c, &e) == 0 && gt_ps_init(&q, N, 0, &c, &e) == 0);
    pa = gt_alloc(N * sizeof(float));
    pq = gt_alloc(N * sizeof(float));
    for (int i = 0; i < N; i++)
        g[i] = (float)(i % 11) / 8.0f;
    uint64_t ta = 0, tq = 0;
    gt_ps_push_numbered(&a, 0, 2, g, 1.0f, NULL, 0.0, &ta);
    gt_ps_pull(&a, pa, NULL);
    gt_ps_push_pull(&q, 0, 2, g, 1.0f, NULL, 0.0, &tq, pq);
    CHECK(ta == 1 && tq == 1 && memcmp(pa, pq, N * sizeof(float)) == 0);
    gt_free(g);
    gt_free(pa);
    gt_free(pq);
    gt_ps_free(&a);
    gt_ps_free(&q);
}

/* bf16.h's rounding is CUDA's __float2bfloat16_rn: to nearest, ties to even, overflow to Inf,
 * NaN kept; widening is exact. */
static void test_bf16_round(void)
{
    const struct {
        uint32_t f;
        uint16_t h;
    } cases[] = {
        {0x3f800000u, 0x3f80u}, /* 1 */
        {0x3f808000u, 0x3f80u}, /* 1 + 2^-8: a tie, to the even 1 */
        {0x3f818000u, 0x3f82u}, /* a tie, to the even 0x3f82 */
        {0x3f808001u, 0x3f81u}, /* just above the tie */
        {0xbf80ffffu, 0xbf81u}, /* negative, rounds away */
        {0x80000000u, 0x8000u}, /* -0 */
        {0x00000001u, 0x0000u}, /* the smallest denormal, to 0 */
        {0x7f7fffffu, 0x7f80u}, /* FLT_MAX overflows to Inf */
        {0xff800000u, 0xff80u}, /* -Inf */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        float f;
        memcpy(&f, &cases[i].f, sizeof f);
        uint16_t h = gt_bf16_round(f);
        CHECK_MSG(h == cases[i].h, "bf16 of %#x: %#x, want %#x", cases[i].f, h, cases[i].h);
        uint32_t back;
        float w = gt_bf16_float(h);
        memcpy(&back, &w, sizeof back);
        CHECK(back == (uint32_t)h << 16);
    }
    uint16_t nan = gt_bf16_round(NAN);
    CHECK((nan & 0x7f80u) == 0x7f80u && (nan & 0x7fu) != 0);
}

/* An update in parts from a bf16 gradient (gt_ps_update_part_bf16) is the update from that
 * gradient widened to fp32, bit for bit: parameters, state, moving average and the copy out,
 * with weight decay ending inside a stripe and inside a widening block, SGD and Adam. */
static void test_update_parts_bf16(gt_opt_kind kind, int threads)
{
    enum { N = 70001, S = 7, PUSHN = 3 };
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.kind = kind;
    c.momentum = 0.9f;
    c.nesterov = kind == GT_OPT_SGD;
    c.weight_decay = 1e-3f;
    c.decay_end = 50001;
    gt_ps a, b;
    gt_err e;
    CHECK(gt_ps_init(&a, N, S, &c, &e) == 0 && gt_ps_init(&b, N, S, &c, &e) == 0);
    CHECK(gt_ps_set_pools(&a, 1, threads, 0, &e) == 0 && gt_ps_set_pools(&b, 1, threads, 0, &e) == 0);
    CHECK(gt_ps_init_ema(&a, 0.9f, NULL, &e) == 0 && gt_ps_init_ema(&b, 0.9f, NULL, &e) == 0);
    float *g = gt_alloc(N * sizeof(float)), *pa = gt_alloc(N * sizeof(float));
    float *pb = gt_alloc(N * sizeof(float));
    uint16_t *h = gt_alloc(N * sizeof(uint16_t));
    uint64_t va[S], vb[S];
    gt_ps_pull(&a, pa, va);
    gt_ps_pull(&b, pb, vb);
    gt_rng r;
    gt_rng_seed(&r, 5);
    int changed = 0;
    for (int k = 0; k < PUSHN; k++) {
        for (int i = 0; i < N; i++)
            g[i] = (float)(gt_rng_uniform(&r) - 0.5) * 1e-2f;
        gt_bf16_round_n(g, h, N);
        for (int i = 0; i < N; i++) {
            float w = gt_bf16_float(h[i]);
            changed += w != g[i];
            g[i] = w;
        }
        gt_ps_update ua, ub;
        gt_ps_update_begin(&a, &ua, 0, 1, 1.0f, 0.1);
        gt_ps_update_begin(&b, &ub, 0, 1, 1.0f, 0.1);
        gt_ps_update_part(&a, &ua, 3, S, g, va, pa);
        gt_ps_update_part(&a, &ua, 0, 3, g, va, pa);
        gt_ps_update_part_bf16(&b, &ub, 3, S, h, vb, pb);
        gt_ps_update_part_bf16(&b, &ub, 0, 3, h, vb, pb);
        gt_ps_update_end(&a, &ua);
        gt_ps_update_end(&b, &ub);
        CHECK(memcmp(pa, pb, N * sizeof(float)) == 0 && memcmp(va, vb, sizeof va) == 0);
    }
    CHECK(changed > N); /* the rounding moved most values */
    CHECK(memcmp(a.params, b.params, N * sizeof(float)) == 0);
    CHECK(memcmp(a.ema, b.ema, N * sizeof(float)) == 0);
    for (int i = 0; i < a.nstate; i++)
        CHECK(memcmp(a.state[i], b.state[i], N * sizeof(float)) == 0);
    gt_free(g);
    gt_free(h);
    gt_free(pa);
    gt_free(pb);
    gt_ps_free(&a);
    gt_ps_free(&b);
}

/* gt_ps_apply_stripes_sum gives the bits of summing the addends first, in order, then applying:
 * for a split update (two parts, one thread) and one walk on 1 + 2 helpers, SGD momentum and Adam;
 * g ends holding the sum. */
static void test_apply_sum(gt_opt_kind kind, int threads)
{
    enum { N = 4099, ADD = 3 };
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.kind = kind;
    gt_ps a, b;
    gt_err e;
    CHECK(gt_ps_init(&a, N, 16, &c, &e) == 0 && gt_ps_init(&b, N, 16, &c, &e) == 0);
    CHECK(gt_ps_set_pools(&b, 1, threads, 0, &e) == 0);
    float *g[ADD + 1], *ref = gt_alloc(N * sizeof(float)), *sum = gt_alloc(N * sizeof(float));
    for (int k = 0; k <= ADD; k++)
        g[k] = gt_alloc(N * sizeof(float));
    for (int t = 1; t <= 5; t++) {
        for (int k = 0; k <= ADD; k++)
            for (int i = 0; i < N; i++)
                g[k][i] = 1e-3f * (float)((i * 7 + k * 13 + t) % 23) / (float)(k + 3);
        memcpy(ref, g[0], N * sizeof(float));
        for (int k = 1; k <= ADD; k++)
            for (int i = 0; i < N; i++)
                ref[i] += g[k][i];
        memcpy(sum, ref, N * sizeof(float));
        gt_ps_apply_stripes(&a, 0, 16, ref, 0.25f, (uint64_t)t, 0.0);
        if (threads == 1) { /* split as sync splits it across two workers */
            gt_ps_apply_stripes_sum(&b, 0, 7, g[0], g + 1, ADD, 0.25f, (uint64_t)t, 0.0);
            gt_ps_apply_stripes_sum(&b, 7, 16, g[0], g + 1, ADD, 0.25f, (uint64_t)t, 0.0);
        } else {
            gt_ps_apply_stripes_sum(&b, 0, 16, g[0], g + 1, ADD, 0.25f, (uint64_t)t, 0.0);
        }
        CHECK(memcmp(g[0], sum, N * sizeof(float)) == 0);
    }
    CHECK(memcmp(a.params, b.params, N * sizeof(float)) == 0);
    for (int i = 0; i < a.nstate; i++)
        CHECK(memcmp(a.state[i], b.state[i], N * sizeof(float)) == 0);
    for (int k = 0; k <= ADD; k++)
        gt_free(g[k]);
    gt_free(ref);
    gt_free(sum);
    gt_ps_free(&a);
    gt_ps_free(&b);
}

/* gt_ps_apply_stripes_out: the apply's bits, and a copy equal to the parameters after every
 * update (two parts, or one walk on helpers); gt_ps_pull_stale then copies only the stripes
 * another writer moved (gt_ps_store_stripes here, a rollback's restore alike), and every stripe
 * where the versions are unknown (UINT64_MAX). */
static void test_apply_out(int threads)
{
    enum { N = 4099, S = 16 };
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    gt_ps a, b;
    gt_err e;
    CHECK(gt_ps_init(&a, N, S, &c, &e) == 0 && gt_ps_init(&b, N, S, &c, &e) == 0);
    CHECK(gt_ps_set_pools(&b, 1, threads, 0, &e) == 0);
    float *g = gt_alloc(N * sizeof(float)), *h = gt_alloc(N * sizeof(float));
    float *copy = gt_alloc(N * sizeof(float)), *src = gt_alloc(N * sizeof(float));
    uint64_t ver[S];
    for (int s = 0; s < S; s++)
        ver[s] = UINT64_MAX;
    gt_ps_pull_stale(&b, copy, ver); /* nothing known: all of it */
    CHECK(memcmp(copy, b.params, N * sizeof(float)) == 0);
    for (int t = 1; t <= 4; t++) {
        for (int i = 0; i < N; i++)
            g[i] = h[i] = 1e-3f * (float)((i * 5 + t) % 19);
        gt_ps_apply_stripes(&a, 0, S, g, 0.5f, (uint64_t)t, 0.0);
        if (threads == 1) {
            gt_ps_apply_stripes_out(&b, 0, 5, h, NULL, 0, 0.5f, (uint64_t)t, 0.0, copy, ver);
            gt_ps_apply_stripes_out(&b, 5, S, h, NULL, 0, 0.5f, (uint64_t)t, 0.0, copy, ver);
        } else {
            gt_ps_apply_stripes_out(&b, 0, S, h, NULL, 0, 0.5f, (uint64_t)t, 0.0, copy, ver);
        }
        CHECK(memcmp(a.params, b.params, N * sizeof(float)) == 0);
        CHECK(memcmp(copy, b.params, N * sizeof(float)) == 0);
    }
    for (int s = 0; s < S; s++)
        CHECK(ver[s] == atomic_load(&b.stripes[s].version));
    /* another writer moves stripes 3 and 4; a value planted in stripe 9 of the copy stays, since
     * its version still matches (the pull reads only what moved) */
    for (int i = 0; i < N; i++)
        src[i] = (float)i;
    gt_ps_store_stripes(&b, 3, 5, src, 0);
    size_t lo9, hi9;
    gt_ps_stripes_span(&b, 9, 10, &lo9, &hi9);
    copy[lo9] = 12345.0f;
    gt_ps_pull_stale(&b, copy, ver);
    CHECK(copy[lo9] == 12345.0f);
    copy[lo9] = b.params[lo9];
    CHECK(memcmp(copy, b.params, N * sizeof(float)) == 0);
    /* a rollback: the restore moves every stripe's version, so the pull takes it all back */
    gt_ps_saved saved;
    CHECK(gt_ps_saved_alloc(&saved, &b, &e) == 0);
    gt_ps_save(&b, &saved);
    gt_ps_apply_stripes_out(&b, 0, S, h, NULL, 0, 0.5f, 5, 0.0, copy, ver);
    gt_ps_restore(&b, &saved);
    CHECK(memcmp(copy, b.params, N * sizeof(float)) != 0);
    gt_ps_pull_stale(&b, copy, ver);
    CHECK(memcmp(copy, b.params, N * sizeof(float)) == 0);
    gt_ps_saved_free(&saved);
    gt_free(g);
    gt_free(h);
    gt_free(copy);
    gt_free(src);
    gt_ps_free(&a);
    gt_ps_free(&b);
}

/* The moving average (--ema): its warm-up decay, and exact values after known updates through
 * every path that applies one (push, apply_stripes, store_stripes), locked and lock-free, and
 * through a rollback copy. With decay 0.5 past the warm-up every value is exact in float: plain
 * SGD at lr 1 with gradient 1 from p = 8 gives p = 7, 6, 5 and ema = 7.5, 6.75, 5.875. */
static void test_ema(int stripes)
{
    CHECK(gt_ps_ema_decay(0.999f, 0, 1) == (float)(1.0 / 10.0));
    CHECK(gt_ps_ema_decay(0.999f, 1, 1) == (float)(2.0 / 11.0));
    CHECK(gt_ps_ema_decay(0.5f, 8, 1) == 0.5f);          /* 9/18: warm-up and decay meet */
    CHECK(gt_ps_ema_decay(0.999f, 1000000, 1) == 0.999f);
    /* a long average is taken once in 2 updates from 890 at 0.999f, 4 from 1790, 8 from 3590
     * (each weighing at most 2% of it), standing for the updates since the last: every update
     * counted once, the span's decay the product of its updates'; a short one (0.98, 0.5) every
     * update */
    uint64_t counted = 0;
    for (uint64_t t = 1; t <= 20000; t++) {
        unsigned span = gt_ps_ema_span(0.999f, t);
        unsigned want = t < 890 ? 1 : t < 1790 ? 2 : t < 3590 ? 4 : 8;
        /* a stride's first update stands for those since the last of the stride before */
        int first = (t >= 890 && t < 892) || (t >= 1790 && t < 1794) || (t >= 3590 && t < 3598);
        CHECK_MSG(t % want ? span == 0 : first ? span > 0 && span <= want : span == want,
                  "update %llu: span %u", (unsigned long long)t, span);
        counted += span;
        CHECK(gt_ps_ema_span(0.98f, t) == 1 && gt_ps_ema_span(0.5f, t) == 1);
    }
    CHECK(counted == 20000);
    CHECK(gt_ps_ema_span(0.9999f, 200000) == 8 && gt_ps_ema_span(0.995f, 5000) == 4);
    CHECK_CLOSE(gt_ps_ema_decay(0.999f, 900, 2), (901.0 / 910.0) * (900.0 / 909.0), 1e-6);
    gt_optim_cfg c = plain_sgd();
    gt_ps ps;
    gt_err e;
    enum { N = 300 };
    CHECK(gt_ps_init(&ps, N, stripes, &c, &e) == 0);
    CHECK(gt_ps_init_ema(&ps, 1.0f, NULL, &e) != 0 && strstr(e.msg, "--ema"));
    CHECK(gt_ps_init_ema(&ps, 0.0f, NULL, &e) != 0 && strstr(e.msg, "--ema"));
    CHECK(ps.ema == NULL);
    for (int k = 0; k < N; k++)
        ps.params[k] = 8.0f;
    CHECK(gt_ps_init_ema(&ps, 0.5f, NULL, &e) == 0 && ps.ema[7] == 8.0f);
    atomic_store(&ps.updates, 100); /* past the warm-up: the decay is 0.5 */
    float g[N], got[N], src[N];
    for (int k = 0; k < N; k++)
        g[k] = 1.0f;
    gt_ps_push(&ps, 1, 2, g, 1.0f, NULL, 0.0);
    gt_ps_pull_ema(&ps, got);
    for (int k = 0; k < N; k++)
        CHECK(ps.params[k] == 7.0f && got[k] == 7.5f);
    /* a clocked mode's split update: two halves of one update, number 102 */
    int half = ps.nranges / 2;
    gt_ps_apply_stripes(&ps, 0, half, g, 1.0f, 102, 0.0);
    gt_ps_apply_stripes(&ps, half, ps.nranges, g, 1.0f, 102, 0.0);
    gt_ps_pull_ema(&ps, got);
    for (int k = 0; k < N; k++)
        CHECK(ps.params[k] == 6.0f && got[k] == 6.75f);
    gt_ps_saved saved;
    CHECK(gt_ps_saved_alloc(&saved, &ps, &e) == 0 && saved.ema);
    gt_ps_save(&ps, &saved);
    /* a local-mode average that replaces the parameters counts as one update */
    for (int k = 0; k < N; k++)
        src[k] = 5.0f;
    gt_ps_store_stripes(&ps, 0, ps.nranges, src, 1);
    gt_ps_pull_ema(&ps, got);
    for (int k = 0; k < N; k++)
        CHECK(ps.params[k] == 5.0f && got[k] == 5.875f);
    gt_ps_restore(&ps, &saved); /* the rollback puts the average back with the parameters */
    gt_ps_pull_ema(&ps, got);
    for (int k = 0; k < N; k++)
        CHECK(ps.params[k] == 6.0f && got[k] == 6.75f);
    /* an average standing for 2 steps decays as 2 updates do: 0.5^2 */
    CHECK(gt_ps_ema_decay(0.5f, 102, 2) == 0.25f);
    gt_ps_store_stripes(&ps, 0, ps.nranges, src, 2);
    gt_ps_pull_ema(&ps, got);
    for (int k = 0; k < N; k++)
        CHECK(ps.params[k] == 5.0f && got[k] == 5.4375f);
    gt_ps_restore(&ps, &saved);
    /* span 0 replaces the parameters and leaves the average alone (allreduce brings its own) */
    gt_ps_store_stripes(&ps, 0, ps.nranges, src, 0);
    gt_ps_pull_ema(&ps, got);
    for (int k = 0; k < N; k++)
        CHECK(ps.params[k] == 5.0f && got[k] == 6.75f);
    gt_ps_restore(&ps, &saved);
    gt_ps_saved_free(&saved);
    /* the warm-up: update 1 after a reset keeps only 2/11 of the average */
    atomic_store(&ps.updates, 0);
    for (int k = 0; k < N; k++)
        src[k] = 16.0f;
    gt_ps_store_ema(&ps, src);
    gt_ps_push(&ps, 0, 1, g, 1.0f, NULL, 0.0); /* p = 5 */
    float d = gt_ps_ema_decay(0.5f, 1, 1);
    CHECK(d == (float)(2.0 / 11.0));
    gt_ps_pull_ema(&ps, got);
    double want = (2.0 / 11.0) * 16.0 + (9.0 / 11.0) * 5.0; /* within float rounding (an FMA or not) */
    for (int k = 0; k < N; k++) {
        CHECK(ps.params[k] == 5.0f);
        CHECK_CLOSE(got[k], want, 1e-5);
    }
    gt_ps_free(&ps);
    /* at 0.999 past the warm-up, update 8999 leaves the average as it was and 9000 moves it as 8
     * updates do (gt_ps_ema_span), through a push and through a clocked apply alike */
    CHECK(gt_ps_init(&ps, N, stripes, &c, &e) == 0);
    for (int k = 0; k < N; k++)
        ps.params[k] = 8.0f;
    CHECK(gt_ps_init_ema(&ps, 0.999f, NULL, &e) == 0);
    atomic_store(&ps.updates, 8998);
    gt_ps_push(&ps, 0, 1, g, 1.0f, NULL, 0.0); /* update 8999: p = 7 */
    gt_ps_pull_ema(&ps, got);
    for (int k = 0; k < N; k++)
        CHECK(ps.params[k] == 7.0f && got[k] == 8.0f);
    gt_ps_apply_stripes(&ps, 0, ps.nranges, g, 1.0f, 9000, 0.0); /* p = 6 */
    float d8 = gt_ps_ema_decay(0.999f, 9000, 8);
    CHECK_CLOSE(d8, pow((double)0.999f, 8.0), 1e-7);
    gt_ps_pull_ema(&ps, got);
    for (int k = 0; k < N; k++) { /* within float rounding (an FMA or not) */
        CHECK(ps.params[k] == 6.0f);
        CHECK_CLOSE(got[k], (double)d8 * 8.0 + (1.0 - (double)d8) * 6.0, 1e-5);
    }
    gt_ps_free(&ps);
}

int main(void)
{
    test_ema(1);
    test_ema(3);
    test_ema(0);
    test_ema(-1);
    int stripes[] = {1, 3, 16, -1};
    for (size_t i = 0; i < sizeof stripes / sizeof *stripes; i++)
        test_no_lost_update(stripes[i], 1, 1);
    test_lock_free_bounds();
    test_layout();
    test_staleness();
    test_stale_percentile();
    test_momentum_state();
    test_save_restore(4);
    test_save_restore(0);
    for (size_t i = 0; i < sizeof stripes / sizeof *stripes; i++)
        test_no_lost_update(stripes[i], 1, 3);
    test_no_lost_update(8, THREADS, 2);
    test_no_lost_update(-1, 2, 3);
    test_helpers_same_bits(GT_OPT_SGD);
    test_helpers_same_bits(GT_OPT_ADAM);
    test_update_parts(1);
    test_update_parts(3);
    test_bf16_round();
    test_update_parts_bf16(GT_OPT_SGD, 1);
    test_update_parts_bf16(GT_OPT_ADAM, 3);
    test_apply_sum(GT_OPT_SGD, 1);
    test_apply_sum(GT_OPT_SGD, 3);
    test_apply_sum(GT_OPT_ADAM, 3);
    test_apply_out(1);
    test_apply_out(3);
    CHECK(gt_ps_default_threads(1) >= 1 && gt_ps_default_threads(1) <= GT_PS_THREADS_MOST_ONE);
    CHECK(gt_ps_default_threads(2) >= 1 && gt_ps_default_threads(2) <= GT_PS_THREADS_MOST);
    CHECK(gt_ps_default_threads(1000) == 1);
    gt_ps ps;
    gt_err e;
    gt_optim_cfg c = plain_sgd();
    CHECK(gt_ps_init(&ps, NPARAM, 4, &c, &e) == 0);
    CHECK(gt_ps_set_pools(&ps, GT_PS_MAX_POOLS + 1, 2, 0, &e) != 0 && strstr(e.msg, "groups"));
    CHECK(gt_ps_set_pools(&ps, 2, 2, 0, &e) == 0 && ps.npools == 2);
    gt_ps_free(&ps);
    /* --store-threads: 1 is the worker alone (no helpers); 3, a group of 2 helpers per worker */
    CHECK(gt_ps_init(&ps, NPARAM, 4, &c, &e) == 0);
    ps.threads = 1;
    CHECK(gt_ps_start_threads(&ps, 2, &e) == 0 && ps.npools == 0);
    gt_ps_free(&ps);
    CHECK(gt_ps_init(&ps, NPARAM, 4, &c, &e) == 0);
    ps.threads = 3;
    CHECK(gt_ps_start_threads(&ps, 2, &e) == 0 && ps.npools == 2);
    gt_ps_free(&ps);
    TEST_DONE();
}
