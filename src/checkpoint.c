/* checkpoint.c - safetensors checkpoints: written atomically with rotation of older copies, read
 * back with every length, offset and CRC checked before a byte reaches the caller.
 *
 * In file order: little-endian and UTF-8 helpers; the header writer (a growable text buffer that
 * escapes JSON strings); the save path (temp file, fsync, hard-link rotation, rename, folder
 * fsync); a strict JSON parser for the subset a safetensors header needs (objects, arrays,
 * strings, non-negative integers) that decodes strings in place and indexes object members by
 * key; header validation shared by gt_ckpt_read_meta and gt_ckpt_load; and the tensor reader,
 * which stages data in its own buffer so a damaged file leaves the caller's arrays untouched. */
#include "gputrain/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_FORMAT "gputrain-1"
#define CKPT_MAX_HEADER (100ull << 20) /* refused before anything is allocated */
#define CKPT_MAX_DEPTH 16              /* ours needs 3; more only means a hostile or broken file */
#define CKPT_MAX_VALUES (1 << 18)      /* JSON values; ours has a few thousand, and each costs a
                                          node, so a hostile header cannot cost gigabytes */
#define CKPT_MAX_KEEP 1000             /* as many as --keep accepts */
#define CKPT_MAX_RANK 4
#define CKPT_MAX_NAME 128              /* tensor names; ours are under 50 bytes */
#define CKPT_CHUNK 4096                /* floats converted or checked per step */

static const char *const ckpt_sgd_states[] = {"momentum_buffer"};
static const char *const ckpt_adam_states[] = {"exp_avg", "exp_avg_sq"};

/* How many state arrays an optimizer keeps and their torch.optim names; -1 when unknown. */
static int ckpt_state_names(const char *optimizer, const char *const **names)
{
    if (strcmp(optimizer, "sgd") == 0) {
        *names = ckpt_sgd_states;
        return 1;
    }
    if (strcmp(optimizer, "adam") == 0) {
        *names = ckpt_adam_states;
        return 2;
    }
    return -1;
}

/* ---- byte order and UTF-8 ---------------------------------------------------------------------- */

static int host_is_le(void)
{
    const uint32_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

static void put_u64le(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64le(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* Reverses the bytes of each float: little-endian <-> host on a big-endian host. */
static void swap_floats(void *p, size_t n)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++, b += 4) {
        unsigned char t0 = b[0], t1 = b[1];
        b[0] = b[3];
        b[1] = b[2];
        b[2] = t1;
        b[3] = t0;
    }
}

/* Length of the valid UTF-8 sequence at s (avail bytes readable), 0 when invalid: overlong forms,
 * surrogates and code points above U+10FFFF are refused, as strict JSON readers do. */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

static int utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t left = strlen(s);
    while (left > 0) {
        size_t n = utf8_len(p, left);
        if (n == 0)
            return 0;
        p += n;
        left -= n;
    }
    return 1;
}

static size_t utf8_put(char *w, uint32_t cp)
{
    unsigned char *o = (unsigned char *)w;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- the model, as both directions need it ----------------------------------------------------- */

static int ckpt_find_tensor(const gt_model *m, const char *name)
{
    for (int t = 0; t < m->ntensors; t++)
        if (strcmp(m->tensors[t].name, name) == 0)
            return t;
    return -1;
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
            strncmp(ti->name, "optim.", 6) == 0 || strcmp(ti->name, "__metadata__") == 0 ||
            !utf8_valid(ti->name))
            return gt_fail(e, "checkpoint %s: model tensor %d has an unusable name", path, t);
        if (ckpt_find_tensor(m, ti->name) != t)
            return gt_fail(e, "checkpoint %s: the model has two tensors named %s", path, ti->name);
        if (ti->rank < 0 || ti->rank > CKPT_MAX_RANK)
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

/* ---- writing the header ------------------------------------------------------------------------- */

typedef struct ckpt_text {
    char *s;
    size_t len, cap;
    int oom;
} ckpt_text;

static void text_put(ckpt_text *t, const char *s, size_t n)
{
    if (t->oom)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *s2 = realloc(t->s, cap);
        if (!s2) {
            t->oom = 1;
            return;
        }
        t->s = s2;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static void text_puts(ckpt_text *t, const char *s) { text_put(t, s, strlen(s)); }

static void text_printf(ckpt_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(ckpt_text *t, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        t->oom = 1; /* only short numbers go through here */
    else
        text_put(t, buf, (size_t)n);
}

/* A JSON string literal; s is valid UTF-8, which passes through unescaped. */
static void text_json_string(ckpt_text *t, const char *s)
{
    text_puts(t, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *esc = NULL;
        switch (*p) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default: break;
        }
        if (esc)
            text_put(t, esc, 2);
        else if (*p < 0x20)
            text_printf(t, "\\u%04x", *p);
        else
            text_put(t, (const char *)p, 1);
    }
    text_puts(t, "\"");
}

static void text_meta(ckpt_text *t, const char *key, const char *value)
{
    text_puts(t, ",");
    text_json_string(t, key);
    text_puts(t, ":");
    text_json_string(t, value);
}

static void text_meta_u64(ckpt_text *t, const char *key, uint64_t value)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, value);
    text_meta(t, key, buf);
}

/* One tensor of the file: a model tensor's values or one optimizer state array over it. */
typedef struct ckpt_out {
    char name[64];
    const float *data;
    const gt_tensor_info *info;
    uint32_t crc;
} ckpt_out;

