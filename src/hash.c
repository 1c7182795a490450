/* hash.c: SipHash (Aumasson and Bernstein, 2012) and the per-instance
 * hash key. Why keys are hashed this way: hash.h. */
#include <stdatomic.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"
#include "wrap.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND                                                               \
    do {                                                                       \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);              \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                 \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                 \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);              \
    } while (0)

/* Little-endian whatever the host: the same key hashes the same on s390x.
 * GCC and clang turn this into one load on a little-endian machine. */
static inline uint64_t load_le64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
           (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
           (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

/* c compression rounds per 8-byte word, d finalization rounds; inlined
 * with constants into each of the two settings below. */
static inline __attribute__((always_inline)) TW__WRAPS uint64_t
siphash(const struct tw__hash_key *k, const void *key, size_t len, int c, int d)
{
    const unsigned char *p = key;
    uint64_t v0 = k->k0 ^ 0x736f6d6570736575ull, v1 = k->k1 ^ 0x646f72616e646f6dull,
             v2 = k->k0 ^ 0x6c7967656e657261ull, v3 = k->k1 ^ 0x7465646279746573ull;
    const unsigned char *end = p + (len & ~(size_t)7);
    for (; p != end; p += 8) {
        uint64_t m = load_le64(p);
        v3 ^= m;
        for (int i = 0; i < c; i++)
            SIPROUND;
        v0 ^= m;
    }
    /* the last 0 to 7 bytes, and the length's low byte on top */
    uint64_t b = (uint64_t)len << 56;
    switch (len & 7) {
    case 7: b |= (uint64_t)p[6] << 48; /* fall through */
    case 6: b |= (uint64_t)p[5] << 40; /* fall through */
    case 5: b |= (uint64_t)p[4] << 32; /* fall through */
    case 4: b |= (uint64_t)p[3] << 24; /* fall through */
    case 3: b |= (uint64_t)p[2] << 16; /* fall through */
    case 2: b |= (uint64_t)p[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)p[0];       /* fall through */
    default: break;
    }
    v3 ^= b;
    for (int i = 0; i < c; i++)
        SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    for (int i = 0; i < d; i++)
        SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t tw__key_hash(const struct tw__hash_key *k, const void *key, size_t len)
{
    return siphash(k, key, len, 1, 3);
}

uint64_t tw__siphash24(const struct tw__hash_key *k, const void *key, size_t len)
{
    return siphash(k, key, len, 2, 4);
}

void tw__hash_key_from_bytes(struct tw__hash_key *k, const unsigned char b[16])
{
    k->k0 = load_le64(b);
    k->k1 = load_le64(b + 8);
}

static TW__WRAPS uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tw__hash_key_fallback(struct tw__hash_key *k)
{
    static _Atomic uint64_t counter;
    struct timespec mono = { 0 }, real = { 0 };
    clock_gettime(CLOCK_MONOTONIC, &mono);
    clock_gettime(CLOCK_REALTIME, &real);
    uint64_t s = (uint64_t)mono.tv_sec * 1000000000u + (uint64_t)mono.tv_nsec;
    s ^= splitmix64(&s) ^ ((uint64_t)real.tv_sec << 30) ^ (uint64_t)real.tv_nsec;
    s ^= (uint64_t)(uintptr_t)k ^ ((uint64_t)getpid() << 40);
    s ^= atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed) << 20;
    k->k0 = splitmix64(&s);
    k->k1 = splitmix64(&s);
}

void tw__hash_key_init(struct tw__hash_key *k)
{
    /* GRND_NONBLOCK: never hold up tw_create at early boot; fall back */
    if (getrandom(k, sizeof(*k), GRND_NONBLOCK) != (ssize_t)sizeof(*k))
        tw__hash_key_fallback(k);
}
