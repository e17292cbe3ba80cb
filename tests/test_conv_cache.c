/* test_conv_cache.c - the process-wide cache of convolution algorithm choices (conv_cache.h),
 * without a GPU: a claim, its put and the hits after it; every field of the key tells keys
 * apart; four threads standing in for four GPUs search each key once and all get the
 * searcher's choice; an abandoned search passes the claim to a waiter; the
 * file between runs: choices come back whole, unreadable lines are skipped, a file that is not a
 * cache is never overwritten, another run's choices are merged, nothing new writes nothing; the
 * default file's place. */
#include "gputrain/conv_cache.h"

#include "test_util.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static gt_conv_key key_of(int n)
{
    gt_conv_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.gpu, sizeof k.gpu, "NVIDIA H100 80GB HBM3");
    k.cc_major = 9;
    k.sms = 132;
    k.n = n;
    k.c = 64;
    k.h = k.w = 32;
    k.k = 64;
    k.r = k.s = 3;
    k.stride = 1;
    k.pad = 1;
    k.dtype = 9; /* CUDNN_DATA_BFLOAT16 */
    k.math = 1;
    k.direction = GT_CONV_BWD_FILTER;
    k.deterministic = 1;
    k.tensor_ops = 1;
    k.limit = 256u << 20;
    k.align = 256;
    return k;
}

static void test_claim_put_hit(void)
{
    gt_conv_cache_clear();
    gt_conv_key k = key_of(256);
    gt_conv_choice got = {.algo = -1, .math = -1}, mine = {.algo = 3, .math = 1, .memory = 4096};
    /* A backend-API choice: an engine and its knobs' values come back whole. */
    mine.engine = 62;
    mine.nknobs = 2;
    mine.knob[0][0] = 3, mine.knob[0][1] = 1, mine.knob[1][0] = 7, mine.knob[1][1] = 128;
    CHECK(gt_conv_cache_claim(&k, 1, &got) == GT_CONV_CACHE_MINE);
    /* Claimed, not yet put: another asking without waiting is told it is busy. */
    CHECK(gt_conv_cache_claim(&k, 0, &got) == GT_CONV_CACHE_BUSY);
    gt_conv_cache_put(&k, &mine);
    CHECK(gt_conv_cache_claim(&k, 0, &got) == GT_CONV_CACHE_HIT);
    CHECK(got.algo == 3 && got.math == 1 && got.memory == 4096);
    CHECK(got.engine == 62 && got.nknobs == 2 && got.knob[0][0] == 3 && got.knob[0][1] == 1 &&
          got.knob[1][0] == 7 && got.knob[1][1] == 128);
    CHECK(gt_conv_cache_claim(&k, 1, &got) == GT_CONV_CACHE_HIT);
    unsigned long hits = 0, searches = 0;
    gt_conv_cache_counts(&hits, &searches);
    CHECK(hits == 2 && searches == 1);
}

/* Changing any one field makes a different key: each is searched on its own. */
static void test_fields_differ(void)
{
    gt_conv_cache_clear();
    gt_conv_key base = key_of(256);
    gt_conv_choice ch = {.algo = 1}, got;
    CHECK(gt_conv_cache_claim(&base, 1, &got) == GT_CONV_CACHE_MINE);
    gt_conv_cache_put(&base, &ch);
    gt_conv_key v[23];
    for (int i = 0; i < 23; i++)
        v[i] = base;
    snprintf(v[0].gpu, sizeof v[0].gpu, "NVIDIA H200");
    v[1].cc_minor = 1;
    v[2].sms = 66;
    v[3].n = 128;
    v[4].c = 3;
    v[5].h = 16;
    v[6].w = 16;
    v[7].k = 128;
    v[8].r = 1;
    v[9].s = 1;
    v[10].stride = 2;
    v[11].pad = 0;
    v[12].dtype = 0;
    v[13].math = 0;
    v[14].direction = GT_CONV_FWD;
    v[15].deterministic = 0;
    v[16].tensor_ops = 0;
    v[17].limit = 1u << 20;
    v[18].align = 16;
    v[19].cc_major = 8;
    v[20].layout = 1; /* CUDNN_TENSOR_NHWC */
    v[21].api = GT_CONV_BACKEND;
    v[22].lib = 91500; /* another cuDNN: its engines are numbered its own way */
    for (int i = 0; i < 23; i++) {
        CHECK_MSG(gt_conv_cache_claim(&v[i], 1, &got) == GT_CONV_CACHE_MINE,
                  "variant %d found the base key's choice", i);
        gt_conv_cache_put(&v[i], &ch);
    }
    unsigned long hits = 0, searches = 0;
    gt_conv_cache_counts(&hits, &searches);
    CHECK(hits == 0 && searches == 24);
}

