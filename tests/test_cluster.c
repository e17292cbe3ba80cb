/* test_cluster.c - the MPI wrapper (cluster.h) and the store's rebase that cross-host averaging
 * uses. Run plainly it checks the single process: rank 0 of 1, every collective leaves its data
 * as it is, and a build without MPI refuses to run under a launcher that asked for several
 * processes. Run under `mpirun -np H` (tests/cli_mpi.sh does) it checks the collectives across
 * the processes: sums, maxima, ranges and the broadcast. */
#include "gputrain/cluster.h"
#include "gputrain/ps.h"
#include "test_util.h"

#include <stdint.h>

static void test_single_process(void)
{
    float f[3] = {1.5f, -2.0f, 1e30f};
    double d[2] = {0.25, -7.0};
    int64_t m[2] = {-3, INT64_MAX};
    char bytes[5] = "abcd";
    gt_err e = {{0}};
    CHECK(gt_cluster_rank() == 0 && gt_cluster_size() == 1);
    CHECK(gt_cluster_host()[0] != 0);
    CHECK(gt_cluster_sum_floats(f, 3, "floats", &e) == 0);
    CHECK(f[0] == 1.5f && f[1] == -2.0f && f[2] == 1e30f);
    CHECK(gt_cluster_sum_doubles(d, 2, "doubles", &e) == 0 && d[0] == 0.25 && d[1] == -7.0);
    CHECK(gt_cluster_max_i64(m, 2, "ints", &e) == 0 && m[0] == -3 && m[1] == INT64_MAX);
    CHECK(gt_cluster_bcast(bytes, sizeof bytes, "bytes", &e) == 0 && strcmp(bytes, "abcd") == 0);
    CHECK(gt_cluster_sum_floats(f, 0, "nothing", &e) == 0);
    uint64_t values[] = {0, 1, 1ull << 63, UINT64_MAX, 0x123456789abcdefull};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        uint64_t lo = 7, hi = 7;
        CHECK(gt_cluster_range_u64(values[i], &lo, &hi, "value", &e) == 0);
        CHECK_MSG(lo == values[i] && hi == values[i], "%llu: range %llu..%llu",
                  (unsigned long long)values[i], (unsigned long long)lo, (unsigned long long)hi);
    }
}

/* A build without MPI started by a launcher for two processes would train twice, unrelated. */
static void test_refuses_launcher_without_mpi(void)
{
#ifndef GT_HAVE_MPI
    gt_err e = {{0}};
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    CHECK(gt_cluster_init(&e) == -1);
    CHECK_MSG(strstr(e.msg, "built without MPI") && strstr(e.msg, "2 processes") && !strchr(e.msg, '\n'),
              "%s", e.msg);
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("PMI_SIZE", "1", 1);
    CHECK(gt_cluster_init(&e) == 0 && gt_cluster_size() == 1);
    unsetenv("PMI_SIZE");
    /* srun: a job step of 2 tasks is refused; the batch script of a 2-task job (no step) runs. */
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_PROCID", "0", 1);
    CHECK(gt_cluster_init(&e) == 0 && gt_cluster_size() == 1);
    setenv("SLURM_STEP_ID", "0", 1);
    CHECK(gt_cluster_init(&e) == -1);
    CHECK_MSG(strstr(e.msg, "2 processes"), "%s", e.msg);
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_STEP_ID");
#endif
}

/* Every process contributes values made from its rank; every process must get the same
 * results, exact. */
static void test_collectives(int rank, int size)
{
    gt_err e = {{0}};
    enum { N = 100003 };
    float *f = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++)
        f[i] = (float)(rank + 1) * (float)(i % 7);
    CHECK(gt_cluster_sum_floats(f, N, "floats", &e) == 0);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += f[i] != (float)(size * (size + 1) / 2) * (float)(i % 7);
    CHECK_MSG(bad == 0, "%d sums wrong on rank %d", bad, rank);
    free(f);

    double d[2] = {rank + 0.5, -1.0};
    CHECK(gt_cluster_sum_doubles(d, 2, "doubles", &e) == 0);
    CHECK_CLOSE(d[0], size * size / 2.0, 1e-12);
    CHECK_CLOSE(d[1], -size, 1e-12);

    int64_t m[2] = {rank, -rank};
    CHECK(gt_cluster_max_i64(m, 2, "ints", &e) == 0 && m[0] == size - 1 && m[1] == 0);

    uint64_t lo, hi;
    CHECK(gt_cluster_range_u64(UINT64_MAX - (uint64_t)rank, &lo, &hi, "value", &e) == 0);
    CHECK(hi == UINT64_MAX && lo == UINT64_MAX - (uint64_t)(size - 1));
    CHECK(gt_cluster_range_u64(42, &lo, &hi, "same", &e) == 0 && lo == 42 && hi == 42);

    char id[128];
    for (int i = 0; i < (int)sizeof id; i++)
        id[i] = (char)(rank == 0 ? i : 0);
    CHECK(gt_cluster_bcast(id, sizeof id, "id", &e) == 0);
    for (int i = 0; i < (int)sizeof id; i++)
        bad += id[i] != (char)i;
    CHECK_MSG(bad == 0, "broadcast differs on rank %d", rank);
}

/* The store moves from one base to another and keeps what was pushed since the first. */
static void test_rebase(int nstripes)
{
    gt_ps ps;
    gt_optim_cfg oc;
    gt_err e = {{0}};
    enum { N = 1000 };
    gt_optim_defaults(&oc);
    CHECK(gt_ps_init(&ps, N, nstripes, &oc, &e) == 0);
    float from[N], to[N], now[N];
    for (int i = 0; i < N; i++) {
        from[i] = 0.001f * (float)i;
        to[i] = 1.0f / (float)(i + 3);
        ps.params[i] = from[i];
    }
    gt_ps_rebase_stripes(&ps, 0, ps.nranges, from, to);
    gt_ps_pull(&ps, now, NULL);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += now[i] != to[i];
    CHECK_MSG(bad == 0, "%d parameters are not exactly the new base (stripes %d)", bad, nstripes);
    for (int i = 0; i < N; i++) {
        from[i] = now[i];
        ps.params[i] = now[i] + 0.5f; /* a push after the snapshot */
        to[i] = 2.0f;
    }
    gt_ps_rebase_stripes(&ps, 0, ps.nranges, from, to);
    gt_ps_pull(&ps, now, NULL);
    for (int i = 0; i < N; i++)
        CHECK_CLOSE(now[i], 2.5, 1e-6);
    for (int s = 0; s < ps.nranges; s++)
        CHECK(atomic_load(&ps.stripes[s].version) == 2);
    gt_ps_free(&ps);
}

int main(void)
{
    test_refuses_launcher_without_mpi();
    gt_err e = {{0}};
    CHECK_MSG(gt_cluster_init(&e) == 0, "%s", e.msg);
    CHECK(gt_cluster_init(&e) == 0); /* again: a no-op */
    int rank = gt_cluster_rank(), size = gt_cluster_size();
    CHECK(rank >= 0 && rank < size);
    if (size == 1)
        test_single_process();
    else
        test_collectives(rank, size);
    test_rebase(2);
    test_rebase(0);
    gt_cluster_finalize();
    if (size > 1 && gt_test_failures)
        fprintf(stderr, "rank %d of %d\n", rank, size);
    TEST_DONE();
}
