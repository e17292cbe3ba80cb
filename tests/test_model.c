/* test_model.c - built-in models against the PyTorch reference layouts, spec parsing and its
 * canonical round trip, @FILE specs, seeded initialisation, and every kind of bad spec. */
#include "gputrain/cpu_net.h"
#include "gputrain/layer_kinds.h"
#include "gputrain/model.h"
#include "test_util.h"

#include <unistd.h>

static size_t conv_params(size_t o, size_t i, size_t k) { return o * i * k * k + o; }
static size_t fc_params(size_t out, size_t in) { return out * in + out; }

typedef struct want_tensor {
    const char *name;
    int rank;
    int shape[4];
} want_tensor;

/* Names, shapes and gap-free offsets agree with the expected tensors: in their order, or with
 * batch norm the weights that decay first (model.h ndecay), then the rest, each in order. */
static void check_tensors_only(const gt_model *m, const want_tensor *want, int n)
{
    CHECK(m->ntensors == n);
    size_t off = 0, tail = m->ndecay;
    for (int i = 0; i < n && i < m->ntensors; i++) {
        const gt_tensor_info *t = &m->tensors[i];
        size_t len = 1;
        CHECK_MSG(strcmp(t->name, want[i].name) == 0, "tensor %d is %s, want %s", i, t->name,
                  want[i].name);
        CHECK_MSG(t->rank == want[i].rank, "%s rank %d", t->name, t->rank);
        for (int d = 0; d < want[i].rank; d++) {
            CHECK_MSG(t->shape[d] == want[i].shape[d], "%s dim %d is %d, want %d", t->name, d,
                      t->shape[d], want[i].shape[d]);
            len *= (size_t)want[i].shape[d];
        }
        int decays = m->ndecay == m->nparams || (t->rank >= 2 && strstr(t->name, ".weight"));
        size_t *at = decays ? &off : &tail;
        CHECK_MSG(t->len == len && t->offset == *at, "%s len %zu offset %zu", t->name, t->len,
                  t->offset);
        CHECK(gt_model_tensor(m, want[i].name) == t);
        *at += len;
    }
    CHECK(m->ndecay == off && m->nparams == (m->ndecay == m->nparams ? off : tail));
}

/* And the layers' own ranges agree with them. */
static void check_tensors(const gt_model *m, const want_tensor *want, int n)
{
    check_tensors_only(m, want, n);
    int ti = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const gt_layer *l = &m->layers[i];
        CHECK(l->in_len == (size_t)l->in_c * l->in_h * l->in_w);
        CHECK(l->out_len == (size_t)l->out_c * l->out_h * l->out_w);
        if (i > 0)
            CHECK(l->in_c == l[-1].out_c && l->in_h == l[-1].out_h && l->in_w == l[-1].out_w);
        if (l->kind != GT_CONV && l->kind != GT_LINEAR) {
            CHECK(l->name[0] == 0 && l->w_len == 0 && l->b_len == 0);
            continue;
        }
        CHECK(ti + 1 < m->ntensors);
        if (ti + 1 >= m->ntensors)
            return;
        CHECK(l->w_off == m->tensors[ti].offset && l->w_len == m->tensors[ti].len);
        CHECK(l->b_off == m->tensors[ti + 1].offset && l->b_len == m->tensors[ti + 1].len);
        ti += 2;
    }
}

static void test_lenet5(void)
{
    gt_model m;
    gt_err e = {{0}};
    CHECK(gt_model_build("lenet5", 1, 28, 28, 10, &m, &e) == 0);
    CHECK(m.nparams == 44426);
    CHECK(strcmp(m.name, "lenet5") == 0);
    CHECK(strcmp(m.spec, "init:torch conv:6:5:0 relu avgpool:2 conv:16:5:0 relu avgpool:2 fc:120 "
                         "relu fc:84 relu fc:10") == 0);
    CHECK(m.init == GT_INIT_TORCH && m.nlayers == 11 && m.nclasses == 10);
    const want_tensor want[] = {
        {"c1.weight", 4, {6, 1, 5, 5}}, {"c1.bias", 1, {6}},   {"c2.weight", 4, {16, 6, 5, 5}},
        {"c2.bias", 1, {16}},           {"f1.weight", 2, {120, 256}}, {"f1.bias", 1, {120}},
        {"f2.weight", 2, {84, 120}},    {"f2.bias", 1, {84}},  {"f3.weight", 2, {10, 84}},
        {"f3.bias", 1, {10}},
    };
    check_tensors(&m, want, 10);
    const gt_layer *l = m.layers;
    CHECK(l[0].kind == GT_CONV && strcmp(l[0].name, "c1") == 0 && l[0].k == 5 && l[0].pad == 0);
    CHECK(l[0].out_c == 6 && l[0].out_h == 24 && l[0].out_w == 24);
    CHECK(l[2].kind == GT_AVGPOOL && l[2].k == 2 && l[2].out_h == 12);
    CHECK(l[3].out_c == 16 && l[3].out_h == 8 && strcmp(l[3].name, "c2") == 0);
    CHECK(l[6].kind == GT_LINEAR && l[6].in_len == 256 && l[6].out_c == 120 && l[6].out_h == 1);
    CHECK(l[8].kind == GT_LINEAR && strcmp(l[8].name, "f2") == 0 && l[9].kind == GT_RELU);
    CHECK(strcmp(l[10].name, "f3") == 0 && l[10].out_len == 10);
    CHECK(m.max_act == 6 * 24 * 24);
    CHECK(gt_model_tensor(&m, "f4.weight") == NULL && gt_model_tensor(&m, NULL) == NULL);

    /* A built-in follows the dataset's shape and class count. */
    CHECK(gt_model_build("lenet5", 3, 32, 32, 7, &m, &e) == 0);
    const want_tensor want2[] = {
        {"c1.weight", 4, {6, 3, 5, 5}}, {"c1.bias", 1, {6}},   {"c2.weight", 4, {16, 6, 5, 5}},
        {"c2.bias", 1, {16}},           {"f1.weight", 2, {120, 400}}, {"f1.bias", 1, {120}},
        {"f2.weight", 2, {84, 120}},    {"f2.bias", 1, {84}},  {"f3.weight", 2, {7, 84}},
        {"f3.bias", 1, {7}},
    };
    check_tensors(&m, want2, 10);
    CHECK(strstr(m.spec, " fc:7") != NULL && m.max_act == 6 * 28 * 28);
}