/* Four "devices" walk the same 12 keys; each key is searched once, by whoever claims it first
 * (its choice names the searcher), and every device ends with the searcher's choice. */
#define DEVICES 4
#define KEYS 12

typedef struct dev_job {
    int id;
    int algo[KEYS]; /* the choice this device took for each key */
    int searched;   /* keys it searched itself */
} dev_job;

static void *dev_run(void *arg)
{
    dev_job *j = arg;
    int deferred[KEYS], nd = 0;
    for (int i = 0; i < KEYS; i++) { /* the first pass skips keys another is searching */
        gt_conv_key k = key_of(1 + i);
        gt_conv_choice ch;
        gt_conv_claim r = gt_conv_cache_claim(&k, 0, &ch);
        if (r == GT_CONV_CACHE_BUSY) {
            deferred[nd++] = i;
            continue;
        }
        if (r == GT_CONV_CACHE_MINE) {
            usleep(2000); /* the search */
            ch = (gt_conv_choice){.algo = 100 * j->id + i};
            gt_conv_cache_put(&k, &ch);
            j->searched++;
        }
        j->algo[i] = ch.algo;
    }
    for (int d = 0; d < nd; d++) { /* the second waits for them */
        gt_conv_key k = key_of(1 + deferred[d]);
        gt_conv_choice ch;
        gt_conv_claim r = gt_conv_cache_claim(&k, 1, &ch);
        CHECK(r == GT_CONV_CACHE_HIT);
        j->algo[deferred[d]] = ch.algo;
    }
    return NULL;
}

static void test_devices_share(void)
{
    gt_conv_cache_clear();
    dev_job job[DEVICES];
    pthread_t t[DEVICES];
    for (int i = 0; i < DEVICES; i++) {
        memset(&job[i], 0, sizeof job[i]);
        job[i].id = i;
        CHECK(pthread_create(&t[i], NULL, dev_run, &job[i]) == 0);
    }
    int searched = 0;
    for (int i = 0; i < DEVICES; i++) {
        pthread_join(t[i], NULL);
        searched += job[i].searched;
    }
    CHECK_MSG(searched == KEYS, "%d searches for %d keys", searched, KEYS);
    for (int i = 0; i < KEYS; i++) {
        int algo = job[0].algo[i];
        CHECK_MSG(algo % 100 == i, "key %d: device 0 took choice %d", i, algo);
        for (int d = 1; d < DEVICES; d++)
            CHECK_MSG(job[d].algo[i] == algo, "key %d: device %d took %d, device 0 %d", i, d,
                      job[d].algo[i], algo);
    }
    unsigned long hits = 0, searches = 0;
    gt_conv_cache_counts(&hits, &searches);
    CHECK(searches == KEYS && hits == (DEVICES - 1) * KEYS);
}

