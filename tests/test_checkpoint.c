/* test_checkpoint.c - checkpoints: bit-exact round trips of parameters, optimizer state and
 * metadata; a header that is plain safetensors; refusal of every kind of damage without touching
 * the caller's arrays; rotation; unwritable paths and failing writes; and a saver killed at random
 * moments that never leaves a torn checkpoint behind.
 *
 * The models are built by hand, so this test depends on nothing but common.c and checkpoint.c. */
#include "gputrain/checkpoint.h"
#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

/* Everything printable and then some, to exercise JSON escaping. */
#define ODD_SPEC "conv:2:3 relu # \"quoted\" back\\slash\ttab\nnewline \x01\x1f\x7f " \
                 "\xc3\xa9 \xe2\x98\x83 \xf0\x9d\x84\x9e\nfc:3"

static char g_dir[256];

static void test_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", g_dir, name);
}

static void model_add(gt_model *m, const char *name, int rank, const int *shape)
{
    gt_tensor_info *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rank = rank;
    t->len = 1;
    for (int d = 0; d < rank; d++) {
        t->shape[d] = shape[d];
        t->len *= (size_t)shape[d];
    }
    t->offset = m->nparams;
    m->nparams += t->len;
}

/* c1 3x3 conv with 2 channels and an f1 linear layer of fc_in inputs and nout outputs. */
static void model_make(gt_model *m, const char *spec, int fc_in, int nout)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "custom");
    snprintf(m->spec, sizeof m->spec, "%s", spec);
    m->in_c = 1, m->in_h = 28, m->in_w = 28, m->nclasses = nout;
    model_add(m, "c1.weight", 4, (const int[]){2, 1, 3, 3});
    model_add(m, "c1.bias", 1, (const int[]){2});
    model_add(m, "f1.weight", 2, (const int[]){nout, fc_in});
    model_add(m, "f1.bias", 1, (const int[]){nout});
}

/* Parameters and optimizer state of one model. */
typedef struct arrays {
    size_t n;
    float *p, *s[2];
    float *b;          /* the model's buffers: as many floats as parameters, which is more */
} arrays;

static void arrays_alloc(arrays *a, size_t n)
{
    a->n = n;
    a->p = calloc(n, sizeof(float));
    a->s[0] = calloc(n, sizeof(float));
    a->s[1] = calloc(n, sizeof(float));
    a->b = calloc(n, sizeof(float));
    if (!a->p || !a->s[0] || !a->s[1] || !a->b) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
}

static void arrays_free(arrays *a)
{
    free(a->p);
    free(a->s[0]);
    free(a->s[1]);
    free(a->b);
}

/* Random bit patterns: NaN payloads, infinities, denormals and -0 must all survive. */
static void arrays_random(arrays *a, uint64_t seed)
{
    gt_rng r;
    gt_rng_seed(&r, seed);
    float *all[3] = {a->p, a->s[0], a->s[1]};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < a->n; i++) {
            uint32_t bits = (uint32_t)gt_rng_u64(&r);
            memcpy(&all[k][i], &bits, sizeof bits);
        }
}

static void arrays_fill(arrays *a, float v)
{
    for (size_t i = 0; i < a->n; i++)
        a->p[i] = a->s[0][i] = a->s[1][i] = v;
}

static int arrays_equal(const arrays *a, const arrays *b, int nstate)
{
    if (memcmp(a->p, b->p, a->n * sizeof(float)) != 0)
        return 0;
    for (int s = 0; s < nstate; s++)
        if (memcmp(a->s[s], b->s[s], a->n * sizeof(float)) != 0)
            return 0;
    return 1;
}

static int all_values(const arrays *a, int nstate, float v)
{
    for (size_t i = 0; i < a->n; i++) {
        if (a->p[i] != v)
            return 0;
        for (int s = 0; s < nstate; s++)
            if (a->s[s][i] != v)
                return 0;
    }
    return 1;
}

static void meta_make(gt_ckpt_meta *mt, const gt_model *m, const char *optimizer)
{
    memset(mt, 0, sizeof *mt);
    snprintf(mt->model_spec, sizeof mt->model_spec, "%s", m->spec);
    snprintf(mt->model, sizeof mt->model, "%s", m->name);
    snprintf(mt->mode, sizeof mt->mode, "hogwild");
    snprintf(mt->optimizer, sizeof mt->optimizer, "%s", optimizer);
    mt->in_c = m->in_c, mt->in_h = m->in_h, mt->in_w = m->in_w, mt->nclasses = m->nclasses;
    mt->epoch = 7;
    mt->step = 31;
    mt->samples = 123456789012345ull;
    mt->updates = 4242;
    mt->seed = 0xDEADBEEFCAFEF00Dull;
    mt->data_fingerprint = 0x0badf00du;
    mt->batch = 64;
    mt->workers = 3;
    mt->epoch_pos = 5952;
    mt->train_samples = 60000;
    mt->lr = 0.1;
    mt->momentum = 0.57;
    mt->weight_decay = 5e-4;
    snprintf(mt->run_options, sizeof mt->run_options,
             "[\"--lr=0.1\",\"--nesterov\",\"--model=conv:4:3 \\\"q\\\" fc:10\"]");
}

static int meta_equal(const gt_ckpt_meta *a, const gt_ckpt_meta *b)
{
    return strcmp(a->model_spec, b->model_spec) == 0 && strcmp(a->model, b->model) == 0 &&
           strcmp(a->mode, b->mode) == 0 && strcmp(a->optimizer, b->optimizer) == 0 &&
           a->in_c == b->in_c && a->in_h == b->in_h && a->in_w == b->in_w &&
           a->nclasses == b->nclasses && a->epoch == b->epoch && a->step == b->step &&
           a->samples == b->samples && a->updates == b->updates && a->seed == b->seed &&
           a->data_fingerprint == b->data_fingerprint && a->batch == b->batch &&
           a->workers == b->workers && a->epoch_pos == b->epoch_pos &&
           a->train_samples == b->train_samples && a->lr == b->lr &&
           a->momentum == b->momentum && a->weight_decay == b->weight_decay &&
           strcmp(a->run_options, b->run_options) == 0;
}

static int save(const char *path, const gt_model *m, const arrays *a, int nstate,
                const gt_ckpt_meta *mt, int keep, gt_err *e)
{
    return gt_ckpt_save(path, m, a->p, a->b, nstate ? a->s : NULL, nstate, mt, keep, e);
}

static int load(const char *path, const gt_model *m, arrays *a, int nstate, gt_ckpt_meta *mt,
                gt_err *e)
{
    return gt_ckpt_load(path, m, a->p, a->b, nstate ? a->s : NULL, nstate, mt, 0, e);
}

static unsigned char *file_read(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len + 1);
    *n = fread(buf, 1, (size_t)len, f);
    fclose(f);
    return buf;
}

