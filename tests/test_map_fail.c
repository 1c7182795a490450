/* test_map_fail.c: the memory the library maps itself, refused call by call.
 *
 * A big block (the entry pool from 1 MiB up, with the default allocator)
 * is not malloc's: src/mem.c maps it inside a reservation of address space
 * and grows it with mprotect, mremap, or a copy. A user's allocator never
 * reaches that code (test_alloc_fail fails every allocation site through
 * one), and RLIMIT_AS (test_internal) refuses only the reservations. Here
 * the library's own calls to mmap, mremap, mprotect and madvise are
 * wrapped at link time (ld --wrap, tests/meson.build: only this program's
 * objects and the static library's are rewired, never libc's own calls)
 * so that any one of them can be refused with ENOMEM:
 *
 * - each fallback in mem.c on its own: an unaligned reservation when the
 *   aligned one is refused, a plain mapping when the reservation cannot be
 *   made writable, a copy when mremap is refused (into a fixed place or
 *   anywhere), and NULL with the block untouched when nothing works;
 * - through the timer, every mapping call of a script that grows a
 *   timer's pool past 1 MiB (manual, and threaded on one shard, where the
 *   pool grows under the shard's lock), refused in turn: the schedule
 *   that meets it succeeds by a fallback or returns -ENOMEM with the
 *   timer as it was (pending count, next deadline, memory held,
 *   tw_check), a retry succeeds, and every task fires once;
 * - madvise refused (huge pages, populating ahead): advice only, nothing
 *   fails.
 *
 * The wrappers also keep the net bytes of address space mapped through
 * them, so that every test ends by checking none was left behind: a leak
 * neither valgrind nor AddressSanitizer reports, as neither counts an
 * anonymous mapping never unmapped as one. And they keep where those
 * bytes are: an unmap or a move of pages the library did not map (a
 * reservation's tail computed wrong would unmap another's memory, and
 * the byte count alone would balance) is not passed on, and fails the
 * test. */
#include "helpers.h"

#include <sys/mman.h>

#include "mem.h"
#include "timer.h" /* the pool's block and reservation */

/* ---- the wrappers ------------------------------------------------------ */

enum { K_MMAP, K_MREMAP, K_MPROTECT, K_MADVISE, NKINDS };

static struct {
    unsigned calls[NKINDS];
    unsigned fail_from[NKINDS]; /* refuse that kind's n-th call and on (0: never) */
    unsigned nth;               /* refuse the n-th mmap/mremap/mprotect, once */
    unsigned counted;           /* mmap/mremap/mprotect calls so far */
    unsigned refused;           /* calls refused */
    long long net;              /* bytes mapped through the wrappers, net */
    /* where: the address ranges mapped through the wrappers and not yet
     * unmapped (merged, page-rounded), and the calls that unmapped or
     * moved pages outside them (not passed on: they are not ours) */
    struct { uintptr_t lo, hi; } own[64];
    unsigned nown, foreign;
    int misalign; /* place each mapping one page past a TW__HUGE boundary */
} W;

/* valgrind (3.19) emulates mremap itself, and after a move into a fixed
 * place (a new reservation, mem.c) memcheck holds the grown part of the
 * block unaddressable, though the kernel maps it (test_internal.c says
 * more). Under valgrind such a move is refused, unseen by the counts
 * above: mem.c copies instead, and the tests check the same contracts on
 * that path; natively and under the sanitizers the move itself runs. */
static int on_valgrind;

static size_t pages(size_t n)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    return (n + ps - 1) & ~(ps - 1);
}

static int refuse(int kind)
{
    unsigned c = ++W.calls[kind];
    int no = W.fail_from[kind] && c >= W.fail_from[kind];
    if (kind != K_MADVISE && ++W.counted == W.nth)
        no = 1;
    if (no) {
        W.refused++;
        errno = ENOMEM;
    }
    return no;
}

static void wrap_reset(void)
{
    memset(&W, 0, sizeof W);
}

