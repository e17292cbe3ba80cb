/* test_recipe.c - the recipe corrections (recipe.h): identity with one worker and under
 * --literal, the momentum rule per mode and worker count, warm-up where updates sum several
 * batches, options the user gave left alone, and the sentences that describe each change. */
#include "gputrain/names.h"
#include "gputrain/recipe.h"

#include "test_util.h"

#define NTRAIN 60000u

static gt_config base(gt_mode mode)
{
    gt_config c;
    gt_config_defaults(&c);
    c.mode = mode;
    return c;
}

static int same_config(const gt_config *a, const gt_config *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

static void test_one_worker_identity(void)
{
    gt_mode modes[] = {GT_MODE_HOGWILD, GT_MODE_SYNC, GT_MODE_SSP, GT_MODE_LOCAL, GT_MODE_ALLREDUCE};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        gt_config c = base(modes[i]), before = c;
        gt_recipe r;
        gt_recipe_apply(&c, 1, NTRAIN, &r);
        CHECK_MSG(r.n == 0 && same_config(&c, &before), "mode %d", (int)modes[i]);
    }
    gt_config c = base(GT_MODE_HOGWILD), before;
    c.stripes = 0;
    before = c;
    gt_recipe r;
    gt_recipe_apply(&c, 1, NTRAIN, &r);
    CHECK(r.n == 0 && same_config(&c, &before));
}

static void test_literal_identity(void)
{
    for (int w = 1; w <= GT_MAX_WORKERS; w *= 2) {
        gt_config c = base(w % 4 ? GT_MODE_HOGWILD : GT_MODE_SSP), before;
        c.literal = 1;
        before = c;
        gt_recipe r;
        gt_recipe_apply(&c, w, NTRAIN, &r);
        CHECK_MSG(r.n == 0 && same_config(&c, &before), "workers %d", w);
    }
}

static void test_hogwild_momentum(void)
{
    /* d = (W - 1) / 2, mu' = mu - d / (d + 1) = mu - (W - 1) / (W + 1), never below 0, rounded
     * to two decimals */
    int ws[] = {2, 4, 8, 64};
    double want[] = {0.57, 0.3, 0.12, 0.0};
    for (int i = 0; i < 4; i++) {
        gt_config c = base(GT_MODE_HOGWILD);
        gt_recipe r;
        CHECK_CLOSE(gt_recipe_implicit_momentum(&c, ws[i]), (ws[i] - 1.0) / (ws[i] + 1.0), 1e-12);
        gt_recipe_apply(&c, ws[i], NTRAIN, &r);
        CHECK_CLOSE(c.optim.momentum, want[i], 1e-6);
        CHECK(r.n == (ws[i] >= 4 ? 2 : 1)); /* from 4 workers the lr too (test_hogwild_lr) */
        CHECK_CLOSE(c.optim.lr, ws[i] >= 4 ? 0.075 : 0.05, 1e-7);
        CHECK(c.optim.warmup_epochs == 0);
    }
    gt_config c = base(GT_MODE_HOGWILD);
    gt_recipe r;
    gt_recipe_apply(&c, 4, NTRAIN, &r);
    CHECK_MSG(r.n == 2 && strcmp(r.change[1], "hogwild x4: momentum 0.9 -> 0.3 (asynchrony adds "
                                             "~0.6; --momentum sets it)") == 0, "'%s'", r.change[1]);
    CHECK_MSG(strcmp(r.change[0], "hogwild x4: lr 0.05 -> 0.075 (x1.5 from 4 workers; --lr sets "
                                  "it)") == 0, "'%s'", r.change[0]);
    /* lock-free names itself and takes the same rule */
    c = base(GT_MODE_HOGWILD);
    c.stripes = 0;
    gt_recipe_apply(&c, 2, NTRAIN, &r);
    CHECK(strncmp(r.change[0], "hogwild lock-free x2: momentum 0.9 -> 0.57", 42) == 0);
    /* --overlap: its own step in flight too, d = W / 2, more delay than without */
    int ow[] = {1, 2, 4};
    const char *owant[] = {"hogwild --overlap x1: momentum 0.9 -> 0.57",
                           "hogwild --overlap x2: momentum 0.9 -> 0.4",
                           "hogwild --overlap x4: momentum 0.9 -> 0.23"};
    for (int i = 0; i < 3; i++) {
        c = base(GT_MODE_HOGWILD);
        c.overlap = 1;
        gt_config plain = base(GT_MODE_HOGWILD);
        CHECK(gt_recipe_implicit_momentum(&c, ow[i]) > gt_recipe_implicit_momentum(&plain, ow[i]));
        gt_recipe_apply(&c, ow[i], NTRAIN, &r);
        CHECK_MSG(r.n == 2 && strncmp(r.change[0], owant[i], strlen(owant[i])) == 0, "'%s'",
                  r.n ? r.change[0] : "");
        /* and weight prediction, said on the start-up line */
        CHECK(c.overlap_predict == 1);
        CHECK_MSG(r.n == 2 && strstr(r.change[1], "weight prediction") &&
                      strstr(r.change[1], "--literal"), "'%s'", r.n > 1 ? r.change[1] : "");
    }
    /* No prediction without --overlap, with --literal, or for Adam (its step is not SGD's); an
     * explicit --momentum keeps the prediction. */
    c = base(GT_MODE_HOGWILD);
    gt_recipe_apply(&c, 2, NTRAIN, &r);
    CHECK(c.overlap_predict == 0);
    c = base(GT_MODE_HOGWILD);
    c.overlap = c.literal = 1;
    gt_recipe_apply(&c, 2, NTRAIN, &r);
    CHECK(c.overlap_predict == 0 && r.n == 0);
    c = base(GT_MODE_HOGWILD);
    c.overlap = 1;
    c.optim.kind = GT_OPT_ADAM;
    gt_recipe_apply(&c, 2, NTRAIN, &r);
    CHECK(c.overlap_predict == 0);
    c = base(GT_MODE_HOGWILD);
    c.overlap = 1;
    c.given |= GT_GIVEN_MOMENTUM;
    gt_recipe_apply(&c, 2, NTRAIN, &r);
    CHECK(c.overlap_predict == 1 && r.n == 1 && c.optim.momentum == 0.9f);
}