static void file_write(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static uint64_t le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* A load that must fail, with a message naming the file (and saying `why` when given); the
 * caller's arrays must come back as they were. */
static void expect_refused(const char *path, const gt_model *m, int nstate, const char *why)
{
    arrays a;
    arrays_alloc(&a, m->nparams);
    arrays_fill(&a, 1234.5f);
    gt_ckpt_meta mt;
    gt_err e = {{0}};
    int rc = load(path, m, &a, nstate, &mt, &e);
    CHECK_MSG(rc == -1, "%s loaded (expected: %s)", path, why ? why : "refusal");
    CHECK_MSG(strstr(e.msg, path) != NULL, "message does not name %s: %s", path, e.msg);
    if (why)
        CHECK_MSG(strstr(e.msg, why) != NULL, "expected \"%s\" in: %s", why, e.msg);
    CHECK(all_values(&a, nstate, 1234.5f));
    arrays_free(&a);
}

/* ---- round trips and the file format ----------------------------------------------------------- */

static void test_round_trip(const char *optimizer, int nstate)
{
    gt_model m;
    model_make(&m, ODD_SPEC, 4, 3);
    arrays a, b;
    arrays_alloc(&a, m.nparams);
    arrays_alloc(&b, m.nparams);
    arrays_random(&a, 1);
    arrays_random(&b, 2);
    gt_ckpt_meta in, out, out2;
    meta_make(&in, &m, optimizer);
    in.epoch = 100000; /* the largest values accepted */
    in.samples = 1ull << 53;
    in.step = in.samples;
    char path[512];
    test_path(path, sizeof path, "round");
    gt_err e = {{0}};
    CHECK_MSG(save(path, &m, &a, nstate, &in, 0, &e) == 0, "%s", e.msg);
    memset(&out, 0x5a, sizeof out);
    CHECK_MSG(gt_ckpt_read_meta(path, &out, &e) == 0, "%s", e.msg);
    CHECK(meta_equal(&in, &out));
    memset(&out2, 0x5a, sizeof out2);
    CHECK_MSG(load(path, &m, &b, nstate, &out2, &e) == 0, "%s", e.msg);
    CHECK(meta_equal(&in, &out2));
    CHECK(arrays_equal(&a, &b, nstate));
    /* Parameters alone, from a file that also holds state. */
    arrays_random(&b, 3);
    CHECK_MSG(load(path, &m, &b, 0, NULL, &e) == 0, "%s", e.msg);
    CHECK(arrays_equal(&a, &b, 0));
    arrays_free(&a);
    arrays_free(&b);
}

/* A residual network's checkpoint holds its batch norms' buffers under PyTorch's names beside the
 * parameters and state; they come back bit for bit, and a file with a non-finite running
 * variance is refused. */
static void test_buffers(void)
{
    gt_model m;
    gt_err e = {{0}};
    CHECK_MSG(gt_model_build("resnet20", 3, 8, 8, 10, &m, &e) == 0, "%s", e.msg);
    CHECK(m.nbuffers > 0 && m.nbuffer_tensors == 3 * 21);
    arrays a, b;
    arrays_alloc(&a, m.nparams);
    arrays_alloc(&b, m.nparams);
    gt_model_init_params(&m, a.p, 5);
    for (size_t i = 0; i < m.nbuffers; i++)
        a.b[i] = (float)i * 0.25f;
    gt_ckpt_meta in, out;
    meta_make(&in, &m, "sgd");
    char path[512];
    test_path(path, sizeof path, "buffers");
    CHECK_MSG(save(path, &m, &a, 1, &in, 0, &e) == 0, "%s", e.msg);
    CHECK_MSG(load(path, &m, &b, 1, &out, &e) == 0, "%s", e.msg);
    CHECK(arrays_equal(&a, &b, 1));
    CHECK(memcmp(a.b, b.b, m.nbuffers * sizeof(float)) == 0);
    size_t len;
    unsigned char *file = file_read(path, &len);
    CHECK(file && strstr((char *)file + 8, "\"layers.6.short.1.num_batches_tracked\":{\"dtype\":"
                                       "\"F32\",\"shape\":[]") != NULL);
    CHECK(file && strstr((char *)file + 8, "\"stem.1.running_var\"") != NULL);
    free(file);
    /* The buffers must be finite. */
    const gt_tensor_info *rv = gt_model_buffer(&m, "stem.1.running_var");
    CHECK(rv != NULL);
    a.b[rv->offset + 1] = NAN;
    char bad[512];
    test_path(bad, sizeof bad, "buffers_nan");
    CHECK_MSG(save(bad, &m, &a, 1, &in, 0, &e) == 0, "%s", e.msg);
    expect_refused(bad, &m, 1, "batch-norm buffer holds NaN");
    arrays_free(&a);
    arrays_free(&b);
}

/* A moving average of the parameters (--ema) is saved as ema.<tensor> beside the parameters,
 * buffers and state; it comes back bit for bit with gt_ckpt_load_ema, gt_ckpt_load skips it, a
 * file without one leaves the caller's array alone, and a NaN in it is refused by name. */
static void test_ema(void)
{
    gt_model m;
    gt_err e = {{0}};
    CHECK_MSG(gt_model_build("resnet20", 3, 8, 8, 10, &m, &e) == 0, "%s", e.msg);
    arrays a, b;
    arrays_alloc(&a, m.nparams);
    arrays_alloc(&b, m.nparams);
    gt_model_init_params(&m, a.p, 11);
    for (size_t i = 0; i < m.nparams; i++)
        a.s[0][i] = (float)i * -0.25f;
    for (size_t i = 0; i < m.nbuffers; i++)
        a.b[i] = (float)i * 0.5f;
    float *ema = malloc(m.nparams * sizeof(float)), *got = malloc(m.nparams * sizeof(float));
    CHECK(ema && got);
    for (size_t i = 0; i < m.nparams; i++)
        ema[i] = (float)i * 0.125f - 3.0f;
    gt_ckpt_meta in, out;
    meta_make(&in, &m, "sgd");
    in.has_ema = 0; /* ignored on saving: the array given decides */
    char path[512], plain[512];
    test_path(path, sizeof path, "ema");
    test_path(plain, sizeof plain, "ema_none");
    CHECK_MSG(gt_ckpt_save_ema(path, &m, a.p, ema, a.b, a.s, 1, &in, 0, &e) == 0, "%s", e.msg);
    CHECK_MSG(gt_ckpt_read_meta(path, &out, &e) == 0 && out.has_ema == 1, "%s", e.msg);
    memset(got, 0, m.nparams * sizeof(float));
    CHECK_MSG(gt_ckpt_load_ema(path, &m, b.p, got, b.b, b.s, 1, &out, 0, &e) == 0, "%s", e.msg);
    CHECK(out.has_ema == 1 && meta_equal(&in, &out));
    CHECK(arrays_equal(&a, &b, 1));
    CHECK(memcmp(a.b, b.b, m.nbuffers * sizeof(float)) == 0);
    CHECK(memcmp(ema, got, m.nparams * sizeof(float)) == 0);
    /* the model's own parameters stay the training ones; the average is under ema.<name> */
    size_t len;
    unsigned char *file = file_read(path, &len);
    char key[160];
    snprintf(key, sizeof key, "\"ema.%s\":{\"dtype\":\"F32\"", m.tensors[0].name);
    CHECK(file && strstr((char *)file + 8, key) != NULL);
    snprintf(key, sizeof key, "\"crc32.ema.%s\"", m.tensors[m.ntensors - 1].name);
    CHECK(file && strstr((char *)file + 8, key) != NULL);
    free(file);
    /* a loader that does not ask for the average reads the rest as before */
    arrays_fill(&b, 5.0f);
    CHECK_MSG(load(path, &m, &b, 1, &out, &e) == 0, "%s", e.msg);
    CHECK(arrays_equal(&a, &b, 1) && out.has_ema == 1);
    /* a file without an average: has_ema 0 and the caller's array untouched */
    CHECK_MSG(save(plain, &m, &a, 1, &in, 0, &e) == 0, "%s", e.msg);
    for (size_t i = 0; i < m.nparams; i++)
        got[i] = 77.0f;
    CHECK_MSG(gt_ckpt_load_ema(plain, &m, b.p, got, b.b, b.s, 1, &out, 0, &e) == 0, "%s", e.msg);
    CHECK(out.has_ema == 0 && arrays_equal(&a, &b, 1));
    for (size_t i = 0; i < m.nparams; i++)
        CHECK(got[i] == 77.0f);
    CHECK_MSG(gt_ckpt_read_meta(plain, &out, &e) == 0 && out.has_ema == 0, "%s", e.msg);
    /* the average must be finite, like the parameters */
    ema[3] = NAN;
    CHECK_MSG(gt_ckpt_save_ema(path, &m, a.p, ema, a.b, a.s, 1, &in, 0, &e) == 0, "%s", e.msg);
    CHECK(gt_ckpt_load_ema(path, &m, b.p, got, b.b, b.s, 1, &out, 0, &e) != 0 &&
          strstr(e.msg, "ema.") && strstr(e.msg, "NaN"));
    CHECK(got[0] == 77.0f); /* refused before a byte reached the caller */
    free(ema);
    free(got);
    arrays_free(&a);
    arrays_free(&b);
}

/* Finds `"key":` in the header text and the text after it. */
static const char *header_after(const char *header, const char *key)
{
    char pat[256];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(header, pat);
    return p ? p + strlen(pat) : NULL;
}

/* Reads the file as a safetensors reader would, without checkpoint.c: the layout, the offsets of
 * each tensor, the bytes there and their CRC in the metadata. */
static void check_tensor_bytes(const unsigned char *file, const char *header, uint64_t data_start,
                               const char *name, const float *values, size_t len)
{
    const char *p = header_after(header, name);
    unsigned long long begin = 0, end = 0;
    CHECK_MSG(p && (p = strstr(p, "\"data_offsets\":[")) &&
              sscanf(p, "\"data_offsets\":[%llu,%llu]", &begin, &end) == 2, "offsets of %s", name);
    CHECK(end - begin == len * sizeof(float));
    for (size_t i = 0; i < len; i++) {
        uint32_t bits;
        memcpy(&bits, &values[i], sizeof bits);
        const unsigned char *b = file + data_start + begin + 4 * i;
        CHECK(((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24) == bits);
    }
    char key[160];
    unsigned crc = 0;
    snprintf(key, sizeof key, "crc32.%s", name);
    p = header_after(header, key);
    CHECK_MSG(p && sscanf(p, "\"%8x\"", &crc) == 1, "no %s", key);
    CHECK(crc == (uint32_t)crc32(0, file + data_start + begin, (uInt)(end - begin)));
}

static void test_header_format(void)
{
    gt_model m;
    model_make(&m, ODD_SPEC, 4, 3);
    arrays a;
    arrays_alloc(&a, m.nparams);
    arrays_random(&a, 4);
    gt_ckpt_meta mt;
    meta_make(&mt, &m, "adam");
    char path[512];
    test_path(path, sizeof path, "format");
    gt_err e = {{0}};
    CHECK_MSG(save(path, &m, &a, 2, &mt, 0, &e) == 0, "%s", e.msg);
    size_t size;
    unsigned char *file = file_read(path, &size);
    CHECK(file && size >= 8);
    uint64_t n = le64(file);
    CHECK(n > 0 && 8 + n <= size && (8 + n) % 8 == 0);
    char *header = malloc(n + 1);
    memcpy(header, file + 8, n);
    header[n] = '\0';
    CHECK(header[0] == '{' && strlen(header) == n);
    size_t last = n;
    while (last > 0 && header[last - 1] == ' ')
        last--;
    CHECK(last > 0 && header[last - 1] == '}' && n - last < 8);
    CHECK(strstr(header, "\"__metadata__\":{\"format\":\"gputrain-2\"") != NULL);
    CHECK(strstr(header, "\"in_shape\":\"1x28x28\"") && strstr(header, "\"nclasses\":\"3\""));
    CHECK(strstr(header, "\"data_fingerprint\":\"0badf00d\"") != NULL);
    CHECK(strstr(header, "\"seed\":\"16045690984503111693\"") != NULL);
    CHECK(strstr(header, "\\\"quoted\\\" back\\\\slash\\ttab\\nnewline \\u0001\\u001f") != NULL);
    size_t total = 0;
    const char *states[] = {"", "optim.exp_avg.", "optim.exp_avg_sq."};
    const float *arrays_of[] = {a.p, a.s[0], a.s[1]};
    for (int s = 0; s < 3; s++)
        for (int t = 0; t < m.ntensors; t++) {
            char name[96];
            snprintf(name, sizeof name, "%s%s", states[s], m.tensors[t].name);
            check_tensor_bytes(file, header, 8 + n, name, arrays_of[s] + m.tensors[t].offset,
                               m.tensors[t].len);
            total += m.tensors[t].len * sizeof(float);
        }
    CHECK(size - 8 - n == total);
    free(header);
    free(file);
    arrays_free(&a);
}

/* ---- damage -------------------------------------------------------------------------------------- */

static void test_truncated_and_flipped(void)
{
    gt_model m;
    model_make(&m, ODD_SPEC, 4, 3);
    arrays a, b;
    arrays_alloc(&a, m.nparams);
    arrays_alloc(&b, m.nparams);
    arrays_random(&a, 5);
    gt_ckpt_meta mt;
    meta_make(&mt, &m, "adam");
    char path[512], bad[512];
    test_path(path, sizeof path, "damage");
    test_path(bad, sizeof bad, "damaged copy");
    gt_err e = {{0}};
    CHECK_MSG(save(path, &m, &a, 2, &mt, 0, &e) == 0, "%s", e.msg);
    size_t size;
    unsigned char *file = file_read(path, &size);
    uint64_t data_start = 8 + le64(file);

    file_write(bad, file, size);
    for (size_t len = size; len-- > 0;) {
        CHECK(truncate(bad, (off_t)len) == 0);
        expect_refused(bad, &m, 2, NULL);
        CHECK(gt_ckpt_read_meta(bad, &mt, &e) == -1 && strstr(e.msg, bad));
    }

    /* Every single-byte change of the data must fail its CRC; in the header it must fail or, where
     * it lands in padding or an unused metadata value, still give back the original tensors. */
    static const unsigned char masks[] = {0x01, 0xff};
    int header_loads = 0;
    file_write(bad, file, size);
    int fd = open(bad, O_RDWR);
    for (size_t pos = 0; pos < size; pos++) {
        for (size_t k = 0; k < sizeof masks; k++) {
            unsigned char flipped = file[pos] ^ masks[k];
            CHECK(pwrite(fd, &flipped, 1, (off_t)pos) == 1);
            if (pos >= data_start) {
                expect_refused(bad, &m, 2, "fails its CRC32");
            } else {
                arrays_fill(&b, -1.0f);
                if (load(bad, &m, &b, 2, NULL, &e) == 0) {
                    header_loads++;
                    CHECK_MSG(pos >= 8 && arrays_equal(&a, &b, 2), "flip at %zu loaded wrong data", pos);
                } else {
                    CHECK_MSG(strstr(e.msg, bad) != NULL, "%s", e.msg);
                    CHECK(all_values(&b, 2, -1.0f));
                }
            }
        }
        CHECK(pwrite(fd, &file[pos], 1, (off_t)pos) == 1);
    }
    close(fd);
    CHECK(header_loads < (int)(data_start / 4)); /* most header changes must be caught */
    free(file);
    arrays_free(&a);
    arrays_free(&b);
}

static void write_with_length(const char *path, uint64_t n, const void *body, size_t len)
{
    unsigned char *buf = malloc(8 + len);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, body, len);
    file_write(path, buf, 8 + len);
    free(buf);
}

static void test_not_checkpoints(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a;
    arrays_alloc(&a, m.nparams);
    gt_ckpt_meta mt;
    meta_make(&mt, &m, "sgd");
    char path[512], bad[512];
    test_path(path, sizeof path, "plain");
    test_path(bad, sizeof bad, "not a checkpoint");
    gt_err e = {{0}};
    CHECK_MSG(save(path, &m, &a, 0, &mt, 0, &e) == 0, "%s", e.msg);
    size_t size;
    unsigned char *file = file_read(path, &size);
    uint64_t n = le64(file);

    const uint64_t lies[] = {0, size - 8 + 1, n - 8, n + 8, UINT64_MAX, 1ull << 63};
    for (size_t i = 0; i < sizeof lies / sizeof *lies; i++) {
        write_with_length(bad, lies[i], file + 8, size - 8);
        expect_refused(bad, &m, 0, NULL);
    }
    write_with_length(bad, 0, file + 8, size - 8);
    expect_refused(bad, &m, 0, "header length 0");

    /* Over the 100 MiB cap, in a sparse file big enough to hold it: refused before allocating. */
    write_with_length(bad, (100ull << 20) + 1, "{", 1);
    CHECK(truncate(bad, (off_t)(110ull << 20)) == 0);
    expect_refused(bad, &m, 0, "header length");
    CHECK(gt_ckpt_read_meta(bad, &mt, &e) == -1 && strstr(e.msg, bad));

    gt_rng r;
    gt_rng_seed(&r, 6);
    unsigned char noise[1000];
    for (size_t i = 0; i < sizeof noise; i++)
        noise[i] = (unsigned char)gt_rng_u64(&r);
    file_write(bad, noise, sizeof noise);
    expect_refused(bad, &m, 0, NULL);
    file_write(bad, "", 0);
    expect_refused(bad, &m, 0, "too short");
    const char *text = "This is a text file, not a checkpoint.\nIt has two lines.\n";
    file_write(bad, text, strlen(text));
    expect_refused(bad, &m, 0, NULL);

    /* Plain safetensors files that are not ours. */
    const char *foreign = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}    ";
    unsigned char body[128] = {0};
    memcpy(body, foreign, strlen(foreign));
    write_with_length(bad, strlen(foreign), body, strlen(foreign) + 4);
    expect_refused(bad, &m, 0, "not a gputrain checkpoint");
    write_with_length(bad, 3, "[1]", 3);
    expect_refused(bad, &m, 0, "not a JSON object");
    write_with_length(bad, 8, "{}      ", 8);
    expect_refused(bad, &m, 0, "not a gputrain checkpoint");

    char missing[512];
    test_path(missing, sizeof missing, "no such file");
    expect_refused(missing, &m, 0, strerror(ENOENT));
    CHECK(gt_ckpt_read_meta(missing, &mt, &e) == -1 && strstr(e.msg, missing));
    expect_refused(g_dir, &m, 0, NULL);
    free(file);
    arrays_free(&a);
}

