/* test_data.c - dataset loading: synthetic IDX files (gzip and plain) and PNG folders load with the
 * right values, every kind of damage is refused with a message naming the file, and Fashion-MNIST,
 * where installed, loads with its known shape and class balance. */
#define _GNU_SOURCE /* nftw */
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>

#include "gputrain/cpu_net.h"
#include "gputrain/data.h"
#include "test_util.h"

#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define SYSTEM_FMNIST "/usr/share/datasets/fashion-mnist"

static char tmp_root[64];

/* Path of rel inside the temp folder, in one of a few rotating buffers: fine for arguments, but
 * a path kept across calls is copied into a local array first. */
static const char *tp(const char *rel)
{
    static char bufs[8][1024];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", tmp_root, rel);
    return b;
}

/* ---- writing synthetic files ---------------------------------------------------------------- */

static uint8_t pixel_at(uint32_t i, uint32_t y, uint32_t x)
{
    return (uint8_t)(i * 37 + y * 5 + x * 11 + 1);
}
static uint8_t label_at(uint32_t i)
{
    return (uint8_t)(i * 3 % 10);
}

typedef struct blob {
    uint8_t *p;
    size_t n, cap;
} blob;

static void blob_put(blob *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void blob_be32(blob *b, uint32_t v)
{
    uint8_t be[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    blob_put(b, be, 4);
}

static void write_file(const char *path, int gz, const void *buf, size_t len)
{
    int ok;
    if (gz) {
        gzFile g = gzopen(path, "wb");
        ok = g && (len == 0 || gzwrite(g, buf, (unsigned)len) == (int)len);
        ok = g && gzclose(g) == Z_OK && ok;
    } else {
        FILE *f = fopen(path, "wb");
        ok = f && fwrite(buf, 1, len, f) == len;
        ok = f && fclose(f) == 0 && ok;
    }
    CHECK_MSG(ok, "cannot write %s", path);
}

/* An images file's bytes: n x h x w pattern pixels; extra < 0 cuts the payload short, extra > 0
 * appends bytes. */
static blob images_blob(uint32_t magic, uint32_t n, uint32_t h, uint32_t w, long extra)
{
    blob b = {0};
    blob_be32(&b, magic);
    blob_be32(&b, n);
    blob_be32(&b, h);
    blob_be32(&b, w);
    long total = (long)n * h * w + extra;
    for (long k = 0; k < total; k++) {
        uint32_t i = (uint32_t)(k / (h * w)), rest = (uint32_t)(k % (h * w));
        uint8_t v = pixel_at(i, rest / w, rest % w);
        blob_put(&b, &v, 1);
    }
    return b;
}

static void write_images(const char *path, int gz, uint32_t magic, uint32_t n, uint32_t h,
                         uint32_t w, long extra)
{
    blob b = images_blob(magic, n, h, w, extra);
    write_file(path, gz, b.p, b.n);
    free(b.p);
}

/* A label file of n pattern labels; bad_index >= 0 gets bad_value instead. */
static void write_labels(const char *path, int gz, uint32_t n, long extra, long bad_index,
                         uint8_t bad_value)
{
    blob b = {0};
    blob_be32(&b, 0x801);
    blob_be32(&b, n);
    for (long i = 0; i < (long)n + extra; i++) {
        uint8_t v = i == bad_index ? bad_value : label_at((uint32_t)i);
        blob_put(&b, &v, 1);
    }
    write_file(path, gz, b.p, b.n);
    free(b.p);
}

/* Raw header words only, for headers whose payload would be absurd. */
static void write_header(const char *path, const uint32_t *words, int count)
{
    blob b = {0};
    for (int i = 0; i < count; i++)
        blob_be32(&b, words[i]);
    write_file(path, 0, b.p, b.n);
    free(b.p);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void make_dir(const char *path)
{
    CHECK_MSG(mkdir(path, 0755) == 0, "mkdir %s", path);
}

/* A call must fail with a message naming the file (its last path component) and saying what. */
#define CHECK_REFUSED(call, file, what)                                                            \
    do {                                                                                           \
        gt_err e_ = {{0}};                                                                         \
        const char *base_ = strrchr(file, '/') ? strrchr(file, '/') + 1 : (file);                  \
        int rc_ = (call);                                                                          \
        CHECK_MSG(rc_ == -1, "%s accepted", #call);                                                \
        CHECK_MSG(strstr(e_.msg, base_) != NULL, "message '%s' lacks '%s'", e_.msg, base_);        \
        CHECK_MSG(strstr(e_.msg, what) != NULL, "message '%s' lacks '%s'", e_.msg, what);          \
    } while (0)

/* ---- single IDX files ----------------------------------------------------------------------- */

static void check_images_file(const char *path, uint32_t n, uint32_t h, uint32_t w)
{
    uint32_t got_n = 0;
    int got_h = 0, got_w = 0;
    uint8_t *px = NULL;
    uint32_t crc = 0;
    gt_err e = {{0}};
    int rc = gt_idx_load_images(path, &got_n, &got_h, &got_w, &px, &crc, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc != 0)
        return;
    CHECK(got_n == n && got_h == (int)h && got_w == (int)w);
    int bad = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++)
                bad += px[(i * h + y) * w + x] != pixel_at(i, y, x);
    CHECK_MSG(bad == 0, "%s: %d wrong pixels", path, bad);
    /* gzip: taken from the trailer less the header's share; plain: computed */
    CHECK_MSG(crc == (uint32_t)crc32(0L, px, (uInt)(n * h * w)), "%s: pixels' CRC-32 %08x", path,
              crc);
    gt_free(px);
}

static void test_idx_good(void)
{
    for (int gz = 0; gz < 2; gz++) {
        const char *img = tp(gz ? "good-images.gz" : "good-images");
        const char *lab = tp(gz ? "good-labels.gz" : "good-labels");
        write_images(img, gz, 0x803, 5, 3, 4, 0);
        write_labels(lab, gz, 7, 0, -1, 0);
        check_images_file(img, 5, 3, 4);
        uint32_t n = 0;
        uint8_t *labels = NULL;
        uint32_t crc = 0;
        gt_err e = {{0}};
        CHECK_MSG(gt_idx_load_labels(lab, &n, &labels, &crc, &e) == 0, "%s", e.msg);
        CHECK(n == 7 && crc == (uint32_t)crc32(0L, labels, n));
        for (uint32_t i = 0; labels && i < n; i++)
            CHECK(labels[i] == label_at(i));
        gt_free(labels);
    }
    /* Gzip is told by its magic bytes, not by the name. */
    write_images(tp("gzip-without-suffix"), 1, 0x803, 2, 2, 2, 0);
    write_images(tp("plain-with-suffix.gz"), 0, 0x803, 2, 2, 2, 0);
    check_images_file(tp("gzip-without-suffix"), 2, 2, 2);
    check_images_file(tp("plain-with-suffix.gz"), 2, 2, 2);
}

static void test_idx_damage(void)
{
    uint32_t n;
    int h, w;
    uint8_t *buf = NULL;
    char f[1024];
    snprintf(f, sizeof f, "%s", tp("damaged"));
#define LOAD_IMAGES gt_idx_load_images(f, &n, &h, &w, &buf, NULL, &e_)
#define LOAD_LABELS gt_idx_load_labels(f, &n, &buf, NULL, &e_)

    write_images(f, 0, 0xd03, 2, 3, 3, 0);
    CHECK_REFUSED(LOAD_IMAGES, f, "bad magic 0x00000d03");
    write_labels(f, 1, 4, 0, -1, 0);
    CHECK_REFUSED(LOAD_IMAGES, f, "bad magic 0x00000801 (expected 0x00000803 for images)");
    write_images(f, 0, 0x803, 2, 3, 3, 0);
    CHECK_REFUSED(LOAD_LABELS, f, "bad magic 0x00000803");
    write_header(f, (const uint32_t[]){0x802, 2, 9}, 3);
    CHECK_REFUSED(LOAD_IMAGES, f, "rank 2, not 3");
    write_header(f, (const uint32_t[]){0x12345678}, 1);
    CHECK_REFUSED(LOAD_IMAGES, f, "bad magic 0x12345678");

    write_images(f, 0, 0x803, 0, 3, 3, 0);
    CHECK_REFUSED(LOAD_IMAGES, f, "dimension 1");
    write_images(f, 1, 0x803, 2, 3, 0, 0);
    CHECK_REFUSED(LOAD_IMAGES, f, "dimension 3");
    write_labels(f, 0, 0, 0, -1, 0);
    CHECK_REFUSED(LOAD_LABELS, f, "is 0");

    /* Absurd headers must be refused before any allocation: under ASan a multi-GiB request would
     * abort the test. */
    write_header(f, (const uint32_t[]){0x803, 0xffffffffu, 28, 28}, 4);
    CHECK_REFUSED(LOAD_IMAGES, f, "4294967295 images (limit");
    write_header(f, (const uint32_t[]){0x803, 10, 28, 70000}, 4);
    CHECK_REFUSED(LOAD_IMAGES, f, "28x70000 pixels per image (limit");
    write_header(f, (const uint32_t[]){0x803, 100000000, 4096, 4096}, 4);
    CHECK_REFUSED(LOAD_IMAGES, f, "(limit 8 GiB)");
    write_header(f, (const uint32_t[]){0x801, 0xfffffff0u}, 2);
    CHECK_REFUSED(LOAD_LABELS, f, "labels (limit");
    /* Within the limits but far beyond the data: the payload buffer grows with what is read. */
    write_header(f, (const uint32_t[]){0x803, 10000000, 28, 28}, 4);
    CHECK_REFUSED(LOAD_IMAGES, f, "truncated");

    for (int gz = 0; gz < 2; gz++) {
        write_images(f, gz, 0x803, 3, 2, 2, -1);
        CHECK_REFUSED(LOAD_IMAGES, f,
                      "truncated: the header declares 12 bytes of pixels but only 11");
        write_images(f, gz, 0x803, 3, 2, 2, 3);
        CHECK_REFUSED(LOAD_IMAGES, f, "3 trailing byte(s)");
        write_labels(f, gz, 5, -2, -1, 0);
        CHECK_REFUSED(LOAD_LABELS, f, "truncated");
        write_labels(f, gz, 5, 1, -1, 0);
        CHECK_REFUSED(LOAD_LABELS, f, "1 trailing byte(s)");
        write_file(f, gz, "\0\0\x08\x03\0\0", 6);
        CHECK_REFUSED(LOAD_IMAGES, f, "truncated header");
        write_file(f, gz, "", 0);
        CHECK_REFUSED(LOAD_IMAGES, f, "empty file");
    }
    CHECK_REFUSED(gt_idx_load_images(tp("no-such-file"), &n, &h, &w, &buf, NULL, &e_),
                  "no-such-file",
                  "cannot open");

    /* A gzip stream with a damaged middle, and one cut short. */
    write_images(f, 1, 0x803, 20, 16, 16, 0);
    FILE *fp = fopen(f, "r+b");
    long size = 0;
    if (fp && fseek(fp, 0, SEEK_END) == 0 && (size = ftell(fp)) > 64) {
        uint8_t junk[8] = {0xde, 0xad, 0xbe, 0xef, 0x55, 0xaa, 0x00, 0xff};
        fseek(fp, size / 2, SEEK_SET);
        fwrite(junk, 1, sizeof junk, fp);
    }
    CHECK(fp && size > 64);
    if (fp)
        fclose(fp);
    CHECK_REFUSED(LOAD_IMAGES, f, "corrupt gzip stream");
    write_images(f, 1, 0x803, 20, 16, 16, 0);
    CHECK(truncate(f, size / 2) == 0);
    CHECK_REFUSED(LOAD_IMAGES, f, "corrupt gzip stream");
#undef LOAD_IMAGES
#undef LOAD_LABELS
}

/* ---- IDX datasets --------------------------------------------------------------------------- */

typedef struct idx_layout {
    uint32_t ntrain, ntrain_labels, ntest, test_h;
    long bad_label_index;
} idx_layout;

static const idx_layout good_layout = {6, 6, 4, 3, -1};


/* A gzip member of buf at the given level (0: stored, so a flipped byte is a flipped label). */
static unsigned char *gzip_bytes(const void *buf, size_t len, int level, size_t *out_len)
{
    z_stream z = {0};
    CHECK(deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    size_t cap = deflateBound(&z, (uLong)len) + 16;
    unsigned char *out = malloc(cap);
    z.next_in = (Bytef *)buf;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

/* A gzip member is checked whole: its CRC-32 and length trailer (cut, or a changed byte under a
 * stored block) and nothing after it. */
static void test_gzip_integrity(void)
{
    uint32_t n;
    uint8_t *buf = NULL;
    char f[1024];
    snprintf(f, sizeof f, "%s", tp("gzip"));
    blob b = {0};
    blob_be32(&b, 0x801);
    blob_be32(&b, 300);
    for (uint32_t i = 0; i < 300; i++) {
        uint8_t v = label_at(i);
        blob_put(&b, &v, 1);
    }
    for (int level = 0; level <= 9; level += 9) {
        size_t len;
        unsigned char *gz = gzip_bytes(b.p, b.n, level, &len);
        write_file(f, 0, gz, len);
        gt_err e = {{0}};
        CHECK_MSG(gt_idx_load_labels(f, &n, &buf, NULL, &e) == 0 && n == 300, "%s", e.msg);
        free(buf);
        buf = NULL;
        for (size_t cut = 1; cut <= 9; cut++) {
            write_file(f, 0, gz, len - cut);
            CHECK_REFUSED(gt_idx_load_labels(f, &n, &buf, NULL, &e_), f, "unexpected end of file");
        }
        unsigned char *more = malloc(len + 1);
        memcpy(more, gz, len);
        more[len] = 0;
        write_file(f, 0, more, len + 1);
        CHECK_REFUSED(gt_idx_load_labels(f, &n, &buf, NULL, &e_), f,
                      "after the end of the gzip stream");
        more[len - 5] ^= 1; /* the length trailer */
        write_file(f, 0, more, len);
        CHECK_REFUSED(gt_idx_load_labels(f, &n, &buf, NULL, &e_), f, "corrupt gzip stream");
        more[len - 5] ^= 1;
        more[len - 8] ^= 0x10; /* the CRC-32 */
        write_file(f, 0, more, len);
        CHECK_REFUSED(gt_idx_load_labels(f, &n, &buf, NULL, &e_), f, "corrupt gzip stream");
        if (level == 0) { /* a stored block: flip a label byte, and cut the trailer too */
            more[len - 8] ^= 0x10;
            more[len - 8 - 20] ^= 0x01;
            write_file(f, 0, more, len);
            CHECK_REFUSED(gt_idx_load_labels(f, &n, &buf, NULL, &e_), f, "corrupt gzip stream");
            write_file(f, 0, more, len - 8);
            CHECK_REFUSED(gt_idx_load_labels(f, &n, &buf, NULL, &e_), f, "unexpected end of file");
        }
        free(more);
        free(gz);
    }
    free(b.p);
}

/* Payloads of 4 MiB and more have their pages faulted in on a thread of their own while the file
 * is read: such files load with the right pixels and CRC-32, and a cut one is refused (the thread
 * joined before the buffer is freed, which ASan's runs check). */
static void test_idx_large(void)
{
    const uint32_t n = 2000, h = 32, w = 80; /* 5,120,000 bytes */
    for (int gz = 0; gz < 2; gz++) {
        const char *f = tp(gz ? "large.gz" : "large");
        write_images(f, gz, 0x803, n, h, w, 0);
        check_images_file(f, n, h, w);
        uint32_t got_n;
        int got_h, got_w;
        uint8_t *buf = NULL;
        write_images(f, gz, 0x803, n, h, w, -1000);
        CHECK_REFUSED(gt_idx_load_images(f, &got_n, &got_h, &got_w, &buf, NULL, &e_), f,
                      "truncated: the header declares 5120000 bytes of pixels but only 5119000");
        struct stat st;
        write_images(f, gz, 0x803, n, h, w, 0);
        if (gz && stat(f, &st) == 0 && truncate(f, st.st_size / 2) == 0)
            CHECK_REFUSED(gt_idx_load_images(f, &got_n, &got_h, &got_w, &buf, NULL, &e_), f,
                          "unexpected end of file");
        CHECK(buf == NULL);
    }
    /* the trailer, checked beside the read rather than by inflate; a header CRC-16 (FHCRC) */
    const char *f = tp("large-trailer.gz");
    blob b = images_blob(0x803, n, h, w, 0);
    size_t len;
    unsigned char *gz = gzip_bytes(b.p, b.n, 6, &len);
    uint32_t got_n;
    int got_h, got_w;
    uint8_t *buf = NULL;
    gz[len - 8] ^= 0x01;
    write_file(f, 0, gz, len);
    CHECK_REFUSED(gt_idx_load_images(f, &got_n, &got_h, &got_w, &buf, NULL, &e_), f,
                  "corrupt gzip stream (incorrect data check)");
    gz[len - 8] ^= 0x01;
    gz[len - 2] ^= 0x01;
    write_file(f, 0, gz, len);
    CHECK_REFUSED(gt_idx_load_images(f, &got_n, &got_h, &got_w, &buf, NULL, &e_), f,
                  "corrupt gzip stream (incorrect length check)");
    gz[len - 2] ^= 0x01;
    unsigned char *hc = malloc(len + 2); /* gzip_bytes writes a 10-byte header without flags */
    memcpy(hc, gz, 10);
    hc[3] |= 0x02;
    uint32_t hcrc = (uint32_t)crc32(0L, hc, 10);
    hc[10] = (unsigned char)hcrc;
    hc[11] = (unsigned char)(hcrc >> 8);
    memcpy(hc + 12, gz + 10, len - 10);
    write_file(f, 0, hc, len + 2);
    check_images_file(f, n, h, w);
    hc[11] ^= 0x01;
    write_file(f, 0, hc, len + 2);
    CHECK_REFUSED(gt_idx_load_images(f, &got_n, &got_h, &got_w, &buf, NULL, &e_), f,
                  "corrupt gzip stream");
    CHECK(buf == NULL);
    free(hc);
    free(gz);
    free(b.p);
}

/* Writes the four files into dir (train gzip, test plain), replacing what was there. */
static void write_idx_dir(const char *dir, idx_layout l)
{
    char path[1024];
    remove_tree(dir);
    make_dir(dir);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    write_images(path, 1, 0x803, l.ntrain, 3, 4, 0);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    write_labels(path, 1, l.ntrain_labels, 0, l.bad_label_index, 10);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", dir);
    write_images(path, 0, 0x803, l.ntest, l.test_h, 4, 0);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte", dir);
    write_labels(path, 0, l.ntest, 0, -1, 0);
}

/* The fingerprint recomputed from the pattern, with zlib directly rather than gt_crc32. */
static uint32_t expected_fingerprint(uint32_t ntrain, uint32_t ntest, uint32_t h, uint32_t w)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    uint32_t counts[2] = {ntrain, ntest};
    for (int s = 0; s < 2; s++) {
        for (uint32_t i = 0; i < counts[s]; i++)
            for (uint32_t p = 0; p < h * w; p++) {
                uint8_t v = pixel_at(i, p / w, p % w);
                crc = crc32(crc, &v, 1);
            }
        for (uint32_t i = 0; i < counts[s]; i++) {
            uint8_t v = label_at(i);
            crc = crc32(crc, &v, 1);
        }
    }
    return (uint32_t)crc;
}

/* The fingerprint of loaded data by its definition: one CRC-32 over train images, train labels,
 * test images and test labels one after the other, with zlib directly. */
static uint32_t direct_fingerprint(const gt_data *d)
{
    const gt_dataset *splits[2] = {&d->train, &d->test};
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < 2; i++) {
        const gt_dataset *s = splits[i];
        crc = crc32(crc, s->images, (uInt)((size_t)s->n * s->c * s->h * s->w));
        for (uint32_t k = 0; k < s->n; k++) { /* a byte a label up to 256 classes, else two */
            uint8_t b[2] = {(uint8_t)s->labels[k], (uint8_t)(s->labels[k] >> 8)};
            crc = crc32(crc, b, s->nclasses > 256 ? 2 : 1);
        }
    }
    return (uint32_t)crc;
}

static void test_idx_dataset(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tp("idx"));
    gt_data d;
    gt_err e = {{0}};
    write_idx_dir(dir, good_layout);
    CHECK_MSG(gt_data_load(dir, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(strcmp(d.format, "idx") == 0 && strcmp(d.dir, dir) == 0);
    CHECK(d.train.n == 6 && d.test.n == 4);
    CHECK(d.train.c == 1 && d.train.h == 3 && d.train.w == 4 && d.test.h == 3 && d.test.w == 4);
    CHECK(d.train.nclasses == 10 && d.test.nclasses == 10);
    CHECK(strcmp(d.class_names[0], "0") == 0 && strcmp(d.class_names[9], "9") == 0);
    for (uint32_t i = 0; d.train.labels && i < d.train.n; i++)
        CHECK(d.train.labels[i] == label_at(i));
    CHECK(d.test.images && d.test.images[3 * 12 + 5] == pixel_at(3, 1, 1));
    CHECK(d.fingerprint == expected_fingerprint(6, 4, 3, 4));
    uint32_t full_fingerprint = d.fingerprint;
    gt_data_free(&d);
    CHECK(d.train.images == NULL && d.train.n == 0 && d.fingerprint == 0);

    CHECK_MSG(gt_data_load(dir, 3, &d, &e) == 0, "%s", e.msg);
    CHECK(d.train.n == 3 && d.test.n == 4);
    CHECK(d.fingerprint == expected_fingerprint(3, 4, 3, 4) && d.fingerprint != full_fingerprint);
    gt_data_free(&d);
    CHECK_REFUSED(gt_data_load(dir, 7, &d, &e_), dir, "--train-samples 7 is more than the 6");

    idx_layout bad_label = good_layout;
    bad_label.bad_label_index = 2;
    write_idx_dir(dir, bad_label);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "train-labels-idx1-ubyte.gz",
                  "label at index 2 is 10");

    idx_layout few_labels = good_layout;
    few_labels.ntrain_labels = 5;
    write_idx_dir(dir, few_labels);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "train-images-idx3-ubyte.gz", "6 images");
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "train-labels-idx1-ubyte.gz", "5 labels");

    idx_layout taller_test = good_layout;
    taller_test.test_h = 5;
    write_idx_dir(dir, taller_test);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "train-images-idx3-ubyte.gz", "3x4");
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "t10k-images-idx3-ubyte", "5x4");

    write_idx_dir(dir, good_layout);
    CHECK(remove(tp("idx/t10k-labels-idx1-ubyte")) == 0);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "t10k-labels-idx1-ubyte", "missing");
    write_file(tp("idx/t10k-labels-idx1-ubyte"), 0, "", 0);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "t10k-labels-idx1-ubyte", "empty file");

    CHECK_REFUSED(gt_data_load(tp("nowhere"), 0, &d, &e_), "nowhere", "not a folder");
    make_dir(tp("nothing"));
    CHECK_REFUSED(gt_data_load(tp("nothing"), 0, &d, &e_), "nothing", "holds neither");
    CHECK(d.train.images == NULL && d.test.images == NULL);
}

