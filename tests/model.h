/* model.h: a reference model of a manual twheel timer, driven by a byte
 * stream (fuzzer input, or a seeded PRNG in test_model.c).
 *
 * The model keeps every task it ever scheduled with the tick at which it
 * must fire: its deadline rounded up to the tick, or the current tick when
 * that deadline had already passed at scheduling time. After each step it
 * checks the engine against it, exactly:
 *   - a callback runs only for a pending task, once, in an advance whose
 *     target tick has reached the task's tick (never early), and in
 *     nondecreasing tick order within that advance;
 *   - after an advance, no pending task's tick is at or before the target
 *     (so nothing is late beyond the rounding to the tick);
 *   - cancel, reschedule and the keyed calls return exactly what the model
 *     says they must; tw_pending agrees; tw_next_deadline is never later
 *     than the earliest pending task; tw_check holds after every step.
 * Any disagreement prints the step and aborts. */
#ifndef TW_TEST_MODEL_H
#define TW_TEST_MODEL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "twheel.h"

#define MODEL_MAX_TASKS 2048
#define MODEL_KEYS 8

enum { M_FREE = 0, M_PENDING, M_FIRED, M_CANCELLED };

struct model;

struct mtask {
    struct model *m;
    tw_id id;
    uint64_t tick;       /* the tick at which it must fire */
    uint64_t born;       /* advance sequence number when (re)scheduled */
    int state;
    int key;             /* -1 = unkeyed */
};

struct msrc {
    const uint8_t *p;
    size_t n;
    uint64_t rng; /* used when p runs out, if nonzero */
};

struct model {
    tw_timer *t;
    uint64_t tick, wheel, now, target;
    uint64_t seq;         /* advance counter */
    int in_advance;
    uint64_t last_tick;   /* tick of the last firing in this advance */
    int ntasks, npending;
    int key_owner[MODEL_KEYS];
    struct msrc *src;
    long step;
    uint64_t clock_value;
    struct mtask tasks[MODEL_MAX_TASKS];
};

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

