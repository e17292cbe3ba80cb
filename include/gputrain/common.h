/* common.h - error reporting, aligned memory, clocks and random numbers shared by every module.
 *
 * Errors travel upward as a gt_err filled by gt_fail(): each function that can fail returns 0 on
 * success or -1 with a one-line message naming the file, flag or value that was wrong. Only the
 * command line (src/main.c) decides to print and exit. */
#ifndef GT_COMMON_H
#define GT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GT_ERRLEN 512
#define GT_CACHELINE 64

typedef struct gt_err {
    char msg[GT_ERRLEN]; /* one line, no trailing newline */
} gt_err;

/* The part every row of a name table starts with (names.h; the optimizer table of optim.h): the
 * word and the enum value it stands for. */
typedef struct gt_name_head {
    const char *name;  /* as written on the command line, in logs and in checkpoints */
    int value;         /* the enum value */
} gt_name_head;

/* Formats a message into e (if non-NULL) and returns -1, so callers can `return gt_fail(...)`.
 * The message goes through gt_escape: file names and file content quoted in it cannot put
 * control characters on a terminal or break the line. */
int gt_fail(gt_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copies src into dst (cap bytes, always terminated, cut only between characters) with every
 * byte of a control character (C0, DEL, C1) or of an invalid UTF-8 sequence written as \xNN;
 * printable text, UTF-8 included, is unchanged, so escaping twice changes nothing. Returns dst.
 * Used wherever text from a file or a file name is printed. */
char *gt_escape(char *dst, size_t cap, const char *src);

/* 64-byte aligned, zero-filled allocation; NULL on failure or when bytes is 0. */
void *gt_alloc(size_t bytes);
void gt_free(void *p);

/* Monotonic wall clock in seconds. */
double gt_now(void);
/* The same clock in nanoseconds, for intervals summed in integers (lock waits, progress times). */
uint64_t gt_now_ns(void);

/* Seeded sequential generator (splitmix64 seeding, xoshiro128+-style output); used for
 * initialisation and permutations on the host only. */
typedef struct gt_rng {
    uint64_t s[2];
} gt_rng;
void gt_rng_seed(gt_rng *r, uint64_t seed);
uint64_t gt_rng_u64(gt_rng *r);
uint32_t gt_rng_below(gt_rng *r, uint32_t n); /* uniform in [0, n), unbiased */
double gt_rng_uniform(gt_rng *r);             /* uniform in [0, 1) */

/* Fills perm[0..n) with a permutation of 0..n-1 that depends only on (seed, epoch). */
void gt_permutation(uint32_t *perm, uint32_t n, uint64_t seed, uint32_t epoch);

/* CRC-32 (zlib polynomial) of a buffer, chained through crc. */
uint32_t gt_crc32(uint32_t crc, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