static void test_sync_and_local(void)
{
    gt_config c = base(GT_MODE_SYNC);
    gt_recipe r;
    gt_recipe_apply(&c, 4, NTRAIN, &r);
    CHECK_CLOSE(c.optim.momentum, 0.9, 1e-7); /* every worker on the same parameters */
    gt_config s = base(GT_MODE_SYNC);
    int steps = gt_recipe_warmup_steps(&s, 4);
    CHECK(steps > 0 && steps > gt_recipe_warmup_steps(&s, 2));
    /* warm-up in epochs: steps updates of 4 x 64 samples out of NTRAIN */
    CHECK_CLOSE(c.optim.warmup_epochs, (double)steps * 4 * 64 / NTRAIN, 1e-6);
    CHECK(r.n == 1 && strstr(r.change[0], "sync x4: lr warm-up over") == r.change[0]);
    c = base(GT_MODE_LOCAL);
    gt_config before = c;
    gt_recipe_apply(&c, 8, NTRAIN, &r);
    CHECK(same_config(&c, &before) && r.n == 0); /* replicas step on their own batch */
}

static void test_warmup_share(void)
{
    /* a small data set: the warm-up is capped at a fifth of the run */
    gt_config c = base(GT_MODE_SYNC);
    c.epochs = 2;
    gt_recipe r;
    gt_recipe_apply(&c, 8, 6400, &r);
    CHECK_CLOSE(c.optim.warmup_epochs, 0.4, 1e-6);
    CHECK(r.n == 1 && strstr(r.change[0], "over 5 updates (0.4 epochs"));
    /* under one update of warm-up: none */
    c = base(GT_MODE_SYNC);
    c.epochs = 1;
    gt_recipe_apply(&c, 8, 640, &r);
    CHECK(c.optim.warmup_epochs == 0 && r.n == 0);
}