void *__real_mmap64(void *a, size_t len, int prot, int flags, int fd, off_t off);
void *__real_mremap(void *old, size_t olen, size_t len, int flags, ...);
int __real_mprotect(void *a, size_t len, int prot);
int __real_munmap(void *a, size_t len);
int __real_madvise(void *a, size_t len, int advice);
void *__wrap_mmap64(void *a, size_t len, int prot, int flags, int fd, off_t off);
void *__wrap_mremap(void *old, size_t olen, size_t len, int flags, ...);
int __wrap_mprotect(void *a, size_t len, int prot);
int __wrap_munmap(void *a, size_t len);
int __wrap_madvise(void *a, size_t len, int advice);

/* [lo, hi) joins the ranges owned, merged with any it touches. */
static void own_add(uintptr_t lo, uintptr_t hi)
{
    for (unsigned i = 0; i < W.nown;) {
        if (W.own[i].hi < lo || W.own[i].lo > hi) {
            i++;
            continue;
        }
        lo = W.own[i].lo < lo ? W.own[i].lo : lo;
        hi = W.own[i].hi > hi ? W.own[i].hi : hi;
        W.own[i] = W.own[--W.nown];
    }
    if (W.nown == sizeof W.own / sizeof W.own[0]) {
        W.foreign++; /* more ranges than the tests ever make: fail them */
        return;
    }
    W.own[W.nown].lo = lo;
    W.own[W.nown++].hi = hi;
}

/* Takes [a, a + len) out of the ranges owned: 0, or -1 (nothing taken)
 * when it is not wholly inside one of them. */
static int own_take(const void *a, size_t len)
{
    uintptr_t lo = (uintptr_t)a, hi = lo + pages(len);
    for (unsigned i = 0; i < W.nown; i++) {
        uintptr_t olo = W.own[i].lo, ohi = W.own[i].hi;
        if (olo <= lo && hi <= ohi) {
            W.own[i] = W.own[--W.nown];
            if (olo < lo)
                own_add(olo, lo);
            if (hi < ohi)
                own_add(hi, ohi);
            return 0;
        }
    }
    return -1;
}

static int owned(const void *a, size_t len)
{
    uintptr_t lo = (uintptr_t)a, hi = lo + pages(len);
    for (unsigned i = 0; i < W.nown; i++)
        if (W.own[i].lo <= lo && hi <= W.own[i].hi)
            return 1;
    return 0;
}

static void *mapped(void *p, size_t len)
{
    if (p != MAP_FAILED) {
        W.net += (long long)pages(len);
        own_add((uintptr_t)p, (uintptr_t)p + pages(len));
    }
    return p;
}

/* W.misalign's mapping (anonymous, as all of mem.c's are): one page past
 * a TW__HUGE boundary, where a kernel that does not align big mappings
 * may put one. This one aligns them itself, so without it mem.c's
 * trimming of a reservation's slack would run only with nothing to trim. */
static void *misaligned(size_t len, int prot, int flags)
{
    size_t span = pages(len) + 2 * TW__HUGE;
    char *raw = __real_mmap64(NULL, span, prot, flags, -1, 0);
    if (raw == MAP_FAILED)
        return MAP_FAILED;
    uintptr_t lo = (uintptr_t)raw, p = ((lo + TW__HUGE - 1) & ~(uintptr_t)(TW__HUGE - 1)) + pages(1);
    uintptr_t end = p + pages(len);
    if (p > lo)
        __real_munmap(raw, p - lo);
    __real_munmap((void *)end, lo + span - end);
    return (void *)p;
}

/* With _FILE_OFFSET_BITS=64, which meson defines, glibc's headers turn
 * mmap into mmap64 (on 64-bit targets too). */
void *__wrap_mmap64(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    if (refuse(K_MMAP))
        return MAP_FAILED;
    return mapped(W.misalign ? misaligned(len, prot, flags)
                             : __real_mmap64(a, len, prot, flags, fd, off), len);
}

