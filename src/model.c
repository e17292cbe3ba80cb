/* model.c - builds a gt_model from a built-in name, a spec text or "@FILE", and initialises it.
 * Only the command line's --model may name a file: a spec read from a checkpoint is built as
 * text (gt_model_build_spec), so a crafted checkpoint cannot make gputrain open a file.
 *
 * Building runs in three passes over the spec: parse each token into a layer (checking every
 * number), infer shapes and place the parameters in the flat array (checking that the map never
 * shrinks below 1x1 and that sizes stay bounded), then write the canonical spec back so that a
 * checkpoint's model_spec rebuilds exactly this model. Every error is one line naming the token. */
#include "gputrain/model.h"
#include "gputrain/layer_kinds.h"
#include "gputrain/layers.h"

#include "gputrain/atomic_file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL_MAX_COUNT 2147483647ull  /* parameters in all, and elements of one activation */
#define MODEL_MAX_FILE 65536           /* bytes of an @FILE spec */
#define MODEL_MAX_TOKEN 64             /* characters of one token */

typedef struct model_builtin {
    const char *name;
    const char *spec;
} model_builtin;

/* The residual networks' basic block: conv3x3 BN ReLU conv3x3 BN plus the shortcut, then ReLU.
 * The shortcut is the identity, or conv1x1 BN where the block strides or widens. */
#define RES_SAME(C) "res[ conv:" #C ":3:1:1:nobias bn relu conv:" #C ":3:1:1:nobias bn ] relu "
#define RES_DOWN(C)                                                                         \
    "res[ conv:" #C ":3:1:2:nobias bn relu conv:" #C ":3:1:1:nobias bn | conv:" #C           \
    ":1:0:2:nobias bn ] relu "

static const model_builtin model_builtins[] = {
    {"lenet5", "conv:6:5 relu avgpool:2 conv:16:5 relu avgpool:2 fc:120 relu fc:84 relu fc:10"},
    {"lenet5-classic", "init:xavier conv:6:5:2 sigmoid avgpool:2 conv:16:5 sigmoid avgpool:2 "
                       "fc:120 sigmoid fc:84 sigmoid fc:10"},
    {"mlp", "fc:256 relu fc:128 relu fc:10"},
    {"cnn-wide", "conv:32:5:2 relu maxpool:2 conv:64:5:2 relu maxpool:2 fc:1024 relu dropout:0.4 "
                 "fc:10"},
    /* He et al.'s CIFAR ResNet-20: 3 stages of 3 blocks, 16/32/64 channels. */
    {"resnet20", "init:kaiming names:resnet conv:16:3:1:1:nobias bn relu " RES_SAME(16) RES_SAME(16) RES_SAME(16)
                 RES_DOWN(32) RES_SAME(32) RES_SAME(32) RES_DOWN(64) RES_SAME(64) RES_SAME(64)
                 "gap fc:10"},
    /* ResNet-18 for small images: a 3x3 stem without max-pool, 4 stages of 2 blocks. */
    {"resnet18", "init:kaiming names:resnet conv:64:3:1:1:nobias bn relu " RES_SAME(64) RES_SAME(64)
                 RES_DOWN(128) RES_SAME(128) RES_DOWN(256) RES_SAME(256) RES_DOWN(512)
                 RES_SAME(512) "gap fc:10"},
};

#define MODEL_BUILTIN_NAMES "lenet5 lenet5-classic mlp cnn-wide resnet20 resnet18"

/* Where the text being parsed came from, and each layer's token as written, for messages. */
typedef struct model_parse {
    const char *where;  /* "--model" or "--model: FILE" */
    const char *tok[GT_MAX_LAYERS];
    int toklen[GT_MAX_LAYERS];
    int init_seen, names_seen;
    int open[GT_MAX_BLOCK_DEPTH]; /* the res[ of each open block, innermost last */
    int split[GT_MAX_BLOCK_DEPTH]; /* and its |, or -1 */
    int depth;
} model_parse;

static const model_builtin *model_builtin_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof model_builtins / sizeof *model_builtins; i++)
        if (strcmp(model_builtins[i].name, name) == 0)
            return &model_builtins[i];
    return NULL;
}

