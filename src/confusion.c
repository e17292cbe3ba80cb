/* confusion.c - eval's per-class accuracy table and confusion matrix (confusion.h), from the
 * evaluator's per-sample predictions. */
#include "gputrain/confusion.h"
#include "gputrain/atomic_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int gt_confusion_build(gt_confusion *cm, const gt_dataset *ds, const int32_t *pred, int k,
                       gt_err *e)
{
    memset(cm, 0, sizeof *cm);
    cm->count = calloc((size_t)k * (size_t)k, sizeof *cm->count);
    if (!cm->count)
        return gt_fail(e, "out of memory for a %d x %d confusion matrix", k, k);
    cm->k = k;
    for (uint32_t i = 0; i < ds->n; i++) {
        int t = ds->labels[i], p = pred[i];
        if (t >= k || p < 0 || p >= k) {
            gt_confusion_free(cm);
            return gt_fail(e, "test sample %u: label %d, predicted %d: outside the model's %d "
                              "classes", i, t, p, k);
        }
        cm->count[(size_t)t * (size_t)k + (size_t)p]++;
    }
    cm->n = ds->n;
    for (int t = 0; t < k; t++)
        cm->correct += cm->count[(size_t)t * (size_t)k + (size_t)t];
    return 0;
}

void gt_confusion_free(gt_confusion *cm)
{
    free(cm->count);
    memset(cm, 0, sizeof *cm);
}

void gt_confusion_print(FILE *out, const gt_confusion *cm, char (*names)[32])
{
    int k = cm->k;
    char shown[4 * 32];
    fprintf(out, "%-24s %8s %8s %9s %10s  %s\n", "class", "samples", "correct", "accuracy",
            "precision", "most often taken for");
    for (int t = 0; t < k; t++) {
        uint64_t row = 0, col = 0, hit = cm->count[(size_t)t * (size_t)k + (size_t)t];
        int worst = -1;
        for (int p = 0; p < k; p++) {
            uint64_t c = cm->count[(size_t)t * (size_t)k + (size_t)p];
            row += c;
            col += cm->count[(size_t)p * (size_t)k + (size_t)t];
            if (p != t && c > 0 && (worst < 0 || c > cm->count[(size_t)t * (size_t)k + (size_t)worst]))
                worst = p;
        }
        fprintf(out, "%-24s %8llu %8llu", gt_escape(shown, sizeof shown, names[t]),
                (unsigned long long)row, (unsigned long long)hit);
        if (row)
            fprintf(out, " %9.4f", (double)hit / (double)row);
        else
            fprintf(out, " %9s", "-");
        if (col)
            fprintf(out, " %10.4f", (double)hit / (double)col);
        else
            fprintf(out, " %10s", "-");
        if (worst >= 0)
            fprintf(out, "  %s (%llu)\n", gt_escape(shown, sizeof shown, names[worst]),
                    (unsigned long long)cm->count[(size_t)t * (size_t)k + (size_t)worst]);
        else
            fprintf(out, "  -\n");
    }
    fprintf(out, "%-24s %8llu %8llu %9.4f\n", "all", (unsigned long long)cm->n,
            (unsigned long long)cm->correct, cm->n ? (double)cm->correct / (double)cm->n : 0.0);
}

/* A class name as a CSV field: quoted where it holds a comma, quote or line break. */
static void put_csv(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* A class name as a JSON string (UTF-8 passes through; control bytes as \u00XX). */
static void put_json(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

int gt_confusion_write(const char *path, const gt_confusion *cm, char (*names)[32], gt_err *e)
{
    gt_atomic_text t = {NULL, 0};
    FILE *f = open_memstream(&t.buf, &t.len);
    if (!f)
        return gt_fail(e, "--confusion: out of memory");
    int k = cm->k, json = ends_with(path, ".json");
    if (json) {
        fputs("{\"classes\":[", f);
        for (int c = 0; c < k; c++) {
            if (c)
                fputc(',', f);
            put_json(f, names[c]);
        }
        fputs("],\"matrix\":[", f);
    } else {
        fputs("true\\predicted", f);
        for (int c = 0; c < k; c++) {
            fputc(',', f);
            put_csv(f, names[c]);
        }
        fputc('\n', f);
    }
    for (int r = 0; r < k; r++) {
        if (json)
            fputs(r ? ",[" : "[", f);
        else
            put_csv(f, names[r]);
        for (int c = 0; c < k; c++)
            fprintf(f, json && c == 0 ? "%llu" : ",%llu",
                    (unsigned long long)cm->count[(size_t)r * (size_t)k + (size_t)c]);
        fputs(json ? "]" : "\n", f);
    }
    if (json)
        fprintf(f, "],\"samples\":%llu,\"correct\":%llu}\n", (unsigned long long)cm->n,
                (unsigned long long)cm->correct);
    if (fclose(f) != 0) {
        free(t.buf);
        return gt_fail(e, "--confusion: out of memory");
    }
    int rc = gt_atomic_write(path, "--confusion", gt_atomic_fill_text, &t, 0, e);
    free(t.buf);
    return rc;
}
