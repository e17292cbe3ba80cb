/* cuda_stub.c - the CUDA entry points of device.h and pinned.h for builds without a CUDA
 * toolkit: no GPUs, and host memory that is simply aligned. */
#include "gputrain/device.h"
#include "gputrain/pinned.h"

int gt_cuda_device_count(void) { return 0; }

void gt_cuda_set_deterministic(int on) { (void)on; }

int gt_cuda_device_open(gt_device **out, const gt_model *m, int max_batch, int ordinal,
                        gt_precision precision, gt_err *e)
{
    *out = NULL;
    return gt_fail(e, "--gpus: GPU %d requested, but this gputrain was built without CUDA", ordinal);
}

void *gt_host_alloc(size_t bytes) { return gt_alloc(bytes); }
void gt_host_free(void *p) { gt_free(p); }
void gt_host_register(int device, void *p, size_t bytes) {}
void gt_host_unregister(void *p) {}

int gt_cuda_allreduce_init(gt_device **devs, int n, const gt_optim_cfg *c, gt_exchange x,
                           gt_err *e)
{
    return gt_fail(e, "--mode allreduce: this gputrain was built without CUDA and NCCL");
}

int gt_cuda_allreduce_averages(gt_device *d) { return 0; }

void gt_cuda_allreduce_abort(void) {}
