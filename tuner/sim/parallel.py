"""Threads for independent simulations: a job's data-parallel replicas, the search's final
full simulations, a fleet's parts. The simulator's C loop releases the GIL (ctypes), so they
run on the cores at once; the results come back in order, so sums over them add in the same
order whatever the threads (the same figures to the last digit)."""

from __future__ import annotations

import os

#: requests below which a job's replicas run on one thread (a pool's start costs more)
PARALLEL_MIN_REQUESTS = 8192
#: requests simulated at once over all threads: each simulation holds its own per-request state
#: and step series, so a large job gets fewer threads (measured on the 2M-request job of issue
#: #26: two at a time peak at 0.84 GiB, its target 1 GiB; one at a time 0.53 GiB)
PARALLEL_REQUEST_BUDGET = 4_000_000


def parallel_workers(n_items: int, n_requests: int) -> int:
    """Threads for `n_items` independent simulations of a job of `n_requests` requests (or
    one job's replicas): one per core, at most one per item and PARALLEL_REQUEST_BUDGET
    requests in all; one below PARALLEL_MIN_REQUESTS, where a thread pool's start costs more
    than it saves."""
    if n_items < 2 or n_requests < PARALLEL_MIN_REQUESTS:
        return 1
    return max(1, min(n_items, os.cpu_count() or 1, PARALLEL_REQUEST_BUDGET // n_requests))


def thread_map(fn, items: list, workers: int, on_error=None) -> list:
    """[fn(item) for item in items] on `workers` threads (simulations: the C loop releases the
    GIL), results in item order. On an error in one item (or Ctrl-C) the items not started are
    dropped, `on_error()` runs (before the pool waits for the running ones: it can stop them)
    and the error is raised."""
    if workers <= 1:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor  # here: small jobs never pay for it

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(fn, item) for item in items]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            if on_error is not None:
                on_error()
            raise