static inline uint64_t model_clock(void *ctx)
{
    return *(uint64_t *)ctx;
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
static inline uint64_t m_delay(struct model *m)
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

static void m_fire(tw_timer *t, tw_id id, void *arg);


static inline struct mtask *m_new(struct model *m)
{
    if (m->ntasks == MODEL_MAX_TASKS)
        return NULL;
    struct mtask *k = &m->tasks[m->ntasks++];
    memset(k, 0, sizeof(*k));
    k->m = m;
    k->key = -1;
    return k;
}

static inline void m_schedule(struct model *m, int absolute)
{
    struct mtask *k = m_new(m);
    if (!k)
        return;
    uint64_t deadline, v = m_delay(m);
    int rc;
    if (absolute) {
        /* around now: past and future deadlines alike */
        deadline = (msrc_u8(m->src) & 1) ? m_sat_add(m->now, v) : (m->now > v ? m->now - v : 0);
        rc = tw_schedule_at(m->t, deadline, m_fire, k, &k->id);
    } else {
        deadline = m_sat_add(m->now, v);
        rc = tw_schedule(m->t, v, m_fire, k, &k->id);
    }
    if (rc)
        MODEL_FAIL(m, "schedule returned %d", rc);
    if (k->id == 0)
        MODEL_FAIL(m, "schedule gave id 0");
    k->tick = m_due_tick(m, deadline);
    k->state = M_PENDING;
    k->born = m->seq;
    m->npending++;
}

static inline void m_schedule_keyed(struct model *m)
{
    struct mtask *k = m_new(m);
    if (!k)
        return;
    int key = msrc_u8(m->src) % MODEL_KEYS;
    char name[24];
    int len = snprintf(name, sizeof name, "key-%d", key);
    uint64_t v = m_delay(m);
    int rc = tw_schedule_keyed(m->t, name, (size_t)len, v, m_fire, k, &k->id);
    if (rc)
        MODEL_FAIL(m, "schedule_keyed returned %d", rc);
    int old = m->key_owner[key];
    if (old >= 0 && m->tasks[old].state == M_PENDING) {
        m->tasks[old].state = M_CANCELLED;
        m->npending--;
    }
    k->tick = m_due_tick(m, m_sat_add(m->now, v));
    k->state = M_PENDING;
    k->born = m->seq;
    k->key = key;
    m->key_owner[key] = (int)(k - m->tasks);
    m->npending++;
}

static inline struct mtask *m_pick(struct model *m)
{
    if (!m->ntasks)
        return NULL;
    return &m->tasks[msrc_u8(m->src) % m->ntasks];
}

static inline void m_drop_key(struct model *m, struct mtask *k)
{
    if (k->key >= 0 && m->key_owner[k->key] == (int)(k - m->tasks))
        m->key_owner[k->key] = -1;
}

static inline void m_cancel(struct model *m)
{
    struct mtask *k = m_pick(m);
    if (!k)
        return;
    int rc = tw_cancel(m->t, k->id), want = k->state == M_PENDING ? 0 : -ENOENT;
    if (rc != want)
        MODEL_FAIL(m, "cancel of task %ld (state %d) returned %d, want %d",
                   (long)(k - m->tasks), k->state, rc, want);
    if (!rc) {
        k->state = M_CANCELLED;
        m->npending--;
        m_drop_key(m, k);
    }
}

static inline void m_cancel_keyed(struct model *m)
{
    int key = msrc_u8(m->src) % MODEL_KEYS;
    char name[24];
    int len = snprintf(name, sizeof name, "key-%d", key);
    int owner = m->key_owner[key];
    int want = owner >= 0 && m->tasks[owner].state == M_PENDING ? 0 : -ENOENT;
    int rc = tw_cancel_keyed(m->t, name, (size_t)len);
    if (rc != want)
        MODEL_FAIL(m, "cancel_keyed(%d) returned %d, want %d", key, rc, want);
    if (!rc) {
        m->tasks[owner].state = M_CANCELLED;
        m->npending--;
        m->key_owner[key] = -1;
    }
}

static inline void m_reschedule(struct model *m)
{
    struct mtask *k = m_pick(m);
    if (!k)
        return;
    uint64_t v = m_delay(m);
    int rc = tw_reschedule(m->t, k->id, v), want = k->state == M_PENDING ? 0 : -ENOENT;
    if (rc != want)
        MODEL_FAIL(m, "reschedule returned %d, want %d", rc, want);
    if (!rc) {
        k->tick = m_due_tick(m, m_sat_add(m->now, v));
        k->born = m->seq; /* moved back into the wheel */
    }
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
    default: break;
    }
}

static void m_fire(tw_timer *t, tw_id id, void *arg)
{
    struct mtask *k = arg;
    struct model *m = k->m;
    if (!m->in_advance)
        MODEL_FAIL(m, "callback outside tw_advance");
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
    if (k->tick < m->last_tick)
        MODEL_FAIL(m, "task %ld fired out of order: tick %llu after %llu",
                   (long)(k - m->tasks), (unsigned long long)k->tick,
                   (unsigned long long)m->last_tick);
    m->last_tick = k->tick;
    k->state = M_FIRED;
    m->npending--;
    m_drop_key(m, k);
    if (tw_advance(t, m->now) != -EDEADLK)
        MODEL_FAIL(m, "tw_advance from a callback did not say EDEADLK");
    if (msrc_has(m->src) && msrc_u8(m->src) < 64)
        m_callback_ops(m);
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
    default: to = m_sat_add(m->now, r); break;
    }
    if (to > m->now)
        m->now = to;
    m->target = m_target(m, m->now);
    m->seq++;
    m->in_advance = 1;
    m->last_tick = 0;
    int pending_before = m->npending;
    int rc = tw_advance(m->t, to);
    m->in_advance = 0;
    if (rc < 0)
        MODEL_FAIL(m, "advance returned %d", rc);
    (void)pending_before;
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

