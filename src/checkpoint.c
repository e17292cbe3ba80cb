/* checkpoint.c - gputrain's checkpoints: what a safetensors file (safetensors.c) must hold to be
 * one, written through the atomic writer (atomic_file.c).
 *
 * In file order: the model as both directions need it; the save path (tensor list, metadata,
 * one atomic write); header validation shared by gt_ckpt_read_meta and gt_ckpt_load; and the
 * tensor reader, which stages data in its own buffer so a damaged file leaves the caller's arrays
 * untouched. */
#include "gputrain/checkpoint.h"

#include "gputrain/atomic_file.h"
#include "gputrain/data.h"
#include "gputrain/json.h"
#include "gputrain/names.h"
#include "gputrain/safetensors.h"

#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_FORMAT "gputrain-2"
#define CKPT_OLD_FORMAT "gputrain-1" /* no header CRC: refused, since its metadata is unchecked */
#define CKPT_MAX_EPOCH ((unsigned long long)GT_MAX_EPOCHS) /* as many as --epochs accepts */
#define CKPT_MAX_COUNT (1ull << 53)   /* samples, steps, updates: exact as doubles, never wrapping */
#define CKPT_CRC_KEY "header_crc32"
#define CKPT_CRC_HOLE "\"" CKPT_CRC_KEY "\":\"00000000\""
#define CKPT_MAX_KEEP GT_MAX_KEEP      /* as many as --keep accepts */
#define CKPT_OLD_NAMES 256 /* names written as "classes", which older gputrains read; more go to
                            * "class_names", which they ignore (they refuse more in "classes") */
/* A name's worst bytes in the header: each of 31 control bytes is \u00XX in the array, its
 * backslash escaped again in the header string, plus its quotes (escaped) and comma. */
#define CKPT_NAME_WORST (7 * (GT_CKPT_NAMELEN - 1) + 5)
/* The largest header a save writes: Python's safetensors refuses more than 100,000,000 bytes,
 * a little under what gputrain's reader accepts (GT_ST_MAX_HEADER). */
#define CKPT_MAX_HEADER 100000000ull
_Static_assert(CKPT_MAX_HEADER <= GT_ST_MAX_HEADER, "a header saved must be one gputrain reads");
_Static_assert((unsigned long long)GT_CKPT_MAX_CLASSES * CKPT_NAME_WORST + (4ull << 20) <
                   CKPT_MAX_HEADER,
               "the most class names must fit the header limit beside the tensors' entries");
#define CKPT_EMA_PREFIX "ema."         /* the moving average's tensors: ema.<tensor> */
#define CKPT_SLOT_EMA 3                /* ckpt_slot.slot of an ema tensor (0 params, 1-2 state) */

/* How many state arrays an optimizer keeps and their torch.optim names, from its row (optim.h);
 * -1 when unknown. */
static int ckpt_state_names(const char *optimizer, const char *const **names)
{
    const gt_optimizer_row *row = gt_optimizer_row_named(optimizer);
    *names = row ? row->state_names : NULL;
    return row ? row->nstate : -1;
}


/* ---- the model, as both directions need it ----------------------------------------------------- */

/* The index of the model's tensor of that name, or -1. */
static int ckpt_find_tensor(const gt_model *m, const char *name)
{
    const gt_tensor_info *t = gt_model_tensor(m, name);
    return t ? (int)(t - m->tensors) : -1;
}

static int ckpt_terminated(const char *s, size_t cap) { return strnlen(s, cap) < cap; }

/* The model describes the file's layout, so a malformed one must not reach the byte arithmetic. */
static int ckpt_check_model(const gt_model *m, const char *path, gt_err *e)
{
    if (!ckpt_terminated(m->name, sizeof m->name) || !ckpt_terminated(m->spec, sizeof m->spec))
        return gt_fail(e, "checkpoint %s: the model's name or spec is not terminated", path);
    if (m->ntensors < 0 || m->ntensors > GT_MAX_TENSORS)
        return gt_fail(e, "checkpoint %s: the model has %d tensors", path, m->ntensors);
    for (int t = 0; t < m->ntensors; t++) {
        const gt_tensor_info *ti = &m->tensors[t];
        if (!ckpt_terminated(ti->name, sizeof ti->name) || ti->name[0] == '\0' ||
            strncmp(ti->name, "optim.", 6) == 0 || strncmp(ti->name, CKPT_EMA_PREFIX, 4) == 0 ||
            strcmp(ti->name, "__metadata__") == 0 ||
            !gt_utf8_valid(ti->name))
            return gt_fail(e, "checkpoint %s: model tensor %d has an unusable name", path, t);
        if (ckpt_find_tensor(m, ti->name) != t)
            return gt_fail(e, "checkpoint %s: the model has two tensors named %s", path, ti->name);
        if (ti->rank < 0 || ti->rank > GT_ST_MAX_RANK)
            return gt_fail(e, "checkpoint %s: model tensor %s has rank %d", path, ti->name, ti->rank);
        uint64_t count = 1;
        for (int d = 0; d < ti->rank; d++) {
            if (ti->shape[d] < 0 || (ti->shape[d] > 0 && count > UINT32_MAX))
                return gt_fail(e, "checkpoint %s: model tensor %s has a bad shape", path, ti->name);
            count *= (uint64_t)ti->shape[d];
        }
        if (count != ti->len || ti->offset > m->nparams || ti->len > m->nparams - ti->offset)
            return gt_fail(e, "checkpoint %s: model tensor %s (%zu floats at %zu) does not fit its "
                           "shape or the %zu parameters", path, ti->name, ti->len, ti->offset,
                           m->nparams);
    }
    return 0;
}

/* ---- saving --------------------------------------------------------------------------------------- */

#define CKPT_NFIXED 30 /* metadata members besides the tensors' CRCs */

/* Everything one save writes: the tensors, their CRC members and the metadata text. */
typedef struct ckpt_save {
    gt_st_out *out;
    char (*crc_key)[GT_ST_MAX_NAME + 8];
    char (*crc_hex)[9];
    gt_st_kv *kv;
    int nout, nkv;
    char in_shape[40], nums[13][24], reals[4][32], fingerprint[9];
    char norm[2 * GT_NORM_MAX_C * 18]; /* input_norm: the model's --normalize values */
    char *header;
    size_t hlen;
    char *classes; /* the class names as a JSON array, or NULL */
} ckpt_save;

