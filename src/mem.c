/* mem.c: the default allocator (libc, or jemalloc when configured). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

void *tw__realloc(struct tw__mem *m, void *p, size_t old, size_t size, size_t keep)
{
    void *q;
    if (p && m->a.alloc == tw__default_alloc) {
#ifdef TW_HAVE_JEMALLOC
        q = rallocx(p, size, 0);
#else
        q = realloc(p, size);
#endif
    } else {
        if ((q = m->a.alloc(m->a.ctx, size)) && p) {
            memcpy(q, p, keep);
            m->a.free(m->a.ctx, p);
        }
    }
    if (!q)
        return NULL;
    m->bytes = m->bytes - (p ? old : 0) + size;
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
