/* extra.c: pooled extra records and the key map (open addressing, linear
 * probing, backward-shift deletion so no tombstones accumulate). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extra.h"

void tw__extra_marker(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    (void)arg;
    /* a distinct body keeps the linker from folding it with another */
    fputs("twheel: internal marker callback invoked\n", stderr);
    abort();
}

struct tw__extra *tw__extra_get(struct tw__engine *e)
{
    struct tw__extra *x = e->extra_free;
    if (x)
        e->extra_free = x->next_free;
    else if (!(x = tw__alloc(e->mem, sizeof(*x))))
        return NULL;
    memset(x, 0, sizeof(*x));
    e->extras++;
    return x;
}

void tw__wheel_hold(struct tw__entry *en)
{
    /* only a periodic task's re-arm gets here (wheel.c, "Re-arming a
     * periodic task"); a plain entry would have nowhere to keep the mark */
    if (tw__is_extra(en))
        ((struct tw__extra *)en->arg)->held = 1;
}

static void key_release(struct tw__engine *e, struct tw__extra *x)
{
    if (x->key && x->key != x->inline_key)
        tw__free(e->mem, x->key, x->keylen);
    x->key = NULL;
}

void tw__extra_put(struct tw__engine *e, struct tw__extra *x)
{
    key_release(e, x);
    e->extras--;
    x->next_free = e->extra_free;
    e->extra_free = x;
}

int tw__extra_set_key(struct tw__engine *e, struct tw__extra *x,
                      const void *key, size_t len, uint64_t hash)
{
    if (len > UINT32_MAX)
        return -EINVAL;
    unsigned char *k = x->inline_key;
    if (len > TW__INLINE_KEY && !(k = tw__alloc(e->mem, len)))
        return -ENOMEM;
    memcpy(k, key, len);
    x->key = k;
    x->keylen = (uint32_t)len;
    x->hash = hash;
    return 0;
}

void tw__extra_pool_destroy(struct tw__engine *e)
{
    struct tw__extra *x;
    while ((x = e->extra_free)) {
        e->extra_free = x->next_free;
        tw__free(e->mem, x, sizeof(*x));
    }
}

struct tw__extra *tw__keymap_find(const struct tw__engine *e, const void *key,
                                  size_t len, uint64_t hash)
{
    const struct tw__keymap *m = &e->keys;
    if (!m->n)
        return NULL;
    for (uint32_t i = (uint32_t)hash & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        struct tw__extra *x = m->slots[i];
        if (!x)
            return NULL;
        if (x->hash == hash && x->keylen == len && !memcmp(x->key, key, len))
            return x;
    }
}

static void raw_insert(struct tw__extra **slots, uint32_t cap,
                       struct tw__extra *x)
{
    uint32_t i = (uint32_t)x->hash & (cap - 1);
    while (slots[i])
        i = (i + 1) & (cap - 1);
    slots[i] = x;
}

int tw__keymap_reserve(struct tw__engine *e)
{
    struct tw__keymap *m = &e->keys;
    if ((uint64_t)(m->n + 1) * 2 <= m->cap)
        return 0; /* load stays at or under one half */
    uint32_t ncap = m->cap ? tw__wrap_mul32(m->cap, 2) : 16;
    if (ncap < m->cap) /* wrapped */
        return -ENOMEM;
    struct tw__extra **s = tw__alloc(e->mem, (size_t)ncap * sizeof(*s));
    if (!s)
        return -ENOMEM;
    memset(s, 0, (size_t)ncap * sizeof(*s));
    for (uint32_t i = 0; i < m->cap; i++)
        if (m->slots[i])
            raw_insert(s, ncap, m->slots[i]);
    tw__free(e->mem, m->slots, (size_t)m->cap * sizeof(*s));
    m->slots = s;
    m->cap = ncap;
    return 0;
}

void tw__keymap_insert(struct tw__engine *e, struct tw__extra *x)
{
    raw_insert(e->keys.slots, e->keys.cap, x);
    e->keys.n++;
}

void tw__keymap_remove(struct tw__engine *e, struct tw__extra *x)
{
    struct tw__keymap *m = &e->keys;
    uint32_t mask = m->cap - 1, i = (uint32_t)x->hash & mask;
    while (m->slots[i] != x)
        i = (i + 1) & mask;
    /* backward shift: pull later members of the probe run into the hole */
    for (uint32_t j = (i + 1) & mask; m->slots[j]; j = (j + 1) & mask) {
        uint32_t home = (uint32_t)m->slots[j]->hash & mask;
        /* move j into i unless its home lies cyclically in (i, j] */
        int stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i] = NULL;
    m->n--;
}

void tw__keymap_destroy(struct tw__engine *e)
{
    tw__free(e->mem, e->keys.slots, (size_t)e->keys.cap * sizeof(*e->keys.slots));
    memset(&e->keys, 0, sizeof(e->keys));
}
