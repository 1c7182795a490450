/* runtime.c: the threaded runtime (not yet built: see issue 4). */
#include <errno.h>

#include "timer.h"

int tw__runtime_start(tw_timer *t, const struct tw_options *o)
{
    (void)t;
    (void)o;
    return -ENOTSUP;
}

void tw__runtime_kick(tw_timer *t, uint64_t exp_ns)
{
    (void)t;
    (void)exp_ns;
}

int tw__runtime_on_callback_thread(tw_timer *t)
{
    (void)t;
    return 0;
}

void tw__runtime_free(tw_timer *t)
{
    (void)t;
}

int tw_stop(tw_timer *t, tw_fn unfired, void *arg)
{
    (void)unfired;
    (void)arg;
    return t ? -EINVAL : -EINVAL;
}
