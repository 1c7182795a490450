/* pool.c: growing the entry pool (see pool.h for why it doubles). */
#include <errno.h>
#include <string.h>

#include "pool.h"

/* Transparent huge pages were tried for the pool (madvise HUGEPAGE on the
 * 2 MiB-aligned middle): W1 at 10^6 gained ~10 ns per pair from fewer TLB
 * misses, but the first touch of each huge page made W2's adds 2x slower
 * (33 -> 59 ns). Not worth it by default; left to the allocator. */

int tw__pool_grow(struct tw__pool *p, struct tw__mem *m)
{
    return tw__pool_grow_to(p, m, p->cap ? (uint64_t)p->cap * 2 : TW__POOL_MIN);
}

int tw__pool_grow_to(struct tw__pool *p, struct tw__mem *m, uint64_t want)
{
    uint32_t limit = p->max_slots ? p->max_slots : TW__MAX_SLOTS;
    if (p->cap >= limit || want <= p->cap)
        return p->cap >= want ? 0 : -ENOMEM;
    uint32_t ncap = want > limit ? limit : (uint32_t)want;

    struct tw__entry *e = tw__alloc(m, (size_t)ncap * sizeof(*e));
    if (!e)
        return -ENOMEM;
    if (p->used)
        memcpy(e, p->entries, (size_t)p->used * sizeof(*e));
    tw__free(m, p->entries, (size_t)p->cap * sizeof(*e));
    p->entries = e;
    p->cap = ncap;
    return 0;
}

void tw__pool_destroy(struct tw__pool *p, struct tw__mem *m)
{
    tw__free(m, p->entries, (size_t)p->cap * sizeof(*p->entries));
    memset(p, 0, sizeof(*p));
}
