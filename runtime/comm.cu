// comm.cu: the CUDA transport of comm.h: NCCL, one GPU per process.
//
// Joining goes through files in the rendezvous folder, which every rank must see (one machine,
// or a file system shared by the machines):
//   rank 0 removes old nccl_* files, gets an ncclUniqueId and writes it with its host name and
//   pid to nccl_id, atomically (a temporary name, then rename);
//   each other rank waits for nccl_id (skipping one whose creator on this host is gone: a file
//   left by a crashed run), reads the id and writes nccl_joined.<rank>;
//   rank 0 waits until every rank has joined, or names the ranks that did not in time;
//   then all call ncclCommInitRank, and rank 0 removes the files.
// The collectives run on cuda_stream, in order with the kernels: nothing overlaps with the
// backward pass (the gradients are reduced once, after it).
#include "comm.h"
#include "cuda_common.cuh"

#include <errno.h>
#include <nccl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "../utils.h"

static struct {
    int rank, world;
    ncclComm_t nccl;       // NULL when no transport is set up (world 1)
    double *scratch;       // (1) device value for comm_allreduce_sum_host and comm_barrier
} comm = {0, 1, NULL, NULL};

static void nccl_fail(ncclResult_t result, const char *what, const char *file, int line) {
    die("NCCL error at %s:%d (rank %d of %d): %s: %s. %s", file, line, comm.rank, comm.world,
        what, ncclGetErrorString(result), ncclGetLastError(comm.nccl));
}
#define NCCL_CHECK(call)                                                          \
    do {                                                                          \
        ncclResult_t r_ = (call);                                                 \
        if (r_ != ncclSuccess) nccl_fail(r_, #call, __FILE__, __LINE__);          \
    } while (0)

const char *comm_transport(void) { return "nccl"; }
int comm_rank(void) { return comm.rank; }
int comm_world(void) { return comm.world; }

// ----------------------------------------------------------------------------------------
// joining

typedef struct {
    ncclUniqueId id;
    char host[256];
    int pid;
} IdFile;

static void join_path(char *buf, size_t n, const char *dir, int rank) {
    snprintf(buf, n, "%s/nccl_joined.%d", dir, rank);
}

static void write_file(const char *path, const void *data, size_t bytes) {
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, data, bytes);
    atomic_commit(&af);
}

// 1 when path holds a complete IdFile whose creator still runs (or runs on another host)
static int read_id_file(const char *path, IdFile *out, const char *my_host) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(out, sizeof(*out), 1, f);
    fclose(f);
    if (got != 1) return 0;
    out->host[sizeof(out->host) - 1] = '\0';
    int alive = out->pid > 0 && (kill(out->pid, 0) == 0 || errno == EPERM);
    return strcmp(out->host, my_host) != 0 || alive;
}

static ncclUniqueId rendezvous(const CommConfig *c) {
    char id_path[4200], path[4200];
    snprintf(id_path, sizeof(id_path), "%s/nccl_id", c->dir);
    IdFile file;
    memset(&file, 0, sizeof(file));
    if (gethostname(file.host, sizeof(file.host) - 1) != 0) strcpy(file.host, "unknown");
    double deadline = wall_seconds() + c->timeout_s;
    if (c->rank == 0) {
        for (int r = 1; r < c->world; r++) {
            join_path(path, sizeof(path), c->dir, r);
            unlink(path);
        }
        NCCL_CHECK(ncclGetUniqueId(&file.id));
        file.pid = (int)getpid();
        write_file(id_path, &file, sizeof(file));
        for (int r = 1; r < c->world; r++) {
            join_path(path, sizeof(path), c->dir, r);
            while (!file_exists(path)) {
                if (wall_seconds() > deadline) {
                    char missing[512] = "";
                    for (int m = r, len = 0; m < c->world && len < (int)sizeof(missing) - 16; m++) {
                        join_path(path, sizeof(path), c->dir, m);
                        if (!file_exists(path))
                            len += snprintf(missing + len, sizeof(missing) - len, "%s%d",
                                            len ? ", " : "", m);
                    }
                    unlink(id_path);
                    die("rank 0: timed out after %.0f s waiting in %s for rank(s) %s to join "
                        "(were they started, with --world %d and the same --comm-dir?)",
                        c->timeout_s, c->dir, missing, c->world);
                }
                usleep(10000);
            }
        }
        return file.id;
    }
    IdFile published;
    while (!read_id_file(id_path, &published, file.host)) {
        if (wall_seconds() > deadline)
            die("rank %d: timed out after %.0f s waiting for rank 0 to write %s (is rank 0 "
                "running, with the same --comm-dir?)", c->rank, c->timeout_s, id_path);
        usleep(10000);
    }
    file.pid = (int)getpid();
    join_path(path, sizeof(path), c->dir, c->rank);
    write_file(path, &file, sizeof(file));
    return published.id;
}

