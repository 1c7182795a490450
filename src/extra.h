/* extra.h: what keyed and periodic tasks need beyond a 32-byte entry.
 *
 * Such a task's entry carries tw__extra_marker as its callback and a
 * struct tw__extra as its argument; the record holds the user's callback
 * and argument, the period, and the key. One-shot unkeyed tasks, the common
 * case, pay nothing for this. Records are pooled per engine, and keys of up
 * to TW__INLINE_KEY bytes are stored inside the record, so steady-state
 * keyed and periodic scheduling does not allocate either. */
#ifndef TW_EXTRA_H
#define TW_EXTRA_H

#include <stddef.h>
#include <stdint.h>

#include "twheel.h"
#include "wheel.h"

#define TW__INLINE_KEY 40

enum tw__xstate {
    TW__X_IDLE = 0, /* in a list (pending) */
    TW__X_FIRING,   /* periodic callback running */
    TW__X_RESCHED,  /* running, and its next deadline was set by the user */
    TW__X_CANCELLED,/* running, and cancelled: released when it returns */
    TW__X_DRAINED,  /* running, and handed back by a drain */
};

struct tw__extra {
    tw_fn fn;
    void *arg;
    uint64_t period;     /* 0 = one-shot */
    uint64_t resched;    /* next deadline when state == TW__X_RESCHED */
    uint64_t hash;
    unsigned char *key;  /* NULL = unkeyed */
    struct tw__extra *next_free;
    uint32_t keylen;
    uint32_t slot;
    uint8_t flags;       /* TW_FIXED_RATE / TW_FIXED_DELAY */
    uint8_t state;
    uint8_t held;        /* once placed short of its tick (tw__wheel_hold) */
    unsigned char inline_key[TW__INLINE_KEY];
};

/* A periodic task taken to fire (state not IDLE) that nobody has
 * cancelled or drained since: it is still pending, and still to run or be
 * re-armed. */
static inline int tw__extra_live(const struct tw__extra *x)
{
    return x->state == TW__X_FIRING || x->state == TW__X_RESCHED;
}

/* The callback stored in every entry that has an extra record; that is how
 * such an entry is recognised. Never called: if it ever were, it says so
 * and aborts. */
void tw__extra_marker(tw_timer *t, tw_id id, void *arg);

static inline int tw__is_extra(const struct tw__entry *en)
{
    return (en->gen & 3u) == TW__GEN_EXTRA; /* and en->fn is the marker */
}

/* A zeroed record: from the pool, else allocated. NULL on -ENOMEM. */
struct tw__extra *tw__extra_get(struct tw__engine *e);
/* Frees the record's key (if allocated) and returns it to the pool. */
void tw__extra_put(struct tw__engine *e, struct tw__extra *x);
/* Copies the key into x. 0 or -ENOMEM. */
int tw__extra_set_key(struct tw__engine *e, struct tw__extra *x,
                      const void *key, size_t len, uint64_t hash);
void tw__extra_pool_destroy(struct tw__engine *e);

struct tw__extra *tw__keymap_find(const struct tw__engine *e, const void *key,
                                  size_t len, uint64_t hash);
/* Makes room for one more key. 0 or -ENOMEM. */
int tw__keymap_reserve(struct tw__engine *e);
void tw__keymap_insert(struct tw__engine *e, struct tw__extra *x);
void tw__keymap_remove(struct tw__engine *e, struct tw__extra *x);
void tw__keymap_destroy(struct tw__engine *e);

#endif