/* The shape start-up builds the model from, read from the train images' header alone; and the
 * splits, loaded at the same time, report their errors as one after the other would. */
static void test_data_probe(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tp("probe"));
    write_idx_dir(dir, good_layout);
    int c = 0, h = 0, w = 0, k = 0;
    uint32_t n = 0;
    gt_err e = {{0}};
    CHECK(gt_data_probe(dir, &c, &h, &w, &k) == 0 && c == 1 && h == 3 && w == 4 && k == 10);
    CHECK_MSG(gt_idx_read_image_header(tp("probe/train-images-idx3-ubyte.gz"), &n, &h, &w, &e) == 0,
              "%s", e.msg);
    CHECK(n == 6 && h == 3 && w == 4);
    CHECK(gt_data_probe(tp("nowhere"), &c, &h, &w, &k) == -1);
    CHECK(gt_data_probe(tp("grey"), &c, &h, &w, &k) == -1); /* an image folder: not cheap */
    uint32_t bad_magic[4] = {0x801, 6, 3, 4};
    write_header(tp("probe/train-images-idx3-ubyte.gz"), bad_magic, 4);
    CHECK(gt_data_probe(dir, &c, &h, &w, &k) == -1);
    CHECK_REFUSED(gt_idx_read_image_header(tp("probe/train-images-idx3-ubyte.gz"), &n, &h, &w,
                                           &e_), "train-images-idx3-ubyte.gz", "bad magic");

    /* Both splits broken: the train split's error, every time, and nothing held. */
    idx_layout bad_label = good_layout;
    bad_label.bad_label_index = 2;
    for (int i = 0; i < 20; i++) {
        gt_data d;
        write_idx_dir(dir, bad_label);
        write_file(tp("probe/t10k-labels-idx1-ubyte"), 0, "", 0);
        CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "train-labels-idx1-ubyte.gz",
                      "label at index 2 is 10");
        CHECK(d.train.images == NULL && d.test.images == NULL && d.test.labels == NULL);
    }
}

