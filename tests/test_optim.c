/* test_optim.c - SGD (plain, momentum, Nesterov, weight decay) and Adam against the torch.optim
 * formulas evaluated in double, gradient scaling, the relaxed-atomic twin, and the schedules. */
#include "gputrain/optim.h"
#include "test_util.h"

#define N 37 /* odd, so vectorised loops also run their tails */

static float grad_at(int step, int i) { return 0.3f * sinf(1.7f * (float)i + (float)step) - 0.05f; }

static float param_at(int i) { return 0.8f * cosf(0.9f * (float)i) + 0.1f; }

/* torch.optim step in double, written from the textbook formulas (Adam with bias-corrected
 * moments m_hat and v_hat) rather than from optim.c's rearrangement. */
static void ref_step(const gt_optim_cfg *c, double lr, int t, double *p, const float *g,
                     double gscale, double *s0, double *s1)
{
    double mom = c->momentum, wd = c->weight_decay, b1 = c->beta1, b2 = c->beta2;
    for (int i = 0; i < N; i++) {
        double gi = g[i] * gscale + wd * p[i];
        if (c->kind == GT_OPT_ADAM) {
            s0[i] = b1 * s0[i] + (1 - b1) * gi;
            s1[i] = b2 * s1[i] + (1 - b2) * gi * gi;
            double m_hat = s0[i] / (1 - pow(b1, t)), v_hat = s1[i] / (1 - pow(b2, t));
            p[i] -= lr * m_hat / (sqrt(v_hat) + c->eps);
            continue;
        }
        if (mom != 0) {
            s0[i] = t == 1 ? gi : mom * s0[i] + gi;
            gi = c->nesterov ? gi + mom * s0[i] : s0[i];
        }
        p[i] -= lr * gi;
    }
}

/* Three steps of gt_optim_apply against ref_step; also checks the update moved something. */
static void check_against_ref(const gt_optim_cfg *c, float gscale, const char *what)
{
    float p[N], s0[N] = {0}, s1[N] = {0}, g[N];
    double rp[N], r0[N] = {0}, r1[N] = {0};
    for (int i = 0; i < N; i++)
        rp[i] = p[i] = param_at(i);
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < N; i++)
            g[i] = grad_at(t, i);
        gt_optim_step st = gt_optim_prepare(c, (uint64_t)t, 0.0);
        gt_optim_apply(c, &st, p, g, gscale, s0, s1, N);
        ref_step(c, c->lr, t, rp, g, gscale, r0, r1);
    }
    int moved = 0;
    for (int i = 0; i < N; i++) {
        CHECK_MSG(fabs(p[i] - rp[i]) <= 2e-6 * fmax(1.0, fabs(rp[i])), "%s p[%d] %.9g vs %.9g",
                  what, i, p[i], rp[i]);
        CHECK_MSG(fabs(s0[i] - r0[i]) <= 2e-6 * fmax(1.0, fabs(r0[i])), "%s s0[%d]", what, i);
        CHECK_MSG(fabs(s1[i] - r1[i]) <= 2e-6 * fmax(1.0, fabs(r1[i])), "%s s1[%d]", what, i);
        moved += fabs(p[i] - param_at(i)) > 1e-4;
    }
    CHECK_MSG(moved > N / 2, "%s: only %d parameters moved", what, moved);
}

