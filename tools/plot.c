/* plot.c - gt_plot, the project's own chart renderer: line charts of CSV columns drawn into a
 * 1200x800 PNG, so the benchmark and reproduction scripts make their figures on any host with a C
 * compiler (no Python, no gnuplot). It depends on two header-only stb libraries: stb_easy_font
 * for the text (glyphs come as quads, drawn scaled up) and stb_image_write for the PNG.
 *
 * A chart is read in full first (every series, every row, every number checked), then drawn:
 * background, grid and ticks from "nice" steps, each series (shaded band, line, markers) through a
 * coverage layer so anti-aliased strokes do not darken where segments meet, then the legend in a
 * column of its own to the right of the plot, so it never hides data. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wmissing-braces"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBIW_ASSERT(x) ((void)0)
#include "stb_image_write.h"
#include "stb_easy_font.h"
#pragma GCC diagnostic pop

#define PLOT_W 1200
#define PLOT_H 800
#define PLOT_ERRLEN 512
#define PLOT_MAX_SERIES 32
#define PLOT_MAX_FILE (64u << 20)
#define PLOT_MAX_CELLS 1024
#define PLOT_TEXT_MAX 200

typedef struct rgb {
    unsigned char r, g, b;
} rgb;

typedef struct series {
    char label[PLOT_TEXT_MAX];
    char path[1024];
    char col[4][64];  /* x, y, and optionally ylo, yhi */
    int ncols;        /* 2, or 4 with a band */
    int n;            /* points */
    double *x, *y;
    double *lo, *hi;  /* NAN where the row left the band empty */
} series;

typedef struct chart {
    const char *out, *title, *xlabel, *ylabel;
    int logx;
    int has_ymin, has_ymax;
    double ymin, ymax;
    int nseries;
    series s[PLOT_MAX_SERIES];
} chart;

typedef struct axis {
    double lo, hi;    /* data value at the two ends */
    double step;      /* tick spacing (linear axes) */
    int log;
} axis;

typedef struct canvas {
    unsigned char *px; /* RGB, PLOT_W x PLOT_H */
    float *cov;        /* coverage layer, one float per pixel */
    int x0, y0, x1, y1; /* plot area (pixels, inclusive-exclusive) */
} canvas;

static const rgb palette[10] = {
    {31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189},
    {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207},
};
static const rgb ink = {30, 30, 30};
static const rgb grid_ink = {225, 225, 225};

static int plot_fail(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int plot_fail(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, PLOT_ERRLEN, fmt, ap);
    va_end(ap);
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return -1;
}

/* ---- arguments -------------------------------------------------------------------------------- */

static void plot_print_usage(FILE *f)
{
    fputs("Usage: gt_plot --out FILE.png [--title T] [--xlabel X] [--ylabel Y] [--logx]\n"
          "               [--ymin A] [--ymax B] SERIES...\n"
          "  SERIES is label=FILE.csv:XCOL:YCOL or label=FILE.csv:XCOL:YCOL:YLOCOL:YHICOL\n"
          "  (a shaded band from YLO to YHI). The CSV has a header row; columns are named.\n"
          "  Rows with an empty X or Y cell are left out; a 1200x800 PNG is written.\n",
          f);
}

static int plot_parse_number(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return (end != s && *end == '\0' && errno == 0 && isfinite(*v)) ? 0 : -1;
}

