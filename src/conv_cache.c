/* conv_cache.c - the process-wide cache of convolution algorithm choices (conv_cache.h): a
 * growing array of keys and their choices behind one mutex, with a condition variable for the
 * devices waiting on a key another device is searching. */
#include "gputrain/conv_cache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One key: searched (its choice valid) or claimed by a device searching it now. */
typedef struct cache_entry {
    gt_conv_key key;
    gt_conv_choice choice; /* valid once done */
    int done;              /* 0: being searched by the device that claimed it */
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cache_changed = PTHREAD_COND_INITIALIZER; /* a put or an abandon */
static cache_entry *cache;                                      /* cache_len used, cache_cap held */
static size_t cache_len, cache_cap;
static unsigned long cache_hits, cache_searches;

static int key_equal(const gt_conv_key *a, const gt_conv_key *b)
{
    return strncmp(a->gpu, b->gpu, sizeof a->gpu) == 0 && a->cc_major == b->cc_major &&
           a->cc_minor == b->cc_minor && a->sms == b->sms && a->n == b->n && a->c == b->c &&
           a->h == b->h && a->w == b->w && a->k == b->k && a->r == b->r && a->s == b->s &&
           a->stride == b->stride && a->pad == b->pad && a->dtype == b->dtype &&
           a->layout == b->layout &&
           a->math == b->math && a->direction == b->direction &&
           a->deterministic == b->deterministic && a->tensor_ops == b->tensor_ops &&
           a->limit == b->limit && a->align == b->align && a->api == b->api;
}

static cache_entry *cache_find(const gt_conv_key *k)
{
    for (size_t i = 0; i < cache_len; i++)
        if (key_equal(&cache[i].key, k))
            return &cache[i];
    return NULL;
}

/* A new claimed entry for k; NULL when out of memory. */
static cache_entry *cache_add(const gt_conv_key *k)
{
    if (cache_len == cache_cap) {
        size_t cap = cache_cap ? 2 * cache_cap : 64;
        cache_entry *grown = realloc(cache, cap * sizeof *grown);
        if (!grown)
            return NULL;
        cache = grown;
        cache_cap = cap;
    }
    cache_entry *en = &cache[cache_len++];
    memset(en, 0, sizeof *en);
    en->key = *k;
    return en;
}

gt_conv_claim gt_conv_cache_claim(const gt_conv_key *k, int wait, gt_conv_choice *out)
{
    gt_conv_claim r;
    pthread_mutex_lock(&cache_lock);
    for (;;) {
        cache_entry *en = cache_find(k);
        if (en && en->done) {
            *out = en->choice;
            cache_hits++;
            r = GT_CONV_CACHE_HIT;
            break;
        }
        if (en && !wait) {
            r = GT_CONV_CACHE_BUSY;
            break;
        }
        if (en) {
            pthread_cond_wait(&cache_changed, &cache_lock); /* the entry may move: look again */
            continue;
        }
        cache_add(k); /* out of memory: the caller searches unclaimed, its put is dropped */
        cache_searches++;
        r = GT_CONV_CACHE_MINE;
        break;
    }
    pthread_mutex_unlock(&cache_lock);
    return r;
}

void gt_conv_cache_put(const gt_conv_key *k, const gt_conv_choice *ch)
{
    pthread_mutex_lock(&cache_lock);
    cache_entry *en = cache_find(k);
    if (en && !en->done) {
        en->choice = *ch;
        en->done = 1;
    }
    pthread_cond_broadcast(&cache_changed);
    pthread_mutex_unlock(&cache_lock);
}

void gt_conv_cache_abandon(const gt_conv_key *k)
{
    pthread_mutex_lock(&cache_lock);
    cache_entry *en = cache_find(k);
    if (en && !en->done)
        *en = cache[--cache_len];
    pthread_cond_broadcast(&cache_changed);
    pthread_mutex_unlock(&cache_lock);
}

void gt_conv_cache_counts(unsigned long *hits, unsigned long *searches)
{
    pthread_mutex_lock(&cache_lock);
    *hits = cache_hits;
    *searches = cache_searches;
    pthread_mutex_unlock(&cache_lock);
}

void gt_conv_cache_clear(void)
{
    pthread_mutex_lock(&cache_lock);
    free(cache);
    cache = NULL;
    cache_len = cache_cap = 0;
    cache_hits = cache_searches = 0;
    pthread_mutex_unlock(&cache_lock);
}

unsigned gt_conv_cache_align(const void *const *ptrs, int n)
{
    uintptr_t bits = 256;
    for (int i = 0; i < n; i++)
        if (ptrs[i])
            bits |= (uintptr_t)ptrs[i];
    return (unsigned)(bits & -bits);
}
