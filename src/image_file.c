/* image_file.c - an image file read whole, its structure verified, then decoded by stb_image
 * (see image_file.h for why). Only PNG and JPEG reach stb_image, which is built without its
 * other decoders. */
#include "gputrain/image_file.h"

#include "gputrain/atomic_file.h"
#include "gputrain/image_resize.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#include <stb_image.h>

#define IMG_SLACK (1u << 20) /* metadata chunks and deflate overhead beyond the raw image size */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Bytes of filtered scanlines a w x h PNG holds (Adam7 passes when interlaced); 0 if the colour
 * type or depth is not a valid pair. */
static uint64_t png_raw_size(uint32_t w, uint32_t h, unsigned depth, unsigned colour, unsigned interlace)
{
    static const unsigned channels[7] = {1, 0, 3, 1, 2, 0, 4};
    if (colour > 6 || channels[colour] == 0 || (depth != 1 && depth != 2 && depth != 4 &&
                                                depth != 8 && depth != 16))
        return 0;
    uint64_t bits = (uint64_t)channels[colour] * depth, total = 0;
    static const unsigned x0[7] = {0, 4, 0, 2, 0, 1, 0}, y0[7] = {0, 0, 4, 0, 2, 0, 1};
    static const unsigned dx[7] = {8, 8, 4, 4, 2, 2, 1}, dy[7] = {8, 8, 8, 4, 4, 2, 2};
    for (int p = 0; p < (interlace ? 7 : 1); p++) {
        uint64_t pw = interlace ? (w > x0[p] ? (w - x0[p] + dx[p] - 1) / dx[p] : 0) : w;
        uint64_t ph = interlace ? (h > y0[p] ? (h - y0[p] + dy[p] - 1) / dy[p] : 0) : h;
        if (pw && ph)
            total += ph * (1 + (pw * bits + 7) / 8);
    }
    return total;
}

/* Feeds one IDAT chunk to the inflater; raw counts the bytes out, never more than want. */
static int png_inflate(z_stream *z, const unsigned char *data, uint32_t n, uint64_t *raw,
                       uint64_t want, int *ended)
{
    unsigned char scratch[16384];
    z->next_in = (Bytef *)data;
    z->avail_in = n;
    while (z->avail_in > 0 && !*ended) {
        z->next_out = scratch;
        z->avail_out = sizeof scratch;
        int rc = inflate(z, Z_NO_FLUSH);
        *raw += sizeof scratch - z->avail_out;
        if (*raw > want)
            return -1;
        if (rc == Z_STREAM_END)
            *ended = 1;
        else if (rc != Z_OK)
            return -1;
    }
    return z->avail_in > 0 ? -1 : 0; /* data after the zlib stream's end */
}

/* A chunk type is four ASCII letters. */
static int png_type_valid(const unsigned char *t)
{
    for (int i = 0; i < 4; i++)
        if (!((t[i] >= 'A' && t[i] <= 'Z') || (t[i] >= 'a' && t[i] <= 'z')))
            return 0;
    return 1;
}

/* Walks the chunks after the signature and IHDR's checks. */
static int png_check_chunks(const char *path, const unsigned char *b, size_t len, uint64_t want,
                            gt_err *e)
{
    z_stream z = {0};
    if (inflateInit(&z) != Z_OK)
        return gt_fail(e, "%s: out of memory checking the PNG", path);
    uint64_t raw = 0;
    int ended = 0, rc = -1, seen_end = 0;
    size_t at = 8;
    while (at + 12 <= len && !seen_end) {
        uint32_t n = be32(b + at);
        if (n > len - at - 12) {
            gt_fail(e, "%s: PNG chunk at byte %zu runs past the end of the file", path, at);
            goto out;
        }
        if (!png_type_valid(b + at + 4)) {
            gt_fail(e, "%s: PNG chunk at byte %zu has no valid type (bytes %02x %02x %02x %02x): "
                    "file damaged", path, at, b[at + 4], b[at + 5], b[at + 6], b[at + 7]);
            goto out;
        }
        if ((uint32_t)crc32(0, b + at + 4, n + 4) != be32(b + at + 8 + n)) {
            gt_fail(e, "%s: PNG chunk %.4s at byte %zu fails its CRC: file damaged", path,
                    (const char *)b + at + 4, at);
            goto out;
        }
        if (memcmp(b + at + 4, "IDAT", 4) == 0 &&
            png_inflate(&z, b + at + 8, n, &raw, want, &ended) != 0) {
            gt_fail(e, "%s: PNG image data is damaged or larger than its %llu-byte size", path,
                    (unsigned long long)want);
            goto out;
        }
        seen_end = memcmp(b + at + 4, "IEND", 4) == 0;
        at += 12 + (size_t)n;
    }
    if (!seen_end || at != len)
        gt_fail(e, "%s: PNG %s", path, seen_end ? "has bytes after IEND" : "has no IEND chunk");
    else if (!ended || raw != want)
        gt_fail(e, "%s: PNG image data is cut short (%llu of %llu bytes)", path,
                (unsigned long long)raw, (unsigned long long)want);
    else
        rc = 0;
out:
    inflateEnd(&z);
    return rc;
}