static void test_ssp(void)
{
    /* over more than four workers: plain SGD at 0.4 x lr / (1 - momentum), whatever the
     * staleness */
    gt_config c = base(GT_MODE_SSP);
    c.staleness = 2;
    gt_recipe r;
    gt_recipe_apply(&c, 8, NTRAIN, &r);
    CHECK(c.optim.momentum == 0.0f);
    CHECK_CLOSE(c.optim.lr, 0.2, 1e-6);
    CHECK(c.optim.warmup_epochs > 0);
    CHECK(r.n == 2 && strstr(r.change[0], "momentum 0.9 -> 0, lr 0.05 -> 0.2"));
    gt_config c2 = base(GT_MODE_SSP);
    c2.staleness = 4;
    c2.optim.lr = 0.01f;
    c2.optim.momentum = 0.5f;
    gt_recipe_apply(&c2, 5, NTRAIN, &r);
    CHECK(c2.optim.momentum == 0.0f);
    CHECK_CLOSE(c2.optim.lr, 0.008, 1e-6);
    /* two to four workers read fresh parameters: sync's recipe, the warm-up alone, at any
     * staleness */
    for (int s = 1; s <= 4; s++)
        for (int w = 2; w <= 4; w++) {
            gt_config c1 = base(GT_MODE_SSP);
            c1.staleness = s;
            CHECK(gt_recipe_implicit_momentum(&c1, w) == 0);
            gt_recipe_apply(&c1, w, NTRAIN, &r);
            CHECK_MSG(c1.optim.momentum == 0.9f && c1.optim.lr == 0.05f && r.n == 1 &&
                          strstr(r.change[0], "warm-up") && c1.optim.warmup_epochs > 0,
                      "staleness %d, %d workers: %d changes", s, w, r.n);
        }
    /* with --lr given, the momentum rule: d = s (W - 1) / 16 */
    int s_[3] = {2, 4, 2}, w_[3] = {8, 8, 16};
    double m_[3] = {0.43, 0.26, 0.25}; /* more staleness or workers, less explicit momentum */
    for (int i = 0; i < 3; i++) {
        gt_config cl = base(GT_MODE_SSP);
        cl.staleness = s_[i];
        cl.given = GT_GIVEN_LR;
        gt_recipe_apply(&cl, w_[i], NTRAIN, &r);
        CHECK_CLOSE(cl.optim.momentum, m_[i], 1e-6);
        CHECK(cl.optim.lr == 0.05f);
    }
    gt_config c0 = base(GT_MODE_SSP);
    c0.staleness = 0; /* ssp at staleness 0 is sync: no change but the warm-up */
    CHECK(gt_recipe_implicit_momentum(&c0, 4) == 0);
    gt_recipe_apply(&c0, 4, NTRAIN, &r);
    CHECK(c0.optim.momentum == 0.9f && c0.optim.lr == 0.05f && r.n == 1);
}

static void test_given_flags_kept(void)
{
    gt_config c = base(GT_MODE_HOGWILD);
    c.optim.momentum = 0.9f;
    c.given = GT_GIVEN_MOMENTUM;
    gt_recipe r;
    gt_recipe_apply(&c, 8, NTRAIN, &r);
    CHECK(c.optim.momentum == 0.9f && r.n == 0);
    c = base(GT_MODE_SYNC);
    c.given = GT_GIVEN_WARMUP; /* --warmup 0 is a choice too */
    gt_recipe_apply(&c, 8, NTRAIN, &r);
    CHECK(c.optim.warmup_epochs == 0 && r.n == 0);
    c = base(GT_MODE_SSP);
    c.given = GT_GIVEN_MOMENTUM;
    gt_recipe_apply(&c, 4, NTRAIN, &r);
    CHECK(c.optim.momentum == 0.9f && c.optim.warmup_epochs > 0 && r.n == 1);
}

static void test_other_optimizers(void)
{
    gt_config c = base(GT_MODE_HOGWILD);
    c.optim.kind = GT_OPT_ADAM;
    gt_recipe r;
    gt_recipe_apply(&c, 4, NTRAIN, &r);
    CHECK(r.n == 0); /* the momentum rule is for SGD */
    c = base(GT_MODE_HOGWILD);
    c.optim.momentum = 0;
    gt_recipe_apply(&c, 4, NTRAIN, &r);
    CHECK(r.n == 0 && c.optim.momentum == 0);
}