void *__wrap_mremap(void *old, size_t olen, size_t len, int flags, ...)
{
    void *to = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        to = va_arg(ap, void *);
        va_end(ap);
    }
    if (refuse(K_MREMAP))
        return MAP_FAILED;
    if ((flags & MREMAP_FIXED) && on_valgrind) { /* see on_valgrind */
        errno = ENOMEM;
        return MAP_FAILED;
    }
    if (!owned(old, olen) || ((flags & MREMAP_FIXED) && !owned(to, len))) {
        W.foreign++;
        errno = EINVAL;
        return MAP_FAILED;
    }
    void *q = (flags & MREMAP_FIXED) ? __real_mremap(old, olen, len, flags, to)
                                     : __real_mremap(old, olen, len, flags);
    if (q != MAP_FAILED) {
        /* Into a fixed place, the pages land on a reservation the
         * wrappers counted already (mem.c moves them nowhere else). */
        W.net -= (long long)pages(olen);
        (void)own_take(old, olen);
        if (!(flags & MREMAP_FIXED))
            W.net += (long long)pages(len);
        own_add((uintptr_t)q, (uintptr_t)q + pages(len));
    }
    return q;
}

int __wrap_mprotect(void *a, size_t len, int prot)
{
    return refuse(K_MPROTECT) ? -1 : __real_mprotect(a, len, prot);
}

int __wrap_munmap(void *a, size_t len)
{
    if (own_take(a, len)) { /* someone else's pages: leave them */
        W.foreign++;
        return 0;
    }
    int rc = __real_munmap(a, len);
    if (!rc)
        W.net -= (long long)pages(len);
    return rc;
}

int __wrap_madvise(void *a, size_t len, int advice)
{
    return refuse(K_MADVISE) ? -1 : __real_madvise(a, len, advice);
}

/* A build whose library calls none of the wrapped names (another libc,
 * another linker) cannot run these tests: they skip, and say so. */
static int wrapped(void)
{
    wrap_reset();
    void *p = tw__map(4096);
    if (p)
        tw__unmap(p, 4096);
    return W.calls[K_MMAP] == 1 && W.net == 0 && !W.foreign;
}

#define NEED_WRAP()                                                                      \
    do {                                                                                 \
        if (!wrapped()) {                                                                \
            print_message("the library's mmap is not wrapped in this build\n");        \
            skip();                                                                      \
        }                                                                                \
        wrap_reset();                                                                    \
    } while (0)

/* ---- mem.c's fallbacks, one at a time ---------------------------------- */

#define MB ((size_t)1 << 20)

static struct tw__mem mem_default(void)
{
    struct tw__mem m;
    assert_int_equal(tw__mem_init(&m, NULL), 0);
    return m;
}

static void fill(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 4096)
        p[i] = (unsigned char)(i / 4096 * 7 + 1);
    p[n - 1] = 0xA5;
}

static void assert_filled(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i += 4096)
        assert_int_equal(p[i], (unsigned char)(i / 4096 * 7 + 1));
    assert_int_equal(p[n - 1], 0xA5);
}

/* A 2 MiB block mapped at the start of a reservation of `want` bytes, and
 * filled (see fill). */
static unsigned char *filled_block(struct tw__mem *m, size_t want, size_t *res)
{
    *res = 0;
    unsigned char *p = tw__alloc_res(m, 2 * MB, want, res);
    assert_non_null(p);
    assert_int_equal(*res, want);
    fill(p, 2 * MB);
    return p;
}

/* Frees block q (`size` bytes, reservation res): nothing may be left, no
 * byte counted, no address space mapped, and no page that was not the
 * library's unmapped. */
static void free_and_check(struct tw__mem *m, void *q, size_t size, size_t res)
{
    tw__free_res(m, q, size, res);
    assert_int_equal(m->bytes, 0);
    assert_int_equal(W.net, 0);
    assert_int_equal(W.foreign, 0);
}

/* The aligned reservation refused (no room for its slack): an unaligned
 * one of the size asked, still a reservation that grows in place. */
static void test_reserve_unaligned(void **state)
{
    (void)state;
    NEED_WRAP();
    struct tw__mem m = mem_default();
    W.nth = 1;
    size_t res = 0;
    unsigned char *p = tw__alloc_res(&m, 2 * MB, 64 * MB, &res);
    assert_non_null(p);
    assert_int_equal(W.refused, 1);
    assert_int_equal(res, 64 * MB);
    assert_int_equal(m.bytes, 2 * MB);
    fill(p, 2 * MB);
    unsigned char *q = tw__realloc_res(&m, p, 2 * MB, 8 * MB, 2 * MB, 64 * MB, &res);
    assert_ptr_equal(q, p); /* in place */
    assert_filled(q, 2 * MB);
    q[8 * MB - 1] = 1;
    assert_int_equal(m.bytes, 8 * MB);
    free_and_check(&m, q, 8 * MB, res);
}

