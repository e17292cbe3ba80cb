/* conv_cache.c - the process-wide cache of convolution algorithm choices (conv_cache.h): a
 * growing array of keys and their choices behind one mutex, with a condition variable for the
 * devices waiting on a key another device is searching; and its file between runs. */
#include "gputrain/conv_cache.h"
#include "gputrain/atomic_file.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One key: searched (its choice valid) or claimed by a device searching it now. */
typedef struct cache_entry {
    gt_conv_key key;
    gt_conv_choice choice; /* valid once done */
    int done;              /* 0: being searched by the device that claimed it */
    int from_file;         /* read from the cache file */
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cache_changed = PTHREAD_COND_INITIALIZER; /* a put or an abandon */
static cache_entry *cache;                                      /* cache_len used, cache_cap held */
static size_t cache_len, cache_cap;
static unsigned long cache_hits, cache_searches, cache_file_hits;
static char cache_path[PATH_MAX]; /* the file gt_conv_cache_save writes; "" none */
static unsigned long cache_new;     /* choices put since the file was read or written */

static int key_equal(const gt_conv_key *a, const gt_conv_key *b)
{
    return strncmp(a->gpu, b->gpu, sizeof a->gpu) == 0 && a->cc_major == b->cc_major &&
           a->cc_minor == b->cc_minor && a->sms == b->sms && a->n == b->n && a->c == b->c &&
           a->h == b->h && a->w == b->w && a->k == b->k && a->r == b->r && a->s == b->s &&
           a->stride == b->stride && a->pad == b->pad && a->dtype == b->dtype &&
           a->layout == b->layout &&
           a->math == b->math && a->direction == b->direction &&
           a->deterministic == b->deterministic && a->tensor_ops == b->tensor_ops &&
           a->limit == b->limit && a->align == b->align && a->api == b->api && a->lib == b->lib;
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
            if (en->from_file) {
                cache_file_hits++;
                en->from_file = 0; /* counted once: other layers' and devices' hits are the process's */
            }
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
        cache_new++;
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

unsigned long gt_conv_cache_file_hits(void)
{
    pthread_mutex_lock(&cache_lock);
    unsigned long n = cache_file_hits;
    pthread_mutex_unlock(&cache_lock);
    return n;
}

void gt_conv_cache_clear(void)
{
    pthread_mutex_lock(&cache_lock);
    free(cache);
    cache = NULL;
    cache_len = cache_cap = 0;
    cache_hits = cache_searches = cache_file_hits = 0;
    cache_path[0] = '\0';
    cache_new = 0;
    pthread_mutex_unlock(&cache_lock);
}

/* ---- the file ------------------------------------------------------------------------------- */
/* A header line, then one choice a line: the GPU's name, a tab, the key's 22 numbers, a tab, the
 * choice's numbers (algo, math, memory, engine, nknobs, then each knob's type and value). */
#define FILE_HEAD "gputrain conv-cache 1"
#define KEY_NUMS 22
#define CHOICE_NUMS (5 + 2 * GT_CONV_MAX_KNOBS)
#define LINE_BYTES 1024
#define FILE_MAX_LINES 65536

/* The key's int fields in the file's order; limit and align follow them, then api and lib. */
#define KEY_INTS 18
static int *key_ints(gt_conv_key *k, int i)
{
    int *f[KEY_INTS] = {&k->cc_major, &k->cc_minor, &k->sms, &k->n, &k->c, &k->h, &k->w, &k->k,
                        &k->r, &k->s, &k->stride, &k->pad, &k->dtype, &k->layout, &k->math,
                        &k->direction, &k->deterministic, &k->tensor_ops};
    return f[i];
}

/* Up to max whole numbers separated by single spaces from s into v: how many, or -1 where
 * anything else is there or a number is out of range. */
static int read_nums(const char *s, long long *v, int max)
{
    int n = 0;
    while (*s) {
        if (n == max)
            return -1;
        char *end;
        errno = 0;
        v[n++] = strtoll(s, &end, 10);
        if (end == s || errno || (*end && *end != ' ') || (*end == ' ' && !end[1]))
            return -1;
        s = *end ? end + 1 : end;
    }
    return n;
}

/* One line (its newline cut) as a key and its choice: 0, or -1 where it is not one. */
static int parse_line(char *line, gt_conv_key *k, gt_conv_choice *ch)
{
    char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    if (!t1 || !t2 || t1 == line || (size_t)(t1 - line) >= sizeof k->gpu || strchr(t2 + 1, '\t'))
        return -1;
    *t1 = *t2 = '\0';
    long long kv[KEY_NUMS], cv[CHOICE_NUMS];
    int nc;
    if (read_nums(t1 + 1, kv, KEY_NUMS) != KEY_NUMS || (nc = read_nums(t2 + 1, cv, CHOICE_NUMS)) < 5)
        return -1;
    memset(k, 0, sizeof *k);
    memset(ch, 0, sizeof *ch);
    memcpy(k->gpu, line, (size_t)(t1 - line));
    for (int i = 0; i < KEY_INTS; i++) {
        if (kv[i] < INT32_MIN || kv[i] > INT32_MAX)
            return -1;
        *key_ints(k, i) = (int)kv[i];
    }
    if (kv[18] < 0 || kv[19] < 1 || kv[19] > 256 || kv[20] < 0 || kv[20] > 1 || kv[21] < 0 ||
        kv[21] > INT32_MAX)
        return -1;
    k->limit = (size_t)kv[18];
    k->align = (unsigned)kv[19];
    k->api = (int)kv[20];
    k->lib = (int)kv[21];
    if (cv[0] < INT32_MIN || cv[0] > INT32_MAX || cv[1] < INT32_MIN || cv[1] > INT32_MAX ||
        cv[2] < 0 || cv[4] < 0 || cv[4] > GT_CONV_MAX_KNOBS || nc != 5 + 2 * cv[4])
        return -1;
    ch->algo = (int)cv[0];
    ch->math = (int)cv[1];
    ch->memory = (size_t)cv[2];
    ch->engine = cv[3];
    ch->nknobs = (int)cv[4];
    for (int i = 0; i < ch->nknobs; i++) {
        ch->knob[i][0] = cv[5 + 2 * i];
        ch->knob[i][1] = cv[6 + 2 * i];
    }
    return 0;
}

/* Adds the choices of the file at path that the cache lacks. Caller holds cache_lock. */
static int merge_file_locked(const char *path, int *bad, gt_err *e)
{
    *bad = 0;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT)
        return 0; /* no file yet: an empty cache */
    const char *why = NULL;
    int fd = gt_open_regular(path, &why); /* never a FIFO that blocks */
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return gt_fail(e, "--conv-cache: cannot read '%s': %s", path, why ? why : strerror(errno));
    }
    char line[LINE_BYTES];
    int n = 0, head = 0;
    while (n < FILE_MAX_LINES && fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len && line[len - 1] == '\n')
            line[--len] = '\0';
        else if (!feof(f)) { /* longer than any choice: skip the rest of it */
            if (n == 0) {
                n++;
                break; /* not a cache file's first line: none of it is read */
            }
            int c;
            while ((c = fgetc(f)) != EOF && c != '\n')
                ;
            (*bad)++;
            n++;
            continue;
        }
        if (n++ == 0) {
            head = strcmp(line, FILE_HEAD) == 0;
            if (!head)
                break; /* not a cache file of this version: none of it is read */
            continue;
        }
        gt_conv_key k;
        gt_conv_choice ch;
        if (parse_line(line, &k, &ch) != 0) {
            (*bad)++;
            continue;
        }
        if (!cache_find(&k)) {
            cache_entry *en = cache_add(&k);
            if (!en)
                break;
            en->choice = ch;
            en->done = 1;
            en->from_file = 1;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (failed)
        return gt_fail(e, "--conv-cache: reading '%s' failed", path);
    if (n > 0 && !head)
        *bad = -1;
    return 0;
}

int gt_conv_cache_load(const char *path, int *bad, gt_err *e)
{
    if (strlen(path) >= sizeof cache_path)
        return gt_fail(e, "--conv-cache: path too long");
    pthread_mutex_lock(&cache_lock);
    int rc = merge_file_locked(path, bad, e);
    if (rc == 0 && *bad < 0)
        rc = gt_fail(e, "--conv-cache: '%s' is not a gputrain cache file (its first line is not "
                        "'" FILE_HEAD "'): refusing to overwrite it", path);
    if (rc == 0) {
        snprintf(cache_path, sizeof cache_path, "%s", path);
        cache_new = 0;
    }
    pthread_mutex_unlock(&cache_lock);
    return rc;
}

int gt_conv_cache_save(gt_err *e)
{
    pthread_mutex_lock(&cache_lock);
    if (!cache_path[0] || cache_new == 0) {
        pthread_mutex_unlock(&cache_lock);
        return 0;
    }
    int bad;
    gt_err ignored;
    merge_file_locked(cache_path, &bad, &ignored); /* another run's choices since; unreadable: ours */
    if (bad < 0) {
        pthread_mutex_unlock(&cache_lock);
        return gt_fail(e, "--conv-cache: '%s' is no longer a gputrain cache file: not overwritten",
                       cache_path);
    }
    size_t first = 0, cap = 64 + (size_t)LINE_BYTES * (cache_len < GT_CONV_CACHE_FILE_MAX
                                                            ? cache_len : GT_CONV_CACHE_FILE_MAX);
    gt_atomic_text t = {malloc(cap), 0};
    if (!t.buf) {
        pthread_mutex_unlock(&cache_lock);
        return gt_fail(e, "--conv-cache: out of memory");
    }
    t.len = (size_t)snprintf(t.buf, cap, "%s\n", FILE_HEAD);
    size_t done = 0;
    for (size_t i = 0; i < cache_len; i++)
        done += cache[i].done != 0;
    for (size_t skip = done > GT_CONV_CACHE_FILE_MAX ? done - GT_CONV_CACHE_FILE_MAX : 0; skip;)
        skip -= cache[first++].done != 0; /* the oldest go */
    for (size_t i = first; i < cache_len; i++) {
        const cache_entry *en = &cache[i];
        if (!en->done || strchr(en->key.gpu, '\t') || strchr(en->key.gpu, '\n') || !en->key.gpu[0])
            continue;
        gt_conv_key k = en->key;
        char *p = t.buf + t.len;
        size_t room = cap - t.len;
        int w = snprintf(p, room, "%s\t", k.gpu);
        for (int j = 0; j < KEY_INTS && w > 0 && (size_t)w < room; j++)
            w += snprintf(p + w, room - (size_t)w, "%d ", *key_ints(&k, j));
        if (w > 0 && (size_t)w < room)
            w += snprintf(p + w, room - (size_t)w, "%zu %u %d %d\t%d %d %zu %lld %d", k.limit,
                          k.align, k.api, k.lib, en->choice.algo, en->choice.math,
                          en->choice.memory, en->choice.engine, en->choice.nknobs);
        for (int j = 0; j < en->choice.nknobs && w > 0 && (size_t)w < room; j++)
            w += snprintf(p + w, room - (size_t)w, " %lld %lld", en->choice.knob[j][0],
                          en->choice.knob[j][1]);
        if (w > 0 && (size_t)w + 1 < room && (size_t)w + 1 < LINE_BYTES) {
            p[w] = '\n';
            t.len += (size_t)w + 1;
        }
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", cache_path);
    cache_new = 0;
    pthread_mutex_unlock(&cache_lock);
    int rc = gt_atomic_write(path, "the convolution cache", gt_atomic_fill_text, &t, 0, e);
    free(t.buf);
    return rc;
}

void gt_conv_cache_default_path(char *path, size_t cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[PATH_MAX];
    path[0] = '\0';
    if (xdg && xdg[0] == '/')
        snprintf(dir, sizeof dir, "%s", xdg);
    else if (home && home[0] == '/')
        snprintf(dir, sizeof dir, "%s/.cache", home);
    else
        return;
    size_t len = strlen(dir);
    if (len + sizeof "/gputrain/conv-cache" > cap || len + sizeof "/gputrain" > sizeof dir)
        return;
    (void)mkdir(dir, 0700);
    snprintf(dir + len, sizeof dir - len, "/gputrain");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return; /* nowhere to keep it: every run times its convolutions */
    snprintf(path, cap, "%s/conv-cache", dir);
}