static void ckpt_save_free(ckpt_save *sv)
{
    free(sv->out);
    free(sv->crc_key);
    free(sv->crc_hex);
    free(sv->kv);
    free(sv->header);
    free(sv->classes);
}

/* One tensor of the file: its name, data and CRC. */
static void ckpt_list_one(ckpt_save *sv, const gt_tensor_info *ti, const char *prefix,
                          const float *base)
{
    gt_st_out *o = &sv->out[sv->nout];
    char *name = sv->crc_key[sv->nout] + 6;
    memcpy(sv->crc_key[sv->nout], "crc32.", 6);
    snprintf(name, GT_ST_MAX_NAME + 2, "%s%s", prefix, ti->name);
    *o = (gt_st_out){.name = name, .data = base + ti->offset, .len = ti->len, .rank = ti->rank,
                     .shape = ti->shape};
    snprintf(sv->crc_hex[sv->nout], sizeof sv->crc_hex[0], "%08" PRIx32,
             gt_st_crc_floats_le(o->data, o->len));
    sv->nout++;
}

/* Parameters first, then the buffers, then each optimizer state array, then the moving average
 * where there is one, each with the model's tensor layout. */
static void ckpt_list_tensors(ckpt_save *sv, const gt_model *m, const float *params,
                              const float *ema, const float *buffers, float *const *state,
                              int nstate, const char *const *names)
{
    for (int t = 0; t < m->ntensors; t++)
        ckpt_list_one(sv, &m->tensors[t], "", params);
    for (int t = 0; t < m->nbuffer_tensors; t++)
        ckpt_list_one(sv, &m->buffer_tensors[t], "", buffers);
    for (int s = 1; s <= nstate; s++) {
        char prefix[40];
        snprintf(prefix, sizeof prefix, "optim.%s.", names[s - 1]);
        for (int t = 0; t < m->ntensors; t++)
            ckpt_list_one(sv, &m->tensors[t], prefix, state[s - 1]);
    }
    for (int t = 0; ema && t < m->ntensors; t++)
        ckpt_list_one(sv, &m->tensors[t], CKPT_EMA_PREFIX, ema);
}

static void ckpt_kv(ckpt_save *sv, const char *key, const char *value)
{
    sv->kv[sv->nkv++] = (gt_st_kv){key, value};
}

static void ckpt_kv_u64(ckpt_save *sv, int slot, const char *key, uint64_t value)
{
    snprintf(sv->nums[slot], sizeof sv->nums[slot], "%" PRIu64, value);
    ckpt_kv(sv, key, sv->nums[slot]);
}

/* A double written so that it reads back exactly. */
static void ckpt_kv_real(ckpt_save *sv, int slot, const char *key, double value)
{
    snprintf(sv->reals[slot], sizeof sv->reals[slot], "%.17g", value);
    ckpt_kv(sv, key, sv->reals[slot]);
}

/* The metadata's model fields come from m, which describes the tensors written. */
static void ckpt_list_meta(ckpt_save *sv, const gt_model *m, const gt_ckpt_meta *meta)
{
    ckpt_kv(sv, "format", CKPT_FORMAT);
    ckpt_kv(sv, "model", m->name);
    ckpt_kv(sv, "model_spec", m->spec);
    snprintf(sv->in_shape, sizeof sv->in_shape, "%dx%dx%d", m->in_c, m->in_h, m->in_w);
    ckpt_kv(sv, "in_shape", sv->in_shape);
    ckpt_kv_u64(sv, 0, "nclasses", (uint64_t)m->nclasses);
    ckpt_kv(sv, "mode", meta->mode);
    ckpt_kv(sv, "optimizer", meta->optimizer);
    ckpt_kv_u64(sv, 1, "epoch", meta->epoch);
    ckpt_kv_u64(sv, 2, "step", meta->step);
    ckpt_kv_u64(sv, 3, "samples", meta->samples);
    ckpt_kv_u64(sv, 4, "updates", meta->updates);
    ckpt_kv_u64(sv, 5, "seed", meta->seed);
    ckpt_kv_u64(sv, 6, "wall_ms", meta->wall_ms);
    ckpt_kv_u64(sv, 7, "batch", meta->batch);
    ckpt_kv_u64(sv, 8, "workers", meta->workers);
    ckpt_kv_u64(sv, 9, "train_samples", meta->train_samples);
    ckpt_kv_u64(sv, 10, "epoch_pos", meta->epoch_pos);
    ckpt_kv_real(sv, 0, "lr", meta->lr);
    ckpt_kv_real(sv, 1, "momentum", meta->momentum);
    ckpt_kv_real(sv, 2, "weight_decay", meta->weight_decay);
    snprintf(sv->fingerprint, sizeof sv->fingerprint, "%08" PRIx32, meta->data_fingerprint);
    ckpt_kv(sv, "data_fingerprint", sv->fingerprint);
    if (meta->best_acc >= 0 && (strcmp(meta->best_of, "val") == 0 ||
                                strcmp(meta->best_of, "test") == 0)) {
        ckpt_kv(sv, "best_of", meta->best_of);
        ckpt_kv_real(sv, 3, "best_acc", meta->best_acc);
        ckpt_kv_u64(sv, 11, "best_step", meta->best_step);
        ckpt_kv_u64(sv, 12, "since_best", meta->since_best);
    }
    if (sv->classes)
        ckpt_kv(sv, meta->nnames <= CKPT_OLD_NAMES ? "classes" : "class_names", sv->classes);
    if (meta->resized)
        ckpt_kv(sv, "resize_images", "1");
    if (meta->run_options[0])
        ckpt_kv(sv, "run_options", meta->run_options);
    if (m->norm.on) {
        gt_norm_format(&m->norm, m->in_c, sv->norm, sizeof sv->norm);
        ckpt_kv(sv, "input_norm", sv->norm);
    }
    ckpt_kv(sv, CKPT_CRC_KEY, "00000000");
    for (int i = 0; i < sv->nout; i++)
        ckpt_kv(sv, sv->crc_key[i], sv->crc_hex[i]);
}

/* The class names as a JSON array of strings (quote, backslash and control bytes escaped), or
 * NULL when out of memory. */
static char *ckpt_classes_json(const gt_ckpt_meta *meta)
{
    char *out = malloc((size_t)meta->nnames * (6 * GT_CKPT_NAMELEN + 3) + 3), *p = out;
    if (!out)
        return NULL;
    *p++ = '[';
    for (int k = 0; k < meta->nnames; k++) {
        p += sprintf(p, k ? ",\"" : "\"");
        p += gt_json_escape(p, 6 * GT_CKPT_NAMELEN, meta->class_names[k]); /* always fits */
        *p++ = '"';
    }
    strcpy(p, "]");
    return out;
}