const char *gt_model_builtin_spec(const char *name)
{
    const model_builtin *b = model_builtin_find(name);
    return b ? b->spec : NULL;
}

/* "--model: layer N 'TOKEN': message" for the layer at idx. */
static int __attribute__((format(printf, 4, 5)))
token_fail(gt_err *e, const model_parse *ps, int idx, const char *fmt, ...)
{
    char msg[GT_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return gt_fail(e, "%s: layer %d '%.*s': %s", ps->where, idx + 1, ps->toklen[idx], ps->tok[idx],
                   msg);
}

static int field_is(const gt_layer_token *t, int i, const char *word)
{
    return (int)strlen(word) == t->len[i] && memcmp(t->f[i], word, (size_t)t->len[i]) == 0;
}

/* The layer token at idx into l's kind and hyper-parameters, through its kind's row. */
static int parse_layer(gt_layer *l, const model_parse *ps, int idx, gt_err *e)
{
    gt_layer_token t;
    gt_layer_token_split(ps->tok[idx], ps->toklen[idx], &t);
    if (t.n > GT_LAYER_MAX_FIELDS)
        return token_fail(e, ps, idx, "too many ':' fields");
    const gt_layer_kind_row *row = gt_layer_kind_find(t.f[0], (size_t)t.len[0]);
    if (!row) {
        char words[128];
        gt_layer_kind_words(words, sizeof words);
        return token_fail(e, ps, idx, "unknown layer (%s init; built-in models: "
                                      MODEL_BUILTIN_NAMES ")", words);
    }
    gt_err why;
    if (row->parse(&t, l, &why))
        return token_fail(e, ps, idx, "%s", why.msg);
    l->kind = row->kind;
    return 0;
}

static int parse_init(const char *s, int len, gt_model *m, model_parse *ps, gt_err *e)
{
    gt_layer_token t;
    gt_layer_token_split(s, len, &t);
    if (ps->init_seen)
        return gt_fail(e, "%s: '%.*s': init given twice", ps->where, len, s);
    if (t.n == 2 && field_is(&t, 1, "torch"))
        m->init = GT_INIT_TORCH;
    else if (t.n == 2 && field_is(&t, 1, "xavier"))
        m->init = GT_INIT_XAVIER;
    else if (t.n == 2 && field_is(&t, 1, "kaiming"))
        m->init = GT_INIT_KAIMING;
    else
        return gt_fail(e, "%s: '%.*s': unknown init (init:torch, init:xavier or init:kaiming)",
                       ps->where, len, s);
    ps->init_seen = 1;
    return 0;
}

static int parse_names(const char *s, int len, gt_model *m, model_parse *ps, gt_err *e)
{
    gt_layer_token t;
    gt_layer_token_split(s, len, &t);
    if (ps->names_seen)
        return gt_fail(e, "%s: '%.*s': names given twice", ps->where, len, s);
    if (t.n == 2 && field_is(&t, 1, "plain"))
        m->resnet_names = 0;
    else if (t.n == 2 && field_is(&t, 1, "resnet"))
        m->resnet_names = 1;
    else
        return gt_fail(e, "%s: '%.*s': unknown names (names:plain or names:resnet)", ps->where,
                       len, s);
    ps->names_seen = 1;
    return 0;
}

static int is_separator(char c)
{
    return c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* Matches layer idx, when it is a block marker, with its block's others (model.h's peer). */
static int model_match_block(gt_model *m, model_parse *ps, int idx, gt_err *e)
{
    gt_layer *l = &m->layers[idx];
    int d = ps->depth;
    switch (l->kind) {
    case GT_RES_BEGIN:
        if (d == GT_MAX_BLOCK_DEPTH)
            return token_fail(e, ps, idx, "more than %d residual blocks inside each other",
                              GT_MAX_BLOCK_DEPTH);
        ps->open[d] = idx;
        ps->split[d] = -1;
        ps->depth++;
        return 0;
    case GT_RES_SPLIT:
        if (d == 0)
            return token_fail(e, ps, idx, "'|' outside a residual block res[ ... ]");
        if (ps->split[d - 1] >= 0)
            return token_fail(e, ps, idx, "a second '|' in the block opened at layer %d",
                              ps->open[d - 1] + 1);
        l->peer = ps->open[d - 1];
        ps->split[d - 1] = idx;
        return 0;
    case GT_RES_END:
        if (d == 0)
            return token_fail(e, ps, idx, "']' without its res[");
        l->peer = ps->split[d - 1] >= 0 ? ps->split[d - 1] : ps->open[d - 1];
        m->layers[ps->open[d - 1]].peer = idx;
        ps->depth--;
        return 0;
    case GT_CONV:
    case GT_LINEAR:
    case GT_AVGPOOL:
    case GT_MAXPOOL:
    case GT_RELU:
    case GT_SIGMOID:
    case GT_TANH:
    case GT_DROPOUT:
    case GT_BATCHNORM:
    case GT_GAP:
        break;
    }
    return 0;
}

/* Where the token at text[i] ends: at a separator or '#'; after a '['; and ']' and '|' are
 * tokens of their own. */
static size_t token_end(const char *text, size_t len, size_t i)
{
    if (text[i] == ']' || text[i] == '|')
        return i + 1;
    while (i < len && !is_separator(text[i]) && text[i] != '#' && text[i] != ']' &&
           text[i] != '|')
        if (text[i++] == '[')
            break;
    return i;
}

/* Tokenises text[0..len) into m->layers (kinds, hyper-parameters and block peers) and m->init. */
static int model_parse_spec(const char *text, size_t len, gt_model *m, model_parse *ps, gt_err *e)
{
    size_t i = 0;
    while (i < len) {
        if (is_separator(text[i])) {
            i++;
            continue;
        }
        if (text[i] == '#') {
            while (i < len && text[i] != '\n')
                i++;
            continue;
        }
        const char *tok = text + i;
        size_t n = token_end(text, len, i) - i;
        i += n;
        if (n > MODEL_MAX_TOKEN)
            return gt_fail(e, "%s: token '%.*s...' is longer than %d characters", ps->where,
                           MODEL_MAX_TOKEN, tok, MODEL_MAX_TOKEN);
        if (n >= 5 && memcmp(tok, "init:", 5) == 0) {
            if (parse_init(tok, (int)n, m, ps, e))
                return -1;
            continue;
        }
        if (n >= 6 && memcmp(tok, "names:", 6) == 0) {
            if (parse_names(tok, (int)n, m, ps, e))
                return -1;
            continue;
        }
        if (m->nlayers == GT_MAX_LAYERS)
            return gt_fail(e, "%s: layer %d '%.*s': more than %d layers", ps->where,
                           m->nlayers + 1, (int)n, tok, GT_MAX_LAYERS);
        ps->tok[m->nlayers] = tok;
        ps->toklen[m->nlayers] = (int)n;
        if (parse_layer(&m->layers[m->nlayers], ps, m->nlayers, e) ||
            model_match_block(m, ps, m->nlayers, e))
            return -1;
        m->nlayers++;
    }
    if (m->nlayers == 0)
        return gt_fail(e, "%s: empty model spec (no layers)", ps->where);
    if (ps->depth)
        return token_fail(e, ps, ps->open[ps->depth - 1], "the residual block is not closed "
                          "with ']'");
    return 0;
}

static void model_add_tensor(gt_tensor_info *t, const char *layer, const char *what,
                             size_t offset, int rank, const int *shape, size_t len)
{
    snprintf(t->name, sizeof t->name, "%s.%s", layer, what);
    t->offset = offset;
    t->rank = rank;
    for (int i = 0; i < rank; i++)
        t->shape[i] = shape[i];
    t->len = len;
}

/* Names every layer with parameters c1, c2, ... b1, ... f1, ... in order (its row's prefix). */
static void model_name_sequential(gt_model *m)
{
    unsigned char count[3] = {0}; /* conv, batch norm, linear: at most GT_MAX_LAYERS each */
    for (int i = 0; i < m->nlayers; i++) {
        gt_layer *l = &m->layers[i];
        char prefix = gt_layer_kind_of(l->kind)->param_prefix;
        if (!prefix)
            continue;
        int which = prefix == 'c' ? 0 : prefix == 'b' ? 1 : 2;
        snprintf(l->name, sizeof l->name, "%c%hhu", prefix, ++count[which]);
    }
}

/* Names the layers as the PyTorch reference of the residual built-ins does: its stem
 * Sequential(conv, bn, relu) gives stem.0 and stem.1; block N (numbered across stages) has
 * layers.N.c1, .b1, .c2, .b2 and its shortcut Sequential(conv, bn) layers.N.short.0 and .1; the
 * classifier after the blocks is fc. */
static void model_name_resnet(gt_model *m)
{
    int started = 0, inside = 0, shortcut = 0;
    unsigned char block = 0, nth = 0, convs = 0, bns = 0; /* below GT_MAX_LAYERS */
    for (int i = 0; i < m->nlayers; i++) {
        gt_layer *l = &m->layers[i];
        if (l->kind == GT_RES_BEGIN) {
            block = started ? block + 1 : 0;
            started = inside = 1, shortcut = 0, nth = convs = bns = 0;
        }
        else if (l->kind == GT_RES_SPLIT)
            shortcut = 1;
        else if (l->kind == GT_RES_END)
            inside = 0, nth = 0;
        if (!gt_layer_kind_of(l->kind)->param_prefix)
            continue;
        if (inside && shortcut)
            snprintf(l->name, sizeof l->name, "layers.%hhu.short.%hhu", block, nth++);
        else if (inside)
            snprintf(l->name, sizeof l->name, "layers.%hhu.%c%hhu", block,
                     l->kind == GT_CONV ? 'c' : 'b', l->kind == GT_CONV ? ++convs : ++bns);
        else if (!started)
            snprintf(l->name, sizeof l->name, "stem.%hhu", nth++);
        else
            snprintf(l->name, sizeof l->name, "fc");
    }
}

/* Gives layer l (shapes and name already set) its weight, bias and buffer ranges and tensors:
 * parameters weight then bias; batch norm's buffers running_mean, running_var and the rank-0
 * num_batches_tracked. */
static void model_place_params(gt_model *m, gt_layer *l)
{
    size_t lens[3];
    gt_layer_param_lens(l, lens);
    int c = l->kind == GT_BATCHNORM ? l->in_c : l->out_c;
    int shape[4] = {c, l->in_c, l->k, l->k}, rank = l->kind == GT_CONV ? 4 : 1;
    if (l->kind == GT_LINEAR)
        shape[1] = (int)l->in_len, rank = 2;
    l->w_off = m->nparams, l->w_len = lens[0];
    l->b_off = l->w_off + l->w_len, l->b_len = lens[1];
    model_add_tensor(&m->tensors[m->ntensors++], l->name, "weight", l->w_off, rank, shape,
                     l->w_len);
    if (l->b_len)
        model_add_tensor(&m->tensors[m->ntensors++], l->name, "bias", l->b_off, 1, &c, l->b_len);
    m->nparams = l->b_off + l->b_len;
    l->s_off = m->nbuffers, l->s_len = lens[2];
    if (!l->s_len)
        return;
    gt_tensor_info *t = &m->buffer_tensors[m->nbuffer_tensors];
    model_add_tensor(t, l->name, "running_mean", l->s_off, 1, &c, (size_t)c);
    model_add_tensor(t + 1, l->name, "running_var", l->s_off + (size_t)c, 1, &c, (size_t)c);
    model_add_tensor(t + 2, l->name, "num_batches_tracked", l->s_off + 2 * (size_t)c, 0, NULL, 1);
    m->nbuffer_tensors += 3;
    m->nbuffers = l->s_off + l->s_len;
}

/* Fills every layer's shapes, lengths and parameter ranges, the tensors, nparams and max_act. */
static int model_infer_shapes(gt_model *m, const model_parse *ps, gt_err *e)
{
    int c = m->in_c, h = m->in_h, w = m->in_w;
    m->max_act = (size_t)c * (size_t)h * (size_t)w;
    for (int i = 0; i < m->nlayers; i++) {
        gt_layer *l = &m->layers[i];
        l->in_c = c;
        l->in_h = h;
        l->in_w = w;
        l->in_len = (size_t)c * (size_t)h * (size_t)w;
        long long out[3];
        gt_err why;
        if (gt_layer_model_shape(m, i, out, &why))
            return token_fail(e, ps, i, "%s", why.msg);
        if (out[1] < 1 || out[2] < 1)
            return token_fail(e, ps, i, "output %lldx%lldx%lld from input %dx%dx%d is "
                              "smaller than 1x1", out[0], out[1], out[2], c, h, w);
        /* Each factor is below 2^32, so two bounded products cannot overflow. */
        unsigned long long plane = (unsigned long long)out[1] * (unsigned long long)out[2];
        unsigned long long out_len = plane * (unsigned long long)out[0];
        if (plane > MODEL_MAX_COUNT || out_len > MODEL_MAX_COUNT)
            return token_fail(e, ps, i, "output %lldx%lldx%lld has more than %llu "
                              "elements", out[0], out[1], out[2], MODEL_MAX_COUNT);
        l->out_c = c = (int)out[0];
        l->out_h = h = (int)out[1];
        l->out_w = w = (int)out[2];
        l->out_len = (size_t)out_len;
        if (l->out_len > m->max_act)
            m->max_act = l->out_len;
        if (!gt_layer_kind_of(l->kind)->param_prefix)
            continue;
        model_place_params(m, l);
        if (m->nparams > MODEL_MAX_COUNT)
            return token_fail(e, ps, i, "the model reaches %zu parameters (limit %llu)",
                              m->nparams, MODEL_MAX_COUNT);
    }
    return 0;
}

/* A model with batch norm decays only its convolution and linear weights, as the residual
 * networks' recipe does (biases and batch norm's gamma and beta take no weight decay): those
 * weights move to the front of the flat array, [0, ndecay), the rest after them, each tensor in
 * layer order, so that an update's weight decay ends at one index. Tensors keep their order and
 * names (checkpoints look them up by name). Other models decay every parameter, as torch.optim's
 * default does: ndecay = nparams. */
static void model_place_decay(gt_model *m)
{
    m->ndecay = m->nparams;
    if (m->nbuffers == 0)
        return;
    size_t at = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            m->ndecay = at;
        for (int i = 0; i < m->nlayers; i++) {
            gt_layer *l = &m->layers[i];
            if (!gt_layer_kind_of(l->kind)->param_prefix)
                continue;
            int decays = l->kind == GT_CONV || l->kind == GT_LINEAR;
            if (pass == 0 && decays) {
                l->w_off = at;
                at += l->w_len;
            } else if (pass == 1) {
                if (!decays) {
                    l->w_off = at;
                    at += l->w_len;
                }
                l->b_off = at;
                at += l->b_len;
            }
        }
    }
    for (int t = 0; t < m->ntensors; t++) {
        gt_tensor_info *ti = &m->tensors[t];
        const char *dot = strrchr(ti->name, '.');
        for (int i = 0; dot && i < m->nlayers; i++) {
            const gt_layer *l = &m->layers[i];
            size_t n = strlen(l->name);
            if (n && (size_t)(dot - ti->name) == n && strncmp(ti->name, l->name, n) == 0)
                ti->offset = strcmp(dot, ".weight") == 0 ? l->w_off : l->b_off;
        }
    }
}