static void m_drain_each(tw_timer *t, tw_id id, void *arg)
{
    struct mtask *k = arg;
    struct model *m = k->m;
    (void)t;
    if (k->id != id || k->state != M_PENDING)
        MODEL_FAIL(m, "drain handed back a task that is not pending");
    k->state = M_CANCELLED;
    m->npending--;
    m_drop_key(m, k);
}

static inline void m_verify(struct model *m)
{
    if (tw_check(m->t, stderr) != 0)
        MODEL_FAIL(m, "tw_check failed");
    if ((int)tw_pending(m->t) != m->npending)
        MODEL_FAIL(m, "tw_pending %zu, model %d", tw_pending(m->t), m->npending);
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

/* Runs the model over a byte stream. Returns the number of steps. */
static inline long model_run(struct msrc *src, long max_steps)
{
    static const uint64_t ticks[] = { 1, 3, 1000, 1000000 };
    static const uint32_t wheels[] = { 2, 4, 8, 64 };
    struct model *m = calloc(1, sizeof(*m));
    if (!m)
        abort();
    m->src = src;
    uint8_t g = msrc_u8(src);
    m->tick = ticks[g & 3];
    m->wheel = wheels[(g >> 2) & 3];
    uint64_t start = (g >> 4) & 1 ? msrc_u64(src) : 0;
    if ((g >> 5) & 1)
        start = UINT64_MAX - (start % (1ull << 40));
    for (int k = 0; k < MODEL_KEYS; k++)
        m->key_owner[k] = -1;
    struct tw_options o;
    tw_options_init(&o);
    o.tick_ns = m->tick;
    o.wheel_size = (uint32_t)m->wheel;
    m->now = start;
    /* manual mode reads its clock once, at creation */
    m->clock_value = start;
    o.clock = model_clock;
    o.clock_ctx = &m->clock_value;
    if (tw_create(&m->t, &o) != 0)
        abort();
    long steps = 0;
    while (steps < max_steps && msrc_has(src)) {
        m->step = steps++;
        uint8_t op = msrc_u8(src);
        switch (op % 16) {
        case 0: case 1: case 2: case 3: m_schedule(m, 0); break;
        case 4: m_schedule(m, 1); break;
        case 5: case 6: m_cancel(m); break;
        case 7: m_reschedule(m); break;
        case 8: m_schedule_keyed(m); break;
        case 9: m_cancel_keyed(m); break;
        case 10: case 11: case 12: m_advance(m); break;
        case 13:
            if (op == 13 && msrc_u8(src) < 8) { /* rare: drain everything */
                size_t want = (size_t)m->npending;
                if (tw_drain(m->t, m_drain_each, NULL) != want)
                    MODEL_FAIL(m, "drain count");
                for (int k = 0; k < MODEL_KEYS; k++)
                    m->key_owner[k] = -1;
            }
            break;
        default: m_advance(m); break;
        }
        m_verify(m);
    }
    /* the end: everything still pending fires when time runs out */
    m->step = steps;
    m->now = UINT64_MAX;
    m->target = m_target(m, UINT64_MAX);
    m->seq++;
    m->in_advance = 1;
    m->last_tick = 0;
    m->src->n = 0;
    m->src->rng = 0; /* callbacks do nothing more */
    if (tw_advance(m->t, UINT64_MAX) < 0)
        MODEL_FAIL(m, "final advance failed");
    m->in_advance = 0;
    if (m->npending != 0 || tw_pending(m->t) != 0)
        MODEL_FAIL(m, "%d tasks left after the end of time", m->npending);
    m_verify(m);
    tw_destroy(m->t);
    free(m);
    return steps;
}

#endif
