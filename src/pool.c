/* pool.c: growing the entry pool (see pool.h for why it doubles). */
#include <errno.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "pool.h"

/* Transparent huge pages, asked for (tw_options.huge_pages) by a manual
 * timer only. Its pool, once its populating
 * reaches past its first 2 MiB, asks for huge pages over its whole
 * reservation (madvise MADV_HUGEPAGE, mem.h), so the rest of it comes in
 * 2 MiB pages: one fault, one populate, one page table entry each. Where a
 * host shadows its guests' page tables (the Firecracker guests these
 * benchmarks ran on lately), a 4 KiB page costs ~0.8 us to populate and
 * ~5 us more at its first write, ~50 ns a fresh slot; a 2 MiB page 0.2 to
 * 0.7 us a 4 KiB of it, and nothing at the first write: W2's cold manual
 * adds went from 60-92 ns to 15-37 (benchmarks/results/history.md). Below
 * 2 MiB nothing is asked for, so a small pool stays at 4 KiB pages and a
 * page or two resident; past it, up to one huge page (2 MiB) more than
 * the slots in use is resident.
 *
 * The cost comes in lumps: populating a huge page takes ~0.1 ms where the
 * host still backs the memory and up to ~3.7 ms where it does not, in one
 * call, once per 58,000 fresh slots. A manual caller pays that in its own
 * schedule. A threaded shard would pay it holding the lock its driver
 * fires under: with huge pages there too, W2's threaded cold p99 passed
 * tick + 1 ms in four rows of ten (2.09 to 2.25 ms), against two of
 * thirty at 4 KiB pages (2.27 and 3.43; the rest 1.1 to 1.8), whose
 * populating comes ~0.2 ms a call. So a threaded shard's pool never asks
 * (TW__HUGE_NEVER). Where THP is "never", or the kernel has none, the
 * advice does nothing.
 *
 * Nor does a manual pool unless its caller asks: on a host that backs a
 * guest's memory only as it is first touched, while handing it recycled
 * 4 KiB pages already backed, the trade runs the other way. There a
 * fresh 4 KiB page cost 1.3 us and a huge page never used before 8.5 us
 * a 4 KiB of it (0.18 once recycled), and W2's cold adds took 66-102 ns
 * with the advice against 17 without; W1 at 10^6 gained nothing from
 * the larger pages (history.md, "Huge pages made opt-in"). The lump,
 * and with THP's defrag at "madvise" a compaction's stall inside a
 * schedule, is a latency an event loop should choose.
 * Earlier tries (advice on part of a block, which split its mapping so
 * that mremap failed; and, on the first host tried, W2's adds made
 * slower, 33 -> 59 ns) are in history.md. */

int tw__pool_grow(struct tw__pool *p, struct tw__mem *m)
{
    return tw__pool_grow_to(p, m, p->cap ? (uint64_t)p->cap * 2 : TW__POOL_MIN);
}

/* The address space a block of `size` bytes asks for (mem.h): room to
 * double a few times, and on a 64-bit target at least 1 GiB, so that a
 * pool of up to ~30 million tasks never moves; never more than the pool's
 * limit could use. 32-bit targets reserve nothing. */
static size_t reservation(const struct tw__pool *p, uint32_t nfront, size_t size)
{
    uint32_t limit = p->max_slots && p->max_slots < TW__MAX_SLOTS ? p->max_slots : TW__MAX_SLOTS;
    uint64_t most = ((uint64_t)nfront + limit) * sizeof(struct tw__entry);
    if (sizeof(void *) < 8)
        return size;
    uint64_t want = (uint64_t)size * 4;
    if (want < ((uint64_t)1 << 30))
        want = (uint64_t)1 << 30;
    if (want > most)
        want = most;
    return want > size ? (size_t)want : size;
}

/* Moves the pool to a new block with room for nfront sentinels and ncap
 * slots; what was there keeps its index. */
