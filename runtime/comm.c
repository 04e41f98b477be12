// comm.c: the CPU transport of comm.h. The ranks are processes on one machine that map the
// same file, <dir>/comm.shm: a header (who has joined, a barrier, who failed), then one slot
// per rank through which data moves a chunk at a time:
//   each rank writes its chunk into its slot -> barrier -> each reads the slots it needs,
//   summing them in rank order -> barrier (now the slots may be written again).
// Summing in rank order on every rank gives bit-identical results on all ranks, which keeps
// their copies of the parameters identical.
//
// Joining: rank 0 removes any old file, builds the new one under a temporary name and renames
// it into place, so the others never see it half made. Each other rank waits for it, skips a
// file whose creator is no longer running (left by a crashed run), writes its pid and counts
// itself in. When all have arrived rank 0 unlinks the name: the mappings stay valid and
// nothing is left in the folder. While waiting, a rank notices a peer that has ended (its
// exit handler marks the header; a killed process is seen by its pid) and stops with a
// message instead of waiting forever.
#include "comm.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../utils.h"

#define SHM_MAGIC 0x636d6c6c          // "llmc"
#define SHM_MAX_RANKS 256
#define SHM_HEADER_BYTES 4096         // the header, padded so the slots start page-aligned
#define SHM_SLOT_BYTES (4u << 20)     // per rank: data moves in chunks of up to 4 MiB

typedef struct {
    uint32_t magic;
    int32_t world;
    atomic_int pids[SHM_MAX_RANKS];   // pid of each rank that has joined, 0 until then
    atomic_int arrived;               // ranks that have joined
    atomic_int barrier_count;         // ranks waiting at the current barrier
    atomic_int barrier_generation;    // barriers completed so far
    atomic_int failed_rank;           // 1 + a rank that exited without comm_free, 0 if none
} ShmHeader;
_Static_assert(sizeof(ShmHeader) <= SHM_HEADER_BYTES, "ShmHeader outgrew its page");

static struct {
    int rank, world;
    ShmHeader *header;    // NULL when no transport is set up (world 1)
    char *slots;          // (world, SHM_SLOT_BYTES)
    size_t map_bytes;
    int fd;
    int name_linked;      // rank 0: the file still has its name in the folder
    char path[4096];
} shm = {0, 1, NULL, NULL, 0, -1, 0, ""};

const char *comm_transport(void) { return "shm"; }
int comm_rank(void) { return shm.rank; }
int comm_world(void) { return shm.world; }

static float *slot(int r) { return (float *)(shm.slots + (size_t)r * SHM_SLOT_BYTES); }

// ----------------------------------------------------------------------------------------
// waiting

// spin first (the others are usually close behind), then yield, then sleep 50 us at a time
static void backoff(long *spins) {
    ++*spins;
    if (*spins < 1000) return;
    if (*spins < 2000) {
        sched_yield();
        return;
    }
    struct timespec pause = {0, 50000};
    nanosleep(&pause, NULL);
}

static int process_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// dies when another rank has ended: its exit handler said so, or its process is gone
static void check_peers(const char *waiting_for) {
    int failed = atomic_load(&shm.header->failed_rank);
    if (failed)
        die("rank %d: rank %d ended while this rank waited for %s (see its error)", shm.rank,
            failed - 1, waiting_for);
    for (int r = 0; r < shm.world; r++) {
        int pid = atomic_load(&shm.header->pids[r]);
        if (r != shm.rank && pid > 0 && !process_alive(pid))
            die("rank %d: rank %d (pid %d) is gone while this rank waited for %s", shm.rank, r,
                pid, waiting_for);
    }
}

static void shm_barrier(const char *what) {
    ShmHeader *h = shm.header;
    int generation = atomic_load(&h->barrier_generation);
    if (atomic_fetch_add(&h->barrier_count, 1) == shm.world - 1) {   // the last to arrive
        atomic_store(&h->barrier_count, 0);
        atomic_fetch_add(&h->barrier_generation, 1);
        return;
    }
    long spins = 0;
    while (atomic_load(&h->barrier_generation) == generation) {
        backoff(&spins);
        if (spins % 1024 == 0) check_peers(what);
    }
}

