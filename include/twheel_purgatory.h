/*
 * twheel purgatory: Kafka's DelayedOperationPurgatory, in C, on a twheel
 * timer.
 *
 * A broker parks requests that cannot be answered yet (a produce waiting
 * for replicas, a fetch waiting for bytes) as delayed operations. Each
 * waits under one or more keys until an event on a key lets it complete,
 * or until its timeout fires. Most complete long before their timeout, so
 * the timer sees a high rate of schedule + cancel, which is what twheel is
 * cheap at.
 *
 * Semantics (Kafka's, minus its known bugs):
 *   - try_complete(op) checks whether op can complete now; if so it calls
 *     tw_op_force_complete(op) and returns true;
 *   - tw_op_force_complete returns true for exactly one caller; that caller
 *     cancels the op's timeout, then runs on_complete(op) (once, ever).
 *     There tw_purgatory_delayed no longer counts the op, but where, in
 *     threaded mode, its timeout was firing at that moment: the count
 *     drops when the expiration starts;
 *   - when the timeout fires first, the timer forces completion itself and
 *     then runs on_expire(op): on_expire always comes after on_complete;
 *   - try_complete, force_complete and on_complete run under the op's own
 *     (recursive) lock and never under a watch-list lock, so on_complete
 *     and try_complete never run concurrently for one op (KAFKA-19312) and
 *     a try_complete may take any lock of yours (KAFKA-3994, KAFKA-2253);
 *     on_expire runs after that lock is released.
 *
 * Memory: an op is reference counted. The caller holds one reference from
 * tw_op_create until tw_op_release; each watch list holding it and its
 * pending timeout hold one each. The op is freed when the last goes, so
 * your data may be freed in on_complete as long as the op is not used
 * afterwards. Completed ops still listed under other keys are purged once
 * their count exceeds purge_interval and is an eighth of all entries
 * listed, which bounds the memory they hold (Kafka's out-of-memory reports
 * came from there) to purge_interval or a seventh of the live entries,
 * whichever is more, give or take what completes while a purge runs
 * (the reaper below runs at most once a tick of the timer, so a coarser
 * tick lets more complete meanwhile, and so does a driver that gets its
 * CPU late: under Kafka's benchmark at 800,000 requests/s the completed
 * entries peaked at ~13% of all listed with the default 1 ms tick, at
 * 21% to 29% with a 10 ms one, and at 18% to 29% with 1 ms in one run
 * of five on a slower two-CPU guest, its expirations 3.7 to 5.4 ms late
 * at p99); a purge visits every entry, and so costs at most eight visits
 * an entry it drops. A purge runs on the purgatory's own timer, as one
 * task (the reaper, as in Kafka): every completion (by force_complete,
 * an event or an expiration) checks whether a purge is due, so the bound
 * holds whether or not any op expires or any key is checked, and if so queues
 * the reaper, which then runs the purge in slices of ~16,384 visits
 * (~0.1 ms; a long list is left in the middle and gone on with), each at
 * least as long after the last as the last took: on the timer's driver
 * in threaded mode, which spends at most half its time purging while
 * expirations wait, and they wait for one slice, not for a visit of every
 * entry (with workers, on one worker, beside the expirations on the
 * others: one more thread running; on two CPUs, under the benchmark at
 * 800,000 requests/s, 2 workers made the expirations 3.7 to 13.9 ms late
 * at p99, 1.3 to 1.7 on the driver; a host with CPUs to spare was not
 * measured); in tw_advance, a slice an advance, with a manual timer,
 * which must be advanced for completed entries to go. The threads
 * completing ops do no purging (but during tw_purgatory_destroy, when the
 * stopped timer takes no task: a completion in `unfinished` then runs a
 * slice itself, as it does if the task cannot be scheduled at all: no
 * memory, or the timer's max_pending reached). Besides the op and
 * its entry in each watch list (88 and 16 bytes on 64-bit targets), each
 * live op has a 4-byte word in a table of the purgatory's that says
 * whether it is completed, so that a purge reads that and not the op;
 * the table keeps its largest size until it is freed, with the purgatory
 * or with the last op held past it, whichever goes last.
 *
 * Counts: tw_purgatory_watched (entries in watch lists, completed or not
 * until purged) and tw_purgatory_delayed (ops whose timeout is pending)
 * are exact and O(1) (Kafka's PurgatorySize is O(n) and counts completed
 * ops).
 *
 * Threads: with a threaded timer (the default) every function may be
 * called from any thread, callbacks included. With a manual timer the
 * purgatory is single-threaded like the timer: advance it with
 * tw_advance(tw_purgatory_timer(p), now); expirations run in tw_advance.
 */
#ifndef TWHEEL_PURGATORY_H
#define TWHEEL_PURGATORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "twheel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tw_purgatory tw_purgatory;
typedef struct tw_op tw_op;