static int ckpt_check_name_list(const char *path, const gt_class_name *names, int n, gt_err *e);

/* Class names, when given: one per class, each 1..GT_CKPT_NAMELEN-1 bytes of UTF-8. */
static int ckpt_check_names(const char *path, const gt_ckpt_meta *meta, int nclasses, gt_err *e)
{
    if (meta->nnames == 0)
        return 0;
    if (meta->nnames != nclasses || meta->nnames > GT_CKPT_MAX_CLASSES || meta->nnames < 0)
        return gt_fail(e, "checkpoint %s: %d class names for %d classes (at most %d)", path,
                       meta->nnames, nclasses, GT_CKPT_MAX_CLASSES);
    if (!meta->class_names)
        return gt_fail(e, "checkpoint %s: %d class names to save and no array of them", path,
                       meta->nnames);
    return ckpt_check_name_list(path, meta->class_names, meta->nnames, e);
}

/* Each name 1..GT_CKPT_NAMELEN-1 bytes of UTF-8. */
static int ckpt_check_name_list(const char *path, const gt_class_name *names, int n, gt_err *e)
{
    for (int k = 0; k < n; k++) {
        const char *name = names[k];
        if (!name[0] || !ckpt_terminated(name, GT_CKPT_NAMELEN) || !gt_utf8_valid(name))
            return gt_fail(e, "checkpoint %s: class name %d is empty, too long or not UTF-8",
                           path, k);
    }
    return 0;
}

static int ckpt_check_save_args(const char *path, const gt_model *m, const float *params,
                                float *const *state, int nstate, const gt_ckpt_meta *meta,
                                int keep, gt_err *e)
{
    if (!path || !*path || path[strlen(path) - 1] == '/')
        return gt_fail(e, "checkpoint path '%s' is not a file name", path ? path : "");
    if (strlen(path) + 32 >= PATH_MAX)
        return gt_fail(e, "checkpoint path %s is too long", path);
    if (!m || !meta || !params)
        return gt_fail(e, "checkpoint %s: no model, parameters or metadata to save", path);
    if (keep < 0 || keep > CKPT_MAX_KEEP)
        return gt_fail(e, "checkpoint %s: keep %d is outside 0..%d", path, keep, CKPT_MAX_KEEP);
    if (ckpt_check_model(m, path, e) != 0 || ckpt_check_names(path, meta, m->nclasses, e) != 0)
        return -1;
    if (!gt_utf8_valid(m->name) || !gt_utf8_valid(m->spec))
        return gt_fail(e, "checkpoint %s: the model's name or spec is not valid UTF-8", path);
    if (!ckpt_terminated(meta->mode, sizeof meta->mode) || !gt_utf8_valid(meta->mode))
        return gt_fail(e, "checkpoint %s: the mode name is not terminated UTF-8", path);
    const char *const *names;
    int want = ckpt_terminated(meta->optimizer, sizeof meta->optimizer)
                   ? ckpt_state_names(meta->optimizer, &names) : -1;
    char words[GT_NAMES_LIST_LEN];
    gt_name_list(GT_NAMES_OPTIMIZER, " or ", words, sizeof words);
    if (want < 0)
        return gt_fail(e, "checkpoint %s: optimizer must be %s", path, words);
    if (nstate != 0 && nstate != want)
        return gt_fail(e, "checkpoint %s: %s keeps %d state arrays, not %d", path, meta->optimizer,
                       want, nstate);
    for (int s = 0; s < nstate; s++)
        if (!state || !state[s])
            return gt_fail(e, "checkpoint %s: optimizer state array %d is missing", path, s);
    return 0;
}

/* CRC-32 of the 8 length bytes and the header with the header_crc32 value as "00000000": every
 * header byte but the 8 digits that hold it. */
static uint32_t ckpt_header_crc(const char *header, uint64_t hlen, size_t hole)
{
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)(hlen >> (8 * i));
    uint32_t crc = gt_crc32(0, lenbuf, 8);
    crc = gt_crc32(crc, header, hole);
    crc = gt_crc32(crc, "00000000", 8);
    return gt_crc32(crc, header + hole + 8, hlen - hole - 8);
}

/* Writes the header's CRC into its header_crc32 value (written as "00000000"). Escaped quotes
 * are preceded by a backslash, so the first match is the metadata member itself. */
static void ckpt_seal_header(char *header, size_t hlen)
{
    char *at = strstr(header, CKPT_CRC_HOLE);
    size_t hole = (size_t)(at - header) + strlen(CKPT_CRC_HOLE) - 9;
    char hex[9];
    snprintf(hex, sizeof hex, "%08" PRIx32, ckpt_header_crc(header, hlen, hole));
    memcpy(header + hole, hex, 8);
}

static int ckpt_same_state(const char *path, const gt_ckpt_meta *meta, const ckpt_save *sv);

static int ckpt_fill(int fd, void *ctx)
{
    const ckpt_save *sv = ctx;
    return gt_st_write(fd, sv->header, sv->hlen, sv->out, sv->nout);
}

uint64_t gt_ckpt_step_samples(int clocked, int slices, int workers, int hosts, int batch)
{
    if (clocked)
        return (uint64_t)workers * (uint64_t)hosts * (uint64_t)batch;
    return hosts == 1 && (!slices || workers == 1) ? (uint64_t)batch : 0;
}

int gt_ckpt_save(const char *path, const gt_model *m, const float *params,
                 const float *buffers, float *const *state, int nstate, const gt_ckpt_meta *meta,
                 int keep, gt_err *e)
{
    return gt_ckpt_save_ema(path, m, params, NULL, buffers, state, nstate, meta, keep, e);
}