static void test_other_builtins(void)
{
    gt_model m;
    gt_err e = {{0}};
    CHECK(gt_model_build("lenet5-classic", 1, 28, 28, 10, &m, &e) == 0);
    CHECK(m.init == GT_INIT_XAVIER && strcmp(m.name, "lenet5-classic") == 0);
    CHECK(strncmp(m.spec, "init:xavier conv:6:5:2 sigmoid avgpool:2 conv:16:5:0 sigmoid", 60) == 0);
    /* 28 -pad 2-> 28 -> 14 -> 10 -> 5: 16*5*5 = 400 features */
    CHECK(m.nparams == conv_params(6, 1, 5) + conv_params(16, 6, 5) + fc_params(120, 400) +
                           fc_params(84, 120) + fc_params(10, 84));
    CHECK(m.layers[0].out_h == 28 && m.layers[1].kind == GT_SIGMOID);
    CHECK(m.max_act == 6 * 28 * 28);

    CHECK(gt_model_build("mlp", 1, 28, 28, 10, &m, &e) == 0);
    CHECK(m.nparams == fc_params(256, 784) + fc_params(128, 256) + fc_params(10, 128));
    const want_tensor mlp[] = {
        {"f1.weight", 2, {256, 784}}, {"f1.bias", 1, {256}}, {"f2.weight", 2, {128, 256}},
        {"f2.bias", 1, {128}},        {"f3.weight", 2, {10, 128}}, {"f3.bias", 1, {10}},
    };
    check_tensors(&m, mlp, 6);
    CHECK(m.max_act == 784);

    CHECK(gt_model_build("cnn-wide", 1, 28, 28, 10, &m, &e) == 0);
    /* 28 -pad 2-> 28 -> 14 -pad 2-> 14 -> 7: 64*7*7 = 3136 features */
    CHECK(m.nparams == conv_params(32, 1, 5) + conv_params(64, 32, 5) + fc_params(1024, 3136) +
                           fc_params(10, 1024));
    const want_tensor wide[] = {
        {"c1.weight", 4, {32, 1, 5, 5}}, {"c1.bias", 1, {32}},  {"c2.weight", 4, {64, 32, 5, 5}},
        {"c2.bias", 1, {64}},            {"f1.weight", 2, {1024, 3136}}, {"f1.bias", 1, {1024}},
        {"f2.weight", 2, {10, 1024}},    {"f2.bias", 1, {10}},
    };
    check_tensors(&m, wide, 8);
    CHECK(m.layers[2].kind == GT_MAXPOOL && m.layers[8].kind == GT_DROPOUT);
    CHECK(m.layers[8].p == 0.4f && strstr(m.spec, " dropout:0.4 fc:10") != NULL);
    CHECK(m.max_act == 32 * 28 * 28);

    CHECK(gt_model_builtin_spec("mlp") && strcmp(gt_model_builtin_spec("mlp"),
                                                  "fc:256 relu fc:128 relu fc:10") == 0);
    CHECK(gt_model_builtin_spec("lenet") == NULL && gt_model_builtin_spec(NULL) == NULL);
}

/* Same layers, tensors, buffers and sizes; the name may differ (a rebuilt spec is "custom"). */
static int same_model(const gt_model *a, const gt_model *b)
{
    return a->nlayers == b->nlayers && a->ntensors == b->ntensors && a->init == b->init &&
           a->nparams == b->nparams && a->max_act == b->max_act && a->nbuffers == b->nbuffers &&
           a->nbuffer_tensors == b->nbuffer_tensors &&
           memcmp(a->layers, b->layers, sizeof a->layers) == 0 &&
           memcmp(a->tensors, b->tensors, sizeof a->tensors) == 0 &&
           memcmp(a->buffer_tensors, b->buffer_tensors, sizeof a->buffer_tensors) == 0 &&
           strcmp(a->spec, b->spec) == 0;
}