/* A failed search gives its claim up: a device waiting on the key claims it and searches. */
static void *waiter_run(void *arg)
{
    gt_conv_key k = key_of(7);
    gt_conv_choice ch = {.algo = -1};
    int *result = arg;
    gt_conv_claim r = gt_conv_cache_claim(&k, 1, &ch);
    if (r == GT_CONV_CACHE_MINE) {
        ch = (gt_conv_choice){.algo = 42};
        gt_conv_cache_put(&k, &ch);
    }
    *result = r == GT_CONV_CACHE_MINE ? ch.algo : -1;
    return NULL;
}

static void test_abandon(void)
{
    gt_conv_cache_clear();
    gt_conv_key k = key_of(7);
    gt_conv_choice ch;
    int result = 0;
    pthread_t t;
    CHECK(gt_conv_cache_claim(&k, 1, &ch) == GT_CONV_CACHE_MINE);
    CHECK(pthread_create(&t, NULL, waiter_run, &result) == 0);
    usleep(5000); /* let it wait on the claim (it claims at once if it comes after) */
    gt_conv_cache_abandon(&k);
    pthread_join(t, NULL);
    CHECK_MSG(result == 42, "the waiter got %d", result);
    CHECK(gt_conv_cache_claim(&k, 0, &ch) == GT_CONV_CACHE_HIT && ch.algo == 42);
}

/* ---- the file ---- */

static char tmpdir[] = "/tmp/gt_conv_cache_XXXXXX";

static void file_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char *read_text(const char *path)
{
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return f ? buf : NULL;
}

/* Three choices (a backend one with knobs, a legacy one, another GPU's) saved by one "run" come
 * back whole in the next, as hits from the file, not searches. */
static void test_file_roundtrip(void)
{
    char path[256];
    file_path(path, sizeof path, "roundtrip");
    gt_conv_cache_clear();
    gt_err e = {{0}};
    int bad = -7;
    CHECK(gt_conv_cache_load(path, &bad, &e) == 0 && bad == 0); /* no file yet: empty */
    gt_conv_key k[3] = {key_of(256), key_of(128), key_of(64)};
    k[0].api = GT_CONV_BACKEND;
    k[0].lib = 91400;
    snprintf(k[2].gpu, sizeof k[2].gpu, "NVIDIA H200");
    k[2].limit = (size_t)5 << 30; /* past 32 bits */
    gt_conv_choice c[3] = {{.memory = 131, .engine = 62, .nknobs = 3},
                           {.algo = 6, .math = 1, .memory = 1 << 20, .engine = -1},
                           {.algo = 1, .engine = 45}};
    long long knobs[3][2] = {{2, 4}, {13, 0}, {27, 8}};
    memcpy(c[0].knob, knobs, sizeof knobs);
    gt_conv_choice got;
    for (int i = 0; i < 3; i++) {
        CHECK(gt_conv_cache_claim(&k[i], 1, &got) == GT_CONV_CACHE_MINE);
        gt_conv_cache_put(&k[i], &c[i]);
    }
    CHECK(gt_conv_cache_save(&e) == 0);
    const char *text = read_text(path);
    CHECK(text && strncmp(text, "gputrain conv-cache 1\n", 22) == 0);
    gt_conv_cache_clear(); /* the next run */
    CHECK(gt_conv_cache_load(path, &bad, &e) == 0 && bad == 0);
    for (int i = 0; i < 3; i++) {
        memset(&got, 0xff, sizeof got);
        CHECK_MSG(gt_conv_cache_claim(&k[i], 0, &got) == GT_CONV_CACHE_HIT, "key %d", i);
        CHECK_MSG(got.algo == c[i].algo && got.math == c[i].math && got.memory == c[i].memory &&
                      got.engine == c[i].engine && got.nknobs == c[i].nknobs,
                  "key %d", i);
        for (int j = 0; j < c[i].nknobs; j++)
            CHECK(got.knob[j][0] == c[i].knob[j][0] && got.knob[j][1] == c[i].knob[j][1]);
    }
    unsigned long hits, searches;
    gt_conv_cache_counts(&hits, &searches);
    CHECK(hits == 3 && searches == 0 && gt_conv_cache_file_hits() == 3);
    CHECK(gt_conv_cache_claim(&k[0], 0, &got) == GT_CONV_CACHE_HIT);
    CHECK(gt_conv_cache_file_hits() == 3); /* a key counts once */
    /* Nothing new since the load: nothing is written. */
    CHECK(unlink(path) == 0);
    CHECK(gt_conv_cache_save(&e) == 0);
    CHECK(access(path, F_OK) != 0);
}