int gt_ckpt_save_ema(const char *path, const gt_model *m, const float *params, const float *ema,
                     const float *buffers, float *const *state, int nstate,
                     const gt_ckpt_meta *meta, int keep, gt_err *e)
{
    if (ckpt_check_save_args(path, m, params, state, nstate, meta, keep, e) != 0)
        return -1;
    if (m->nbuffers && !buffers)
        return gt_fail(e, "checkpoint %s: model %s has batch-norm buffers and none were given",
                       path, m->name);
    const char *const *names;
    ckpt_state_names(meta->optimizer, &names);
    size_t n = (size_t)m->ntensors * (1 + (size_t)nstate + (ema != NULL)) +
               (size_t)m->nbuffer_tensors + 1;
    ckpt_save sv = {.out = calloc(n, sizeof *sv.out), .crc_key = calloc(n, sizeof *sv.crc_key),
                    .crc_hex = calloc(n, sizeof *sv.crc_hex),
                    .kv = calloc(n + CKPT_NFIXED, sizeof *sv.kv)};
    int rc = -1;
    if (meta->nnames > 0)
        sv.classes = ckpt_classes_json(meta);
    if (sv.out && sv.crc_key && sv.crc_hex && sv.kv && (meta->nnames == 0 || sv.classes)) {
        ckpt_list_tensors(&sv, m, params, ema, buffers, state, nstate, names);
        ckpt_list_meta(&sv, m, meta);
        sv.header = gt_st_build_header(sv.kv, sv.nkv, sv.out, sv.nout, &sv.hlen);
        if (sv.header)
            ckpt_seal_header(sv.header, sv.hlen);
    }
    if (!sv.header)
        gt_fail(e, "cannot save checkpoint %s: out of memory", path);
    else if (sv.hlen > CKPT_MAX_HEADER)
        gt_fail(e, "cannot save checkpoint %s: its header would be %zu bytes, over the %llu "
                "safetensors readers accept", path, sv.hlen, CKPT_MAX_HEADER);
    else
        rc = gt_atomic_write(path, "checkpoint", ckpt_fill, &sv,
                             ckpt_same_state(path, meta, &sv) ? 0 : keep, e);
    ckpt_save_free(&sv);
    return rc;
}

/* ---- reading and validating a checkpoint's header ----------------------------------------------- */

/* Per file tensor: its CRC from the metadata, and for gt_ckpt_load the model tensor and array
 * (0 params, s state s-1) it fills. */
typedef struct ckpt_slot {
    uint32_t crc;
    int tensor, slot;
    int buffer;       /* tensor indexes the model's buffer tensors (slot 0) */
} ckpt_slot;

typedef struct ckpt_file {
    const char *path;
    gt_st_file st;
    ckpt_slot *slots; /* parallel to st.entries */
    gt_ckpt_meta meta;
    gt_class_name *names; /* meta.nnames class names, malloc'd; NULL where none */
} ckpt_file;

static void ckpt_close(ckpt_file *cf)
{
    gt_st_close(&cf->st);
    free(cf->slots);
    free(cf->names);
}

/* Digits only, no sign, no leading zero: the end of the number, or NULL. */
static const char *parse_dec(const char *s, uint64_t *v)
{
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
        return NULL;
    uint64_t x = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned digit = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - digit) / 10)
            return NULL;
        x = x * 10 + digit;
    }
    *v = x;
    return s;
}

/* Exactly 8 lowercase hex digits, as written: another spelling of the same value is damage. */
static int parse_hex32(const char *s, uint32_t *v)
{
    uint32_t hi, lo;
    if (strlen(s) != 8 || strspn(s, "0123456789abcdef") != 8 || gt_json_hex4(s, s + 8, &hi) != 0 ||
        gt_json_hex4(s + 4, s + 8, &lo) != 0)
        return -1;
    *v = hi << 16 | lo;
    return 0;
}

static const char *ckpt_meta_str(const ckpt_file *cf, const char *key)
{
    return gt_st_meta_str(&cf->st, key);
}

static int ckpt_meta_text(const ckpt_file *cf, const char *key, char *dst, size_t cap, gt_err *e)
{
    const char *s = ckpt_meta_str(cf, key);
    if (!s)
        return gt_fail(e, "checkpoint %s: metadata lacks \"%s\"", cf->path, key);
    size_t n = strlen(s);
    if (n >= cap)
        return gt_fail(e, "checkpoint %s: metadata \"%s\" is longer than %zu bytes", cf->path, key,
                       cap - 1);
    memcpy(dst, s, n + 1);
    return 0;
}

static int ckpt_meta_u64(const ckpt_file *cf, const char *key, uint64_t min, uint64_t max,
                         uint64_t *v, gt_err *e)
{
    const char *s = ckpt_meta_str(cf, key);
    if (!s)
        return gt_fail(e, "checkpoint %s: metadata lacks \"%s\"", cf->path, key);
    const char *end = parse_dec(s, v);
    if (!end || *end || *v < min || *v > max)
        return gt_fail(e, "checkpoint %s: metadata \"%s\" is \"%.40s\", not an integer in %" PRIu64
                       "..%" PRIu64, cf->path, key, s, min, max);
    return 0;
}

/* An optional member: 0 where absent (a file written before it existed). */
static int ckpt_meta_opt_u64(const ckpt_file *cf, const char *key, uint64_t max, uint64_t *v,
                             gt_err *e)
{
    *v = 0;
    return ckpt_meta_str(cf, key) ? ckpt_meta_u64(cf, key, 0, max, v, e) : 0;
}

/* An optional finite number, written by ckpt_kv_real: 0 where absent. */
static int ckpt_meta_opt_real(const ckpt_file *cf, const char *key, double *v, gt_err *e)
{
    const char *s = ckpt_meta_str(cf, key);
    char *end = NULL;
    *v = 0;
    if (!s)
        return 0;
    if ((*s >= '0' && *s <= '9') || *s == '-')
        *v = strtod(s, &end);
    if (!end || *end || !isfinite(*v))
        return gt_fail(e, "checkpoint %s: metadata \"%s\" is \"%.40s\", not a finite number", cf->path,
                       key, s);
    return 0;
}

static int ckpt_parse_in_shape(const ckpt_file *cf, gt_ckpt_meta *meta, gt_err *e)
{
    const char *s = ckpt_meta_str(cf, "in_shape");
    if (!s)
        return gt_fail(e, "checkpoint %s: metadata lacks \"in_shape\"", cf->path);
    uint64_t v[3];
    const char *p = s;
    for (int i = 0; i < 3 && p; i++) {
        p = parse_dec(p, &v[i]);
        if (p && (v[i] < 1 || v[i] > INT_MAX || *p != (i < 2 ? 'x' : '\0')))
            p = NULL;
        else if (p && i < 2)
            p++;
    }
    if (!p)
        return gt_fail(e, "checkpoint %s: metadata \"in_shape\" is \"%.40s\", not CxHxW", cf->path, s);
    meta->in_c = (int)v[0], meta->in_h = (int)v[1], meta->in_w = (int)v[2];
    return 0;
}

