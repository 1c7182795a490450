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

static inline void *tw__alloc(struct tw__mem *m, size_t size)
{
    void *p = m->a.alloc(m->a.ctx, size);
    if (p)
        m->bytes += size;
    return p;
}

static inline void tw__free(struct tw__mem *m, void *p, size_t size)
{
    if (!p)
        return;
    m->bytes -= size;
    m->a.free(m->a.ctx, p);
}

/* Moves block p (`old` bytes) to one of `size` bytes that starts with its
 * first `keep` bytes (keep <= both sizes). NULL on failure, with p as it
 * was. With the default allocator this is realloc: glibc moves a large
 * block by remapping its pages, not copying them, so a pool of millions
 * of entries doubles without copying any (the copy held a threaded
 * shard's lock for ~10 ms at 10^6 tasks: the driver could not fire
 * meanwhile). A user's allocator has no resize: alloc, copy, free. */
void *tw__realloc(struct tw__mem *m, void *p, size_t old, size_t size, size_t keep);

/* The default allocator, for allocations made before a timer exists. */
void *tw__default_alloc(void *ctx, size_t size);
void tw__default_free(void *ctx, void *p);

#endif
