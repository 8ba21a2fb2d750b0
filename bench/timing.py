"""Timing for the Python benches: the median of a call's wall time."""

import time


def median_ms(fn, reps, warmup=3):
    """fn() called `warmup` times, then `reps` times timed; the median in milliseconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] * 1e3
