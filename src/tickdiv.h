/* tickdiv.h: nanoseconds to ticks without a hardware divide.
 *
 * Every schedule and every cascade converts a deadline to ticks. A 64-bit
 * `div` costs 20-90 cycles depending on the CPU; the tick is fixed for the
 * life of a timer, so we divide by multiplying with a precomputed
 * reciprocal.
 *
 * The hot path (tw__div_ceil, for x <= lim, which covers every deadline
 * below 2^63 ns - d, i.e. the next 292 years) is exact by construction: with
 * l = ceil(log2 d) and m = ceil(2^(63+l) / d), m * d exceeds 2^(63+l) by
 * less than d <= 2^l, and then floor(n / d) = floor(n * m / 2^(63+l)) for
 * every n < 2^63 (Granlund & Montgomery, "Division by invariant integers
 * using multiplication", 1994, theorem 4.2). A ceiling is the floor of
 * n = x + d - 1. That is one multiply and one shift, with no fix-up loop.
 *
 * Everything else (x above lim, and d = 1 or d > 2^62, where m would not
 * fit in 64 bits) takes the general path: a floor estimate from
 * floor((2^64 - 1) / d), at most 2 below the true quotient, fixed up by a
 * loop that runs at most twice. Both paths are exact for every x and
 * d >= 1; tests/test_tickdiv.c checks them against the hardware divide. */
#ifndef TW_TICKDIV_H
#define TW_TICKDIV_H

#include <stdint.h>

struct tw__div {
    uint64_t d;
    uint64_t m;     /* general path: floor((2^64 - 1) / d) */
    uint64_t mx;    /* hot path: ceil(2^(63+l) / d) */
    uint64_t lim;   /* hot path for x <= lim (0 when it is unusable) */
    uint64_t dm1;   /* d - 1 */
    uint32_t shift; /* l - 1 */
};

static inline void tw__div_init(struct tw__div *v, uint64_t d)
{
    v->d = d;
    v->m = UINT64_MAX / d;
    v->dm1 = d - 1;
    v->mx = 0;
    v->lim = 0;
    v->shift = 0;
#ifdef __SIZEOF_INT128__
    if (d >= 2 && d <= (1ull << 62)) {
        uint32_t l = 64u - (uint32_t)__builtin_clzll(d - 1); /* ceil(log2 d) */
        unsigned __int128 p = (unsigned __int128)1 << (63 + l);
        unsigned __int128 mx = p / d + (p % d != 0);
        if (mx <= UINT64_MAX) { /* always, for d in this range */
            v->mx = (uint64_t)mx;
            v->shift = l - 1;
            v->lim = (1ull << 63) - d; /* x + d - 1 < 2^63 */
        }
    }
#else
    /* no 128-bit multiply (32-bit targets): the "hot" path is the
     * hardware divide, exact for any x; the same lim keeps the fast path
     * of tw_schedule covering the same deadlines as on 64-bit targets */
    if (d >= 2 && d <= (1ull << 62))
        v->lim = (1ull << 63) - d;
#endif
}

static inline uint64_t tw__div_floor(const struct tw__div *v, uint64_t x,
                                     uint64_t *rem)
{
#ifdef __SIZEOF_INT128__
    uint64_t q = (uint64_t)(((unsigned __int128)x * v->m) >> 64);
    uint64_t r = x - q * v->d;
    while (r >= v->d) {
        q++;
        r -= v->d;
    }
#else
    uint64_t q = x / v->d, r = x % v->d;
#endif
    *rem = r;
    return q;
}

/* ceil(x / d) for x <= v->lim only (the caller checks): one multiply and
 * one shift (a divide on targets without a 128-bit multiply). */
static inline uint64_t tw__div_ceil_hot(const struct tw__div *v, uint64_t x)
{
#ifdef __SIZEOF_INT128__
    return (uint64_t)(((unsigned __int128)(x + v->dm1) * v->mx) >> 64) >> v->shift;
#else
    return x / v->d + (x % v->d != 0);
#endif
}

/* ceil(x / d), exact, with no overflow for any x. */
static inline uint64_t tw__div_ceil(const struct tw__div *v, uint64_t x)
{
    if (__builtin_expect(x <= v->lim, 1))
        return tw__div_ceil_hot(v, x);
    uint64_t r, q = tw__div_floor(v, x, &r);
    return q + (r != 0);
}

#endif
