"""The step loop: InferMax's unified scheduler (Alg. 1), compiled with numba.

Free of I/O and of timing: for an offline job every request is known at t=0, so the schedule
does not depend on how long a step takes. The loop only decides each step's batch and records
its composition (tuner.sim.steps); the cost model prices all steps afterwards in one
vectorised call.

One step: start the budgets (`_begin_step`); under vLLM V0, admit whole prompts first
(`_admit_waiting`); otherwise give the running requests their next tokens, evicting by
recompute when KV runs out (`_schedule_running`), then admit waiting requests into what is
left; write the step's row and retire finished requests (`_record_step`); and, in fast mode,
jump over the decode-only stretch that follows (`_skip_decodes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit

from tuner.core.schedulers import SCHEDULER_PRESETS
from tuner.sim.steps import (
    DECODE_KV,
    DECODES,
    KV_BLOCKS,
    N_COLS,
    PREEMPTED,
    PREFILL_CTX,
    PREFILL_SQ,
    PREFILL_TOKENS,
    RUNNING,
    SAMPLED,
)

# How a schedule ended.
STATUS_OK = 0  # every request finished
STATUS_STUCK = 1  # a step could schedule nothing (a request cannot be placed)
STATUS_MAX_STEPS = 2  # the step limit ran out

# Slots of the loop's scalar state `c`.
N_RUNNING = 0  # running requests
WAIT_HEAD = 1  # front of the waiting deque
N_WAITING = 2
FREE_BLOCKS = 3  # KV blocks not held by anyone
CACHED_TOKENS = 4  # prompt tokens served from the prefix cache so far
DONE = 5  # finished requests
N_BATCH = 6  # requests scheduled in the current step
BUDGET = 7  # tokens left in the current step (C)
PREFILL_BUDGET = 8  # prefill tokens left in it (P)
N_PREEMPTED = 9  # requests evicted in the current step
ALLOCATED = 10  # KV blocks taken from the free pool so far (ages the prefix cache's LRU queue)
N_SLOTS = 11


class SchedulerParams(NamedTuple):
    """Knobs of the unified scheduler (numba reads it as is). C: tokens per step; P: prefill
    tokens per step (<= C); M: KV capacity in blocks; R_max: running requests. The switches
    are those of tuner.core.schedulers.SchedulerPreset."""

    token_budget: int  # C
    prefill_budget: int  # P
    max_running: int  # R_max
    block_size: int
    capacity_blocks: int  # M
    prefill_first: bool
    chunked_prefill: bool
    decodes_first: bool
    upfront_prompt_alloc: bool
    reserve_full: bool
    admit_full_sequence: bool
    cache_preempted: bool


def preset(scheduler: str, *, token_budget: int, max_running: int, block_size: int,
           capacity_blocks: int, prefill_budget: int | None = None) -> SchedulerParams:
    """The knobs of a named preset (tuner.core.schedulers.SCHEDULER_PRESETS)."""
    switches = SCHEDULER_PRESETS.get(scheduler)
    if switches is None:
        raise ValueError(f"unknown scheduler {scheduler!r}")
    P = token_budget if prefill_budget is None else min(prefill_budget, token_budget)
    return SchedulerParams(int(token_budget), int(P), int(max_running), int(block_size),
                           int(capacity_blocks), bool(switches.prefill_first),
                           bool(switches.chunked_prefill), bool(switches.decodes_first),
                           bool(switches.upfront_prompt_alloc), bool(switches.reserve_full),
                           bool(switches.admit_full_sequence), bool(switches.cache_preempted))


# The loop's state lives in four int64 arrays with named columns (req, grp, q, c) that the
# helpers share; one array per field (two dozen) made the loop 2-3x slower under numba.
# `req`: one row per request (inputs, then progress).
PROMPT = 0
OUTPUT = 1
GROUP = 2  # prefix group (-1: none)
PREFIX_BLOCKS = 3  # full blocks of its shared prefix
COMPUTED = 4  # tokens whose KV is computed
GENERATED = 5  # output tokens produced (kept across a recompute)
BLOCKS = 6  # private blocks held
SHARED = 7  # prefix blocks it uses from its group (0: none)
FINISH_STEP = 8  # step of its last token (-1: not yet)
ARRIVAL_STEP = 9  # first step it may be admitted at (replayed arrivals; else 0)
FIRST_STEP = 10  # step it was first admitted at (-1: not yet)
# a preempted request's blocks left in the prefix cache: how many, and the free-queue position
# they were queued behind (ALLOCATED + free blocks at its preemption)
CACHED_BLOCKS = 11
CACHED_BEHIND = 12
N_REQ_COLS = 13
# `grp`: one row per prefix group.
G_REF = 0  # running requests using the group's cached prefix
G_READY = 1  # 1: the prefix is computed (later requests may skip it)
G_OWNER = 2  # the request that computes it
G_BLOCKS = 3  # its blocks (set by the owner)
N_GRP_COLS = 4
# `q`: one row per list (running requests, the waiting deque, the current step's batch).
Q_RUNNING = 0  # running requests in admission order, q[Q_RUNNING, :c[N_RUNNING]]
Q_WAITING = 1  # circular deque of waiting requests, front at c[WAIT_HEAD]
Q_BATCH_REQ = 2  # the step's batch, q[Q_BATCH_*, :c[N_BATCH]]
Q_BATCH_NEW = 3  # tokens scheduled for it
Q_BATCH_PREFILL = 4  # 1: a prefill chunk (else one decode token)
N_Q_COLS = 5


def _new_state(prompt, output, gid, prefix_blocks, n_groups: int, capacity_blocks: int,
               arrival_step):
    """(req, grp, q, c) at step 0: every request waiting, in the given order."""
    n = prompt.shape[0]
    req = np.zeros((n, N_REQ_COLS), dtype=np.int64)
    req[:, PROMPT] = prompt
    req[:, OUTPUT] = output
    req[:, GROUP] = gid
    req[:, PREFIX_BLOCKS] = prefix_blocks
    req[:, ARRIVAL_STEP] = arrival_step
    req[:, FINISH_STEP] = req[:, FIRST_STEP] = -1
    grp = np.zeros((max(n_groups, 1), N_GRP_COLS), dtype=np.int64)
    grp[:, G_OWNER] = -1
    q = np.zeros((N_Q_COLS, n), dtype=np.int64)
    q[Q_WAITING] = np.arange(n)
    c = np.zeros(N_SLOTS, dtype=np.int64)
    c[N_WAITING] = n
    c[FREE_BLOCKS] = capacity_blocks
    return req, grp, q, c


@njit(inline="always")
def _ceil_div(a, b):
    return (a + b - 1) // b


@njit(cache=True)
def _grow(rec):
    new = np.zeros((rec.shape[0] * 2, rec.shape[1]), dtype=np.int64)
    new[: rec.shape[0]] = rec
    return new


@njit(inline="always")
def _prefix_lookup(req, grp, r, B):
    """(cached tokens it can skip, prefix blocks it shares, blocks to allocate for a new group's
    prefix) for request r at admission."""
    g = req[r, GROUP]
    # joins only when it uses the whole cached prefix: the group's blocks are held until its
    # last member leaves, so a member using part of them could hold more than it needs and
    # never fit (a request shorter than its group's prefix computes its prompt itself)
    if (g >= 0 and grp[g, G_REF] > 0 and grp[g, G_READY]
            and req[r, PREFIX_BLOCKS] >= grp[g, G_BLOCKS]):
        sh = grp[g, G_BLOCKS]
        return min(sh * B, req[r, PROMPT] + req[r, GENERATED] - 1), sh, 0
    if g >= 0 and grp[g, G_REF] == 0:  # r computes the prefix for its group
        return 0, req[r, PREFIX_BLOCKS], req[r, PREFIX_BLOCKS]
    return 0, 0, 0


@njit(inline="always")
def _push(q, j, r, new, is_prefill):
    """Put `new` tokens of request r at place j of the current step's batch."""
    q[Q_BATCH_REQ, j] = r
    q[Q_BATCH_NEW, j] = new
    q[Q_BATCH_PREFILL, j] = 1 if is_prefill else 0