/* Hand-worked: lr 0.1, constant gradient 1, p starts at 1. */
static void test_hand_values(void)
{
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.lr = 0.1f;
    const float one = 1.0f;
    /* plain: p = 1 - 0.1t */
    /* momentum 0.9: buf = 1, 1.9, 2.71; p = 0.9, 0.71, 0.439 */
    /* Nesterov: g + 0.9 buf = 1.9, 2.71, 3.439; p = 0.81, 0.539, 0.1951 */
    const double want[3][3] = {{0.9, 0.8, 0.7}, {0.9, 0.71, 0.439}, {0.81, 0.539, 0.1951}};
    for (int variant = 0; variant < 3; variant++) {
        c.momentum = variant ? 0.9f : 0.0f;
        c.nesterov = variant == 2;
        float p = 1.0f, buf = 0.0f;
        for (int t = 1; t <= 3; t++) {
            gt_optim_step st = gt_optim_prepare(&c, (uint64_t)t, 0.0);
            gt_optim_apply(&c, &st, &p, &one, 1.0f, variant ? &buf : NULL, NULL, 1);
            CHECK_CLOSE(p, want[variant][t - 1], 1e-6);
        }
    }
    /* weight decay 0.5 on plain SGD: g = 1 + 0.5p; p = 1 - 0.1*1.5 = 0.85 */
    c.momentum = 0.0f;
    c.weight_decay = 0.5f;
    float p = 1.0f;
    gt_optim_step st = gt_optim_prepare(&c, 1, 0.0);
    gt_optim_apply(&c, &st, &p, &one, 1.0f, NULL, NULL, 1);
    CHECK_CLOSE(p, 0.85, 1e-6);

    /* Adam's first step is lr * sign(g) whatever the gradient's size: m_hat = g, v_hat = g^2. */
    gt_optim_defaults(&c);
    c.kind = GT_OPT_ADAM;
    c.lr = 0.01f;
    float pa[2] = {1.0f, 1.0f}, ga[2] = {1e-3f, -250.0f}, m[2] = {0}, v[2] = {0};
    st = gt_optim_prepare(&c, 1, 0.0);
    gt_optim_apply(&c, &st, pa, ga, 1.0f, m, v, 2);
    CHECK_CLOSE(pa[0], 0.99, 1e-6);
    CHECK_CLOSE(pa[1], 1.01, 1e-6);
}

static void test_against_reference(void)
{
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.momentum = 0.0f;
    check_against_ref(&c, 1.0f, "sgd");
    c.weight_decay = 0.01f;
    check_against_ref(&c, 1.0f, "sgd+wd");
    gt_optim_defaults(&c);
    check_against_ref(&c, 1.0f, "momentum");
    c.weight_decay = 5e-4f;
    check_against_ref(&c, 0.5f, "momentum+wd, gscale");
    c.nesterov = 1;
    check_against_ref(&c, 1.0f, "nesterov+wd");
    c.weight_decay = 0.0f;
    check_against_ref(&c, 1.0f, "nesterov");

    gt_optim_defaults(&c);
    c.kind = GT_OPT_ADAM;
    c.lr = 1e-3f;
    check_against_ref(&c, 1.0f, "adam");
    c.weight_decay = 0.01f;
    c.beta1 = 0.8f;
    c.beta2 = 0.99f;
    check_against_ref(&c, 0.25f, "adam+wd, betas, gscale");
}

/* Bit-exact comparisons between two update paths over three steps. */
typedef void apply_fn(const gt_optim_cfg *, const gt_optim_step *, float *, const float *, float,
                      float *, float *, size_t);

static void run_three(const gt_optim_cfg *c, apply_fn *fn, float gscale, int prescale, float *p,
                      float *s0, float *s1)
{
    float g[N];
    for (int i = 0; i < N; i++)
        p[i] = param_at(i), s0[i] = s1[i] = 0.0f;
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < N; i++)
            g[i] = prescale ? grad_at(t, i) * gscale : grad_at(t, i);
        gt_optim_step st = gt_optim_prepare(c, (uint64_t)t, 0.3 * t);
        fn(c, &st, p, g, prescale ? 1.0f : gscale, s0, s1, N);
    }
}

static void check_same_bits(const gt_optim_cfg *c, apply_fn *a, int pre_a, apply_fn *b, int pre_b,
                            float gscale, const char *what)
{
    float p[2][N], s0[2][N], s1[2][N];
    run_three(c, a, gscale, pre_a, p[0], s0[0], s1[0]);
    run_three(c, b, gscale, pre_b, p[1], s0[1], s1[1]);
    CHECK_MSG(memcmp(p[0], p[1], sizeof p[0]) == 0, "%s: parameters differ", what);
    CHECK_MSG(memcmp(s0[0], s0[1], sizeof s0[0]) == 0, "%s: state 0 differs", what);
    CHECK_MSG(memcmp(s1[0], s1[1], sizeof s1[0]) == 0, "%s: state 1 differs", what);
}