/* The bytes a PNG may need, from its IHDR (checked: first chunk, CRC, size within max_side), and
 * its size and the channels it decodes to. */
static int png_check_ihdr(const char *path, const unsigned char *b, size_t len, unsigned max_side,
                          uint64_t *want, gt_image *im, gt_err *e)
{
    if (len < 33 || be32(b + 8) != 13 || memcmp(b + 12, "IHDR", 4) != 0)
        return gt_fail(e, "%s: PNG without an IHDR chunk first", path);
    if ((uint32_t)crc32(0, b + 12, 17) != be32(b + 29))
        return gt_fail(e, "%s: PNG chunk IHDR fails its CRC: file damaged", path);
    uint32_t w = be32(b + 16), h = be32(b + 20);
    if (w == 0 || h == 0 || w > max_side || h > max_side)
        return gt_fail(e, "%s: %ux%u pixels (limit %ux%u)", path, w, h, max_side, max_side);
    *want = png_raw_size(w, h, b[24], b[25], b[28]);
    if (*want == 0 || b[26] != 0 || b[27] != 0 || b[28] > 1)
        return gt_fail(e, "%s: PNG IHDR has an invalid depth, colour type or method", path);
    if (len > 2 * *want + IMG_SLACK)
        return gt_fail(e, "%s: %zu bytes for a %ux%u PNG (at most %llu)", path, len, w, h,
                       (unsigned long long)(2 * *want + IMG_SLACK));
    im->w = (int)w;
    im->h = (int)h;
    im->channels = b[25] == 0 || b[25] == 4 ? 1 : 3; /* grey (+alpha) or colour (+alpha) */
    return 0;
}

/* Takes out the IDAT chunks without data (valid, but stb_image mishandles a first one) of a PNG
 * whose chunks are checked. */
static void png_drop_empty_idat(unsigned char *b, size_t *len)
{
    size_t at = 8;
    while (at + 12 <= *len) {
        uint32_t n = be32(b + at);
        if (n == 0 && memcmp(b + at + 4, "IDAT", 4) == 0) {
            memmove(b + at, b + at + 12, *len - at - 12);
            *len -= 12;
        } else {
            at += 12 + (size_t)n;
        }
    }
}

/* ---- JPEG ------------------------------------------------------------------------------------ */

/* What a JPEG has defined so far, for the checks of each scan. */
typedef struct jpeg_state {
    int frame, scans;
    unsigned dqt;         /* quantisation tables defined, a bit per id */
    unsigned dht[2];      /* Huffman tables defined: DC, AC */
    int ncomp;
    unsigned char comp_id[4], comp_tq[4];
    unsigned dc_scanned;  /* components whose DC coefficients a scan has given, a bit each */
} jpeg_state;

static int jpeg_cut(const char *path, gt_err *e)
{
    return gt_fail(e, "%s: JPEG cut short (it ends before its end-of-image marker): file "
                   "truncated or damaged", path);
}

static int jpeg_damaged(const char *path, const char *what, gt_err *e)
{
    return gt_fail(e, "%s: JPEG damaged: %s", path, what);
}