static void test_descriptions_fit(void)
{
    for (int w = 2; w <= GT_MAX_WORKERS; w++) {
        gt_config c = base(GT_MODE_SSP);
        c.staleness = 1000000;
        c.batch = 65536;
        gt_recipe r;
        gt_recipe_apply(&c, w, 1, &r);
        for (int i = 0; i < r.n; i++)
            CHECK(strlen(r.change[i]) < GT_RECIPE_LEN - 1);
        CHECK(c.optim.momentum >= 0);
    }
}

/* The residual built-ins' recipe fills what the command line left open, and nothing else; other
 * models keep the general defaults. The moving average is on where the rate stays constant and
 * --ema was not given. */
static void test_model_recipe(void)
{
    char note[256];
    gt_config c = base(GT_MODE_HOGWILD), plain = c;
    gt_recipe_model(&c, 0, note, sizeof note);
    CHECK(c.ema == GT_RECIPE_EMA && note[0] == '\0');
    c.ema = plain.ema;
    CHECK(same_config(&c, &plain));
    c.given = GT_GIVEN_EMA; /* --ema 0 */
    gt_recipe_model(&c, 0, note, sizeof note);
    CHECK(c.ema == 0.0f);
    c.given = 0;
    c.optim.schedule = GT_SCHED_STEP;
    gt_recipe_model(&c, 0, note, sizeof note);
    CHECK(c.ema == 0.0f);
    c = plain;
    snprintf(c.model, sizeof c.model, "resnet18");
    c.epochs = 10; /* the general default, not given: the recipe's length replaces it */
    gt_recipe_model(&c, 0, note, sizeof note);
    CHECK(c.epochs == GT_RECIPE_RESNET_EPOCHS && strstr(note, "25 epochs") != NULL);
    /* the cosine decays over the recipe's length, not the length the parser saw */
    CHECK(c.optim.total_epochs == (float)GT_RECIPE_RESNET_EPOCHS);
    CHECK(gt_optim_lr(&c.optim, 12.0) > 0.5 * c.optim.lr && gt_optim_lr(&c.optim, 24.0) > 0.0f);
    CHECK(c.batch == 128 && c.optim.lr == 0.05f && c.optim.nesterov && c.optim.momentum == 0.9f &&
          c.optim.weight_decay == 5e-4f && c.optim.schedule == GT_SCHED_COSINE &&
          c.optim.warmup_epochs == 1.0f && strstr(note, "resnet18") != NULL &&
          c.augment.pad == 2 && c.augment.flip && c.normalize == GT_NORMALIZE_AUTO &&
          c.ema == 0.0f); /* CPU workers (hogwild) with the cosine: no moving average */
    c = base(GT_MODE_SYNC);
    snprintf(c.model, sizeof c.model, "resnet20");
    c.batch = 256;
    c.optim.weight_decay = 0.0f;
    c.epochs = 3;
    c.normalize = GT_NORMALIZE_NONE;
    c.given = GT_GIVEN_BATCH | GT_GIVEN_WEIGHT_DECAY | GT_GIVEN_AUGMENT | GT_GIVEN_NORMALIZE |
              GT_GIVEN_EPOCHS;
    gt_recipe_model(&c, 0, note, sizeof note);
    CHECK(c.epochs == 3 && c.batch == 256 && c.optim.lr == 0.1f && c.optim.weight_decay == 0.0f &&
          c.augment.pad == 0 && !c.augment.flip && c.normalize == GT_NORMALIZE_NONE);
    /* The mode: allreduce on GPUs where no mode or option of one was given (the note says so);
     * on CPU workers, with a mode's option, or with --on-nan skip the mode stays. */
    c = plain;
    snprintf(c.model, sizeof c.model, "resnet18");
    gt_recipe_model(&c, 0, note, sizeof note);
    CHECK(c.mode == GT_MODE_HOGWILD && strstr(note, "allreduce") == NULL);
    c = plain;
    snprintf(c.model, sizeof c.model, "resnet20");
    gt_recipe_model(&c, 4, note, sizeof note);
    CHECK(c.mode == GT_MODE_ALLREDUCE && c.batch == 128 && c.optim.lr == 0.05f &&
          strstr(note, "resnet20's recipe: mode allreduce, ") == note);
    /* under allreduce the short moving average, unless --ema was given */
    CHECK(c.ema == GT_RECIPE_RESNET_EMA && strstr(note, "moving average 0.98 (") != NULL);
    c = plain;
    snprintf(c.model, sizeof c.model, "resnet20");
    c.ema = 0.0f;
    c.given = GT_GIVEN_EMA; /* --ema 0 */
    gt_recipe_model(&c, 4, note, sizeof note);
    CHECK(c.ema == 0.0f && strstr(note, "moving average") == NULL);
    /* one GPU alone: batch GT_RECIPE_RESNET_BATCH_ONE, the lr after it; a given batch stays */
    c = plain;
    snprintf(c.model, sizeof c.model, "resnet18");
    gt_recipe_model(&c, 1, note, sizeof note);
    CHECK(c.mode == GT_MODE_ALLREDUCE && c.batch == GT_RECIPE_RESNET_BATCH_ONE &&
          c.optim.lr == 0.1f && strstr(note, "batch 256") != NULL);
    c = plain;
    snprintf(c.model, sizeof c.model, "resnet18");
    c.batch = 64;
    c.given = GT_GIVEN_BATCH;
    gt_recipe_model(&c, 1, note, sizeof note);
    CHECK(c.batch == 64 && c.optim.lr == 0.025f);
    c = plain;
    snprintf(c.model, sizeof c.model, "resnet18");
    c.given = GT_GIVEN_MODE; /* --stripes 0, say */
    gt_recipe_model(&c, 1, note, sizeof note);
    CHECK(c.mode == GT_MODE_HOGWILD && strstr(note, "allreduce") == NULL && c.ema == 0.0f);
    c = base(GT_MODE_SSP);
    snprintf(c.model, sizeof c.model, "resnet18");
    c.given = GT_GIVEN_MODE;
    gt_recipe_model(&c, 1, note, sizeof note);
    CHECK(c.mode == GT_MODE_SSP);
    c = plain;
    snprintf(c.model, sizeof c.model, "resnet18");
    c.on_nan = GT_NAN_SKIP;
    c.given = GT_GIVEN_ON_NAN;
    gt_recipe_model(&c, 1, note, sizeof note);
    CHECK(c.mode == GT_MODE_HOGWILD);
    c = plain; /* other models keep the mode on GPUs too */
    gt_recipe_model(&c, 1, note, sizeof note);
    CHECK(c.mode == GT_MODE_HOGWILD);
}

