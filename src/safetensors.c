/* safetensors.c - the safetensors format (see safetensors.h): byte order, the header writer (a
 * growable text buffer that escapes JSON strings), and the reader, which checks every length and
 * offset before a byte of data is read. */
#include "gputrain/safetensors.h"

#include "gputrain/atomic_file.h"

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

#define ST_CHUNK 4096                /* floats converted or checked per step */

/* ---- byte order ------------------------------------------------------------------------------- */

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

void gt_st_floats_from_le(float *p, size_t n)
{
    if (!host_is_le())
        swap_floats(p, n);
}

uint32_t gt_st_crc_floats_le(const float *p, size_t n)
{
    if (host_is_le())
        return gt_crc32(0, p, n * sizeof(float));
    float buf[ST_CHUNK];
    uint32_t crc = 0;
    for (size_t i = 0; i < n; i += ST_CHUNK) {
        size_t k = n - i < ST_CHUNK ? n - i : ST_CHUNK;
        memcpy(buf, p + i, k * sizeof(float));
        swap_floats(buf, k);
        crc = gt_crc32(crc, buf, k * sizeof(float));
    }
    return crc;
}

/* ---- writing the header ------------------------------------------------------------------------- */

typedef struct st_text {
    char *s;
    size_t len, cap;
    int oom;
} st_text;

static void text_put(st_text *t, const char *s, size_t n)
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

static void text_puts(st_text *t, const char *s) { text_put(t, s, strlen(s)); }