// ----------------------------------------------------------------------------------------
// joining and leaving

// on any exit before comm_free (die() included): tell the others, and leave no file behind
static void mark_failed_at_exit(void) {
    if (!shm.header) return;
    int none = 0;
    atomic_compare_exchange_strong(&shm.header->failed_rank, &none, shm.rank + 1);
    if (shm.name_linked) unlink(shm.path);
}

static void map_file(int fd, size_t bytes, const char *path) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) die("cannot map %s (%zu bytes): %s", path, bytes, strerror(errno));
    shm.header = p;
    shm.slots = (char *)p + SHM_HEADER_BYTES;
    shm.map_bytes = bytes;
    shm.fd = fd;
}

static void unmap_file(void) {
    munmap(shm.header, shm.map_bytes);
    close(shm.fd);
    shm.header = NULL;
    shm.slots = NULL;
    shm.fd = -1;
}

// rank 0: a fresh file, complete before it appears under its name
static void create_file(size_t bytes) {
    if (unlink(shm.path) != 0 && errno != ENOENT)
        die("cannot remove the old %s: %s", shm.path, strerror(errno));
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", shm.path, (int)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) die("cannot create %s: %s", tmp, strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
        unlink(tmp);
        die("cannot size %s to %zu bytes: %s", tmp, bytes, strerror(errno));
    }
    map_file(fd, bytes, tmp);
    shm.header->magic = SHM_MAGIC;
    shm.header->world = shm.world;
    atomic_store(&shm.header->pids[0], (int)getpid());
    atomic_store(&shm.header->arrived, 1);
    if (rename(tmp, shm.path) != 0) {
        unlink(tmp);
        die("cannot rename %s to %s: %s", tmp, shm.path, strerror(errno));
    }
    shm.name_linked = 1;
}

// other ranks: 1 when rank 0's live file was found and joined, 0 when it is not there yet
static int try_join_file(size_t bytes) {
    int fd = open(shm.path, O_RDWR);
    if (fd < 0) return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < SHM_HEADER_BYTES) {
        close(fd);
        return 0;
    }
    map_file(fd, (size_t)st.st_size, shm.path);
    ShmHeader *h = shm.header;
    if (h->magic != SHM_MAGIC || !process_alive(atomic_load(&h->pids[0]))) {
        unmap_file();   // not ours, or left by a run that ended: wait for rank 0's new file
        return 0;
    }
    if (h->world != shm.world || (size_t)st.st_size != bytes)
        die("rank %d: %s was made by rank 0 for %d ranks; this rank was told %d (give every "
            "rank the same world size)", shm.rank, shm.path, h->world, shm.world);
    int nobody = 0;
    if (!atomic_compare_exchange_strong(&h->pids[shm.rank], &nobody, (int)getpid()))
        die("rank %d: process %d already joined %s as rank %d: give each process its own rank",
            shm.rank, nobody, shm.path, shm.rank);
    atomic_fetch_add(&h->arrived, 1);
    return 1;
}

void comm_init(const CommConfig *c) {
    const int transport = comm_config_check(c);
    shm.rank = c->rank;
    shm.world = c->world;
    if (!transport) return;
    if (c->world > SHM_MAX_RANKS)
        die("the shared-memory transport takes at most %d ranks, not %d", SHM_MAX_RANKS, c->world);
    snprintf(shm.path, sizeof(shm.path), "%s/comm.shm", c->dir);
    size_t bytes = SHM_HEADER_BYTES + (size_t)c->world * SHM_SLOT_BYTES;
    double deadline = wall_seconds() + c->timeout_s;
    atexit(mark_failed_at_exit);

    long spins = 0;
    if (c->rank == 0) {
        create_file(bytes);
    } else {
        while (!try_join_file(bytes)) {
            if (wall_seconds() > deadline)
                die("rank %d: timed out after %.0f s waiting for rank 0 to create %s (is rank 0 "
                    "running, with the same --comm-dir?)", c->rank, c->timeout_s, shm.path);
            backoff(&spins);
        }
    }
    while (atomic_load(&shm.header->arrived) < c->world) {
        if (wall_seconds() > deadline) {
            char missing[512] = "";
            for (int r = 0, len = 0; r < c->world && len < (int)sizeof(missing) - 16; r++)
                if (atomic_load(&shm.header->pids[r]) == 0)
                    len += snprintf(missing + len, sizeof(missing) - len, "%s%d", len ? ", " : "", r);
            die("rank %d: timed out after %.0f s waiting in %s for rank(s) %s to join (were they "
                "started, with --world %d and the same --comm-dir?)", c->rank, c->timeout_s,
                c->dir, missing, c->world);
        }
        backoff(&spins);
        if (spins % 1024 == 0) check_peers("the others to join");
    }
    if (c->rank == 0) {   // everyone has the file mapped: its name is no longer needed
        unlink(shm.path);
        shm.name_linked = 0;
    }
    shm_barrier("the others to join");
}