/* A reservation placed off a huge-page boundary (by misaligned, above):
 * mem.c gives back the slack on both sides, so the block starts on a
 * boundary, and unmaps only pages of its own: the reservation is all
 * that stays mapped, and nothing is left once the block is freed. */
static void test_reserve_trims_to_alignment(void **state)
{
    (void)state;
    NEED_WRAP();
    struct tw__mem m = mem_default();
    W.misalign = 1;
    size_t res;
    unsigned char *p = filled_block(&m, 64 * MB, &res);
    assert_int_equal(W.calls[K_MMAP], 1); /* the aligned reservation, trimmed */
    assert_int_equal((uintptr_t)p % TW__HUGE, 0);
    assert_int_equal(W.net, (long long)(64 * MB));
    assert_int_equal(W.foreign, 0);
    unsigned char *q = tw__realloc_res(&m, p, 2 * MB, 64 * MB, 2 * MB, 64 * MB, &res);
    assert_ptr_equal(q, p); /* in place, to the reservation's end */
    assert_filled(q, 2 * MB);
    q[64 * MB - 1] = 1;
    free_and_check(&m, q, 64 * MB, res);
}

/* The reservation made but not writable: it goes, and the block is mapped
 * at its own size, with no reservation. */
static void test_reservation_not_writable(void **state)
{
    (void)state;
    NEED_WRAP();
    struct tw__mem m = mem_default();
    W.fail_from[K_MPROTECT] = 1;
    size_t res = 1;
    unsigned char *p = tw__alloc_res(&m, 2 * MB, 64 * MB, &res);
    assert_non_null(p);
    assert_int_equal(W.calls[K_MPROTECT], 1);
    assert_int_equal(res, 0);
    assert_int_equal(m.bytes, 2 * MB);
    fill(p, 2 * MB);
    assert_int_equal(W.net, (long long)(2 * MB)); /* the reservation went */
    assert_int_equal(W.foreign, 0);
    free_and_check(&m, p, 2 * MB, res);
}

/* Nothing can be mapped: NULL, nothing held. */
static void test_map_refused(void **state)
{
    (void)state;
    NEED_WRAP();
    struct tw__mem m = mem_default();
    W.fail_from[K_MMAP] = 1;
    size_t res = 1;
    assert_null(tw__alloc_res(&m, 2 * MB, 64 * MB, &res));
    assert_int_equal(res, 0);
    assert_null(tw__alloc(&m, 2 * MB));
    assert_int_equal(m.bytes, 0);
    assert_int_equal(W.net, 0);
    assert_int_equal(W.foreign, 0);
}

/* Growing in place refused (the next pages cannot be made writable):
 * NULL, and the block, its bytes, its reservation and the count held as
 * they were; the same growth succeeds once the refusal ends. */
static void test_grow_in_place_refused(void **state)
{
    (void)state;
    NEED_WRAP();
    struct tw__mem m = mem_default();
    size_t res;
    unsigned char *p = filled_block(&m, 64 * MB, &res);
    long long net = W.net;
    W.fail_from[K_MPROTECT] = W.calls[K_MPROTECT] + 1;
    assert_null(tw__realloc_res(&m, p, 2 * MB, 4 * MB, 2 * MB, 64 * MB, &res));
    assert_int_equal(res, 64 * MB);
    assert_int_equal(m.bytes, 2 * MB);
    assert_int_equal(W.net, net);
    assert_int_equal(W.foreign, 0);
    assert_filled(p, 2 * MB);
    W.fail_from[K_MPROTECT] = 0;
    unsigned char *q = tw__realloc_res(&m, p, 2 * MB, 4 * MB, 2 * MB, 64 * MB, &res);
    assert_ptr_equal(q, p);
    q[4 * MB - 1] = 3;
    assert_int_equal(m.bytes, 4 * MB);
    free_and_check(&m, q, 4 * MB, res);
}

/* Past its reservation a block moves by mremap into a new one. Refused
 * that, the new reservation goes and the block is copied into a mapping
 * of its own: its bytes, and nothing of the old reservation left. */
