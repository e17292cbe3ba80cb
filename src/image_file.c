/* image_file.c - an image file read whole and, for a PNG, verified before stb_image decodes it
 * (see image_file.h for why). */
#include "gputrain/image_file.h"

#include "gputrain/atomic_file.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

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

/* The bytes a PNG may need, from its IHDR (checked: first chunk, CRC, size within max_side). */
static int png_check_ihdr(const char *path, const unsigned char *b, size_t len, unsigned max_side,
                          uint64_t *want, gt_err *e)
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
    return 0;
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

int gt_image_read(const char *path, unsigned max_side, unsigned char **buf, size_t *len, gt_err *e)
{
    size_t max = (size_t)max_side * max_side * 8 + IMG_SLACK; /* 16-bit RGBA, doubled */
    if (img_slurp(path, max, buf, len, e) != 0)
        return -1;
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint64_t want = 0;
    if (*len >= 8 && memcmp(*buf, sig, 8) == 0 &&
        (png_check_ihdr(path, *buf, *len, max_side, &want, e) != 0 ||
         png_check_chunks(path, *buf, *len, want, e) != 0)) {
        free(*buf);
        *buf = NULL;
        return -1;
    }
    return 0;
}
