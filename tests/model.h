/* model.h: a reference model of a twheel timer, driven by a byte stream
 * (fuzzer input, or a seeded PRNG in test_model.c).
 *
 * The timer is a manual one, or (as the input chooses) a threaded one with
 * 1 to 8 shards and callbacks on the driver, on the model's clock: the
 * model moves that clock and calls tw_wake where it would call
 * tw_advance. It schedules nothing due at the clock's current time, so the
 * driver fires only inside tw_wake, and the checks below stay exact.
 * Callbacks schedule, cancel and reschedule in both modes; threaded, a
 * callback may also move the clock on while it runs (a long callback:
 * m_clock_jump), and the model's tw_wake then waits out the passes that
 * fire what fell due (m_advance_to). Threaded, the
 * driver takes a batch of due tasks before it runs them, so whether a
 * callback can still cancel a one-shot task due in the same pass is a
 * race, not a rule: the model accepts either answer and holds the timer to
 * the one it got. A run ends at the end of time, where every task fires
 * its last, and (threaded) with tw_stop, which must hand back nothing.
 *
 * The model keeps every task it ever scheduled with the tick at which it
 * must fire: its deadline rounded up to the tick, or the current tick when
 * that deadline had already passed at scheduling time. After each step it
 * checks the engine against it, exactly:
 *   - a callback runs only for a pending task, once, in an advance whose
 *     target tick has reached the task's tick (never early), and in
 *     nondecreasing tick order within that advance (threaded, within
 *     each shard);
 *   - after an advance, no pending task's tick is at or before the target
 *     (so nothing is late beyond the rounding to the tick);
 *   - a periodic task stays pending when it fires and comes back at the
 *     deadline its flag gives (the first point of its fixed-rate grid
 *     after now, or now + period), or where its own callback rescheduled
 *     it; cancelled or drained from its own callback, it does not; at the
 *     end of time, with no instant after now, it fires its last;
 *   - cancel, reschedule and the keyed calls return exactly what the model
 *     says they must; so does tw_deadline, asked of every task about to be
 *     cancelled or rescheduled and of each task whose callback runs,
 *     before and after it acts (the deadline as scheduled, the next one a
 *     periodic callback set, -EBUSY, or -ENOENT); tw_pending agrees, and
 *     so does tw_stats on pending, scheduled, fired, cancelled, drained
 *     and rejected tasks, advances (manual), memory_bytes (what the
 *     allocator handed out), late_max_ns and, at the end, the lateness
 *     percentiles;
 *     tw_next_deadline is never later than the earliest pending task;
 *     tw_check holds after every step;
 *   - with max_pending set, a schedule past it returns -EAGAIN;
 *   - allocation failure (the input arms the timer's allocator to fail
 *     once, at its Nth allocation from then, or at every allocation for
 *     some steps): a call that returns -ENOMEM must have met that failure
 *     and changed nothing (the model applies nothing and every later check
 *     holds it to that); tw_advance allocates nothing outside the
 *     callbacks it runs, and the driver thread allocates nothing. In half
 *     the runs the wheel's levels are made one at a time (delays are
 *     capped, and the cap grows a level now and then), each new one now
 *     and then by a reschedule, from a callback too, with one of its
 *     allocations failing.
 * Any disagreement prints the step and aborts. */
#ifndef TW_TEST_MODEL_H
#define TW_TEST_MODEL_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h> /* thrd_sleep */
#include <time.h>

#include "twheel.h"

#define MODEL_MAX_TASKS 2048
#define MODEL_LATE (1u << 16) /* lateness samples kept for the percentiles */
#define MODEL_KEYS 8

enum { M_FREE = 0, M_PENDING, M_FIRED, M_CANCELLED };

struct model;

struct mtask {
    struct model *m;
    tw_id id;
    uint64_t tick;       /* the tick at which it must fire */
    uint64_t deadline;   /* its deadline in ns (a fixed rate's grid) */
    uint64_t born;       /* advance sequence number when (re)scheduled */
    uint64_t period;     /* 0: not periodic */
    uint64_t resched;    /* set by its own callback: the next deadline */
    int flags;           /* TW_FIXED_RATE or TW_FIXED_DELAY */
    int has_resched;
    int by_driver;       /* threaded: scheduled from a callback, so into
                            the driver thread's shard */
    int state;
    int key;             /* -1 = unkeyed */
};

struct msrc {
    const uint8_t *p;
    size_t n;
    uint64_t rng; /* used when p runs out, if nonzero */
};

/* The clock's word, which the model's thread stores and a threaded
 * timer's driver loads at once: 8-byte aligned, for a uint64_t inside a
 * struct is aligned to 4 on i386, and an 8-byte atomic there may then
 * straddle two cache lines (clang -m32 refuses it, -Watomic-alignment). */
typedef uint64_t model_clock_word __attribute__((aligned(8)));

struct model {
    tw_timer *t;
    int threaded;         /* a threaded timer, driven by tw_wake */
    uint32_t nshards;     /* threaded: its shards */
    int final;            /* the last advance, to the end of time */
    pthread_t owner;      /* the thread running the model */
    uint64_t tick, wheel, now, target;
    uint64_t seq;         /* advance counter */
    int in_advance;
    int in_callback;
    struct mtask *running; /* the task whose callback runs */
    uint64_t last_tick;   /* tick of the last firing in this advance */
    int ntasks, npending;
    uint64_t max_pending;
    /* what tw_stats must say */
    uint64_t n_scheduled, n_fired, n_cancelled, n_drained, n_rejected;
    uint64_t n_advances;  /* tw_advance calls made (not from callbacks) */
    uint64_t late_max;    /* the latest firing, in ns past its deadline */
    /* Threaded, once a callback has moved the clock, the driver's pass
     * may still be counting lateness from the time it read before: a
     * firing's lateness is then known only to lie between the advance's
     * starting time's and the clock's, and late_max is checked to lie
     * within [late_max_lo, late_max], the percentiles not at all. */
    uint64_t adv_start;   /* the model's time when this advance began */
    uint64_t late_max_lo;
    int late_inexact;
    uint64_t *late;       /* every firing's lateness, up to MODEL_LATE */
    size_t nlate;
    uint64_t fired_now;   /* callbacks run in the current advance */
    uint64_t live_bytes;  /* what the timer holds from its allocator */
    /* the allocator: fail_in > 0 fails the fail_in-th allocation from now;
     * fail_steps > 0 fails every allocation for that many more steps */
    unsigned fail_in, fail_steps;
    unsigned long failures;
    /* nonzero: delays and periods stay at most this, and it grows a level
     * (x wheel) now and then, so that the levels are made one at a time
     * through the run, by whichever call first needs each, failures
     * armed or not (with no cap, the first huge delay makes them all) */
    uint64_t ceiling;
    uint64_t force_delay; /* nonzero: m_delay's next answer */
    int key_owner[MODEL_KEYS];
    struct msrc *src;
    long step;
    model_clock_word clock_value;
    /* threaded: a callback moved the clock (m_clock_jump) during this
     * advance; the model's thread reads it (atomically) between its
     * tw_wake calls, while the driver may be running a pass of its own */
    int jumped;
    int jumped_in_advance; /* the driver's re-arms may allocate */
    struct mtask tasks[MODEL_MAX_TASKS];
};