@njit(inline="always")
def _release(req, grp, c, r):
    """Give back request r's KV: its private blocks, and its share of a group's prefix (whose
    blocks are freed with the group's last user)."""
    c[FREE_BLOCKS] += req[r, BLOCKS]
    req[r, BLOCKS] = 0
    if req[r, SHARED] > 0:
        g = req[r, GROUP]
        grp[g, G_REF] -= 1
        if grp[g, G_REF] == 0:
            c[FREE_BLOCKS] += grp[g, G_BLOCKS]
            grp[g, G_READY] = 0
        req[r, SHARED] = 0


@njit(inline="always")
def _evict_last(req, grp, q, c):
    """Preempt the most recently admitted running request by recompute (its KV is dropped, its
    generated tokens kept) and put it back at the front of the queue; returns it."""
    n = req.shape[0]
    c[N_RUNNING] -= 1
    victim = q[Q_RUNNING, c[N_RUNNING]]
    # its blocks join the free queue behind the ones already free (prefix caching keeps them
    # until allocations reach them; used when the preset has cache_preempted)
    req[victim, CACHED_BLOCKS] = req[victim, BLOCKS]
    req[victim, CACHED_BEHIND] = c[ALLOCATED] + c[FREE_BLOCKS]
    _release(req, grp, c, victim)
    req[victim, COMPUTED] = 0
    c[WAIT_HEAD] = (c[WAIT_HEAD] - 1 + n) % n
    q[Q_WAITING, c[WAIT_HEAD]] = victim
    c[N_WAITING] += 1
    c[N_PREEMPTED] += 1
    return victim


