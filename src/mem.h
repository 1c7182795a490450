/* mem.h: the one allocation hook every twheel allocation goes through.
 *
 * Sizes are passed back on free so the timer can account exactly for what
 * it holds (tw_stats.memory_bytes) without a header per block. */
#ifndef TW_MEM_H
#define TW_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "twheel.h"

struct tw__mem {
    struct tw_allocator a;
    uint64_t bytes; /* currently held */
};

/* Installs the user's allocator, or the default one when both functions
 * are NULL. Returns -EINVAL when only one is set. */
int tw__mem_init(struct tw__mem *m, const struct tw_allocator *user);

/* The default allocator, for allocations made before a timer exists. */
void *tw__default_alloc(void *ctx, size_t size);
void tw__default_free(void *ctx, void *p);

/* Blocks this large or larger from the default allocator are mapped
 * directly, not taken from malloc, so that growing one (the entry pool,
 * doubling) copies nothing: in place within its reservation (below), or
 * by mremap, which moves its pages, not its bytes. malloc
 * cannot promise that: glibc maps big blocks only until the process frees
 * one, and then serves everything under 32 MiB from its heap, where realloc
 * copies. A copy of the pool holds a threaded shard's lock while it runs
 * (~10 ms at 10^6 tasks), and the driver cannot fire meanwhile. A user's
 * allocator is always used as given: alloc, copy, free. */
#ifdef __linux__
#define TW__MAP_MIN ((size_t)1 << 20)
#else
#define TW__MAP_MIN SIZE_MAX /* no mremap: malloc for everything */
#endif

void *tw__map(size_t size);
void tw__unmap(void *p, size_t size);

static inline int tw__mapped(const struct tw__mem *m, size_t size)
{
    return size >= TW__MAP_MIN && m->a.alloc == tw__default_alloc;
}

static inline void *tw__alloc(struct tw__mem *m, size_t size)
{
    void *p = tw__mapped(m, size) ? tw__map(size) : m->a.alloc(m->a.ctx, size);
    if (p)
        m->bytes += size;
    return p;
}

static inline void tw__free(struct tw__mem *m, void *p, size_t size)
{
    if (!p)
        return;
    m->bytes -= size;
    if (tw__mapped(m, size))
        tw__unmap(p, size);
    else
        m->a.free(m->a.ctx, p);
}

/* A huge page; a reservation (below) starts on a multiple of it, unless
 * address space is too short for the slack that aligning takes. */
#define TW__HUGE ((size_t)2 << 20)

/* Asks for transparent huge pages on [p, p + len) (madvise; where THP is
 * off or absent, nothing happens). Give it a whole reservation from
 * tw__alloc_res, never part of one: advice on part of a mapping splits
 * it, and mremap cannot move a block that spans two mappings. */
void tw__advise_huge(void *p, size_t len);

/* A block that grows (the entry pool) and is mapped sits at the start of
 * a reservation of address space (PROT_NONE: no memory, no commit charge
 * until pages are made writable), and grows by making the pages after
 * its end writable, in place. mremap would copy nothing either, but every
 * page it moves is mapped anew, and a host that shadows its guests' page
 * tables (seen on a Firecracker guest) charges ~5 us at each such page's
 * next write: moving a 36 MB pool then cost ~20 ms of writes, with a
 * threaded shard's lock held, and its driver fired late meanwhile
 * (benchmarks/results/history.md). Only past its reservation does a block
 * move, into a new one.
 *
 * `*res` is the block's reservation in bytes (0: none, a block from the
 * allocator, or one mapped when the reservation was refused, e.g. under
 * RLIMIT_AS; then it is mapped at exactly its size and moves by mremap).
 * `want` is the address space to ask for when a reservation is made:
 * ignored below TW__MAP_MIN, never less than the size. */
void *tw__alloc_res(struct tw__mem *m, size_t size, size_t want, size_t *res);
void tw__free_res(struct tw__mem *m, void *p, size_t size, size_t res);

/* Moves block p (`old` bytes, reservation *res, from tw__alloc_res) to one
 * of `size` bytes that starts with its first `keep` bytes (keep <= both
 * sizes). NULL on failure, with p and *res as they were. Copies nothing
 * when both sizes are mapped; moves nothing when size fits *res. */
void *tw__realloc_res(struct tw__mem *m, void *p, size_t old, size_t size, size_t keep,
                      size_t want, size_t *res);

#endif
