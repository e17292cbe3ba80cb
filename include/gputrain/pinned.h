/* pinned.h - host memory a GPU can copy from and to at full speed (page-locked), for the buffers
 * that cross between host and device: the parameter store, a device's parameter and gradient
 * copies, the dataset. Where CUDA exists it is cudaHostAlloc'd (cuda/context.cu); without CUDA it
 * is plain aligned memory (src/cuda_stub.c), so callers never need an #if. */
#ifndef GT_PINNED_H
#define GT_PINNED_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pinned host memory where CUDA exists (cudaHostAlloc portable), gt_alloc otherwise; NULL when
 * out of memory. Freed with gt_host_free. */
void *gt_host_alloc(size_t bytes);
void gt_host_free(void *p);
/* Pins an existing buffer (the dataset) for DMA where CUDA exists, in GPU `device`'s context
 * (portable: every GPU's copies use it); no-op otherwise, and where pinning fails. */
void gt_host_register(int device, void *p, size_t bytes);
void gt_host_unregister(void *p);

#ifdef __cplusplus
}
#endif
#endif