@njit(inline="always")
def _begin_step(k, c):
    c[BUDGET] = k.token_budget
    c[PREFILL_BUDGET] = k.prefill_budget
    c[N_BATCH] = 0
    c[N_PREEMPTED] = 0


@njit(inline="always")
def _admit_blocks(k, req, r, hit, new, sh):
    """Private blocks request r takes at admission (shared prefix blocks excluded)."""
    if k.reserve_full:
        nb = _ceil_div(req[r, PROMPT] + req[r, OUTPUT], k.block_size)
    elif k.upfront_prompt_alloc or k.prefill_first:  # V0's block manager: the whole prompt
        nb = _ceil_div(req[r, PROMPT] + req[r, GENERATED], k.block_size)
    else:  # V1: the first chunk's
        return max(_ceil_div(hit + new, k.block_size) - sh, 0)
    return nb - sh


@njit(cache=True)
def _admit_waiting(k, req, grp, q, c, step):
    """Admit waiting requests in queue order while R_max, the budgets and free KV allow; each
    gets its first chunk (V0: its whole prompt, or it waits). A request that has not arrived
    yet stops admission, unless the step would otherwise be empty (the clock then waits)."""
    n = req.shape[0]
    while c[N_WAITING] > 0 and c[N_RUNNING] < k.max_running:
        lim = min(c[BUDGET], c[PREFILL_BUDGET])
        if lim <= 0 and not k.prefill_first:  # V0 tests the whole prompt against lim below
            break
        r = q[Q_WAITING, c[WAIT_HEAD]]
        if req[r, ARRIVAL_STEP] > step and (c[N_RUNNING] > 0 or c[N_BATCH] > 0):
            break
        hit, sh, extra = _prefix_lookup(req, grp, r, k.block_size)
        if k.cache_preempted and req[r, CACHED_BLOCKS] > 0 and sh == 0:
            # a recompute skips the blocks the LRU free queue has not reused yet (vLLM frees a
            # sequence's blocks tail first, so what survives is its prefix)
            left = req[r, CACHED_BLOCKS] - max(c[ALLOCATED] - req[r, CACHED_BEHIND], 0)
            if left > 0:
                hit = max(hit, min(left * k.block_size, req[r, PROMPT] + req[r, GENERATED] - 1))
        remaining = req[r, PROMPT] + req[r, GENERATED] - hit
        if k.chunked_prefill:
            new = min(remaining, lim)
        elif remaining > lim:
            break
        else:
            new = remaining
        nb = _admit_blocks(k, req, r, hit, new, sh)
        if nb + extra > c[FREE_BLOCKS]:
            break
        if (k.admit_full_sequence and _ceil_div(req[r, PROMPT] + req[r, GENERATED], k.block_size)
                - sh + extra > c[FREE_BLOCKS]):
            break  # vLLM's scheduler_reserve_full_isl: the whole sequence must fit now
        c[WAIT_HEAD] = (c[WAIT_HEAD] + 1) % n
        c[N_WAITING] -= 1
        g = req[r, GROUP]
        if sh > 0:  # join the group (the first member owns its prefix)
            if grp[g, G_REF] == 0:
                grp[g, G_OWNER] = r
                grp[g, G_BLOCKS] = sh
            grp[g, G_REF] += 1
        c[FREE_BLOCKS] -= nb + extra
        c[ALLOCATED] += nb + extra
        req[r, CACHED_BLOCKS] = 0
        req[r, BLOCKS] = nb
        req[r, SHARED] = sh
        req[r, COMPUTED] = hit
        c[CACHED_TOKENS] += hit
        if req[r, FIRST_STEP] < 0:
            req[r, FIRST_STEP] = step
        q[Q_RUNNING, c[N_RUNNING]] = r
        c[N_RUNNING] += 1
        _push(q, c[N_BATCH], r, new, True)
        c[N_BATCH] += 1
        c[BUDGET] -= new
        c[PREFILL_BUDGET] -= new