/* "classes" (up to CKPT_OLD_NAMES names) or "class_names" (more), at most one of them: a JSON
 * array of nclasses strings, each a valid class name, kept in cf->names. */
static int ckpt_parse_classes(ckpt_file *cf, gt_ckpt_meta *mt, gt_err *e)
{
    const char *old = ckpt_meta_str(cf, "classes"), *many = ckpt_meta_str(cf, "class_names");
    const char *key = many ? "class_names" : "classes", *s = many ? many : old;
    mt->nnames = 0;
    mt->class_names = NULL;
    if (!s)
        return 0;
    size_t len = strlen(s);
    int fits = mt->nclasses <= (many ? GT_CKPT_MAX_CLASSES : CKPT_OLD_NAMES) &&
               (many ? mt->nclasses > CKPT_OLD_NAMES : 1) && !(old && many);
    char *text = fits && len <= (size_t)mt->nclasses * (6 * GT_CKPT_NAMELEN + 3) + 2
                     ? malloc(len + 1) : NULL;
    cf->names = fits ? malloc((size_t)mt->nclasses * sizeof *cf->names) : NULL;
    gt_json_doc d = {0};
    int rc = -1;
    if (text && cf->names) {
        memcpy(text, s, len + 1);
        rc = gt_json_parse(&d, text, len) == 0 && d.nodes[0].type == GT_JSON_ARRAY &&
                     d.nodes[0].count == mt->nclasses ? 0 : -1;
    }
    for (int c = rc == 0 ? d.nodes[0].child : -1, k = 0; c >= 0; c = d.nodes[c].next, k++) {
        if (d.nodes[c].type != GT_JSON_STRING || strlen(d.nodes[c].str) >= GT_CKPT_NAMELEN) {
            rc = -1;
            break;
        }
        snprintf(cf->names[k], GT_CKPT_NAMELEN, "%s", d.nodes[c].str);
    }
    gt_json_free(&d);
    free(text);
    if (rc != 0 || ckpt_check_name_list(cf->path, cf->names, mt->nclasses, e) != 0)
        return gt_fail(e, "checkpoint %s: metadata \"%s\" is not a list of %d class names "
                       "of 1..%d bytes%s", cf->path, key, mt->nclasses, GT_CKPT_NAMELEN - 1,
                       old && many ? " (it has both \"classes\" and \"class_names\")" : "");
    mt->nnames = mt->nclasses;
    return 0;
}

/* The modes a checkpoint can come from (as --mode names them). */
static int ckpt_known_mode(const char *mode)
{
    gt_mode m;
    return gt_mode_parse(mode, &m) == 0;
}

static int ckpt_parse_meta(ckpt_file *cf, gt_err *e)
{
    gt_ckpt_meta *mt = &cf->meta;
    uint64_t nclasses, epoch;
    const char *fp = ckpt_meta_str(cf, "data_fingerprint");
    const char *const *names;
    if (ckpt_meta_text(cf, "model_spec", mt->model_spec, sizeof mt->model_spec, e) != 0 ||
        ckpt_meta_text(cf, "model", mt->model, sizeof mt->model, e) != 0 ||
        ckpt_meta_text(cf, "mode", mt->mode, sizeof mt->mode, e) != 0 ||
        ckpt_meta_text(cf, "optimizer", mt->optimizer, sizeof mt->optimizer, e) != 0 ||
        ckpt_parse_in_shape(cf, mt, e) != 0 ||
        ckpt_meta_u64(cf, "nclasses", 1, INT_MAX, &nclasses, e) != 0 ||
        ckpt_meta_u64(cf, "epoch", 0, CKPT_MAX_EPOCH, &epoch, e) != 0 ||
        ckpt_meta_u64(cf, "samples", 0, CKPT_MAX_COUNT, &mt->samples, e) != 0 ||
        ckpt_meta_u64(cf, "step", 0, mt->samples, &mt->step, e) != 0 ||
        ckpt_meta_u64(cf, "updates", 0, CKPT_MAX_COUNT, &mt->updates, e) != 0 ||
        ckpt_meta_u64(cf, "seed", 0, UINT64_MAX, &mt->seed, e) != 0)
        return -1;
    /* Written since the wall time and the layout were kept: an older file reads them as 0. */
    if (ckpt_meta_opt_u64(cf, "wall_ms", CKPT_MAX_COUNT, &mt->wall_ms, e) != 0 ||
        ckpt_meta_opt_u64(cf, "batch", INT_MAX, &mt->batch, e) != 0 ||
        ckpt_meta_opt_u64(cf, "workers", INT_MAX, &mt->workers, e) != 0 ||
        ckpt_meta_opt_u64(cf, "train_samples", UINT32_MAX, &mt->train_samples, e) != 0 ||
        ckpt_meta_opt_u64(cf, "epoch_pos", mt->samples, &mt->epoch_pos, e) != 0 ||
        ckpt_meta_opt_real(cf, "lr", &mt->lr, e) != 0 ||
        ckpt_meta_opt_real(cf, "momentum", &mt->momentum, e) != 0 ||
        ckpt_meta_opt_real(cf, "weight_decay", &mt->weight_decay, e) != 0)
        return -1;
    /* The options a resume takes again: absent in a file written before they were kept. */
    const char *ro = ckpt_meta_str(cf, "run_options");
    mt->run_options[0] = 0;
    if (ro && ckpt_meta_text(cf, "run_options", mt->run_options, sizeof mt->run_options, e) != 0)
        return -1;
    /* The monitored accuracy's best so far (--save-best, --patience): absent in a file written
     * before any evaluation or before it was kept. */
    mt->best_acc = -1;
    const char *best_of = ckpt_meta_str(cf, "best_of");
    if (best_of) {
        if (strcmp(best_of, "val") != 0 && strcmp(best_of, "test") != 0)
            return gt_fail(e, "checkpoint %s: metadata \"best_of\" is \"%.20s\", not \"val\" or "
                              "\"test\"", cf->path, best_of);
        snprintf(mt->best_of, sizeof mt->best_of, "%s", best_of);
        if (ckpt_meta_opt_real(cf, "best_acc", &mt->best_acc, e) != 0 ||
            ckpt_meta_opt_u64(cf, "best_step", CKPT_MAX_COUNT, &mt->best_step, e) != 0 ||
            ckpt_meta_opt_u64(cf, "since_best", CKPT_MAX_COUNT, &mt->since_best, e) != 0)
            return -1;
        if (!(mt->best_acc >= 0 && mt->best_acc <= 1))
            return gt_fail(e, "checkpoint %s: metadata \"best_acc\" is %g, not an accuracy in "
                              "[0, 1]", cf->path, mt->best_acc);
    }
    uint64_t resized = 0; /* absent: not resized */
    if (ckpt_meta_str(cf, "resize_images") &&
        ckpt_meta_u64(cf, "resize_images", 1, 1, &resized, e) != 0)
        return -1;
    mt->resized = (int)resized;
    const char *norm = ckpt_meta_str(cf, "input_norm"); /* absent: x / 255 alone */
    int nnorm = 0;
    memset(&mt->norm, 0, sizeof mt->norm);
    if (norm && (gt_norm_parse("input_norm", norm, &mt->norm, &nnorm, e) != 0 ||
                 nnorm != mt->in_c))
        return gt_fail(e, "checkpoint %s: metadata \"input_norm\" is not one mean and standard "
                       "deviation for each of its %d input channels", cf->path, mt->in_c);
    if (ckpt_state_names(mt->optimizer, &names) < 0)
        return gt_fail(e, "checkpoint %s: unknown optimizer \"%s\"", cf->path, mt->optimizer);
    if (!ckpt_known_mode(mt->mode))
        return gt_fail(e, "checkpoint %s: unknown mode \"%.20s\"", cf->path, mt->mode);
    if (!fp || parse_hex32(fp, &mt->data_fingerprint) != 0)
        return gt_fail(e, "checkpoint %s: metadata \"data_fingerprint\" is missing or not 8 hex digits",
                       cf->path);
    mt->nclasses = (int)nclasses;
    mt->epoch = (uint32_t)epoch;
    return ckpt_parse_classes(cf, mt, e);
}