static void test_round_trip(void)
{
    const char *specs[] = {
        "lenet5", "lenet5-classic", "mlp", "cnn-wide",
        ("conv:8:3:1,tanh,maxpool:2\n# a comment, with: colons\nconv:4:3 relu # more\n"
         "dropout:0.25 fc:33 sigmoid dropout:0 fc:10"),
        "  fc:10  init:xavier ",
        "avgpool:1 fc:16 conv:4:1 dropout:.1 fc:010",
        "conv:4:3:1:1:nobias bn relu res[conv:4:3:1:1:nobias bn relu|conv:4:1:0:nobias bn]relu "
        "res[ res[ tanh ] conv:8:3:1:2 | conv:8:1:0:2:nobias ] gap fc:10 init:kaiming",
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        gt_model a, b;
        gt_err e = {{0}};
        CHECK_MSG(gt_model_build(specs[i], 1, 28, 28, 10, &a, &e) == 0, "%s: %s", specs[i], e.msg);
        CHECK_MSG(gt_model_build(a.spec, 1, 28, 28, 10, &b, &e) == 0, "%s: %s", a.spec, e.msg);
        CHECK_MSG(same_model(&a, &b), "%s does not rebuild the same model", a.spec);
        /* A built-in's spec, written back and rebuilt, is named after it; others are custom. */
        CHECK_MSG(strcmp(b.name, i < 4 ? specs[i] : "custom") == 0, "%s rebuilt as %s", specs[i],
                  b.name);
        CHECK(strchr(a.spec, '#') == NULL && strstr(a.spec, "  ") == NULL);
        CHECK(strncmp(a.spec, "init:", 5) == 0);
    }
    gt_model m;
    gt_err e = {{0}};
    CHECK(gt_model_build(specs[4], 1, 28, 28, 10, &m, &e) == 0);
    CHECK(strcmp(m.spec, "init:torch conv:8:3:1 tanh maxpool:2 conv:4:3:0 relu dropout:0.25 "
                         "fc:33 sigmoid dropout:0 fc:10") == 0);
    CHECK(strcmp(m.name, "custom") == 0 && m.layers[5].p == 0.25f);
    CHECK(gt_model_build(specs[5], 1, 28, 28, 10, &m, &e) == 0);
    CHECK(strcmp(m.spec, "init:xavier fc:10") == 0 && m.init == GT_INIT_XAVIER);
    CHECK(m.nbuffers == 0 && m.nbuffer_tensors == 0);
    CHECK(gt_model_build(specs[7], 1, 28, 28, 10, &m, &e) == 0);
    CHECK_MSG(strcmp(m.spec, "init:kaiming conv:4:3:1:nobias bn relu res[ conv:4:3:1:nobias bn "
                             "relu | conv:4:1:0:nobias bn ] relu res[ res[ tanh ] conv:8:3:1:2 | "
                             "conv:8:1:0:2:nobias ] gap fc:10") == 0, "%s", m.spec);
    CHECK(m.init == GT_INIT_KAIMING && m.nlayers == 22);
    /* Block markers point at each other; | gives the block's input shape again. */
    CHECK(m.layers[3].kind == GT_RES_BEGIN && m.layers[3].peer == 10);
    CHECK(m.layers[7].kind == GT_RES_SPLIT && m.layers[7].peer == 3);
    CHECK(m.layers[10].kind == GT_RES_END && m.layers[10].peer == 7);
    CHECK(m.layers[12].peer == 19 && m.layers[13].peer == 15 && m.layers[15].peer == 13);
    CHECK(m.layers[17].peer == 12 && m.layers[19].peer == 17);
    CHECK(m.layers[17].out_c == 4 && m.layers[17].out_h == 28 && m.layers[16].out_h == 14);
    CHECK(m.layers[19].out_c == 8 && m.layers[19].out_h == 14 && m.layers[20].out_h == 1);
    CHECK(m.layers[16].stride == 2 && m.layers[16].b_len == 8 && m.layers[18].b_len == 0);

    /* Batch norm's parameters are b1.weight and b1.bias; its statistics are buffers. */
    CHECK(gt_model_build("conv:4:3:1:1:nobias bn relu conv:3:1 bn fc:10", 2, 5, 5, 10, &m, &e) == 0);
    const want_tensor params[] = {
        {"c1.weight", 4, {4, 2, 3, 3}}, {"b1.weight", 1, {4}}, {"b1.bias", 1, {4}},
        {"c2.weight", 4, {3, 4, 1, 1}}, {"c2.bias", 1, {3}},   {"b2.weight", 1, {3}},
        {"b2.bias", 1, {3}},            {"f1.weight", 2, {10, 75}}, {"f1.bias", 1, {10}},
    };
    CHECK(m.ntensors == 9);
    check_tensors_only(&m, params, 9); /* c1, c2, f1 weights first; biases, gamma, beta after */
    CHECK(m.ndecay == 72 + 12 + 750);
    size_t off = m.nparams;
    CHECK(m.nparams == off && off == 72 + 8 + 12 + 3 + 6 + 750 + 10);
    const char *bufs[] = {"b1.running_mean", "b1.running_var", "b1.num_batches_tracked",
                          "b2.running_mean", "b2.running_var", "b2.num_batches_tracked"};
    const size_t buf_off[] = {0, 4, 8, 9, 12, 15}, buf_len[] = {4, 4, 1, 3, 3, 1};
    CHECK(m.nbuffer_tensors == 6 && m.nbuffers == 16);
    for (int i = 0; i < 6; i++) {
        const gt_tensor_info *t = gt_model_buffer(&m, bufs[i]);
        CHECK_MSG(t == &m.buffer_tensors[i] && t->offset == buf_off[i] && t->len == buf_len[i] &&
                  t->rank == (buf_len[i] == 1 ? 0 : 1), "%s", bufs[i]);
        CHECK(gt_model_tensor(&m, bufs[i]) == NULL);
    }
    CHECK(gt_model_buffer(&m, "b1.weight") == NULL && gt_model_buffer(&m, NULL) == NULL);
    CHECK(m.layers[1].s_off == 0 && m.layers[1].s_len == 9 && m.layers[4].s_off == 9);

    /* Exactly GT_MAX_LAYERS layers is allowed. */
    static char spec[GT_MAX_LAYERS * 5 + 8];
    for (int i = 0; i < GT_MAX_LAYERS - 1; i++)
        strcat(spec, "relu ");
    strcat(spec, "fc:10");
    CHECK(gt_model_build(spec, 1, 28, 28, 10, &m, &e) == 0 && m.nlayers == GT_MAX_LAYERS);
}

static void test_spec_file(void)
{
    char path[] = "/tmp/gt_test_model_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    const char *text = "# LeNet by hand\nconv:6:5, relu, avgpool:2\nconv:16:5 relu avgpool:2\n"
                       "fc:120 relu fc:84 relu\nfc:10\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    char arg[64];
    snprintf(arg, sizeof arg, "@%s", path);
    gt_model a, b;
    gt_err e = {{0}};
    CHECK_MSG(gt_model_build(arg, 1, 28, 28, 10, &a, &e) == 0, "%s", e.msg);
    CHECK(gt_model_build("lenet5", 1, 28, 28, 10, &b, &e) == 0);
    CHECK(strcmp(a.name, "lenet5") == 0 && a.nparams == 44426); /* LeNet written out is lenet5 */
    CHECK(strcmp(a.spec, b.spec) == 0 && memcmp(a.tensors, b.tensors, sizeof a.tensors) == 0);

    /* Errors inside the file name the file and the token. */
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("conv:6:5\nconv:6:q fc:10\n", f);
        fclose(f);
    }
    CHECK(gt_model_build(arg, 1, 28, 28, 10, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, path) && strstr(e.msg, "layer 2 'conv:6:q'"), "%s", e.msg);
    unlink(path);
    CHECK(gt_model_build(arg, 1, 28, 28, 10, &a, &e) == -1);
    CHECK_MSG(strstr(e.msg, path) != NULL, "%s", e.msg);
}

/* A checkpoint's spec (gt_model_build_spec) is spec text: "@FILE" and built-in names are layer
 * tokens there, refused without opening any file; errors begin with the caller's prefix. */
static void test_spec_text_only(void)
{
    char path[] = "/tmp/gt_test_model_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *text = "fc:10\n";
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    if (fd >= 0)
        close(fd);
    char arg[64];
    snprintf(arg, sizeof arg, "@%s", path);
    gt_model m;
    gt_err e = {{0}};
    CHECK_MSG(gt_model_build(arg, 1, 28, 28, 10, &m, &e) == 0, "%s", e.msg); /* --model may */
    CHECK(gt_model_build_spec("checkpoint c.st: model_spec", arg, 1, 28, 28, 10, &m, &e) == -1);
    CHECK_MSG(strncmp(e.msg, "checkpoint c.st: model_spec: layer 1 '@", 39) == 0 &&
              strstr(e.msg, "unknown layer"), "%s", e.msg);
    CHECK(gt_model_build_spec("ck", "@/etc/passwd", 1, 28, 28, 10, &m, &e) == -1);
    CHECK_MSG(strstr(e.msg, "'@/etc/passwd': unknown layer") && !strstr(e.msg, "root"), "%s",
              e.msg);
    CHECK(gt_model_build_spec("ck", "lenet5", 1, 28, 28, 10, &m, &e) == -1);
    CHECK(gt_model_build_spec("ck", "fc:10", 1, 28, 28, 70000, &m, &e) == -1);
    CHECK_MSG(strstr(e.msg, "ck: bad class count 70000 (1..65536)"), "%s", e.msg);
    unlink(path);

    /* The canonical spec of a built-in is named after it, for any class count it is built for. */
    gt_model b;
    CHECK(gt_model_build("cnn-wide", 3, 32, 32, 300, &b, &e) == 0);
    CHECK_MSG(gt_model_build_spec("ck", b.spec, 3, 32, 32, 300, &m, &e) == 0, "%s", e.msg);
    CHECK(strcmp(m.name, "cnn-wide") == 0 && strcmp(m.spec, b.spec) == 0);
    CHECK(gt_model_build_spec("ck", "fc:300", 3, 32, 32, 300, &m, &e) == 0);
    CHECK(strcmp(m.name, "custom") == 0);
}