static uint32_t crc_floats_le(const float *p, size_t n)
{
    if (host_is_le())
        return gt_crc32(0, p, n * sizeof(float));
    float buf[CKPT_CHUNK];
    uint32_t crc = 0;
    for (size_t i = 0; i < n; i += CKPT_CHUNK) {
        size_t k = n - i < CKPT_CHUNK ? n - i : CKPT_CHUNK;
        memcpy(buf, p + i, k * sizeof(float));
        swap_floats(buf, k);
        crc = gt_crc32(crc, buf, k * sizeof(float));
    }
    return crc;
}

/* The JSON header, padded with spaces so the data starts 8-byte aligned; NULL when out of memory. */
static char *ckpt_build_header(const gt_model *m, const gt_ckpt_meta *meta, const ckpt_out *out,
                               int nout, size_t *len)
{
    ckpt_text t = {0};
    char buf[64];
    text_puts(&t, "{\"__metadata__\":{\"format\":\"" CKPT_FORMAT "\"");
    text_meta(&t, "model", m->name);
    text_meta(&t, "model_spec", m->spec);
    snprintf(buf, sizeof buf, "%dx%dx%d", m->in_c, m->in_h, m->in_w);
    text_meta(&t, "in_shape", buf);
    text_meta_u64(&t, "nclasses", (uint64_t)m->nclasses);
    text_meta(&t, "mode", meta->mode);
    text_meta(&t, "optimizer", meta->optimizer);
    text_meta_u64(&t, "epoch", meta->epoch);
    text_meta_u64(&t, "step", meta->step);
    text_meta_u64(&t, "samples", meta->samples);
    text_meta_u64(&t, "updates", meta->updates);
    text_meta_u64(&t, "seed", meta->seed);
    snprintf(buf, sizeof buf, "%08" PRIx32, meta->data_fingerprint);
    text_meta(&t, "data_fingerprint", buf);
    for (int i = 0; i < nout; i++) {
        char key[80], crc[16];
        snprintf(key, sizeof key, "crc32.%s", out[i].name);
        snprintf(crc, sizeof crc, "%08" PRIx32, out[i].crc);
        text_meta(&t, key, crc);
    }
    text_puts(&t, "}");
    uint64_t offset = 0;
    for (int i = 0; i < nout; i++) {
        const gt_tensor_info *ti = out[i].info;
        text_puts(&t, ",");
        text_json_string(&t, out[i].name);
        text_puts(&t, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < ti->rank; d++)
            text_printf(&t, d ? ",%d" : "%d", ti->shape[d]);
        uint64_t end = offset + (uint64_t)ti->len * sizeof(float);
        text_printf(&t, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset, end);
        offset = end;
    }
    text_puts(&t, "}");
    while (t.len % 8 != 0)
        text_puts(&t, " ");
    if (t.oom) {
        free(t.s);
        return NULL;
    }
    *len = t.len;
    return t.s;
}

/* ---- saving --------------------------------------------------------------------------------------- */

/* 0, or the errno of a failed write (ENOSPC, EIO, EFBIG...). */
static int fd_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fd_write_floats_le(int fd, const float *p, size_t n)
{
    if (host_is_le())
        return fd_write_all(fd, p, n * sizeof(float));
    float buf[CKPT_CHUNK];
    for (size_t i = 0; i < n; i += CKPT_CHUNK) {
        size_t k = n - i < CKPT_CHUNK ? n - i : CKPT_CHUNK;
        memcpy(buf, p + i, k * sizeof(float));
        swap_floats(buf, k);
        int err = fd_write_all(fd, buf, k * sizeof(float));
        if (err)
            return err;
    }
    return 0;
}

/* Creates tmp exclusively. A file already there carries our pid, so (with one save at a time
 * per path in a process) it is the leftover of a killed process that had the same pid. */
static int ckpt_create(const char *tmp)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    return fd;
}

/* Writes, fsyncs and closes tmp; the caller removes it on failure. */
static int ckpt_write_tmp(const char *path, const char *tmp, const char *header, size_t hlen,
                          const ckpt_out *out, int nout, gt_err *e)
{
    int fd = ckpt_create(tmp);
    if (fd < 0)
        return gt_fail(e, "cannot save checkpoint %s: creating %s: %s", path, tmp, strerror(errno));
    unsigned char lenbuf[8];
    put_u64le(lenbuf, hlen);
    const char *what = "writing";
    int err = fd_write_all(fd, lenbuf, sizeof lenbuf);
    if (!err)
        err = fd_write_all(fd, header, hlen);
    for (int i = 0; i < nout && !err; i++)
        err = fd_write_floats_le(fd, out[i].data, out[i].info->len);
    if (!err && fsync(fd) != 0) {
        err = errno;
        what = "syncing";
    }
    if (close(fd) != 0 && !err) {
        err = errno;
        what = "closing";
    }
    if (err)
        return gt_fail(e, "cannot save checkpoint %s: %s %s: %s", path, what, tmp, strerror(err));
    return 0;
}

/* The fallback where the filesystem refuses hard links: a copy, itself written through a temp
 * file so `to` is always whole. */