/* What the runs of a test have reached, summed over them, so that the test
 * can check the seeds still reach the regimes it exists for: steps taken
 * before the model's clock reached the end of time (where a threaded
 * timer fires nothing until the last step, and a manual one fires every
 * task at once), tasks fired there, manual and threaded, and periodic
 * re-arms refused memory by the driver (each then held short of its
 * tick: wheel.c, "Re-arming a periodic task"). */
struct model_totals {
    unsigned long steps, steps_before_end;
    unsigned long fired_before_end[2]; /* [threaded] */
    unsigned long rearms_refused;
};
static struct model_totals model_totals;

#define MODEL_FAIL(m, ...)                                                 \
    do {                                                                   \
        fprintf(stderr, "model: step %ld: ", (m)->step);                   \
        fprintf(stderr, __VA_ARGS__);                                      \
        fputc('\n', stderr);                                               \
        tw_check((m)->t, stderr);                                          \
        abort();                                                           \
    } while (0)

static inline int msrc_has(const struct msrc *s)
{
    return s->n > 0 || s->rng != 0;
}

static inline uint8_t msrc_u8(struct msrc *s)
{
    if (s->n) {
        s->n--;
        return *s->p++;
    }
    if (!s->rng)
        return 0;
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return (uint8_t)(s->rng >> 32);
}

static inline uint64_t msrc_u64(struct msrc *s)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = (v << 8) | msrc_u8(s);
    return v;
}

static inline uint64_t m_sat_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

static inline uint64_t m_ceil_tick(const struct model *m, uint64_t ns)
{
    return ns / m->tick + (ns % m->tick != 0);
}

/* The timer's clock. Threaded, the driver reads it: the model stores it
 * (release) after updating its own state, so a driver pass that sees the
 * new time sees that state too. */
static inline uint64_t model_clock(void *ctx)
{
    return __atomic_load_n((model_clock_word *)ctx, __ATOMIC_ACQUIRE);
}

/* The allocator keeps each block's size in front of it, so that the
 * model knows what the timer holds (tw_stats.memory_bytes must say the
 * same, and nothing may be left after tw_destroy). */
#define MODEL_HDR 16

static void *model_alloc(void *ctx, size_t size)
{
    struct model *m = ctx;
    /* Threaded, a periodic task re-arms from the clock after its callback
     * returns, and once a callback has moved the clock past what the
     * engine has reached, that re-arm may need a level made (and may meet
     * an injected failure: the task is then held, and must still fire on
     * time). Nothing else allocates outside a callback. */
    int rearm = m->threaded && m->jumped_in_advance && !m->in_callback &&
                !pthread_equal(pthread_self(), m->owner);
    if (m->in_advance && !m->in_callback && !rearm)
        MODEL_FAIL(m, "tw_advance allocated %zu bytes outside a callback", size);
    if (!m->in_callback && !pthread_equal(pthread_self(), m->owner) && !rearm)
        MODEL_FAIL(m, "the driver allocated %zu bytes outside a callback", size);
    if (m->fail_steps || (m->fail_in && --m->fail_in == 0)) {
        m->failures++;
        model_totals.rearms_refused += rearm;
        return NULL;
    }
    char *p = malloc(size + MODEL_HDR);
    if (!p)
        abort();
    memcpy(p, &size, sizeof size);
    m->live_bytes += size;
    return p + MODEL_HDR;
}

static void model_free(void *ctx, void *p)
{
    struct model *m = ctx;
    size_t size;
    memcpy(&size, (char *)p - MODEL_HDR, sizeof size);
    m->live_bytes -= size;
    free((char *)p - MODEL_HDR);
}

/* The result of a call that may fail for memory: 1 if it failed so (it
 * must have met the injected failure), 0 if it succeeded; anything else
 * aborts. The model applies the call only when this returns 0. */
static inline int m_result(struct model *m, const char *what, int rc,
                           unsigned long failures_before)
{
    if (rc == -ENOMEM) {
        if (m->failures == failures_before)
            MODEL_FAIL(m, "%s returned -ENOMEM with no allocation failing", what);
        return 1;
    }
    if (rc)
        MODEL_FAIL(m, "%s returned %d", what, rc);
    return 0;
}

/* Whether max_pending leaves room for a new task: 1 yes, 0 no (the call
 * must say -EAGAIN), -1 either. Threaded, from a callback, a one-shot
 * task the driver has taken for this pass no longer counts as pending,
 * though the model counts it until it runs (see m_racy). */
static inline int m_room(const struct model *m)
{
    if (!m->max_pending || (uint64_t)m->npending < m->max_pending)
        return 1;
    return m->threaded && m->in_callback ? -1 : 0;
}

/* The tick an advance to `now` reaches; the end of time reaches all. */
static inline uint64_t m_target(const struct model *m, uint64_t now)
{
    return now == UINT64_MAX ? m_ceil_tick(m, now) : now / m->tick;
}

/* The tick a task scheduled now for `deadline` must fire at. */
static inline uint64_t m_due_tick(const struct model *m, uint64_t deadline)
{
    uint64_t dt = m_ceil_tick(m, deadline), cur = m_target(m, m->now);
    return dt < cur ? cur : dt;
}

