/* delay_queue.h: the binary min-heap of non-empty buckets.
 *
 * Keyed by (expiration tick, bucket number): the bucket number breaks ties
 * so the order is deterministic. Each bucket records its heap position, so
 * a bucket emptied by cancels leaves the queue at once (Kafka leaves such
 * buckets queued and wakes for them; we do not). The capacity is reserved
 * whenever a wheel level is created (one element per bucket in existence),
 * so push never allocates and the advance path cannot fail. */
#ifndef TW_DELAY_QUEUE_H
#define TW_DELAY_QUEUE_H

#include <stdint.h>

#include "mem.h"

#define TW__NOT_QUEUED 0xFFFFFFFFu

struct tw__dq_node {
    uint64_t exp;  /* bucket expiration, in ticks */
    uint32_t bn;   /* bucket number */
    uint32_t pad_;
};

struct tw__dq {
    struct tw__dq_node *h;
    uint32_t n, cap;
};

/* Where the heap writes a bucket's position back: the owner resolves a
 * bucket number to its heap_index field. */
typedef uint32_t *(*tw__dq_index_fn)(void *owner, uint32_t bn);

int tw__dq_reserve(struct tw__dq *q, struct tw__mem *m, uint32_t cap);
void tw__dq_push(struct tw__dq *q, uint64_t exp, uint32_t bn,
                 tw__dq_index_fn idx, void *owner);
void tw__dq_remove(struct tw__dq *q, uint32_t pos, tw__dq_index_fn idx,
                   void *owner);
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