void comm_init(const CommConfig *c) {
    const int transport = comm_config_check(c);
    comm.rank = c->rank;
    comm.world = c->world;
    if (!transport) return;

    // one GPU per process, chosen before backend_init creates the stream and handles on it
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    int device = c->local_rank >= 0 ? c->local_rank : c->rank % devices;
    if (device >= devices)
        die("rank %d: local rank %d, but this machine shows %d GPU(s)", c->rank, device, devices);
    CUDA_CHECK(cudaSetDevice(device));
    if (backend_init() != 0) die("rank %d: the CUDA backend could not start on GPU %d", c->rank, device);

    ncclUniqueId id = rendezvous(c);
    // NVLink multicast (NVLS) stays off: on shared multi-GPU hosts a program that uses it can
    // put the host's GPUs out of service for everyone; set here unless the environment says so.
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    NCCL_CHECK(ncclCommInitRank(&comm.nccl, c->world, id, c->rank));
    if (c->rank == 0) {   // every rank has read the id and joined: the files have done their job
        char path[4200];
        snprintf(path, sizeof(path), "%s/nccl_id", c->dir);
        unlink(path);
        for (int r = 1; r < c->world; r++) {
            join_path(path, sizeof(path), c->dir, r);
            unlink(path);
        }
    }
    comm.scratch = (double *)dev_malloc(sizeof(double), "communication scratch");
}

void comm_free(void) {
    if (!comm.nccl) return;
    comm_barrier();
    NCCL_CHECK(ncclCommFinalize(comm.nccl));
    NCCL_CHECK(ncclCommDestroy(comm.nccl));
    comm.nccl = NULL;
    dev_free(comm.scratch);
    comm.scratch = NULL;
}

// ----------------------------------------------------------------------------------------
// collectives, in place, on cuda_stream

static ncclDataType_t nccl_type(CommType type) {
    return type == COMM_FLOATX ? ncclBfloat16 : ncclFloat;
}
static size_t type_bytes(CommType type) { return type == COMM_FLOATX ? sizeof(floatX) : sizeof(float); }

void comm_allreduce_sum(void *buf, size_t n, CommType type) {
    if (!comm.nccl) return;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(type), ncclSum, comm.nccl, cuda_stream));
}

// in place: NCCL's receive buffer is the send buffer at this rank's shard
void comm_reduce_scatter(void *buf, size_t shard, CommType type) {
    if (!comm.nccl) return;
    char *mine = (char *)buf + (size_t)comm.rank * shard * type_bytes(type);
    NCCL_CHECK(ncclReduceScatter(buf, mine, shard, nccl_type(type), ncclSum, comm.nccl, cuda_stream));
}

void comm_all_gather(void *buf, size_t shard, CommType type) {
    if (!comm.nccl) return;
    char *mine = (char *)buf + (size_t)comm.rank * shard * type_bytes(type);
    NCCL_CHECK(ncclAllGather(mine, buf, shard, nccl_type(type), comm.nccl, cuda_stream));
}

double comm_allreduce_sum_host(double value) {
    if (!comm.nccl) return value;
    dev_upload(comm.scratch, &value, sizeof(value));
    NCCL_CHECK(ncclAllReduce(comm.scratch, comm.scratch, 1, ncclFloat64, ncclSum, comm.nccl, cuda_stream));
    dev_download(&value, comm.scratch, sizeof(value));
    return value;
}

void comm_barrier(void) {
    if (comm.nccl) comm_allreduce_sum_host(0.0);
}