/* With no folder given, datasets/fashion-mnist under the working directory comes first. */
static void test_default_search(void)
{
    char cwd[1024];
    gt_data d;
    gt_err e = {{0}};
    if (!getcwd(cwd, sizeof cwd) || chdir(tmp_root) != 0) {
        CHECK(!"cannot enter the temp folder");
        return;
    }
    make_dir("datasets");
    write_idx_dir("datasets/fashion-mnist", good_layout);
    CHECK_MSG(gt_data_load(NULL, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(strcmp(d.dir, "datasets/fashion-mnist") == 0 && d.train.n == 6);
    gt_data_free(&d);

    /* An empty local folder is passed over for the system copy, or the error lists both. */
    remove_tree("datasets/fashion-mnist");
    make_dir("datasets/fashion-mnist");
    int rc = gt_data_load(NULL, 6000, &d, &e);
    if (access(SYSTEM_FMNIST "/train-images-idx3-ubyte.gz", R_OK) == 0) {
        CHECK_MSG(rc == 0, "%s", e.msg);
        CHECK(strcmp(d.dir, SYSTEM_FMNIST) == 0 && d.train.n == 6000 && d.test.n == 10000);
    } else {
        CHECK(rc == -1 && strstr(e.msg, "datasets/fashion-mnist") && strstr(e.msg, SYSTEM_FMNIST));
    }
    gt_data_free(&d);
    CHECK(chdir(cwd) == 0);
}

/* ---- image folders -------------------------------------------------------------------------- */

#define IMG_W 5
#define IMG_H 3

static uint8_t img_value(int id, int y, int x, int ch)
{
    return (uint8_t)(id * 50 + y * 7 + x * 3 + ch * 17);
}

/* A PNG of the pattern for image id with comp channels (the alpha channel, if any, is 128). */
static void write_png(const char *path, int id, int w, int h, int comp)
{
    uint8_t px[64 * 64 * 4];
    int colours = comp == 2 || comp == 4 ? comp - 1 : comp;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int ch = 0; ch < comp; ch++)
                px[(y * w + x) * comp + ch] = ch < colours ? img_value(id, y, x, ch) : 128;
    CHECK_MSG(stbi_write_png(path, w, h, comp, px, w * comp) != 0, "cannot write %s", path);
}

typedef struct png_spec {
    const char *rel; /* inside the root */
    int id, comp;
} png_spec;

static void write_tree(const char *root, const char *const *dirs, int ndirs, const png_spec *pngs,
                       int npngs)
{
    char path[1024];
    remove_tree(root);
    make_dir(root);
    for (int i = 0; i < ndirs; i++) {
        snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
        make_dir(path);
    }
    for (int i = 0; i < npngs; i++) {
        snprintf(path, sizeof path, "%s/%s", root, pngs[i].rel);
        write_png(path, pngs[i].id, IMG_W, IMG_H, pngs[i].comp);
    }
}

/* Sample k must be image id[k] with label[k], c channels, laid out C x H x W. */
static void check_samples(const gt_dataset *ds, int c, const int *ids, const int *labels,
                          uint32_t n)
{
    CHECK(ds->n == n && ds->c == c && ds->h == IMG_H && ds->w == IMG_W);
    if (ds->n != n || ds->c != c || ds->h != IMG_H || ds->w != IMG_W)
        return;
    int bad = 0;
    for (uint32_t k = 0; k < n; k++) {
        CHECK_MSG(ds->labels[k] == labels[k], "sample %u: label %u, expected %d", k, ds->labels[k],
                  labels[k]);
        for (int ch = 0; ch < c; ch++)
            for (int y = 0; y < IMG_H; y++)
                for (int x = 0; x < IMG_W; x++)
                    bad += ds->images[(((size_t)k * c + ch) * IMG_H + y) * IMG_W + x] !=
                           img_value(ids[k], y, x, ch);
    }
    CHECK_MSG(bad == 0, "%d wrong pixels", bad);
}

static void test_folder_grey(void)
{
    char root[1024];
    snprintf(root, sizeof root, "%s", tp("grey"));
    static const char *const dirs[] = {"train",     "test",     "train/cat", "train/ant",
                                       "train/bee", "test/ant", "test/bee",  "test/cat"};
    /* Written out of order: classes and files are sorted by name. bee/m.png is grey + alpha. */
    static const png_spec pngs[] = {
        {"train/cat/only.png", 1, 1}, {"train/ant/z.png", 2, 1}, {"train/ant/a.png", 3, 1},
        {"train/bee/m.png", 4, 2},    {"train/bee/b.png", 5, 1}, {"train/bee/x.png", 6, 1},
        {"test/ant/t.png", 7, 1},     {"test/bee/t.png", 8, 1},  {"test/cat/t.png", 9, 1}};
    write_tree(root, dirs, 8, pngs, 9);
    write_file(tp("grey/train/bee/.DS_Store"), 0, "junk", 4); /* hidden: skipped */

    gt_dataset ds;
    gt_class_name *names = NULL;
    int nclasses = 0;
    gt_err e = {{0}};
    CHECK_MSG(gt_folder_load(root, "train", &ds, &names, &nclasses, &e) == 0, "%s", e.msg);
    CHECK(nclasses == 3 && ds.nclasses == 3);
    CHECK(strcmp(names[0], "ant") == 0 && strcmp(names[1], "bee") == 0 &&
          strcmp(names[2], "cat") == 0);
    check_samples(&ds, 1, (const int[]){3, 2, 5, 4, 6, 1}, (const int[]){0, 0, 1, 1, 1, 2}, 6);
    gt_free(ds.images);
    gt_free(ds.labels);
    gt_free(names), names = NULL;

    gt_data d;
    CHECK_MSG(gt_data_load(root, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(strcmp(d.format, "folder") == 0 && strcmp(d.class_names[2], "cat") == 0);
    CHECK(d.train.n == 6 && d.test.n == 3 && d.train.nclasses == 3);
    check_samples(&d.test, 1, (const int[]){7, 8, 9}, (const int[]){0, 1, 2}, 3);
    CHECK(d.fingerprint != 0 && d.fingerprint == direct_fingerprint(&d));
    gt_data_free(&d);

    const char *odd = tp("grey/train/ant/c.png");
    write_png(odd, 10, IMG_W - 1, IMG_H, 1);
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), odd, "4x3");
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), "a.png", "5x3");
    write_png(odd, 10, IMG_W, IMG_H, 3);
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), odd, "3 channel");
    remove(odd);

    const char *text = tp("grey/train/bee/notes.txt");
    write_file(text, 0, "not an image\n", 13);
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), text,
                  "not a PNG or JPEG image (its first bytes: 6e 6f 74 20 61 6e 20 69)");
    remove(text);

    make_dir(tp("grey/train/dog"));
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), "train/dog",
                  "empty class folder");
    write_png(tp("grey/train/dog/d.png"), 11, IMG_W, IMG_H, 1);
    CHECK_REFUSED(gt_data_load(root, 0, &d, &e_), "test", "has 3 class folders");
    write_png(tp("grey/test/cow.png"), 12, IMG_W, IMG_H, 1);
    CHECK_REFUSED(gt_data_load(root, 0, &d, &e_), "test/cow.png", "not a folder");
    remove(tp("grey/test/cow.png"));
    make_dir(tp("grey/test/cow"));
    write_png(tp("grey/test/cow/d.png"), 12, IMG_W, IMG_H, 1);
    CHECK_REFUSED(gt_data_load(root, 0, &d, &e_), "test", "class 3 is 'cow'");

    char longname[64];
    snprintf(longname, sizeof longname, "grey/train/%032d", 7);
    make_dir(tp(longname));
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), longname,
                  "32 characters");

    make_dir(tp("bare"));
    make_dir(tp("bare/train"));
    CHECK_REFUSED(gt_folder_load(tp("bare"), "train", &ds, &names, &nclasses, &e_), "bare/train",
                  "no class folders");
    CHECK(ds.images == NULL && ds.n == 0);
}