static void check_bounds(const gt_model *m, const float *w, int xavier)
{
    for (int i = 0; i < m->nlayers; i++) {
        const gt_layer *l = &m->layers[i];
        if (l->kind != GT_CONV && l->kind != GT_LINEAR)
            continue;
        double kk = l->kind == GT_CONV ? l->k * l->k : 1;
        double fan_in = l->kind == GT_CONV ? l->in_c * kk : (double)l->in_len;
        double fan_out = l->out_c * kk;
        double wb = xavier ? sqrt(6 / (fan_in + fan_out)) : 1 / sqrt(fan_in);
        double bb = xavier ? 0 : 1 / sqrt(fan_in), wmax = 0, bmax = 0, wsum = 0;
        for (size_t j = 0; j < l->w_len; j++) {
            wmax = fmax(wmax, fabs(w[l->w_off + j]));
            wsum += w[l->w_off + j];
        }
        for (size_t j = 0; j < l->b_len; j++)
            bmax = fmax(bmax, fabs(w[l->b_off + j]));
        CHECK_MSG(wmax <= wb * (1 + 1e-6) && wmax > 0.9 * wb, "%s weight max %g, bound %g",
                  l->name, wmax, wb);
        CHECK_MSG(fabs(wsum / l->w_len) < 0.2 * wb, "%s weight mean %g", l->name, wsum / l->w_len);
        if (xavier)
            CHECK_MSG(bmax == 0, "%s bias not zero", l->name);
        else
            CHECK_MSG(bmax <= bb * (1 + 1e-6) && bmax > 0.2 * bb, "%s bias max %g, bound %g",
                      l->name, bmax, bb);
    }
}

static void test_init(void)
{
    const char *names[] = {"lenet5", "lenet5-classic"};
    for (int k = 0; k < 2; k++) {
        gt_model m;
        gt_err e = {{0}};
        CHECK(gt_model_build(names[k], 1, 28, 28, 10, &m, &e) == 0);
        float *a = calloc(m.nparams, sizeof *a), *b = calloc(m.nparams, sizeof *b);
        CHECK(a && b);
        if (!a || !b) {
            free(a);
            free(b);
            return;
        }
        gt_model_init_params(&m, a, 42);
        gt_model_init_params(&m, b, 42);
        CHECK(memcmp(a, b, m.nparams * sizeof *a) == 0);
        check_bounds(&m, a, k == 1);
        gt_model_init_params(&m, b, 43);
        size_t same = 0;
        for (size_t i = 0; i < m.nparams; i++)
            same += a[i] == b[i];
        /* Only xavier's zero biases may coincide. */
        CHECK_MSG(same <= (k == 1 ? 6 + 16 + 120 + 84 + 10 : 0), "%zu values equal", same);
        free(a);
        free(b);
    }
}

/* ---- the residual built-ins against the PyTorch reference ---------------------------------------- */

typedef struct resnet_ref {
    const char *name;
    int stages, blocks, width0;
    size_t params_3x32x32;
} resnet_ref;

static const resnet_ref resnets[] = {
    {"resnet20", 3, 3, 16, 272474},
    {"resnet18", 4, 2, 64, 11173962},
};

/* The reference's state_dict in its order: the parameters (want) and the buffers (bufs) apart. */
typedef struct state_list {
    want_tensor want[GT_MAX_TENSORS], bufs[GT_MAX_BUFFER_TENSORS];
    char names[GT_MAX_TENSORS + GT_MAX_BUFFER_TENSORS][64];
    int n, nbufs;
} state_list;

static void state_add(state_list *sl, int buffer, const char *module, const char *what, int rank,
                      int d0, int d1, int d2, int d3)
{
    char *name = sl->names[sl->n + sl->nbufs];
    snprintf(name, 64, "%s.%s", module, what);
    want_tensor t = {name, rank, {d0, d1, d2, d3}};
    if (buffer)
        sl->bufs[sl->nbufs++] = t;
    else
        sl->want[sl->n++] = t;
}

static void state_conv_bn(state_list *sl, const char *conv, const char *bn, int o, int i, int k)
{
    state_add(sl, 0, conv, "weight", 4, o, i, k, k);
    state_add(sl, 0, bn, "weight", 1, o, 0, 0, 0);
    state_add(sl, 0, bn, "bias", 1, o, 0, 0, 0);
    state_add(sl, 1, bn, "running_mean", 1, o, 0, 0, 0);
    state_add(sl, 1, bn, "running_var", 1, o, 0, 0, 0);
    state_add(sl, 1, bn, "num_batches_tracked", 0, 0, 0, 0, 0);
}

static void resnet_state(const resnet_ref *r, int in_c, int nclasses, state_list *sl)
{
    char a[32], b[32];
    memset(sl, 0, sizeof *sl);
    state_conv_bn(sl, "stem.0", "stem.1", r->width0, in_c, 3);
    int c = r->width0, n = 0;
    for (int st = 0; st < r->stages; st++)
        for (int bl = 0; bl < r->blocks; bl++, n++) {
            int out = r->width0 << st, in = c;
            snprintf(a, sizeof a, "layers.%d.c1", n), snprintf(b, sizeof b, "layers.%d.b1", n);
            state_conv_bn(sl, a, b, out, in, 3);
            snprintf(a, sizeof a, "layers.%d.c2", n), snprintf(b, sizeof b, "layers.%d.b2", n);
            state_conv_bn(sl, a, b, out, out, 3);
            if (in != out || (st > 0 && bl == 0)) {
                snprintf(a, sizeof a, "layers.%d.short.0", n);
                snprintf(b, sizeof b, "layers.%d.short.1", n);
                state_conv_bn(sl, a, b, out, in, 1);
            }
            c = out;
        }
    state_add(sl, 0, "fc", "weight", 2, nclasses, c, 0, 0);
    state_add(sl, 0, "fc", "bias", 1, nclasses, 0, 0, 0);
}