static void test_move_refused_copies(void **state)
{
    (void)state;
    NEED_WRAP();
    struct tw__mem m = mem_default();
    size_t res;
    unsigned char *p = filled_block(&m, 4 * MB, &res);
    W.fail_from[K_MREMAP] = W.calls[K_MREMAP] + 1;
    unsigned mmaps = W.calls[K_MMAP];
    unsigned char *q = tw__realloc_res(&m, p, 2 * MB, 8 * MB, 2 * MB, 16 * MB, &res);
    assert_non_null(q);
    assert_ptr_not_equal(q, p);
    assert_int_equal(W.calls[K_MREMAP], 1); /* one mremap, into the fixed place */
    assert_true(W.calls[K_MMAP] > mmaps + 1); /* a reservation for it, then the copy's */
    assert_int_equal(res, 16 * MB);
    assert_filled(q, 2 * MB);
    q[8 * MB - 1] = 9;
    assert_int_equal(m.bytes, 8 * MB);
    W.fail_from[K_MREMAP] = 0;
    free_and_check(&m, q, 8 * MB, res);
}

/* Past its reservation a block moves by mremap into a new one (under
 * valgrind, which refuses such a move, it is copied there), and what is
 * left of the old reservation past the pages that moved is unmapped: the
 * new reservation is all that stays mapped, and no page that is not the
 * library's is unmapped. */
static void test_move_past_reservation(void **state)
{
    (void)state;
    NEED_WRAP();
    struct tw__mem m = mem_default();
    size_t res;
    unsigned char *p = filled_block(&m, 6 * MB, &res);
    unsigned char *q = tw__realloc_res(&m, p, 2 * MB, 8 * MB, 2 * MB, 16 * MB, &res);
    assert_non_null(q);
    assert_ptr_not_equal(q, p);
    assert_int_equal(W.calls[K_MREMAP], 1); /* into the fixed place */
    assert_int_equal(res, 16 * MB);
    assert_filled(q, 2 * MB);
    q[8 * MB - 1] = 5;
    assert_int_equal(m.bytes, 8 * MB);
    assert_int_equal(W.net, (long long)(16 * MB)); /* the old reservation's 4 MiB left went */
    assert_int_equal(W.foreign, 0);
    free_and_check(&m, q, 8 * MB, res);
}

/* A block with no reservation moves by mremap wherever the kernel puts it
 * (its pages, not a copy: no new mapping is made); refused that, it is
 * copied (when there is room for the copy), or, with no room, NULL and
 * the block as it was. */
static void test_unreserved_move_refused(void **state)
{
    (void)state;
    NEED_WRAP();
    struct tw__mem m = mem_default();
    size_t res = 1;
    W.fail_from[K_MPROTECT] = 1; /* no reservation: mapped at its size */
    unsigned char *p = tw__alloc_res(&m, 2 * MB, 2 * MB, &res);
    assert_non_null(p);
    assert_int_equal(res, 0);
    W.fail_from[K_MPROTECT] = 0;
    fill(p, 2 * MB);

    /* no reservation to be had, mremap refused, and no room for a copy */
    W.fail_from[K_MMAP] = W.calls[K_MMAP] + 1;
    W.fail_from[K_MREMAP] = W.calls[K_MREMAP] + 1;
    long long net = W.net;
    assert_null(tw__realloc_res(&m, p, 2 * MB, 4 * MB, 2 * MB, 4 * MB, &res));
    assert_int_equal(res, 0);
    assert_int_equal(m.bytes, 2 * MB);
    assert_int_equal(W.net, net);
    assert_int_equal(W.foreign, 0);
    assert_filled(p, 2 * MB);
    assert_int_equal(W.calls[K_MREMAP], 1); /* the plain move, not the fixed one */

    /* room for the copy again: mremap refused, the block copied */
    W.fail_from[K_MMAP] = 0;
    unsigned char *q = tw__realloc_res(&m, p, 2 * MB, 4 * MB, 2 * MB, 4 * MB, &res);
    assert_non_null(q);
    assert_filled(q, 2 * MB);
    q[4 * MB - 1] = 2;
    assert_int_equal(m.bytes, 4 * MB);
    W.fail_from[K_MREMAP] = 0;

    /* nothing refused: the pages move, with no mapping made for a copy */
    unsigned mmaps = W.calls[K_MMAP], mremaps = W.calls[K_MREMAP];
    unsigned char *r = tw__realloc_res(&m, q, 4 * MB, 8 * MB, 4 * MB, 8 * MB, &res);
    assert_non_null(r);
    assert_int_equal(res, 0);
    assert_int_equal(W.calls[K_MREMAP], mremaps + 1);
    assert_int_equal(W.calls[K_MMAP], mmaps);
    assert_int_equal(W.foreign, 0);
    assert_filled(r, 2 * MB);
    assert_int_equal(r[4 * MB - 1], 2);
    r[8 * MB - 1] = 3;
    assert_int_equal(m.bytes, 8 * MB);
    free_and_check(&m, r, 8 * MB, res);
}