@njit(inline="always")
def _schedule_running(k, req, grp, q, c):
    """Give each running request its next tokens in admission order (Sarathi: all decodes in a
    first pass, prefill chunks in a second), growing its KV; when KV runs out, evict from the
    most recently admitted end. Stops when the request being scheduled is itself evicted."""
    # the hot loop keeps the counters in locals (registers), stored back before any eviction
    nrun = c[N_RUNNING]
    free = c[FREE_BLOCKS]
    ns = c[N_BATCH]
    budget = c[BUDGET]
    pbudget = c[PREFILL_BUDGET]
    allocated = 0
    stop = False
    for ps in range(2 if k.decodes_first else 1):
        i = 0
        while not stop and i < nrun and budget > 0:
            r = q[Q_RUNNING, i]
            i += 1
            remaining = req[r, PROMPT] + req[r, GENERATED] - req[r, COMPUTED]
            is_pf = not (remaining == 1 and req[r, GENERATED] > 0)
            if k.decodes_first and is_pf == (ps == 0):
                continue
            new = 1
            if is_pf:  # a chunk within both budgets (unchunked: the whole rest, or it waits)
                lim = min(budget, pbudget)
                new = min(remaining, lim) if k.chunked_prefill else (
                    remaining if remaining <= lim else 0)
                if new <= 0:
                    continue
            need = _ceil_div(req[r, COMPUTED] + new, k.block_size) - req[r, SHARED] - req[r, BLOCKS]
            if need > free:
                c[FREE_BLOCKS] = free
                c[ALLOCATED] += allocated
                allocated = 0
                while need > c[FREE_BLOCKS] and not stop:
                    c[N_RUNNING] = nrun
                    stop = _evict_last(req, grp, q, c) == r
                    nrun = c[N_RUNNING]
                free = c[FREE_BLOCKS]
                if stop:
                    break
            if need > 0:
                free -= need
                allocated += need
                req[r, BLOCKS] += need
            _push(q, ns, r, new, is_pf)
            ns += 1
            budget -= new
            if is_pf:
                pbudget -= new
    c[N_RUNNING] = nrun
    c[FREE_BLOCKS] = free
    c[N_BATCH] = ns
    c[BUDGET] = budget
    c[PREFILL_BUDGET] = pbudget
    c[ALLOCATED] += allocated


@njit(inline="always")
def _record_step(row, k, req, grp, q, c, step):
    """Write the step's batch into its record row and advance its requests; a request that
    produced its last token releases its KV. Returns whether any request finished."""
    B = k.block_size
    any_done = False
    # sums in locals: numba cannot tell that `row` and the state arrays do not overlap
    pf_tokens = pf_sq = pf_ctx = decodes = decode_kv = sampled = 0
    for j in range(c[N_BATCH]):
        r = q[Q_BATCH_REQ, j]
        new = q[Q_BATCH_NEW, j]
        ctx = req[r, COMPUTED]
        if q[Q_BATCH_PREFILL, j]:
            pf_tokens += new
            pf_sq += new * new
            pf_ctx += new * ctx
        else:
            decodes += 1
            decode_kv += ctx + 1
        computed = ctx + new
        req[r, COMPUTED] = computed
        g = req[r, GROUP]
        if (g >= 0 and req[r, SHARED] > 0 and grp[g, G_OWNER] == r
                and computed >= grp[g, G_BLOCKS] * B):
            grp[g, G_READY] = 1
        if computed == req[r, PROMPT] + req[r, GENERATED]:
            req[r, GENERATED] += 1
            sampled += 1
            if req[r, GENERATED] == req[r, OUTPUT]:
                _release(req, grp, c, r)
                req[r, FINISH_STEP] = step
                c[DONE] += 1
                any_done = True
    if any_done:  # drop finished requests from the running list, keeping its order
        j = 0
        for i in range(c[N_RUNNING]):
            r = q[Q_RUNNING, i]
            if req[r, FINISH_STEP] < 0:
                q[Q_RUNNING, j] = r
                j += 1
        c[N_RUNNING] = j
    row[PREFILL_TOKENS] = pf_tokens
    row[PREFILL_SQ] = pf_sq
    row[PREFILL_CTX] = pf_ctx
    row[DECODES] = decodes
    row[DECODE_KV] = decode_kv
    row[SAMPLED] = sampled
    row[KV_BLOCKS] = k.capacity_blocks - c[FREE_BLOCKS]
    row[PREEMPTED] = c[N_PREEMPTED]
    row[RUNNING] = c[N_RUNNING]
    return any_done