/* Recomputes header_crc32 (when the header still has one) the way the writer does, so a crafted
 * header reaches the checks behind the CRC. */
static void reseal(unsigned char *file, size_t hlen)
{
    const char *key = "\"header_crc32\":\"";
    char *h = (char *)file + 8, *at = NULL;
    for (size_t i = 0; i + strlen(key) + 8 < hlen && !at; i++)
        if (memcmp(h + i, key, strlen(key)) == 0)
            at = h + i + strlen(key);
    if (!at)
        return;
    memcpy(at, "00000000", 8);
    uint32_t crc = gt_crc32(gt_crc32(0, file, 8), h, hlen);
    char hex[9];
    snprintf(hex, sizeof hex, "%08" PRIx32, crc);
    memcpy(at, hex, 8);
}

/* Writes dst: src with the first `from` in its header replaced by `to` (or `to` appended to the
 * header when from is NULL), the data kept. */
static void rewrite_header(const char *src, const char *dst, const char *from, const char *to)
{
    size_t size;
    unsigned char *file = file_read(src, &size);
    uint64_t n = le64(file);
    char *header = calloc(n + strlen(to) + 16, 1);
    memcpy(header, file + 8, n);
    while (n > 0 && header[n - 1] == ' ')
        header[--n] = '\0';
    char *at = from ? strstr(header, from) : header + n;
    if (!from)
        from = "";
    if (!at) {
        fprintf(stderr, "test bug: \"%s\" is not in the header\n", from);
        exit(1);
    }
    size_t head = (size_t)(at - header), tail = n - head - strlen(from);
    size_t n2 = head + strlen(to) + tail;
    size_t padded = (n2 + 7) / 8 * 8;
    size_t data = size - 8 - le64(file);
    unsigned char *out = malloc(8 + padded + data);
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(out + 8, header, head);
    memcpy(out + 8 + head, to, strlen(to));
    memcpy(out + 8 + head + strlen(to), at + strlen(from), tail);
    memset(out + 8 + n2, ' ', padded - n2);
    memcpy(out + 8 + padded, file + size - data, data);
    reseal(out, padded);
    file_write(dst, out, 8 + padded + data);
    free(out);
    free(header);
    free(file);
}