/* The frame header (SOF0-2: baseline, extended or progressive Huffman coding, what stb_image
 * decodes): 8-bit samples, 1, 3 or 4 components, a size within max_side. */
static int jpeg_frame(const char *path, unsigned marker, const unsigned char *seg, size_t n,
                      unsigned max_side, jpeg_state *st, gt_image *im, gt_err *e)
{
    if (marker > 0xC2)
        return gt_fail(e, "%s: a JPEG with lossless, hierarchical or arithmetic coding (SOF%u), "
                       "which gputrain cannot decode: save it as a baseline JPEG or a PNG", path,
                       marker - 0xC0);
    if (st->frame++)
        return jpeg_damaged(path, "a second frame header", e);
    if (n < 6 || n != 6 + 3 * (size_t)seg[5] || seg[0] != 8 ||
        (seg[5] != 1 && seg[5] != 3 && seg[5] != 4))
        return gt_fail(e, "%s: JPEG frame header is damaged or not 8-bit with 1, 3 or 4 "
                       "components", path);
    unsigned h = (unsigned)seg[1] << 8 | seg[2], w = (unsigned)seg[3] << 8 | seg[4];
    if (w == 0 || h == 0 || w > max_side || h > max_side)
        return gt_fail(e, "%s: %ux%u pixels (limit %ux%u)", path, w, h, max_side, max_side);
    st->ncomp = seg[5];
    for (int i = 0; i < st->ncomp; i++) {
        st->comp_id[i] = seg[6 + 3 * i];
        st->comp_tq[i] = seg[8 + 3 * i];
        if (st->comp_tq[i] > 3)
            return jpeg_damaged(path, "a component's quantisation table id", e);
    }
    im->w = (int)w;
    im->h = (int)h;
    im->channels = seg[5] == 1 ? 1 : 3;
    return 0;
}

/* DQT and DHT segments: each table whole, its id recorded as defined. */
static int jpeg_tables(const char *path, unsigned marker, const unsigned char *seg, size_t n,
                       jpeg_state *st, gt_err *e)
{
    size_t at = 0;
    while (at < n) {
        unsigned kind = seg[at] >> 4, id = seg[at] & 15;
        size_t size = 1 + 64 * (kind + 1);
        if (marker == 0xC4) {
            size = 17;
            for (int i = 1; i <= 16 && at + 16 < n; i++)
                size += seg[at + i];
        }
        if (kind > 1 || id > 3 || size > n - at)
            return jpeg_damaged(path, marker == 0xC4 ? "a Huffman table" : "a quantisation table",
                                e);
        if (marker == 0xC4)
            st->dht[kind] |= 1u << id;
        else
            st->dqt |= 1u << id;
        at += size;
    }
    return 0;
}

/* A scan header: components of the frame whose quantisation and Huffman tables (DC for a scan
 * of DC coefficients, AC for one of AC coefficients) are defined, so that stb_image never reads a
 * table that was not given; records the components whose DC coefficients it begins. */
static int jpeg_scan(const char *path, const unsigned char *seg, size_t n, jpeg_state *st,
                     gt_err *e)
{
    if (!st->frame)
        return jpeg_damaged(path, "image data before the frame header", e);
    unsigned ns = n ? seg[0] : 0;
    if (ns < 1 || ns > 4 || n != 4 + 2 * (size_t)ns)
        return jpeg_damaged(path, "a scan header", e);
    unsigned ss = seg[1 + 2 * ns], se = seg[2 + 2 * ns], ah = seg[3 + 2 * ns] >> 4;
    for (unsigned i = 0; i < ns; i++) {
        unsigned id = seg[1 + 2 * i], td = seg[2 + 2 * i] >> 4, ta = seg[2 + 2 * i] & 15;
        int c = 0;
        while (c < st->ncomp && st->comp_id[c] != id)
            c++;
        int dc = ss == 0 && ah == 0, ac = se > 0;
        if (c == st->ncomp || td > 3 || ta > 3 || !(st->dqt >> st->comp_tq[c] & 1) ||
            (dc && !(st->dht[0] >> td & 1)) || (ac && !(st->dht[1] >> ta & 1)))
            return jpeg_damaged(path, "a scan uses a component or table that is not defined", e);
        st->dc_scanned |= (unsigned)dc << c;
    }
    st->scans++;
    return 0;
}

