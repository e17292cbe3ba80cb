/* data_idx.c - MNIST-style IDX files, gzip or plain, read into memory as uint8.
 *
 * Every file is treated as hostile. Header fields are checked against fixed limits before anything
 * is allocated from them, the payload must be exactly as long as the header says, and the payload
 * buffer grows with the bytes actually read, so a header that lies about its size costs at most
 * IDX_FIRST_BUFFER bytes before it is caught. A gzip file is inflated with zlib's own stream, and
 * its CRC-32 and length trailer are checked as inflate would check them.
 *
 * Start-up waits for the largest file (Fashion-MNIST's train images: 26 MB inflating to 47 MB), so
 * the work beside the inflate is taken off its thread: a payload of 4 MiB or more has a companion
 * thread that faults the buffer's fresh pages in (their first touch costs about a tenth of the
 * inflate) and then takes the CRC-32 of the bytes as they are read (inflate's own check off). That
 * CRC-32 checks the trailer and comes back to the caller, so the dataset's fingerprint costs no
 * pass of its own. */
#include "gputrain/data.h"

#include "gputrain/atomic_file.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_READ_CHUNK (1u << 20)
#define IDX_FIRST_BUFFER ((size_t)64 << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14's value, for C libraries older than it */
#endif

/* Smaller payloads are faulted in and checked faster than a thread starts. */
#define IDX_COMPANION_MIN ((size_t)4 << 20)

/* ---- IDX files ------------------------------------------------------------------------------ */

typedef struct idx_stream {
    const char *path;
    FILE *plain;        /* a plain file, or NULL for gzip */
    int fd;             /* gzip: the compressed file */
    z_stream z;         /* gzip: one member, inflated (its trailer checked: see own_check) */
    unsigned char *in;  /* gzip: compressed input buffer */
    int gz_done;        /* gzip: the member ended (its trailer read; matched where inflate checks) */
    int own_check;      /* gzip: inflate's CRC-32 and length check is off, idx_check_trailer's on */
    uint32_t head_crc;  /* CRC-32 of the IDX header bytes read so far */
    size_t head_len;    /* and their count */
} idx_stream;

#define IDX_GZ_IN (1u << 17)

/* Gzip is recognised by its magic bytes, not the name, so a gunzipped file keeping its .gz name
 * (or the reverse) still loads. */
static int idx_open(idx_stream *s, const char *path, gt_err *e)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->fd = -1;
    const char *why;
    int fd = gt_open_regular(path, &why);
    if (fd < 0)
        return gt_fail(e, "%s: cannot open: %s", path, why);
    unsigned char magic[4] = {0};
    if (pread(fd, magic, 4, 0) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        s->in = malloc(IDX_GZ_IN);
        if (s->in && inflateInit2(&s->z, 16 + MAX_WBITS) == Z_OK) {
            /* The trailer is checked by idx_check_trailer, beside the read; a header with a
             * CRC-16 of its own (FHCRC) keeps inflate's checks, which cover that too. */
            s->own_check = !(magic[3] & 0x02) && inflateValidate(&s->z, 0) == Z_OK;
            s->fd = fd;
            return 0;
        }
        free(s->in);
        s->in = NULL;
    } else {
        s->plain = fdopen(fd, "rb");
    }
    if (!s->plain) {
        close(fd);
        return gt_fail(e, "%s: cannot open: out of memory", path);
    }
    return 0;
}

static void idx_close(idx_stream *s)
{
    if (s->fd >= 0) {
        inflateEnd(&s->z);
        close(s->fd);
        free(s->in);
    }
    if (s->plain)
        fclose(s->plain);
    s->fd = -1;
    s->plain = NULL;
}

/* Refills the compressed input: 1, 0 at the end of the file, -1 with errno. */
static int idx_gz_fill(idx_stream *s)
{
    ssize_t r;
    do {
        r = read(s->fd, s->in, IDX_GZ_IN);
    } while (r < 0 && errno == EINTR);
    if (r > 0) {
        s->z.next_in = s->in;
        s->z.avail_in = (uInt)r;
    }
    return r > 0 ? 1 : (int)r;
}

/* Inflates up to len bytes; fewer only at the end of the member, which must be the end of the
 * file: inflate reads the trailer (and checks it, but where own_check), and anything after it is
 * refused. */