/* A delay across every scale the wheel has, including overflow. */
static inline uint64_t m_delay_any(struct model *m)
{
    uint8_t kind = msrc_u8(m->src) % 8;
    uint64_t r = msrc_u64(m->src);
    switch (kind) {
    case 0: return 0;
    case 1: return r % m->tick;
    case 2: return r % (m->tick * m->wheel);
    case 3: return r % (m->tick * m->wheel * m->wheel);
    case 4: return r % (m->tick * m->wheel * m->wheel * m->wheel * m->wheel + 1);
    case 5: return r % (1ull << 50);
    case 6: return UINT64_MAX - (r % 4);
    default: return r;
    }
}

/* A delay for a new or moved task. Threaded, at least 1 ns: nothing the
 * model schedules is due at the clock's current time, so the driver fires
 * only in the model's tw_wake, never on a pass of its own (the model's
 * clock moves only there, and stops short of the end of time until the
 * last step). */
static inline uint64_t m_delay(struct model *m)
{
    uint64_t v = m_delay_any(m);
    if (m->ceiling && v > m->ceiling)
        v %= m->ceiling + 1;
    if (m->force_delay)
        v = m->force_delay;
    return m->threaded && !v ? 1 : v;
}

/* A period across the scales, from under one tick to past 2^63 ns. */
static inline uint64_t m_period(struct model *m)
{
    uint8_t kind = msrc_u8(m->src) % 4;
    uint64_t r = msrc_u64(m->src);
    switch (kind) {
    case 0: r = 1 + r % m->tick; break;
    case 1: r = 1 + r % (m->tick * m->wheel * 2); break;
    case 2: r = 1 + r % (m->tick * m->wheel * m->wheel * m->wheel); break;
    default: r = r ? r : 1; break;
    }
    return m->ceiling && r > m->ceiling ? 1 + r % m->ceiling : r;
}

static void m_fire(tw_timer *t, tw_id id, void *arg);

/* A record for a new task: a fresh one, or once all are used, one whose
 * task has fired or been cancelled (its stale id was checked while it
 * lasted; the timer never calls back with it again), other than the one
 * whose callback is running. NULL: none free. */
static inline struct mtask *m_new(struct model *m)
{
    struct mtask *k = NULL;
    if (m->ntasks < MODEL_MAX_TASKS) {
        k = &m->tasks[m->ntasks++];
    } else {
        uint32_t at = ((uint32_t)msrc_u8(m->src) << 8 | msrc_u8(m->src)) % MODEL_MAX_TASKS;
        for (int n = 0; n < 64 && !k; n++, at = (at + 1) % MODEL_MAX_TASKS)
            if (m->tasks[at].state != M_PENDING && &m->tasks[at] != m->running)
                k = &m->tasks[at];
        if (!k)
            return NULL;
    }
    memset(k, 0, sizeof(*k));
    k->m = m;
    k->key = -1;
    return k; /* M_FREE until added */
}

/* Whether a call that adds a task was answered as it must be: -EAGAIN
 * exactly when max_pending is reached (room, from m_room), else 0, or
 * -ENOMEM after an injected failure. Returns 1 when the task was added. */
static inline int m_added(struct model *m, struct mtask *k, const char *what,
                          int rc, unsigned long failures_before, int room)
{
    if (!room || (room < 0 && rc == -EAGAIN)) {
        if (rc != -EAGAIN)
            MODEL_FAIL(m, "%s past max_pending returned %d", what, rc);
        m->n_rejected++; /* the timer counts the refusal */
        return 0; /* k stays M_FREE */
    }
    if (m_result(m, what, rc, failures_before))
        return 0;
    if (k->id == 0)
        MODEL_FAIL(m, "%s gave id 0", what);
    return 1;
}

/* Task k was just added to the timer, due at `deadline`. */
static inline void m_pending(struct model *m, struct mtask *k, uint64_t deadline)
{
    k->deadline = deadline;
    k->tick = m_due_tick(m, deadline);
    k->state = M_PENDING;
    k->born = m->seq;
    k->by_driver = m->threaded && m->in_callback;
    m->npending++;
    m->n_scheduled++;
}

/* Threaded, from a callback: whether task k is due in this driver pass
 * and has not run yet. The driver takes due tasks in batches before it
 * runs them, so k may already be taken: a one-shot task taken is no
 * longer pending (cancel and reschedule say -ENOENT, and it runs in this
 * pass); a periodic one can still be cancelled. Which it is, is the
 * driver's business, so the model accepts either outcome and then holds
 * the timer to the one it got. */
static inline int m_racy(const struct model *m, const struct mtask *k)
{
    return m->threaded && m->in_callback && k->state == M_PENDING &&
           k != m->running && k->tick <= m->target && k->born != m->seq;
}

static inline void m_schedule(struct model *m, int absolute)
{
    struct mtask *k = m_new(m);
    if (!k)
        return;
    uint64_t deadline, v = m_delay(m);
    unsigned long f = m->failures;
    int rc;
    if (absolute) {
        /* around now: past and future deadlines alike */
        deadline = (msrc_u8(m->src) & 1) ? m_sat_add(m->now, v) : (m->now > v ? m->now - v : 0);
        if (m->threaded && deadline <= m->now) /* see m_delay */
            deadline = m->now + 1;
        rc = tw_schedule_at(m->t, deadline, m_fire, k, &k->id);
    } else {
        deadline = m_sat_add(m->now, v);
        rc = tw_schedule(m->t, v, m_fire, k, &k->id);
    }
    if (m_added(m, k, "schedule", rc, f, m_room(m)))
        m_pending(m, k, deadline);
}

static inline void m_schedule_every(struct model *m)
{
    struct mtask *k = m_new(m);
    if (!k)
        return;
    uint64_t v = m_delay(m), period = m_period(m);
    int flags = (msrc_u8(m->src) & 1) ? TW_FIXED_RATE : TW_FIXED_DELAY;
    unsigned long f = m->failures;
    int rc = tw_schedule_every(m->t, v, period, flags, m_fire, k, &k->id);
    if (m_added(m, k, "schedule_every", rc, f, m_room(m))) {
        k->period = period;
        k->flags = flags;
        m_pending(m, k, m_sat_add(m->now, v));
    }
}

