/* drain.c: handing every pending task back (tw_drain; tw_stop's last
 * step, runtime.c) or dropping them all at once, and knowing whether the
 * calling thread is inside one of a timer's callbacks or drains.
 *
 * A drain takes one shard at a time, under its lock, and calls the
 * caller's function with the lock dropped, so that function may schedule
 * and cancel. While it runs, the shard's tasks wait on the expired list,
 * due or not, and the threaded driver takes nothing from it (`draining`
 * in wheel.h): a task is handed back once, or, cancelled meanwhile, not
 * at all. */
#include <stdio.h>
#include <stdlib.h>

#include "timer.h"

/* A drain with nothing to hand back, while no periodic task is taken (so
 * every task is in a list): the lists are let go whole and every slot in
 * use is freed in one pass over the slots, from the top down (the free
 * list then gives them back about in address order), where a walk of the
 * lists waits on a cache miss a task (history.md, "A drain with nothing
 * to hand back"). Each task is freed as a cancel frees it (tw__task_free:
 * its slot, its record and key if it has them, its place under
 * max_pending). No task is taken out of a list on the way, so none
 * can be missed or freed twice. Returns how many it dropped. */
static size_t drop_all(tw_timer *t, struct tw__engine *e)
{
    struct tw__pool *p = &e->pool;
    size_t n = 0;
    tw__wheel_clear(e);
    for (uint32_t k = tw__pool_slots(p); k > 0; k--) {
        uint32_t i = k - 1;
        if (*tw__pool_gen(p, i) & 3u) { /* in use: plain or extra */
            tw__task_free(t, e, i, tw__pool_entry(p, i));
            n++;
        }
    }
    e->drained += n;
    return n;
}

size_t tw__drain_shard(tw_timer *t, uint32_t si, tw_fn each)
{
    struct tw__shard *sh = &t->shards[si];
    struct tw__engine *e = &sh->eng;
    size_t n = 0;
    tw__shard_lock(t, sh);
    /* Everything goes onto the expired list, due or not, and each runs
     * with the lock dropped: the driver must not take from the list
     * meanwhile, or it would fire tasks before their time (draining). */
    e->draining++;
    if (!each && !e->taken)
        n = drop_all(t, e);
    tw__wheel_collect_all(e);
    uint32_t r;
    /* settled each time: while `each` runs unlocked, another thread may
     * cancel what is left */
    while ((tw__engine_settle(e), r = tw__expired_first(e)) != TW__EXPIRED_SENT) {
        uint32_t i = tw__ref_slot(r);
        struct tw__entry *en = tw__pool_entry(&e->pool, i);
        tw__list_unlink(e, en);
        tw_id id = tw__make_id(t, si, i, *tw__pool_gen(&e->pool, i));
        void *arg = tw__is_extra(en) ? ((struct tw__extra *)en->arg)->arg : en->arg;
        tw__task_free(t, e, i, en);
        e->drained++;
        n++;
        if (each) {
            tw__shard_unlock(t, sh);
            each(t, id, arg);
            tw__shard_lock(t, sh);
        }
    }
    /* Periodic tasks taken to fire are in no list: their callback is
     * running (manual mode: tw_drain was called from it), or, threaded,
     * they wait in the driver's batch or the workers' queue. Each is
     * handed back too and not re-armed; one still waiting does not run
     * (run_job looks first). Only these need the pass over the slots, so
     * a drain pays it only while some are taken. */
    for (uint32_t i = 0; e->taken && i < tw__pool_slots(&e->pool); i++) {
        struct tw__entry *en = tw__pool_entry(&e->pool, i);
        if (!tw__is_extra(en))
            continue;
        struct tw__extra *x = en->arg;
        if (!tw__extra_live(x))
            continue;
        x->state = TW__X_DRAINED; /* released when its job finishes */
        tw__pending_release(t);
        e->drained++;
        n++;
        if (each) {
            tw_id id = tw__make_id(t, si, i, *tw__pool_gen(&e->pool, i));
            void *arg = x->arg;
            tw__shard_unlock(t, sh);
            each(t, id, arg);
            tw__shard_lock(t, sh);
        }
    }
    /* what became due meanwhile (or was scheduled) waited: wake the
     * driver for it */
    if (!--e->draining && t->threaded)
        tw__runtime_kick(t, tw__shard_next_ns(e));
    tw__shard_unlock(t, sh);
    return n;
}

static _Thread_local struct tw__drain_ctx *tls_drain;

void tw__drain_enter(struct tw__drain_ctx *c, tw_timer *t, void *arg)
{
    c->t = t;
    c->arg = arg;
    c->prev = tls_drain;
    tls_drain = c;
}

void tw__drain_leave(struct tw__drain_ctx *c)
{
    tls_drain = c->prev;
}

size_t tw_drain(tw_timer *t, tw_fn each, void *arg)
{
    if (!t)
        return 0;
    struct tw__drain_ctx c;
    tw__drain_enter(&c, t, arg);
    size_t n = 0;
    for (uint32_t s = 0; s < t->nshards; s++)
        n += tw__drain_shard(t, s, each);
    tw__drain_leave(&c);
    return n;
}

int tw__in_callback(tw_timer *t)
{
    if (t->threaded ? tw__runtime_own_thread(t) : t->in_dispatch)
        return 1;
    for (const struct tw__drain_ctx *c = tls_drain; c; c = c->prev)
        if (c->t == t)
            return 1;
    return 0;
}

void tw__misuse(const char *what)
{
    fprintf(stderr, "twheel: %s\n", what);
    abort();
}

void *tw_drain_arg(tw_timer *t)
{
    for (const struct tw__drain_ctx *c = tls_drain; c; c = c->prev)
        if (c->t == t)
            return c->arg;
    return NULL;
}
