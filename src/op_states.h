/* op_states.h: the purgatory ops' completion words, kept apart from the
 * ops in a dense table (op_states.c says why). */
#ifndef TW_OP_STATES_H
#define TW_OP_STATES_H

#include <stdatomic.h>
#include <stdint.h>

#include "twheel.h" /* struct tw_allocator */

struct tw__states;

/* A table whose memory comes from a (copied): 0, or -ENOMEM with nothing
 * allocated. The caller holds the table's first reference. */
int tw__states_create(struct tw__states **out, const struct tw_allocator *a);

/* Takes a word for a new op and a reference on the table: 0, setting *idx
 * (its word reads 0), or -ENOMEM with nothing taken. Any thread. */
int tw__state_get(struct tw__states *t, uint32_t *idx);

/* Word idx's address: for the holder of idx, any thread. */
_Atomic uint32_t *tw__state_word(struct tw__states *t, uint32_t idx);

/* Gives word idx back and drops its reference on the table; the last
 * reference frees it. Any thread. */
void tw__state_put(struct tw__states *t, uint32_t idx);

/* Drops the creator's reference (the purgatory's, at destroy). */
void tw__states_release(struct tw__states *t);

/* Through t's allocator: what the purgatory's ops are freed with, since
 * an op may be released after its purgatory is gone and the table is
 * not. */
void tw__states_free(struct tw__states *t, void *ptr);

#endif