static void test_crafted_headers(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a, b;
    arrays_alloc(&a, m.nparams);
    arrays_alloc(&b, m.nparams);
    arrays_random(&a, 7);
    gt_ckpt_meta mt;
    meta_make(&mt, &m, "sgd");
    char path[512], bad[512];
    test_path(path, sizeof path, "crafted");
    test_path(bad, sizeof bad, "crafted bad");
    gt_err e = {{0}};
    CHECK_MSG(save(path, &m, &a, 0, &mt, 0, &e) == 0, "%s", e.msg);

    /* c1.weight [0,72], c1.bias [72,80], f1.weight [80,128], f1.bias [128,140] */
    const char *bias = "\"c1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[72,80]}";
    const char *fbias = "\"f1.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[128,140]}";
    static char deep[2 * 100000 + 32] = "\"deep\":";
    size_t at = strlen(deep);
    memset(deep + at, '[', 100000);
    memset(deep + at + 100000, ']', 100000);
    strcpy(deep + at + 200000, ",\"mode\":");
    static char many[2 * 300000 + 32] = "\"many\":[0";
    at = strlen(many);
    for (int i = 0; i < 300000; i++, at += 2)
        memcpy(many + at, ",0", 2);
    strcpy(many + at, "],\"mode\":");
    const struct {
        const char *from, *to, *why;
    } refused[] = {
        {"\"F32\"", "\"F16\"", "dtype"},
        {"\"gputrain-2\"", "\"gputrain-3\"", "not a gputrain checkpoint"},
        {"\"__metadata__\"", "\"__metadata_x\"", "not a gputrain checkpoint"},
        {bias, "\"c1.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[76,80]}", "hole"},
        {bias, "\"c1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[68,76]}", "overlaps"},
        {bias, "\"c1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[72,84]}", "do not hold"},
        {bias, "\"c1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[80,72]}", "do not hold"},
        {bias, "\"c1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[72,80],\"x\":1}", NULL},
        {bias, "\"c1.bias\":{\"dtype\":\"F32\",\"shape\":[2]}", NULL},
        {bias, "\"c1.bias\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[72,80]}", "rank"},
        {fbias, "\"f1.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[128,144]}", "truncated"},
        {fbias, "\"f1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[128,136]}", "trailing"},
        {"[0,72]", "[0,72.0]", "integers"},
        {"[0,72]", "[0,7.2e1]", "integers"},
        {"[0,72]", "[-0,72]", NULL},
        {"[0,72]", "[00,72]", "leading zero"},
        {"[0,72]", "[0,72,]", NULL},
        {"[0,72]", "[0,72", NULL},
        {"[0,72]", "[0,99999999999999999999]", "too large"},
        {"\"epoch\":", "\"x\":true,\"epoch\":", NULL},
        {"\"epoch\":", "\"x\":null,\"epoch\":", NULL},
        {"\"mode\":", deep, "nested too deeply"},
        {"\"mode\":", many, "too many JSON values"},
        {bias, "\"c1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[72,80]},", NULL},
        {bias, "\"f1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[72,80]}", "duplicate"},
        {"\"hogwild\"", "\"hog\x01wild\"", "control character"},
        {"\"hogwild\"", "\"hog\xffwild\"", "UTF-8"},
        {"\"hogwild\"", "\"hog\xc0\x80wild\"", "UTF-8"},
        {"\"hogwild\"", "\"hog\xed\xa0\x80wild\"", "UTF-8"},
        {"\"hogwild\"", "\"hog\\ud800wild\"", "surrogate"},
        {"\"hogwild\"", "\"hog\\udc00wild\"", "surrogate"},
        {"\"hogwild\"", "\"hog\\u0000wild\"", "u0000"},
        {"\"hogwild\"", "\"hog\\xwild\"", "escape"},
        {"\"hogwild\"", "\"hogwild_is_far_too_long\"", "longer than"},
        {"\"hogwild\"", "\"hogwild", NULL},
        {"\"epoch\":\"7\"", "\"epoch\":\"4294967296\"", "epoch"},
        {"\"epoch\":\"7\"", "\"epoch\":\"07\"", "epoch"},
        {"\"epoch\":\"7\"", "\"epoch\":\"7 \"", "epoch"},
        {"\"epoch\":\"7\"", "\"epoch\":\"+7\"", "epoch"},
        {"\"epoch\":\"7\"", "\"epoch\":\"\"", "epoch"},
        {"\"epoch\":\"7\"", "\"epoch\":7", "not a string"},
        {"\"epoch\":\"7\",", "", "lacks \"epoch\""},
        {"\"seed\":\"", "\"seed\":\"1", "seed"},
        {"\"data_fingerprint\":\"", "\"data_fingerprint\":\"0", "data_fingerprint"},
        {"\"data_fingerprint\":\"0badf00d\"", "\"data_fingerprint\":\"0badf00g\"", "data_fingerprint"},
        {"\"1x28x28\"", "\"1x28\"", "in_shape"},
        {"\"1x28x28\"", "\"1x28x28x\"", "in_shape"},
        {"\"1x28x28\"", "\"0x28x28\"", "in_shape"},
        {"\"1x28x28\"", "\"1x28x99999999999\"", "in_shape"},
        {"\"1x28x28\"", "\"1x32x32\"", "inputs"},
        {"\"nclasses\":\"3\"", "\"nclasses\":\"0\"", "nclasses"},
        {"\"optimizer\":\"sgd\"", "\"optimizer\":\"rmsprop\"", "unknown optimizer"},
        {"\"crc32.c1.bias\":", "\"crc32.c9.bias\":\"00000000\",\"crc32.c1.bias\":", "names no tensor"},
        {"\"crc32.c1.bias\":", "\"crc33.c1.bias\":", "crc32.c1.bias"},
        {"\"crc32.c1.bias\":\"", "\"crc32.c1.bias\":\"1", "crc32.c1.bias"},
        {"\"c1.bias\":{", "\"c1.bias\" {", NULL},
        {"{\"__metadata__\"", "{\"__metadata__\":{},\"__metadata__\"", "duplicate"},
        {"\"conv:2:3 fc:3\"", "\"conv:2:3 fc:4\"", "is for model"},
        {NULL, " x", "junk"},
        {NULL, "}", "junk"},
        {NULL, "\f", "junk"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        rewrite_header(path, bad, refused[i].from, refused[i].to);
        expect_refused(bad, &m, 0, refused[i].why);
    }

    /* Tensors the model does not have, with a valid layout and CRC: the metadata reads, the load
     * refuses; and optimizer state of another optimizer counts as unknown too. */
    const char *extras[] = {"x.weight", "optim.exp_avg.c1.bias", "optim.momentum_buffer.c3.bias"};
    for (size_t i = 0; i < sizeof extras / sizeof *extras; i++) {
        char tensor[160], crc[160];
        snprintf(tensor, sizeof tensor,
                 "\"%s\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[140,140]},%s", extras[i], bias);
        snprintf(crc, sizeof crc, "\"crc32.%s\":\"00000000\",\"crc32.c1.bias\":", extras[i]);
        rewrite_header(path, bad, bias, tensor);
        rewrite_header(bad, bad, "\"crc32.c1.bias\":", crc);
        CHECK_MSG(gt_ckpt_read_meta(bad, &mt, &e) == 0, "%s", e.msg);
        expect_refused(bad, &m, 0, "does not have");
    }

    /* Changes that keep the meaning: escapes, whitespace, an unused metadata key. */
    const struct {
        const char *from, *to;
    } accepted[] = {
        {"\"c1.bias\":{", "\"c1.bi\\u0061s\":{"},
        {",\"c1.bias\":{", ",\n\t \"c1.bias\" :\r\n {"},
        {"\"__metadata__\":{", "\"__metadata__\":{\"note\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\","},
        {"\"hogwild\"", "\"\\u0073y\\u006ec\""},
    };
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) {
        rewrite_header(path, bad, accepted[i].from, accepted[i].to);
        arrays_fill(&b, 0);
        gt_ckpt_meta got;
        CHECK_MSG(load(bad, &m, &b, 0, &got, &e) == 0, "%s: %s", accepted[i].to, e.msg);
        CHECK(arrays_equal(&a, &b, 0));
        if (i == 3)
            CHECK(strcmp(got.mode, "sync") == 0);
    }
    arrays_free(&a);
    arrays_free(&b);
}