static int plot_copy_field(char *dst, size_t cap, const char *src, size_t len, const char *what,
                           const char *arg, char *err)
{
    if (len == 0)
        return plot_fail(err, "series '%s': empty %s", arg, what);
    if (len >= cap)
        return plot_fail(err, "series '%s': %s longer than %zu characters", arg, what, cap - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

/* label=FILE:x:y[:ylo:yhi]; the label is everything before the first '=', the file everything up
 * to the first ':' after it (so a path may not hold ':'). */
static int plot_parse_series(const char *arg, series *s, char *err)
{
    const char *eq = strchr(arg, '=');
    if (!eq)
        return plot_fail(err, "series '%s': expected label=FILE.csv:XCOL:YCOL[:YLO:YHI]", arg);
    if (plot_copy_field(s->label, sizeof s->label, arg, (size_t)(eq - arg), "label", arg, err) != 0)
        return -1;
    const char *p = eq + 1;
    const char *colon = strchr(p, ':');
    if (!colon)
        return plot_fail(err, "series '%s': no columns after the file name", arg);
    if (plot_copy_field(s->path, sizeof s->path, p, (size_t)(colon - p), "file name", arg, err) != 0)
        return -1;
    s->ncols = 0;
    p = colon + 1;
    for (;;) {
        const char *next = strchr(p, ':');
        size_t len = next ? (size_t)(next - p) : strlen(p);
        if (s->ncols == 4)
            return plot_fail(err, "series '%s': more than 4 columns", arg);
        if (plot_copy_field(s->col[s->ncols], sizeof s->col[0], p, len, "column name", arg, err) != 0)
            return -1;
        s->ncols++;
        if (!next)
            break;
        p = next + 1;
    }
    if (s->ncols != 2 && s->ncols != 4)
        return plot_fail(err, "series '%s': give 2 columns (x:y) or 4 (x:y:ylo:yhi), not %d", arg,
                         s->ncols);
    return 0;
}

static int plot_take_value(int argc, char **argv, int *i, const char **v, char *err)
{
    if (*i + 1 >= argc)
        return plot_fail(err, "%s needs a value", argv[*i]);
    *v = argv[++*i];
    return 0;
}

static int plot_set_once(const char **slot, const char *flag, const char *v, char *err)
{
    if (*slot)
        return plot_fail(err, "%s given twice", flag);
    *slot = v;
    return 0;
}

static int plot_parse_bound(const char *flag, const char *v, int *has, double *out, char *err)
{
    if (*has)
        return plot_fail(err, "%s given twice", flag);
    if (plot_parse_number(v, out) != 0)
        return plot_fail(err, "%s: bad number '%s'", flag, v);
    *has = 1;
    return 0;
}

/* Returns 0, 1 when --help was printed, -1 with err set. */
static int plot_parse_args(int argc, char **argv, chart *c, char *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "--help") == 0) {
            plot_print_usage(stdout);
            return 1;
        }
        if (strcmp(a, "--logx") == 0) {
            if (c->logx)
                return plot_fail(err, "--logx given twice");
            c->logx = 1;
        } else if (strcmp(a, "--out") == 0 || strcmp(a, "--title") == 0 ||
                   strcmp(a, "--xlabel") == 0 || strcmp(a, "--ylabel") == 0) {
            if (plot_take_value(argc, argv, &i, &v, err) != 0)
                return -1;
            const char **slot = a[2] == 'o' ? &c->out : a[2] == 't' ? &c->title
                                : a[2] == 'x' ? &c->xlabel : &c->ylabel;
            if (plot_set_once(slot, a, v, err) != 0)
                return -1;
        } else if (strcmp(a, "--ymin") == 0 || strcmp(a, "--ymax") == 0) {
            if (plot_take_value(argc, argv, &i, &v, err) != 0)
                return -1;
            int lo = a[4] == 'i';
            if (plot_parse_bound(a, v, lo ? &c->has_ymin : &c->has_ymax, lo ? &c->ymin : &c->ymax,
                                 err) != 0)
                return -1;
        } else if (a[0] == '-' && a[1] == '-') {
            return plot_fail(err, "unknown option '%s' (see --help)", a);
        } else {
            if (c->nseries == PLOT_MAX_SERIES)
                return plot_fail(err, "more than %d series", PLOT_MAX_SERIES);
            if (plot_parse_series(a, &c->s[c->nseries], err) != 0)
                return -1;
            c->nseries++;
        }
    }
    if (!c->out)
        return plot_fail(err, "--out FILE.png is required (see --help)");
    if (c->nseries == 0)
        return plot_fail(err, "no series given (label=FILE.csv:XCOL:YCOL)");
    if (c->has_ymin && c->has_ymax && !(c->ymin < c->ymax))
        return plot_fail(err, "--ymin %g must be below --ymax %g", c->ymin, c->ymax);
    return 0;
}

/* ---- CSV -------------------------------------------------------------------------------------- */

static int plot_read_file(const char *path, char **text, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return plot_fail(err, "'%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap)
            break;
        if (cap >= PLOT_MAX_FILE) {
            free(buf);
            fclose(f);
            return plot_fail(err, "'%s': larger than %u MiB", path, PLOT_MAX_FILE >> 20);
        }
        cap *= 2;
        char *grown = realloc(buf, cap + 1);
        if (!grown)
            free(buf);
        buf = grown;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf)
        return plot_fail(err, "'%s': out of memory", path);
    if (bad) {
        free(buf);
        return plot_fail(err, "'%s': read error", path);
    }
    buf[len] = '\0';
    *text = buf;
    return 0;
}

