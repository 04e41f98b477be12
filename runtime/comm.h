// comm.h: communication between the processes of a data-parallel run, one process (rank) per
// device. One header, two implementations chosen at build time with the rest of runtime/:
//   runtime/comm.cu CUDA: NCCL over the GPUs; the ncclUniqueId travels through a file in the
//                   rendezvous folder (rank 0 writes it, the others wait for it)
//   runtime/comm.c  CPU: the ranks are processes on one machine that share a memory-mapped
//                   file in the rendezvous folder (so CI can run several CPU ranks)
// At world size 1 nothing is set up (unless forced) and every call returns at once: a
// one-process run costs nothing and behaves exactly as without this layer.
//
// Buffers are device memory of the backend (host memory on the CPU), like every layer's.
// The collectives are "in place" and sharded the ZeRO way: a buffer of world * shard elements,
// of which rank r owns elements [r * shard, (r + 1) * shard).
// Every rank must make the same calls in the same order (they are collective).
#ifndef COMM_H
#define COMM_H

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "../utils.h"

typedef struct {
    int rank;            // this process, 0 <= rank < world
    int world;           // number of processes
    int local_rank;      // CUDA: the GPU of this process on its machine; -1: rank % GPUs seen
    const char *dir;     // rendezvous folder every rank can reach (may be NULL at world 1)
    double timeout_s;    // how long a rank waits for the others to join before giving up
    int force;           // set the transport up even at world 1 (to exercise it on one device)
} CommConfig;

typedef enum { COMM_FLOATX, COMM_FLOAT } CommType;   // element type of a buffer

const char *comm_transport(void);   // "nccl" or "shm": what comm_init sets up
// Joins the other ranks (or does nothing at world 1 unless forced). Dies with a message that
// names the folder and the missing ranks when they do not all arrive within timeout_s.
// CUDA: selects the process's GPU first, so call it before backend_init.
void comm_init(const CommConfig *config);
// What both transports' comm_init check first: dies when the rank is outside the world or,
// where there is a transport to set up, the rendezvous folder is missing; returns whether
// there is one (world > 1 or forced).
static inline int comm_config_check(const CommConfig *c) {
    if (c->world < 1 || c->rank < 0 || c->rank >= c->world)
        die("rank %d is outside a world of %d rank(s): ranks are 0 .. world-1", c->rank, c->world);
    if (c->world == 1 && !c->force) return 0;   // one process: nothing to set up, nothing to pay
    if (!c->dir) die("%d ranks need a rendezvous folder (--comm-dir)", c->world);
    struct stat st;
    if (stat(c->dir, &st) != 0)
        die("rendezvous folder %s: %s (create it first; every rank must see the same folder)",
            c->dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) die("rendezvous folder %s is not a folder", c->dir);
    return 1;
}
int comm_rank(void);    // 0 before comm_init
int comm_world(void);   // 1 before comm_init

// buf (n) = sum over ranks of buf (n)
void comm_allreduce_sum(void *buf, size_t n, CommType type);
// buf (world * shard): afterwards buf[rank * shard ...] holds the sum over ranks of that
// shard; the rest of buf is left undefined
void comm_reduce_scatter(void *buf, size_t shard, CommType type);
// buf (world * shard): every rank's shard, buf[r * shard ...] from rank r, copied to all
void comm_all_gather(void *buf, size_t shard, CommType type);
// sum over ranks of one host value (losses for the log)
double comm_allreduce_sum_host(double value);
void comm_barrier(void);
// Leaves the group (after a barrier); safe to call when comm_init was not.
void comm_free(void);

#ifdef __cplusplus
}
#endif
#endif