static void check_buffers(const gt_model *m, const want_tensor *want, int n)
{
    CHECK(m->nbuffer_tensors == n);
    size_t off = 0;
    for (int i = 0; i < n && i < m->nbuffer_tensors; i++) {
        const gt_tensor_info *t = &m->buffer_tensors[i];
        size_t len = want[i].rank ? (size_t)want[i].shape[0] : 1;
        CHECK_MSG(strcmp(t->name, want[i].name) == 0 && t->rank == want[i].rank &&
                  t->offset == off && t->len == len, "buffer %d is %s, want %s", i, t->name,
                  want[i].name);
        CHECK(gt_model_buffer(m, want[i].name) == t);
        off += len;
    }
    CHECK(m->nbuffers == off);
}

/* Names, shapes and counts equal to the reference's state_dict at both input shapes; the
 * canonical spec rebuilds the same model, names included. */
static void test_resnet_layout(void)
{
    static state_list sl;
    static gt_model m, again;
    gt_err e = {{0}};
    for (size_t r = 0; r < sizeof resnets / sizeof *resnets; r++) {
        const resnet_ref *ref = &resnets[r];
        for (int in_c = 3; in_c >= 1; in_c -= 2) {
            int side = in_c == 3 ? 32 : 28;
            CHECK_MSG(gt_model_build(ref->name, in_c, side, side, 10, &m, &e) == 0, "%s: %s",
                      ref->name, e.msg);
            resnet_state(ref, in_c, 10, &sl);
            size_t want = ref->params_3x32x32 - (size_t)(3 - in_c) * ref->width0 * 9;
            CHECK_MSG(m.nparams == want, "%s %dx%d: %zu parameters, want %zu", ref->name, in_c,
                      side, m.nparams, want);
            check_tensors_only(&m, sl.want, sl.n);
            check_buffers(&m, sl.bufs, sl.nbufs);
            CHECK(strcmp(m.name, ref->name) == 0 && m.init == GT_INIT_KAIMING && m.resnet_names);
            /* The last stage's map: 32 -> 8 (resnet20) or 4 (resnet18); 28 -> 7 or 4. */
            const gt_layer *gap = &m.layers[m.nlayers - 2];
            int last = side;
            for (int st = 1; st < ref->stages; st++)
                last = (last - 1) / 2 + 1;
            CHECK(gap->kind == GT_GAP && gap->in_h == last && gap->in_w == last &&
                  gap->in_c == ref->width0 << (ref->stages - 1) && gap->out_len == (size_t)gap->in_c);
            CHECK(strlen(m.spec) < GT_SPECLEN - 1);
            CHECK(strncmp(m.spec, "init:kaiming names:resnet conv:", 31) == 0);
            CHECK_MSG(gt_model_build(m.spec, in_c, side, side, 10, &again, &e) == 0, "%s", e.msg);
            CHECK(same_model(&m, &again) && strcmp(again.name, ref->name) == 0); /* named as the built-in */
        }
    }
    CHECK(gt_model_build("resnet20", 3, 32, 32, 100, &m, &e) == 0);
    CHECK(m.nparams == 272474 + 64 * 90 + 90 && gt_model_tensor(&m, "fc.weight")->shape[0] == 100);
}

/* kaiming_normal_(fan_out) convolutions, BatchNorm2d's gamma 1 and beta 0, Linear's default. */
static void test_resnet_init(void)
{
    static gt_model m;
    gt_err e = {{0}};
    CHECK(gt_model_build("resnet20", 3, 32, 32, 10, &m, &e) == 0);
    float *p = calloc(m.nparams, sizeof *p), *q = calloc(m.nparams, sizeof *q);
    float *buf = calloc(m.nbuffers, sizeof *buf);
    CHECK(p && q && buf);
    if (!p || !q || !buf) {
        free(p), free(q), free(buf);
        return;
    }
    gt_model_init_params(&m, p, 7);
    gt_model_init_params(&m, q, 7);
    CHECK(memcmp(p, q, m.nparams * sizeof *p) == 0);
    const char *convs[] = {"layers.8.c1.weight", "layers.6.short.0.weight", "stem.0.weight"};
    for (int i = 0; i < 3; i++) {
        const gt_tensor_info *t = gt_model_tensor(&m, convs[i]);
        double sum = 0, sq = 0, sd = sqrt(2.0 / ((double)t->shape[0] * t->shape[2] * t->shape[3]));
        for (size_t j = 0; j < t->len; j++)
            sum += p[t->offset + j], sq += (double)p[t->offset + j] * p[t->offset + j];
        double mean = sum / t->len, got = sqrt(sq / t->len - mean * mean);
        double tol = 4 / sqrt((double)t->len); /* about 4 standard errors */
        CHECK_MSG(fabs(mean) < 4 * sd / sqrt((double)t->len) && fabs(got / sd - 1) < tol,
                  "%s: mean %g, sd %g, want 0 and %g", convs[i], mean, got, sd);
    }
    for (int i = 0; i < m.nlayers; i++) {
        const gt_layer *l = &m.layers[i];
        for (size_t j = 0; l->kind == GT_BATCHNORM && j < l->w_len; j++)
            CHECK(p[l->w_off + j] == 1.0f && p[l->b_off + j] == 0.0f);
    }
    const gt_tensor_info *fw = gt_model_tensor(&m, "fc.weight"), *fb = gt_model_tensor(&m, "fc.bias");
    double bound = 1 / sqrt(64.0), wmax = 0, bmax = 0;
    for (size_t j = 0; j < fw->len; j++)
        wmax = fmax(wmax, fabs(p[fw->offset + j]));
    for (size_t j = 0; j < fb->len; j++)
        bmax = fmax(bmax, fabs(p[fb->offset + j]));
    CHECK(wmax <= bound && wmax > 0.9 * bound && bmax <= bound && bmax > 0);
    gt_model_init_buffers(&m, buf);
    for (int i = 0; i < m.nbuffer_tensors; i++) {
        const gt_tensor_info *t = &m.buffer_tensors[i];
        float want = strstr(t->name, "running_var") ? 1.0f : 0.0f;
        for (size_t j = 0; j < t->len; j++)
            CHECK_MSG(buf[t->offset + j] == want, "%s[%zu]", t->name, j);
    }
    free(p), free(q), free(buf);
}

typedef struct resnet_case {
    gt_cpu_net net;
    float *params, *buffers;
    gt_batch batch;
} resnet_case;

static double resnet_loss(resnet_case *t)
{
    return gt_cpu_net_run(&t->net, t->params, t->buffers, &t->batch, 1, NULL, NULL) / t->batch.n;
}

/* resnet20 on two 3x32x32 samples, in training: the gradient of a few entries of several tensors
 * (each tensor's largest and one chosen at random) against central differences. */
