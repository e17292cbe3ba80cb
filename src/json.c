/* json.c - a strict JSON parser for the subset a safetensors header needs (objects, arrays,
 * strings, non-negative integers), with UTF-8 checks. Strings are decoded in place; object members
 * are indexed by key (duplicates refused) so lookups are a binary search. */
#include "gputrain/json.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define JSON_MAX_DEPTH 16 /* a checkpoint needs 3; more only means a hostile or broken file */

/* Length of the valid UTF-8 sequence at s (avail bytes readable), 0 when invalid: overlong forms,
 * surrogates and code points above U+10FFFF are refused, as strict JSON readers do. */
size_t gt_utf8_len(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (avail < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

int gt_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t left = strlen(s);
    while (left > 0) {
        size_t n = gt_utf8_len(p, left);
        if (n == 0)
            return 0;
        p += n;
        left -= n;
    }
    return 1;
}

size_t gt_json_escape(char *dst, size_t cap, const char *s)
{
    size_t n = 0;
    if (cap == 0)
        return (size_t)-1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        int k = *p == '"' || *p == '\\' ? snprintf(esc, sizeof esc, "\\%c", *p)
                : *p < 0x20              ? snprintf(esc, sizeof esc, "\\u%04x", *p)
                                         : snprintf(esc, sizeof esc, "%c", *p);
        if (n + (size_t)k >= cap) {
            dst[n] = 0;
            return (size_t)-1;
        }
        memcpy(dst + n, esc, (size_t)k);
        n += (size_t)k;
    }
    dst[n] = 0;
    return n;
}

static size_t utf8_put(char *w, uint32_t cp)
{
    unsigned char *o = (unsigned char *)w;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}


static int js_fail(gt_json_doc *d, const char *what)
{
    if (!d->err) {
        d->err = what;
        d->err_at = (size_t)(d->p - d->text);
    }
    return -1;
}

void gt_json_free(gt_json_doc *d)
{
    free(d->nodes);
    free(d->index);
}

static int js_at(const gt_json_doc *d, char c) { return d->p < d->end && *d->p == c; }

static void js_skip_ws(gt_json_doc *d)
{
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r'))
        d->p++;
}

static int js_new(gt_json_doc *d, int type)
{
    if (d->n == GT_JSON_MAX_VALUES)
        return js_fail(d, "too many JSON values");
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 64;
        gt_json_node *nodes = realloc(d->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes)
            return js_fail(d, "out of memory");
        d->nodes = nodes;
        d->cap = cap;
    }
    d->nodes[d->n] = (gt_json_node){.type = type, .child = -1, .next = -1};
    return d->n++;
}

int gt_json_hex4(const char *s, const char *end, uint32_t *v)
{
    if (end - s < 4)
        return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0)
            return -1;
        *v = *v << 4 | (uint32_t)x;
    }
    return 0;
}

/* Decodes the escape at *rp to *wp. Every escape is at least as long as its UTF-8 output, so
 * decoding in place never overtakes the input. */
static int js_parse_escape(gt_json_doc *d, char **rp, char **wp)
{
    char *r = *rp + 1;
    d->p = *rp;
    if (r >= d->end)
        return js_fail(d, "unterminated string");
    uint32_t cp;
    switch (*r++) {
    case '"': cp = '"'; break;
    case '\\': cp = '\\'; break;
    case '/': cp = '/'; break;
    case 'b': cp = '\b'; break;
    case 'f': cp = '\f'; break;
    case 'n': cp = '\n'; break;
    case 'r': cp = '\r'; break;
    case 't': cp = '\t'; break;
    case 'u':
        if (gt_json_hex4(r, d->end, &cp) != 0)
            return js_fail(d, "bad \\u escape");
        r += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (d->end - r < 6 || r[0] != '\\' || r[1] != 'u' || gt_json_hex4(r + 2, d->end, &lo) != 0 ||
                lo < 0xDC00 || lo > 0xDFFF)
                return js_fail(d, "unpaired surrogate escape");
            r += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return js_fail(d, "unpaired surrogate escape");
        } else if (cp == 0) {
            return js_fail(d, "\\u0000 in a string");
        }
        break;
    default:
        return js_fail(d, "bad escape");
    }
    *wp += utf8_put(*wp, cp);
    *rp = r;
    return 0;
}

static int js_parse_string(gt_json_doc *d, const char **out)
{
    if (!js_at(d, '"'))
        return js_fail(d, "expected a string");
    char *r = d->p + 1, *w = r;
    const char *start = w;
    while (r < d->end && *r != '"') {
        unsigned char c = (unsigned char)*r;
        if (c == '\\') {
            if (js_parse_escape(d, &r, &w) != 0)
                return -1;
            continue;
        }
        size_t n = c < 0x20 ? 0 : gt_utf8_len((const unsigned char *)r, (size_t)(d->end - r));
        if (n == 0) {
            d->p = r;
            return js_fail(d, c < 0x20 ? "control character in a string" : "invalid UTF-8");
        }
        memmove(w, r, n);
        w += n;
        r += n;
    }
    if (r >= d->end) {
        d->p = r;
        return js_fail(d, "unterminated string");
    }
    d->p = r + 1;
    *w = '\0'; /* at most on the closing quote, already consumed */
    *out = start;
    return 0;
}

