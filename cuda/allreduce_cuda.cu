/* allreduce_cuda.cu - the entry points of the allreduce mode (NCCL all-reduce of the gradient
 * and an optimizer update on each GPU). Not written yet: no CUDA device offers reduce_update,
 * so train.c refuses --mode allreduce before calling these; they exist so the CUDA build links
 * (src/cuda_stub.c is left out of it). */
#include "gt_cuda.h"

int gt_cuda_allreduce_init(gt_device **devs, int n, const gt_optim_cfg *c, gt_err *e)
{
    return gt_fail(e, "--mode allreduce: the CUDA backend has no NCCL all-reduce yet");
}

void gt_cuda_allreduce_abort(void) {}
