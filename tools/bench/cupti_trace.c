/* cupti_trace.c - a timeline of any CUDA program's GPU work without Nsight Systems: preloaded
 * (LD_PRELOAD), it records every kernel, copy and memset the program runs (CUPTI's activity API,
 * kernels inside CUDA graphs included) with their GPU start and end times into a CSV file that
 * tools/trace_steps.py turns into a per-step summary (kernels busy, the GPU's idle time, each copy
 * direction's time and bytes).
 *
 *   GT_TRACE_OUT=trace.csv LD_PRELOAD=build/libgt_cupti_trace.so build/gputrain ...
 *   tools/trace_steps.py trace.csv
 *
 * Rows: K,start_ns,end_ns,stream,kernel name (40 characters at most); M,start_ns,end_ns,stream,
 * bytes,copy kind (1 host to device, 2 device to host, 8 device to device, CUPTI's numbers);
 * S,start_ns,end_ns,stream (a memset). With GT_TRACE_API_US=T it also records the host's CUDA
 * runtime and driver calls that took T microseconds or more, and every call about graphs and
 * stream capture whatever it took: A,start_ns,end_ns,thread,call name (what a step's host side
 * waits on; tools/trace_steps.py --api lists them around the first steps). A thread hands CUPTI's finished buffers over every 200 ms,
 * so a run's last fraction of a second may be missing: read the middle of a run. Without
 * GT_TRACE_OUT it does nothing. Tracing costs the host some time: compare rates from runs
 * without it. */
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRACE_BUFFER_BYTES (8u << 20)

static FILE *out;
static uint64_t api_min_ns; /* GT_TRACE_API_US in ns; 0: no API rows */

/* An API call's row: a long one, or one about graphs or capture (they mark the steps). */
static void api_row(const CUpti_ActivityAPI *a, CUpti_CallbackDomain domain)
{
    const char *name = NULL;
    if (cuptiGetCallbackName(domain, a->cbid, &name) != CUPTI_SUCCESS || !name)
        name = "?";
    if (a->end - a->start < api_min_ns && !strstr(name, "Graph") && !strstr(name, "Capture"))
        return;
    fprintf(out, "A,%llu,%llu,%u,%.60s\n", (unsigned long long)a->start,
            (unsigned long long)a->end, a->threadId, name);
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *size = TRACE_BUFFER_BYTES;
    *buf = aligned_alloc(8, TRACE_BUFFER_BYTES);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                      size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            fprintf(out, "K,%llu,%llu,%u,%.40s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->streamId, k->name ? k->name : "");
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            fprintf(out, "M,%llu,%llu,%u,%llu,%u\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, m->streamId, (unsigned long long)m->bytes,
                    (unsigned)m->copyKind);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            fprintf(out, "S,%llu,%llu,%u\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, m->streamId);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
            api_row((const CUpti_ActivityAPI *)rec, CUPTI_CB_DOMAIN_RUNTIME_API);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
            api_row((const CUpti_ActivityAPI *)rec, CUPTI_CB_DOMAIN_DRIVER_API);
        }
    }
    free(buf);
}

static void *flusher(void *arg)
{
    (void)arg;
    for (;;) {
        usleep(200000);
        cuptiActivityFlushAll(0);
        fflush(out);
    }
    return NULL;
}

__attribute__((constructor)) static void trace_start(void)
{
    const char *path = getenv("GT_TRACE_OUT");
    if (!path)
        return;
    out = fopen(path, "w");
    if (!out) {
        fprintf(stderr, "cupti_trace: %s: cannot write\n", path);
        return;
    }
    pthread_t t;
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
        pthread_create(&t, NULL, flusher, NULL) != 0) {
        fprintf(stderr, "cupti_trace: CUPTI's activity records could not be enabled\n");
        return;
    }
    pthread_detach(t);
    const char *api = getenv("GT_TRACE_API_US");
    if (api && *api) {
        char *end = NULL;
        double us = strtod(api, &end);
        if (*end || !(us >= 0)) {
            fprintf(stderr, "cupti_trace: GT_TRACE_API_US=%s: not a number of microseconds\n",
                    api);
            return;
        }
        api_min_ns = (uint64_t)(us * 1e3);
    }
    if (api && *api && (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS ||
                        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS))
        fprintf(stderr, "cupti_trace: CUPTI's API records could not be enabled\n");
}

__attribute__((destructor)) static void trace_end(void)
{
    if (!out)
        return;
    cuptiActivityFlushAll(1);
    fflush(out);
}