/* Splits one line in place at commas, trimming blanks; returns the cell count. */
static int plot_split_cells(char *line, char **cells)
{
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        char *start = p;
        while (*p && *p != ',')
            p++;
        char *end = p;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
            end--;
        int last = *p == '\0';
        *end = '\0';
        if (n < PLOT_MAX_CELLS)
            cells[n++] = start;
        if (last)
            return n;
        p++;
    }
}

static char *plot_next_line(char **cursor)
{
    char *line = *cursor;
    if (!line || !*line)
        return NULL;
    char *nl = strchr(line, '\n');
    if (nl) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = line + strlen(line);
    }
    return line;
}

static int plot_find_columns(series *s, char **cells, int ncells, int *idx, char *err)
{
    for (int k = 0; k < s->ncols; k++) {
        idx[k] = -1;
        for (int j = 0; j < ncells; j++)
            if (strcmp(cells[j], s->col[k]) == 0)
                idx[k] = j;
        if (idx[k] < 0)
            return plot_fail(err, "'%s': no column '%s' in the header row", s->path, s->col[k]);
    }
    return 0;
}

static int plot_cell_value(const series *s, char **cells, int ncells, int col, int k, int lineno,
                           double *v, char *err)
{
    if (col >= ncells)
        return plot_fail(err, "'%s' line %d: %d cells, no cell for column '%s'", s->path, lineno,
                         ncells, s->col[k]);
    if (cells[col][0] == '\0') {
        *v = NAN;
        return 0;
    }
    if (plot_parse_number(cells[col], v) != 0)
        return plot_fail(err, "'%s' line %d: column '%s': bad number '%s'", s->path, lineno,
                         s->col[k], cells[col]);
    return 0;
}

static int plot_grow_points(series *s, int *cap)
{
    if (s->n < *cap)
        return 0;
    int ncap = *cap ? *cap * 2 : 256;
    double **arrays[4] = {&s->x, &s->y, &s->lo, &s->hi};
    for (int k = 0; k < 4; k++) {
        double *p = realloc(*arrays[k], (size_t)ncap * sizeof(double));
        if (!p)
            return -1;
        *arrays[k] = p;
    }
    *cap = ncap;
    return 0;
}

static int plot_parse_rows(series *s, char *cursor, const int *idx, char *err)
{
    static char *cells[PLOT_MAX_CELLS];
    int cap = 0, lineno = 1;
    char *line;
    while ((line = plot_next_line(&cursor)) != NULL) {
        lineno++;
        if (line[0] == '\0' || (line[0] == '\r' && line[1] == '\0'))
            continue;
        int ncells = plot_split_cells(line, cells);
        double v[4] = {NAN, NAN, NAN, NAN};
        for (int k = 0; k < s->ncols; k++)
            if (plot_cell_value(s, cells, ncells, idx[k], k, lineno, &v[k], err) != 0)
                return -1;
        if (isnan(v[0]) || isnan(v[1]))
            continue;
        if (plot_grow_points(s, &cap) != 0)
            return plot_fail(err, "'%s': out of memory", s->path);
        s->x[s->n] = v[0];
        s->y[s->n] = v[1];
        s->lo[s->n] = v[2];
        s->hi[s->n] = v[3];
        s->n++;
    }
    if (s->n == 0)
        return plot_fail(err, "'%s': no row has values in both '%s' and '%s'", s->path, s->col[0],
                         s->col[1]);
    return 0;
}

static int plot_load_series(series *s, char *err)
{
    static char *cells[PLOT_MAX_CELLS];
    char *text = NULL;
    if (plot_read_file(s->path, &text, err) != 0)
        return -1;
    char *cursor = text;
    char *header = plot_next_line(&cursor);
    int idx[4], rc = -1;
    if (!header || header[0] == '\0')
        plot_fail(err, "'%s': empty file, expected a header row", s->path);
    else if (plot_find_columns(s, cells, plot_split_cells(header, cells), idx, err) == 0)
        rc = plot_parse_rows(s, cursor, idx, err);
    free(text);
    return rc;
}

/* ---- axes ------------------------------------------------------------------------------------- */