static void test_folder_rgb(void)
{
    char root[1024];
    snprintf(root, sizeof root, "%s", tp("rgb"));
    static const char *const dirs[] = {"train", "test", "train/y", "train/x", "test/x", "test/y"};
    /* y/0.png is RGBA: the alpha channel is dropped. */
    static const png_spec pngs[] = {{"train/y/0.png", 1, 4},
                                    {"train/x/1.png", 2, 3},
                                    {"train/y/2.png", 3, 3},
                                    {"test/x/a.png", 4, 3},
                                    {"test/y/a.png", 5, 3}};
    write_tree(root, dirs, 6, pngs, 5);

    gt_data d;
    gt_err e = {{0}};
    CHECK_MSG(gt_data_load(root, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(strcmp(d.class_names[0], "x") == 0 && strcmp(d.class_names[1], "y") == 0);
    check_samples(&d.train, 3, (const int[]){2, 1, 3}, (const int[]){0, 1, 1}, 3);
    check_samples(&d.test, 3, (const int[]){4, 5}, (const int[]){0, 1}, 2);
    /* One pixel by hand: sample 1, blue channel, row 2, column 4. */
    if (d.train.images)
        CHECK(d.train.images[1 * 3 * IMG_H * IMG_W + 2 * IMG_H * IMG_W + 2 * IMG_W + 4] ==
              (uint8_t)(1 * 50 + 2 * 7 + 4 * 3 + 2 * 17));
    gt_data_free(&d);

    /* Train and test must share the image size. */
    write_png(tp("rgb/test/x/a.png"), 4, IMG_W + 1, IMG_H, 3);
    write_png(tp("rgb/test/y/a.png"), 5, IMG_W + 1, IMG_H, 3);
    CHECK_REFUSED(gt_data_load(root, 0, &d, &e_), "rgb/test", "6x3");
}

/* ---- Fashion-MNIST -------------------------------------------------------------------------- */

static void test_fashion_mnist(void)
{
    const char *dir = gt_test_fmnist_dir();
    if (!dir) {
        printf("Fashion-MNIST not found: skipping its checks\n");
        return;
    }
    gt_data d;
    gt_err e = {{0}};
    CHECK_MSG(gt_data_load(dir, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(d.train.n == 60000 && d.test.n == 10000);
    CHECK(d.train.c == 1 && d.train.h == 28 && d.train.w == 28 && d.test.h == 28 && d.test.w == 28);
    CHECK(d.train.nclasses == 10 && strcmp(d.format, "idx") == 0);
    uint32_t train_hist[10] = {0}, test_hist[10] = {0};
    for (uint32_t i = 0; d.train.labels && i < d.train.n; i++)
        train_hist[d.train.labels[i] % 10]++;
    for (uint32_t i = 0; d.test.labels && i < d.test.n; i++)
        test_hist[d.test.labels[i] % 10]++;
    for (int k = 0; k < 10; k++) {
        CHECK_MSG(test_hist[k] == 1000, "test class %d has %u samples", k, test_hist[k]);
        CHECK_MSG(train_hist[k] == 6000, "train class %d has %u samples", k, train_hist[k]);
    }

    gt_data part;
    CHECK_MSG(gt_data_load(dir, 6000, &part, &e) == 0, "%s", e.msg);
    CHECK(part.train.n == 6000 && part.test.n == 10000 && part.fingerprint != d.fingerprint);
    /* the gzip trailers' CRC-32s combined, and a cut train split's computed, as one pass would */
    CHECK(d.fingerprint == direct_fingerprint(&d) && part.fingerprint == direct_fingerprint(&part));
    if (part.train.images && d.train.images)
        CHECK(memcmp(part.train.images, d.train.images, 6000 * 784) == 0 &&
              memcmp(part.train.labels, d.train.labels, 6000) == 0);
    gt_data_free(&part);
    gt_data_free(&d);
}

/* ---- damaged PNGs ---------------------------------------------------------------------------- */

/* The whole of a file, malloc'd. */
static unsigned char *file_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK_MSG(f != NULL, "cannot read %s", path);
    unsigned char *buf = malloc(1 << 20);
    *len = f ? fread(buf, 1, 1 << 20, f) : 0;
    if (f)
        fclose(f);
    return buf;
}

/* Appends a PNG chunk with its CRC. */
static void png_chunk(blob *b, const char *type, const void *data, uint32_t n)
{
    blob_be32(b, n);
    size_t at = b->n;
    blob_put(b, type, 4);
    if (n)
        blob_put(b, data, n);
    blob_be32(b, (uint32_t)crc32(0, (const unsigned char *)b->p + at, n + 4));
}

/* A 5x3 grey PNG whose IDAT inflates to raw_bytes zero bytes (the right size is 3 * (1 + 5)). */
static void write_png_inflating_to(const char *path, size_t raw_bytes)
{
    blob b = {0};
    blob_put(&b, "\x89PNG\r\n\x1a\n", 8);
    unsigned char ihdr[13] = {0, 0, 0, IMG_W, 0, 0, 0, IMG_H, 8, 0, 0, 0, 0};
    png_chunk(&b, "IHDR", ihdr, 13);
    unsigned char *raw = calloc(raw_bytes, 1);
    uLongf zlen = compressBound((uLong)raw_bytes);
    unsigned char *z = malloc(zlen);
    CHECK(compress2(z, &zlen, raw, (uLong)raw_bytes, 9) == Z_OK);
    png_chunk(&b, "IDAT", z, (uint32_t)zlen);
    png_chunk(&b, "IEND", NULL, 0);
    write_file(path, 0, b.p, b.n);
    free(raw);
    free(z);
    free(b.p);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_data: a load still running after 20 s (a FIFO blocked it)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

/* Chunk CRCs, the zlib Adler-32 and the decoded size are checked before stb_image decodes; a FIFO
 * among the images is refused without blocking. */
static void test_png_damage(void)
{
    char root[1024], y[1024];
    snprintf(root, sizeof root, "%s", tp("pngd"));
    static const char *const dirs[] = {"train", "train/a"};
    static const png_spec pngs[] = {{"train/a/x.png", 1, 1}, {"train/a/y.png", 2, 1}};
    write_tree(root, dirs, 2, pngs, 2);
    snprintf(y, sizeof y, "%s", tp("pngd/train/a/y.png"));
    gt_dataset ds;
    gt_class_name *names = NULL;
    int nclasses = 0;
    size_t len;
    unsigned char *good = file_bytes(y, &len);
    size_t idat = 8;
    while (idat + 8 < len && memcmp(good + idat + 4, "IDAT", 4) != 0)
        idat += 12 + ((size_t)good[idat] << 24 | (size_t)good[idat + 1] << 16 |
                      (size_t)good[idat + 2] << 8 | good[idat + 3]);
    CHECK(idat + 8 < len);
    uint32_t n = (uint32_t)good[idat] << 24 | (uint32_t)good[idat + 1] << 16 |
                 (uint32_t)good[idat + 2] << 8 | good[idat + 3];
    unsigned char *bad = malloc(len);
    memcpy(bad, good, len);
    bad[idat + 8 + n - 1] ^= 0x04; /* a byte of the zlib Adler-32, which stb_image ignores */
    write_file(y, 0, bad, len);
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), y, "fails its CRC");
    uint32_t crc = (uint32_t)crc32(0, bad + idat + 4, n + 4);
    unsigned char be[4] = {(unsigned char)(crc >> 24), (unsigned char)(crc >> 16),
                           (unsigned char)(crc >> 8), (unsigned char)crc};
    memcpy(bad + idat + 8 + n, be, 4); /* the chunk CRC made to match: the Adler-32 catches it */
    write_file(y, 0, bad, len);
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), y, "damaged");
    write_png_inflating_to(y, 400000);
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), y, "larger than");
    write_png_inflating_to(y, 3 * (1 + IMG_W));
    gt_err e = {{0}};
    CHECK_MSG(gt_folder_load(root, "train", &ds, &names, &nclasses, &e) == 0, "%s", e.msg);
    gt_free(ds.images);
    gt_free(ds.labels);
    gt_free(names), names = NULL;

    /* Empty IDAT chunks (valid PNG; stb_image mishandles a first one) are taken out first. */
    blob b = {0};
    blob_put(&b, good, idat);
    png_chunk(&b, "IDAT", NULL, 0);
    blob_put(&b, good + idat, 12 + n);
    png_chunk(&b, "IDAT", NULL, 0);
    blob_put(&b, good + idat + 12 + n, len - idat - 12 - n);
    write_file(y, 0, b.p, b.n);
    CHECK_MSG(gt_folder_load(root, "train", &ds, &names, &nclasses, &e) == 0, "%s", e.msg);
    check_samples(&ds, 1, (const int[]){1, 2}, (const int[]){0, 0}, 2);
    gt_free(ds.images);
    gt_free(ds.labels);
    gt_free(names), names = NULL;
    /* A chunk type of other bytes than letters is named by its bytes, not printed raw. */
    b.n = 0;
    blob_put(&b, good, idat);
    png_chunk(&b, "\xc9""DAT", good + idat + 8, n);
    blob_put(&b, good + idat + 12 + n, len - idat - 12 - n);
    write_file(y, 0, b.p, b.n);
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), y,
                  "has no valid type (bytes c9 44 41 54)");
    free(b.p);
    remove(y);
    CHECK(mkfifo(y, 0600) == 0);
    signal(SIGALRM, on_alarm);
    alarm(20);
    CHECK_REFUSED(gt_folder_load(root, "train", &ds, &names, &nclasses, &e_), y, "not a regular file");
    alarm(0);
    remove(y);
    free(good);
    free(bad);
}

/* ---- CIFAR binary files --------------------------------------------------------------------- */

#define CIFAR_PX 3072

static uint8_t cifar_pixel(uint32_t i, uint32_t j)
{
    return (uint8_t)(i * 7 + j * 13 + 3);
}

/* A CIFAR file of n records numbered from first: label bytes (coarse first for CIFAR-100, whose
 * fine label is (first + i) % 100), then the pixels; cut drops that many bytes from the end. */
static void write_cifar(const char *path, int label_bytes, uint32_t first, uint32_t n, size_t cut)
{
    size_t rec = (size_t)label_bytes + CIFAR_PX;
    uint8_t *buf = malloc(n * rec + 1);
    for (uint32_t i = 0; buf && i < n; i++) {
        uint8_t *r = buf + i * rec;
        r[0] = (uint8_t)(label_bytes == 1 ? (first + i) % 10 : (first + i) % 20);
        r[label_bytes - 1] = (uint8_t)(label_bytes == 1 ? (first + i) % 10 : (first + i) % 100);
        for (uint32_t j = 0; j < CIFAR_PX; j++)
            r[label_bytes + j] = cifar_pixel(first + i, j);
    }
    CHECK(buf != NULL && n * rec >= cut);
    write_file(path, 0, buf, n * rec - cut);
    free(buf);
}

static const uint32_t cifar10_counts[5] = {2, 1, 3, 1, 2}; /* 9 training records */

static void write_cifar10(const char *dir)
{
    char path[1024];
    uint32_t first = 0;
    for (int f = 0; f < 5; f++) {
        snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, f + 1);
        write_cifar(path, 1, first, cifar10_counts[f], 0);
        first += cifar10_counts[f];
    }
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    write_cifar(path, 1, 100, 3, 0);
    static const char names[] = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\r\n"
                                "truck\n\n";
    snprintf(path, sizeof path, "%s/batches.meta.txt", dir);
    write_file(path, 0, names, sizeof names - 1);
}

