/* bf16.h - bfloat16 on the host: the top 16 bits of an IEEE float, as the GPUs' __nv_bfloat16
 * holds it. A bf16 run's gradient may travel to the parameter store in bf16 (--store-grad); the
 * store, the optimizer and its state stay fp32. */
#ifndef GPUTRAIN_BF16_H
#define GPUTRAIN_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* f rounded to the nearest bf16, ties to even (CUDA's __float2bfloat16_rn); a NaN stays a NaN. */
static inline uint16_t gt_bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float gt_bf16_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n values each way; the loops vectorise. */
static inline void gt_bf16_round_n(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = gt_bf16_round(src[i]);
}

static inline void gt_bf16_widen_n(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = gt_bf16_float(src[i]);
}

#endif
