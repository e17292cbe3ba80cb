/* ps_save.c - an in-memory copy of the parameter store for rollbacks (ps_save.h). It goes through
 * the stripes the way ps.c does: a stripe's lock, or relaxed atomics in the lock-free store. */
#include "gputrain/ps_save.h"

#include <stdlib.h>
#include <string.h>

int gt_ps_saved_alloc(gt_ps_saved *s, const gt_ps *ps, gt_err *e)
{
    memset(s, 0, sizeof *s);
    s->n = ps->n;
    s->nstate = ps->nstate;
    s->params = malloc(ps->n * sizeof(float));
    int ok = s->params != NULL;
    for (int i = 0; i < ps->nstate && ok; i++) {
        s->state[i] = malloc(ps->n * sizeof(float));
        ok = s->state[i] != NULL;
    }
    if (ok && ps->ema)
        ok = (s->ema = malloc(ps->n * sizeof(float))) != NULL;
    if (ok && ps->buffers)
        ok = (s->buffers = malloc(ps->model->nbuffers * sizeof(float))) != NULL;
    if (ok)
        return 0;
    gt_ps_saved_free(s);
    return gt_fail(e, "out of memory for a copy of %zu parameters", ps->n);
}

void gt_ps_saved_free(gt_ps_saved *s)
{
    free(s->params);
    free(s->state[0]);
    free(s->state[1]);
    free(s->buffers);
    free(s->ema);
    memset(s, 0, sizeof *s);
}

static void relaxed_load(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        __atomic_load(&src[i], &dst[i], __ATOMIC_RELAXED);
}

static void relaxed_store(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        __atomic_store(&dst[i], (float *)&src[i], __ATOMIC_RELAXED);
}

/* Copies one stripe between the store's arrays and s's, in the direction `restore` says. */
static void ps_save_stripe(gt_ps *ps, gt_stripe *st, gt_ps_saved *s, int restore)
{
    size_t lo = st->lo, len = st->hi - st->lo;
    float *store[4] = {ps->params, ps->state[0], ps->state[1], ps->ema};
    float *copy[4] = {s->params, s->state[0], s->state[1], s->ema};
    if (ps->nstripes > 0)
        pthread_mutex_lock(&st->lock);
    if (restore)
        atomic_fetch_add_explicit(&st->version, 1, memory_order_acq_rel);
    for (int a = 0; a < 4; a++) {
        if (a > s->nstate && a < 3)
            continue; /* optimizer state the store does not keep */
        if (!store[a] || !copy[a])
            continue; /* no moving average, in the store or in the copy */
        /* Under the stripe's lock nothing else writes it (ps.c's writers take it too), so a
         * plain copy, which vectorises; lock-free pushes may write meanwhile: relaxed atomics. */
        if (ps->nstripes > 0)
            memcpy(restore ? store[a] + lo : copy[a] + lo, restore ? copy[a] + lo : store[a] + lo,
                   len * sizeof(float));
        else if (restore)
            relaxed_store(store[a] + lo, copy[a] + lo, len);
        else
            relaxed_load(copy[a] + lo, store[a] + lo, len);
    }
    if (ps->nstripes > 0)
        pthread_mutex_unlock(&st->lock);
}

void gt_ps_save(gt_ps *ps, gt_ps_saved *s)
{
    for (int i = 0; i < ps->nranges; i++)
        ps_save_stripe(ps, &ps->stripes[i], s, 0);
    gt_ps_pull_buffers(ps, s->buffers);
}

void gt_ps_restore(gt_ps *ps, const gt_ps_saved *s)
{
    for (int i = 0; i < ps->nranges; i++)
        ps_save_stripe(ps, &ps->stripes[i], (gt_ps_saved *)s, 1);
    gt_ps_store_buffers(ps, s->buffers);
}