static void test_cifar10(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tp("cifar10"));
    make_dir(dir);
    write_cifar10(dir);
    gt_data d;
    gt_err e = {{0}};
    int c = 0, h = 0, w = 0, k = 0;
    CHECK(gt_data_probe(dir, &c, &h, &w, &k) == 0 && c == 3 && h == 32 && w == 32 && k == 10);
    CHECK_MSG(gt_data_load(dir, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(strcmp(d.format, "cifar10") == 0 && d.train.n == 9 && d.test.n == 3);
    CHECK(d.train.c == 3 && d.train.h == 32 && d.train.w == 32 && d.test.nclasses == 10);
    CHECK(strcmp(d.class_names[0], "airplane") == 0 && strcmp(d.class_names[8], "ship") == 0 &&
          strcmp(d.class_names[9], "truck") == 0);
    for (uint32_t i = 0; d.train.labels && i < d.train.n; i++) {
        CHECK(d.train.labels[i] == i % 10);
        CHECK(d.train.images[i * CIFAR_PX + 1024 + 33] == cifar_pixel(i, 1024 + 33)); /* green */
    }
    CHECK(d.test.labels && d.test.labels[2] == 102 % 10 &&
          d.test.images[2 * CIFAR_PX + 3071] == cifar_pixel(102, 3071));
    CHECK(d.fingerprint == direct_fingerprint(&d));
    gt_data_free(&d);
    CHECK_MSG(gt_data_load(dir, 4, &d, &e) == 0, "%s", e.msg);
    CHECK(d.train.n == 4 && d.fingerprint == direct_fingerprint(&d));
    gt_data_free(&d);

    /* Without batches.meta.txt, the classes are numbered. */
    CHECK(remove(tp("cifar10/batches.meta.txt")) == 0);
    CHECK_MSG(gt_data_load(dir, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(strcmp(d.class_names[0], "0") == 0 && strcmp(d.class_names[9], "9") == 0);
    gt_data_free(&d);
}

static void test_cifar100(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tp("cifar100"));
    make_dir(dir);
    write_cifar(tp("cifar100/train.bin"), 2, 95, 7, 0);
    write_cifar(tp("cifar100/test.bin"), 2, 0, 2, 0);
    gt_data d;
    gt_err e = {{0}};
    int c = 0, h = 0, w = 0, k = 0;
    CHECK(gt_data_probe(dir, &c, &h, &w, &k) == 0 && c == 3 && k == 100);
    CHECK_MSG(gt_data_load(dir, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(strcmp(d.format, "cifar100") == 0 && d.train.n == 7 && d.test.n == 2);
    CHECK(d.train.nclasses == 100 && strcmp(d.class_names[99], "99") == 0);
    CHECK(d.train.labels && d.train.labels[0] == 95 && d.train.labels[6] == 1); /* the fine label */
    CHECK(d.train.images && d.train.images[6 * CIFAR_PX + 2048] == cifar_pixel(101, 2048));
    gt_data_free(&d);

    char names[100 * 8] = "", *at = names;
    for (int i = 0; i < 100; i++)
        at += sprintf(at, "class%d\n", i);
    write_file(tp("cifar100/fine_label_names.txt"), 0, names, strlen(names));
    CHECK_MSG(gt_data_load(dir, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(strcmp(d.class_names[0], "class0") == 0 && strcmp(d.class_names[99], "class99") == 0);
    gt_data_free(&d);
}

/* Every kind of damage is refused with the file named, and nothing is held afterwards. */
static void test_cifar_damage(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tp("cifar_bad"));
    make_dir(dir);
    gt_data d;
    write_cifar10(dir);
    write_cifar(tp("cifar_bad/data_batch_3.bin"), 1, 3, 3, 1000);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "data_batch_3.bin",
                  "not a whole number of 3073-byte CIFAR records");
    CHECK(d.train.images == NULL && d.test.images == NULL);
    write_file(tp("cifar_bad/data_batch_3.bin"), 0, "", 0);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "data_batch_3.bin", "empty file");
    CHECK(remove(tp("cifar_bad/data_batch_3.bin")) == 0);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "data_batch_3.bin", "cannot open");

    write_cifar10(dir);
    uint8_t rec[3073] = {10};
    write_file(tp("cifar_bad/test_batch.bin"), 0, rec, sizeof rec);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "test_batch.bin", "record 0 has label 10");
    CHECK(remove(tp("cifar_bad/test_batch.bin")) == 0);
    CHECK(mkfifo(tp("cifar_bad/test_batch.bin"), 0600) == 0);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "test_batch.bin", "not a regular file");
    CHECK(remove(tp("cifar_bad/test_batch.bin")) == 0);

    write_cifar10(dir);
    write_file(tp("cifar_bad/batches.meta.txt"), 0, "a\nb\nc\n", 6);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "batches.meta.txt", "3 class names, expected 10");
    write_file(tp("cifar_bad/batches.meta.txt"), 0, "a\nb\n\nc\n", 7);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "batches.meta.txt", "line 3");
    static const char long_name[] = "a\nb\nc\nd\ne\nf\ng\nh\ni\nabcdefghijabcdefghijabcdefghijab\n";
    write_file(tp("cifar_bad/batches.meta.txt"), 0, long_name, sizeof long_name - 1);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "batches.meta.txt", "line 10");
    static const char eleven[] = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n";
    write_file(tp("cifar_bad/batches.meta.txt"), 0, eleven, sizeof eleven - 1);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "batches.meta.txt", "more than 10");

    /* CIFAR-100: a fine label of 100, a coarse label of 20, a file one byte short. */
    uint8_t rec100[3074] = {0, 100};
    snprintf(dir, sizeof dir, "%s", tp("cifar100_bad"));
    make_dir(dir);
    write_cifar(tp("cifar100_bad/test.bin"), 2, 0, 2, 0);
    write_file(tp("cifar100_bad/train.bin"), 0, rec100, sizeof rec100);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "train.bin", "record 0 has label 100");
    rec100[0] = 20;
    rec100[1] = 0;
    write_file(tp("cifar100_bad/train.bin"), 0, rec100, sizeof rec100);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "train.bin", "coarse label 20");
    write_cifar(tp("cifar100_bad/train.bin"), 2, 0, 4, 1);
    CHECK_REFUSED(gt_data_load(dir, 0, &d, &e_), "train.bin", "3074-byte");
    CHECK(d.train.images == NULL && d.test.images == NULL);
}

/* ---- synthetic data ------------------------------------------------------------------------- */

static void test_synthetic(void)
{
    gt_data a, b;
    gt_err e = {{0}};
    int c = 0, h = 0, w = 0, k = 0;
    CHECK(gt_data_probe("synthetic:3x8x6:4:300", &c, &h, &w, &k) == 0 && c == 3 && h == 8 &&
          w == 6 && k == 4);
    CHECK_MSG(gt_data_load("synthetic:3x8x6:4:300", 0, &a, &e) == 0, "%s", e.msg);
    CHECK(strcmp(a.format, "synthetic") == 0 && strcmp(a.dir, "synthetic:3x8x6:4:300") == 0);
    CHECK(a.train.n == 300 && a.test.n == 10000 && a.train.c == 3 && a.train.h == 8 &&
          a.train.w == 6 && a.test.nclasses == 4 && strcmp(a.class_names[3], "3") == 0);
    CHECK(a.fingerprint == direct_fingerprint(&a));
    int seen[4] = {0};
    for (uint32_t i = 0; a.train.labels && i < a.train.n; i++)
        seen[a.train.labels[i] < 4 ? a.train.labels[i] : 0] += a.train.labels[i] < 4 ? 1 : 1000;
    CHECK(seen[0] > 40 && seen[1] > 40 && seen[2] > 40 && seen[3] > 40 && seen[0] < 1000);

    /* The same spec, the same bytes; another N keeps the train prefix and the test split. */
    CHECK_MSG(gt_data_load("synthetic:3x8x6:4", 200, &b, &e) == 0, "%s", e.msg);
    CHECK(b.train.n == 200 && b.test.n == 10000);
    CHECK(a.train.images && b.train.images &&
          memcmp(a.train.images, b.train.images, 200 * 144) == 0 &&
          memcmp(a.train.labels, b.train.labels, 200) == 0);
    CHECK(a.test.images_crc == b.test.images_crc && a.test.labels_crc == b.test.labels_crc);
    gt_data_free(&b);
    CHECK_MSG(gt_data_load("synthetic:3x8x6:4:300", 0, &b, &e) == 0, "%s", e.msg);
    CHECK(b.fingerprint == a.fingerprint);
    gt_data_free(&b);

    /* A class's samples sit nearer their own class mean than any other's: learnable. */
    double mean[4][144] = {{0}};
    int count[4] = {0};
    for (uint32_t i = 0; a.train.images && i < a.train.n; i++) {
        count[a.train.labels[i]]++;
        for (int j = 0; j < 144; j++)
            mean[a.train.labels[i]][j] += a.train.images[i * 144 + j];
    }
    for (int q = 0; q < 4; q++)
        for (int j = 0; j < 144; j++)
            mean[q][j] /= count[q] ? count[q] : 1;
    uint32_t right = 0;
    for (uint32_t i = 0; a.test.images && i < 1000; i++) {
        int best = 0;
        double best_d = 1e300;
        for (int q = 0; q < 4; q++) {
            double d = 0;
            for (int j = 0; j < 144; j++)
                d += (a.test.images[i * 144 + j] - mean[q][j]) * (a.test.images[i * 144 + j] - mean[q][j]);
            if (d < best_d)
                best_d = d, best = q;
        }
        right += best == a.test.labels[i];
    }
    CHECK_MSG(right > 900, "nearest class mean: %u of 1000 test samples right", right);
    gt_data_free(&a);

    static const struct {
        const char *spec, *what;
    } bad[] = {
        {"synthetic:0x32x32:10", "image size 0x32x32 is out of range"},
        {"synthetic:3x32", "is not synthetic:CxHxW:K"},
        {"synthetic:3x32x32", "is not synthetic:CxHxW:K"},
        {"synthetic:3x32x32:10:", "is not synthetic:CxHxW:K"},
        {"synthetic:3x32x32:10:5:5", "is not synthetic:CxHxW:K"},
        {"synthetic:3x-2x32:10", "is not synthetic:CxHxW:K"},
        {"synthetic:3x32x32:1", "K is 1 classes"},
        {"synthetic:3x32x32:65537", "K is 65537 classes"},
        {"synthetic:3x4097x32:10", "3x4097x32 is out of range"},
        {"synthetic:3x32x32:10:0", ": 0 training"},
        {"synthetic:3x4096x4096:10:100", "100 training and 10000 test samples"},
        {"synthetic:3x32x32:10:99999999999999999999999", "training and 10000 test samples of 3072"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_REFUSED(gt_synth_check(bad[i].spec, &e_), bad[i].spec, bad[i].what);
        CHECK_REFUSED(gt_data_load(bad[i].spec, 0, &a, &e_), bad[i].spec, bad[i].what);
        CHECK(gt_data_probe(bad[i].spec, &c, &h, &w, &k) == -1);
    }
    CHECK(gt_synth_check("/some/folder", &e) == 0 && gt_synth_check("synthetic:1x1x1:2:1", &e) == 0);
}

/* ---- --image-size --------------------------------------------------------------------------- */

static void write_solid(const char *path, int w, int h, const uint8_t *rgb)
{
    uint8_t px[64 * 64 * 3];
    for (int i = 0; i < w * h * 3; i++)
        px[i] = rgb[i % 3];
    CHECK_MSG(stbi_write_png(path, w, h, 3, px, w * 3) != 0, "cannot write %s", path);
}

static void test_image_size(void)
{
    char root[1024];
    snprintf(root, sizeof root, "%s", tp("sized"));
    static const char *const dirs[] = {"train", "test", "train/a", "train/b", "test/a", "test/b"};
    write_tree(root, dirs, 6, NULL, 0);
    static const uint8_t colour[3] = {10, 200, 77};
    write_solid(tp("sized/train/a/0.png"), 7, 5, colour);
    write_png(tp("sized/train/a/1.png"), 1, 40, 30, 3);
    write_png(tp("sized/train/b/2.png"), 2, 2, 2, 3);
    write_png(tp("sized/test/a/3.png"), 3, 6, 4, 3);
    write_png(tp("sized/test/b/4.png"), 4, 64, 9, 3);
    gt_data d;
    gt_err e = {{0}};
    CHECK_REFUSED(gt_data_load(root, 0, &d, &e_), "1.png", "but the first image");

    CHECK_MSG(gt_data_load_sized(root, 0, (const int[2]){4, 6}, &d, &e) == 0, "%s", e.msg);
    CHECK(d.train.n == 3 && d.test.n == 2 && d.train.c == 3 && d.train.h == 4 && d.train.w == 6 &&
          d.test.h == 4 && d.test.w == 6);
    CHECK(d.train.labels && d.train.labels[1] == 0 && d.train.labels[2] == 1);
    for (int i = 0; d.train.images && i < 3 * 24; i++) /* a solid colour stays exactly that */
        CHECK(d.train.images[i] == colour[i / 24]);
    CHECK(d.fingerprint == direct_fingerprint(&d));
    /* At its own size an image is copied, not filtered: test/a/3.png is 6x4. */
    for (int y = 0; d.test.images && y < 4; y++)
        for (int x = 0; x < 6; x++)
            CHECK(d.test.images[2 * 24 + y * 6 + x] == img_value(3, y, x, 2));
    gt_data_free(&d);

    /* Grey among colour is still refused; other formats are not resized. */
    write_png(tp("sized/train/b/5.png"), 5, 3, 3, 1);
    CHECK_REFUSED(gt_data_load_sized(root, 0, (const int[2]){4, 6}, &d, &e_), "5.png",
                  "1 channel(s)");
    CHECK_REFUSED(gt_data_load_sized(tp("cifar10"), 0, (const int[2]){4, 6}, &d, &e_), "cifar10",
                  "--image-size 4x6");
    CHECK_MSG(gt_data_load_sized(tp("cifar10"), 0, (const int[2]){32, 32}, &d, &e) == 0, "%s",
              e.msg);
    gt_data_free(&d);
}

/* ---- formats other than PNG, and JPEG ---------------------------------------------------------- */

/* Writes n bytes of buf to path. */
static void write_bytes(const char *path, const unsigned char *buf, size_t n)
{
    write_file(path, 0, buf, n);
}

/* A folder a/train/x/ holding only the file rel (written by the caller); loads its train split. */
static int load_one(const char *root, gt_dataset *ds, gt_err *e)
{
    gt_class_name *names = NULL;
    int nclasses = 0;
    int rc = gt_folder_load(root, "train", ds, &names, &nclasses, e);
    if (rc == 0) {
        gt_free(ds->images);
        gt_free(ds->labels);
        gt_free(names), names = NULL;
    }
    return rc;
}

/* BMP and every other format but PNG and JPEG are refused with a line saying what the file is
 * (stb_image decoded BMPs cut short, and read a top-down BMP as -28 rows high). */
static void test_other_formats(void)
{
    char root[1024], path[1100];
    snprintf(root, sizeof root, "%s", tp("fmt"));
    static const char *const dirs[] = {"train", "train/x"};
    write_tree(root, dirs, 2, NULL, 0);
    snprintf(path, sizeof path, "%s/train/x/a.bmp", root);
    uint8_t px[IMG_W * IMG_H];
    for (int i = 0; i < IMG_W * IMG_H; i++)
        px[i] = (uint8_t)(i * 9);
    CHECK(stbi_write_bmp(path, IMG_W, IMG_H, 1, px) != 0);
    gt_dataset ds;
    CHECK_REFUSED(load_one(root, &ds, &e_), path, "a BMP image: gputrain reads PNG and JPEG only");
    size_t len;
    unsigned char *bmp = file_bytes(path, &len);
    write_bytes(path, bmp, len / 2); /* cut short */
    CHECK_REFUSED(load_one(root, &ds, &e_), path, "a BMP image");
    /* top-down: a negative height */
    bmp[22] = (unsigned char)-IMG_H, bmp[23] = bmp[24] = bmp[25] = 0xFF;
    write_bytes(path, bmp, len);
    CHECK_REFUSED(load_one(root, &ds, &e_), path, "a BMP image");
    free(bmp);
    static const struct {
        const char *bytes;
        size_t n;
        const char *what;
    } others[] = {{"GIF89a\x05\0\x03\0", 10, "a GIF image"}, {"II*\0\x08\0\0\0", 8, "a TIFF image"},
                  {"RIFF\0\0\0\0WEBPVP8 ", 16, "a WebP image"}, {"P5\n5 3\n255\n", 11, "a PNM image"}};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        write_bytes(path, (const unsigned char *)others[i].bytes, others[i].n);
        CHECK_REFUSED(load_one(root, &ds, &e_), path, others[i].what);
    }
    write_bytes(path, (const unsigned char *)"", 0);
    CHECK_REFUSED(load_one(root, &ds, &e_), path, "not a PNG or JPEG image (empty)");
    remove(path);
}