/* names:resnet follows the reference's one layout; a spec outside it (two layers after the last
 * block, a block inside a block) would name two tensors alike, which checkpoints cannot hold. */
static int model_check_names(const gt_model *m, const char *where, gt_err *e)
{
    for (int i = 0; i < m->ntensors; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(m->tensors[i].name, m->tensors[j].name) == 0)
                return gt_fail(e, "%s: names:resnet names two tensors %s (it takes a stem, "
                               "blocks not nested, then one fc)", where, m->tensors[i].name);
    return 0;
}

static int model_check_output(const gt_model *m, const model_parse *ps, gt_err *e)
{
    int last = m->nlayers - 1;
    const gt_layer *l = &m->layers[last];
    if (l->kind != GT_LINEAR)
        return token_fail(e, ps, last, "the last layer must be fc:%d (the dataset has %d classes)",
                          m->nclasses, m->nclasses);
    if (l->out_c != m->nclasses)
        return token_fail(e, ps, last, "the last layer has %d outputs but the dataset has %d "
                          "classes", l->out_c, m->nclasses);
    return 0;
}

/* Appends a token to m->spec after a space; -1 when it does not fit. */
static int spec_append(gt_model *m, size_t *pos, const char *tok)
{
    size_t n = strlen(tok), sep = *pos > 0;
    if (*pos + sep + n >= sizeof m->spec)
        return -1;
    if (sep)
        m->spec[(*pos)++] = ' ';
    memcpy(m->spec + *pos, tok, n + 1);
    *pos += n;
    return 0;
}