/* ---- model and optimizer mismatches ------------------------------------------------------------- */

static void test_mismatches(void)
{
    gt_model m, other, wide, bigger;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    model_make(&other, "conv:2:3 fc:4", 4, 4);
    model_make(&wide, "conv:2:3 fc:3", 5, 3);
    model_make(&bigger, "conv:2:3 fc:3", 4, 3);
    model_add(&bigger, "f2.bias", 1, (const int[]){3});
    snprintf(other.name, sizeof other.name, "mlp");
    arrays a, b;
    arrays_alloc(&a, m.nparams);
    arrays_alloc(&b, m.nparams);
    arrays_random(&a, 8);
    gt_ckpt_meta mt;
    char sgd0[512], sgd1[512], adam[512];
    test_path(sgd0, sizeof sgd0, "sgd no momentum");
    test_path(sgd1, sizeof sgd1, "sgd momentum");
    test_path(adam, sizeof adam, "adam");
    gt_err e = {{0}};
    meta_make(&mt, &m, "sgd");
    CHECK_MSG(save(sgd0, &m, &a, 0, &mt, 0, &e) == 0, "%s", e.msg);
    CHECK_MSG(save(sgd1, &m, &a, 1, &mt, 0, &e) == 0, "%s", e.msg);
    meta_make(&mt, &m, "adam");
    CHECK_MSG(save(adam, &m, &a, 2, &mt, 0, &e) == 0, "%s", e.msg);

    expect_refused(sgd1, &other, 0, "is for model custom, this run uses mlp");
    expect_refused(sgd1, &wide, 0, "shape");
    expect_refused(sgd1, &bigger, 0, "lacks tensor f2.bias");
    expect_refused(sgd0, &m, 1, "lacks optimizer state optim.momentum_buffer.c1.weight");
    expect_refused(adam, &m, 1, "holds adam optimizer state, this run uses sgd");
    expect_refused(sgd1, &m, 2, "holds sgd optimizer state, this run uses adam");
    CHECK_MSG(load(adam, &m, &b, 0, NULL, &e) == 0, "%s", e.msg);
    CHECK_MSG(load(sgd1, &m, &b, 1, NULL, &e) == 0, "%s", e.msg);
    CHECK(arrays_equal(&a, &b, 1));

    /* Saves the optimizer cannot describe are refused before anything is written. */
    char never[512];
    test_path(never, sizeof never, "never written");
    meta_make(&mt, &m, "sgd");
    CHECK(save(never, &m, &a, 2, &mt, 0, &e) == -1 && strstr(e.msg, never));
    meta_make(&mt, &m, "rmsprop");
    CHECK(save(never, &m, &a, 0, &mt, 0, &e) == -1 && strstr(e.msg, never));
    meta_make(&mt, &m, "adam");
    CHECK(save(never, &m, &a, 0, &mt, -1, &e) == -1 && strstr(e.msg, never));
    CHECK(!file_exists(never));
    arrays_free(&a);
    arrays_free(&b);
}

/* ---- saving: rotation, unwritable paths, failing writes ----------------------------------------- */

static void save_epoch(const char *path, const gt_model *m, arrays *a, uint32_t epoch, int keep)
{
    gt_ckpt_meta mt;
    meta_make(&mt, m, "sgd");
    mt.epoch = epoch;
    arrays_fill(a, (float)epoch);
    gt_err e = {{0}};
    CHECK_MSG(save(path, m, a, 1, &mt, keep, &e) == 0, "%s", e.msg);
}

/* The epoch of the checkpoint at path, after checking every value equals it; 0 if missing. */
static uint32_t epoch_of(const char *path, const gt_model *m)
{
    if (!file_exists(path))
        return 0;
    arrays a;
    arrays_alloc(&a, m->nparams);
    gt_ckpt_meta mt;
    gt_err e = {{0}};
    uint32_t epoch = 0;
    if (load(path, m, &a, 1, &mt, &e) == 0) {
        epoch = mt.epoch;
        CHECK_MSG(all_values(&a, 1, (float)epoch), "%s holds values other than its epoch %u", path, epoch);
    } else {
        CHECK_MSG(0, "%s", e.msg);
    }
    arrays_free(&a);
    return epoch;
}

static int count_temp_files(const char *base)
{
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static void test_rotation(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a;
    arrays_alloc(&a, m.nparams);
    char path[512], p1[520], p2[520], p3[520];
    test_path(path, sizeof path, "rotated");
    snprintf(p1, sizeof p1, "%s.1", path);
    snprintf(p2, sizeof p2, "%s.2", path);
    snprintf(p3, sizeof p3, "%s.3", path);
    for (uint32_t k = 1; k <= 4; k++)
        save_epoch(path, &m, &a, k, 2);
    CHECK(epoch_of(path, &m) == 4 && epoch_of(p1, &m) == 3 && epoch_of(p2, &m) == 2);
    CHECK(!file_exists(p3));
    save_epoch(path, &m, &a, 5, 1); /* PATH.1 exists: replaced, PATH.2 left alone */
    CHECK(epoch_of(path, &m) == 5 && epoch_of(p1, &m) == 4 && epoch_of(p2, &m) == 2);
    save_epoch(path, &m, &a, 6, 0);
    CHECK(epoch_of(path, &m) == 6 && epoch_of(p1, &m) == 4);
    CHECK(count_temp_files("rotated") == 0);
    /* The same position saved twice (a signal right after a periodic save) replaces PATH without
     * rotating, so the last distinct checkpoint stays in PATH.1. */
    save_epoch(path, &m, &a, 7, 1);
    CHECK(epoch_of(path, &m) == 7 && epoch_of(p1, &m) == 6);
    save_epoch(path, &m, &a, 7, 1);
    CHECK_MSG(epoch_of(path, &m) == 7 && epoch_of(p1, &m) == 6, "PATH.1 is epoch %u, not 6",
              epoch_of(p1, &m));
    /* Another state at the same position (a second run that ended there) is distinct: rotated. */
    gt_ckpt_meta mt;
    gt_err e = {{0}};
    meta_make(&mt, &m, "sgd");
    mt.epoch = 7;
    arrays_fill(&a, 8.0f);
    CHECK_MSG(save(path, &m, &a, 1, &mt, 1, &e) == 0, "%s", e.msg);
    CHECK_MSG(epoch_of(p1, &m) == 7, "the first run's checkpoint at the same position was not kept");
    arrays_free(&a);
}

/* Rotation never leaves a name empty: a reader of PATH, PATH.1 or PATH.2 while saves rotate them
 * always finds a file there (once the first saves made it). */
static void test_rotation_never_empty(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a;
    arrays_alloc(&a, m.nparams);
    char path[512], names[3][520];
    test_path(path, sizeof path, "never empty");
    for (int k = 0; k < 3; k++)
        snprintf(names[k], sizeof names[k], k ? "%s.%d" : "%s", path, k);
    for (uint32_t k = 1; k <= 3; k++)
        save_epoch(path, &m, &a, k, 2);
    pid_t pid = fork();
    if (pid == 0) {
        for (uint32_t k = 4; k < 400; k++)
            save_epoch(path, &m, &a, k, 2);
        _exit(0);
    }
    int missing = 0, reads = 0, status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0)
        for (int k = 0; k < 3; k++, reads++)
            missing += access(names[k], F_OK) != 0;
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the saving process failed");
    CHECK_MSG(missing == 0, "%d of %d reads found a rotated name missing", missing, reads);
    CHECK(epoch_of(path, &m) == 399 && epoch_of(names[1], &m) == 398 && epoch_of(names[2], &m) == 397);
    arrays_free(&a);
}