static int relocate(struct tw__pool *p, struct tw__mem *m, uint32_t nfront, uint32_t ncap)
{
    size_t sz = sizeof(struct tw__entry);
    /* a big pool (its slots TW__MAP_MIN and up: mapped, with the default
     * allocator) takes room for every level's heads at once (pool.h,
     * front_max), so that no level made later moves it. The slots, not
     * the block: at a large wheel_size front_max alone passes 1 MiB */
    if (nfront < p->front_max && (size_t)ncap * sz >= TW__MAP_MIN)
        nfront = p->front_max;
    size_t old = ((size_t)p->front + p->cap) * sz, size = ((size_t)nfront + ncap) * sz;
    size_t keep = ((size_t)p->front + p->used) * sz; /* heads and used slots */
    size_t want = reservation(p, nfront, size), res;
    struct tw__entry *was = p->entries ? p->entries - p->front : NULL, *blk;
    if (nfront == p->front) { /* more slots: the kept part stays at the start */
        blk = tw__realloc_res(m, was, old, size, keep, want, &p->reserved);
    } else if ((blk = tw__alloc_res(m, size, want, &res))) { /* more heads: all moves up */
        if (was) {
            memcpy(blk + nfront - p->front, was, keep);
            tw__free_res(m, was, old, p->reserved);
        }
        p->reserved = res;
    }
    if (!blk)
        return -ENOMEM;
    if (blk != was && p->huge > 0) /* a new reservation: no advice yet */
        p->huge = 0;
    p->entries = blk + nfront;
    p->front = nfront;
    p->cap = ncap;
    /* the slots in use are resident wherever they moved; the next fresh
     * one populates, if the block is ours to advise (pool.h) */
#ifdef MADV_POPULATE_WRITE
    p->fault_at = tw__mapped(m, size) ? p->used : ncap;
#else
    p->fault_at = ncap;
#endif
    return 0;
}

void tw__pool_populate(struct tw__pool *p)
{
#ifdef MADV_POPULATE_WRITE
    uintptr_t psz = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t base = (uintptr_t)p->entries;
    uintptr_t end = base + (uintptr_t)p->cap * sizeof(struct tw__entry);
    /* from the first page boundary at or after slot fault_at's first byte:
     * the page before it holds a slot written already, or the last chunk's
     * end, or else takes one fault */
    uintptr_t from = (base + (uintptr_t)p->fault_at * sizeof(struct tw__entry) + psz - 1) & ~(psz - 1);
    uintptr_t to = from < end && end - from > TW__POPULATE ? from + TW__POPULATE : end;
    uintptr_t blk = (uintptr_t)(p->entries - p->front);
    if (p->huge == 0 && p->reserved && to - blk > TW__HUGE) { /* see above */
        tw__advise_huge((void *)blk, p->reserved);
        p->huge = 1;
    }
    if (from < to && madvise((void *)from, to - from, MADV_POPULATE_WRITE)) {
        p->fault_at = p->cap; /* fault as needed until the pool grows */
        return;
    }
    /* slots wholly below `to` are resident; one that straddles it is not */
    p->fault_at = to == end ? p->cap : (uint32_t)((to - base) / sizeof(struct tw__entry));
#else
    p->fault_at = p->cap;
#endif
}

int tw__pool_grow_to(struct tw__pool *p, struct tw__mem *m, uint64_t want)
{
    uint32_t limit = p->max_slots && p->max_slots < TW__MAX_SLOTS ? p->max_slots : TW__MAX_SLOTS;
    if (p->cap >= limit || want <= p->cap)
        return p->cap >= want ? 0 : -ENOMEM;
    return relocate(p, m, p->front, want > limit ? limit : (uint32_t)want);
}

uint32_t tw__pool_front_for(uint32_t nsent)
{
    /* 8 bytes a head, and 8 more for what TW__NIL reaches; in whole
     * 36-byte units, so that slot 0 keeps its alignment */
    uint64_t bytes = 8 * ((uint64_t)nsent + 1);
    return (uint32_t)((bytes + sizeof(struct tw__entry) - 1) / sizeof(struct tw__entry));
}

int tw__pool_grow_front(struct tw__pool *p, struct tw__mem *m, uint32_t nsent)
{
    uint32_t nfront = tw__pool_front_for(nsent);
    return nfront <= p->front ? 0 : relocate(p, m, nfront, p->cap);
}

void tw__pool_rewind(struct tw__pool *p)
{
    /* a retired slot must never be handed out again (pool.h); and with
     * no block, no slot in the magazine and no rewound slot left, every
     * free slot is the spare: nothing to put in order, and the spare is
     * the fast path's */
    if (p->retired || (p->free_head == TW__NIL && !p->nmag))
        return;
    p->spare = TW__NIL;
    p->nmag = 0;
    p->free_head = TW__REWOUND;
    p->rewound = 0;
}

void tw__pool_destroy(struct tw__pool *p, struct tw__mem *m)
{
    if (p->entries)
        tw__free_res(m, p->entries - p->front,
                     ((size_t)p->front + p->cap) * sizeof(*p->entries), p->reserved);
    memset(p, 0, sizeof(*p));
}