/* Lines that do not read as a choice are skipped and counted; the others are taken. */
static void test_file_bad_lines(void)
{
    char path[256], good[512], line[4096];
    file_path(path, sizeof path, "bad");
    gt_conv_key k = key_of(32);
    gt_conv_choice ch = {.algo = 5, .engine = 7};
    /* a good line, made by a save */
    gt_conv_cache_clear();
    gt_err e = {{0}};
    int bad = 0;
    CHECK(gt_conv_cache_load(path, &bad, &e) == 0);
    gt_conv_choice got;
    CHECK(gt_conv_cache_claim(&k, 1, &got) == GT_CONV_CACHE_MINE);
    gt_conv_cache_put(&k, &ch);
    CHECK(gt_conv_cache_save(&e) == 0);
    const char *text = read_text(path);
    CHECK(text && strchr(text, '\n'));
    snprintf(good, sizeof good, "%s", text ? strchr(text, '\n') + 1 : "");
    memset(line, '7', sizeof line - 1);
    line[sizeof line - 1] = '\0';
    char file[16384];
    snprintf(file, sizeof file,
             "gputrain conv-cache 1\n"
             "garbage\n"
             "NVIDIA H100\t9 0 132\t1 2 3 4 0\n"                   /* too few key numbers */
             "NVIDIA H100\t9 0 132 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 16 1 1\t1 2 3 4 2 1 1\n" /* 1 knob of 2 */
             "NVIDIA H100\t9 0 132 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 16 1 1\t1 2 3 4 0\textra\n"
             "NVIDIA H100\t9 0 132 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 16 1 99999999999999999999\t1 2 3 4 0\n"
             "%s\n"
             "%s",
             line, good);
    write_text(path, file);
    gt_conv_cache_clear();
    CHECK(gt_conv_cache_load(path, &bad, &e) == 0);
    CHECK_MSG(bad == 6, "%d lines counted unreadable", bad);
    CHECK(gt_conv_cache_claim(&k, 0, &got) == GT_CONV_CACHE_HIT && got.algo == 5 && got.engine == 7);
}

/* A file that is not a cache is refused and left alone, at the load and at a save. */
static void test_file_not_cache(void)
{
    char path[256];
    file_path(path, sizeof path, "notes.txt");
    write_text(path, "my notes\n");
    gt_conv_cache_clear();
    gt_err e = {{0}};
    int bad = 0;
    CHECK(gt_conv_cache_load(path, &bad, &e) != 0);
    CHECK_MSG(strstr(e.msg, path) && strstr(e.msg, "refusing"), "%s", e.msg);
    const char *text = read_text(path);
    CHECK(text && strcmp(text, "my notes\n") == 0);
    /* a first line longer than any choice (a binary file): refused too */
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    write_text(path, big);
    CHECK(gt_conv_cache_load(path, &bad, &e) != 0);
    /* loaded as a cache, then replaced by something else before the save: not overwritten */
    char p2[256];
    file_path(p2, sizeof p2, "swapped");
    CHECK(gt_conv_cache_load(p2, &bad, &e) == 0);
    gt_conv_key k = key_of(16);
    gt_conv_choice ch = {.algo = 1}, got;
    CHECK(gt_conv_cache_claim(&k, 1, &got) == GT_CONV_CACHE_MINE);
    gt_conv_cache_put(&k, &ch);
    write_text(p2, "{\"type\":\"config\"}\n");
    CHECK(gt_conv_cache_save(&e) != 0);
    text = read_text(p2);
    CHECK(text && strcmp(text, "{\"type\":\"config\"}\n") == 0);
}