/* The residual networks' lr follows the samples of a round of every worker's step: W x the
 * recipe's in every mode over W workers, the warm-up an epoch for each 0.1 of it (at most a fifth
 * of the run); --lr, --warmup and --literal as given; other models' lr is not scaled. */
static void test_resnet_lr(void)
{
    char note[256];
    struct {
        gt_mode mode;
        int workers;
        float lr;
    } rows[] = {{GT_MODE_SYNC, 4, 0.2f},   {GT_MODE_ALLREDUCE, 2, 0.1f}, {GT_MODE_SSP, 4, 0.2f},
                {GT_MODE_HOGWILD, 4, 0.2f},  {GT_MODE_LOCAL, 2, 0.1f},    {GT_MODE_SYNC, 1, 0.05f}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        gt_config c = base(rows[i].mode);
        snprintf(c.model, sizeof c.model, "resnet18");
        gt_recipe_model(&c, 0, note, sizeof note);
        gt_recipe r;
        gt_recipe_apply(&c, rows[i].workers, 60000, &r);
        CHECK_MSG(c.optim.lr == rows[i].lr, "%s x%d: lr %g, want %g", gt_mode_name(rows[i].mode),
                  rows[i].workers, (double)c.optim.lr, (double)rows[i].lr);
        int noted = r.n > 0 && strstr(r.change[0], "lr 0.05 -> ") != NULL;
        CHECK(noted == (rows[i].lr != 0.05f));
        float warm = rows[i].lr > 0.15f ? 2.0f : 1.0f;
        CHECK_MSG(c.optim.warmup_epochs == warm, "%s x%d: warm-up %g epochs, want %g",
                  gt_mode_name(rows[i].mode), rows[i].workers, (double)c.optim.warmup_epochs,
                  (double)warm);
        CHECK((warm > 1.0f) == (r.n > 1 && strstr(r.change[1], "lr warm-up 1 -> 2 epochs") != NULL));
        for (int k = 0; k < r.n; k++)
            CHECK(strlen(r.change[k]) < GT_RECIPE_LEN - 1);
    }
    gt_config c = base(GT_MODE_SYNC), lit;
    snprintf(c.model, sizeof c.model, "resnet20");
    gt_recipe_model(&c, 0, note, sizeof note);
    lit = c;
    lit.literal = 1;
    gt_recipe r;
    gt_recipe_apply(&lit, 4, 60000, &r);
    CHECK(lit.optim.lr == 0.05f && r.n == 0);
    gt_config w = c, s = c;
    w.optim.warmup_epochs = 0.5f; /* --warmup 0.5 */
    w.given |= GT_GIVEN_WARMUP;
    gt_recipe_apply(&w, 4, 60000, &r);
    CHECK(w.optim.lr == 0.2f && w.optim.warmup_epochs == 0.5f);
    s.epochs = 8; /* a fifth of 8 epochs: 1.6 */
    gt_recipe_apply(&s, 8, 60000, &r);
    CHECK_MSG(s.optim.lr == 0.4f && s.optim.warmup_epochs == 1.6f, "8 epochs x8: warm-up %g",
              (double)s.optim.warmup_epochs);
    c.optim.lr = 0.3f;
    c.given |= GT_GIVEN_LR;
    gt_recipe_apply(&c, 4, 60000, &r);
    CHECK(c.optim.lr == 0.3f && c.optim.warmup_epochs == 1.0f);
    gt_config l = base(GT_MODE_SYNC); /* lenet5: the lr of one worker */
    gt_recipe_model(&l, 0, note, sizeof note);
    gt_recipe_apply(&l, 4, 60000, &r);
    CHECK(l.optim.lr == 0.05f);
}

