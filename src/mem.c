/* mem.c: the default allocator (libc, or jemalloc when configured; big
 * blocks mapped directly, see mem.h), and growing a block. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
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

void *tw__realloc(struct tw__mem *m, void *p, size_t old, size_t size, size_t keep)
{
    void *q;
#ifdef __linux__
    if (p && tw__mapped(m, old) && tw__mapped(m, size)) {
        if ((q = mremap(p, old, size, MREMAP_MAYMOVE)) == MAP_FAILED)
            return NULL;
        m->bytes = m->bytes - old + size;
        return q;
    }
#endif
    if (!(q = tw__alloc(m, size)))
        return NULL;
    if (p) {
        memcpy(q, p, keep);
        tw__free(m, p, old);
    }
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