static void expect_save_fails(const char *path, const gt_model *m, arrays *a, const char *why)
{
    gt_ckpt_meta mt;
    meta_make(&mt, m, "sgd");
    gt_err e = {{0}};
    CHECK_MSG(save(path, m, a, 1, &mt, 2, &e) == -1, "saved to %s", path);
    CHECK_MSG(strstr(e.msg, path) != NULL, "message does not name %s: %s", path, e.msg);
    CHECK_MSG(strstr(e.msg, why) != NULL, "expected \"%s\" in: %s", why, e.msg);
}

static void test_unwritable(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a;
    arrays_alloc(&a, m.nparams);
    char path[512];
    test_path(path, sizeof path, "no such folder/ckpt");
    expect_save_fails(path, &m, &a, strerror(ENOENT));
    /* Tests run as root, so a folder's permissions would not stop a write; a file posing as a
     * folder does. */
    test_path(path, sizeof path, "file.txt");
    file_write(path, "x", 1);
    test_path(path, sizeof path, "file.txt/ckpt");
    expect_save_fails(path, &m, &a, strerror(ENOTDIR));

    /* A write that fails halfway (a file size limit stands in for a full disk): the error names
     * the path, the temp file goes, and the previous checkpoint stays. */
    test_path(path, sizeof path, "full disk");
    save_epoch(path, &m, &a, 1, 2);
    struct rlimit old, small;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    small = old;
    small.rlim_cur = 100;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    expect_save_fails(path, &m, &a, strerror(EFBIG));
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, prev);
    CHECK(epoch_of(path, &m) == 1);
    CHECK(count_temp_files("full disk") == 0);
    char p1[520];
    snprintf(p1, sizeof p1, "%s.1", path);
    CHECK(!file_exists(p1));
    arrays_free(&a);
}

/* ---- a saver killed at random moments ----------------------------------------------------------- */

/* Save number k sets every value to k; the first one is reported through fd before the loop. */
static void kill_child(const gt_model *m, const char *path, uint32_t first, int fd)
{
    arrays a;
    arrays_alloc(&a, m->nparams);
    gt_test_failures = 0; /* the parent's, if any, are not this process's */
    for (uint32_t k = first; k < first + 1000000; k++) {
        save_epoch(path, m, &a, k, 2);
        if (gt_test_failures)
            _exit(2);
        if (k == first && write(fd, "x", 1) != 1)
            _exit(3);
    }
    _exit(0);
}

/* A temp file a kill left behind is never read by a load of PATH; read on purpose, it is either
 * refused as torn or whole. */
static void check_leftovers(const char *base, const gt_model *m)
{
    char prefix[256], path[1024];
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    DIR *d = opendir(g_dir);
    arrays a;
    arrays_alloc(&a, m->nparams);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", g_dir, de->d_name);
        gt_ckpt_meta mt;
        gt_err e = {{0}};
        if (load(path, m, &a, 1, &mt, &e) == 0)
            CHECK(all_values(&a, 1, (float)mt.epoch));
        else
            CHECK(strstr(e.msg, path) != NULL);
    }
    if (d)
        closedir(d);
    arrays_free(&a);
}

static void test_killed_saves(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:10", 4096, 10); /* 160 KiB a copy, so kills land mid-write */
    char path[512], p1[520], p2[520];
    test_path(path, sizeof path, "killed");
    snprintf(p1, sizeof p1, "%s.1", path);
    snprintf(p2, sizeof p2, "%s.2", path);
    gt_rng r;
    gt_rng_seed(&r, 9);
    uint32_t last = 0;
    for (int round = 0; round < 40; round++) {
        int pipefd[2];
        CHECK(pipe(pipefd) == 0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            close(pipefd[0]);
            kill_child(&m, path, last + 1, pipefd[1]);
        }
        CHECK(pid > 0);
        close(pipefd[1]);
        char c;
        CHECK(read(pipefd[0], &c, 1) == 1);
        close(pipefd[0]);
        usleep(gt_rng_below(&r, 3001));
        kill(pid, SIGKILL);
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
        uint32_t e0 = epoch_of(path, &m), e1 = epoch_of(p1, &m), e2 = epoch_of(p2, &m);
        CHECK(e0 > last);
        CHECK(e1 <= e0 && e2 <= (e1 ? e1 : e0));
        last = e0;
    }
    check_leftovers("killed", &m);
    /* Temp files of killed saves may remain; they are never read, and saving still works. */
    arrays a;
    arrays_alloc(&a, m.nparams);
    save_epoch(path, &m, &a, last + 1, 2);
    CHECK(epoch_of(path, &m) == last + 1);
    arrays_free(&a);
}

/* ---- setup ---------------------------------------------------------------------------------------- */

static void remove_test_dir(void)
{
    DIR *d = opendir(g_dir);
    char path[1024];
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", g_dir, de->d_name);
        if (unlink(path) != 0)
            fprintf(stderr, "cannot remove %s: %s\n", path, strerror(errno));
    }
    if (d)
        closedir(d);
    if (rmdir(g_dir) != 0)
        fprintf(stderr, "cannot remove %s: %s\n", g_dir, strerror(errno));
}

/* ---- every field covered ------------------------------------------------------------------------ */

/* Metadata values that are well-formed JSON but wrong are refused by name (the header CRC is
 * recomputed, as a forger would). */
static void test_metadata_fields(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a;
    arrays_alloc(&a, m.nparams);
    arrays_random(&a, 11);
    gt_ckpt_meta mt;
    meta_make(&mt, &m, "sgd");
    mt.samples = 1000;
    mt.step = 31;
    mt.epoch_pos = 496;
    char path[512], bad[512], bad2[512];
    test_path(path, sizeof path, "fields");
    test_path(bad, sizeof bad, "fields bad");
    test_path(bad2, sizeof bad2, "fields bad2");
    gt_err e = {{0}};
    CHECK_MSG(save(path, &m, &a, 0, &mt, 0, &e) == 0, "%s", e.msg);
    const struct {
        const char *from, *to, *why;
    } refused[] = {
        {"\"epoch\":\"7\"", "\"epoch\":\"4294967295\"", "\"epoch\""},
        {"\"samples\":\"1000\"", "\"samples\":\"18446744073709551615\"", "\"samples\""},
        {"\"samples\":\"1000\"", "\"samples\":\"9007199254740993\"", "\"samples\""},
        {"\"step\":\"31\"", "\"step\":\"1001\"", "\"step\""},
        {"\"updates\":\"4242\"", "\"updates\":\"18446744073709551615\"", "\"updates\""},
        {"\"hogwild\"", "\"bogus\"", "unknown mode"},
        {"\"0badf00d\"", "\"0BADF00D\"", "data_fingerprint"},
        {"\"header_crc32\":\"", "\"header_crc32\":\"X", "header_crc32"},
        {"\"epoch_pos\":\"496\"", "\"epoch_pos\":\"1001\"", "\"epoch_pos\""},
        {"\"lr\":\"0.10000000000000001\"", "\"lr\":\"nan\"", "\"lr\""},
        {"\"momentum\":\"0.56999999999999995\"", "\"momentum\":\"1e999\"", "\"momentum\""},
        {"\"batch\":\"64\"", "\"batch\":\"-1\"", "\"batch\""},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        rewrite_header(path, bad, refused[i].from, refused[i].to);
        expect_refused(bad, &m, 0, refused[i].why);
    }
    /* An older file without the header CRC is refused, saying why. */
    rewrite_header(path, bad, "\"gputrain-2\"", "\"gputrain-1\"");
    rewrite_header(bad, bad2, "\"header_crc32\"", "\"header_crc32_old\"");
    expect_refused(bad2, &m, 0, "older gputrain");
    arrays_free(&a);
}