static long long idx_gz_read(idx_stream *s, unsigned char *buf, unsigned len, gt_err *e)
{
    s->z.next_out = buf;
    s->z.avail_out = len;
    while (s->z.avail_out > 0 && !s->gz_done) {
        int more = s->z.avail_in > 0 ? 1 : idx_gz_fill(s);
        if (more < 0)
            return gt_fail(e, "%s: read error: %s", s->path, strerror(errno));
        if (more == 0)
            return gt_fail(e, "%s: corrupt gzip stream (unexpected end of file)", s->path);
        int rc = inflate(&s->z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END) {
            s->gz_done = 1;
            if (s->z.avail_in > 0 || idx_gz_fill(s) != 0)
                return gt_fail(e, "%s: bytes after the end of the gzip stream", s->path);
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            return gt_fail(e, "%s: corrupt gzip stream (%s)", s->path,
                           s->z.msg ? s->z.msg : zError(rc));
        }
    }
    return (long long)(len - s->z.avail_out);
}

/* Reads up to len bytes, fewer only at the end of the file. Returns the count, or -1 with e set. */
static long long idx_read(idx_stream *s, void *buf, size_t len, gt_err *e)
{
    size_t got = 0;
    while (got < len) {
        unsigned want = len - got > IDX_READ_CHUNK ? IDX_READ_CHUNK : (unsigned)(len - got);
        if (!s->plain) {
            long long r = idx_gz_read(s, (unsigned char *)buf + got, want, e);
            if (r < 0)
                return -1;
            got += (size_t)r;
            if (r < want)
                break;
        } else {
            size_t r = fread((char *)buf + got, 1, want, s->plain);
            got += r;
            if (r < want) {
                if (ferror(s->plain))
                    return gt_fail(e, "%s: read error: %s", s->path, strerror(errno));
                break;
            }
        }
    }
    return (long long)got;
}

static uint32_t idx_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads the magic (unsigned byte data of the given rank) and the rank dimensions, all > 0. */
static int idx_read_header(idx_stream *s, int rank, const char *kind, uint32_t *dims, gt_err *e)
{
    unsigned char hdr[4];
    const uint32_t want = 0x800u | (uint32_t)rank;
    long long got = idx_read(s, hdr, 4, e);
    if (got < 0)
        return -1;
    if (got == 0)
        return gt_fail(e, "%s: empty file (expected an IDX %s header)", s->path, kind);
    if (got < 4)
        return gt_fail(e, "%s: truncated header (%lld of 4 magic bytes)", s->path, got);
    s->head_crc = gt_crc32(0, hdr, 4);
    s->head_len = 4;
    uint32_t magic = idx_be32(hdr);
    if ((magic & 0xffffff00u) == 0x800u && magic != want)
        return gt_fail(e, "%s: bad magic 0x%08x (expected 0x%08x for %s): rank %u, not %d", s->path,
                       magic, want, kind, magic & 0xffu, rank);
    if (magic != want)
        return gt_fail(e, "%s: bad magic 0x%08x (expected 0x%08x for %s)", s->path, magic, want,
                       kind);
    for (int i = 0; i < rank; i++) {
        got = idx_read(s, hdr, 4, e);
        if (got < 0)
            return -1;
        if (got < 4)
            return gt_fail(e, "%s: truncated header (ends inside dimension %d of %d)", s->path,
                           i + 1, rank);
        s->head_crc = gt_crc32(s->head_crc, hdr, 4);
        s->head_len += 4;
        dims[i] = idx_be32(hdr);
        if (dims[i] == 0)
            return gt_fail(e, "%s: dimension %d of the %s header is 0", s->path, i + 1, kind);
    }
    if (dims[0] > GT_DATA_MAX_SAMPLES)
        return gt_fail(e, "%s: header claims %u %s (limit %u)", s->path, dims[0], kind,
                       GT_DATA_MAX_SAMPLES);
    return 0;
}

/* A buffer for bytes about to be read into it: gt_alloc's alignment and free, without its zero
 * fill (the read overwrites every byte, or the buffer is freed), but for the rounding's tail. */
static uint8_t *idx_alloc(size_t bytes)
{
    size_t rounded = (bytes + GT_CACHELINE - 1) / GT_CACHELINE * GT_CACHELINE;
    uint8_t *p = rounded >= bytes ? aligned_alloc(GT_CACHELINE, rounded) : NULL;
    if (p)
        memset(p + bytes, 0, rounded - bytes);
    return p;
}

/* Allocates a buffer of min(cap * 2, want) bytes holding the first used bytes of *buf. */
static int idx_grow(uint8_t **buf, size_t *cap, size_t used, size_t want)
{
    size_t next = *cap > want / 2 ? want : *cap * 2;
    uint8_t *bigger = idx_alloc(next);
    if (!bigger)
        return -1;
    memcpy(bigger, *buf, used);
    gt_free(*buf);
    *buf = bigger;
    *cap = next;
    return 0;
}