static inline void m_schedule_keyed(struct model *m)
{
    int key = msrc_u8(m->src) % MODEL_KEYS;
    if (m->key_owner[key] >= 0 && m_racy(m, &m->tasks[m->key_owner[key]]))
        return; /* replaced, or taken with its key: a race (see m_racy) */
    struct mtask *k = m_new(m);
    if (!k)
        return;
    char name[24];
    int len = snprintf(name, sizeof name, "key-%d", key);
    uint64_t v = m_delay(m);
    unsigned long f = m->failures;
    int rc = tw_schedule_keyed(m->t, name, (size_t)len, v, m_fire, k, &k->id);
    int old = m->key_owner[key];
    int replaces = old >= 0 && m->tasks[old].state == M_PENDING;
    /* a replacement takes its old task's place: no admission needed */
    if (!m_added(m, k, "schedule_keyed", rc, f, replaces ? 1 : m_room(m)))
        return; /* the old task stays pending */
    if (replaces) {
        m->tasks[old].state = M_CANCELLED;
        m->npending--;
        m->n_cancelled++;
    }
    m_pending(m, k, m_sat_add(m->now, v));
    k->key = key;
    m->key_owner[key] = (int)(k - m->tasks);
}

/* A task to cancel or reschedule: any the model has a record of (stale
 * ids included), or, from a callback, now and then one due in this same
 * advance that has not run yet, where the timer is busiest. */
static inline struct mtask *m_pick(struct model *m)
{
    if (!m->ntasks)
        return NULL;
    uint32_t at = msrc_u8(m->src) % m->ntasks;
    if (m->in_callback && (msrc_u8(m->src) & 3) == 0) {
        for (int n = 0; n < m->ntasks; n++, at = (at + 1) % m->ntasks) {
            struct mtask *k = &m->tasks[at];
            if (k->state == M_PENDING && k != m->running &&
                k->tick <= m->target && k->born != m->seq)
                return k;
        }
    }
    return &m->tasks[at];
}

static inline void m_drop_key(struct model *m, struct mtask *k)
{
    if (k->key >= 0 && m->key_owner[k->key] == (int)(k - m->tasks))
        m->key_owner[k->key] = -1;
}

/* tw_deadline on task k must say what the model knows: its deadline while
 * pending, the one its callback set while that runs (-EBUSY if none),
 * -ENOENT once it is gone; and it must write nothing when it fails. Run
 * on every task about to be cancelled or rescheduled (so that it meets
 * the same states they do) and on each task whose callback runs, before
 * and after the callback acts; it draws nothing from the input, so the
 * fuzzer's corpus keeps its meaning. */
static inline void m_check_deadline(struct model *m, const struct mtask *k)
{
    const uint64_t sentinel = 0x5eed5eed5eed5eedull;
    uint64_t got = sentinel;
    int rc = tw_deadline(m->t, k->id, &got), want = -ENOENT;
    uint64_t wantd = sentinel;
    if (k->state == M_PENDING && k == m->running) {
        want = k->has_resched ? 0 : -EBUSY;
        wantd = k->has_resched ? k->resched : sentinel;
    } else if (k->state == M_PENDING) {
        want = 0;
        wantd = k->deadline;
    }
    /* taken by the driver for this pass: gone (one-shot) or firing
     * (periodic), or not yet taken (see m_racy) */
    if (m_racy(m, k) && rc == (k->period ? -EBUSY : -ENOENT)) {
        want = rc;
        wantd = sentinel;
    }
    if (rc != want || got != wantd)
        MODEL_FAIL(m, "deadline of task %ld (state %d) returned %d and %llu, "
                   "want %d and %llu", (long)(k - m->tasks), k->state, rc,
                   (unsigned long long)got, want, (unsigned long long)wantd);
}

static inline void m_cancel(struct model *m)
{
    struct mtask *k = m_pick(m);
    if (!k)
        return;
    m_check_deadline(m, k);
    int racy = m_racy(m, k) && !k->period;
    int rc = tw_cancel(m->t, k->id), want = k->state == M_PENDING ? 0 : -ENOENT;
    if (racy && rc == -ENOENT)
        return; /* taken: it must run in this pass (m_advance_to checks) */
    if (rc != want)
        MODEL_FAIL(m, "cancel of task %ld (state %d) returned %d, want %d",
                   (long)(k - m->tasks), k->state, rc, want);
    if (!rc) {
        k->state = M_CANCELLED;
        m->npending--;
        m->n_cancelled++;
        m_drop_key(m, k);
    }
}

static inline void m_cancel_keyed(struct model *m)
{
    int key = msrc_u8(m->src) % MODEL_KEYS;
    char name[24];
    int len = snprintf(name, sizeof name, "key-%d", key);
    int owner = m->key_owner[key];
    if (owner >= 0 && m_racy(m, &m->tasks[owner]))
        return; /* see m_schedule_keyed */
    int want = owner >= 0 && m->tasks[owner].state == M_PENDING ? 0 : -ENOENT;
    int rc = tw_cancel_keyed(m->t, name, (size_t)len);
    if (rc != want)
        MODEL_FAIL(m, "cancel_keyed(%d) returned %d, want %d", key, rc, want);
    if (!rc) {
        m->tasks[owner].state = M_CANCELLED;
        m->npending--;
        m->n_cancelled++;
        m->key_owner[key] = -1;
    }
}

static inline void m_reschedule_task(struct model *m, struct mtask *k)
{
    m_check_deadline(m, k);
    uint64_t v = m_delay(m), d = m_sat_add(m->now, v);
    /* tw_reschedule_at half the time: to the same instant, or (unless a
     * new level is wanted) to one as far in the past, due now */
    uint8_t how = msrc_u8(m->src);
    int absolute = how & 1;
    if (absolute && (how & 2) && !m->force_delay) {
        d = m->now > v ? m->now - v : 0;
        if (m->threaded && d <= m->now) /* see m_delay */
            d = m->now + 1;
    }
    int racy = m_racy(m, k);
    /* a periodic task taken would run in this pass and then come back at
     * d, one not taken would move to d: the model does not follow that */
    if (racy && k->period)
        return;
    unsigned long f = m->failures;
    int rc = absolute ? tw_reschedule_at(m->t, k->id, d) : tw_reschedule(m->t, k->id, v);
    if (racy && rc == -ENOENT)
        return; /* taken: it runs in this pass */
    if (k->state != M_PENDING) {
        if (rc != -ENOENT)
            MODEL_FAIL(m, "reschedule%s of task %ld (state %d) returned %d",
                       absolute ? "_at" : "", (long)(k - m->tasks), k->state, rc);
        return;
    }
    if (m_result(m, "reschedule", rc, f))
        return; /* the task keeps its deadline (and its period) */
    if (k == m->running) { /* from its own callback: sets the next firing */
        k->has_resched = 1;
        k->resched = d;
        return;
    }
    k->deadline = d; /* a fixed rate's grid starts again from here */
    k->tick = m_due_tick(m, d);
    k->born = m->seq; /* moved back into the wheel */
}