static int js_parse_int(gt_json_doc *d, uint64_t *v)
{
    const char *s = d->p;
    if (s >= d->end || *s < '0' || *s > '9')
        return js_fail(d, "expected an object, array, string or non-negative integer");
    if (*s == '0' && s + 1 < d->end && s[1] >= '0' && s[1] <= '9')
        return js_fail(d, "number with a leading zero");
    uint64_t x = 0;
    for (; s < d->end && *s >= '0' && *s <= '9'; s++) {
        unsigned digit = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - digit) / 10)
            return js_fail(d, "integer too large");
        x = x * 10 + digit;
    }
    d->p = (char *)s;
    if (js_at(d, '.') || js_at(d, 'e') || js_at(d, 'E'))
        return js_fail(d, "only integers are allowed");
    *v = x;
    return 0;
}

static int js_cmp_member(const void *a, const void *b)
{
    return strcmp(((const gt_json_member *)a)->key, ((const gt_json_member *)b)->key);
}

/* Sorts an object's members by key for lookups and refuses duplicate keys, whose meaning JSON
 * leaves open. */
static int js_index_object(gt_json_doc *d, int node)
{
    int count = d->nodes[node].count;
    d->nodes[node].sorted = d->nindex;
    if (count == 0)
        return 0;
    if (d->nindex + count > d->index_cap) {
        int cap = d->index_cap ? d->index_cap : 64;
        while (cap < d->nindex + count)
            cap *= 2;
        gt_json_member *index = realloc(d->index, (size_t)cap * sizeof *index);
        if (!index)
            return js_fail(d, "out of memory");
        d->index = index;
        d->index_cap = cap;
    }
    gt_json_member *mem = d->index + d->nindex;
    int i = 0;
    for (int c = d->nodes[node].child; c >= 0; c = d->nodes[c].next)
        mem[i++] = (gt_json_member){d->nodes[c].key, c};
    qsort(mem, (size_t)count, sizeof *mem, js_cmp_member);
    for (i = 1; i < count; i++)
        if (strcmp(mem[i - 1].key, mem[i].key) == 0)
            return js_fail(d, "duplicate key");
    d->nindex += count;
    return 0;
}

static int js_parse_value(gt_json_doc *d, int depth);

/* Members or elements up to the closing bracket; d->p is on the opening one. */
static int js_parse_container(gt_json_doc *d, int node, int depth)
{
    int is_object = d->nodes[node].type == GT_JSON_OBJECT;
    char close = is_object ? '}' : ']';
    int last = -1;
    d->p++;
    js_skip_ws(d);
    if (!js_at(d, close)) {
        for (;;) {
            const char *key = NULL;
            if (is_object) {
                js_skip_ws(d);
                if (js_parse_string(d, &key) != 0)
                    return -1;
                js_skip_ws(d);
                if (!js_at(d, ':'))
                    return js_fail(d, "expected ':'");
                d->p++;
            }
            int child = js_parse_value(d, depth + 1);
            if (child < 0)
                return -1;
            d->nodes[child].key = key;
            if (last < 0)
                d->nodes[node].child = child;
            else
                d->nodes[last].next = child;
            last = child;
            d->nodes[node].count++;
            js_skip_ws(d);
            if (!js_at(d, ','))
                break;
            d->p++;
        }
        if (!js_at(d, close))
            return js_fail(d, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    d->p++;
    return is_object ? js_index_object(d, node) : 0;
}

/* The node index of the value at d->p, or -1. */
static int js_parse_value(gt_json_doc *d, int depth)
{
    js_skip_ws(d);
    if (depth > JSON_MAX_DEPTH)
        return js_fail(d, "nested too deeply");
    int type = js_at(d, '{') ? GT_JSON_OBJECT : js_at(d, '[') ? GT_JSON_ARRAY : js_at(d, '"') ? GT_JSON_STRING : GT_JSON_INT;
    int node = js_new(d, type);
    if (node < 0)
        return -1;
    int rc;
    if (type == GT_JSON_OBJECT || type == GT_JSON_ARRAY) {
        rc = js_parse_container(d, node, depth);
    } else if (type == GT_JSON_STRING) {
        const char *s = NULL;
        rc = js_parse_string(d, &s);
        d->nodes[node].str = s;
    } else {
        uint64_t v = 0;
        rc = js_parse_int(d, &v);
        d->nodes[node].num = v;
    }
    return rc != 0 ? -1 : node;
}

/* Parses text[0..len) in place; the root is nodes[0]. */
int gt_json_parse(gt_json_doc *d, char *text, size_t len)
{
    *d = (gt_json_doc){.text = text, .p = text, .end = text + len};
    if (js_parse_value(d, 0) < 0)
        return -1;
    js_skip_ws(d);
    return d->p == d->end ? 0 : js_fail(d, "junk after the JSON value");
}

/* The member of object node named key, or -1. */
int gt_json_get(const gt_json_doc *d, int node, const char *key)
{
    const gt_json_node *o = &d->nodes[node];
    gt_json_member want = {key, -1};
    const gt_json_member *hit = o->count == 0 ? NULL
        : bsearch(&want, d->index + o->sorted, (size_t)o->count, sizeof want, js_cmp_member);
    return hit ? hit->node : -1;
}