/* A thread beside a large payload's read: it faults the buffer's whole pages in writable, then
 * takes the CRC-32 of the bytes as the read publishes them, so that neither costs the read's
 * thread. MADV_POPULATE_WRITE maps pages without writing them, so it may race the read; where the
 * kernel lacks it (before Linux 5.14) it fails, and the read faults the pages in itself. */
typedef struct idx_companion {
    uint8_t *buf;
    size_t len;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t ready;  /* bytes of buf read so far; under mu */
    int end;       /* no more will be read; under mu */
    size_t done;   /* buf[0, done) is in crc: the thread's until joined */
    uint32_t crc;
    pthread_t thread;
    int started;
} idx_companion;

static void idx_prefault(uint8_t *buf, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = ((uintptr_t)buf + page - 1) / page * page;
    uintptr_t end = ((uintptr_t)buf + len) / page * page;
    if (end > first)
        madvise((void *)first, end - first, MADV_POPULATE_WRITE);
}

static void *idx_companion_run(void *arg)
{
    idx_companion *c = arg;
    idx_prefault(c->buf, c->len);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->ready == c->done && !c->end)
            pthread_cond_wait(&c->cv, &c->mu);
        size_t ready = c->ready;
        if (ready == c->done)
            break;
        pthread_mutex_unlock(&c->mu);
        c->crc = gt_crc32(c->crc, c->buf + c->done, ready - c->done);
        pthread_mutex_lock(&c->mu);
        c->done = ready;
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Starts the thread for buf where len is large enough to pay for it; else (or where it cannot
 * start) the read's thread does the work, and done stays 0. */
static void idx_companion_start(idx_companion *c, uint8_t *buf, size_t len)
{
    memset(c, 0, sizeof *c);
    c->buf = buf;
    c->len = len;
    if (len < IDX_COMPANION_MIN)
        return;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->started = pthread_create(&c->thread, NULL, idx_companion_run, c) == 0;
    if (!c->started) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
}