static void test_resnet_gradient(void)
{
    static gt_model m;
    gt_err e = {{0}};
    gt_rng r;
    gt_rng_seed(&r, 5);
    CHECK(gt_model_build("resnet20", 3, 32, 32, 10, &m, &e) == 0);
    gt_dataset ds = {.n = 2, .c = 3, .h = 32, .w = 32, .nclasses = 10};
    ds.images = gt_alloc(2 * 3 * 32 * 32);
    ds.labels = gt_alloc(2 * sizeof *ds.labels);
    for (size_t j = 0; j < 2 * 3 * 32 * 32; j++)
        ds.images[j] = (uint8_t)gt_rng_below(&r, 256);
    ds.labels[0] = 3, ds.labels[1] = 8;
    uint32_t idx[2] = {0, 1};
    resnet_case t = {.batch = {&ds, idx, 2, 1, 1}};
    CHECK_MSG(gt_cpu_net_create(&t.net, &m, 2, &e) == 0, "%s", e.msg);
    t.params = gt_alloc(m.nparams * sizeof(float));
    t.buffers = gt_alloc(m.nbuffers * sizeof(float));
    float *grad = gt_alloc(m.nparams * sizeof(float));
    gt_model_init_params(&m, t.params, 11);
    gt_model_init_buffers(&m, t.buffers);
    /* gamma and beta away from 1 and 0, so that each batch norm's gradient is not special */
    for (int i = 0; i < m.nlayers; i++)
        for (size_t j = 0; m.layers[i].kind == GT_BATCHNORM && j < m.layers[i].w_len; j++) {
            t.params[m.layers[i].w_off + j] = 0.5f + (float)gt_rng_uniform(&r);
            t.params[m.layers[i].b_off + j] = (float)gt_rng_uniform(&r) - 0.5f;
        }
    double loss = gt_cpu_net_run(&t.net, t.params, t.buffers, &t.batch, 1, grad, NULL);
    CHECK(isfinite(loss) && loss > 0);
    const char *names[] = {"stem.0.weight", "stem.1.weight", "layers.0.c1.weight",
                           "layers.3.short.0.weight", "layers.3.short.1.bias",
                           "layers.5.b2.weight", "layers.8.c2.weight", "fc.weight", "fc.bias"};
    /* A small step: a stem weight moves every pixel of its channel, and at 1e-3 enough of them
     * cross a ReLU's kink to move the difference by several percent. */
    const float step = 1e-4f;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const gt_tensor_info *ti = gt_model_tensor(&m, names[i]);
        size_t big = 0;
        for (size_t j = 1; j < ti->len; j++)
            if (fabsf(grad[ti->offset + j]) > fabsf(grad[ti->offset + big]))
                big = j;
        size_t picks[2] = {big, gt_rng_below(&r, (uint32_t)ti->len)};
        double gmax = fabs(grad[ti->offset + big]);
        for (int k = 0; k < 2; k++) {
            float *v = t.params + ti->offset + picks[k], keep = *v;
            *v = keep + step;
            double up = resnet_loss(&t);
            *v = keep - step;
            double down = resnet_loss(&t);
            *v = keep;
            double num = (up - down) / (2.0 * step), ana = grad[ti->offset + picks[k]];
            CHECK_MSG(fabs(num - ana) <= 3e-2 * fabs(ana) + 2e-2 * gmax + 1e-5,
                      "%s[%zu]: analytic %.7g, numeric %.7g", names[i], picks[k], ana, num);
        }
    }
    gt_cpu_net_destroy(&t.net);
    gt_free(t.params), gt_free(t.buffers), gt_free(grad), gt_free(ds.images), gt_free(ds.labels);
}

typedef struct bad_case {
    const char *spec;
    const char *want[2]; /* substrings the message must hold */
} bad_case;

/* Every kind of the enum has one row, found again by its word; its canonical token builds the
 * same layer back; a value past the enum has none. */
static void test_layer_kind_table(void)
{
    char words[256];
    gt_layer_kind_words(words, sizeof words);
    int rows = 0;
    for (int k = GT_CONV; k <= GT_RES_END; k++, rows++) {
        const gt_layer_kind_row *row = gt_layer_kind_of((gt_layer_kind)k);
        CHECK_MSG(row && (int)row->kind == k, "kind %d has no row", k);
        if (!row)
            continue;
        CHECK(gt_layer_kind_find(row->word, strlen(row->word)) == row && strstr(words, row->word));
        CHECK(row->parse && row->out_shape && row->format && row->cpu_forward && row->cpu_backward);
    }
    CHECK(rows == 13 && gt_layer_kind_find("conv2", 5) == NULL && gt_layer_kind_find("con", 3) == NULL);
    CHECK(gt_layer_kind_of((gt_layer_kind)(GT_RES_END + 1)) == NULL);

    gt_model m, again;
    gt_err e;
    const char *spec = "conv:3:3:1 relu maxpool:2 conv:4:2 sigmoid avgpool:2 tanh dropout:0.25 "
                       "res[ conv:4:3:1:1:nobias bn | bn ] conv:5:1:0:2 gap fc:10";
    CHECK(gt_model_build(spec, 1, 12, 12, 10, &m, &e) == 0);
    for (int i = 0; i < m.nlayers; i++) {
        char tok[64];
        gt_layer_kind_of(m.layers[i].kind)->format(&m.layers[i], tok, sizeof tok);
        CHECK_MSG(strstr(m.spec, tok), "layer %d's token %s is not in '%s'", i, tok, m.spec);
    }
    CHECK(gt_model_build(m.spec, 1, 12, 12, 10, &again, &e) == 0 && strcmp(again.spec, m.spec) == 0);
}