static void test_relaxed_and_gscale(void)
{
    gt_optim_cfg cfgs[5];
    for (int k = 0; k < 5; k++) {
        gt_optim_defaults(&cfgs[k]);
        cfgs[k].weight_decay = 1e-3f;
        cfgs[k].schedule = GT_SCHED_COSINE;
    }
    cfgs[0].momentum = 0.0f;
    cfgs[2].nesterov = 1;
    cfgs[3].kind = GT_OPT_ADAM;
    cfgs[4].kind = GT_OPT_ADAM;
    cfgs[4].weight_decay = 0.0f;
    const char *names[5] = {"sgd", "momentum", "nesterov", "adam+wd", "adam"};
    for (int k = 0; k < 5; k++) {
        char what[64];
        snprintf(what, sizeof what, "%s relaxed vs plain", names[k]);
        check_same_bits(&cfgs[k], gt_optim_apply_relaxed, 0, gt_optim_apply, 0, 0.37f, what);
        /* A power-of-two gscale is exact, so scaling inside must equal scaling before. */
        snprintf(what, sizeof what, "%s gscale vs prescaled", names[k]);
        check_same_bits(&cfgs[k], gt_optim_apply, 0, gt_optim_apply, 1, 0.125f, what);
    }

    /* gscale 0 with no weight decay leaves SGD parameters alone; n = 0 touches nothing. */
    gt_optim_cfg c = cfgs[0];
    c.weight_decay = 0.0f;
    float p[N], p0[N], g[N];
    for (int i = 0; i < N; i++)
        p0[i] = p[i] = param_at(i), g[i] = grad_at(1, i);
    gt_optim_step st = gt_optim_prepare(&c, 1, 0.0);
    gt_optim_apply(&c, &st, p, g, 0.0f, NULL, NULL, N);
    gt_optim_apply(&c, &st, p, g, 1.0f, NULL, NULL, 0);
    CHECK(memcmp(p, p0, sizeof p) == 0);
}

static void test_defaults_nstate(void)
{
    gt_optim_cfg c;
    memset(&c, 0xff, sizeof c);
    gt_optim_defaults(&c);
    CHECK(c.kind == GT_OPT_SGD);
    CHECK(c.lr == 0.05f && c.momentum == 0.9f && c.nesterov == 0 && c.weight_decay == 0.0f);
    CHECK(c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f);
    CHECK(c.schedule == GT_SCHED_CONSTANT && c.warmup_epochs == 0.0f && c.step_epochs == 0.0f);
    CHECK(c.gamma == 0.1f && c.total_epochs == 10.0f);

    CHECK(gt_optim_nstate(&c) == 1);
    c.nesterov = 1;
    CHECK(gt_optim_nstate(&c) == 1);
    c.momentum = 0.0f;
    CHECK(gt_optim_nstate(&c) == 0);
    c.kind = GT_OPT_ADAM;
    CHECK(gt_optim_nstate(&c) == 2);
}