static inline void m_reschedule(struct model *m)
{
    struct mtask *k = m_pick(m);
    if (k)
        m_reschedule_task(m, k);
}

/* With the levels made one at a time (ceiling): a reschedule of task k
 * (NULL: a task picked at random) that makes a level, often with one of
 * the allocations that takes failing (the delay queue's room, the
 * buckets, the list heads): the task must keep its place, or its next
 * firing when k is the periodic task whose callback is running. */
static inline void m_reschedule_new_level(struct model *m, struct mtask *k)
{
    uint8_t b = msrc_u8(m->src);
    if (!m->ceiling || m->ceiling > UINT64_MAX / m->wheel || b >= 128)
        return;
    if (b & 1)
        m->fail_in = 1 + (b >> 1) % 4;
    m->force_delay = m->ceiling * m->wheel;
    if (!k)
        k = m_pick(m);
    if (k)
        m_reschedule_task(m, k);
    m->force_delay = 0;
}

static void m_drain_each(tw_timer *t, tw_id id, void *arg)
{
    struct mtask *k = arg;
    struct model *m = k->m;
    if (tw_drain_arg(t) != m)
        MODEL_FAIL(m, "tw_drain_arg is not the drain's arg");
    if (k->id != id || k->state != M_PENDING)
        MODEL_FAIL(m, "drain handed back a task that is not pending");
    k->state = M_CANCELLED;
    m->npending--;
    m_drop_key(m, k);
}

/* Drains everything: each pending task once, the running periodic task
 * included (it does not come back). With no callback (each = 0) the
 * timer hands nothing back and the model drops its pending tasks itself;
 * a timer whose tasks are all plain then drops its lists whole (tw_drain
 * in the header), and the ids must go stale all the same. */
static inline void m_drain(struct model *m, int each)
{
    size_t want = (size_t)m->npending, got = tw_drain(m->t, each ? m_drain_each : NULL, m);
    for (int n = 0; !each && n < m->ntasks; n++) {
        struct mtask *k = &m->tasks[n];
        if (k->state == M_PENDING) {
            k->state = M_CANCELLED;
            m->npending--;
            m_drop_key(m, k);
        }
    }
    if (got != want)
        MODEL_FAIL(m, "drain handed back %zu tasks, want %zu", got, want);
    if (m->npending != 0)
        MODEL_FAIL(m, "%d tasks pending after a drain", m->npending);
    m->n_drained += got;
}

/* Threaded, from a callback: the clock moves on while the callback runs
 * (a long callback, or a driver that fell behind), by `op`'s choice of
 * scale. The driver's pass goes on at the time it read; the re-arms of
 * periodic tasks that return from now on count from the new time, ahead
 * of the engine's, perhaps past every level made; tasks due by the new
 * time fire in a later pass, which the driver starts by itself and the
 * model's tw_wake loop waits for (m_advance_to). A task scheduled before
 * the move may fire in this advance, so the move opens a new sequence
 * number; nothing scheduled after it is due before a later move. */
static inline void m_clock_jump(struct model *m, uint8_t op)
{
    uint64_t r = msrc_u64(m->src), span, to;
    uint64_t lv1 = m->tick * m->wheel, top = m->ceiling ? m->ceiling : lv1 * m->wheel;
    switch ((op >> 3) & 3) {
    case 0: span = lv1; break;                  /* within a level or two */
    case 1: /* past the levels made, when they are made one at a time */
        if (__builtin_mul_overflow(top, m->wheel * 2, &span))
            span = UINT64_MAX;
        break;
    case 2: span = 1ull << 40; break;
    default: span = 1ull << 52; break;
    }
    to = m_sat_add(m->now, 1 + r % span);
    if (to >= UINT64_MAX - 1)
        to = UINT64_MAX - 1; /* the end of time is the last step's (m_delay) */
    if (to <= m->now)
        return;
    m->now = to;
    m->target = m_target(m, m->now);
    m->seq++;
    m->jumped_in_advance = 1;
    /* now and then the next allocation fails, so that a re-arm that needs
     * a level has none, and its task is held short of its tick */
    if ((op >> 5) & 1)
        m->fail_in = 1;
    __atomic_store_n(&m->jumped, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&m->clock_value, m->now, __ATOMIC_RELEASE);
}

/* What a callback may do: anything but advance. */
static inline void m_callback_ops(struct model *m)
{
    uint8_t op = msrc_u8(m->src);
    switch (op % 8) {
    case 0: m_schedule(m, 0); break;
    case 1: m_cancel(m); break;
    case 2: m_reschedule(m); break;
    case 3: m_schedule_keyed(m); break;
    case 4: m_cancel_keyed(m); break;
    case 5: m_schedule_every(m); break;
    case 6:
        /* rare; threaded, the one-shot tasks the driver has taken are not
         * pending and run after the drain: a race the model leaves alone.
         * Threaded, the clock moves instead. */
        if (m->threaded)
            m_clock_jump(m, op);
        else if (op < 32)
            m_drain(m, (op >> 3) & 1);
        break;
    default:
        if (m->running && m->running->period) /* its next firing, far out */
            m_reschedule_new_level(m, m->running);
        break;
    }
}

/* Periodic task k's callback has returned, and k is still pending: where
 * it must come back. Written from the header's contract, not from the
 * timer's arithmetic. */