static void idx_companion_publish(idx_companion *c, size_t ready)
{
    if (!c->started)
        return;
    pthread_mutex_lock(&c->mu);
    c->ready = ready;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Ends the thread once it has taken in what was published; the buffer may then be freed, and
 * crc holds buf[0, done). Idempotent. */
static void idx_companion_finish(idx_companion *c)
{
    if (!c->started)
        return;
    pthread_mutex_lock(&c->mu);
    c->end = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    c->started = 0;
}

/* Reads buf[*got, cap) a chunk at a time, publishing each to the companion; *got falls short of
 * cap only at the end of the stream. */
static int idx_fill(idx_stream *s, uint8_t *buf, size_t *got, size_t cap, idx_companion *c,
                    gt_err *e)
{
    while (*got < cap) {
        size_t want = cap - *got < IDX_READ_CHUNK ? cap - *got : IDX_READ_CHUNK;
        long long r = idx_read(s, buf + *got, want, e);
        if (r < 0)
            return -1;
        *got += (size_t)r;
        idx_companion_publish(c, *got);
        if ((size_t)r < want)
            break;
    }
    return 0;
}

/* Where inflate's own check is off, the gzip trailer (the file's last 8 bytes, the stream having
 * ended there) checked as inflate would: the CRC-32 and length of header and payload together. */
static int idx_check_trailer(idx_stream *s, uint32_t payload_crc, size_t want, gt_err *e)
{
    unsigned char t[8];
    if (!s->own_check)
        return 0;
    off_t end = lseek(s->fd, 0, SEEK_CUR);
    if (end < 8 || pread(s->fd, t, 8, end - 8) != 8)
        return gt_fail(e, "%s: read error: %s", s->path, strerror(errno));
    uint32_t crc = (uint32_t)crc32_combine(s->head_crc, payload_crc, (z_off_t)want);
    uint32_t len = (uint32_t)(s->head_len + want);
    if (crc != ((uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24))
        return gt_fail(e, "%s: corrupt gzip stream (incorrect data check)", s->path);
    if (len != ((uint32_t)t[4] | (uint32_t)t[5] << 8 | (uint32_t)t[6] << 16 | (uint32_t)t[7] << 24))
        return gt_fail(e, "%s: corrupt gzip stream (incorrect length check)", s->path);
    return 0;
}

/* Counts what is left in the stream; a well-formed file has nothing after its payload. */
static long long idx_count_rest(idx_stream *s, gt_err *e)
{
    unsigned char scratch[16384];
    long long total = 0, r;
    while ((r = idx_read(s, scratch, sizeof scratch, e)) > 0)
        total += r;
    return r < 0 ? -1 : total;
}

/* Reads exactly want bytes of payload and insists on the end of the file after them; *crc (if
 * non-NULL) gets the payload's CRC-32. */
static int idx_read_payload(idx_stream *s, size_t want, const char *what, uint8_t **out,
                            uint32_t *crc, gt_err *e)
{
    size_t cap = want < IDX_FIRST_BUFFER ? want : IDX_FIRST_BUFFER, got = 0;
    uint8_t *buf = idx_alloc(cap);
    if (!buf)
        return gt_fail(e, "%s: out of memory reading %zu bytes of %s", s->path, cap, what);
    idx_companion comp;
    idx_companion_start(&comp, buf, cap);
    for (;;) {
        int rc = idx_fill(s, buf, &got, cap, &comp, e);
        idx_companion_finish(&comp);
        if (rc != 0)
            goto fail;
        if (got < cap) {
            gt_fail(e, "%s: truncated: the header declares %zu bytes of %s but only %zu follow",
                    s->path, want, what, got);
            goto fail;
        }
        if (got == want)
            break;
        if (idx_grow(&buf, &cap, got, want) != 0) {
            gt_fail(e, "%s: out of memory reading %zu bytes of %s", s->path, want, what);
            goto fail;
        }
    }
    long long rest = idx_count_rest(s, e);
    if (rest < 0)
        goto fail;
    if (rest > 0) {
        gt_fail(e, "%s: %lld trailing byte(s) after the %zu bytes of %s the header declares",
                s->path, rest, want, what);
        goto fail;
    }
    uint32_t payload_crc = gt_crc32(comp.crc, buf + comp.done, want - comp.done);
    if (idx_check_trailer(s, payload_crc, want, e) != 0)
        goto fail;
    if (crc)
        *crc = payload_crc;
    *out = buf;
    return 0;
fail:
    idx_companion_finish(&comp);
    gt_free(buf);
    return -1;
}

static int idx_check_image_dims(const char *path, const uint32_t *d, gt_err *e)
{
    if (d[1] > GT_DATA_MAX_SIDE || d[2] > GT_DATA_MAX_SIDE)
        return gt_fail(e, "%s: header claims %ux%u pixels per image (limit %ux%u)", path, d[1],
                       d[2], GT_DATA_MAX_SIDE, GT_DATA_MAX_SIDE);
    unsigned long long bytes = (unsigned long long)d[0] * d[1] * d[2];
    if (bytes >= GT_DATA_MAX_BYTES || bytes > SIZE_MAX)
        return gt_fail(e, "%s: header claims %u images of %ux%u = %llu bytes (limit 8 GiB)", path,
                       d[0], d[1], d[2], bytes);
    return 0;
}

/* Opens an images file and reads its header: dims = count, rows, columns. Closes s on error. */
static int idx_open_images(idx_stream *s, const char *path, uint32_t *d, gt_err *e)
{
    if (idx_open(s, path, e) != 0)
        return -1;
    if (idx_read_header(s, 3, "images", d, e) != 0 || idx_check_image_dims(path, d, e) != 0) {
        idx_close(s);
        return -1;
    }
    return 0;
}

int gt_idx_read_image_header(const char *path, uint32_t *n, int *h, int *w, gt_err *e)
{
    idx_stream s;
    uint32_t d[3] = {0};
    if (idx_open_images(&s, path, d, e) != 0)
        return -1;
    idx_close(&s);
    *n = d[0];
    *h = (int)d[1];
    *w = (int)d[2];
    return 0;
}

int gt_idx_load_images(const char *path, uint32_t *n, int *h, int *w, uint8_t **pixels,
                       uint32_t *crc, gt_err *e)
{
    idx_stream s;
    uint32_t d[3] = {0};
    uint8_t *buf = NULL;
    if (idx_open_images(&s, path, d, e) != 0)
        return -1;
    int rc = idx_read_payload(&s, (size_t)d[0] * d[1] * d[2], "pixels", &buf, crc, e);
    idx_close(&s);
    if (rc != 0)
        return -1;
    *n = d[0];
    *h = (int)d[1];
    *w = (int)d[2];
    *pixels = buf;
    return 0;
}

int gt_idx_load_labels(const char *path, uint32_t *n, uint8_t **labels, uint32_t *crc, gt_err *e)
{
    idx_stream s;
    uint32_t d[1] = {0};
    uint8_t *buf = NULL;
    if (idx_open(&s, path, e) != 0)
        return -1;
    int rc = idx_read_header(&s, 1, "labels", d, e);
    if (rc == 0)
        rc = idx_read_payload(&s, d[0], "labels", &buf, crc, e);
    idx_close(&s);
    if (rc != 0)
        return -1;
    *n = d[0];
    *labels = buf;
    return 0;
}