/* Two runs that read the same file and each time something new: the later save keeps both. */
static void test_file_merge(void)
{
    char path[256];
    file_path(path, sizeof path, "merge");
    gt_conv_key ka = key_of(8), kb = key_of(9);
    gt_conv_choice a = {.algo = 11}, b = {.algo = 22}, got;
    gt_err e = {{0}};
    int bad = 0;
    /* run B's file, written while run A (below) was searching */
    gt_conv_cache_clear();
    CHECK(gt_conv_cache_load(path, &bad, &e) == 0);
    CHECK(gt_conv_cache_claim(&kb, 1, &got) == GT_CONV_CACHE_MINE);
    gt_conv_cache_put(&kb, &b);
    CHECK(gt_conv_cache_save(&e) == 0);
    char *saved_b = strdup(read_text(path));
    CHECK(unlink(path) == 0);
    /* run A: loads the empty file, searches ka; B's file appears; A saves */
    gt_conv_cache_clear();
    CHECK(gt_conv_cache_load(path, &bad, &e) == 0);
    CHECK(gt_conv_cache_claim(&ka, 1, &got) == GT_CONV_CACHE_MINE);
    gt_conv_cache_put(&ka, &a);
    write_text(path, saved_b);
    free(saved_b);
    CHECK(gt_conv_cache_save(&e) == 0);
    gt_conv_cache_clear();
    CHECK(gt_conv_cache_load(path, &bad, &e) == 0 && bad == 0);
    CHECK(gt_conv_cache_claim(&ka, 0, &got) == GT_CONV_CACHE_HIT && got.algo == 11);
    CHECK(gt_conv_cache_claim(&kb, 0, &got) == GT_CONV_CACHE_HIT && got.algo == 22);
}

/* The default file: under an absolute XDG_CACHE_HOME, else under HOME's .cache, folders made;
 * none without either. */
static void test_default_path(void)
{
    char want[512], got[512], home[256];
    snprintf(home, sizeof home, "%s/home", tmpdir);
    CHECK(mkdir(home, 0700) == 0);
    char xdg[256];
    snprintf(xdg, sizeof xdg, "%s/xdg", tmpdir);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("HOME", home, 1);
    gt_conv_cache_default_path(got, sizeof got);
    snprintf(want, sizeof want, "%s/gputrain/conv-cache", xdg);
    CHECK_MSG(strcmp(got, want) == 0, "'%s'", got);
    snprintf(want, sizeof want, "%s/gputrain", xdg);
    struct stat st;
    CHECK(stat(want, &st) == 0 && S_ISDIR(st.st_mode));
    setenv("XDG_CACHE_HOME", "relative/cache", 1); /* not absolute: ignored */
    gt_conv_cache_default_path(got, sizeof got);
    snprintf(want, sizeof want, "%s/.cache/gputrain/conv-cache", home);
    CHECK_MSG(strcmp(got, want) == 0, "'%s'", got);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    gt_conv_cache_default_path(got, sizeof got);
    CHECK_MSG(got[0] == '\0', "'%s'", got);
    snprintf(want, sizeof want, "%s/missing", tmpdir); /* a HOME that does not exist */
    setenv("HOME", want, 1);
    gt_conv_cache_default_path(got, sizeof got);
    CHECK_MSG(got[0] == '\0', "'%s'", got);
}

int main(void)
{
    test_claim_put_hit();
    test_fields_differ();
    test_devices_share();
    test_abandon();
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp: failed\n");
        return 1;
    }
    test_file_roundtrip();
    test_file_bad_lines();
    test_file_not_cache();
    test_file_merge();
    test_default_path();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    gt_conv_cache_clear();
    TEST_DONE();
}