/* Where the entropy-coded data from b[at] ends: at the next marker (0xFF followed by neither a
 * stuffed 0 nor a restart marker); len when the file ends first. */
static size_t jpeg_scan_end(const unsigned char *b, size_t len, size_t at)
{
    for (; at + 1 < len; at++)
        if (b[at] == 0xFF && b[at + 1] != 0 && (b[at + 1] < 0xD0 || b[at + 1] > 0xD7))
            return at;
    return len;
}

/* One marker segment's checks. */
static int jpeg_segment(const char *path, unsigned marker, const unsigned char *seg, size_t n,
                        unsigned max_side, jpeg_state *st, gt_image *im, gt_err *e)
{
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC)
        return jpeg_frame(path, marker, seg, n, max_side, st, im, e);
    if (marker == 0xC4 || marker == 0xDB)
        return jpeg_tables(path, marker, seg, n, st, e);
    if (marker == 0xDA)
        return jpeg_scan(path, seg, n, st, e);
    return 0;
}

/* Walks a JPEG from SOI to EOI: every segment within the file, one supported frame header, the
 * tables each scan uses, each scan's data ending at a marker. A file cut short has no EOI. */
static int jpeg_check(const char *path, const unsigned char *b, size_t len, unsigned max_side,
                      gt_image *im, gt_err *e)
{
    jpeg_state st = {0};
    size_t at = 2;
    for (;;) {
        if (at < len && b[at] != 0xFF)
            return gt_fail(e, "%s: JPEG damaged: no marker at byte %zu", path, at);
        while (at < len && b[at] == 0xFF) /* fill bytes */
            at++;
        if (at >= len)
            return jpeg_cut(path, e);
        unsigned marker = b[at++];
        if (marker == 0xD9)
            break;
        if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) /* markers without a length */
            continue;
        if (marker == 0x00 || marker == 0xD8)
            return gt_fail(e, "%s: JPEG damaged: marker %02x at byte %zu", path, marker, at - 1);
        if (len - at < 2)
            return jpeg_cut(path, e);
        size_t n = (size_t)b[at] << 8 | b[at + 1];
        if (n < 2 || n > len - at)
            return jpeg_cut(path, e);
        if (jpeg_segment(path, marker, b + at + 2, n - 2, max_side, &st, im, e) != 0)
            return -1;
        at += n;
        if (marker == 0xDA)
            at = jpeg_scan_end(b, len, at);
    }
    /* A component that no scan began leaves stb_image's buffers for it as allocated: unwritten. */
    if (!st.scans || st.dc_scanned != (1u << st.ncomp) - 1)
        return gt_fail(e, "%s: JPEG without image data for %s", path,
                       st.scans ? "every component" : "any component");
    uint64_t bound = 2 * (uint64_t)im->w * (uint64_t)im->h * 4 + IMG_SLACK;
    if (len > bound)
        return gt_fail(e, "%s: %zu bytes for a %dx%d JPEG (at most %llu)", path, len, im->w, im->h,
                       (unsigned long long)bound);
    return 0;
}

/* ---- other formats --------------------------------------------------------------------------- */

/* What a file of a format gputrain does not read is, from its signature; NULL when unknown. */
static const char *img_other_format(const unsigned char *b, size_t len)
{
    static const struct {
        size_t at, n;
        const char *magic, *name;
    } sigs[] = {
        {0, 2, "BM", "a BMP"},         {0, 4, "GIF8", "a GIF"},        {0, 4, "II*\0", "a TIFF"},
        {0, 4, "MM\0*", "a TIFF"},     {8, 4, "WEBP", "a WebP"},       {0, 4, "8BPS", "a PSD"},
        {0, 4, "qoif", "a QOI"},       {4, 4, "ftyp", "a HEIF/AVIF"},  {0, 2, "#?", "an HDR"},
        {0, 6, "\0\0\0\x0cjP", "a JPEG 2000"}, {0, 2, "\xff\x0a", "a JPEG XL"},
    };
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        if (len >= sigs[i].at + sigs[i].n && memcmp(b + sigs[i].at, sigs[i].magic, sigs[i].n) == 0)
            return sigs[i].name;
    if (len >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7' &&
        (b[2] == ' ' || b[2] == '\n' || b[2] == '\r' || b[2] == '\t'))
        return "a PNM";
    return NULL;
}

