/* test_conv_cache.c - the process-wide cache of convolution algorithm choices (conv_cache.h),
 * without a GPU: a claim, its put and the hits after it; every field of the key tells keys
 * apart; four threads standing in for four GPUs search each key once and all get the
 * searcher's choice; an abandoned search passes the claim to a waiter; buffers' alignment. */
#include "gputrain/conv_cache.h"

#include "test_util.h"

#include <pthread.h>
#include <stdint.h>
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
    gt_conv_key v[22];
    for (int i = 0; i < 22; i++)
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
    for (int i = 0; i < 22; i++) {
        CHECK_MSG(gt_conv_cache_claim(&v[i], 1, &got) == GT_CONV_CACHE_MINE,
                  "variant %d found the base key's choice", i);
        gt_conv_cache_put(&v[i], &ch);
    }
    unsigned long hits = 0, searches = 0;
    gt_conv_cache_counts(&hits, &searches);
    CHECK(hits == 0 && searches == 23);
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

static void test_align(void)
{
    const void *p[3] = {(const void *)(uintptr_t)0x7f0000001000, NULL,
                        (const void *)(uintptr_t)0x7f0000000200};
    CHECK(gt_conv_cache_align(p, 3) == 256);
    p[1] = (const void *)(uintptr_t)0x7f0000000108;
    CHECK(gt_conv_cache_align(p, 3) == 8);
    p[1] = (const void *)(uintptr_t)0x7f0000000130;
    CHECK(gt_conv_cache_align(p, 3) == 16);
    CHECK(gt_conv_cache_align(p, 0) == 256);
}

int main(void)
{
    test_claim_put_hit();
    test_fields_differ();
    test_devices_share();
    test_abandon();
    test_align();
    gt_conv_cache_clear();
    TEST_DONE();
}