static int ckpt_copy_file(const char *path, const char *to, gt_err *e)
{
    char tmp[PATH_MAX + 32]; /* to is PATH.k */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", to, (long)getpid());
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return gt_fail(e, "cannot save checkpoint %s: reading it to copy: %s", path, strerror(errno));
    int fd = ckpt_create(tmp);
    if (fd < 0) {
        int err = errno;
        close(in);
        return gt_fail(e, "cannot save checkpoint %s: creating %s: %s", path, tmp, strerror(err));
    }
    char buf[1 << 14];
    int err = 0;
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            err = r < 0 ? errno : 0;
            break;
        }
        if ((err = fd_write_all(fd, buf, (size_t)r)) != 0)
            break;
    }
    if (!err && fsync(fd) != 0)
        err = errno;
    if (close(fd) != 0 && !err)
        err = errno;
    close(in);
    if (!err && rename(tmp, to) != 0)
        err = errno;
    if (err) {
        unlink(tmp);
        return gt_fail(e, "cannot save checkpoint %s: copying it to %s: %s", path, to, strerror(err));
    }
    return 0;
}

/* PATH.(k-1) -> PATH.k down to PATH.1 -> PATH.2, then PATH.1 = PATH by hard link, so a crash at
 * any point still leaves PATH in place. */
static int ckpt_rotate(const char *path, int keep, gt_err *e)
{
    char from[PATH_MAX], to[PATH_MAX];
    for (int k = keep; k >= 2; k--) {
        snprintf(from, sizeof from, "%s.%d", path, k - 1);
        snprintf(to, sizeof to, "%s.%d", path, k);
        if (rename(from, to) != 0 && errno != ENOENT)
            return gt_fail(e, "cannot save checkpoint %s: renaming %s to %s: %s", path, from, to,
                           strerror(errno));
    }
    snprintf(to, sizeof to, "%s.1", path);
    int rc = link(path, to);
    /* EEXIST: keep is 1, or a killed save left PATH.1 and PATH.2 as links to one file, which
     * rename() leaves both in place. */
    if (rc != 0 && errno == EEXIST) {
        if (unlink(to) != 0 && errno != ENOENT)
            return gt_fail(e, "cannot save checkpoint %s: removing %s: %s", path, to, strerror(errno));
        rc = link(path, to);
    }
    if (rc == 0 || errno == ENOENT) /* ENOENT: no previous checkpoint to keep */
        return 0;
    if (errno == EPERM || errno == EOPNOTSUPP || errno == ENOSYS || errno == EMLINK || errno == EXDEV)
        return ckpt_copy_file(path, to, e);
    return gt_fail(e, "cannot save checkpoint %s: linking it as %s: %s", path, to, strerror(errno));
}

/* Makes the renames durable. */
static int ckpt_sync_folder(const char *path, gt_err *e)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0'; /* a file in the root folder */
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return gt_fail(e, "checkpoint %s: opening its folder %s: %s", path, dir, strerror(errno));
    int rc = fsync(fd), err = errno;
    close(fd);
    /* EINVAL: a filesystem that cannot sync folders; the rename is as durable as it gets there. */
    if (rc != 0 && err != EINVAL)
        return gt_fail(e, "checkpoint %s: syncing its folder %s: %s", path, dir, strerror(err));
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
    if (ckpt_check_model(m, path, e) != 0)
        return -1;
    if (!utf8_valid(m->name) || !utf8_valid(m->spec))
        return gt_fail(e, "checkpoint %s: the model's name or spec is not valid UTF-8", path);
    if (!ckpt_terminated(meta->mode, sizeof meta->mode) || !utf8_valid(meta->mode))
        return gt_fail(e, "checkpoint %s: the mode name is not terminated UTF-8", path);
    const char *const *names;
    int want = ckpt_terminated(meta->optimizer, sizeof meta->optimizer)
                   ? ckpt_state_names(meta->optimizer, &names) : -1;
    if (want < 0)
        return gt_fail(e, "checkpoint %s: optimizer must be sgd or adam", path);
    if (nstate != 0 && nstate != want)
        return gt_fail(e, "checkpoint %s: %s keeps %d state arrays, not %d", path, meta->optimizer,
                       want, nstate);
    for (int s = 0; s < nstate; s++)
        if (!state || !state[s])
            return gt_fail(e, "checkpoint %s: optimizer state array %d is missing", path, s);
    return 0;
}

/* The metadata's model fields (model, model_spec, in_shape, nclasses) are taken from m, which is
 * what describes the tensors written; meta supplies the training position and identity. */
int gt_ckpt_save(const char *path, const gt_model *m, const float *params, float *const *state,
                 int nstate, const gt_ckpt_meta *meta, int keep, gt_err *e)
{
    if (ckpt_check_save_args(path, m, params, state, nstate, meta, keep, e) != 0)
        return -1;
    const char *const *names;
    ckpt_state_names(meta->optimizer, &names);
    ckpt_out *out = calloc((size_t)m->ntensors * (1 + (size_t)nstate) + 1, sizeof *out);
    if (!out)
        return gt_fail(e, "cannot save checkpoint %s: out of memory", path);
    int nout = 0;
    for (int s = 0; s <= nstate; s++) {
        for (int t = 0; t < m->ntensors; t++, nout++) {
            const gt_tensor_info *ti = &m->tensors[t];
            if (s == 0)
                snprintf(out[nout].name, sizeof out[nout].name, "%s", ti->name);
            else
                snprintf(out[nout].name, sizeof out[nout].name, "optim.%s.%s", names[s - 1], ti->name);
            out[nout].data = (s == 0 ? params : state[s - 1]) + ti->offset;
            out[nout].info = ti;
            out[nout].crc = crc_floats_le(out[nout].data, ti->len);
        }
    }
    size_t hlen;
    char *header = ckpt_build_header(m, meta, out, nout, &hlen);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int rc = header ? ckpt_write_tmp(path, tmp, header, hlen, out, nout, e)
                    : gt_fail(e, "cannot save checkpoint %s: out of memory", path);
    free(header);
    free(out);
    if (rc == 0 && keep > 0 && ckpt_rotate(path, keep, e) != 0)
        rc = -1;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = gt_fail(e, "cannot save checkpoint %s: renaming %s over it: %s", path, tmp,
                     strerror(errno));
    if (rc != 0) {
        unlink(tmp);
        return -1;
    }
    return ckpt_sync_folder(path, e);
}