static inline void m_rearm(struct model *m, struct mtask *k)
{
    uint64_t next;
    if (!k->has_resched && m->now == UINT64_MAX) {
        /* no instant lies after the end of time: that firing was its last */
        k->state = M_FIRED;
        m->npending--;
        return;
    }
    if (k->has_resched) {
        next = k->resched;
    } else if (k->flags == TW_FIXED_DELAY) {
        next = m_sat_add(m->now, k->period);
    } else {
        /* the first deadline + j * period (j >= 1) after now */
        if (k->deadline > m->now)
            MODEL_FAIL(m, "periodic task %ld fired before its deadline",
                       (long)(k - m->tasks));
        uint64_t j = (m->now - k->deadline) / k->period, n;
        /* j + 1 periods past the deadline, saturating (any overflow
         * lands past UINT64_MAX) */
        if (__builtin_mul_overflow(j, k->period, &n) ||
            __builtin_add_overflow(n, k->period, &n) ||
            __builtin_add_overflow(n, k->deadline, &n))
            n = UINT64_MAX;
        next = n;
    }
    k->has_resched = 0;
    k->deadline = next;
    k->tick = m_due_tick(m, next);
    k->born = m->seq; /* back in the wheel: not again in this advance */
}

static void m_fire(tw_timer *t, tw_id id, void *arg)
{
    struct mtask *k = arg;
    struct model *m = k->m;
    if (!m->in_advance)
        MODEL_FAIL(m, "callback outside tw_advance");
    if (m->in_callback)
        MODEL_FAIL(m, "callback inside a callback");
    if (k->id != id)
        MODEL_FAIL(m, "callback id mismatch");
    if (k->state != M_PENDING)
        MODEL_FAIL(m, "task %ld fired in state %d", (long)(k - m->tasks), k->state);
    if (k->born == m->seq)
        MODEL_FAIL(m, "task %ld (re)scheduled during this advance fired in it",
                   (long)(k - m->tasks));
    if (k->tick > m->target)
        MODEL_FAIL(m, "task %ld fired early: tick %llu, target %llu",
                   (long)(k - m->tasks), (unsigned long long)k->tick,
                   (unsigned long long)m->target);
    /* Order holds within a shard: the driver fires one shard's due tasks,
     * then the next's. The model's own thread schedules into one shard,
     * the driver (from callbacks) into another; a keyed task goes to its
     * key's. */
    int ordered = !m->threaded || m->nshards == 1 || (k->key < 0 && !k->by_driver);
    if (ordered && k->tick < m->last_tick)
        MODEL_FAIL(m, "task %ld fired out of order: tick %llu after %llu",
                   (long)(k - m->tasks), (unsigned long long)k->tick,
                   (unsigned long long)m->last_tick);
    if (ordered)
        m->last_tick = k->tick;
    m->n_fired++;
    uint64_t late_lo = m->adv_start > k->deadline ? m->adv_start - k->deadline : 0;
    if (late_lo != m->now - k->deadline)
        m->late_inexact = 1;
    if (late_lo > m->late_max_lo)
        m->late_max_lo = late_lo;
    if (m->now - k->deadline > m->late_max) /* deadline <= now: not early */
        m->late_max = m->now - k->deadline;
    if (m->nlate < MODEL_LATE)
        m->late[m->nlate] = m->now - k->deadline;
    m->nlate++;
    m->fired_now++;
    if (!m->final && m->now < UINT64_MAX - 1)
        model_totals.fired_before_end[m->threaded]++;
    m->running = k;
    if (!k->period) { /* a periodic task stays pending until cancelled */
        k->state = M_FIRED;
        m->npending--;
        m_drop_key(m, k);
    }
    m->in_callback = 1;
    if (m->threaded) {
        if (tw_advance(t, m->now) != -EPERM)
            MODEL_FAIL(m, "tw_advance on a threaded timer did not say EPERM");
        if (tw_wake(t) != -EDEADLK)
            MODEL_FAIL(m, "tw_wake from a callback did not say EDEADLK");
    } else if (tw_advance(t, m->now) != -EDEADLK) {
        MODEL_FAIL(m, "tw_advance from a callback did not say EDEADLK");
    }
    m_check_deadline(m, k); /* gone (one-shot), or -EBUSY (periodic) */
    if (msrc_has(m->src) && msrc_u8(m->src) < 64)
        m_callback_ops(m);
    m_check_deadline(m, k); /* and the next firing, if the callback set it */
    m->in_callback = 0;
    m->running = NULL;
    if (k->period && k->state == M_PENDING) /* not cancelled or drained */
        m_rearm(m, k);
}

/* Runs tw_advance(to), or threaded, moves the clock to `to` and calls
 * tw_wake, and checks that it fired everything due. */
static inline void m_advance_to(struct model *m, uint64_t to)
{
    if (m->threaded && !m->final && to == UINT64_MAX)
        to = UINT64_MAX - 1; /* see m_delay */
    if (to > m->now)
        m->now = to;
    m->target = m_target(m, m->now);
    m->adv_start = m->now;
    m->seq++;
    m->in_advance = 1;
    m->last_tick = 0;
    m->fired_now = 0;
    if (m->threaded) {
        m->jumped_in_advance = 0;
        __atomic_store_n(&m->jumped, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&m->clock_value, m->now, __ATOMIC_RELEASE);
        int rc = tw_wake(m->t); /* returns once the callbacks have run */
        /* A callback moved the clock: what fell due by the new time fires
         * in later passes. Each tw_wake waits for a pass begun after the
         * call; one begun after the last move, which read its time, ends
         * the advance. Until then the driver may run passes of its own:
         * the model's thread touches nothing of the model meanwhile. */
        while (rc == 0 && __atomic_exchange_n(&m->jumped, 0, __ATOMIC_RELAXED))
            rc = tw_wake(m->t);
        m->in_advance = 0;
        if (rc)
            MODEL_FAIL(m, "tw_wake returned %d", rc);
    } else {
        m->n_advances++;
        int rc = tw_advance(m->t, to);
        m->in_advance = 0;
        if (rc < 0)
            MODEL_FAIL(m, "advance returned %d", rc);
        if ((uint64_t)rc != m->fired_now)
            MODEL_FAIL(m, "advance returned %d, and ran %llu callbacks", rc,
                       (unsigned long long)m->fired_now);
    }
    if (tw_now(m->t) != m->now)
        MODEL_FAIL(m, "tw_now %llu, model %llu", (unsigned long long)tw_now(m->t),
                   (unsigned long long)m->now);
    for (int i = 0; i < m->ntasks; i++) {
        struct mtask *k = &m->tasks[i];
        if (k->state == M_PENDING && k->tick <= m->target && k->born != m->seq)
            MODEL_FAIL(m, "task %d due at tick %llu still pending at %llu", i,
                       (unsigned long long)k->tick, (unsigned long long)m->target);
    }
}

