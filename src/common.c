/* common.c - errors, aligned memory, the monotonic clock, seeded random numbers and CRC-32. */
#include "gputrain/common.h"

#include "gputrain/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

char *gt_escape(char *dst, size_t cap, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)src;
    size_t at = 0, left = strlen(src);
    while (left > 0) {
        size_t n = gt_utf8_len(s, left);
        int c1 = n == 2 && s[0] == 0xC2 && s[1] < 0xA0; /* U+0080..U+009F */
        int bad = n == 0 || s[0] < 0x20 || s[0] == 0x7F || c1;
        size_t take = n ? n : 1, out = bad ? 4 * take : take;
        if (at + out >= cap)
            break;
        for (size_t i = 0; i < take; i++) {
            if (!bad) {
                dst[at++] = (char)s[i];
                continue;
            }
            dst[at++] = '\\';
            dst[at++] = 'x';
            dst[at++] = hex[s[i] >> 4];
            dst[at++] = hex[s[i] & 15];
        }
        s += take;
        left -= take;
    }
    if (cap > 0)
        dst[at] = '\0';
    return dst;
}

int gt_fail(gt_err *e, const char *fmt, ...)
{
    if (e) {
        char raw[GT_ERRLEN];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
        gt_escape(e->msg, sizeof e->msg, raw);
    }
    return -1;
}

void *gt_alloc(size_t bytes)
{
    if (bytes == 0)
        return NULL;
    size_t rounded = (bytes + GT_CACHELINE - 1) / GT_CACHELINE * GT_CACHELINE;
    if (rounded < bytes)
        return NULL;
    void *p = aligned_alloc(GT_CACHELINE, rounded);
    if (p)
        memset(p, 0, rounded);
    return p;
}

void gt_free(void *p) { free(p); }

uint64_t gt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double gt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void gt_rng_seed(gt_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    r->s[0] = splitmix64(&x);
    r->s[1] = splitmix64(&x);
    if (!r->s[0] && !r->s[1])
        r->s[1] = 1;
}

/* xoroshiro128++ */
uint64_t gt_rng_u64(gt_rng *r)
{
    uint64_t s0 = r->s[0], s1 = r->s[1];
    uint64_t x = s0 + s1;
    uint64_t out = ((x << 17) | (x >> 47)) + s0;
    s1 ^= s0;
    r->s[0] = ((s0 << 49) | (s0 >> 15)) ^ s1 ^ (s1 << 21);
    r->s[1] = (s1 << 28) | (s1 >> 36);
    return out;
}

uint32_t gt_rng_below(gt_rng *r, uint32_t n)
{
    /* Lemire's multiply-shift with rejection: unbiased. */
    uint64_t m = (uint64_t)(uint32_t)(gt_rng_u64(r) >> 32) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t t = -n % n;
        while (low < t) {
            m = (uint64_t)(uint32_t)(gt_rng_u64(r) >> 32) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

double gt_rng_uniform(gt_rng *r) { return (double)(gt_rng_u64(r) >> 11) * 0x1.0p-53; }

void gt_permutation(uint32_t *perm, uint32_t n, uint64_t seed, uint32_t epoch)
{
    gt_rng r;
    gt_rng_seed(&r, seed * 0x100000001B3ull + epoch + 1);
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = gt_rng_below(&r, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

uint32_t gt_crc32(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len > 0) {
        uInt chunk = len > (1u << 30) ? (1u << 30) : (uInt)len;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        len -= chunk;
    }
    return crc;
}
