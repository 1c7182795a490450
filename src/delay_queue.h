/* delay_queue.h: the binary min-heap of non-empty buckets.
 *
 * Keyed by (expiration tick, bucket number): buckets due together leave in
 * bucket-number order (the finer level first), whatever order they were
 * queued in (test_internal checks it). Each bucket records its heap
 * position, so a bucket emptied by cancels leaves the queue at once (Kafka
 * leaves such buckets queued and wakes for them; we do not). The capacity
 * is reserved whenever a wheel level is created (one element per bucket
 * in existence), so push never allocates and the advance path cannot
 * fail. */
#ifndef TW_DELAY_QUEUE_H
#define TW_DELAY_QUEUE_H

#include <stdint.h>

#include "mem.h"

#define TW__NOT_QUEUED 0xFFFFFFFFu

struct tw__dq_node {
    uint64_t exp;   /* bucket expiration, in ticks */
    uint32_t *pos;  /* the bucket's record of its heap position */
    uint32_t bn;    /* bucket number */
    uint32_t pad_;
};

struct tw__dq {
    struct tw__dq_node *h;
    uint32_t n, cap;
};

int tw__dq_reserve(struct tw__dq *q, struct tw__mem *m, uint32_t cap);
/* Queues bucket bn; *pos is kept equal to its heap position. */
void tw__dq_push(struct tw__dq *q, uint64_t exp, uint32_t bn, uint32_t *pos);
/* Removes the node at heap position at; its *pos becomes TW__NOT_QUEUED. */
void tw__dq_remove(struct tw__dq *q, uint32_t at);
void tw__dq_destroy(struct tw__dq *q, struct tw__mem *m);

static inline const struct tw__dq_node *tw__dq_min(const struct tw__dq *q)
{
    return q->n ? &q->h[0] : 0;
}

static inline int tw__dq_less(const struct tw__dq_node *a,
                              const struct tw__dq_node *b)
{
    return a->exp < b->exp || (a->exp == b->exp && a->bn < b->bn);
}

#endif