/* Every tensor has a CRC, and every CRC names a tensor. */
static int ckpt_parse_crcs(ckpt_file *cf, gt_err *e)
{
    const gt_json_doc *d = &cf->st.doc;
    for (int i = 0; i < cf->st.nentries; i++) {
        char key[GT_ST_MAX_NAME + 8];
        snprintf(key, sizeof key, "crc32.%s", cf->st.entries[i].name);
        const char *s = ckpt_meta_str(cf, key);
        if (!s || parse_hex32(s, &cf->slots[i].crc) != 0)
            return gt_fail(e, "checkpoint %s: metadata \"%s\" is missing or not 8 hex digits",
                           cf->path, key);
    }
    for (int c = d->nodes[cf->st.meta_node].child; c >= 0; c = d->nodes[c].next) {
        const char *key = d->nodes[c].key;
        if (strncmp(key, "crc32.", 6) == 0 &&
            (strcmp(key + 6, "__metadata__") == 0 || gt_json_get(d, 0, key + 6) < 0))
            return gt_fail(e, "checkpoint %s: metadata \"%.80s\" names no tensor", cf->path, key);
    }
    return 0;
}


/* The header's CRC (header_crc32) covers every byte of the length and the header but its own 8
 * digits, which must be the bytes as written (no escapes) in lowercase hex. */
static int ckpt_check_header_crc(const ckpt_file *cf, gt_err *e)
{
    const gt_st_file *st = &cf->st;
    const char *s = ckpt_meta_str(cf, CKPT_CRC_KEY), *format = ckpt_meta_str(cf, "format");
    if (!s && format && strcmp(format, CKPT_OLD_FORMAT) == 0)
        return gt_fail(e, "checkpoint %s: format %s (an older gputrain) has no header CRC, so its "
                       "settings cannot be trusted; it is not read", cf->path, CKPT_OLD_FORMAT);
    uint32_t want;
    size_t hole = s ? (size_t)(s - st->header) : 0;
    if (!s || parse_hex32(s, &want) != 0 || hole < 1 || hole + 9 > st->hlen ||
        memcmp(st->raw + 8 + hole - 1, "\"", 1) != 0 || memcmp(st->raw + 8 + hole, s, 8) != 0 ||
        st->raw[8 + hole + 8] != '"')
        return gt_fail(e, "checkpoint %s: metadata \"%s\" is missing or not 8 hex digits: file "
                       "damaged or not a gputrain checkpoint", cf->path, CKPT_CRC_KEY);
    if (ckpt_header_crc(st->raw + 8, st->hlen, hole) != want)
        return gt_fail(e, "checkpoint %s: its header fails its CRC32: file damaged", cf->path);
    return 0;
}

static int ckpt_check_header(ckpt_file *cf, gt_err *e)
{
    if (ckpt_check_header_crc(cf, e) != 0)
        return -1;
    const char *format = ckpt_meta_str(cf, "format");
    if (!format || strcmp(format, CKPT_FORMAT) != 0)
        return gt_fail(e, "checkpoint %s: not a gputrain checkpoint (format is not %s)", cf->path,
                       CKPT_FORMAT);
    if (gt_st_index(&cf->st, e) != 0 || ckpt_parse_meta(cf, e) != 0)
        return -1;
    cf->slots = calloc((size_t)cf->st.nentries + 1, sizeof *cf->slots);
    if (!cf->slots)
        return gt_fail(e, "checkpoint %s: out of memory", cf->path);
    for (int i = 0; i < cf->st.nentries; i++) /* whole or not: ckpt_match_model checks */
        if (strncmp(cf->st.entries[i].name, CKPT_EMA_PREFIX, 4) == 0)
            cf->meta.has_ema = 1;
    return ckpt_parse_crcs(cf, e);
}

/* Opens path and validates everything but the tensor bytes. On failure cf needs no ckpt_close. */
static int ckpt_open(ckpt_file *cf, const char *path, gt_err *e)
{
    *cf = (ckpt_file){.path = path};
    if (gt_st_open(&cf->st, path, e) != 0)
        return -1;
    if (ckpt_check_header(cf, e) != 0) {
        ckpt_close(cf);
        return -1;
    }
    return 0;
}

/* Whether the checkpoint at path (if readable) holds the state sv is about to write: the same
 * training position and every tensor's CRC. Then rotating would push the last distinct checkpoint
 * out for a copy of this one (a run's last save after a step checkpoint there), so PATH is only
 * replaced; another run that ended at the same position is distinct, and rotates. */