/* ---- a strict JSON parser for safetensors headers ---------------------------------------------- */

enum { JS_OBJECT, JS_ARRAY, JS_STRING, JS_INT };

typedef struct js_node {
    int type;
    const char *key; /* member name when the parent is an object */
    const char *str; /* JS_STRING: decoded in place, NUL-terminated */
    uint64_t num;    /* JS_INT */
    int child, next; /* first child and next sibling, -1 for none */
    int count;       /* children */
    int sorted;      /* JS_OBJECT: where its members start in js_doc.index, sorted by key */
} js_node;

typedef struct js_member {
    const char *key;
    int node;
} js_member;

typedef struct js_doc {
    char *text, *p, *end;
    js_node *nodes; /* nodes[0] is the root */
    int n, cap;
    js_member *index;
    int nindex, index_cap;
    const char *err; /* the first problem found, and where */
    size_t err_at;
} js_doc;

static int js_fail(js_doc *d, const char *what)
{
    if (!d->err) {
        d->err = what;
        d->err_at = (size_t)(d->p - d->text);
    }
    return -1;
}

static void js_free(js_doc *d)
{
    free(d->nodes);
    free(d->index);
}

static int js_at(const js_doc *d, char c) { return d->p < d->end && *d->p == c; }

static void js_skip_ws(js_doc *d)
{
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r'))
        d->p++;
}

static int js_new(js_doc *d, int type)
{
    if (d->n == CKPT_MAX_VALUES)
        return js_fail(d, "too many JSON values");
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        js_node *nodes = realloc(d->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes)
            return js_fail(d, "out of memory");
        d->nodes = nodes;
        d->cap = cap;
    }
    d->nodes[d->n] = (js_node){.type = type, .child = -1, .next = -1};
    return d->n++;
}

static int js_hex4(const char *s, const char *end, uint32_t *v)
{
    if (end - s < 4)
        return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0)
            return -1;
        *v = *v << 4 | (uint32_t)x;
    }
    return 0;
}

/* Decodes the escape at *rp to *wp. Every escape is at least as long as its UTF-8 output, so
 * decoding in place never overtakes the input. */
static int js_parse_escape(js_doc *d, char **rp, char **wp)
{
    char *r = *rp + 1;
    d->p = *rp;
    if (r >= d->end)
        return js_fail(d, "unterminated string");
    uint32_t cp;
    switch (*r++) {
    case '"': cp = '"'; break;
    case '\\': cp = '\\'; break;
    case '/': cp = '/'; break;
    case 'b': cp = '\b'; break;
    case 'f': cp = '\f'; break;
    case 'n': cp = '\n'; break;
    case 'r': cp = '\r'; break;
    case 't': cp = '\t'; break;
    case 'u':
        if (js_hex4(r, d->end, &cp) != 0)
            return js_fail(d, "bad \\u escape");
        r += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (d->end - r < 6 || r[0] != '\\' || r[1] != 'u' || js_hex4(r + 2, d->end, &lo) != 0 ||
                lo < 0xDC00 || lo > 0xDFFF)
                return js_fail(d, "unpaired surrogate escape");
            r += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return js_fail(d, "unpaired surrogate escape");
        } else if (cp == 0) {
            return js_fail(d, "\\u0000 in a string");
        }
        break;
    default:
        return js_fail(d, "bad escape");
    }
    *wp += utf8_put(*wp, cp);
    *rp = r;
    return 0;
}

static int js_parse_string(js_doc *d, const char **out)
{
    if (!js_at(d, '"'))
        return js_fail(d, "expected a string");
    char *r = d->p + 1, *w = r;
    const char *start = w;
    while (r < d->end && *r != '"') {
        unsigned char c = (unsigned char)*r;
        if (c == '\\') {
            if (js_parse_escape(d, &r, &w) != 0)
                return -1;
            continue;
        }
        size_t n = c < 0x20 ? 0 : utf8_len((const unsigned char *)r, (size_t)(d->end - r));
        if (n == 0) {
            d->p = r;
            return js_fail(d, c < 0x20 ? "control character in a string" : "invalid UTF-8");
        }
        memmove(w, r, n);
        w += n;
        r += n;
    }
    if (r >= d->end) {
        d->p = r;
        return js_fail(d, "unterminated string");
    }
    d->p = r + 1;
    *w = '\0'; /* at most on the closing quote, already consumed */
    *out = start;
    return 0;
}

static int js_parse_int(js_doc *d, uint64_t *v)
{
    const char *s = d->p;
    if (s >= d->end || *s < '0' || *s > '9')
        return js_fail(d, "expected an object, array, string or non-negative integer");
    if (*s == '0' && s + 1 < d->end && s[1] >= '0' && s[1] <= '9')
        return js_fail(d, "number with a leading zero");
    uint64_t x = 0;
    for (; s < d->end && *s >= '0' && *s <= '9'; s++) {
        unsigned digit = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - digit) / 10)
            return js_fail(d, "integer too large");
        x = x * 10 + digit;
    }
    d->p = (char *)s;
    if (js_at(d, '.') || js_at(d, 'e') || js_at(d, 'E'))
        return js_fail(d, "only integers are allowed");
    *v = x;
    return 0;
}