/* The 5x3 pattern of image 1 as JPEGs (quality 100, written by Pillow: stb_image_write's JPEG
 * writer is not clean under UBSan): grey baseline, and RGB progressive (several scans). */
static const unsigned char jpeg_grey[182 + 1] =
    "\xff\xd8\xff\xe0\x00\x10\x4a\x46\x49\x46\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xdb\x00\x43"
    "\x00\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
    "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
    "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\xff\xc0\x00\x0b\x08\x00\x03"
    "\x00\x05\x01\x01\x11\x00\xff\xc4\x00\x14\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x09\xff\xc4\x00\x1f\x10\x00\x00\x03\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x01\x05\x02\x03\x06\x14\x24\x41\x42\x51\x62\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00\x0b"
    "\x21\xe4\x34\x99\x12\xa0\x71\x8d\x9a\xd1\xf4\x3f\xff\xd9";
static const unsigned char jpeg_rgb_progressive[541 + 1] =
    "\xff\xd8\xff\xe0\x00\x10\x4a\x46\x49\x46\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xdb\x00\x43"
    "\x00\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
    "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
    "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\xff\xdb\x00\x43\x01\x01\x01"
    "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
    "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01"
    "\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\xff\xc2\x00\x11\x08\x00\x03\x00\x05\x03"
    "\x01\x22\x00\x02\x11\x01\x03\x11\x01\xff\xc4\x00\x15\x00\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x08\xff\xc4\x00\x14\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x06\xff\xda\x00\x0c\x03\x01\x00\x02\x10\x03\x10\x00\x00\x01\x93\x42\xc2\xff"
    "\x00\xff\xc4\x00\x16\x10\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x04"
    "\x12\xff\xda\x00\x08\x01\x01\x00\x01\x05\x02\x9c\x0b\x1f\xff\xc4\x00\x14\x11\x01\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xda\x00\x08\x01\x03\x01\x01\x3f\x01\x7f\xff"
    "\xc4\x00\x14\x11\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xda\x00"
    "\x08\x01\x02\x01\x01\x3f\x01\x7f\xff\xc4\x00\x16\x10\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x01\x32\xff\xda\x00\x08\x01\x01\x00\x06\x3f\x02\x84\x7f\xff\xc4\x00\x17"
    "\x10\x00\x03\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x51\x81\xd1\xff\xda\x00"
    "\x08\x01\x01\x00\x01\x3f\x21\x87\xbd\x3f\xff\xda\x00\x0c\x03\x01\x00\x02\x00\x03\x00\x00\x00\x10"
    "\xf3\xff\xc4\x00\x14\x11\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff"
    "\xda\x00\x08\x01\x03\x01\x01\x3f\x10\x7f\xff\xc4\x00\x14\x11\x01\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\xff\xda\x00\x08\x01\x02\x01\x01\x3f\x10\x7f\xff\xc4\x00\x18\x10"
    "\x00\x02\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x11\x51\xa1\xff\xda\x00"
    "\x08\x01\x01\x00\x01\x3f\x10\x88\xcd\x46\x3f\xff\xd9";

/* Loads one JPEG as the only image of root's train split: c channels near the pattern. */
static void check_jpeg(const char *root, const char *path, const unsigned char *jpg, size_t len,
                       int c)
{
    write_bytes(path, jpg, len);
    gt_class_name *names = NULL;
    int nclasses = 0;
    gt_dataset ds;
    gt_err e = {{0}};
    CHECK_MSG(gt_folder_load(root, "train", &ds, &names, &nclasses, &e) == 0, "%s", e.msg);
    CHECK(ds.n == 1 && ds.c == c && ds.w == IMG_W && ds.h == IMG_H);
    int far = 0;
    for (int i = 0; ds.images && ds.c == c && i < c * IMG_W * IMG_H; i++)
        far += abs(ds.images[i] - img_value(1, i / IMG_W % IMG_H, i % IMG_W, i / (IMG_W * IMG_H))) > 8;
    CHECK_MSG(far == 0, "%d pixels of the JPEG far from the pattern", far);
    gt_free(ds.images);
    gt_free(ds.labels);
    gt_free(names), names = NULL;
    int accepted = 0;
    for (size_t cut = 3; cut < len - 2; cut++) { /* every prefix short of its EOI marker */
        write_bytes(path, jpg, cut);
        if (load_one(root, &ds, &e) == 0 || !strstr(e.msg, "a.jpg") || !strstr(e.msg, "JPEG"))
            accepted++;
    }
    CHECK_MSG(accepted == 0, "%d truncated JPEGs accepted or refused without a message", accepted);
    write_bytes(path, jpg, len - 2);
    CHECK_REFUSED(load_one(root, &ds, &e_), path, "JPEG cut short");
}

/* JPEGs load; one cut short anywhere is refused, as is a coding stb_image does not decode; the
 * message says what the file is. */
static void test_jpeg(void)
{
    char root[1024], path[1100];
    snprintf(root, sizeof root, "%s", tp("jpg"));
    static const char *const dirs[] = {"train", "train/x"};
    write_tree(root, dirs, 2, NULL, 0);
    snprintf(path, sizeof path, "%s/train/x/a.jpg", root);
    check_jpeg(root, path, jpeg_grey, sizeof jpeg_grey - 1, 1);
    check_jpeg(root, path, jpeg_rgb_progressive, sizeof jpeg_rgb_progressive - 1, 3);

    size_t len = sizeof jpeg_grey - 1;
    unsigned char jpg[sizeof jpeg_grey];
    memcpy(jpg, jpeg_grey, sizeof jpg);
    gt_dataset ds;
    /* SOF0 made SOF3 (lossless): refused before stb_image sees it */
    size_t sof = 2;
    while (sof + 4 < len && !(jpg[sof] == 0xFF && jpg[sof + 1] == 0xC0))
        sof += 2 + ((size_t)jpg[sof + 2] << 8 | jpg[sof + 3]);
    CHECK(sof + 4 < len);
    jpg[sof + 1] = 0xC3;
    write_bytes(path, jpg, len);
    CHECK_REFUSED(load_one(root, &ds, &e_), path, "lossless, hierarchical or arithmetic");
    jpg[sof + 1] = 0xC0;
    /* the Huffman tables taken out: refused, stb_image would read tables never given */
    size_t at = 2, out = 2;
    unsigned char no_dht[sizeof jpeg_grey];
    memcpy(no_dht, jpg, 2);
    while (at + 4 < len && jpg[at + 1] != 0xDA) {
        size_t n = 2 + ((size_t)jpg[at + 2] << 8 | jpg[at + 3]);
        if (jpg[at + 1] != 0xC4) {
            memcpy(no_dht + out, jpg + at, n);
            out += n;
        }
        at += n;
    }
    memcpy(no_dht + out, jpg + at, len - at);
    write_bytes(path, no_dht, out + len - at);
    CHECK_REFUSED(load_one(root, &ds, &e_), path, "a scan uses a component or table that is not defined");
    /* a baseline scan with successive approximation: well formed, but not what stb_image
     * decodes; the message says the file is a JPEG */
    size_t scan = 2;
    while (scan + 4 < len && jpg[scan + 1] != 0xDA)
        scan += 2 + ((size_t)jpg[scan + 2] << 8 | jpg[scan + 3]);
    CHECK(scan + 4 < len);
    jpg[scan + 4 + 2 * jpg[scan + 4] + 3] = 0x01; /* Ah = 0, Al = 1 */
    write_bytes(path, jpg, len);
    CHECK_REFUSED(load_one(root, &ds, &e_), path, "a JPEG that stb_image cannot decode (");
    /* the progressive JPEG's first scan made a refinement: no scan begins the DC coefficients,
     * which stb_image would leave as allocated */
    unsigned char prog[sizeof jpeg_rgb_progressive];
    memcpy(prog, jpeg_rgb_progressive, sizeof prog);
    size_t sos = 2;
    while (sos + 4 < sizeof prog && prog[sos + 1] != 0xDA)
        sos += 2 + ((size_t)prog[sos + 2] << 8 | prog[sos + 3]);
    CHECK(sos + 4 < sizeof prog);
    prog[sos + 4 + 2 * prog[sos + 4] + 3] |= 0x10; /* Ah = 1 */
    write_bytes(path, prog, sizeof prog - 1);
    CHECK_REFUSED(load_one(root, &ds, &e_), path, "JPEG without image data for every component");
    remove(path);
}