static int ckpt_same_state(const char *path, const gt_ckpt_meta *meta, const ckpt_save *sv)
{
    ckpt_file cf;
    gt_err ignored;
    if (ckpt_open(&cf, path, &ignored) != 0)
        return 0;
    const gt_ckpt_meta *old = &cf.meta;
    int same = old->epoch == meta->epoch && old->step == meta->step &&
               old->samples == meta->samples && old->updates == meta->updates &&
               cf.st.nentries == sv->nout;
    for (int i = 0; same && i < sv->nout; i++) {
        const char *crc = ckpt_meta_str(&cf, sv->crc_key[i]);
        same = crc && strcmp(crc, sv->crc_hex[i]) == 0;
    }
    ckpt_close(&cf);
    return same;
}

/* ---- loading tensors ----------------------------------------------------------------------------- */

static void ckpt_shape_text(char *buf, size_t cap, int rank, const int *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ",%d" : "%d", shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* The model tensor a file tensor fills and which array (0: params, s: state s-1, CKPT_SLOT_EMA:
 * the moving average), or -1. */
static int ckpt_target(const char *name, const gt_model *m, const char *const *states, int nstates,
                       int *slot)
{
    *slot = 0;
    if (strncmp(name, CKPT_EMA_PREFIX, 4) == 0) {
        *slot = CKPT_SLOT_EMA;
        return ckpt_find_tensor(m, name + 4);
    }
    if (strncmp(name, "optim.", 6) != 0)
        return ckpt_find_tensor(m, name);
    for (int s = 0; s < nstates; s++) {
        size_t n = strlen(states[s]);
        if (strncmp(name + 6, states[s], n) == 0 && name[6 + n] == '.') {
            *slot = s + 1;
            return ckpt_find_tensor(m, name + 7 + n);
        }
    }
    return -1;
}

static int ckpt_check_identity(const ckpt_file *cf, const gt_model *m, gt_err *e)
{
    const gt_ckpt_meta *mt = &cf->meta;
    if (strcmp(mt->model_spec, m->spec) != 0) {
        if (strcmp(mt->model, m->name) != 0)
            return gt_fail(e, "checkpoint %s is for model %s, this run uses %s", cf->path, mt->model,
                           m->name);
        return gt_fail(e, "checkpoint %s is for model %s \"%s\", this run uses \"%s\"", cf->path,
                       mt->model, mt->model_spec, m->spec);
    }
    if (mt->in_c != m->in_c || mt->in_h != m->in_h || mt->in_w != m->in_w || mt->nclasses != m->nclasses)
        return gt_fail(e, "checkpoint %s is for %dx%dx%d inputs and %d classes, this run uses "
                       "%dx%dx%d and %d", cf->path, mt->in_c, mt->in_h, mt->in_w, mt->nclasses,
                       m->in_c, m->in_h, m->in_w, m->nclasses);
    return 0;
}

/* Maps every file tensor onto the model and checks that what the caller asked for is there, and
 * that a moving average, where the file has one, is whole (read only where want_ema). */
static int ckpt_match_model(ckpt_file *cf, const gt_model *m, int want, int want_ema, gt_err *e)
{
    if (ckpt_check_identity(cf, m, e) != 0)
        return -1;
    const char *const *names;
    int fstates = ckpt_state_names(cf->meta.optimizer, &names);
    const gt_optimizer_row *run_opt = gt_optimizer_row_keeping(want);
    if (want > 0 && want != fstates)
        return gt_fail(e, "checkpoint %s holds %s optimizer state, this run uses %s", cf->path,
                       cf->meta.optimizer, run_opt ? run_opt->head.name : "?");
    unsigned char found[4][GT_MAX_TENSORS] = {{0}}, bfound[GT_MAX_BUFFER_TENSORS] = {0};
    for (int i = 0; i < cf->st.nentries; i++) {
        const gt_st_entry *ent = &cf->st.entries[i];
        ckpt_slot *sl = &cf->slots[i];
        int t = ckpt_target(ent->name, m, names, fstates, &sl->slot);
        const gt_tensor_info *bt = t < 0 ? gt_model_buffer(m, ent->name) : NULL;
        if (t < 0 && !bt)
            return gt_fail(e, "checkpoint %s has tensor %s, which model %s does not have", cf->path,
                           ent->name, m->name);
        sl->buffer = bt != NULL;
        if (bt)
            t = (int)(bt - m->buffer_tensors);
        const gt_tensor_info *ti = bt ? bt : &m->tensors[t];
        if (ent->rank != ti->rank || memcmp(ent->shape, ti->shape, (size_t)ti->rank * sizeof(int)) != 0) {
            char have[64], need[64];
            ckpt_shape_text(have, sizeof have, ent->rank, ent->shape);
            ckpt_shape_text(need, sizeof need, ti->rank, ti->shape);
            return gt_fail(e, "checkpoint %s: tensor %s has shape %s, model %s wants %s", cf->path,
                           ent->name, have, m->name, need);
        }
        if (bt)
            bfound[t] = 1;
        else
            found[sl->slot][t] = 1;
        sl->tensor = sl->slot <= want || (sl->slot == CKPT_SLOT_EMA && want_ema) ? t : -1;
    }
    for (int t = 0; t < m->nbuffer_tensors; t++)
        if (!bfound[t])
            return gt_fail(e, "checkpoint %s lacks buffer %s", cf->path, m->buffer_tensors[t].name);
    for (int s = 0; s <= want; s++)
        for (int t = 0; t < m->ntensors; t++)
            if (!found[s][t]) {
                if (s == 0)
                    return gt_fail(e, "checkpoint %s lacks tensor %s", cf->path, m->tensors[t].name);
                return gt_fail(e, "checkpoint %s lacks optimizer state optim.%s.%s", cf->path,
                               names[s - 1], m->tensors[t].name);
            }
    for (int t = 0; cf->meta.has_ema && t < m->ntensors; t++)
        if (!found[CKPT_SLOT_EMA][t])
            return gt_fail(e, "checkpoint %s has a moving average without %s%s", cf->path,
                           CKPT_EMA_PREFIX, m->tensors[t].name);
    return 0;
}

/* Reads file tensor i to dst (or only checks it, when dst is NULL) and checks its CRC. */
static int ckpt_read_tensor(const ckpt_file *cf, int i, char *dst, gt_err *e)
{
    const gt_st_entry *ent = &cf->st.entries[i];
    uint32_t crc;
    if (gt_st_read(&cf->st, ent, dst, &crc, e) != 0)
        return -1;
    if (crc != cf->slots[i].crc)
        return gt_fail(e, "checkpoint %s: tensor %s fails its CRC32: file damaged", cf->path, ent->name);
    return 0;
}

/* Parameters and optimizer state must be finite: a NaN or Inf would be trained on and carried
 * into every later checkpoint. */
static int ckpt_check_finite(const ckpt_file *cf, const gt_model *m, int want, int narr,
                             const float *stage, gt_err *e)
{
    const char *const *names;
    ckpt_state_names(cf->meta.optimizer, &names);
    for (int s = 0; s < narr; s++) {
        int st = s > 0 && s <= want; /* an optimizer state array; s > want: the moving average */
        for (int t = 0; t < m->ntensors; t++) {
            const gt_tensor_info *ti = &m->tensors[t];
            const float *v = stage + (size_t)s * m->nparams + ti->offset;
            for (size_t i = 0; i < ti->len; i++) {
                if (isfinite(v[i]))
                    continue;
                return gt_fail(e, "checkpoint %s: %s%s%s%s[%zu] is %s (--allow-nonfinite loads it)",
                               cf->path, st ? "optim." : s ? CKPT_EMA_PREFIX : "",
                               st ? names[s - 1] : "", st ? "." : "", ti->name, i,
                               isnan(v[i]) ? "NaN" : "infinite");
            }
        }
    }
    return 0;
}

/* One pass over the data in file order into a staging buffer; the caller's arrays are written
 * only once every CRC has passed. */
static int ckpt_read_tensors(const ckpt_file *cf, const gt_model *m, int want, float *params,
                             float *ema, float *buffers, float *const *state, unsigned flags,
                             gt_err *e)
{
    size_t n = m->nparams, nb = m->nbuffers;
    /* arrays staged: parameters, state, then the moving average where one is read */
    int narr = 1 + want + (ema && cf->meta.has_ema);
    float *stage = NULL;
    if (n > 0) {
        /* the buffers are staged after the arrays of parameters and state */
        if (n > (SIZE_MAX / sizeof(float) - nb) / (size_t)narr ||
            !(stage = gt_alloc((n * (size_t)narr + nb) * sizeof(float))))
            return gt_fail(e, "checkpoint %s: out of memory staging %zu parameters", cf->path, n);
    }
    float *bstage = stage ? stage + n * (size_t)narr : NULL;
    for (int i = 0; i < cf->st.nentries; i++) {
        const ckpt_slot *sl = &cf->slots[i];
        char *dst = NULL;
        if (sl->tensor >= 0 && sl->buffer)
            dst = (char *)(bstage + m->buffer_tensors[sl->tensor].offset);
        else if (sl->tensor >= 0)
            dst = (char *)(stage + (size_t)(sl->slot == CKPT_SLOT_EMA ? 1 + want : sl->slot) * n +
                           m->tensors[sl->tensor].offset);
        if (ckpt_read_tensor(cf, i, dst, e) != 0) {
            gt_free(stage);
            return -1;
        }
    }
    if (stage)
        gt_st_floats_from_le(stage, n * (size_t)narr + nb);
    if (!(flags & GT_CKPT_ALLOW_NONFINITE) && ckpt_check_finite(cf, m, want, narr, stage, e) != 0) {
        gt_free(stage);
        return -1;
    }
    for (size_t i = 0; i < nb && !(flags & GT_CKPT_ALLOW_NONFINITE); i++)
        if (!isfinite(bstage[i])) {
            int nan = isnan(bstage[i]);
            gt_free(stage);
            return gt_fail(e, "checkpoint %s: a batch-norm buffer holds %s at %zu "
                           "(--allow-nonfinite loads it)", cf->path,
                           nan ? "NaN" : "an infinite value", i);
        }
    if (buffers && nb)
        memcpy(buffers, bstage, nb * sizeof(float));
    for (int s = 0; s < narr; s++) {
        float *dst = s == 0 ? params : s <= want ? state[s - 1] : ema;
        for (int t = 0; t < m->ntensors; t++) {
            const gt_tensor_info *ti = &m->tensors[t];
            if (ti->len > 0)
                memcpy(dst + ti->offset, stage + (size_t)s * n + ti->offset, ti->len * sizeof(float));
        }
    }
    gt_free(stage);
    return 0;
}

int gt_ckpt_load(const char *path, const gt_model *m, float *params, float *buffers,
                 float *const *state, int nstate, gt_ckpt_meta *meta, unsigned flags, gt_err *e)
{
    return gt_ckpt_load_ema(path, m, params, NULL, buffers, state, nstate, meta, flags, e);
}

int gt_ckpt_load_ema(const char *path, const gt_model *m, float *params, float *ema,
                     float *buffers, float *const *state, int nstate, gt_ckpt_meta *meta,
                     unsigned flags, gt_err *e)
{
    int want = state && nstate > 0 ? nstate : 0;
    if (!path)
        return gt_fail(e, "checkpoint: no path");
    if (!m || !params)
        return gt_fail(e, "checkpoint %s: no model or parameter array to load into", path);
    if (want > 2)
        return gt_fail(e, "checkpoint %s: %d optimizer state arrays requested, at most 2 exist", path,
                       want);
    for (int s = 0; s < want; s++)
        if (!state[s])
            return gt_fail(e, "checkpoint %s: optimizer state array %d is missing", path, s);
    if (ckpt_check_model(m, path, e) != 0)
        return -1;
    ckpt_file cf;
    if (ckpt_open(&cf, path, e) != 0)
        return -1;
    int rc = ckpt_match_model(&cf, m, want, ema != NULL, e);
    if (rc == 0)
        rc = ckpt_read_tensors(&cf, m, want, params, ema, buffers, state, flags, e);
    if (rc == 0 && meta)
        *meta = cf.meta;
    ckpt_close(&cf);
    return rc;
}

int gt_ckpt_read_meta(const char *path, gt_ckpt_meta *meta, gt_err *e)
{
    return gt_ckpt_read_names(path, meta, NULL, e);
}

int gt_ckpt_read_names(const char *path, gt_ckpt_meta *meta, gt_class_name **names, gt_err *e)
{
    ckpt_file cf;
    if (names)
        *names = NULL;
    if (!path)
        return gt_fail(e, "checkpoint: no path");
    if (ckpt_open(&cf, path, e) != 0)
        return -1;
    if (meta)
        *meta = cf.meta;
    if (names) {
        *names = cf.names;
        cf.names = NULL;
    }
    ckpt_close(&cf);
    return 0;
}