static int js_cmp_member(const void *a, const void *b)
{
    return strcmp(((const js_member *)a)->key, ((const js_member *)b)->key);
}

/* Sorts an object's members by key for lookups and refuses duplicate keys, whose meaning JSON
 * leaves open. */
static int js_index_object(js_doc *d, int node)
{
    int count = d->nodes[node].count;
    d->nodes[node].sorted = d->nindex;
    if (count == 0)
        return 0;
    if (d->nindex + count > d->index_cap) {
        int cap = d->index_cap ? d->index_cap : 64;
        while (cap < d->nindex + count)
            cap *= 2;
        js_member *index = realloc(d->index, (size_t)cap * sizeof *index);
        if (!index)
            return js_fail(d, "out of memory");
        d->index = index;
        d->index_cap = cap;
    }
    js_member *mem = d->index + d->nindex;
    int i = 0;
    for (int c = d->nodes[node].child; c >= 0; c = d->nodes[c].next)
        mem[i++] = (js_member){d->nodes[c].key, c};
    qsort(mem, (size_t)count, sizeof *mem, js_cmp_member);
    for (i = 1; i < count; i++)
        if (strcmp(mem[i - 1].key, mem[i].key) == 0)
            return js_fail(d, "duplicate key");
    d->nindex += count;
    return 0;
}

static int js_parse_value(js_doc *d, int depth);