/* m->spec: the init token first, then each layer's canonical token, single spaces. */
static int model_write_spec(gt_model *m, const char *where, gt_err *e)
{
    char tok[64];
    size_t pos = 0;
    static const char *const init_words[] = {"init:torch", "init:xavier", "init:kaiming"};
    int rc = spec_append(m, &pos, init_words[m->init]);
    if (rc == 0 && m->resnet_names) /* names:plain, the default, is left out */
        rc = spec_append(m, &pos, "names:resnet");
    for (int i = 0; rc == 0 && i < m->nlayers; i++) {
        gt_layer_kind_of(m->layers[i].kind)->format(&m->layers[i], tok, sizeof tok);
        rc = spec_append(m, &pos, tok);
    }
    if (rc)
        return gt_fail(e, "%s: the canonical spec is longer than %zu characters", where,
                       sizeof m->spec - 1);
    return 0;
}

/* Reads "@FILE" into a NUL-terminated heap buffer (freed by the caller). */
static char *model_read_file(const char *path, size_t *len, gt_err *e)
{
    const char *why;
    int fd = gt_open_regular(path, &why); /* a FIFO must not hang the run */
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        if (fd >= 0)
            close(fd);
        gt_fail(e, "--model: cannot open spec file '%s': %s", path, fd < 0 ? why : strerror(errno));
        return NULL;
    }
    char *buf = malloc(MODEL_MAX_FILE + 1);
    if (!buf) {
        fclose(f);
        gt_fail(e, "--model: out of memory reading '%s'", path);
        return NULL;
    }
    size_t n = fread(buf, 1, MODEL_MAX_FILE + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > MODEL_MAX_FILE || memchr(buf, 0, n)) {
        gt_fail(e, "--model: spec file '%s': %s", path,
                bad ? "read error" : n > MODEL_MAX_FILE ? "too large (over 64 KiB)"
                                                        : "not a text file");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int model_check_inputs(const char *where, int in_c, int in_h, int in_w, int nclasses,
                              gt_err *e)
{
    if (in_c < 1 || in_h < 1 || in_w < 1 ||
        (unsigned long long)in_c * (unsigned long long)in_h * (unsigned long long)in_w >
            MODEL_MAX_COUNT)
        return gt_fail(e, "%s: bad input shape %dx%dx%d", where, in_c, in_h, in_w);
    if (nclasses < 1 || nclasses > GT_LAYER_MAX_WIDTH)
        return gt_fail(e, "%s: bad class count %d (1..%d)", where, nclasses, GT_LAYER_MAX_WIDTH);
    return 0;
}

/* Builds m from text[0..len), the spec of the built-in builtin (a name) or, when NULL, a custom
 * one; messages begin with where. */
static int model_build_text(const char *text, size_t len, const char *builtin, const char *where,
                            int in_c, int in_h, int in_w, int nclasses, gt_model *m, gt_err *e)
{
    if (model_check_inputs(where, in_c, in_h, in_w, nclasses, e))
        return -1;
    memset(m, 0, sizeof *m);
    m->in_c = in_c;
    m->in_h = in_h;
    m->in_w = in_w;
    m->nclasses = nclasses;
    m->init = GT_INIT_TORCH;
    snprintf(m->name, sizeof m->name, "%s", builtin ? builtin : "custom");
    model_parse ps = {.where = where};
    int rc = model_parse_spec(text, len, m, &ps, e);
    /* A built-in's output width follows the dataset, so it runs on any class count. */
    if (rc == 0 && builtin)
        m->layers[m->nlayers - 1].out_c = nclasses;
    if (rc == 0 && m->resnet_names)
        model_name_resnet(m);
    else if (rc == 0)
        model_name_sequential(m);
    if (rc == 0)
        rc = model_infer_shapes(m, &ps, e);
    if (rc == 0)
        model_place_decay(m);
    if (rc == 0)
        rc = model_check_output(m, &ps, e);
    if (rc == 0)
        rc = model_check_names(m, ps.where, e);
    if (rc == 0)
        rc = model_write_spec(m, ps.where, e);
    return rc;
}

/* A custom model whose canonical spec is a built-in's (for this input and class count) takes
 * the built-in's name, so that a spec written out by hand or read back from a checkpoint is
 * reported as the model it is. */
static void model_name_builtin(gt_model *m)
{
    gt_model *b = malloc(sizeof *b);
    for (size_t i = 0; b && i < sizeof model_builtins / sizeof *model_builtins; i++) {
        const model_builtin *r = &model_builtins[i];
        gt_err ignored;
        if (model_build_text(r->spec, strlen(r->spec), r->name, "--model", m->in_c, m->in_h,
                             m->in_w, m->nclasses, b, &ignored) == 0 &&
            strcmp(b->spec, m->spec) == 0) {
            snprintf(m->name, sizeof m->name, "%s", r->name);
            break;
        }
    }
    free(b);
}

int gt_model_build(const char *name_or_spec, int in_c, int in_h, int in_w, int nclasses,
                   gt_model *m, gt_err *e)
{
    if (!name_or_spec)
        return gt_fail(e, "--model: no model given");
    const char *text = gt_model_builtin_spec(name_or_spec);
    if (text)
        return model_build_text(text, strlen(text), name_or_spec, "--model", in_c, in_h, in_w,
                                nclasses, m, e);
    if (name_or_spec[0] != '@')
        return gt_model_build_spec("--model", name_or_spec, in_c, in_h, in_w, nclasses, m, e);
    size_t len = 0;
    char *file = model_read_file(name_or_spec + 1, &len, e), where[GT_ERRLEN / 2];
    if (!file)
        return -1;
    snprintf(where, sizeof where, "--model: %s", name_or_spec + 1);
    int rc = model_build_text(file, len, NULL, where, in_c, in_h, in_w, nclasses, m, e);
    free(file);
    if (rc == 0)
        model_name_builtin(m);
    return rc;
}

int gt_model_build_spec(const char *where, const char *spec, int in_c, int in_h, int in_w,
                        int nclasses, gt_model *m, gt_err *e)
{
    if (model_build_text(spec, strlen(spec), NULL, where, in_c, in_h, in_w, nclasses, m, e))
        return -1;
    model_name_builtin(m);
    return 0;
}

static void fill_uniform(gt_rng *r, float *x, size_t n, double bound)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(bound * (2.0 * gt_rng_uniform(r) - 1.0));
}