struct tw_op_ops {
    bool (*try_complete)(tw_op *op); /* required */
    void (*on_complete)(tw_op *op);  /* required */
    void (*on_expire)(tw_op *op);    /* may be NULL */
};

/* A watch key: a byte string, copied by the purgatory. */
struct tw_key {
    const void *data;
    size_t len;
};

struct tw_purgatory_options {
    struct tw_options timer;  /* the purgatory's own timer (default: threaded,
                                 1 ms tick); its allocator serves the
                                 purgatory too (threaded, also on the
                                 driver, where expirations and the purge
                                 free: it must be thread-safe) */
    uint32_t shards;          /* watch-list shards, a power of two, at
                                 most 65536; 0 or default: 512 (Kafka's) */
    uint64_t purge_interval;  /* purge completed ops from watch lists once
                                 more than this many are still listed
                                 (and they are an eighth of all entries);
                                 default 1000 (Kafka's); UINT64_MAX: never
                                 by itself, only tw_purgatory_purge */
};

/* Fills the defaults (a threaded timer). NULL is a no-op. */
TW_API void tw_purgatory_options_init(struct tw_purgatory_options *o);

/* Creates a purgatory and its timer. o may be NULL. Returns 0, -EINVAL
 * (out NULL, shards not a power of two or above 65536, bad timer
 * options), -ENOMEM, or the timer's errors. With its own (threaded) timer,
 * a purgatory does not survive fork(): the child must not use it (see
 * twheel.h, "fork()"). */
TW_API int tw_purgatory_create(tw_purgatory **out, const struct tw_purgatory_options *o);

/* Shuts down: stops the timer (threaded; waits for expirations already
 * running) and hands every op still waiting (not completed, timeout not
 * fired) to unfinished(op, arg), which may be NULL. Those ops are neither
 * completed nor expired: their callbacks are not run. The op passed is
 * valid during the call only (tw_op_retain to keep it). Then frees every
 * list; ops the caller still holds stay valid until tw_op_release, in no
 * list and with no timeout: tw_op_ctx, tw_op_is_completed, tw_op_retain,
 * tw_op_release and tw_op_force_complete (it runs on_complete) work on
 * them, from any thread, and use nothing of the purgatory but its table of
 * completion words (above, "Memory"), freed with the last of them. Not
 * from a callback of this purgatory. From one its timer runs (an expiring
 * op's on_complete and on_expire) or from unfinished it writes a message
 * to stderr and aborts (a void call cannot report it, and going on would
 * free what the caller is running on); from on_complete run by your own
 * call to check_and_complete or force_complete it cannot tell, and the
 * call that ran it would go on over freed memory. NULL is a no-op. */
TW_API void tw_purgatory_destroy(tw_purgatory *p, void (*unfinished)(tw_op *op, void *arg),
                                 void *arg);

/* The purgatory's timer: for tw_advance and tw_next_deadline (manual),
 * tw_stats, tw_now, tw_pending, tw_wake. Owned by the purgatory: do not
 * destroy, stop or drain it, nor schedule or cancel on it (its tasks are
 * the ops' timeouts, and their references, and while a purge is due or
 * under way the reaper's: tw_pending counts one more than
 * tw_purgatory_delayed then). NULL for NULL. */
TW_API tw_timer *tw_purgatory_timer(tw_purgatory *p);

/* Creates an operation that expires timeout_ns after it is watched. ops is
 * not copied (keep it alive); ctx is yours (tw_op_ctx). *out holds one
 * reference: tw_op_release it. Returns 0, -EINVAL (NULL p, ops, out, or a
 * required callback), -ENOMEM, or, off Linux, where the op's lock is a
 * pthread mutex, pthread_mutex_init's error negated; on error *out is left
 * as it was and nothing is allocated. */
TW_API int tw_op_create(tw_purgatory *p, const struct tw_op_ops *ops, void *ctx,
                        uint64_t timeout_ns, tw_op **out);

/* References, ctx and state; any thread. NULL: a no-op, NULL, false. */
TW_API void tw_op_retain(tw_op *op);  /* one more reference */
TW_API void tw_op_release(tw_op *op); /* frees the op with the last one */
TW_API void *tw_op_ctx(const tw_op *op);
/* true once op is completed (its on_complete may still be running).
 * After a true, what the completing thread wrote before it completed op
 * (try_complete's answer to the request, say) is visible to the caller,
 * with no lock of the caller's (an acquire load). */
TW_API bool tw_op_is_completed(const tw_op *op);

