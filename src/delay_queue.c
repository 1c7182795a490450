/* delay_queue.c: index-tracked binary min-heap (see delay_queue.h). */
#include <errno.h>
#include <string.h>

#include "delay_queue.h"

int tw__dq_reserve(struct tw__dq *q, struct tw__mem *m, uint32_t cap)
{
    if (cap <= q->cap)
        return 0;
    struct tw__dq_node *h = tw__alloc(m, (size_t)cap * sizeof(*h));
    if (!h)
        return -ENOMEM;
    if (q->n)
        memcpy(h, q->h, q->n * sizeof(*h));
    tw__free(m, q->h, (size_t)q->cap * sizeof(*h));
    q->h = h;
    q->cap = cap;
    return 0;
}

static inline void place(struct tw__dq *q, uint32_t pos, struct tw__dq_node nd)
{
    q->h[pos] = nd;
    *nd.pos = pos;
}

static void sift_up(struct tw__dq *q, uint32_t pos)
{
    struct tw__dq_node nd = q->h[pos];
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        if (!tw__dq_less(&nd, &q->h[parent]))
            break;
        place(q, pos, q->h[parent]);
        pos = parent;
    }
    place(q, pos, nd);
}

static void sift_down(struct tw__dq *q, uint32_t pos)
{
    struct tw__dq_node nd = q->h[pos];
    for (;;) {
        uint32_t c = 2 * pos + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && tw__dq_less(&q->h[c + 1], &q->h[c]))
            c++;
        if (!tw__dq_less(&q->h[c], &nd))
            break;
        place(q, pos, q->h[c]);
        pos = c;
    }
    place(q, pos, nd);
}

void tw__dq_push(struct tw__dq *q, uint64_t exp, uint32_t bn, uint32_t *pos)
{
    /* capacity was reserved when the bucket's level was created */
    q->h[q->n] = (struct tw__dq_node){ .exp = exp, .pos = pos, .bn = bn };
    sift_up(q, q->n++);
}

void tw__dq_remove(struct tw__dq *q, uint32_t pos)
{
    *q->h[pos].pos = TW__NOT_QUEUED;
    if (--q->n == pos)
        return;
    struct tw__dq_node last = q->h[q->n];
    q->h[pos] = last;
    if (pos > 0 && tw__dq_less(&last, &q->h[(pos - 1) / 2]))
        sift_up(q, pos);
    else
        sift_down(q, pos);
}

void tw__dq_destroy(struct tw__dq *q, struct tw__mem *m)
{
    tw__free(m, q->h, (size_t)q->cap * sizeof(*q->h));
    memset(q, 0, sizeof(*q));
}