/* Control bytes and invalid UTF-8 in a file name are escaped in messages; UTF-8 text is kept. */
static void test_escape(void)
{
    char out[64];
    CHECK(strcmp(gt_escape(out, sizeof out, "a\x1b[2Jb\nc\x7f"), "a\\x1b[2Jb\\x0ac\\x7f") == 0);
    CHECK(strcmp(gt_escape(out, sizeof out, "caf\xc3\xa9 \xc2\x9b \xff"),
                 "caf\xc3\xa9 \\xc2\\x9b \\xff") == 0);
    CHECK(strcmp(gt_escape(out, 6, "ab\x01" "cd"), "ab") == 0); /* cut between characters */
    char twice[64];
    gt_escape(out, sizeof out, "x\x01y");
    CHECK(strcmp(gt_escape(twice, sizeof twice, out), out) == 0);
    gt_err e;
    gt_fail(&e, "%s: bad", "/tmp/\x1b]0;x\x07.png");
    CHECK_MSG(strcmp(e.msg, "/tmp/\\x1b]0;x\\x07.png: bad") == 0, "%s", e.msg);
}

/* ---- augmentation ---------------------------------------------------------------------------- */

/* The expected crop (corner dy, dx of the P-padded image) and flip of a c x h x w image, built the
 * slow way: pad into a larger array, cut, mirror. */
static void augment_expected(const uint8_t *src, int c, int h, int w, int pad, int dy, int dx,
                             int flip, uint8_t *out)
{
    int ph = h + 2 * pad, pw = w + 2 * pad;
    uint8_t *padded = calloc((size_t)c * ph * pw, 1);
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                padded[((size_t)ch * ph + y + pad) * pw + x + pad] = src[((size_t)ch * h + y) * w + x];
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int cx = flip ? w - 1 - x : x;
                out[((size_t)ch * h + y) * w + x] = padded[((size_t)ch * ph + y + dy) * pw + cx + dx];
            }
    free(padded);
}

static void test_augment_parse(void)
{
    gt_augment a;
    gt_err e = {{0}};
    char buf[32];
    CHECK(gt_augment_parse("crop:2,flip", &a, &e) == 0 && a.pad == 2 && a.flip == 1);
    gt_augment_format(&a, buf, sizeof buf);
    CHECK(strcmp(buf, "crop:2,flip") == 0);
    CHECK(gt_augment_parse("flip", &a, &e) == 0 && a.pad == 0 && a.flip == 1);
    gt_augment_format(&a, buf, sizeof buf);
    CHECK(strcmp(buf, "flip") == 0);
    CHECK(gt_augment_parse("none", &a, &e) == 0 && !gt_augment_on(&a));
    gt_augment_format(&a, buf, sizeof buf);
    CHECK(strcmp(buf, "none") == 0);
    CHECK(!gt_augment_on(NULL));
    const char *bad[] = {"", "crop", "crop:", "crop:0", "crop:65", "crop:2x", "flip,", "mirror",
                         "none,flip", "crop:-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(gt_augment_parse(bad[i], &a, &e) != 0, "'%s' accepted", bad[i]);
        CHECK(strstr(e.msg, "--augment") != NULL);
    }
}

/* A known image after a given crop and flip; every offset and both flips occur; the draw depends
 * on (seed, epoch, sample) alone; no augmentation copies the bytes. */
static void test_augment_bytes(void)
{
    enum { C = 2, H = 4, W = 5, N = 600 };
    gt_dataset ds = {.n = N, .c = C, .h = H, .w = W, .nclasses = 2};
    ds.images = gt_alloc((size_t)N * C * H * W);
    for (size_t i = 0; i < (size_t)N * C * H * W; i++)
        ds.images[i] = (uint8_t)(i % 251 + 1);
    gt_augment a = {.pad = 2, .flip = 1};
    uint8_t got[C * H * W], want[C * H * W];
    /* One hand-written case: sample 0 cut at corner (0, 3), mirrored. Channel 0 is 1..20 row by
     * row; the window holds padded rows -2..1 and columns 1..5 of the image, right to left. */
    augment_expected(ds.images, C, H, W, 2, 0, 3, 1, want);
    static const uint8_t hand[H * W] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 5, 4, 3, 2, 0, 10, 9, 8, 7};
    CHECK(memcmp(want, hand, sizeof hand) == 0);
    int seen[5][5][2] = {{{0}}};
    for (uint32_t s = 0; s < N; s++) {
        int dy, dx, flip, dy2, dx2, flip2;
        gt_augment_draw(&a, 42, 3, s, &dy, &dx, &flip);
        gt_augment_draw(&a, 42, 3, s, &dy2, &dx2, &flip2);
        CHECK(dy == dy2 && dx == dx2 && flip == flip2);
        CHECK(dy >= 0 && dy <= 4 && dx >= 0 && dx <= 4 && (flip == 0 || flip == 1));
        seen[dy][dx][flip]++;
        gt_data_copy_sample(&ds, s, &a, 42, 3, got);
        augment_expected(ds.images + (size_t)s * C * H * W, C, H, W, 2, dy, dx, flip, want);
        CHECK_MSG(memcmp(got, want, sizeof got) == 0, "sample %u", s);
    }
    int all = 1;
    for (int y = 0; y < 5; y++)
        for (int x = 0; x < 5; x++)
            all = all && seen[y][x][0] && seen[y][x][1];
    CHECK(all);
    /* Another epoch or seed draws differently for some samples; the same key always the same. */
    int differ_epoch = 0, differ_seed = 0;
    for (uint32_t s = 0; s < 64; s++) {
        int d[3], o[3], q[3];
        gt_augment_draw(&a, 42, 3, s, &d[0], &d[1], &d[2]);
        gt_augment_draw(&a, 42, 4, s, &o[0], &o[1], &o[2]);
        gt_augment_draw(&a, 43, 3, s, &q[0], &q[1], &q[2]);
        differ_epoch += memcmp(d, o, sizeof d) != 0;
        differ_seed += memcmp(d, q, sizeof d) != 0;
    }
    CHECK(differ_epoch > 32 && differ_seed > 32);
    /* Flip alone never shifts; crop alone never mirrors; none copies. */
    gt_augment fl = {.pad = 0, .flip = 1}, none = {0, 0};
    for (uint32_t s = 0; s < 16; s++) {
        int dy, dx, flip;
        gt_augment_draw(&fl, 42, 3, s, &dy, &dx, &flip);
        CHECK(dy == 0 && dx == 0);
        gt_data_copy_sample(&ds, s, &fl, 42, 3, got);
        augment_expected(ds.images + (size_t)s * C * H * W, C, H, W, 0, 0, 0, flip, want);
        CHECK(memcmp(got, want, sizeof got) == 0);
        gt_data_copy_sample(&ds, s, &none, 42, 3, got);
        CHECK(memcmp(got, ds.images + (size_t)s * C * H * W, sizeof got) == 0);
        gt_data_copy_sample(&ds, s, NULL, 42, 3, got);
        CHECK(memcmp(got, ds.images + (size_t)s * C * H * W, sizeof got) == 0);
    }
    gt_free(ds.images);
}

/* The crop and flip of images of other shapes, the padding wider than the image included, against
 * the padded copy: every offset and both flips occur for each shape. */
static void test_augment_shapes(void)
{
    static const int shape[][4] = {{1, 1, 1, 3}, {1, 3, 2, 4}, {3, 32, 32, 4}, {2, 5, 7, 6}};
    enum { N = 4000 };
    for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++) {
        int c = shape[k][0], h = shape[k][1], w = shape[k][2], pad = shape[k][3];
        size_t len = (size_t)c * h * w;
        gt_dataset ds = {.n = N, .c = c, .h = h, .w = w, .nclasses = 2};
        ds.images = gt_alloc((size_t)N * len);
        for (size_t i = 0; i < (size_t)N * len; i++)
            ds.images[i] = (uint8_t)(i % 253 + 1);
        gt_augment a = {.pad = pad, .flip = 1};
        uint8_t *got = malloc(len), *want = malloc(len);
        int span = 2 * pad + 1, seen = 0, *hit = calloc((size_t)span * span * 2, sizeof *hit);
        for (uint32_t s = 0; s < N; s++) {
            int dy, dx, flip;
            gt_augment_draw(&a, 7, 1, s, &dy, &dx, &flip);
            gt_data_copy_sample(&ds, s, &a, 7, 1, got);
            augment_expected(ds.images + (size_t)s * len, c, h, w, pad, dy, dx, flip, want);
            CHECK_MSG(memcmp(got, want, len) == 0, "shape %zu sample %u", k, s);
            seen += !hit[(dy * span + dx) * 2 + flip]++;
        }
        CHECK_MSG(seen == span * span * 2, "shape %zu: %d of %d crops and flips drawn", k, seen,
                  span * span * 2);
        free(hit);
        free(got);
        free(want);
        gt_free(ds.images);
    }
}

/* The CPU network's gather augments a training batch as gt_data_copy_sample does, whatever batch
 * the sample lands in, and never an evaluation. */
static void test_augment_cpu_net(void)
{
    enum { C = 1, H = 6, W = 6, N = 8 };
    gt_err e = {{0}};
    gt_model m;
    CHECK(gt_model_build("fc:3", C, H, W, 3, &m, &e) == 0);
    gt_dataset ds = {.n = N, .c = C, .h = H, .w = W, .nclasses = 3};
    ds.images = gt_alloc((size_t)N * C * H * W);
    ds.labels = gt_alloc(N * sizeof *ds.labels);
    for (size_t i = 0; i < (size_t)N * C * H * W; i++)
        ds.images[i] = (uint8_t)(i * 7 % 250 + 3);
    for (int i = 0; i < N; i++)
        ds.labels[i] = (uint16_t)(i % 3);
    gt_cpu_net net;
    CHECK(gt_cpu_net_create(&net, &m, N, &e) == 0);
    float *params = gt_alloc(m.nparams * sizeof(float));
    gt_model_init_params(&m, params, 1);
    gt_augment a = {.pad = 2, .flip = 1};
    uint32_t idx[N] = {5, 1, 7, 0, 2, 6, 3, 4}, one[1] = {7};
    gt_batch b = {&ds, idx, N, 9, 77, &a};
    uint8_t want[C * H * W];
    size_t len = (size_t)C * H * W;
    int changed = 0;
    CHECK(isfinite(gt_cpu_net_step(&net, params, &b, 1, NULL, NULL)));
    for (int i = 0; i < N; i++) {
        gt_data_copy_sample(&ds, idx[i], &a, 77, 9, want);
        CHECK(memcmp(net.xbytes + i * len, want, len) == 0);
        changed += memcmp(want, ds.images + idx[i] * len, len) != 0;
    }
    CHECK(changed > 0);
    gt_batch b1 = {&ds, one, 1, 9, 77, &a};
    CHECK(isfinite(gt_cpu_net_step(&net, params, &b1, 1, NULL, NULL)));
    gt_data_copy_sample(&ds, 7, &a, 77, 9, want);
    CHECK(memcmp(net.xbytes, want, len) == 0);
    CHECK(isfinite(gt_cpu_net_step(&net, params, &b, 0, NULL, NULL)));
    for (int i = 0; i < N; i++)
        CHECK(memcmp(net.xbytes + i * len, ds.images + idx[i] * len, len) == 0);
    gt_free(params);
    gt_cpu_net_destroy(&net);
    gt_free(ds.images);
    gt_free(ds.labels);
}

/* ---- normalisation --------------------------------------------------------------------------- */