static double plot_nice_step(double span, int target)
{
    double raw = span / target;
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void plot_data_range(const chart *c, int want_x, double *lo, double *hi)
{
    *lo = DBL_MAX;
    *hi = -DBL_MAX;
    for (int i = 0; i < c->nseries; i++) {
        const series *s = &c->s[i];
        for (int j = 0; j < s->n; j++) {
            double vals[3] = {want_x ? s->x[j] : s->y[j], want_x ? NAN : s->lo[j],
                              want_x ? NAN : s->hi[j]};
            for (int k = 0; k < 3; k++)
                if (!isnan(vals[k])) {
                    *lo = fmin(*lo, vals[k]);
                    *hi = fmax(*hi, vals[k]);
                }
        }
    }
}

/* integral: every value is a whole number (epochs, workers), so ticks are too; target: about how
 * many ticks fit (fewer along x, where labels are wide). */
static void plot_linear_axis(axis *a, double lo, double hi, int fixed_lo, int fixed_hi, int integral,
                             int target)
{
    if (!(hi > lo)) {
        double pad = lo != 0 ? fabs(lo) * 0.1 : 1;
        if (!fixed_lo)
            lo -= pad;
        if (!fixed_hi)
            hi += pad;
        if (!(hi > lo))
            hi = lo + pad;
    }
    a->step = plot_nice_step(hi - lo, target);
    if (integral && a->step < 1)
        a->step = 1;
    a->lo = fixed_lo ? lo : floor(lo / a->step) * a->step;
    a->hi = fixed_hi ? hi : ceil(hi / a->step) * a->step;
    a->log = 0;
}

static int plot_x_integral(const chart *c)
{
    for (int i = 0; i < c->nseries; i++)
        for (int j = 0; j < c->s[i].n; j++)
            if (c->s[i].x[j] != floor(c->s[i].x[j]))
                return 0;
    return 1;
}

/* The nearest 1, 2 or 5 times a power of ten at or below v (up = 0) or at or above it. */
static double plot_log_bound(double v, int up)
{
    static const double mult[4] = {1, 2, 5, 10};
    double mag = pow(10, floor(log10(v)));
    if (!up) {
        for (int k = 3; k >= 0; k--)
            if (mult[k] * mag <= v * (1 + 1e-12))
                return mult[k] * mag;
        return mag;
    }
    for (int k = 0; k < 4; k++)
        if (mult[k] * mag >= v * (1 - 1e-12))
            return mult[k] * mag;
    return 10 * mag;
}

static int plot_make_axes(const chart *c, axis *ax, axis *ay, char *err)
{
    double xlo, xhi, ylo, yhi;
    plot_data_range(c, 1, &xlo, &xhi);
    plot_data_range(c, 0, &ylo, &yhi);
    if (c->logx) {
        if (xlo <= 0)
            return plot_fail(err, "--logx: an x value is %g, must be > 0", xlo);
        ax->lo = plot_log_bound(xlo, 0);
        ax->hi = plot_log_bound(xhi, 1);
        if (ax->hi <= ax->lo)
            ax->hi = plot_log_bound(ax->lo * 1.01, 1);
        ax->log = 1;
        ax->step = 0;
    } else {
        plot_linear_axis(ax, xlo, xhi, 0, 0, plot_x_integral(c), 6);
    }
    if (c->has_ymin)
        ylo = c->ymin;
    if (c->has_ymax)
        yhi = c->ymax;
    if (c->has_ymin && !c->has_ymax && yhi <= ylo)
        yhi = ylo + 1;
    if (c->has_ymax && !c->has_ymin && ylo >= yhi)
        ylo = yhi - 1;
    plot_linear_axis(ay, ylo, yhi, c->has_ymin, c->has_ymax, 0, 8);
    return 0;
}

static double plot_axis_frac(const axis *a, double v)
{
    if (a->log)
        return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

/* The axis ends sit PLOT_INSET pixels inside the frame, so markers at the ends stay whole. */
#define PLOT_INSET 12

static double plot_px_x(const canvas *cv, const axis *a, double v)
{
    return cv->x0 + PLOT_INSET + plot_axis_frac(a, v) * (cv->x1 - 1 - cv->x0 - 2 * PLOT_INSET);
}

static double plot_px_y(const canvas *cv, const axis *a, double v)
{
    return cv->y1 - 1 - PLOT_INSET - plot_axis_frac(a, v) * (cv->y1 - 1 - cv->y0 - 2 * PLOT_INSET);
}

/* A tick label with as many decimals as the step needs; large values in %g. */
static void plot_format_tick(char *buf, size_t cap, double v, double step)
{
    if (fabs(v) < step * 1e-9)
        v = 0;
    if (step <= 0 || fabs(v) >= 1e7) {
        snprintf(buf, cap, "%g", v);
        return;
    }
    int dec = (int)ceil(-log10(step) - 1e-9);
    snprintf(buf, cap, "%.*f", dec < 0 ? 0 : dec > 6 ? 6 : dec, v);
}

/* ---- raster ----------------------------------------------------------------------------------- */

static void plot_blend(canvas *cv, int x, int y, rgb c, float alpha)
{
    if (x < 0 || y < 0 || x >= PLOT_W || y >= PLOT_H || alpha <= 0)
        return;
    if (alpha > 1)
        alpha = 1;
    unsigned char *p = cv->px + ((size_t)y * PLOT_W + (size_t)x) * 3;
    p[0] = (unsigned char)(p[0] + (c.r - p[0]) * alpha + 0.5f);
    p[1] = (unsigned char)(p[1] + (c.g - p[1]) * alpha + 0.5f);
    p[2] = (unsigned char)(p[2] + (c.b - p[2]) * alpha + 0.5f);
}

static void plot_fill_rect(canvas *cv, int x0, int y0, int x1, int y1, rgb c)
{
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            plot_blend(cv, x, y, c, 1);
}

static void plot_cov_clear(canvas *cv)
{
    memset(cv->cov, 0, sizeof(float) * PLOT_W * PLOT_H);
}

static void plot_cov_put(canvas *cv, int x, int y, float a, int clip)
{
    if (clip ? (x < cv->x0 || x >= cv->x1 || y < cv->y0 || y >= cv->y1)
             : (x < 0 || y < 0 || x >= PLOT_W || y >= PLOT_H))
        return;
    float *p = &cv->cov[(size_t)y * PLOT_W + (size_t)x];
    if (a > *p)
        *p = a > 1 ? 1 : a;
}

static void plot_cov_compose(canvas *cv, rgb c, float alpha)
{
    for (int y = 0; y < PLOT_H; y++)
        for (int x = 0; x < PLOT_W; x++) {
            float a = cv->cov[(size_t)y * PLOT_W + (size_t)x];
            if (a > 0)
                plot_blend(cv, x, y, c, a * alpha);
        }
    plot_cov_clear(cv);
}

/* A stroke of the given width with a one-pixel soft edge. */
static void plot_cov_segment(canvas *cv, double ax, double ay, double bx, double by, double width,
                             int clip)
{
    double r = width / 2;
    int x0 = (int)floor(fmin(ax, bx) - r - 1), x1 = (int)ceil(fmax(ax, bx) + r + 1);
    int y0 = (int)floor(fmin(ay, by) - r - 1), y1 = (int)ceil(fmax(ay, by) + r + 1);
    x0 = x0 < 0 ? 0 : x0;
    y0 = y0 < 0 ? 0 : y0;
    x1 = x1 > PLOT_W ? PLOT_W : x1;
    y1 = y1 > PLOT_H ? PLOT_H : y1;
    double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            double t = len2 > 0 ? ((x - ax) * dx + (y - ay) * dy) / len2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double ex = ax + t * dx - x, ey = ay + t * dy - y;
            double d = sqrt(ex * ex + ey * ey);
            plot_cov_put(cv, x, y, (float)(r + 0.5 - d), clip);
        }
}

/* Marker shapes: 0 circle, 1 square, 2 triangle up, 3 diamond, 4 triangle down, 5 cross. */
static int plot_marker_inside(int shape, double u, double v, double r)
{
    switch (shape) {
    case 0: return u * u + v * v <= r * r;
    case 1: return fabs(u) <= r * 0.85 && fabs(v) <= r * 0.85;
    case 2: return v <= r * 0.8 && v >= -r && fabs(u) <= (v + r) * 0.6;
    case 3: return fabs(u) + fabs(v) <= r * 1.15;
    case 4: return v >= -r * 0.8 && v <= r && fabs(u) <= (r - v) * 0.6;
    default: return (fabs(u) <= r * 0.3 || fabs(v) <= r * 0.3) && fabs(u) <= r && fabs(v) <= r;
    }
}

static void plot_cov_marker(canvas *cv, double cx, double cy, int shape, double r, int clip)
{
    const int ss = 4; /* 4x4 subsamples per pixel for a smooth edge */
    for (int y = (int)floor(cy - r - 1); y <= (int)ceil(cy + r + 1); y++)
        for (int x = (int)floor(cx - r - 1); x <= (int)ceil(cx + r + 1); x++) {
            int hits = 0;
            for (int sy = 0; sy < ss; sy++)
                for (int sx = 0; sx < ss; sx++)
                    hits += plot_marker_inside(shape, x + (sx + 0.5) / ss - 0.5 - cx,
                                               y + (sy + 0.5) / ss - 0.5 - cy, r);
            plot_cov_put(cv, x, y, (float)hits / (ss * ss), clip);
        }
}

/* Text through stb_easy_font: each glyph is a list of axis-aligned quads, drawn scaled; rotated
 * text (reading upwards) maps (u, v) to (x + v, y - u), which keeps quads axis-aligned. */
static void plot_text(canvas *cv, int x, int y, const char *s, int scale, rgb c, int rotated)
{
    static char quads[PLOT_TEXT_MAX * 300];
    char clean[PLOT_TEXT_MAX];
    size_t n = 0;
    for (; s[n] && n + 1 < sizeof clean; n++)
        clean[n] = (s[n] >= 32 && s[n] < 127) ? s[n] : '?';
    clean[n] = '\0';
    int nq = stb_easy_font_print(0, 0, clean, NULL, quads, (int)sizeof quads);
    for (int q = 0; q < nq; q++) {
        float u0 = FLT_MAX, v0 = FLT_MAX, u1 = -FLT_MAX, v1 = -FLT_MAX;
        for (int k = 0; k < 4; k++) {
            float u, v;
            memcpy(&u, quads + q * 64 + k * 16, sizeof u);
            memcpy(&v, quads + q * 64 + k * 16 + 4, sizeof v);
            u0 = fminf(u0, u), u1 = fmaxf(u1, u), v0 = fminf(v0, v), v1 = fmaxf(v1, v);
        }
        if (rotated)
            plot_fill_rect(cv, x + (int)v0 * scale, y - (int)u1 * scale, x + (int)v1 * scale,
                           y - (int)u0 * scale, c);
        else
            plot_fill_rect(cv, x + (int)u0 * scale, y + (int)v0 * scale, x + (int)u1 * scale,
                           y + (int)v1 * scale, c);
    }
}

static int plot_text_width(const char *s, int scale)
{
    char clean[PLOT_TEXT_MAX];
    size_t n = 0;
    for (; s[n] && n + 1 < sizeof clean; n++)
        clean[n] = (s[n] >= 32 && s[n] < 127) ? s[n] : '?';
    clean[n] = '\0';
    return stb_easy_font_width(clean) * scale;
}

/* ---- the chart -------------------------------------------------------------------------------- */

#define GLYPH_H 7 /* cap height of stb_easy_font, unscaled */

static void plot_draw_xticks(canvas *cv, const axis *ax)
{
    char buf[64];
    double prev_right = -1e9;
    int ndec = (int)ceil(log10(ax->hi) - log10(ax->lo) - 1e-9);
    for (int i = 0;; i++) {
        double v;
        if (ax->log) {
            static const double mult[3] = {1, 2, 5};
            int per = ndec <= 2 ? 3 : 1;
            v = pow(10, floor(log10(ax->lo) + 1e-9) + i / per) * mult[i % per];
            if (v > ax->hi * 1.0000001)
                break;
            if (v < ax->lo * 0.9999999)
                continue;
            snprintf(buf, sizeof buf, "%g", v);
        } else {
            v = ceil(ax->lo / ax->step - 1e-9) * ax->step + i * ax->step;
            if (v > ax->hi + ax->step * 1e-9)
                break;
            plot_format_tick(buf, sizeof buf, v, ax->step);
        }
        int px = (int)lround(plot_px_x(cv, ax, v));
        plot_fill_rect(cv, px, cv->y0, px + 1, cv->y1, grid_ink);
        plot_fill_rect(cv, px, cv->y1, px + 1, cv->y1 + 8, ink);
        int w = plot_text_width(buf, 2);
        if (px - w / 2 > prev_right + 8) {
            plot_text(cv, px - w / 2, cv->y1 + 14, buf, 2, ink, 0);
            prev_right = px + w / 2;
        }
    }
}

static void plot_draw_yticks(canvas *cv, const axis *ay)
{
    char buf[64];
    for (int i = 0;; i++) {
        double v = ceil(ay->lo / ay->step - 1e-9) * ay->step + i * ay->step;
        if (v > ay->hi + ay->step * 1e-9)
            break;
        plot_format_tick(buf, sizeof buf, v, ay->step);
        int py = (int)lround(plot_px_y(cv, ay, v));
        plot_fill_rect(cv, cv->x0, py, cv->x1, py + 1, grid_ink);
        plot_fill_rect(cv, cv->x0 - 8, py, cv->x0, py + 1, ink);
        plot_text(cv, cv->x0 - 14 - plot_text_width(buf, 2), py - GLYPH_H, buf, 2, ink, 0);
    }
}

static void plot_draw_frame(canvas *cv, const chart *c, const axis *ax, const axis *ay)
{
    plot_draw_xticks(cv, ax);
    plot_draw_yticks(cv, ay);
    plot_fill_rect(cv, cv->x0 - 1, cv->y0, cv->x0 + 1, cv->y1 + 1, ink);
    plot_fill_rect(cv, cv->x0 - 1, cv->y1, cv->x1, cv->y1 + 2, ink);
    if (c->title) {
        int w = plot_text_width(c->title, 3);
        int x = w <= cv->x1 - cv->x0 ? (cv->x0 + cv->x1 - w) / 2 : (PLOT_W - w) / 2;
        plot_text(cv, x < 10 ? 10 : x, 18, c->title, 3, ink, 0);
    }
    if (c->xlabel)
        plot_text(cv, (cv->x0 + cv->x1 - plot_text_width(c->xlabel, 2)) / 2, cv->y1 + 48,
                  c->xlabel, 2, ink, 0);
    if (c->ylabel)
        plot_text(cv, 14, (cv->y0 + cv->y1 + plot_text_width(c->ylabel, 2)) / 2, c->ylabel, 2, ink,
                  1);
}

static rgb plot_series_colour(int i) { return palette[i % 10]; }
static int plot_series_shape(int i) { return (i + i / 10) % 6; }

/* The band between ylo and yhi, filled column by column over each segment where both ends have
 * one. */
static void plot_draw_band(canvas *cv, const series *s, const axis *ax, const axis *ay, rgb c)
{
    for (int j = 0; j + 1 < s->n; j++) {
        if (isnan(s->lo[j]) || isnan(s->hi[j]) || isnan(s->lo[j + 1]) || isnan(s->hi[j + 1]))
            continue;
        double xa = plot_px_x(cv, ax, s->x[j]), xb = plot_px_x(cv, ax, s->x[j + 1]);
        int k0 = j, k1 = j + 1;
        if (xb < xa) {
            double t = xa;
            xa = xb, xb = t, k0 = j + 1, k1 = j;
        }
        for (int x = (int)ceil(xa); x <= (int)floor(xb); x++) {
            double t = xb > xa ? (x - xa) / (xb - xa) : 0;
            double lo = plot_px_y(cv, ay, s->lo[k0] + t * (s->lo[k1] - s->lo[k0]));
            double hi = plot_px_y(cv, ay, s->hi[k0] + t * (s->hi[k1] - s->hi[k0]));
            for (int y = (int)ceil(fmin(lo, hi)); y <= (int)floor(fmax(lo, hi)); y++)
                plot_cov_put(cv, x, y, 1, 1);
        }
    }
    plot_cov_compose(cv, c, 0.15f);
}

static void plot_draw_series(canvas *cv, const series *s, int i, const axis *ax, const axis *ay)
{
    rgb c = plot_series_colour(i);
    if (s->ncols == 4)
        plot_draw_band(cv, s, ax, ay, c);
    for (int j = 0; j + 1 < s->n; j++)
        plot_cov_segment(cv, plot_px_x(cv, ax, s->x[j]), plot_px_y(cv, ay, s->y[j]),
                         plot_px_x(cv, ax, s->x[j + 1]), plot_px_y(cv, ay, s->y[j + 1]), 2.5, 1);
    plot_cov_compose(cv, c, 1);
    int every = s->n > 40 ? (s->n + 39) / 40 : 1;
    for (int j = 0; j < s->n; j++)
        if (j % every == 0 || j == s->n - 1)
            plot_cov_marker(cv, plot_px_x(cv, ax, s->x[j]), plot_px_y(cv, ay, s->y[j]),
                            plot_series_shape(i), 5.5, 1);
    plot_cov_compose(cv, c, 1);
}

static int plot_legend_width(const chart *c)
{
    int w = 0;
    for (int i = 0; i < c->nseries; i++) {
        int t = plot_text_width(c->s[i].label, 2);
        w = t > w ? t : w;
    }
    return w + 70;
}

/* Copies s into buf, cut with ".." where it would be wider than maxw pixels at the scale. */
static void plot_fit_text(char *buf, size_t cap, const char *s, int scale, int maxw)
{
    snprintf(buf, cap, "%s", s);
    size_t n = strlen(buf);
    while (n > 2 && plot_text_width(buf, scale) > maxw) {
        n--;
        memcpy(buf + n - 2, "..", 3);
    }
}

static void plot_draw_legend(canvas *cv, const chart *c)
{
    char label[PLOT_TEXT_MAX];
    int x = cv->x1 + 24, y = cv->y0 + 6;
    int step = (cv->y1 - cv->y0) / c->nseries;
    step = step > 30 ? 30 : step;
    for (int i = 0; i < c->nseries; i++, y += step) {
        rgb col = plot_series_colour(i);
        if (c->s[i].ncols == 4) {
            for (int yy = y - 8; yy < y + 9; yy++)
                for (int xx = x; xx < x + 40; xx++)
                    plot_cov_put(cv, xx, yy, 1, 0);
            plot_cov_compose(cv, col, 0.15f);
        }
        plot_cov_segment(cv, x, y, x + 40, y, 2.5, 0);
        plot_cov_marker(cv, x + 20, y, plot_series_shape(i), 5.5, 0);
        plot_cov_compose(cv, col, 1);
        plot_fit_text(label, sizeof label, c->s[i].label, 2, PLOT_W - 8 - (x + 52));
        plot_text(cv, x + 52, y - GLYPH_H, label, 2, ink, 0);
    }
}

static int plot_render(const chart *c, char *err)
{
    axis ax, ay;
    if (plot_make_axes(c, &ax, &ay, err) != 0)
        return -1;
    canvas cv = {.px = malloc((size_t)PLOT_W * PLOT_H * 3),
                 .cov = calloc((size_t)PLOT_W * PLOT_H, sizeof(float))};
    if (!cv.px || !cv.cov) {
        free(cv.px);
        free(cv.cov);
        return plot_fail(err, "out of memory");
    }
    memset(cv.px, 255, (size_t)PLOT_W * PLOT_H * 3);
    int legend = plot_legend_width(c);
    if (legend > PLOT_W / 2)
        legend = PLOT_W / 2;
    cv.x0 = 130;
    cv.y0 = c->title ? 70 : 30;
    cv.x1 = PLOT_W - legend - 30;
    cv.y1 = PLOT_H - 90;
    plot_draw_frame(&cv, c, &ax, &ay);
    for (int i = 0; i < c->nseries; i++)
        plot_draw_series(&cv, &c->s[i], i, &ax, &ay);
    plot_draw_legend(&cv, c);
    int ok = stbi_write_png(c->out, PLOT_W, PLOT_H, 3, cv.px, PLOT_W * 3);
    free(cv.px);
    free(cv.cov);
    if (!ok)
        return plot_fail(err, "--out: could not write '%s'", c->out);
    return 0;
}

static void plot_free_chart(chart *c)
{
    for (int i = 0; i < c->nseries; i++) {
        free(c->s[i].x);
        free(c->s[i].y);
        free(c->s[i].lo);
        free(c->s[i].hi);
    }
}

int main(int argc, char **argv)
{
    static chart c;
    char err[PLOT_ERRLEN] = "";
    int rc = plot_parse_args(argc, argv, &c, err);
    if (rc == 1)
        return 0;
    for (int i = 0; rc == 0 && i < c.nseries; i++)
        rc = plot_load_series(&c.s[i], err);
    if (rc == 0)
        rc = plot_render(&c, err);
    plot_free_chart(&c);
    if (rc != 0) {
        fprintf(stderr, "gt_plot: %s\n", err);
        return 1;
    }
    return 0;
}
