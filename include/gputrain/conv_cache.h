/* conv_cache.h - the process-wide cache of convolution algorithm choices (src/conv_cache.c).
 *
 * Timing cuDNN's algorithms for one convolution costs tens of milliseconds; a run opens a device
 * per GPU and an evaluator beside the first, and a residual network repeats its shapes, so the
 * same search would run many times. A choice is kept under a key holding everything that decides
 * it - the GPU (name, compute capability, SM count), the convolution's shapes, data type and math
 * type, the direction, the determinism and accuracy rules, the search workspace and the buffers'
 * alignment - and every device of the process whose key is equal takes it instead of timing
 * again: the same rule applied to the same search, by whichever device searched first.
 *
 * A device claims a key before searching it; another that wants the same key waits for the
 * result (or, not waiting, is told to come back later), so each key is searched once. Plain C
 * with a mutex: no CUDA here, so the unit test runs anywhere.
 *
 * The cache can also live on disk between runs (gputrain --conv-cache): a text file of one
 * choice a line, read before the devices open and written, whole, after they did where this
 * process made choices the file lacks. A later run on the same GPU model and cuDNN takes them
 * instead of timing again: a shorter start-up, and the same algorithms run after run. */
#ifndef GT_CONV_CACHE_H
#define GT_CONV_CACHE_H

#include "gputrain/common.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything a convolution algorithm's choice depends on. Build it zeroed (= {0} or memset):
 * keys compare field by field, gpu as a string. */
typedef struct gt_conv_key {
    char gpu[128];          /* the device's name (cudaDeviceProp.name) */
    int cc_major, cc_minor; /* its compute capability */
    int sms;                /* its multiprocessor count (MIG slices share a name) */
    int n, c, h, w;         /* input: batch, channels, rows, columns */
    int k, r, s;            /* output channels, filter rows and columns */
    int stride, pad;        /* both dimensions alike */
    int dtype;              /* cudnnDataType_t of x, w and y */
    int layout;             /* cudnnTensorFormat_t of x, w and y */
    int math;               /* cudnnMathType_t on the descriptor while searching */
    int direction;          /* GT_CONV_FWD, GT_CONV_BWD_FILTER or GT_CONV_BWD_DATA */
    int deterministic;      /* only deterministic algorithms are preferred */
    int tensor_ops;         /* tensor-core math and Winograd may be chosen */
    size_t limit;           /* workspace bytes the search ran in and the choice must fit */
    unsigned align;         /* smallest alignment declared for the searched buffers (at most 16
                               bytes: conv_engine.cu's align_of) */
    int api;                /* GT_CONV_LEGACY (algorithms) or GT_CONV_BACKEND (engines) */
    int lib;                /* cuDNN's version (cudnnGetVersion): engines and knobs are its own */
} gt_conv_key;

enum { GT_CONV_FWD, GT_CONV_BWD_FILTER, GT_CONV_BWD_DATA };
/* How a choice is made and run: cuDNN's legacy algorithm calls (no GPU path makes these any
 * more; a cache file may still hold them, and reads them back as they were), or its backend
 * API's engine configurations (an engine and the values of its knobs). */
enum { GT_CONV_LEGACY, GT_CONV_BACKEND };
#define GT_CONV_MAX_KNOBS 16

/* One direction's choice. */
typedef struct gt_conv_choice {
    int algo;               /* legacy: the cudnnConvolution*Algo_t */
    int math;               /* legacy: the cudnnMathType_t to set on the descriptor */
    size_t memory;          /* workspace bytes it needs at the key's batch */
    long long engine;       /* backend: the engine's global index */
    int nknobs;             /* backend: its knobs' choices, (cudnnBackendKnobType_t, value) */
    long long knob[GT_CONV_MAX_KNOBS][2];
} gt_conv_choice;

typedef enum gt_conv_claim {
    GT_CONV_CACHE_HIT,      /* *out holds the choice */
    GT_CONV_CACHE_MINE,     /* the caller searches; then gt_conv_cache_put or _abandon */
    GT_CONV_CACHE_BUSY      /* another searches it now (only when not waiting) */
} gt_conv_claim;

/* Looks k up. Known: HIT with *out. Unknown: claims it for the caller (MINE). Being searched by
 * another: waits for its result where wait is non-zero, else returns BUSY. Where the memory
 * for a new entry cannot be had, the caller searches without a claim (MINE; its put is then
 * dropped). A caller holds at most one claim at a time, so waiting cannot deadlock. */
gt_conv_claim gt_conv_cache_claim(const gt_conv_key *k, int wait, gt_conv_choice *out);
/* The caller's search of its claimed k chose ch: kept, and the waiters take it. */
void gt_conv_cache_put(const gt_conv_key *k, const gt_conv_choice *ch);
/* The caller's search of its claimed k failed: the claim is dropped; a waiter claims k. */
void gt_conv_cache_abandon(const gt_conv_key *k);
/* Lookups answered from the cache and searches claimed since the start (or the last clear). */
void gt_conv_cache_counts(unsigned long *hits, unsigned long *searches);
/* Adds the choices of the cache file at path to the cache (a missing file adds none; a choice
 * the cache has is kept) and makes path the file gt_conv_cache_save writes. Lines that do not
 * read as a choice are skipped and counted in *bad. -1 with e where the file exists but cannot
 * be read. */
int gt_conv_cache_load(const char *path, int *bad, gt_err *e);
/* Where this process made choices since the load (or the last save): merges the file's choices
 * again (another run may have written it since), then writes them all to the loaded path, whole
 * or not at all (atomic_file.h), the newest GT_CONV_CACHE_FILE_MAX of them. 0 where there was
 * nothing to write or no file was loaded; -1 with e where the write failed. */
int gt_conv_cache_save(gt_err *e);
#define GT_CONV_CACHE_FILE_MAX 4096
/* The default cache file into path: $XDG_CACHE_HOME/gputrain/conv-cache (an absolute
 * XDG_CACHE_HOME), else $HOME/.cache/gputrain/conv-cache, its folders made (0700) where missing;
 * "" where there is no such home or its folder cannot be made. */
void gt_conv_cache_default_path(char *path, size_t cap);
/* Keys whose choice came from the cache file (each counted once, at its first lookup). */
unsigned long gt_conv_cache_file_hits(void);
/* Forgets every choice and the file (tests); no claim may be outstanding. */
void gt_conv_cache_clear(void);

#ifdef __cplusplus
}
#endif
#endif