static void test_norm_parse(void)
{
    gt_input_norm n;
    int count = 0;
    gt_err e = {{0}};
    char buf[600];
    CHECK(gt_norm_parse("x", "0.4914,0.4822,0.4465/0.247,0.2435,0.2616", &n, &count, &e) == 0);
    CHECK(n.on && count == 3 && n.mean[1] == 0.4822f && n.std[2] == 0.2616f);
    gt_norm_format(&n, 3, buf, sizeof buf);
    gt_input_norm back;
    int count2;
    CHECK(gt_norm_parse("x", buf, &back, &count2, &e) == 0 && count2 == 3);
    CHECK(memcmp(back.mean, n.mean, sizeof n.mean) == 0 && memcmp(back.std, n.std, sizeof n.std) == 0);
    /* 9 digits bring back any float exactly. */
    n.mean[0] = 0.1f + 1e-8f, n.std[0] = 1.0f / 3.0f;
    gt_norm_format(&n, 1, buf, sizeof buf);
    CHECK(gt_norm_parse("x", buf, &back, &count2, &e) == 0 && count2 == 1);
    CHECK(back.mean[0] == n.mean[0] && back.std[0] == n.std[0]);
    n.on = 0;
    gt_norm_format(&n, 3, buf, sizeof buf);
    CHECK(strcmp(buf, "none") == 0);
    const char *bad[] = {"", "/", "0.5", "0.5/", "/0.5", "0.5,/0.2", "0.5//0.2", "a/b",
                         "0.5/-1", "0.5/0", "1e9/1", "0.5,0.5/0.5",
                         "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1/1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(gt_norm_parse("what", bad[i], &n, &count, &e) != 0, "'%s' accepted", bad[i]);
        CHECK(strncmp(e.msg, "what: ", 6) == 0);
    }
}

/* auto's statistics: the per-channel mean and population std of x / 255, by hand. */
static void test_norm_stats(void)
{
    enum { N = 3, C = 2, P = 4 };
    gt_dataset ds = {.n = N, .c = C, .h = 2, .w = 2, .nclasses = 2};
    ds.images = gt_alloc(N * C * P);
    double sum[C] = {0}, sq[C] = {0};
    for (int i = 0; i < N * C * P; i++) {
        ds.images[i] = (uint8_t)(i * 29 % 256);
        int ch = i / P % C;
        double v = ds.images[i] / 255.0;
        sum[ch] += v, sq[ch] += v * v;
    }
    gt_input_norm n;
    gt_err e = {{0}};
    CHECK(gt_data_channel_stats(&ds, &n, &e) == 0 && n.on);
    for (int ch = 0; ch < C; ch++) {
        double mean = sum[ch] / (N * P), sd = sqrt(sq[ch] / (N * P) - mean * mean);
        CHECK_CLOSE(n.mean[ch], mean, 1e-6);
        CHECK_CLOSE(n.std[ch], sd, 1e-6);
    }
    memset(ds.images, 7, N * C * P); /* constant: std 1 */
    CHECK(gt_data_channel_stats(&ds, &n, &e) == 0 && n.std[0] == 1.0f && n.std[1] == 1.0f);
    CHECK_CLOSE(n.mean[0], 7 / 255.0, 1e-7);
    ds.c = GT_NORM_MAX_C + 1;
    CHECK(gt_data_channel_stats(&ds, &n, &e) != 0 && strstr(e.msg, "channels") != NULL);
    gt_free(ds.images);
}

/* The CPU network's input step normalises each channel as model.h says, and leaves x / 255 with
 * the normalisation off. */
static void test_norm_cpu_net(void)
{
    enum { C = 3, H = 2, W = 3, N = 2 };
    gt_err e = {{0}};
    gt_model m;
    CHECK(gt_model_build("fc:2", C, H, W, 2, &m, &e) == 0);
    CHECK(!m.norm.on);
    gt_dataset ds = {.n = N, .c = C, .h = H, .w = W, .nclasses = 2};
    ds.images = gt_alloc(N * C * H * W);
    ds.labels = gt_alloc(N * sizeof *ds.labels);
    for (int i = 0; i < N * C * H * W; i++)
        ds.images[i] = (uint8_t)(i * 13 % 256);
    ds.labels[0] = 0, ds.labels[1] = 1;
    float *params = gt_alloc(m.nparams * sizeof(float));
    gt_model_init_params(&m, params, 1);
    uint32_t idx[N] = {1, 0};
    gt_batch b = {&ds, idx, N, 0, 1, NULL};
    gt_cpu_net net;
    CHECK(gt_cpu_net_create(&net, &m, N, &e) == 0);
    CHECK(isfinite(gt_cpu_net_step(&net, params, &b, 0, NULL, NULL)));
    for (int i = 0; i < N * C * H * W; i++)
        CHECK(net.act[0][i] == (float)ds.images[idx[i / (C * H * W)] * C * H * W + i % (C * H * W)] / 255.0f);
    const float mean[C] = {0.5f, 0.25f, 0.125f}, sd[C] = {0.2f, 0.3f, 0.4f};
    m.norm.on = 1;
    memcpy(m.norm.mean, mean, sizeof mean);
    memcpy(m.norm.std, sd, sizeof sd);
    CHECK(isfinite(gt_cpu_net_step(&net, params, &b, 0, NULL, NULL)));
    for (int i = 0; i < N * C * H * W; i++) {
        int s = i / (C * H * W), ch = i / (H * W) % C;
        uint8_t v = ds.images[idx[s] * C * H * W + i % (C * H * W)];
        CHECK(net.act[0][i] == ((float)v / 255.0f - mean[ch]) / sd[ch]);
    }
    gt_cpu_net_destroy(&net);
    gt_free(params);
    gt_free(ds.images);
    gt_free(ds.labels);
}

/* ---- many classes ---------------------------------------------------------------------------- */

/* A folder of 300 classes (c000..c299), one 2x2 PNG each in train and test: labels past a byte,
 * heap class names, the fingerprint over two-byte labels, and a CPU step on them. */
static void test_many_classes(void)
{
    enum { K = 300 };
    const char *root = tp("many");
    char path[1024];
    remove_tree(root);
    make_dir(root);
    for (int split = 0; split < 2; split++) {
        snprintf(path, sizeof path, "%s/%s", root, split ? "test" : "train");
        make_dir(path);
        for (int k = 0; k < K; k++) {
            snprintf(path, sizeof path, "%s/%s/c%03d", root, split ? "test" : "train", k);
            make_dir(path);
            snprintf(path, sizeof path, "%s/%s/c%03d/a.png", root, split ? "test" : "train", k);
            write_png(path, k, 2, 2, 1);
        }
    }
    gt_data d;
    gt_err e = {{0}};
    CHECK_MSG(gt_data_load(root, 0, &d, &e) == 0, "%s", e.msg);
    CHECK(d.train.nclasses == K && d.test.nclasses == K && d.train.n == K && d.test.n == K);
    for (uint32_t i = 0; d.train.labels && i < d.train.n; i++)
        CHECK(d.train.labels[i] == i && d.test.labels[i] == i);
    CHECK(d.class_names && strcmp(d.class_names[0], "c000") == 0 &&
          strcmp(d.class_names[299], "c299") == 0);
    CHECK(d.fingerprint == direct_fingerprint(&d));
    /* The same folder loads to the same fingerprint. */
    gt_data two;
    CHECK_MSG(gt_data_load(root, 0, &two, &e) == 0, "%s", e.msg);
    CHECK(two.fingerprint == d.fingerprint);
    gt_data_free(&two);
    gt_model m;
    gt_cpu_net net;
    CHECK(gt_model_build("fc:300", 1, 2, 2, K, &m, &e) == 0);
    CHECK(gt_cpu_net_create(&net, &m, 4, &e) == 0);
    float *params = gt_alloc(m.nparams * sizeof(float)), *grad = gt_alloc(m.nparams * sizeof(float));
    gt_model_init_params(&m, params, 3);
    uint32_t idx[4] = {299, 256, 255, 0};
    gt_batch b = {&d.train, idx, 4, 0, 1, NULL};
    double loss = gt_cpu_net_step(&net, params, &b, 1, grad, NULL);
    CHECK(isfinite(loss) && loss > 4 * 5.0 && loss < 4 * 7.0); /* about 4 ln 300 */
    CHECK(net.labels[0] == 299 && net.labels[1] == 256);
    gt_free(params);
    gt_free(grad);
    gt_cpu_net_destroy(&net);
    gt_data_free(&d);
    /* A test folder of other classes is refused by name. */
    snprintf(path, sizeof path, "%s/test/c299", root);
    char moved[1024];
    snprintf(moved, sizeof moved, "%s/test/d299", root);
    CHECK(rename(path, moved) == 0);
    CHECK_REFUSED(gt_data_load(root, 0, &d, &e_), "class 299 is 'd299'", "'c299'");
    remove_tree(root);
}

/* --val-split: round(F n) samples held out, disjoint from the rest, each part in the training
 * set's order, the same samples in every call (a fixed seed); sides left empty are refused. */
static void test_val_split(void)
{
    const uint32_t n = 1000;
    uint32_t held_first[150];
    for (int round = 0; round < 2; round++) {
        gt_data d;
        gt_err e = {{0}};
        memset(&d, 0, sizeof d);
        d.train = (gt_dataset){.n = n, .c = 1, .h = 2, .w = 2, .nclasses = 10};
        d.train.images = gt_alloc(n * 4);
        d.train.labels = gt_alloc(n * sizeof *d.train.labels);
        for (uint32_t i = 0; i < n; i++) {
            memcpy(d.train.images + 4 * i, &i, 4); /* each sample's bytes say its index */
            d.train.labels[i] = (uint16_t)(i % 10);
        }
        CHECK(gt_data_split_val(&d, 0.15, &e) == 0);
        CHECK(d.val.n == 150 && d.train.n == 850 && d.val.c == 1 && d.val.nclasses == 10);
        unsigned char seen[1000] = {0};
        uint32_t prev = 0;
        for (uint32_t k = 0; k < d.val.n + d.train.n; k++) {
            const gt_dataset *s = k < d.val.n ? &d.val : &d.train;
            uint32_t j = k < d.val.n ? k : k - d.val.n, i;
            memcpy(&i, s->images + 4 * j, 4);
            CHECK(i < n && !seen[i] && s->labels[j] == i % 10);
            CHECK(j == 0 || i > prev); /* in order within each part */
            seen[i] = 1;
            prev = i;
            if (k < d.val.n && round == 0)
                held_first[k] = i;
            else if (k < d.val.n)
                CHECK(held_first[k] == i); /* the same samples held out again */
        }
        gt_data_free(&d);
    }
    gt_err e = {{0}};
    CHECK(gt_data_val_check(10, 0.01, &e) != 0 && strstr(e.msg, "--val-split 0.01"));
    CHECK(gt_data_val_check(10, 0.99, &e) != 0);
    CHECK(gt_data_val_check(10, 0.1, &e) == 0 && gt_data_val_check(10, 0, &e) == 0);
}

int main(void)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/gt_test_data_XXXXXX");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    test_idx_good();
    test_idx_damage();
    test_gzip_integrity();
    test_idx_large();
    test_idx_dataset();
    test_folder_grey();
    test_data_probe();
    test_folder_rgb();
    test_png_damage();
    test_other_formats();
    test_jpeg();
    test_escape();
    test_default_search();
    test_fashion_mnist();
    test_cifar10();
    test_cifar100();
    test_cifar_damage();
    test_synthetic();
    test_image_size();
    test_augment_parse();
    test_augment_bytes();
    test_augment_shapes();
    test_augment_cpu_net();
    test_norm_parse();
    test_norm_stats();
    test_norm_cpu_net();
    test_many_classes();
    test_val_split();
    remove_tree(tmp_root);
    TEST_DONE();
}