/* hogwild from 4 workers: lr x1.5 with the stripes, x2 lock-free, beside the momentum rule; not
 * at 2 workers, with --overlap, a given --lr or --momentum, or on the residual networks (their
 * own rule). */
static void test_hogwild_lr(void)
{
    struct {
        int workers, stripes, overlap;
        float lr;
    } rows[] = {{4, -1, 0, 0.075f}, {8, 16, 0, 0.075f}, {4, 0, 0, 0.1f},
                {2, -1, 0, 0.05f},  {2, 0, 0, 0.05f},   {4, -1, 1, 0.05f}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        gt_config c = base(GT_MODE_HOGWILD);
        c.stripes = rows[i].stripes;
        c.overlap = rows[i].overlap;
        gt_recipe r;
        gt_recipe_apply(&c, rows[i].workers, NTRAIN, &r);
        CHECK_MSG(c.optim.lr == rows[i].lr, "x%d stripes %d overlap %d: lr %g, want %g",
                  rows[i].workers, rows[i].stripes, rows[i].overlap, (double)c.optim.lr,
                  (double)rows[i].lr);
        int noted = r.n > 0 && strstr(r.change[0], "lr 0.05 -> ") != NULL;
        CHECK(noted == (rows[i].lr != 0.05f));
        CHECK(c.optim.momentum < 0.9f); /* the momentum rule still ran */
    }
    gt_config c = base(GT_MODE_HOGWILD);
    c.optim.lr = 0.02f;
    c.given = GT_GIVEN_LR;
    gt_recipe r;
    gt_recipe_apply(&c, 4, NTRAIN, &r);
    CHECK(c.optim.lr == 0.02f && r.n == 1); /* the momentum rule alone */
    c = base(GT_MODE_SYNC);
    gt_recipe_apply(&c, 4, NTRAIN, &r);
    CHECK(c.optim.lr == 0.05f);
}

int main(void)
{
    test_model_recipe();
    test_resnet_lr();
    test_hogwild_lr();
    test_one_worker_identity();
    test_literal_identity();
    test_hogwild_momentum();
    test_sync_and_local();
    test_ssp();
    test_warmup_share();
    test_given_flags_kept();
    test_other_optimizers();
    test_descriptions_fit();
    TEST_DONE();
}