static int img_refuse_format(const char *path, const unsigned char *b, size_t len, gt_err *e)
{
    const char *name = img_other_format(b, len);
    if (name)
        return gt_fail(e, "%s: %s image: gputrain reads PNG and JPEG only (convert it to PNG)",
                       path, name);
    char first[3 * 8] = "";
    for (size_t i = 0, at = 0; i < len && i < 8; i++)
        at += (size_t)snprintf(first + at, sizeof first - at, "%s%02x", i ? " " : "", b[i]);
    return gt_fail(e, "%s: not a PNG or JPEG image (%s%s)", path, len ? "its first bytes: " : "empty",
                   first);
}

/* Reads the whole file, refusing one over max bytes before reading it. */
static int img_slurp(const char *path, size_t max, unsigned char **buf, size_t *len, gt_err *e)
{
    const char *why;
    int fd = gt_open_regular(path, &why);
    if (fd < 0)
        return gt_fail(e, "%s: cannot open: %s", path, why);
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size > max) {
        gt_fail(e, "%s: %lld bytes, more than any image within the size limit (%zu)", path,
                (long long)st.st_size, max);
    } else if (!(*buf = malloc((size_t)st.st_size + 1))) {
        gt_fail(e, "%s: out of memory", path);
    } else {
        size_t got = 0;
        ssize_t r = 1;
        while (got < (size_t)st.st_size && (r = read(fd, *buf + got, (size_t)st.st_size - got)) != 0) {
            if (r < 0 && errno != EINTR)
                break;
            got += r > 0 ? (size_t)r : 0;
        }
        *len = got;
        rc = r < 0 ? gt_fail(e, "%s: read error: %s", path, strerror(errno)) : 0;
        if (rc != 0)
            free(*buf);
    }
    close(fd);
    return rc;
}

int gt_image_open(const char *path, unsigned max_side, gt_image *im, gt_err *e)
{
    memset(im, 0, sizeof *im);
    size_t max = (size_t)max_side * max_side * 8 + IMG_SLACK; /* 16-bit RGBA, doubled */
    if (img_slurp(path, max, &im->bytes, &im->len, e) != 0)
        return -1;
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const unsigned char *b = im->bytes;
    uint64_t want = 0;
    int rc;
    if (im->len >= 8 && memcmp(b, png_sig, 8) == 0) {
        im->format = "PNG";
        rc = png_check_ihdr(path, b, im->len, max_side, &want, im, e) != 0 ||
                     png_check_chunks(path, b, im->len, want, e) != 0
                 ? -1 : 0;
        if (rc == 0)
            png_drop_empty_idat(im->bytes, &im->len);
    } else if (im->len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) {
        im->format = "JPEG";
        rc = jpeg_check(path, b, im->len, max_side, im, e);
    } else {
        rc = img_refuse_format(path, b, im->len, e);
    }
    if (rc == 0 && im->len > INT_MAX)
        rc = gt_fail(e, "%s: %zu bytes, more than stb_image reads", path, im->len);
    if (rc != 0)
        gt_image_close(im);
    return rc;
}

int gt_image_decode(const char *path, const gt_image *im, int c, uint8_t *dst, int out_w,
                    int out_h, gt_err *e)
{
    int w, h, comp;
    unsigned char *px = stbi_load_from_memory(im->bytes, (int)im->len, &w, &h, &comp, c);
    if (!px)
        return gt_fail(e, "%s: a %s that stb_image cannot decode (%s)", path, im->format,
                       stbi_failure_reason());
    int rc = w != im->w || h != im->h
                 ? gt_fail(e, "%s: %s decoded as %dx%d, its header says %dx%d", path, im->format,
                           w, h, im->w, im->h)
                 : gt_image_to_chw(path, px, w, h, c, dst, out_w, out_h, e);
    stbi_image_free(px);
    return rc;
}

void gt_image_close(gt_image *im)
{
    free(im->bytes);
    memset(im, 0, sizeof *im);
}
