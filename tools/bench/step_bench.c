/* step_bench.c - what one serial hogwild step of one CUDA worker costs, phase by phase, with the
 * real parameter store: pull (gt_ps_pull), load_params, train_step, the finite check src/train.c
 * runs on the gradient, and push (gt_ps_push with the CPU optimizer), in hogwild_epoch's order
 * without overlap (the per-phase evidence in docs/perf-notes.md).
 * Usage: step_bench DATA MODEL BATCH STEPS PATH [PRECISION [DETERMINISTIC]] (PATH: fused-graph
 * fused-eager layers-graph layers-eager; PRECISION: fp32, the default, tf32 or bf16;
 * DETERMINISTIC: on or off, gputrain's --deterministic, by default its auto; DATA: a folder or
 * synthetic:CxHxW:K:N). Prints one line: mean microseconds per phase and the median whole step.
 * layers-eager runs each kernel on its own, for a profiler that times kernels (ncu). The timed
 * steps run between cudaProfilerStart and cudaProfilerStop, so `ncu --profile-from-start off`
 * profiles them and not the start-up (the convolution engine search launches thousands of
 * kernels there). */
#include "gputrain/data.h"
#include "gputrain/device.h"
#include "gputrain/model.h"
#include "gputrain/optim.h"
#include "gputrain/ps.h"
#include "gt_cuda.h"

#include <cuda_profiler_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 8) {
        fprintf(stderr,
                "usage: step_bench DATA MODEL BATCH STEPS PATH [fp32|tf32|bf16 [on|off]]\n");
        return 2;
    }
    const char *prec_name = argc >= 7 ? argv[6] : "fp32";
    if (argc == 8 && strcmp(argv[7], "on") != 0 && strcmp(argv[7], "off") != 0) {
        fprintf(stderr, "step_bench: deterministic '%s' is not on or off\n", argv[7]);
        return 2;
    }
    gt_cuda_set_deterministic(argc == 8 ? strcmp(argv[7], "on") == 0 : -1);
    gt_precision prec = strcmp(prec_name, "bf16") == 0   ? GT_PRECISION_BF16
                        : strcmp(prec_name, "tf32") == 0 ? GT_PRECISION_TF32
                                                         : GT_PRECISION_FP32;
    if (prec == GT_PRECISION_FP32 && strcmp(prec_name, "fp32") != 0) {
        fprintf(stderr, "step_bench: precision '%s' is not fp32, tf32 or bf16\n", prec_name);
        return 2;
    }
    int batch = atoi(argv[3]), steps = atoi(argv[4]);
    if (batch < 1 || steps < 1) {
        fprintf(stderr, "step_bench: bad batch '%s' or steps '%s'\n", argv[3], argv[4]);
        return 2;
    }
    int fused = strncmp(argv[5], "fused", 5) == 0, graphs = strstr(argv[5], "graph") != NULL;
    gt_data *data = calloc(1, sizeof *data);
    gt_err e = {""};
    gt_model m;
    gt_optim_cfg oc;
    gt_ps ps;
    gt_device *d = NULL;
    if (gt_data_load(argv[1], 0, data, &e) ||
        gt_model_build(argv[2], data->train.c, data->train.h, data->train.w, data->train.nclasses,
                       &m, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    gt_host_register(0, data->train.images,
                        (size_t)data->train.n * data->train.c * data->train.h * data->train.w);
    gt_optim_defaults(&oc);
    if (gt_ps_init(&ps, m.nparams, -1, &oc, &e) ||
        gt_cuda_device_open(&d, &m, batch, 0, prec, &e) ||
        gt_cuda_device_set_path(d, fused, graphs, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    gt_model_init_params(&m, ps.params, 1);
    uint32_t n = data->train.n, *perm = malloc(n * sizeof *perm);
    gt_permutation(perm, n, 1, 0);
    uint64_t ver[512];
    double ph[5] = {0}, *step = malloc((size_t)steps * sizeof *step), loss = 0;
    int warm = steps >= 100 ? 50 : 0;
    for (int k = -warm; k < steps; k++) {
        if (k == 0)
            cudaProfilerStart();
        uint32_t nb = n / (uint32_t)batch, at = (uint32_t)((k + warm) % (int)nb) * (uint32_t)batch;
        gt_batch b = {&data->train, perm + at, batch, 0, 1, NULL};
        gt_step_out o = {0};
        double t[6];
        t[0] = gt_now();
        gt_ps_pull(&ps, d->params, ver);
        t[1] = gt_now();
        int rc = d->ops->load_params(d, &e);
        t[2] = gt_now();
        rc = rc || d->ops->train_step(d, &b, &o, &e);
        t[3] = gt_now();
        int finite = o.grad_status == GT_GRAD_FINITE ||
                     (o.grad_status == GT_GRAD_UNCHECKED && gt_all_finite(d->grad, m.nparams));
        t[4] = gt_now();
        gt_ps_push(&ps, 0, 1, d->grad, 1.0f, ver, 0.0);
        t[5] = gt_now();
        if (rc || !finite) {
            fprintf(stderr, "step %d: %s\n", k, rc ? e.msg : "non-finite gradient");
            return 1;
        }
        if (k < 0)
            continue;
        for (int i = 0; i < 5; i++)
            ph[i] += t[i + 1] - t[i];
        step[k] = t[5] - t[0];
        loss = o.loss_sum / batch;
    }
    cudaProfilerStop();
    qsort(step, (size_t)steps, sizeof *step, cmp_double);
    double med = step[steps / 2];
    gt_cuda_path p;
    gt_cuda_device_get_path(d, &p);
    printf("%-13s %s %-7s b%-4d pull %6.1f load %5.1f step %6.1f finite %5.1f push %6.1f | median "
           "%6.1f us = %8.0f samples/s (graphs %d, %s) loss %.3f\n",
           argv[5], prec_name, argv[2], batch, 1e6 * ph[0] / steps, 1e6 * ph[1] / steps, 1e6 * ph[2] / steps,
           1e6 * ph[3] / steps, 1e6 * ph[4] / steps, 1e6 * med, batch / med, p.ngraphs,
           p.graph_error[0] ? p.graph_error : "ok", loss);
    if (!fused)
        gt_cuda_device_print_algos(d, stderr);
    gt_device_close(d);
    gt_ps_free(&ps);
    return 0;
}