static void test_schedules(void)
{
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.lr = 0.2f;
    const double lr = 0.2f;
    CHECK_CLOSE(gt_optim_lr(&c, 0.0), lr, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 7.5), lr, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 1000.0), lr, 1e-7);

    c.warmup_epochs = 2.0f;
    CHECK(gt_optim_lr(&c, 0.0) == 0.0f);
    CHECK_CLOSE(gt_optim_lr(&c, 0.5), lr / 4, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 1.0), lr / 2, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 2.0), lr, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 9.0), lr, 1e-7);

    c.warmup_epochs = 0.0f;
    c.schedule = GT_SCHED_STEP;
    c.step_epochs = 3.0f;
    c.gamma = 0.5f;
    CHECK_CLOSE(gt_optim_lr(&c, 0.0), lr, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 2.99), lr, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 3.0), lr * 0.5, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 6.5), lr * 0.25, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 9.0), lr * 0.125, 1e-7);
    c.step_epochs = 0.0f;
    CHECK_CLOSE(gt_optim_lr(&c, 9.0), lr, 1e-7);
    c.step_epochs = 3.0f;
    c.warmup_epochs = 1.0f;
    CHECK_CLOSE(gt_optim_lr(&c, 0.25), lr / 4, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 4.0), lr * 0.5, 1e-7);

    c.schedule = GT_SCHED_COSINE;
    c.warmup_epochs = 0.0f;
    c.total_epochs = 10.0f;
    CHECK_CLOSE(gt_optim_lr(&c, 0.0), lr, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 2.5), lr * 0.5 * (1 + sqrt(0.5)), 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 5.0), lr / 2, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 10.0), 0.0, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 15.0), 0.0, 1e-7);
    c.warmup_epochs = 2.0f;
    CHECK_CLOSE(gt_optim_lr(&c, 1.0), lr / 2, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 2.0), lr, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 6.0), lr / 2, 1e-7);
    CHECK_CLOSE(gt_optim_lr(&c, 10.0), 0.0, 1e-7);
    CHECK(gt_optim_lr(&c, 3.0) < gt_optim_lr(&c, 2.5));
}

static void test_prepare(void)
{
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.kind = GT_OPT_ADAM;
    c.schedule = GT_SCHED_COSINE;
    for (uint64_t t = 1; t <= 3; t++) {
        gt_optim_step st = gt_optim_prepare(&c, t, 5.0);
        CHECK(st.lr == gt_optim_lr(&c, 5.0));
        CHECK_CLOSE(st.bc1, 1 - pow(0.9f, (double)t), 1e-7);
        CHECK_CLOSE(st.bc2, 1 - pow(0.999f, (double)t), 1e-7);
    }
    gt_optim_step st = gt_optim_prepare(&c, 1000000, 5.0);
    CHECK_CLOSE(st.bc1, 1.0, 1e-7);
    CHECK_CLOSE(st.bc2, 1.0, 1e-7);
}

/* Updates flush denormals to zero (they are ~100x slower on x86), and leave the caller's
 * floating-point mode as it was. */
static void test_denormals_flushed(void)
{
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    gt_optim_step st = gt_optim_prepare(&c, 1, 0.0);
    volatile float tiny = 1e-39f; /* denormal */
    float p[4] = {1, 1, 1, 1}, g[4] = {0, 0, 0, 0}, b[4] = {tiny, tiny, tiny, tiny};
    CHECK(b[0] != 0.0f && b[0] < 1.17549435e-38f);
    gt_optim_apply(&c, &st, p, g, 1.0f, b, NULL, 4);
    CHECK(b[0] == 0.0f && p[0] == 1.0f);
    b[1] = tiny;
    gt_optim_apply_relaxed(&c, &st, p, g, 1.0f, b, NULL, 4);
    CHECK(b[1] == 0.0f);
    volatile float half = 0.5f;
    CHECK(tiny * half != 0.0f); /* outside the optimizer, denormals still work */
}

/* --overlap's weight prediction is the plain SGD update, bit for bit, weight decay and gradient
 * scale included, whatever the momentum; a non-finite gradient entry leaves its parameter alone. */
static void test_predict(void)
{
    float p[N], q[N], g[N];
    for (int i = 0; i < N; i++) {
        p[i] = q[i] = 0.37f * (float)(i - 20) / 7.0f;
        g[i] = 0.11f * (float)((i * 7) % 13 - 6);
    }
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.weight_decay = 1e-3f;
    gt_optim_step st = gt_optim_prepare(&c, 5, 0.5);
    gt_optim_predict(&c, &st, p, g, 0.5f, N); /* momentum 0.9: not used */
    gt_optim_cfg plain = c;
    plain.momentum = 0.0f;
    gt_optim_apply(&plain, &st, q, g, 0.5f, NULL, NULL, N);
    for (int i = 0; i < N; i++)
        CHECK_MSG(p[i] == q[i], "predicted %d: %.9g, SGD %.9g", i, p[i], q[i]);
    g[3] = NAN;
    g[9] = INFINITY;
    float p3 = p[3], p9 = p[9], p4 = p[4];
    gt_optim_predict(&c, &st, p, g, 1.0f, N);
    CHECK(p[3] == p3 && p[9] == p9 && p[4] != p4);
}

