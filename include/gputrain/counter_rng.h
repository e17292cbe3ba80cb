/* counter_rng.h - the counter-based random numbers that dropout (on the CPU and the GPU) and the
 * training data's augmentation (data_input.c, and the GPU's input kernel) use.
 *
 * A mask bit is a pure function of (key, counter), so the CPU reference and a CUDA kernel draw the
 * same mask for the same sample, and a resumed run draws what the uninterrupted run would have. */
#ifndef GT_COUNTER_RNG_H
#define GT_COUNTER_RNG_H

#include <stdint.h>

#if defined(__CUDACC__)
#define GT_HD __host__ __device__ __forceinline__
#else
#define GT_HD static inline
#endif

/* Mixes a 64-bit key and a 32-bit counter into 32 well-distributed bits (splitmix64 finaliser). */
GT_HD uint32_t gt_counter_hash(uint64_t key, uint32_t counter)
{
    uint64_t z = key + 0x9E3779B97F4A7C15ull * ((uint64_t)counter + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}

/* Uniform in [0, 1) with 24 bits, exactly representable as float. */
GT_HD float gt_counter_uniform(uint64_t key, uint32_t counter)
{
    return (float)(gt_counter_hash(key, counter) >> 8) * (1.0f / 16777216.0f);
}

/* The dropout key of one sample: the same for a sample in a given epoch whatever worker or batch
 * position it lands in, so sync training over W workers equals one worker at W times the batch. */
GT_HD uint64_t gt_dropout_key(uint64_t seed, uint32_t epoch, uint32_t sample, uint32_t layer)
{
    uint64_t k = seed ^ ((uint64_t)epoch << 40) ^ ((uint64_t)layer << 32) ^ sample;
    return (uint64_t)gt_counter_hash(k, 0x5eed) << 32 | gt_counter_hash(k, 0xd00d);
}

/* The augmentation key of one sample (data_input.c): its crop offsets and flip in an epoch depend
 * only on the run's seed, the epoch and the sample's id, never on worker, batch or device. */
GT_HD uint64_t gt_augment_key(uint64_t seed, uint32_t epoch, uint32_t sample)
{
    uint64_t k = seed ^ ((uint64_t)epoch << 32) ^ sample ^ 0xA5A5000000000000ull;
    return (uint64_t)gt_counter_hash(k, 0xa116) << 32 | gt_counter_hash(k, 0xf11b);
}

/* A sample's crop offsets (0..2P each, P = pad; 0 without a crop) and flip (0 without flipping)
 * from its augmentation key: gt_augment_draw on the host (data_input.c) and the GPU's input
 * kernel, which crops and flips a training batch on the device, draw them here alike. */
GT_HD void gt_augment_offsets(uint64_t key, int pad, int flip_on, int *dy, int *dx, int *flip)
{
    uint32_t span = pad > 0 ? 2u * (uint32_t)pad + 1u : 1u;
    *dy = (int)(gt_counter_hash(key, 0) % span);
    *dx = (int)(gt_counter_hash(key, 1) % span);
    *flip = flip_on ? (int)(gt_counter_hash(key, 2) & 1u) : 0;
}

#endif
