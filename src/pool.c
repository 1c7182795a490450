/* pool.c: growing the entry pool one slab at a time. */
#include <errno.h>
#include <string.h>

#include "pool.h"

int tw__pool_grow(struct tw__pool *p, struct tw__mem *m)
{
    uint32_t limit = p->max_slots ? p->max_slots : TW__MAX_SLOTS;
    if (tw__pool_slots(p) + TW__SLAB_SLOTS > limit)
        return -ENOMEM;

    if (p->nslabs == p->cap) {
        uint32_t ncap = p->cap ? p->cap * 2 : 8;
        unsigned char **d = tw__alloc(m, ncap * sizeof(*d));
        if (!d)
            return -ENOMEM;
        if (p->nslabs)
            memcpy(d, p->slabs, p->nslabs * sizeof(*d));
        tw__free(m, p->slabs, p->cap * sizeof(*d));
        p->slabs = d;
        p->cap = ncap;
    }

    unsigned char *s = tw__alloc(m, TW__SLAB_BYTES);
    if (!s)
        return -ENOMEM; /* a bigger directory is kept: harmless capacity */
    /* Generations start even (free). The entries need no initialisation
     * beyond the free-list links set below. */
    memset(s + TW__SLAB_SLOTS * sizeof(struct tw__entry), 0,
           TW__SLAB_SLOTS * sizeof(uint32_t));
    uint32_t base = tw__pool_slots(p);
    p->slabs[p->nslabs++] = s;

    /* Push in reverse so the lowest slot is taken first: a burst of
     * schedules then writes memory sequentially. */
    struct tw__entry *e = (struct tw__entry *)s;
    for (uint32_t k = TW__SLAB_SLOTS; k-- > 0;) {
        e[k].link.next = p->free_head;
        e[k].link.prev = TW__NIL;
        p->free_head = base + k;
    }
    p->nfree += TW__SLAB_SLOTS;
    return 0;
}

void tw__pool_destroy(struct tw__pool *p, struct tw__mem *m)
{
    for (uint32_t k = 0; k < p->nslabs; k++)
        tw__free(m, p->slabs[k], TW__SLAB_BYTES);
    tw__free(m, p->slabs, p->cap * sizeof(*p->slabs));
    memset(p, 0, sizeof(*p));
}