/* A NaN or Inf in parameters or optimizer state is refused unless the caller allows it. */
static void test_nonfinite(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a, b;
    arrays_alloc(&a, m.nparams);
    arrays_alloc(&b, m.nparams);
    char path[512];
    test_path(path, sizeof path, "nonfinite");
    gt_ckpt_meta mt;
    meta_make(&mt, &m, "sgd");
    gt_err e = {{0}};
    for (int which = 0; which < 2; which++) {
        arrays_random(&a, 12);
        if (which == 0)
            a.p[3] = NAN; /* c1.weight[3] */
        else
            a.s[0][m.tensors[2].offset + 1] = INFINITY; /* f1.weight's momentum */
        CHECK_MSG(save(path, &m, &a, 1, &mt, 0, &e) == 0, "%s", e.msg);
        expect_refused(path, &m, 1, which == 0 ? "c1.weight[3] is NaN"
                                               : "optim.momentum_buffer.f1.weight[1] is infinite");
        arrays_fill(&b, 0);
        CHECK_MSG(gt_ckpt_load(path, &m, b.p, b.b, b.s, 1, NULL, GT_CKPT_ALLOW_NONFINITE, &e) == 0, "%s",
                  e.msg);
        CHECK(which == 0 ? isnan(b.p[3]) : isinf(b.s[0][m.tensors[2].offset + 1]));
    }
    arrays_free(&a);
    arrays_free(&b);
}

/* Flips every bit of a small checkpoint's length and header, and every bit of its data (over 1,000
 * bits: 35 parameters and their momentum), one at a time, and loads each copy in-process: every
 * flip must be refused with the caller's arrays untouched. No bit is exempt: the header CRC covers
 * the length and every header byte (padding included) but its own digits, whose change breaks the
 * match, and the tensor CRCs cover the data. */