/* Completes op: true for exactly one caller, who has run on_complete and
 * cancelled the timeout by the time it returns. Any thread; also from
 * try_complete (the op's lock is recursive). false for NULL. An op still
 * listed under keys adds to the completed entries listed, and when that
 * makes a purge due (above, "Memory") this call queues the reaper's task
 * on the purgatory's timer, after on_complete, and purges nothing itself
 * (but during tw_purgatory_destroy, or where the task cannot be
 * scheduled: then one slice, ~0.1 ms). */
TW_API bool tw_op_force_complete(tw_op *op);

/* Submits op (once: an op is submitted at most once). Tries to complete
 * it; if it cannot, watches it under every key, tries once more (closing
 * the race with an event between the two), and if it is still not complete
 * schedules its timeout. nkeys may be 0 (keys may then be NULL): the op
 * then waits for its timeout or a tw_op_force_complete only. Returns 1
 * only if this call completed op (as Kafka's tryCompleteElseWatch); 0 if
 * it is now watched and delayed, or if another thread completed it
 * (tw_op_is_completed tells; completed before the call, nothing is tried,
 * watched or scheduled); -EINVAL (NULL p or op, keys NULL with nkeys > 0,
 * nkeys past 2^30 - 1, a key with NULL data or length 0, an op already
 * submitted or of another purgatory); -ENOMEM, or -EAGAIN where the
 * timer's max_pending is reached (op is then neither watched nor delayed,
 * and may be submitted again); -ESHUTDOWN (timer stopped). An op that
 * another thread completes while its timeout is being scheduled, or hands
 * over with tw_purgatory_cancel_key while this call runs, returns 0 even
 * if a watch or the schedule then fails (and a handed-over op gets no
 * timeout): its on_complete has run, or the caller has it from
 * cancel_key, and an error would have the caller answer the request a
 * second time. */
TW_API int tw_purgatory_try_complete_else_watch(tw_purgatory *p, tw_op *op,
                                                const struct tw_key *keys, size_t nkeys);

/* Tries every op watched under key (under each op's lock, no list lock
 * held). Completed ops leave the key's list; a key left with no ops is
 * removed. Returns how many ops this call completed (0 for an unknown
 * key; INT_MAX if more), -EINVAL (NULL p or key, or keylen 0), or
 * -ENOMEM (nothing was tried; call again). */
TW_API int tw_purgatory_check_and_complete(tw_purgatory *p, const void *key, size_t keylen);

/* Stops watching key: every op in its list is removed from it, its timeout
 * is cancelled and it is handed to each(op, arg) (valid during the call),
 * without being completed. Completed ops not yet purged from the list are
 * handed over too (tw_op_is_completed tells). An op handed over never
 * expires: not even when another thread is submitting it and has yet to
 * schedule the timeout, nor when the threaded timer has already taken the
 * timeout to fire it (it is then dropped unrun). As Kafka's cancelForKey,
 * an op also watched under other keys stays in their lists: an event
 * there (or tw_op_force_complete) may still complete it, and
 * tw_purgatory_destroy does not hand it to `unfinished` (it no longer
 * waits on a timeout). Takes no op's lock: may be called from try_complete
 * or on_complete. Returns how many were handed over, 0 for an unknown key
 * (or NULL p or key, or keylen 0). */
TW_API size_t tw_purgatory_cancel_key(tw_purgatory *p, const void *key, size_t keylen,
                                      void (*each)(tw_op *op, void *arg), void *arg);

/* Sets the 16-byte key (copied) under which the purgatory hashes watch
 * keys, as tw_set_hash_key does for a timer: tw_purgatory_create draws a
 * random one, so that keys a client chooses (a group id) cannot be made to
 * share one shard's lock and chain. Set one only for runs that repeat
 * exactly, or from your own random source. Returns 0, -EINVAL (p or key
 * NULL), or -EBUSY while any key is watched (nothing changes). Not
 * thread-safe: call it before other threads use the purgatory. The
 * purgatory's timer (tw_purgatory_timer) keeps its own key. */
TW_API int tw_purgatory_set_hash_key(tw_purgatory *p, const unsigned char key[16]);

/* Entries in watch lists (a completed op counts until it is purged); 0
 * for NULL. */
TW_API uint64_t tw_purgatory_watched(tw_purgatory *p);
/* Ops whose timeout is pending; 0 for NULL. A timeout stops counting when
 * its expiration starts (as Kafka's numDelayed), so the op's on_complete
 * and on_expire may still be running when this reads 0:
 * tw_purgatory_destroy waits for them. */
TW_API uint64_t tw_purgatory_delayed(tw_purgatory *p);
/* Removes completed ops from every watch list now; returns how many
 * entries went (0 for NULL). (It also runs by itself past
 * purge_interval: see struct tw_purgatory_options.) Visits every entry
 * listed: O(tw_purgatory_watched). */
TW_API size_t tw_purgatory_purge(tw_purgatory *p);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_PURGATORY_H */