void comm_free(void) {
    if (!shm.header) return;
    shm_barrier("the end of the run");
    unmap_file();
}

void comm_barrier(void) {
    if (shm.header) shm_barrier("a barrier");
}

// ----------------------------------------------------------------------------------------
// collectives (floatX is float on the CPU, so both CommTypes move floats)

// out[i] = slot 0[offset + i] + slot 1[offset + i] + ..., in rank order on every rank
static void sum_slots(float *out, size_t offset, size_t len) {
    #pragma omp parallel for
    for (size_t i = 0; i < len; i++) {
        float sum = slot(0)[offset + i];
        for (int r = 1; r < shm.world; r++) sum += slot(r)[offset + i];
        out[i] = sum;
    }
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

void comm_allreduce_sum(void *buf, size_t n, CommType type) {
    if (!shm.header) return;
    float *x = buf;
    const size_t chunk = SHM_SLOT_BYTES / sizeof(float);
    for (size_t start = 0; start < n; start += chunk) {
        size_t len = min_size(chunk, n - start);
        memcpy(slot(shm.rank), x + start, len * sizeof(float));
        shm_barrier("an all-reduce");
        sum_slots(x + start, 0, len);
        shm_barrier("an all-reduce");
    }
}

// each round moves `part` elements of every rank's shard: my slot holds, for each destination
// d, my x[d * shard + start ...] at slot offset d * part
void comm_reduce_scatter(void *buf, size_t shard, CommType type) {
    if (!shm.header) return;
    float *x = buf;
    const size_t part = SHM_SLOT_BYTES / sizeof(float) / shm.world;
    for (size_t start = 0; start < shard; start += part) {
        size_t len = min_size(part, shard - start);
        for (int d = 0; d < shm.world; d++)
            memcpy(slot(shm.rank) + d * part, x + d * shard + start, len * sizeof(float));
        shm_barrier("a reduce-scatter");
        sum_slots(x + shm.rank * shard + start, shm.rank * part, len);
        shm_barrier("a reduce-scatter");
    }
}

void comm_all_gather(void *buf, size_t shard, CommType type) {
    if (!shm.header) return;
    float *x = buf;
    const size_t chunk = SHM_SLOT_BYTES / sizeof(float);
    for (size_t start = 0; start < shard; start += chunk) {
        size_t len = min_size(chunk, shard - start);
        memcpy(slot(shm.rank), x + shm.rank * shard + start, len * sizeof(float));
        shm_barrier("an all-gather");
        for (int r = 0; r < shm.world; r++)
            if (r != shm.rank) memcpy(x + r * shard + start, slot(r), len * sizeof(float));
        shm_barrier("an all-gather");
    }
}

double comm_allreduce_sum_host(double value) {
    if (!shm.header) return value;
    memcpy(slot(shm.rank), &value, sizeof(value));
    shm_barrier("an all-reduce");
    double sum = 0.0;
    for (int r = 0; r < shm.world; r++) {
        double v;
        memcpy(&v, slot(r), sizeof(v));
        sum += v;
    }
    shm_barrier("an all-reduce");
    return sum;
}