static void test_every_bit_flip(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a, b;
    arrays_alloc(&a, m.nparams);
    arrays_alloc(&b, m.nparams);
    arrays_random(&a, 13);
    gt_ckpt_meta mt;
    meta_make(&mt, &m, "sgd");
    char path[512], bad[512];
    test_path(path, sizeof path, "flip");
    test_path(bad, sizeof bad, "flip bad");
    gt_err e = {{0}};
    CHECK_MSG(save(path, &m, &a, 1, &mt, 0, &e) == 0, "%s", e.msg);
    size_t size;
    unsigned char *file = file_read(path, &size);
    size_t header_end = 8 + (size_t)le64(file), accepted = 0;
    CHECK(size - header_end >= 1000 / 8);
    for (size_t bit = 0; bit < size * 8; bit++) {
        file[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        unlink(bad); /* a fresh file: rewriting one in place makes ext4 flush it on close */
        file_write(bad, file, size);
        file[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        arrays_fill(&b, 1234.5f);
        if (load(bad, &m, &b, 1, NULL, &e) == 0 || !all_values(&b, 1, 1234.5f)) {
            if (accepted++ < 5)
                fprintf(stderr, "flip of bit %zu (byte %zu, %s) was accepted\n", bit, bit / 8,
                        bit / 8 < header_end ? "header" : "data");
        }
    }
    CHECK_MSG(accepted == 0, "%zu of %zu single-bit flips accepted", accepted, size * 8);
    free(file);
    arrays_free(&a);
    arrays_free(&b);
}

/* The training wall time round-trips, a bad value is refused by name, and a file written before
 * it was kept (no wall_ms) reads as 0. */
static void test_wall_time(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a;
    arrays_alloc(&a, m.nparams);
    arrays_random(&a, 12);
    gt_ckpt_meta mt, out;
    meta_make(&mt, &m, "sgd");
    mt.wall_ms = 987654321;
    char path[512], bad[512];
    test_path(path, sizeof path, "wall");
    test_path(bad, sizeof bad, "wall bad");
    gt_err e = {{0}};
    CHECK_MSG(save(path, &m, &a, 0, &mt, 0, &e) == 0, "%s", e.msg);
    CHECK_MSG(gt_ckpt_read_meta(path, &out, &e) == 0, "%s", e.msg);
    CHECK(out.wall_ms == 987654321);
    rewrite_header(path, bad, "\"wall_ms\":\"987654321\"", "\"wall_ms\":\"-1\"");
    expect_refused(bad, &m, 0, "\"wall_ms\"");
    rewrite_header(path, bad, "\"wall_ms\":\"987654321\"", "\"wall_ms\":\"9007199254740993\"");
    expect_refused(bad, &m, 0, "\"wall_ms\"");
    rewrite_header(path, bad, "\"wall_ms\":\"987654321\",", "");
    memset(&out, 0x5a, sizeof out);
    CHECK_MSG(gt_ckpt_read_meta(bad, &out, &e) == 0, "%s", e.msg);
    CHECK(out.wall_ms == 0 && out.epoch == mt.epoch);
    arrays_free(&a);
}

/* ---- class names ------------------------------------------------------------------------------- */

/* Whether buf[0..n) holds the first len bytes of text. */
static int has_text(const unsigned char *buf, size_t n, const char *text, size_t len)
{
    for (size_t i = 0; i + len <= n; i++)
        if (memcmp(buf + i, text, len) == 0)
            return 1;
    return 0;
}

static gt_class_name g_names[8]; /* the names a meta borrows for a save */

static void set_names(gt_ckpt_meta *mt, int n, const char *const *names)
{
    mt->nnames = n;
    mt->class_names = g_names;
    for (int k = 0; k < n; k++)
        snprintf(g_names[k], sizeof g_names[k], "%s", names[k]);
}

/* Names round-trip (quotes and backslashes included), a file without them loads with none, and
 * a wrong count, bad UTF-8 or a damaged or forged "classes" value is refused. */
static void test_class_names(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a;
    arrays_alloc(&a, m.nparams);
    arrays_random(&a, 13);
    char path[512], bad[512];
    test_path(path, sizeof path, "names");
    test_path(bad, sizeof bad, "names bad");
    gt_ckpt_meta mt, got;
    gt_err e = {{0}};
    meta_make(&mt, &m, "sgd");
    CHECK_MSG(save(path, &m, &a, 0, &mt, 0, &e) == 0, "%s", e.msg);
    CHECK_MSG(gt_ckpt_read_meta(path, &got, &e) == 0 && got.nnames == 0, "%s", e.msg);
    gt_class_name *names = (gt_class_name *)&e; /* must become NULL */
    CHECK_MSG(gt_ckpt_read_names(path, &got, &names, &e) == 0 && got.nnames == 0 && !names,
              "%s", e.msg);
    const char *odd[] = {"a\"q", "b\\x\t", "Ankle boot \xc3\xa9"};
    set_names(&mt, 3, odd);
    CHECK_MSG(save(path, &m, &a, 0, &mt, 0, &e) == 0, "%s", e.msg);
    CHECK_MSG(gt_ckpt_read_meta(path, &got, &e) == 0, "%s", e.msg);
    CHECK(got.nnames == 3 && got.class_names == NULL);
    CHECK_MSG(gt_ckpt_read_names(path, &got, &names, &e) == 0 && names, "%s", e.msg);
    CHECK(got.nnames == 3 && got.class_names == NULL);
    for (int k = 0; names && k < 3; k++)
        CHECK_MSG(strcmp(names[k], odd[k]) == 0, "name %d: '%s'", k, names[k]);
    free(names);
    CHECK_MSG(load(path, &m, &a, 0, &got, &e) == 0 && got.nnames == 3 && !got.class_names,
              "%s", e.msg);
    size_t hsize;
    unsigned char *hfile = file_read(path, &hsize); /* up to 256 names: "classes", as before */
    CHECK(has_text(hfile, hsize, "\"classes\":\"[", 12) && !has_text(hfile, hsize, "class_names", 11));
    free(hfile);
    mt.class_names = NULL;
    CHECK(save(bad, &m, &a, 0, &mt, 0, &e) == -1 && strstr(e.msg, "no array") != NULL);
    const char *two[] = {"cat", "dog"}, *badutf[] = {"cat", "d\xffg", "emu"};
    set_names(&mt, 2, two);
    CHECK(save(bad, &m, &a, 0, &mt, 0, &e) == -1 && strstr(e.msg, "2 class names for 3") != NULL);
    set_names(&mt, 3, badutf);
    CHECK(save(bad, &m, &a, 0, &mt, 0, &e) == -1 && strstr(e.msg, "not UTF-8") != NULL);
    const char *plain[] = {"cat", "dog", "emu"};
    set_names(&mt, 3, plain);
    CHECK_MSG(save(path, &m, &a, 0, &mt, 0, &e) == 0, "%s", e.msg);
    const struct {
        const char *from, *to;
    } forged[] = {
        {",\\\"emu\\\"]", "]"},
        {"\\\"emu\\\"", "7"},
        {"\\\"emu\\\"", "\\\"\\\""},
        {"\\\"emu\\\"", "\\\"abcdefghijklmnopqrstuvwxyz012345\\\""},
        {"\"[\\\"cat\\\"", "\"{\\\"cat\\\":\\\"x\\\"}[\\\"cat\\\""},
    };
    for (size_t i = 0; i < sizeof forged / sizeof *forged; i++) {
        rewrite_header(path, bad, forged[i].from, forged[i].to);
        expect_refused(bad, &m, 0, "\"classes\"");
    }
    size_t size;
    unsigned char *file = file_read(path, &size);
    size_t at = 8;
    while (at + 3 < size && memcmp(file + at, "dog", 3) != 0)
        at++;
    CHECK(at + 3 < size);
    file[at + 1] = 'u'; /* "dug", the header CRC left as it was */
    file_write(bad, file, size);
    expect_refused(bad, &m, 0, "CRC");
    free(file);
    arrays_free(&a);
}

/* Name k of n: plain ("c00042"), or where worst is set 31 control bytes (each written \u00XX,
 * its backslash escaped again in the header: the largest header names can make). */
static void many_name(gt_class_name out, int k, int worst)
{
    if (!worst) {
        snprintf(out, GT_CLASS_NAMELEN, k % 97 == 5 ? "q\"\\%d" : "c%05d", k);
        return;
    }
    for (int i = 0; i < GT_CLASS_NAMELEN - 1; i++)
        out[i] = (char)(1 + (i < 4 ? (k >> (4 * i)) % 16 : 0));
    out[GT_CLASS_NAMELEN - 1] = '\0';
}

/* More than 256 names round-trip through "class_names" (which older readers ignore); 65,536 of
 * the worst bytes fit the header limit; a damaged or misplaced list is refused and a file without
 * one loads with none. */
static void test_many_names(int n, int worst)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:N", 2, n);
    arrays a;
    arrays_alloc(&a, m.nparams);
    arrays_fill(&a, 0.25f); /* random bits would hold NaNs, which a load refuses */
    char path[512], bad[512];
    test_path(path, sizeof path, "many names");
    test_path(bad, sizeof bad, "many names bad");
    gt_class_name *want = calloc((size_t)n, sizeof *want), *names = NULL;
    for (int k = 0; k < n; k++)
        many_name(want[k], k, worst);
    gt_ckpt_meta mt, got;
    gt_err e = {{0}};
    meta_make(&mt, &m, "sgd");
    mt.nnames = n;
    mt.class_names = want;
    CHECK_MSG(save(path, &m, &a, 0, &mt, 0, &e) == 0, "%d names: %s", n, e.msg);
    CHECK_MSG(gt_ckpt_read_names(path, &got, &names, &e) == 0 && names && got.nnames == n &&
              !got.class_names, "%d names: %s", n, e.msg);
    int same = names != NULL;
    for (int k = 0; same && k < n; k++)
        same = strcmp(names[k], want[k]) == 0;
    CHECK_MSG(same, "%d names do not round-trip", n);
    free(names);
    gt_ckpt_meta copy = got; /* a meta is plain data: a copy owns nothing */
    CHECK(copy.nnames == n && meta_equal(&copy, &mt));
    CHECK_MSG(load(path, &m, &a, 0, &got, &e) == 0 && got.nnames == n, "%s", e.msg);
    size_t size;
    unsigned char *file = file_read(path, &size);
    CHECK(has_text(file, size, "\"class_names\":\"[", 16) && !has_text(file, size, "\"classes\"", 9));
    if (worst)
        CHECK_MSG(le64(file) > (uint64_t)n * 7 * (GT_CLASS_NAMELEN - 1), "header %llu bytes",
                  (unsigned long long)le64(file));
    free(file);
    if (!worst) {
        /* older readers refuse more than 256 in "classes": a list there is damage */
        rewrite_header(path, bad, "\"class_names\":", "\"classes\":");
        expect_refused(bad, &m, 0, "\"classes\"");
        rewrite_header(path, bad, "\"class_names\":", "\"classes\":\"[]\",\"class_names\":");
        expect_refused(bad, &m, 0, "both");
        rewrite_header(path, bad, ",\\\"c00001\\\"", "");
        expect_refused(bad, &m, 0, "\"class_names\"");
        rewrite_header(path, bad, "\\\"c00001\\\"", "\\\"\\\"");
        expect_refused(bad, &m, 0, "\"class_names\"");
        rewrite_header(path, bad, "\"class_names\":", "\"class_names_not\":");
        names = (gt_class_name *)&e;
        CHECK_MSG(gt_ckpt_read_names(bad, &got, &names, &e) == 0 && got.nnames == 0 && !names,
                  "%s", e.msg);
        CHECK_MSG(load(bad, &m, &a, 0, &got, &e) == 0 && got.nnames == 0, "%s", e.msg);
        mt.nnames = n - 1;
        CHECK(save(bad, &m, &a, 0, &mt, 0, &e) == -1 && strstr(e.msg, "class names for") != NULL);
    }
    free(want);
    arrays_free(&a);
}

/* "class_names" for 3 classes (written as "classes") is misplaced; more than GT_CKPT_MAX_CLASSES
 * names are refused at the save. */
static void test_names_limits(void)
{
    gt_model m;
    model_make(&m, "conv:2:3 fc:3", 4, 3);
    arrays a;
    arrays_alloc(&a, m.nparams);
    arrays_fill(&a, 0.25f);
    char path[512], bad[512];
    test_path(path, sizeof path, "names few");
    test_path(bad, sizeof bad, "names few bad");
    gt_ckpt_meta mt;
    gt_err e = {{0}};
    meta_make(&mt, &m, "sgd");
    const char *plain[] = {"cat", "dog", "emu"};
    set_names(&mt, 3, plain);
    CHECK_MSG(save(path, &m, &a, 0, &mt, 0, &e) == 0, "%s", e.msg);
    rewrite_header(path, bad, "\"classes\":", "\"class_names\":");
    expect_refused(bad, &m, 0, "\"class_names\"");
    arrays_free(&a);
    int n = GT_CKPT_MAX_CLASSES + 1;
    model_make(&m, "conv:2:3 fc:N", 1, n);
    arrays_alloc(&a, m.nparams);
    gt_class_name *many = calloc((size_t)n, sizeof *many);
    for (int k = 0; k < n; k++)
        snprintf(many[k], sizeof many[k], "c%d", k);
    meta_make(&mt, &m, "sgd");
    mt.nnames = n;
    mt.class_names = many;
    CHECK(save(bad, &m, &a, 0, &mt, 0, &e) == -1 && strstr(e.msg, "at most 65536") != NULL);
    free(many);
    arrays_free(&a);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/gt_ckpt_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "cannot create a folder in %s: %s\n", tmp && *tmp ? tmp : "/tmp", strerror(errno));
        return 1;
    }
    test_round_trip("sgd", 0);
    test_round_trip("sgd", 1);
    test_round_trip("adam", 2);
    test_header_format();
    test_truncated_and_flipped();
    test_not_checkpoints();
    test_crafted_headers();
    test_mismatches();
    test_metadata_fields();
    test_nonfinite();
    test_every_bit_flip();
    test_rotation();
    test_rotation_never_empty();
    test_unwritable();
    test_killed_saves();
    test_wall_time();
    test_class_names();
    test_many_names(300, 0);
    test_many_names(GT_CKPT_MAX_CLASSES, 1);
    test_names_limits();
    test_buffers();
    test_ema();
    remove_test_dir();
    TEST_DONE();
}