@njit(inline="always")
def _skip_decodes(rec, step, k, req, q, c, max_steps):
    """After a step with only decodes, no preemption, no completion and every running request
    scheduled, the following steps repeat it until the first request finishes: admission
    cannot succeed (free KV only shrinks, the running count and budget stay), so the batch only
    changes by one token of context per request per step. Write those rows directly (as many
    as free KV allows) and advance the requests; returns (rec, step)."""
    B = k.block_size
    nrun = c[N_RUNNING]
    m = req[q[Q_RUNNING, 0], OUTPUT] - req[q[Q_RUNNING, 0], GENERATED]
    for i in range(1, nrun):
        r = q[Q_RUNNING, i]
        m = min(m, req[r, OUTPUT] - req[r, GENERATED])
    kmax = min(m - 1, max_steps - step)  # the step where a request finishes runs exactly
    # stop where the queue's head arrives; a head that arrived earlier and still waits is
    # held back by KV or R_max, which the skipped steps cannot free (offline jobs: always)
    if c[N_WAITING] > 0 and req[q[Q_WAITING, c[WAIT_HEAD]], ARRIVAL_STEP] >= step:
        kmax = min(kmax, req[q[Q_WAITING, c[WAIT_HEAD]], ARRIVAL_STEP] - step)
    if kmax <= 0:
        return rec, step
    # inc[j]: blocks allocated at skipped step j (1-based), when c_r + j crosses r's holding
    inc = np.zeros(kmax + 1, dtype=np.int64)
    sum_c = 0
    for i in range(nrun):
        r = q[Q_RUNNING, i]
        sum_c += req[r, COMPUTED]
        a = max((req[r, BLOCKS] + req[r, SHARED]) * B - req[r, COMPUTED] + 1, 1)
        while a <= kmax:
            inc[a] += 1
            a += B
    free = c[FREE_BLOCKS]
    n_skip = 0
    acc = 0
    while n_skip < kmax and acc + inc[n_skip + 1] <= free:
        n_skip += 1
        acc += inc[n_skip]
    if n_skip == 0:
        return rec, step
    while step + n_skip > rec.shape[0]:
        rec = _grow(rec)
    used = k.capacity_blocks - free
    acc = 0
    for j in range(1, n_skip + 1):
        acc += inc[j]
        row = rec[step + j - 1]
        row[DECODES] = nrun
        row[DECODE_KV] = sum_c + nrun * j
        row[SAMPLED] = nrun
        row[KV_BLOCKS] = used + acc
        row[RUNNING] = nrun
    for i in range(nrun):
        r = q[Q_RUNNING, i]
        a = max((req[r, BLOCKS] + req[r, SHARED]) * B - req[r, COMPUTED] + 1, 1)
        if n_skip >= a:
            req[r, BLOCKS] += 1 + (n_skip - a) // B
        req[r, COMPUTED] += n_skip
        req[r, GENERATED] += n_skip
    c[FREE_BLOCKS] = free - acc
    c[ALLOCATED] += acc
    return rec, step + n_skip