/* Normal with mean 0 and standard deviation sd, by Box-Muller (one value per pair of draws). */
static void fill_normal(gt_rng *r, float *x, size_t n, double sd)
{
    for (size_t i = 0; i < n; i++) {
        double u = 1.0 - gt_rng_uniform(r), v = gt_rng_uniform(r); /* u in (0, 1] */
        x[i] = (float)(sd * sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v));
    }
}

static void fill_const(float *x, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

void gt_model_init_params(const gt_model *m, float *params, uint64_t seed)
{
    gt_rng r;
    gt_rng_seed(&r, seed);
    for (int i = 0; i < m->nlayers; i++) {
        const gt_layer *l = &m->layers[i];
        if (l->kind == GT_BATCHNORM) {
            fill_const(params + l->w_off, l->w_len, 1.0f);
            fill_const(params + l->b_off, l->b_len, 0.0f);
        }
        if (l->kind != GT_CONV && l->kind != GT_LINEAR)
            continue;
        int conv = l->kind == GT_CONV;
        double kk = conv ? (double)l->k * l->k : 1.0;
        double fan_in = conv ? l->in_c * kk : (double)l->in_len, fan_out = l->out_c * kk;
        if (m->init == GT_INIT_XAVIER) {
            fill_uniform(&r, params + l->w_off, l->w_len, sqrt(6.0 / (fan_in + fan_out)));
            fill_const(params + l->b_off, l->b_len, 0.0f);
        } else if (m->init == GT_INIT_KAIMING && conv) {
            /* kaiming_normal_(mode='fan_out', nonlinearity='relu'): gain sqrt(2). */
            fill_normal(&r, params + l->w_off, l->w_len, sqrt(2.0 / fan_out));
            fill_const(params + l->b_off, l->b_len, 0.0f);
        } else {
            /* kaiming_uniform(a=sqrt(5)) reduces to the bias's bound 1/sqrt(fan_in). */
            fill_uniform(&r, params + l->w_off, l->w_len, 1.0 / sqrt(fan_in));
            fill_uniform(&r, params + l->b_off, l->b_len, 1.0 / sqrt(fan_in));
        }
    }
}

void gt_model_init_buffers(const gt_model *m, float *buffers)
{
    for (int i = 0; i < m->nlayers; i++) {
        const gt_layer *l = &m->layers[i];
        if (l->kind != GT_BATCHNORM)
            continue;
        fill_const(buffers + l->s_off, (size_t)l->in_c, 0.0f);
        fill_const(buffers + l->s_off + l->in_c, (size_t)l->in_c, 1.0f);
        buffers[l->s_off + 2 * (size_t)l->in_c] = 0.0f;
    }
}

void gt_model_fold_stats(const gt_model *m, float *buffers, const float *stats)
{
    for (int i = 0; i < m->nlayers; i++) {
        const gt_layer *l = &m->layers[i];
        if (l->kind != GT_BATCHNORM)
            continue;
        size_t c2 = 2 * (size_t)l->in_c;
        float *run = buffers + l->s_off;
        const float *batch = stats + l->s_off;
        for (size_t j = 0; j < c2; j++)
            run[j] = (float)((1 - GT_BN_MOMENTUM) * run[j] + GT_BN_MOMENTUM * batch[j]);
        run[c2] += batch[c2];
    }
}

int gt_model_block_depths(const gt_model *m, int *depth, gt_err *e)
{
    int open[GT_MAX_BLOCK_DEPTH], split[GT_MAX_BLOCK_DEPTH], d = 0;
    for (int l = 0; l < m->nlayers; l++) {
        const gt_layer *L = &m->layers[l];
        int ok = 1;
        if (L->kind == GT_RES_BEGIN) {
            ok = d < GT_MAX_BLOCK_DEPTH && L->peer > l && L->peer < m->nlayers &&
                 m->layers[L->peer].kind == GT_RES_END;
            if (ok)
                open[d] = l, split[d] = -1, depth[l] = d++;
        } else if (L->kind == GT_RES_SPLIT) {
            ok = d > 0 && split[d - 1] < 0 && L->peer == open[d - 1];
            if (ok)
                split[d - 1] = l, depth[l] = d - 1;
        } else if (L->kind == GT_RES_END) {
            ok = d > 0 && m->layers[open[d - 1]].peer == l &&
                 L->peer == (split[d - 1] >= 0 ? split[d - 1] : open[d - 1]);
            if (ok)
                depth[l] = --d;
        }
        if (!ok)
            return gt_fail(e, "model %s: layer %d: residual block markers out of order", m->name, l);
    }
    if (d)
        return gt_fail(e, "model %s: a residual block is not closed", m->name);
    return 0;
}

static const gt_tensor_info *tensor_find(const gt_tensor_info *t, int n, const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

const gt_tensor_info *gt_model_tensor(const gt_model *m, const char *name)
{
    return tensor_find(m->tensors, m->ntensors, name);
}

const gt_tensor_info *gt_model_buffer(const gt_model *m, const char *name)
{
    return tensor_find(m->buffer_tensors, m->nbuffer_tensors, name);
}

size_t gt_model_tensors_end_within(const gt_model *m, size_t limit)
{
    size_t end = 0;
    for (int t = 0; t < m->ntensors; t++) {
        size_t e = m->tensors[t].offset + m->tensors[t].len;
        if (e <= limit && e > end)
            end = e;
    }
    return end;
}
