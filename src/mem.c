/* mem.c: the default allocator (libc, or jemalloc when configured; big
 * blocks mapped directly, see mem.h), and growing a block. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "mem.h"

#ifdef TW_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
/* Debian's jemalloc is built without a prefix, so linking it also replaces
 * malloc for the whole process; the README says so. mallocx/dallocx are
 * used so that the choice is explicit here. */
void *tw__default_alloc(void *ctx, size_t size)
{
    (void)ctx;
    return size ? mallocx(size, 0) : NULL;
}

void tw__default_free(void *ctx, void *p)
{
    (void)ctx;
    dallocx(p, 0);
}
#else
void *tw__default_alloc(void *ctx, size_t size)
{
    (void)ctx;
    return malloc(size);
}

void tw__default_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}
#endif

void *tw__map(size_t size)
{
#ifdef __linux__
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
#else
    (void)size;
    return NULL; /* never called: TW__MAP_MIN is SIZE_MAX */
#endif
}

void tw__unmap(void *p, size_t size)
{
#ifdef __linux__
    munmap(p, size);
#else
    (void)p;
    (void)size;
#endif
}

#ifdef __linux__
static size_t page_up(size_t n)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    return (n + ps - 1) & ~(ps - 1);
}

/* Address space for `want` bytes, none of it usable yet; NULL if refused.
 * It starts on a huge page boundary, so that a block growing from its
 * start fills whole huge pages once it asks for them (tw__advise_huge). */
static void *reserve(size_t want)
{
    void *q = mmap(NULL, want + TW__HUGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) { /* no room for the alignment's slack: unaligned */
        q = mmap(NULL, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return q == MAP_FAILED ? NULL : q;
    }
    uintptr_t at = ((uintptr_t)q + TW__HUGE - 1) & ~(uintptr_t)(TW__HUGE - 1);
    size_t head = (size_t)(at - (uintptr_t)q);
    if (head)
        munmap(q, head);
    if (TW__HUGE - head)
        munmap((char *)at + want, TW__HUGE - head);
    return (void *)at;
}

/* Maps `size` bytes writable at the start of a reservation of `want`
 * bytes, or, when that is refused, of exactly `size` (*res = 0). */
static void *map_res(size_t size, size_t want, size_t *res)
{
    size_t len = page_up(size);
    want = page_up(want);
    void *q;
    if (want > len && (q = reserve(want))) {
        if (!mprotect(q, len, PROT_READ | PROT_WRITE)) {
            *res = want;
            return q;
        }
        munmap(q, want);
    }
    *res = 0;
    return tw__map(size);
}
#endif

void tw__advise_huge(void *p, size_t len)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice: a refusal changes nothing */
#else
    (void)p;
    (void)len;
#endif
}

void *tw__alloc_res(struct tw__mem *m, size_t size, size_t want, size_t *res)
{
    *res = 0;
#ifdef __linux__
    void *p;
    if (tw__mapped(m, size)) {
        if ((p = map_res(size, want, res)))
            m->bytes += size;
        return p;
    }
#else
    (void)want;
#endif
    return tw__alloc(m, size);
}

void tw__free_res(struct tw__mem *m, void *p, size_t size, size_t res)
{
    if (p && res > size) { /* mapped: the reservation goes with it */
        m->bytes -= size;
        tw__unmap(p, res);
        return;
    }
    tw__free(m, p, size);
}

void *tw__realloc_res(struct tw__mem *m, void *p, size_t old, size_t size, size_t keep,
                      size_t want, size_t *res)
{
    void *q;
    size_t nres;
#ifdef __linux__
    if (p && tw__mapped(m, old) && tw__mapped(m, size)) {
        if (size <= *res) { /* in place: its pages stay where they are */
            size_t from = page_up(old), to = page_up(size);
            if (to > from && mprotect((char *)p + from, to - from, PROT_READ | PROT_WRITE))
                return NULL;
            m->bytes = m->bytes - old + size;
            return p;
        }
        /* Past the reservation: the pages move (mremap, nothing copied)
         * to the start of a new one, or, refused that, wherever mremap
         * puts them. */
        want = page_up(want > size ? want : size);
        nres = want > page_up(size) ? want : 0;
        if (nres && (q = reserve(nres))) {
            if (mremap(p, old, size, MREMAP_MAYMOVE | MREMAP_FIXED, q) == MAP_FAILED) {
                munmap(q, nres);
                q = NULL;
            }
        } else {
            nres = 0;
            if ((q = mremap(p, old, size, MREMAP_MAYMOVE)) == MAP_FAILED)
                q = NULL;
        }
        if (q) {
            /* what is left of the old reservation, past the pages that
             * moved: those are no longer ours, and another thread may
             * have been handed their addresses already */
            size_t moved = page_up(old);
            if (*res > moved && q != p)
                munmap((char *)p + moved, *res - moved);
            *res = nres;
            m->bytes = m->bytes - old + size;
            return q;
        }
        /* mremap refused (a block whose pages are not one mapping):
         * copy it, below */
    }
#endif
    if (!(q = tw__alloc_res(m, size, want, &nres)))
        return NULL;
    if (p) {
        memcpy(q, p, keep);
        tw__free_res(m, p, old, *res);
    }
    *res = nres;
    return q;
}

int tw__mem_init(struct tw__mem *m, const struct tw_allocator *user)
{
    m->bytes = 0;
    if (user && (user->alloc || user->free)) {
        if (!user->alloc || !user->free)
            return -EINVAL;
        m->a = *user;
    } else {
        m->a.alloc = tw__default_alloc;
        m->a.free = tw__default_free;
        m->a.ctx = NULL;
    }
    return 0;
}