@njit(cache=True)
def _run(k, req, grp, q, c, fast, max_steps):
    """Steps until every request finished (or the loop is stuck / out of steps); returns the
    records, the status and the prompt tokens served from the prefix cache."""
    n = req.shape[0]
    rec = np.zeros((1024, N_COLS), dtype=np.int64)
    step = 0
    status = STATUS_OK
    while c[DONE] < n:
        if step >= max_steps:
            status = STATUS_MAX_STEPS
            break
        _begin_step(k, c)
        nrun_start = c[N_RUNNING]
        if k.prefill_first:  # vLLM V0: a step of whole prompts holds no decodes
            _admit_waiting(k, req, grp, q, c, step)
        if c[N_BATCH] == 0:
            _schedule_running(k, req, grp, q, c)
            if c[N_PREEMPTED] == 0 and not k.prefill_first:
                _admit_waiting(k, req, grp, q, c, step)
        if c[N_BATCH] == 0:
            status = STATUS_STUCK
            break
        if step >= rec.shape[0]:
            rec = _grow(rec)
        row = rec[step]
        any_done = _record_step(row, k, req, grp, q, c, step)
        step += 1
        if (fast and row[PREFILL_TOKENS] == 0 and c[N_PREEMPTED] == 0 and not any_done
                and c[N_BATCH] == nrun_start and c[N_RUNNING] > 0):
            rec, step = _skip_decodes(rec, step, k, req, q, c, max_steps)
    return rec[:step], status, c[CACHED_TOKENS]


@dataclass(frozen=True)
class Schedule:
    """What the scheduler did, one row per step (columns: tuner.sim.steps.STEP_COLUMNS)."""

    steps: np.ndarray  # int64 [n_steps, N_COLS]
    finish_step: np.ndarray  # step index at which each request produced its last token
    first_step: np.ndarray  # step index at which each request was first admitted
    status: int
    cached_tokens: int = 0  # prompt tokens served from the prefix cache instead of computed


def _prefix_groups(prefix_ids, prefix_tokens, n: int, block_size: int):
    """(dense group id per request or -1, full prefix blocks per request, number of groups)."""
    if prefix_ids is None:
        return np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64), 0
    raw = np.asarray(prefix_ids, dtype=np.int64)
    ptok = np.asarray(prefix_tokens, dtype=np.int64)
    pblocks = np.where(raw >= 0, ptok // block_size, 0).astype(np.int64)
    has = (raw >= 0) & (pblocks > 0)
    _, dense = np.unique(np.where(has, raw, -1), return_inverse=True)
    gid = np.where(has, dense - (0 if (~has).sum() == 0 else 1), -1).astype(np.int64)
    n_groups = int(gid.max()) + 1 if has.any() else 0
    return gid, np.where(has, pblocks, 0).astype(np.int64), n_groups


def run_schedule(prompt_tokens: np.ndarray, output_tokens: np.ndarray, params: SchedulerParams,
                 *, prefix_ids: np.ndarray | None = None, prefix_tokens: np.ndarray | None = None,
                 fast: bool = True, max_steps: int | None = None,
                 arrival_step: np.ndarray | None = None) -> Schedule:
    """Run the unified scheduler over requests queued in the given order.

    prefix_ids/prefix_tokens: requests of one group share a prompt prefix. Its full KV blocks are
    held once per group while any request of the group runs; a request admitted while they are
    cached and complete skips their prefill (vLLM's automatic prefix caching; blocks are not kept
    after the group's last request leaves, a conservative reading of its LRU cache).
    fast: skip ahead over decode-only stretches (same result as fast=False, step for step).
    arrival_step: replaying arrivals, the first step at which each request may be admitted (the
    queue is in arrival order); None: every request is there at step 0.
    """
    prompt = np.ascontiguousarray(prompt_tokens, dtype=np.int64)
    output = np.ascontiguousarray(output_tokens, dtype=np.int64)
    gid, pblocks, n_groups = _prefix_groups(prefix_ids, prefix_tokens, prompt.shape[0],
                                            params.block_size)
    if max_steps is None:
        # Every step makes progress on at least one token; recompute after preemption can at
        # most repeat work, so this bound is generous without being unbounded.
        max_steps = int(4 * (prompt.sum() + output.sum()) + 1000)
    k = SchedulerParams(*(int(v) for v in params[:5]), *(bool(v) for v in params[5:]))
    arrivals = (np.zeros(prompt.shape[0], dtype=np.int64) if arrival_step is None
                else np.ascontiguousarray(arrival_step, dtype=np.int64))
    req, grp, q, c = _new_state(prompt, output, gid, pblocks, n_groups, k.capacity_blocks,
                                arrivals)
    rec, status, cached = _run(k, req, grp, q, c, bool(fast), int(max_steps))
    return Schedule(steps=rec, finish_step=req[:, FINISH_STEP].copy(),
                    first_step=req[:, FIRST_STEP].copy(), status=int(status),
                    cached_tokens=int(cached))