/* The optimizer table: a row per kind, found by kind, by its word and by its state count, with
 * the state named as torch.optim's state_dict names it (what checkpoints store). */
static void test_table(void)
{
    for (int k = 0; k < GT_OPT_KINDS; k++) {
        const gt_optimizer_row *row = &gt_optimizer_rows[k];
        CHECK(gt_optimizer_row_of((gt_opt_kind)row->head.value) == row);
        CHECK(gt_optimizer_row_named(row->head.name) == row);
        CHECK(gt_optimizer_row_keeping(row->nstate) == row);
        for (int s = 0; s < row->nstate; s++)
            CHECK(row->state_names[s] && row->state_names[s][0]);
    }
    const gt_optimizer_row *sgd = gt_optimizer_row_named("sgd");
    const gt_optimizer_row *adam = gt_optimizer_row_named("adam");
    CHECK(sgd && sgd->nstate == 1 && strcmp(sgd->state_names[0], "momentum_buffer") == 0);
    CHECK(adam && adam->nstate == 2 && strcmp(adam->state_names[0], "exp_avg") == 0 &&
          strcmp(adam->state_names[1], "exp_avg_sq") == 0);
    CHECK(gt_optimizer_row_named("rmsprop") == NULL && gt_optimizer_row_named(NULL) == NULL);
    CHECK(gt_optimizer_row_of((gt_opt_kind)99) == NULL && gt_optimizer_row_keeping(3) == NULL);
}

/* gt_optim_apply_at: parameters from decay_end on take no weight decay, wherever a range starts;
 * decay_end 0 decays all; the prediction follows the same split. */
static void test_decay_end(void)
{
    gt_optim_cfg c;
    gt_optim_defaults(&c);
    c.weight_decay = 0.5f;
    c.momentum = 0.0f;
    gt_optim_step st = gt_optim_prepare(&c, 1, 0.0);
    float g[8] = {0}, p[8], q[8];
    for (int at = 0; at < 8; at++) {
        for (int i = 0; i < 8; i++)
            p[i] = 1.0f;
        c.decay_end = 5;
        /* two calls over [0, at) and [at, 8), as two stripes would */
        gt_optim_apply_at(&c, &st, 0, p, g, 1.0f, NULL, NULL, (size_t)at, 0);
        gt_optim_apply_at(&c, &st, (size_t)at, p + at, g + at, 1.0f, NULL, NULL, 8 - (size_t)at,
                          at % 2);
        for (int i = 0; i < 8; i++)
            CHECK_MSG(i < 5 ? p[i] < 1.0f : p[i] == 1.0f, "at %d: p[%d] = %g", at, i, (double)p[i]);
    }
    for (int i = 0; i < 8; i++)
        p[i] = q[i] = 1.0f;
    gt_optim_predict(&c, &st, q, g, 1.0f, 8);
    gt_optim_apply_at(&c, &st, 0, p, g, 1.0f, NULL, NULL, 8, 0);
    CHECK(memcmp(p, q, sizeof p) == 0);
    c.decay_end = 0;
    gt_optim_apply_at(&c, &st, 3, p, g, 1.0f, NULL, NULL, 8, 0);
    CHECK(p[7] < 1.0f);
}

int main(void)
{
    test_decay_end();
    test_table();
    test_predict();
    test_denormals_flushed();
    test_defaults_nstate();
    test_hand_values();
    test_against_reference();
    test_relaxed_and_gscale();
    test_schedules();
    test_prepare();
    TEST_DONE();
}