/* Members or elements up to the closing bracket; d->p is on the opening one. */
static int js_parse_container(js_doc *d, int node, int depth)
{
    int is_object = d->nodes[node].type == JS_OBJECT;
    char close = is_object ? '}' : ']';
    int last = -1;
    d->p++;
    js_skip_ws(d);
    if (!js_at(d, close)) {
        for (;;) {
            const char *key = NULL;
            if (is_object) {
                js_skip_ws(d);
                if (js_parse_string(d, &key) != 0)
                    return -1;
                js_skip_ws(d);
                if (!js_at(d, ':'))
                    return js_fail(d, "expected ':'");
                d->p++;
            }
            int child = js_parse_value(d, depth + 1);
            if (child < 0)
                return -1;
            d->nodes[child].key = key;
            if (last < 0)
                d->nodes[node].child = child;
            else
                d->nodes[last].next = child;
            last = child;
            d->nodes[node].count++;
            js_skip_ws(d);
            if (!js_at(d, ','))
                break;
            d->p++;
        }
        if (!js_at(d, close))
            return js_fail(d, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    d->p++;
    return is_object ? js_index_object(d, node) : 0;
}

/* The node index of the value at d->p, or -1. */
static int js_parse_value(js_doc *d, int depth)
{
    js_skip_ws(d);
    if (depth > CKPT_MAX_DEPTH)
        return js_fail(d, "nested too deeply");
    int type = js_at(d, '{') ? JS_OBJECT : js_at(d, '[') ? JS_ARRAY : js_at(d, '"') ? JS_STRING : JS_INT;
    int node = js_new(d, type);
    if (node < 0)
        return -1;
    int rc;
    if (type == JS_OBJECT || type == JS_ARRAY) {
        rc = js_parse_container(d, node, depth);
    } else if (type == JS_STRING) {
        const char *s = NULL;
        rc = js_parse_string(d, &s);
        d->nodes[node].str = s;
    } else {
        uint64_t v = 0;
        rc = js_parse_int(d, &v);
        d->nodes[node].num = v;
    }
    return rc != 0 ? -1 : node;
}

/* Parses text[0..len) in place; the root is nodes[0]. */
static int js_parse(js_doc *d, char *text, size_t len)
{
    *d = (js_doc){.text = text, .p = text, .end = text + len};
    if (js_parse_value(d, 0) < 0)
        return -1;
    js_skip_ws(d);
    return d->p == d->end ? 0 : js_fail(d, "junk after the JSON value");
}

/* The member of object node named key, or -1. */
static int js_get(const js_doc *d, int node, const char *key)
{
    const js_node *o = &d->nodes[node];
    js_member want = {key, -1};
    const js_member *hit = o->count == 0 ? NULL
        : bsearch(&want, d->index + o->sorted, (size_t)o->count, sizeof want, js_cmp_member);
    return hit ? hit->node : -1;
}

/* ---- reading and validating a checkpoint's header ----------------------------------------------- */

typedef struct ckpt_entry {
    const char *name;
    uint64_t begin, end; /* in the data buffer */
    int rank;
    int shape[CKPT_MAX_RANK];
    uint32_t crc;
    int tensor, slot; /* gt_ckpt_load: model tensor and array (0 params, s state s-1) it fills */
} ckpt_entry;

typedef struct ckpt_file {
    const char *path;
    int fd;
    uint64_t data_start, data_size;
    char *header;
    js_doc doc;
    int meta_node;
    ckpt_entry *entries; /* sorted by offset */
    int nentries;
    gt_ckpt_meta meta;
} ckpt_file;

static void ckpt_close(ckpt_file *cf)
{
    if (cf->fd >= 0)
        close(cf->fd);
    js_free(&cf->doc);
    free(cf->header);
    free(cf->entries);
}

/* Bytes read (fewer only at the end of the file), or -1 with errno. */
static ssize_t fd_pread_all(int fd, void *buf, size_t n, uint64_t offset)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
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

static int parse_hex32(const char *s, uint32_t *v)
{
    uint32_t hi, lo;
    if (strlen(s) != 8 || js_hex4(s, s + 8, &hi) != 0 || js_hex4(s + 4, s + 8, &lo) != 0)
        return -1;
    *v = hi << 16 | lo;
    return 0;
}

static const char *ckpt_meta_str(const ckpt_file *cf, const char *key)
{
    int n = js_get(&cf->doc, cf->meta_node, key);
    return n < 0 ? NULL : cf->doc.nodes[n].str;
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
        ckpt_meta_u64(cf, "epoch", 0, UINT32_MAX, &epoch, e) != 0 ||
        ckpt_meta_u64(cf, "step", 0, UINT64_MAX, &mt->step, e) != 0 ||
        ckpt_meta_u64(cf, "samples", 0, UINT64_MAX, &mt->samples, e) != 0 ||
        ckpt_meta_u64(cf, "updates", 0, UINT64_MAX, &mt->updates, e) != 0 ||
        ckpt_meta_u64(cf, "seed", 0, UINT64_MAX, &mt->seed, e) != 0)
        return -1;
    if (ckpt_state_names(mt->optimizer, &names) < 0)
        return gt_fail(e, "checkpoint %s: unknown optimizer \"%s\"", cf->path, mt->optimizer);
    if (!fp || parse_hex32(fp, &mt->data_fingerprint) != 0)
        return gt_fail(e, "checkpoint %s: metadata \"data_fingerprint\" is missing or not 8 hex digits",
                       cf->path);
    mt->nclasses = (int)nclasses;
    mt->epoch = (uint32_t)epoch;
    return 0;
}

static int ckpt_parse_entry(const ckpt_file *cf, int node, ckpt_entry *ent, gt_err *e)
{
    const js_doc *d = &cf->doc;
    const char *name = d->nodes[node].key;
    ent->name = name;
    if (strlen(name) > CKPT_MAX_NAME)
        return gt_fail(e, "checkpoint %s: a tensor name is longer than %d bytes", cf->path,
                       CKPT_MAX_NAME);
    int dt = d->nodes[node].type == JS_OBJECT ? js_get(d, node, "dtype") : -1;
    int sh = dt >= 0 ? js_get(d, node, "shape") : -1;
    int of = sh >= 0 ? js_get(d, node, "data_offsets") : -1;
    if (of < 0 || d->nodes[node].count != 3 || d->nodes[dt].type != JS_STRING ||
        d->nodes[sh].type != JS_ARRAY || d->nodes[of].type != JS_ARRAY || d->nodes[of].count != 2)
        return gt_fail(e, "checkpoint %s: tensor %s is not {dtype, shape, data_offsets}", cf->path, name);
    if (strcmp(d->nodes[dt].str, "F32") != 0)
        return gt_fail(e, "checkpoint %s: tensor %s has dtype %.20s, not F32", cf->path, name,
                       d->nodes[dt].str);
    if (d->nodes[sh].count > CKPT_MAX_RANK)
        return gt_fail(e, "checkpoint %s: tensor %s has rank %d, more than %d", cf->path, name,
                       d->nodes[sh].count, CKPT_MAX_RANK);
    uint64_t bytes = sizeof(float);
    ent->rank = 0;
    for (int c = d->nodes[sh].child; c >= 0; c = d->nodes[c].next) {
        uint64_t dim = d->nodes[c].num;
        if (d->nodes[c].type != JS_INT || dim > INT_MAX || (dim && bytes > UINT64_MAX / dim))
            return gt_fail(e, "checkpoint %s: tensor %s has a bad shape", cf->path, name);
        bytes *= dim;
        ent->shape[ent->rank++] = (int)dim;
    }
    int b = d->nodes[of].child, en = d->nodes[b].next;
    if (d->nodes[b].type != JS_INT || d->nodes[en].type != JS_INT)
        return gt_fail(e, "checkpoint %s: tensor %s has bad data_offsets", cf->path, name);
    ent->begin = d->nodes[b].num;
    ent->end = d->nodes[en].num;
    if (ent->end < ent->begin || ent->end - ent->begin != bytes)
        return gt_fail(e, "checkpoint %s: tensor %s: data_offsets [%" PRIu64 ",%" PRIu64 "] do not "
                       "hold its shape's %" PRIu64 " bytes", cf->path, name, ent->begin, ent->end, bytes);
    return 0;
}

static int ckpt_cmp_entry(const void *a, const void *b)
{
    const ckpt_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Tensors must tile the data buffer exactly, as Python's safetensors requires. */
static int ckpt_check_layout(ckpt_file *cf, gt_err *e)
{
    qsort(cf->entries, (size_t)cf->nentries, sizeof *cf->entries, ckpt_cmp_entry);
    uint64_t at = 0;
    for (int i = 0; i < cf->nentries; i++) {
        const ckpt_entry *ent = &cf->entries[i];
        if (ent->begin < at)
            return gt_fail(e, "checkpoint %s: tensor %s overlaps the one before it", cf->path, ent->name);
        if (ent->begin > at)
            return gt_fail(e, "checkpoint %s: hole of %" PRIu64 " bytes before tensor %s", cf->path,
                           ent->begin - at, ent->name);
        at = ent->end;
    }
    if (at > cf->data_size)
        return gt_fail(e, "checkpoint %s is truncated: its tensors need %" PRIu64 " bytes of data, "
                       "it has %" PRIu64, cf->path, at, cf->data_size);
    if (at < cf->data_size)
        return gt_fail(e, "checkpoint %s has %" PRIu64 " trailing bytes after its tensors", cf->path,
                       cf->data_size - at);
    return 0;
}

/* Every tensor has a CRC, and every CRC names a tensor. */
static int ckpt_parse_crcs(ckpt_file *cf, gt_err *e)
{
    const js_doc *d = &cf->doc;
    for (int i = 0; i < cf->nentries; i++) {
        char key[CKPT_MAX_NAME + 8];
        snprintf(key, sizeof key, "crc32.%s", cf->entries[i].name);
        const char *s = ckpt_meta_str(cf, key);
        if (!s || parse_hex32(s, &cf->entries[i].crc) != 0)
            return gt_fail(e, "checkpoint %s: metadata \"%s\" is missing or not 8 hex digits",
                           cf->path, key);
    }
    for (int c = d->nodes[cf->meta_node].child; c >= 0; c = d->nodes[c].next) {
        const char *key = d->nodes[c].key;
        if (strncmp(key, "crc32.", 6) == 0 &&
            (strcmp(key + 6, "__metadata__") == 0 || js_get(d, 0, key + 6) < 0))
            return gt_fail(e, "checkpoint %s: metadata \"%.80s\" names no tensor", cf->path, key);
    }
    return 0;
}

static int ckpt_check_header(ckpt_file *cf, gt_err *e)
{
    const js_doc *d = &cf->doc;
    if (d->nodes[0].type != JS_OBJECT)
        return gt_fail(e, "checkpoint %s: the header is not a JSON object", cf->path);
    cf->meta_node = js_get(d, 0, "__metadata__");
    if (cf->meta_node < 0 || d->nodes[cf->meta_node].type != JS_OBJECT)
        return gt_fail(e, "checkpoint %s: not a gputrain checkpoint (no __metadata__)", cf->path);
    for (int c = d->nodes[cf->meta_node].child; c >= 0; c = d->nodes[c].next)
        if (d->nodes[c].type != JS_STRING)
            return gt_fail(e, "checkpoint %s: metadata \"%.80s\" is not a string", cf->path,
                           d->nodes[c].key);
    const char *format = ckpt_meta_str(cf, "format");
    if (!format || strcmp(format, CKPT_FORMAT) != 0)
        return gt_fail(e, "checkpoint %s: not a gputrain checkpoint (format is not %s)", cf->path,
                       CKPT_FORMAT);
    cf->entries = calloc((size_t)d->nodes[0].count + 1, sizeof *cf->entries);
    if (!cf->entries)
        return gt_fail(e, "checkpoint %s: out of memory", cf->path);
    for (int c = d->nodes[0].child; c >= 0; c = d->nodes[c].next) {
        if (c == cf->meta_node)
            continue;
        if (ckpt_parse_entry(cf, c, &cf->entries[cf->nentries++], e) != 0)
            return -1;
    }
    if (ckpt_check_layout(cf, e) != 0 || ckpt_parse_meta(cf, e) != 0)
        return -1;
    return ckpt_parse_crcs(cf, e);
}

/* Opens path and validates everything but the tensor bytes. On failure cf needs no ckpt_close. */
static int ckpt_open(ckpt_file *cf, const char *path, gt_err *e)
{
    *cf = (ckpt_file){.path = path, .fd = -1};
    struct stat st;
    unsigned char lenbuf[8];
    cf->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (cf->fd < 0)
        return gt_fail(e, "cannot open checkpoint %s: %s", path, strerror(errno));
    int rc = -1;
    if (fstat(cf->fd, &st) != 0) {
        gt_fail(e, "checkpoint %s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        gt_fail(e, "checkpoint %s is not a regular file", path);
    } else if (st.st_size < 8 || fd_pread_all(cf->fd, lenbuf, 8, 0) != 8) {
        gt_fail(e, "checkpoint %s is too short (%lld bytes) to be a checkpoint", path,
                (long long)st.st_size);
    } else {
        uint64_t size = (uint64_t)st.st_size, hlen = get_u64le(lenbuf);
        ssize_t got;
        uint64_t limit = size - 8 < CKPT_MAX_HEADER ? size - 8 : CKPT_MAX_HEADER;
        if (hlen == 0 || hlen > limit) {
            gt_fail(e, "checkpoint %s: header length %" PRIu64 " is not in 1..%" PRIu64 " (file of %"
                    PRIu64 " bytes): not a safetensors file or truncated", path, hlen, limit, size);
        } else if (!(cf->header = malloc(hlen))) {
            gt_fail(e, "checkpoint %s: out of memory for a %" PRIu64 "-byte header", path, hlen);
        } else if ((got = fd_pread_all(cf->fd, cf->header, hlen, 8)) != (ssize_t)hlen) {
            gt_fail(e, "checkpoint %s: cannot read its header: %s", path,
                    got < 0 ? strerror(errno) : "file shrank");
        } else if (js_parse(&cf->doc, cf->header, hlen) != 0) {
            gt_fail(e, "checkpoint %s: bad JSON header at byte %zu: %s", path, 8 + cf->doc.err_at,
                    cf->doc.err);
        } else {
            cf->data_start = 8 + hlen;
            cf->data_size = size - 8 - hlen;
            rc = ckpt_check_header(cf, e);
        }
    }
    if (rc != 0)
        ckpt_close(cf);
    return rc;
}

int gt_ckpt_read_meta(const char *path, gt_ckpt_meta *meta, gt_err *e)
{
    ckpt_file cf;
    if (!path)
        return gt_fail(e, "checkpoint: no path");
    if (ckpt_open(&cf, path, e) != 0)
        return -1;
    if (meta)
        *meta = cf.meta;
    ckpt_close(&cf);
    return 0;
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

/* The model tensor a file tensor fills and which array (0: params, s: state s-1), or -1. */
static int ckpt_target(const char *name, const gt_model *m, const char *const *states, int nstates,
                       int *slot)
{
    *slot = 0;
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

/* Maps every file tensor onto the model and checks that what the caller asked for is there. */
static int ckpt_match_model(ckpt_file *cf, const gt_model *m, int want, gt_err *e)
{
    if (ckpt_check_identity(cf, m, e) != 0)
        return -1;
    const char *const *names;
    int fstates = ckpt_state_names(cf->meta.optimizer, &names);
    if (want > 0 && want != fstates)
        return gt_fail(e, "checkpoint %s holds %s optimizer state, this run uses %s", cf->path,
                       cf->meta.optimizer, want == 1 ? "sgd" : "adam");
    unsigned char found[3][GT_MAX_TENSORS] = {{0}};
    for (int i = 0; i < cf->nentries; i++) {
        ckpt_entry *ent = &cf->entries[i];
        int t = ckpt_target(ent->name, m, names, fstates, &ent->slot);
        if (t < 0)
            return gt_fail(e, "checkpoint %s has tensor %s, which model %s does not have", cf->path,
                           ent->name, m->name);
        const gt_tensor_info *ti = &m->tensors[t];
        if (ent->rank != ti->rank || memcmp(ent->shape, ti->shape, (size_t)ti->rank * sizeof(int)) != 0) {
            char have[64], need[64];
            ckpt_shape_text(have, sizeof have, ent->rank, ent->shape);
            ckpt_shape_text(need, sizeof need, ti->rank, ti->shape);
            return gt_fail(e, "checkpoint %s: tensor %s has shape %s, model %s wants %s", cf->path,
                           ent->name, have, m->name, need);
        }
        found[ent->slot][t] = 1;
        ent->tensor = ent->slot <= want ? t : -1;
    }
    for (int s = 0; s <= want; s++)
        for (int t = 0; t < m->ntensors; t++)
            if (!found[s][t]) {
                if (s == 0)
                    return gt_fail(e, "checkpoint %s lacks tensor %s", cf->path, m->tensors[t].name);
                return gt_fail(e, "checkpoint %s lacks optimizer state optim.%s.%s", cf->path,
                               names[s - 1], m->tensors[t].name);
            }
    return 0;
}

/* Reads one tensor to dst, or through a scratch buffer when dst is NULL, and checks its CRC. */
static int ckpt_read_tensor(const ckpt_file *cf, const ckpt_entry *ent, char *dst, gt_err *e)
{
    float scratch[CKPT_CHUNK];
    uint64_t left = ent->end - ent->begin, at = cf->data_start + ent->begin;
    uint32_t crc = 0;
    while (left > 0) {
        size_t n = dst ? (size_t)left : left < sizeof scratch ? (size_t)left : sizeof scratch;
        char *buf = dst ? dst : (char *)scratch;
        ssize_t r = fd_pread_all(cf->fd, buf, n, at);
        if (r != (ssize_t)n)
            return gt_fail(e, "checkpoint %s: reading tensor %s: %s", cf->path, ent->name,
                           r < 0 ? strerror(errno) : "file shrank");
        crc = gt_crc32(crc, buf, n);
        left -= n;
        at += n;
    }
    if (crc != ent->crc)
        return gt_fail(e, "checkpoint %s: tensor %s fails its CRC32: file damaged", cf->path, ent->name);
    return 0;
}

/* One pass over the data in file order into a staging buffer; the caller's arrays are written
 * only once every CRC has passed. */
static int ckpt_read_tensors(const ckpt_file *cf, const gt_model *m, int want, float *params,
                             float *const *state, gt_err *e)
{
    size_t n = m->nparams;
    float *stage = NULL;
    if (n > 0) {
        if (n > SIZE_MAX / sizeof(float) / (1 + (size_t)want) ||
            !(stage = gt_alloc(n * (1 + (size_t)want) * sizeof(float))))
            return gt_fail(e, "checkpoint %s: out of memory staging %zu parameters", cf->path, n);
    }
    for (int i = 0; i < cf->nentries; i++) {
        const ckpt_entry *ent = &cf->entries[i];
        char *dst = NULL;
        if (ent->tensor >= 0)
            dst = (char *)(stage + (size_t)ent->slot * n + m->tensors[ent->tensor].offset);
        if (ckpt_read_tensor(cf, ent, dst, e) != 0) {
            gt_free(stage);
            return -1;
        }
    }
    if (!host_is_le() && stage)
        swap_floats(stage, n * (1 + (size_t)want));
    for (int s = 0; s <= want; s++) {
        float *dst = s == 0 ? params : state[s - 1];
        for (int t = 0; t < m->ntensors; t++) {
            const gt_tensor_info *ti = &m->tensors[t];
            if (ti->len > 0)
                memcpy(dst + ti->offset, stage + (size_t)s * n + ti->offset, ti->len * sizeof(float));
        }
    }
    gt_free(stage);
    return 0;
}

int gt_ckpt_load(const char *path, const gt_model *m, float *params, float *const *state,
                 int nstate, gt_ckpt_meta *meta, gt_err *e)
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
    int rc = ckpt_match_model(&cf, m, want, e);
    if (rc == 0)
        rc = ckpt_read_tensors(&cf, m, want, params, state, e);
    if (rc == 0 && meta)
        *meta = cf.meta;
    ckpt_close(&cf);
    return rc;
}
