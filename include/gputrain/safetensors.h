/* safetensors.h - the safetensors file format, as gputrain's checkpoints use it.
 *
 * File: 8-byte little-endian header length, a JSON header, then raw little-endian data. The header
 * is an object: "__metadata__" (string values only) and one member per tensor, {"dtype": "F32",
 * "shape": [...], "data_offsets": [begin, end]}, offsets relative to the data, which the tensors
 * must tile exactly (no holes, overlaps or trailing bytes), as Python's safetensors requires.
 * Messages name the file as a checkpoint, its only use here. */
#ifndef GT_SAFETENSORS_H
#define GT_SAFETENSORS_H

#include "gputrain/common.h"
#include "gputrain/json.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GT_ST_MAX_RANK 4
#define GT_ST_MAX_NAME 128 /* tensor names; gputrain's are under 50 bytes */
#define GT_ST_MAX_HEADER (100ull << 20) /* header bytes a reader accepts (refused before anything
                                         * is allocated); writers stay within it */

/* ---- writing ---- */

typedef struct gt_st_kv {
    const char *key, *value; /* one "__metadata__" member, both valid UTF-8 */
} gt_st_kv;

typedef struct gt_st_out {
    const char *name;   /* valid UTF-8 */
    const float *data;  /* len floats, host order */
    size_t len;
    int rank;
    const int *shape;   /* rank dimensions whose product is len */
} gt_st_out;

/* The JSON header (metadata first, then tensors in the order given, back to back), padded with
 * spaces so the data starts 8-byte aligned; NULL when out of memory. */
char *gt_st_build_header(const gt_st_kv *meta, int nmeta, const gt_st_out *out, int nout,
                         size_t *len);

/* Writes the 8-byte length, the header and every tensor's data little-endian: 0 or an errno. */
int gt_st_write(int fd, const char *header, size_t hlen, const gt_st_out *out, int nout);

/* CRC-32 of n floats as they are stored (little-endian). */
uint32_t gt_st_crc_floats_le(const float *p, size_t n);

/* Little-endian <-> host order in place (nothing on a little-endian host). */
void gt_st_floats_from_le(float *p, size_t n);

/* ---- reading ---- */

typedef struct gt_st_entry {
    const char *name;
    uint64_t begin, end; /* in the data region */
    int rank;
    int shape[GT_ST_MAX_RANK];
} gt_st_entry;

typedef struct gt_st_file {
    const char *path;
    int fd;
    uint64_t data_start, data_size; /* file offset and length of the data region */
    char *header;                   /* the header, parsed in place */
    char *raw;                      /* the 8 length bytes and the header as read, before parsing */
    uint64_t hlen;                  /* header bytes */
    gt_json_doc doc;
    int meta_node;                  /* "__metadata__" in doc */
    gt_st_entry *entries;           /* after gt_st_index: every tensor, sorted by offset */
    int nentries;
} gt_st_file;

/* Opens path (a regular file, opened without blocking), reads and parses the header and checks
 * that __metadata__ is an object of strings. On failure f needs no gt_st_close. */
int gt_st_open(gt_st_file *f, const char *path, gt_err *e);

/* Parses every tensor entry (F32 only, rank <= GT_ST_MAX_RANK) and checks that they tile the data. */
int gt_st_index(gt_st_file *f, gt_err *e);

/* The metadata string under key, or NULL. */
const char *gt_st_meta_str(const gt_st_file *f, const char *key);

/* Reads one tensor's bytes into dst (or through a scratch buffer when dst is NULL) and returns
 * their CRC-32 in *crc. */
int gt_st_read(const gt_st_file *f, const gt_st_entry *ent, char *dst, uint32_t *crc, gt_err *e);

void gt_st_close(gt_st_file *f);

#ifdef __cplusplus
}
#endif
#endif
