/* hash.h: the hash of user keys (keyed tasks, the purgatory's watch keys).
 *
 * Keys often come from the network: a client picks its group id or its
 * request's key. With an unkeyed hash (FNV, as twheel had first) a client
 * can compute, offline, any number of keys that share one hash, and then
 * every lookup of them walks one probe run or one chain: a table of n such
 * keys costs O(n) per operation, O(n^2) to fill, and they all land on one
 * shard lock. So keys are hashed with SipHash-1-3, a keyed PRF, under a
 * 128-bit key drawn at random for each timer and each purgatory: a set of
 * keys that collide in one instance says nothing about another, and the
 * instance's key is never shown. This is the defence Python, Rust and
 * Redis use for the same reason; 1-3 rounds is what Rust's and Python's
 * hash tables run (SipHash-2-4 is the conservative MAC setting; a hash
 * table needs only that collisions cannot be predicted).
 *
 * Cost, honestly (callgrind, gcc -O2): 112 instructions for a 5-byte key
 * where FNV-1a took 46, 138 against 112 at 16 bytes; from 24 bytes on,
 * fewer than FNV (258 against 400 at 64), as SipHash takes 8 bytes a
 * step and FNV one. A keyed schedule or cancel hashes its key once. */
#ifndef TW_HASH_H
#define TW_HASH_H

#include <stddef.h>
#include <stdint.h>

struct tw__hash_key {
    uint64_t k0, k1;
};

/* A fresh random key from getrandom(2). If the kernel cannot give one
 * (no getrandom, or its pool not yet ready at early boot), a key mixed
 * from the clocks, the process id, this object's address and a counter:
 * distinct per instance, though guessable by someone who can see the host. */
void tw__hash_key_init(struct tw__hash_key *k);
/* That fallback alone (for tests). */
void tw__hash_key_fallback(struct tw__hash_key *k);

/* The 16 bytes of key, read as SipHash reads them (two little-endian
 * words). */
void tw__hash_key_from_bytes(struct tw__hash_key *k, const unsigned char b[16]);

/* SipHash-1-3 of key[0..len) under k. */
uint64_t tw__key_hash(const struct tw__hash_key *k, const void *key, size_t len);
/* SipHash-2-4, the reference setting: only so that tests can check the
 * shared code against the published test vectors. */
uint64_t tw__siphash24(const struct tw__hash_key *k, const void *key, size_t len);

#endif
