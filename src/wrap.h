/* wrap.h: unsigned arithmetic that is meant to wrap.
 *
 * C defines unsigned arithmetic to wrap modulo 2^n, so a wrap nobody meant
 * (a deadline plus a delay left unclamped, a count taken one below zero)
 * is not undefined behaviour and no ordinary sanitizer reports it. CI's
 * "unsigned wrap" stage builds the library with clang's
 * -fsanitize=unsigned-integer-overflow, which stops the test at the first
 * wrap it sees. The wraps the code means are written with these helpers,
 * or sit in a function marked TW__WRAPS whose whole job is modular
 * arithmetic (SipHash, splitmix64), and the stage exempts those alone: a
 * wrap anywhere else in src/ fails it. Each helper is the plain operator;
 * the attribute only tells clang's sanitizer not to check it. */
#ifndef TW_WRAP_H
#define TW_WRAP_H

#include <stdint.h>

#if defined(__clang__)
#define TW__WRAPS __attribute__((no_sanitize("unsigned-integer-overflow")))
#define TW__WRAP_FN static inline __attribute__((always_inline)) TW__WRAPS

/* a + b modulo 2^32 */
TW__WRAP_FN uint32_t tw__wrap_add32(uint32_t a, uint32_t b)
{
    return a + b;
}

/* a - b modulo 2^32 */
TW__WRAP_FN uint32_t tw__wrap_sub32(uint32_t a, uint32_t b)
{
    return a - b;
}

/* a * b modulo 2^32 */
TW__WRAP_FN uint32_t tw__wrap_mul32(uint32_t a, uint32_t b)
{
    return a * b;
}

/* a + b modulo 2^64 */
TW__WRAP_FN uint64_t tw__wrap_add64(uint64_t a, uint64_t b)
{
    return a + b;
}
#else
/* Other compilers have no such check. Plain expressions, not functions:
 * gcc folds an expression before it inlines a call, so a function here
 * would change the code it makes (`(r - 1) * k` becomes `r * k - k` only
 * when written out whole). */
#define TW__WRAPS
#define tw__wrap_add32(a, b) ((uint32_t)(a) + (uint32_t)(b))
#define tw__wrap_sub32(a, b) ((uint32_t)(a) - (uint32_t)(b))
#define tw__wrap_mul32(a, b) ((uint32_t)(a) * (uint32_t)(b))
#define tw__wrap_add64(a, b) ((uint64_t)(a) + (uint64_t)(b))
#endif

/* a + b, or UINT64_MAX where that would wrap: a deadline or an instant
 * past the end of time is the end of time (a schedule's deadline, the
 * instant the driver sleeps until). */
static inline uint64_t tw__sat_add64(uint64_t a, uint64_t b)
{
    uint64_t r = tw__wrap_add64(a, b);
    return r < a ? UINT64_MAX : r;
}

#endif
