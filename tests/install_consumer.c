/* A user's program, built against the installed library via pkg-config.
 * The install test builds it as C and, when a C++ compiler is present, as
 * C++ too: both headers must compile there and link (extern "C"). It also
 * links it against the static library, with `pkg-config --static`. */
#include <stdio.h>
#include <twheel.h>
#include <twheel_purgatory.h>

static int fired;

static void on_timeout(tw_timer *t, tw_id id, void *arg)
{
    (void)t;
    (void)id;
    fired += *(int *)arg;
}

int main(void)
{
    tw_timer *t;
    int one = 1;
    if (tw_create(&t, NULL) != 0)
        return 1;
    uint64_t start = tw_now(t);
    for (int k = 0; k < 1000; k++)
        if (tw_schedule(t, (uint64_t)k * 1000000, on_timeout, &one, NULL) != 0)
            return 2;
    uint64_t d;
    while (tw_next_deadline(t, &d) == 0)
        tw_advance(t, d);
    printf("consumer: %d timers fired over %llu ms of timer time\n", fired,
           (unsigned long long)((tw_now(t) - start) / 1000000));
    tw_destroy(t);
    /* the library it runs with is the one these headers describe; the
     * script compares the version printed with pkg-config's */
    if (tw_version() != TW_VERSION_HEX)
        return 4;
    printf("consumer: version %u.%u.%u\n", tw_version() >> 16, (tw_version() >> 8) & 0xff,
           tw_version() & 0xff);
    /* the purgatory, on a manual timer: no threads */
    struct tw_purgatory_options po;
    tw_purgatory_options_init(&po);
    po.timer.threaded = 0;
    tw_purgatory *p;
    if (tw_purgatory_create(&p, &po) != 0)
        return 5;
    if (tw_purgatory_watched(p) != 0 || !tw_purgatory_timer(p))
        return 6;
    tw_purgatory_destroy(p, NULL, NULL);
    /* a threaded timer: its driver thread starts, fires a task due in the
     * past (tw_wake returns once it has run) and stops with nothing left */
    struct tw_options o;
    tw_options_init(&o);
    o.threaded = 1;
    o.shards = 1;
    if (tw_create(&t, &o) != 0)
        return 7;
    if (tw_schedule_at(t, 0, on_timeout, &one, NULL) != 0 || tw_wake(t) != 0)
        return 8;
    if (tw_stop(t, NULL, NULL) != 0)
        return 9;
    tw_destroy(t);
    printf("consumer: a threaded timer fired %d\n", fired - 1000);
    return fired == 1001 ? 0 : 3;
}