static inline void m_advance(struct model *m)
{
    uint8_t kind = msrc_u8(m->src) % 8;
    uint64_t r = msrc_u64(m->src), to;
    switch (kind) {
    case 0: to = m->now; break;
    case 1: to = m->now - (m->now > r % (m->tick * 4) ? r % (m->tick * 4) : m->now); break;
    case 2: to = m_sat_add(m->now, r % m->tick); break;
    case 3: to = m_sat_add(m->now, r % (m->tick * m->wheel)); break;
    case 4: to = m_sat_add(m->now, r % (m->tick * m->wheel * m->wheel * m->wheel)); break;
    case 5: {
        uint64_t d;
        to = tw_next_deadline(m->t, &d) == 0 ? d : m->now;
        break;
    }
    case 6: to = m_sat_add(m->now, r % (1ull << 52)); break;
    /* any scale, each power of two alike: a plain 64-bit jump would reach
     * the end of time within a few advances, and a run would spend the
     * rest of its steps there (threaded, firing nothing) */
    default: to = m_sat_add(m->now, r >> (msrc_u8(m->src) % 64)); break;
    }
    m_advance_to(m, to);
}

static inline void m_verify(struct model *m)
{
    if (tw_check(m->t, stderr) != 0)
        MODEL_FAIL(m, "tw_check failed");
    if ((int)tw_pending(m->t) != m->npending)
        MODEL_FAIL(m, "tw_pending %zu, model %d", tw_pending(m->t), m->npending);
    struct tw_stats st;
    tw_stats(m->t, &st);
    if (st.pending != (uint64_t)m->npending || st.scheduled != m->n_scheduled ||
        st.fired != m->n_fired || st.cancelled != m->n_cancelled ||
        st.drained != m->n_drained || st.rejected != m->n_rejected ||
        (m->late_inexact ? st.late_max_ns < m->late_max_lo || st.late_max_ns > m->late_max
                         : st.late_max_ns != m->late_max) ||
        st.memory_bytes != m->live_bytes ||
        (!m->threaded && st.advances != m->n_advances))
        MODEL_FAIL(m, "tw_stats pending/scheduled/fired/cancelled/drained/rejected/"
                   "late_max/memory/advances %llu/%llu/%llu/%llu/%llu/%llu/%llu/%llu/%llu, "
                   "model %d/%llu/%llu/%llu/%llu/%llu/%llu/%llu/%llu",
                   (unsigned long long)st.pending, (unsigned long long)st.scheduled,
                   (unsigned long long)st.fired, (unsigned long long)st.cancelled,
                   (unsigned long long)st.drained, (unsigned long long)st.rejected,
                   (unsigned long long)st.late_max_ns, (unsigned long long)st.memory_bytes,
                   (unsigned long long)st.advances, m->npending, (unsigned long long)m->n_scheduled,
                   (unsigned long long)m->n_fired, (unsigned long long)m->n_cancelled,
                   (unsigned long long)m->n_drained, (unsigned long long)m->n_rejected,
                   (unsigned long long)m->late_max, (unsigned long long)m->live_bytes,
                   (unsigned long long)m->n_advances);
    uint64_t d, earliest = UINT64_MAX;
    for (int i = 0; i < m->ntasks; i++)
        if (m->tasks[i].state == M_PENDING && m->tasks[i].tick < earliest)
            earliest = m->tasks[i].tick;
    int rc = tw_next_deadline(m->t, &d);
    if (!m->npending) {
        if (rc != -ENOENT)
            MODEL_FAIL(m, "next_deadline %d with nothing pending", rc);
    } else if (rc != 0) {
        MODEL_FAIL(m, "next_deadline %d with tasks pending", rc);
    } else if (d / m->tick > earliest) {
        MODEL_FAIL(m, "next_deadline %llu later than the earliest task's tick %llu",
                   (unsigned long long)d, (unsigned long long)earliest);
    }
}

static int m_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* tw_stats' lateness percentiles, from every sample the model kept (when
 * it kept them all): the upper bound of the power-of-two bucket that holds
 * the sample at rank floor(q * n), no more than the maximum. */
static inline void m_verify_percentiles(struct model *m)
{
    if (!m->nlate || m->nlate > MODEL_LATE || m->late_inexact)
        return;
    struct tw_stats st;
    tw_stats(m->t, &st);
    qsort(m->late, m->nlate, sizeof(*m->late), m_cmp_u64);
    static const double q[2] = { 0.50, 0.99 };
    for (int i = 0; i < 2; i++) {
        size_t r = (size_t)(q[i] * (double)m->nlate);
        uint64_t x = m->late[r < m->nlate ? r : m->nlate - 1], want;
        int bits = x ? 64 - __builtin_clzll(x) : 0;
        want = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
        if (want > m->late_max)
            want = m->late_max;
        uint64_t got = i ? st.late_p99_ns : st.late_p50_ns;
        if (got != want)
            MODEL_FAIL(m, "late_p%d_ns %llu, want %llu (sample %llu of %zu)",
                       i ? 99 : 50, (unsigned long long)got,
                       (unsigned long long)want, (unsigned long long)x, m->nlate);
    }
}

/* Runs the model over a byte stream, on a threaded timer for one stream
 * in `threaded_one_in` (as its second byte says; 0: never), with a wheel
 * of `wheel` slots a level, or 0 for one the stream picks (2, 4, 8 or
 * 64: small wheels, whose levels a short run fills and passes). Returns
 * the number of steps. */