/* ---- through the timer ------------------------------------------------- */

#define TASKS 100000u /* slots: a pool mapped at 32,768 and grown twice */

struct snap {
    size_t pending;
    uint64_t next;
    uint64_t bytes;
};

static struct snap snap_of(tw_timer *t)
{
    struct snap s;
    struct tw_stats st;
    tw_stats(t, &st);
    s.pending = tw_pending(t);
    s.next = 0;
    (void)tw_next_deadline(t, &s.next);
    s.bytes = st.memory_bytes;
    return s;
}

/* count_fn for a counter the test reads while a driver may write it */
static void atomic_count_fn(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    atomic_fetch_add((_Atomic int *)arg, 1);
}

/* Schedules up to TASKS tasks (every 7th due in days: the coarse levels)
 * with the wrapped calls as set, on a manual timer or on a threaded one
 * of one shard (so that its one pool grows past 1 MiB), whose schedules
 * grow the pool with the shard's lock held. Each -ENOMEM must leave the
 * timer as it was; it is retried once, and a second -ENOMEM (a refusal
 * that lasts) ends the scheduling. Then every task scheduled must fire
 * once. Returns the tasks scheduled; *enomem the -ENOMEMs seen, *cap the
 * pool's slots when the scheduling ended. */
static unsigned run_script(int threaded, unsigned *enomem, uint32_t *cap)
{
    struct fake_clock c;
    struct atomic_clock ac;
    struct tw_options o = manual_opts(&c, 0, MS, 64);
    if (threaded) {
        atomic_store(&ac.now, 0);
        atomic_store(&ac.reads, 0);
        o.clock = atomic_clock_read;
        o.clock_ctx = &ac;
        o.threaded = 1;
        o.shards = 1; /* one pool, to grow past 1 MiB */
    }
    tw_timer *t;
    assert_int_equal(tw_create(&t, &o), 0);
    _Atomic int fired = 0;
    unsigned j;
    *enomem = 0;
    for (j = 0; j < TASKS; j++) {
        uint64_t delay = j % 7 ? (1 + j % 5000) * MS : (1 + j % 3) * 86400 * SEC;
        struct snap before = snap_of(t);
        unsigned r = W.refused;
        int rc = tw_schedule(t, delay, atomic_count_fn, &fired, NULL);
        if (rc == -ENOMEM) {
            assert_true(W.refused > r); /* only a refused call fails one */
            /* a driver's pass here (nothing is due at the clock's 0):
             * it must change nothing the snapshot looks at */
            if (threaded)
                assert_int_equal(tw_wake(t), 0);
            struct snap after = snap_of(t);
            assert_int_equal(after.pending, before.pending);
            assert_int_equal(after.next, before.next);
            assert_int_equal(after.bytes, before.bytes);
            assert_check(t);
            ++*enomem;
            /* the shard's lock was let go: the retry takes it again */
            if ((rc = tw_schedule(t, delay, atomic_count_fn, &fired, NULL)) == -ENOMEM)
                break;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(tw_pending(t), j + 1);
    }
    *cap = t->shards[0].eng.pool.cap;
    assert_check(t);
    if (threaded) {
        atomic_store(&ac.now, 4 * 86400 * SEC);
        assert_int_equal(tw_wake(t), 0); /* returns once the driver has looked */
    } else {
        c.now = 4 * 86400 * SEC;
        tw_advance(t, c.now);
    }
    assert_int_equal(atomic_load(&fired), (int)j);
    assert_int_equal(tw_pending(t), 0);
    assert_check(t);
    tw_destroy(t);
    return j;
}

/* Each of the script's mapping calls refused in turn, once, until n
 * passes the last, on a manual timer and on a threaded one. Every refusal
 * either finds a fallback or fails its schedule cleanly, and the retry
 * succeeds. */
static void each_call_refused(int threaded)
{
    unsigned enomem, failed = 0, absorbed = 0;
    uint32_t cap;
    wrap_reset();
    assert_int_equal(run_script(threaded, &enomem, &cap), TASKS);
    unsigned total = W.counted;
    assert_int_equal(W.refused, 0);
    assert_true(total >= 3); /* mapped, and grown at least twice */
    assert_int_equal(W.net, 0);
    assert_int_equal(W.foreign, 0);
    for (unsigned n = 1; n <= total; n++) {
        wrap_reset();
        W.nth = n;
        assert_int_equal(run_script(threaded, &enomem, &cap), TASKS);
        assert_int_equal(W.refused, 1);
        assert_true(enomem <= 1);
        failed += enomem;
        absorbed += 1 - enomem;
        assert_int_equal(W.net, 0);
        assert_int_equal(W.foreign, 0);
    }
    print_message("%s: %u mapping calls refused in turn: %u schedules failed cleanly, "
                  "%u refusals met by a fallback\n",
                  threaded ? "threaded" : "manual", total, failed, absorbed);
    assert_true(failed >= 1);
}

static void test_timer_each_call_refused(void **state)
{
    (void)state;
    NEED_WRAP();
    each_call_refused(0);
}

static void test_threaded_each_call_refused(void **state)
{
    (void)state;
    NEED_WRAP();
    each_call_refused(1);
}

/* Every call of one kind refused for the whole script. No madvise, or no
 * mremap: nothing fails (advice; a move 64-bit pools do not make here).
 * No mprotect: no reservation can be made writable, and the fallbacks
 * carry the pool as far as they can: mapped at its size, then moved by
 * mremap into a reservation, whose next growth in place is refused. No
 * mmap: the pool ends at what malloc gave it. Either way the schedules
 * past that fail cleanly, with every slot in use. */
static void test_timer_kind_refused(void **state)
{
    (void)state;
    NEED_WRAP();
    static const int kinds[] = { K_MADVISE, K_MREMAP, K_MPROTECT, K_MMAP };
    for (int threaded = 0; threaded < 2; threaded++) {
        uint32_t caps[4];
        for (int k = 0; k < 4; k++) {
            unsigned enomem;
            wrap_reset();
            W.fail_from[kinds[k]] = 1;
            unsigned n = run_script(threaded, &enomem, &caps[k]);
            if (n < TASKS) {
                assert_int_equal(enomem, 1);
                assert_int_equal(n, caps[k]); /* every slot in use */
            } else {
                assert_int_equal(enomem, 0);
            }
            assert_int_equal(W.net, 0);
            assert_int_equal(W.foreign, 0);
        }
        assert_true(caps[0] >= TASKS && caps[1] >= TASKS);
        assert_true(caps[3] * sizeof(struct tw__entry) < TW__MAP_MIN); /* malloc's */
        assert_true(caps[2] > caps[3]); /* the fallbacks mapped it */
    }
}

int main(void)
{
    const char *pre = getenv("LD_PRELOAD");
    on_valgrind = pre && strstr(pre, "vgpreload");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_unaligned),
        cmocka_unit_test(test_reserve_trims_to_alignment),
        cmocka_unit_test(test_reservation_not_writable),
        cmocka_unit_test(test_map_refused),
        cmocka_unit_test(test_grow_in_place_refused),
        cmocka_unit_test(test_move_refused_copies),
        cmocka_unit_test(test_move_past_reservation),
        cmocka_unit_test(test_unreserved_move_refused),
        cmocka_unit_test(test_timer_each_call_refused),
        cmocka_unit_test(test_threaded_each_call_refused),
        cmocka_unit_test(test_timer_kind_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
