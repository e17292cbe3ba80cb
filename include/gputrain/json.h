/* json.h - a strict JSON reader for safetensors headers, the UTF-8 checks it rests on, and the
 * string escape gputrain's JSON writers share.
 *
 * Accepted: objects, arrays, strings and non-negative integers (no floats, true/false/null), at
 * most 16 levels deep and GT_JSON_MAX_VALUES values. Strings must be valid UTF-8 (no overlong
 * forms, surrogates or code points above U+10FFFF), escapes are decoded, \u0000 and unpaired
 * surrogates are refused; duplicate keys in an object are refused, since JSON leaves their meaning
 * open. */
#ifndef GT_JSON_H
#define GT_JSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GT_JSON_MAX_VALUES (1 << 18) /* each costs a node, so a hostile text cannot cost gigabytes */

enum { GT_JSON_OBJECT, GT_JSON_ARRAY, GT_JSON_STRING, GT_JSON_INT };

typedef struct gt_json_node {
    int type;        /* GT_JSON_* */
    const char *key; /* member name when the parent is an object */
    const char *str; /* GT_JSON_STRING: decoded in place, NUL-terminated */
    uint64_t num;    /* GT_JSON_INT */
    int child, next; /* first child and next sibling, -1 for none */
    int count;       /* children */
    int sorted;      /* GT_JSON_OBJECT: where its members start in gt_json_doc.index, by key */
} gt_json_node;

typedef struct gt_json_member {
    const char *key;
    int node;
} gt_json_member;

typedef struct gt_json_doc {
    char *text, *p, *end;   /* the text being parsed and the parse position */
    gt_json_node *nodes;    /* nodes[0] is the root */
    int n, cap;             /* nodes used and allocated */
    gt_json_member *index;  /* every object's members, sorted by key per object */
    int nindex, index_cap;  /* members used and allocated */
    const char *err;        /* the first problem found (static text), NULL if none */
    size_t err_at;          /* its byte offset in the text */
} gt_json_doc;

/* Parses text[0..len) in place (strings are decoded into it); the root is nodes[0]. 0, or -1
 * with d->err and d->err_at set. Call gt_json_free either way. */
int gt_json_parse(gt_json_doc *d, char *text, size_t len);

void gt_json_free(gt_json_doc *d);

/* The member of object node named key, or -1. */
int gt_json_get(const gt_json_doc *d, int node, const char *key);

/* Four hex digits (either case) at s, before end, as *v; 0 or -1. */
int gt_json_hex4(const char *s, const char *end, uint32_t *v);

/* Length of the valid UTF-8 sequence at s (avail bytes readable), 0 when invalid. */
size_t gt_utf8_len(const unsigned char *s, size_t avail);

/* Whether the NUL-terminated s is valid UTF-8. */
int gt_utf8_valid(const char *s);

/* s as the inside of a JSON string (quote and backslash escaped, control bytes as \u00XX) into
 * dst with a NUL, cap bytes at most: the bytes written before the NUL, or (size_t)-1 where s does
 * not fit (dst then holds a cut, NUL-terminated prefix). 6 x strlen(s) + 1 bytes always fit. */
size_t gt_json_escape(char *dst, size_t cap, const char *s);

#ifdef __cplusplus
}
#endif
#endif