/* The task model_run schedules last, threaded, at the end of time. */
static void m_end_fire(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

static inline long model_run(struct msrc *src, long max_steps, unsigned threaded_one_in,
                             uint32_t wheel)
{
    static const uint64_t ticks[] = { 1, 3, 1000, 1000000 };
    static const uint32_t wheels[] = { 2, 4, 8, 64 };
    struct model *m = calloc(1, sizeof(*m));
    if (!m || !(m->late = malloc(MODEL_LATE * sizeof(*m->late))))
        abort();
    m->src = src;
    uint8_t g = msrc_u8(src);
    m->tick = ticks[g & 3];
    m->wheel = wheel ? wheel : wheels[(g >> 2) & 3];
    uint64_t start = (g >> 4) & 1 ? msrc_u64(src) : 0;
    if ((g >> 5) & 1 && msrc_u8(src) < 64) /* one run in eight: near the end */
        start = UINT64_MAX - (start % (1ull << 40));
    if ((g >> 6) & 1)
        m->max_pending = 1 + msrc_u8(src) % 64;
    /* allocations failing from the first step (after tw_create), while
     * levels and the pool are still being made */
    unsigned fail_first = (g >> 7) & 1 ? 1 + msrc_u8(src) % 64 : 0;
    /* threaded (a driver thread, callbacks on it), over 1 to 8 shards */
    uint8_t h = msrc_u8(src);
    m->threaded = threaded_one_in && (h >> 3) % threaded_one_in == 0;
    if (h & 1) /* levels made one at a time (see ceiling) */
        m->ceiling = m->tick * m->wheel;
    if (m->threaded && start == UINT64_MAX)
        start--; /* see m_delay */
    m->owner = pthread_self();
    for (int k = 0; k < MODEL_KEYS; k++)
        m->key_owner[k] = -1;
    struct tw_options o;
    tw_options_init(&o);
    o.tick_ns = m->tick;
    o.wheel_size = (uint32_t)m->wheel;
    o.max_pending = m->max_pending;
    o.allocator.alloc = model_alloc;
    o.allocator.free = model_free;
    o.allocator.ctx = m;
    if (m->threaded) {
        o.threaded = 1;
        o.shards = m->nshards = 1u << ((h >> 1) & 3);
    }
    m->now = start;
    /* manual mode reads its clock once, at creation; threaded, the driver
     * reads it at every pass, and a schedule at every call */
    m->clock_value = start;
    o.clock = model_clock;
    o.clock_ctx = &m->clock_value;
    if (tw_create(&m->t, &o) != 0)
        abort();
    /* a fixed hash key, so that a seed or a fuzz input replays exactly:
     * which shard each key lands on follows from it */
    static const unsigned char hkey[16] = "model.h hashkey";
    if (tw_set_hash_key(m->t, hkey) != 0)
        abort();
    m->fail_steps = fail_first;
    long steps = 0;
    while (steps < max_steps && msrc_has(src)) {
        m->step = steps++;
        uint8_t op = msrc_u8(src);
        unsigned failing = m->fail_steps; /* counted from the next step */
        if (m->ceiling && msrc_u8(src) < 32) { /* one level more */
            m_reschedule_new_level(m, NULL);
            m->ceiling = m->ceiling > UINT64_MAX / m->wheel ? 0 : m->ceiling * m->wheel;
        }
        switch (op % 16) {
        case 0: case 1: case 2: case 3: m_schedule(m, 0); break;
        case 4: m_schedule(m, 1); break;
        case 5: case 6: m_cancel(m); break;
        case 7: m_reschedule(m); break;
        case 8: m_schedule_keyed(m); break;
        case 9: m_cancel_keyed(m); break;
        case 12: m_schedule_every(m); break;
        case 13:
            if (op >> 4 == 0) {
                uint8_t b = msrc_u8(src);
                if (b < 8) /* rare: drain everything, with or without each */
                    m_drain(m, b & 1);
            } else if (op >> 4 < 4) {
                /* one allocation fails: the Nth from now, whichever call
                 * (or callback) makes it */
                m->fail_in = 1 + msrc_u8(src) % 8;
            } else if (op >> 4 < 6) {
                /* every allocation fails for a few steps: the pool's
                 * growth and new levels too, not only keys and records */
                m->fail_steps = 1 + msrc_u8(src) % 16;
            } else {
                m_advance(m);
            }
            break;
        default: m_advance(m); break;
        }
        if (failing)
            m->fail_steps--;
        model_totals.steps++;
        model_totals.steps_before_end += m->now < UINT64_MAX - 1;
        m_verify(m);
    }
    /* the end: everything still pending fires when time runs out */
    m->step = steps;
    m->fail_in = m->fail_steps = 0;
    m->src->n = 0;
    m->src->rng = 0; /* callbacks do nothing more */
    m->final = 1;
    m_advance_to(m, UINT64_MAX);
    /* periodic tasks included: a firing at the end of time is the last
     * (threaded, a driver that re-armed them would fire them without end,
     * and the checks below, tw_stop's, would see it) */
    for (int i = 0; i < m->ntasks; i++) {
        struct mtask *k = &m->tasks[i];
        if (k->state == M_PENDING)
            MODEL_FAIL(m, "task %d left pending after the end of time", i);
    }
    m_drain(m, 1);
    if (tw_pending(m->t) != 0)
        MODEL_FAIL(m, "%zu tasks left after the end of time", tw_pending(m->t));
    m_verify(m);
    m_verify_percentiles(m);
    if (m->threaded) {
        /* Nothing is pending and the clock is at the end of time, where
         * the driver sleeps until kicked: a task scheduled now is due at
         * once and must wake it, with no tw_wake (on a 1 ns tick its
         * bucket is at tick UINT64_MAX, which also means "no bucket").
         * The one wait on real time here: microseconds, 30 s allowed. */
        int done = 0;
        if (tw_schedule(m->t, 1, m_end_fire, &done, NULL) != 0)
            MODEL_FAIL(m, "tw_schedule at the end of time failed");
        for (long n = 0; n < 300000 && !__atomic_load_n(&done, __ATOMIC_ACQUIRE); n++)
            thrd_sleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
        if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE))
            MODEL_FAIL(m, "a task due at the end of time did not wake the driver");
        if (tw_stop(m->t, NULL, NULL) != 0)
            MODEL_FAIL(m, "tw_stop handed back tasks after the end of time");
        if (tw_schedule(m->t, 1, m_fire, NULL, NULL) != -ESHUTDOWN)
            MODEL_FAIL(m, "tw_schedule after tw_stop did not say ESHUTDOWN");
    }
    tw_destroy(m->t);
    m->t = NULL;
    if (m->live_bytes != 0)
        MODEL_FAIL(m, "%llu bytes left allocated after tw_destroy",
                   (unsigned long long)m->live_bytes);
    free(m->late);
    free(m);
    return steps;
}

#endif