static void text_printf(st_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(st_text *t, const char *fmt, ...)
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
static void text_json_string(st_text *t, const char *s)
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

char *gt_st_build_header(const gt_st_kv *meta, int nmeta, const gt_st_out *out, int nout,
                         size_t *len)
{
    st_text t = {0};
    text_puts(&t, "{\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
        text_puts(&t, i ? "," : "");
        text_json_string(&t, meta[i].key);
        text_puts(&t, ":");
        text_json_string(&t, meta[i].value);
    }
    text_puts(&t, "}");
    uint64_t offset = 0;
    for (int i = 0; i < nout; i++) {
        text_puts(&t, ",");
        text_json_string(&t, out[i].name);
        text_puts(&t, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < out[i].rank; d++)
            text_printf(&t, d ? ",%d" : "%d", out[i].shape[d]);
        uint64_t end = offset + (uint64_t)out[i].len * sizeof(float);
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

static int st_write_floats_le(int fd, const float *p, size_t n)
{
    if (host_is_le())
        return gt_fd_write_all(fd, p, n * sizeof(float));
    float buf[ST_CHUNK];
    for (size_t i = 0; i < n; i += ST_CHUNK) {
        size_t k = n - i < ST_CHUNK ? n - i : ST_CHUNK;
        memcpy(buf, p + i, k * sizeof(float));
        swap_floats(buf, k);
        int err = gt_fd_write_all(fd, buf, k * sizeof(float));
        if (err)
            return err;
    }
    return 0;
}

int gt_st_write(int fd, const char *header, size_t hlen, const gt_st_out *out, int nout)
{
    unsigned char lenbuf[8];
    put_u64le(lenbuf, hlen);
    int err = gt_fd_write_all(fd, lenbuf, sizeof lenbuf);
    if (!err)
        err = gt_fd_write_all(fd, header, hlen);
    for (int i = 0; i < nout && !err; i++)
        err = st_write_floats_le(fd, out[i].data, out[i].len);
    return err;
}

/* ---- reading ------------------------------------------------------------------------------------ */

void gt_st_close(gt_st_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    gt_json_free(&f->doc);
    free(f->header);
    free(f->raw);
    free(f->entries);
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

const char *gt_st_meta_str(const gt_st_file *f, const char *key)
{
    int n = gt_json_get(&f->doc, f->meta_node, key);
    return n < 0 ? NULL : f->doc.nodes[n].str;
}

static int st_parse_entry(const gt_st_file *cf, int node, gt_st_entry *ent, gt_err *e)
{
    const gt_json_doc *d = &cf->doc;
    const char *name = d->nodes[node].key;
    ent->name = name;
    if (strlen(name) > GT_ST_MAX_NAME)
        return gt_fail(e, "checkpoint %s: a tensor name is longer than %d bytes", cf->path,
                       GT_ST_MAX_NAME);
    int dt = d->nodes[node].type == GT_JSON_OBJECT ? gt_json_get(d, node, "dtype") : -1;
    int sh = dt >= 0 ? gt_json_get(d, node, "shape") : -1;
    int of = sh >= 0 ? gt_json_get(d, node, "data_offsets") : -1;
    if (of < 0 || d->nodes[node].count != 3 || d->nodes[dt].type != GT_JSON_STRING ||
        d->nodes[sh].type != GT_JSON_ARRAY || d->nodes[of].type != GT_JSON_ARRAY || d->nodes[of].count != 2)
        return gt_fail(e, "checkpoint %s: tensor %s is not {dtype, shape, data_offsets}", cf->path, name);
    if (strcmp(d->nodes[dt].str, "F32") != 0)
        return gt_fail(e, "checkpoint %s: tensor %s has dtype %.20s, not F32", cf->path, name,
                       d->nodes[dt].str);
    if (d->nodes[sh].count > GT_ST_MAX_RANK)
        return gt_fail(e, "checkpoint %s: tensor %s has rank %d, more than %d", cf->path, name,
                       d->nodes[sh].count, GT_ST_MAX_RANK);
    uint64_t bytes = sizeof(float);
    ent->rank = 0;
    for (int c = d->nodes[sh].child; c >= 0; c = d->nodes[c].next) {
        uint64_t dim = d->nodes[c].num;
        if (d->nodes[c].type != GT_JSON_INT || dim > INT_MAX || (dim && bytes > UINT64_MAX / dim))
            return gt_fail(e, "checkpoint %s: tensor %s has a bad shape", cf->path, name);
        bytes *= dim;
        ent->shape[ent->rank++] = (int)dim;
    }
    int b = d->nodes[of].child, en = d->nodes[b].next;
    if (d->nodes[b].type != GT_JSON_INT || d->nodes[en].type != GT_JSON_INT)
        return gt_fail(e, "checkpoint %s: tensor %s has bad data_offsets", cf->path, name);
    ent->begin = d->nodes[b].num;
    ent->end = d->nodes[en].num;
    if (ent->end < ent->begin || ent->end - ent->begin != bytes)
        return gt_fail(e, "checkpoint %s: tensor %s: data_offsets [%" PRIu64 ",%" PRIu64 "] do not "
                       "hold its shape's %" PRIu64 " bytes", cf->path, name, ent->begin, ent->end, bytes);
    return 0;
}

static int st_cmp_entry(const void *a, const void *b)
{
    const gt_st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Tensors must tile the data buffer exactly, as Python's safetensors requires. */
static int st_check_layout(gt_st_file *cf, gt_err *e)
{
    qsort(cf->entries, (size_t)cf->nentries, sizeof *cf->entries, st_cmp_entry);
    uint64_t at = 0;
    for (int i = 0; i < cf->nentries; i++) {
        const gt_st_entry *ent = &cf->entries[i];
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


/* The root is an object whose "__metadata__" is an object of strings. */
static int st_check_metadata(gt_st_file *cf, gt_err *e)
{
    const gt_json_doc *d = &cf->doc;
    if (d->nodes[0].type != GT_JSON_OBJECT)
        return gt_fail(e, "checkpoint %s: the header is not a JSON object", cf->path);
    cf->meta_node = gt_json_get(d, 0, "__metadata__");
    if (cf->meta_node < 0 || d->nodes[cf->meta_node].type != GT_JSON_OBJECT)
        return gt_fail(e, "checkpoint %s: not a gputrain checkpoint (no __metadata__)", cf->path);
    for (int c = d->nodes[cf->meta_node].child; c >= 0; c = d->nodes[c].next)
        if (d->nodes[c].type != GT_JSON_STRING)
            return gt_fail(e, "checkpoint %s: metadata \"%.80s\" is not a string", cf->path,
                           d->nodes[c].key);
    return 0;
}

int gt_st_index(gt_st_file *cf, gt_err *e)
{
    const gt_json_doc *d = &cf->doc;
    cf->entries = calloc((size_t)d->nodes[0].count + 1, sizeof *cf->entries);
    if (!cf->entries)
        return gt_fail(e, "checkpoint %s: out of memory", cf->path);
    for (int c = d->nodes[0].child; c >= 0; c = d->nodes[c].next) {
        if (c == cf->meta_node)
            continue;
        if (st_parse_entry(cf, c, &cf->entries[cf->nentries++], e) != 0)
            return -1;
    }
    return st_check_layout(cf, e);
}

int gt_st_open(gt_st_file *cf, const char *path, gt_err *e)
{
    *cf = (gt_st_file){.path = path, .fd = -1};
    struct stat st;
    unsigned char lenbuf[8];
    const char *why;
    cf->fd = gt_open_regular(path, &why);
    if (cf->fd < 0)
        return gt_fail(e, "cannot open checkpoint %s: %s", path, why);
    int rc = -1;
    if (fstat(cf->fd, &st) != 0) {
        gt_fail(e, "checkpoint %s: %s", path, strerror(errno));
    } else if (st.st_size < 8 || fd_pread_all(cf->fd, lenbuf, 8, 0) != 8) {
        gt_fail(e, "checkpoint %s is too short (%lld bytes) to be a checkpoint", path,
                (long long)st.st_size);
    } else {
        uint64_t size = (uint64_t)st.st_size, hlen = get_u64le(lenbuf);
        ssize_t got;
        uint64_t limit = size - 8 < GT_ST_MAX_HEADER ? size - 8 : GT_ST_MAX_HEADER;
        if (hlen == 0 || hlen > limit) {
            gt_fail(e, "checkpoint %s: header length %" PRIu64 " is not in 1..%" PRIu64 " (file of %"
                    PRIu64 " bytes): not a safetensors file or truncated", path, hlen, limit, size);
        } else if (!(cf->header = malloc(hlen))) {
            gt_fail(e, "checkpoint %s: out of memory for a %" PRIu64 "-byte header", path, hlen);
        } else if ((got = fd_pread_all(cf->fd, cf->header, hlen, 8)) != (ssize_t)hlen) {
            gt_fail(e, "checkpoint %s: cannot read its header: %s", path,
                    got < 0 ? strerror(errno) : "file shrank");
        } else if (!(cf->raw = malloc(8 + hlen))) {
            gt_fail(e, "checkpoint %s: out of memory for a %" PRIu64 "-byte header", path, hlen);
        } else if (memcpy(cf->raw, lenbuf, 8), memcpy(cf->raw + 8, cf->header, hlen),
                   gt_json_parse(&cf->doc, cf->header, hlen) != 0) {
            gt_fail(e, "checkpoint %s: bad JSON header at byte %zu: %s", path, 8 + cf->doc.err_at,
                    cf->doc.err);
        } else {
            cf->hlen = hlen;
            cf->data_start = 8 + hlen;
            cf->data_size = size - 8 - hlen;
            rc = st_check_metadata(cf, e);
        }
    }
    if (rc != 0)
        gt_st_close(cf);
    return rc;
}

int gt_st_read(const gt_st_file *cf, const gt_st_entry *ent, char *dst, uint32_t *crc_out, gt_err *e)
{
    float scratch[ST_CHUNK];
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
    *crc_out = crc;
    return 0;
}