static void test_bad_specs(void)
{
    static char many[GT_MAX_LAYERS * 5 + 8], longtok[128], too_long[160], many_at[32],
        many_why[32];
    for (int i = 0; i < GT_MAX_LAYERS; i++)
        strcat(many, "relu ");
    strcat(many, "fc:10");
    snprintf(many_at, sizeof many_at, "layer %d 'fc:10'", GT_MAX_LAYERS + 1);
    snprintf(many_why, sizeof many_why, "more than %d layers", GT_MAX_LAYERS);
    snprintf(longtok, sizeof longtok, "fc:%070d", 10);
    snprintf(too_long, sizeof too_long, "%s relu", longtok);
    const bad_case cases[] = {
        {"conv:6:5 relu foo fc:10", {"layer 3 'foo'", "unknown layer"}},
        {"lenet", {"'lenet'", "built-in models"}},
        {"conv:6:5 relu conv:6:x fc:10", {"--model: layer 3 'conv:6:x'", "bad kernel size 'x'"}},
        {"conv:6:5x fc:10", {"'conv:6:5x'", "kernel"}},
        {"conv:6x:5 fc:10", {"'conv:6x:5'", "output channels '6x'"}},
        {"conv:0:5 fc:10", {"'conv:0:5'", "output channels '0'"}},
        {"conv:65537:5 fc:10", {"'conv:65537:5'", "65536"}},
        {"conv:+6:5 fc:10", {"'conv:+6:5'", "'+6'"}},
        {"conv:6:0 fc:10", {"'conv:6:0'", "kernel"}},
        {"conv:6:65 fc:10", {"'conv:6:65'", "kernel"}},
        {"conv:6:5:5 fc:10", {"'conv:6:5:5'", "padding 5"}},
        {"conv:6:5:-1 fc:10", {"'conv:6:5:-1'", "padding '-1'"}},
        {"conv:6:5:1y fc:10", {"'conv:6:5:1y'", "padding"}},
        {"conv:6 fc:10", {"'conv:6'", "conv:OUT:K"}},
        {"conv:6:5:1:1:nobias:1 fc:10", {"'conv:6:5:1:1:nobias:1'", "fields"}},
        {"conv:6:5:1:0 fc:10", {"'conv:6:5:1:0'", "bad stride '0'"}},
        {"conv:6:5:1:65 fc:10", {"'conv:6:5:1:65'", "bad stride '65'"}},
        {"conv:6:5:1:2x fc:10", {"'conv:6:5:1:2x'", "stride '2x'"}},
        {"conv:6:5:nobias:1 fc:10", {"'conv:6:5:nobias:1'", "padding 'nobias'"}},
        {"conv:6:5:1:1:bias fc:10", {"'conv:6:5:1:1:bias'", "[:nobias]"}},
        {"conv:6:5:1:1:1 fc:10", {"'conv:6:5:1:1:1'", "[:nobias]"}},
        {"conv:6:nobias fc:10", {"'conv:6:nobias'", "kernel size 'nobias'"}},
        {"conv:6:3:1:29 conv:6:3 fc:10", {"layer 2 'conv:6:3'", "smaller than 1x1"}},
        {"bn:4 fc:10", {"'bn:4'", "no parameters"}},
        {"gap:2 fc:10", {"'gap:2'", "no parameters"}},
        {"res[ conv:8:3:1 ] fc:10", {"layer 3 ']'", "body gives 8x28x28 but its shortcut 1x28x28"}},
        {"conv:4:1 res[ conv:4:3:1:2 | conv:4:1 ] fc:10",
         {"layer 6 ']'", "body gives 4x14x14 but its shortcut 4x28x28"}},
        {"res[ relu fc:10", {"layer 1 'res['", "not closed"}},
        {"res[ res[ relu ] fc:10", {"layer 1 'res['", "not closed"}},
        {"relu ] fc:10", {"layer 2 ']'", "without its res["}},
        {"relu | fc:10", {"layer 2 '|'", "outside a residual block"}},
        {"res[ relu | relu | relu ] fc:10", {"layer 5 '|'", "second '|' in the block opened at layer 1"}},
        {"res[ res[ res[ res[ res[ res[ res[ res[ res[ ] ] ] ] ] ] ] ] ] fc:10",
         {"layer 9 'res['", "more than 8 residual blocks"}},
        {"res[relu]x fc:10", {"'x'", "unknown layer"}},
        {"rez[ relu ] fc:10", {"'rez['", "unknown layer"}},
        {"res [ relu ] fc:10", {"'res'", "unknown layer"}},
        {"init:kaiming:2 fc:10", {"'init:kaiming:2'", "init:kaiming"}},
        {"names:torch fc:10", {"'names:torch'", "names:resnet"}},
        {"names:resnet fc:10 names:plain", {"'names:plain'", "twice"}},
        {"names:resnet res[ relu ] fc:16 fc:10", {"two tensors fc.weight", "one fc"}},
        {"conv:6:5: fc:10", {"'conv:6:5:'", "padding ''"}},
        {"fc:", {"'fc:'", "output features"}},
        {"fc:10.0", {"'fc:10.0'", "'10.0'"}},
        {"fc:1e1", {"'fc:1e1'", "'1e1'"}},
        {"fc:-10", {"'fc:-10'", "'-10'"}},
        {"fc:10:2", {"'fc:10:2'", "fc:OUT"}},
        {"fc", {"'fc'", "fc:OUT"}},
        {"fc:99999999999999999999", {"'fc:99999999999999999999'", "output features"}},
        {"avgpool:0 fc:10", {"'avgpool:0'", "pool size"}},
        {"maxpool:2.5 fc:10", {"'maxpool:2.5'", "pool size '2.5'"}},
        {"maxpool fc:10", {"'maxpool'", "maxpool:K"}},
        {"dropout:1 fc:10", {"'dropout:1'", "dropout probability"}},
        {"dropout:-0.1 fc:10", {"'dropout:-0.1'", "dropout probability"}},
        {"dropout:0.5x fc:10", {"'dropout:0.5x'", "'0.5x'"}},
        {"dropout:nan fc:10", {"'dropout:nan'", "dropout probability"}},
        {"dropout:0.999999999 fc:10", {"'dropout:0.999999999'", "dropout probability"}},
        {"dropout fc:10", {"'dropout'", "dropout:P"}},
        {"relu:1 fc:10", {"'relu:1'", "no parameters"}},
        {"sigmoid: fc:10", {"'sigmoid:'", "no parameters"}},
        {"init:he fc:10", {"'init:he'", "init:xavier"}},
        {"init: fc:10", {"'init:'", "unknown init"}},
        {"init:torch fc:10 init:xavier", {"'init:xavier'", "twice"}},
        {"conv:6:29 fc:10", {"layer 1 'conv:6:29'", "6x0x0"}},
        {"conv:6:5:2 avgpool:2 avgpool:2 avgpool:2 avgpool:2 avgpool:2 fc:10",
         {"layer 6 'avgpool:2'", "6x1x1"}},
        {"avgpool:29 fc:10", {"'avgpool:29'", "smaller than 1x1"}},
        {"fc:10 relu", {"layer 2 'relu'", "last layer must be fc:10"}},
        {"conv:10:1", {"'conv:10:1'", "last layer"}},
        {"fc:84 relu fc:5", {"'fc:5'", "5 outputs but the dataset has 10 classes"}},
        {many, {many_at, many_why}},
        {"", {"--model", "empty"}},
        {"  ,, # just a comment\n\n", {"--model", "empty"}},
        {"init:xavier", {"--model", "empty"}},
        {"fc:65536 fc:65536 fc:10", {"layer 2 'fc:65536'", "parameters"}},
        {too_long, {"'fc:000000", "longer than 64"}},
        {"@/nonexistent/gt_spec.txt", {"/nonexistent/gt_spec.txt", "--model"}},
        {"@", {"--model", "spec file"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gt_model m;
        gt_err e = {{0}};
        int rc = gt_model_build(cases[i].spec, 1, 28, 28, 10, &m, &e);
        CHECK_MSG(rc == -1, "'%s' was accepted", cases[i].spec);
        if (rc != -1)
            continue;
        CHECK_MSG(strncmp(e.msg, "--model", 7) == 0 && !strchr(e.msg, '\n'), "%s", e.msg);
        for (int k = 0; k < 2; k++)
            CHECK_MSG(strstr(e.msg, cases[i].want[k]) != NULL, "'%s': message '%s' lacks '%s'",
                      cases[i].spec, e.msg, cases[i].want[k]);
    }

    /* One activation beyond 2^31 elements, bad input shapes and class counts. */
    gt_model m;
    gt_err e = {{0}};
    CHECK(gt_model_build("conv:65536:1 fc:10", 1, 512, 512, 10, &m, &e) == -1);
    CHECK_MSG(strstr(e.msg, "'conv:65536:1'") && strstr(e.msg, "elements"), "%s", e.msg);
    CHECK(gt_model_build("lenet5", 0, 28, 28, 10, &m, &e) == -1 && strstr(e.msg, "0x28x28"));
    CHECK(gt_model_build("lenet5", 1, 28, -1, 10, &m, &e) == -1 && strstr(e.msg, "1x28x-1"));
    CHECK(gt_model_build("lenet5", 1, 28, 28, 0, &m, &e) == -1 && strstr(e.msg, "class"));
    CHECK(gt_model_build(NULL, 1, 28, 28, 10, &m, &e) == -1);
    /* lenet5 cannot shrink a 8x8 image to its 4x4 second pooling stage. */
    CHECK(gt_model_build("lenet5", 1, 8, 8, 10, &m, &e) == -1);
    CHECK_MSG(strstr(e.msg, "'conv:16:5'") != NULL, "%s", e.msg);
}

/* With batch norm, the conv and linear weights come first, [0, ndecay), then the biases and
 * batch norm's gamma and beta; the tensors still tile the array without overlap. Without batch
 * norm every parameter decays and the layout is layer order. */
static void test_decay_layout(void)
{
    static gt_model m;
    gt_err e = {{0}};
    CHECK_MSG(gt_model_build("resnet20", 3, 32, 32, 10, &m, &e) == 0, "%s", e.msg);
    CHECK(m.ndecay > 0 && m.ndecay < m.nparams);
    static unsigned char used[300000];
    CHECK(m.nparams <= sizeof used);
    memset(used, 0, sizeof used);
    size_t decayed = 0;
    for (int t = 0; t < m.ntensors; t++) {
        const gt_tensor_info *ti = &m.tensors[t];
        int weight = strstr(ti->name, ".weight") != NULL && ti->rank >= 2;
        CHECK_MSG(weight == (ti->offset < m.ndecay), "%s at %zu (ndecay %zu)", ti->name,
                  ti->offset, m.ndecay);
        CHECK(ti->offset + ti->len <= (weight ? m.ndecay : m.nparams));
        for (size_t i = 0; i < ti->len && ti->offset + i < sizeof used; i++)
            CHECK(used[ti->offset + i]++ == 0);
        decayed += weight ? ti->len : 0;
    }
    CHECK(decayed == m.ndecay);
    for (size_t i = 0; i < m.nparams; i++)
        if (!used[i]) {
            CHECK_MSG(0, "parameter %zu belongs to no tensor", i);
            break;
        }
    /* The layers read their parameters where their tensors are. */
    for (int l = 0; l < m.nlayers; l++) {
        const gt_layer *L = &m.layers[l];
        if (!L->name[0])
            continue;
        char name[64];
        snprintf(name, sizeof name, "%s.weight", L->name);
        const gt_tensor_info *w = gt_model_tensor(&m, name);
        CHECK(w && w->offset == L->w_off);
        snprintf(name, sizeof name, "%s.bias", L->name);
        const gt_tensor_info *b = gt_model_tensor(&m, name);
        CHECK(L->b_len == 0 || (b && b->offset == L->b_off));
    }
    CHECK_MSG(gt_model_build("lenet5", 1, 28, 28, 10, &m, &e) == 0, "%s", e.msg);
    CHECK(m.ndecay == m.nparams && m.layers[0].b_off == m.layers[0].w_off + m.layers[0].w_len);
}

/* Where a copy or apply in parts ends its first part (gt_model_tensors_end_within): the end of the
 * tensor that ends last at or before the limit, no tensor ending between it and the limit, 0
 * below the first tensor's end; resnet18's at half an eighth of its weights is layer2's end (its
 * stem, layer1 and layer2: 673,472 parameters), cnn-wide's its two convolutions'. */
static void test_tensors_end_within(void)
{
    static gt_model m;
    gt_err e = {{0}};
    static const struct {
        const char *name;
        int c, side;
        size_t want;
        const char *last; /* the tensor that ends there */
    } cases[] = {{"resnet18", 3, 32, 673472, "layers.3.c2.weight"},
                 {"cnn-wide", 1, 28, 52096, "c2.bias"}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        CHECK_MSG(gt_model_build(cases[k].name, cases[k].c, cases[k].side, cases[k].side, 10, &m,
                                 &e) == 0,
                  "%s: %s", cases[k].name, e.msg);
        size_t w = m.ndecay < m.nparams ? m.ndecay : m.nparams, limit = w / 8 / 2;
        size_t end = gt_model_tensors_end_within(&m, limit);
        const gt_tensor_info *t = gt_model_tensor(&m, cases[k].last);
        CHECK_MSG(end == cases[k].want && t && t->offset + t->len == end,
                  "%s: first part ends at %zu (want %zu, the end of %s)", cases[k].name, end,
                  cases[k].want, cases[k].last);
        for (int i = 0; i < m.ntensors; i++) {
            size_t ti = m.tensors[i].offset + m.tensors[i].len;
            CHECK(ti <= end || ti > limit);
        }
        CHECK(gt_model_tensors_end_within(&m, m.tensors[0].len - 1) == 0 || m.tensors[0].offset);
        CHECK(gt_model_tensors_end_within(&m, m.nparams) == m.nparams);
    }
}

int main(void)
{
    test_decay_layout();
    test_lenet5();
    test_other_builtins();
    test_round_trip();
    test_spec_file();
    test_spec_text_only();
    test_init();
    test_bad_specs();
    test_layer_kind_table();
    test_resnet_layout();
    test_resnet_init();
    test_resnet_gradient();
    test_tensors_end_within();
    TEST_DONE();
}
