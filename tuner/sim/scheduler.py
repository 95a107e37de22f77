"""The step loop: InferMax's unified scheduler (seed 001, Alg. 1), compiled with numba.

Free of I/O and of timing: for an offline job every request is known at t=0, so the schedule
does not depend on how long a step takes. The loop only decides each step's batch and records
its composition; the cost model prices all steps afterwards in one vectorised call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

# Columns of the per-step record.
PREFILL_TOKENS, PREFILL_SQ, PREFILL_CTX, DECODES, DECODE_KV, SAMPLED, KV_BLOCKS, PREEMPTED, RUNNING = range(9)
N_COLS = 9

STATUS_OK, STATUS_STUCK, STATUS_MAX_STEPS = 0, 1, 2


@dataclass(frozen=True)
class SchedulerParams:
    """Knobs of the unified scheduler. C: tokens per step; P: prefill tokens per step (<= C);
    M: KV capacity in blocks; R_max: running requests."""

    token_budget: int  # C
    prefill_budget: int  # P
    max_running: int  # R_max
    block_size: int
    capacity_blocks: int  # M
    prefill_first: bool  # vLLM V0: a step is either prefills or decodes, prefills win
    chunked_prefill: bool
    decodes_first: bool  # Sarathi: all decodes, then ongoing prefills, then new requests
    upfront_prompt_alloc: bool  # Sarathi on vLLM V0's block manager: whole prompt at admission
    reserve_full: bool  # eviction-free: reserve prompt + output at admission


def preset(scheduler: str, *, token_budget: int, max_running: int, block_size: int,
           capacity_blocks: int, prefill_budget: int | None = None) -> SchedulerParams:
    """Scheduler presets of the unified algorithm (names as in tuner.core.config.SCHEDULERS)."""
    base = scheduler.removesuffix("-noevict")
    reserve = scheduler.endswith("-noevict")
    P = token_budget if prefill_budget is None else min(prefill_budget, token_budget)
    if base == "vllm":  # V1: one budget, running list in admission order, incremental KV
        return SchedulerParams(token_budget, P, max_running, block_size, capacity_blocks,
                               False, True, False, False, reserve)
    if base == "vllm-v0":  # V0 default: prefill-first, no chunking, no hybrid batches
        return SchedulerParams(token_budget, P, max_running, block_size, capacity_blocks,
                               True, False, False, False, reserve)
    if base == "sarathi":  # seed 004 Alg. 3
        return SchedulerParams(token_budget, P, max_running, block_size, capacity_blocks,
                               False, True, True, True, reserve)
    raise ValueError(f"unknown scheduler {scheduler!r}")


@njit(cache=True)
def _ceil_div(a, b):
    return (a + b - 1) // b


@njit(cache=True)
def _grow(rec):
    new = np.zeros((rec.shape[0] * 2, rec.shape[1]), dtype=np.int64)
    new[: rec.shape[0]] = rec
    return new


@njit(cache=True)
def _admit_blocks(r, prompt, output, generated, new, B, upfront, reserve_full, shared):
    """Private blocks a request needs at admission (shared prefix blocks excluded)."""
    if reserve_full:
        nb = _ceil_div(prompt[r] + output[r], B)
    elif upfront:
        nb = _ceil_div(prompt[r] + generated[r], B)
    else:
        nb = -1  # caller: from the first chunk
    return nb - shared if nb >= 0 else nb


@njit(cache=True)
def _prefix_lookup(r, gid, pblocks, group_ref, group_ready, group_blocks, prompt, generated, B):
    """(cached tokens it can skip, prefix blocks it shares, blocks to allocate for a new group's
    prefix) for request r at admission."""
    g = gid[r]
    if g >= 0 and group_ref[g] > 0 and group_ready[g]:
        sh = min(pblocks[r], group_blocks[g])
        return min(sh * B, prompt[r] + generated[r] - 1), sh, 0
    if g >= 0 and group_ref[g] == 0:  # r computes the prefix for its group
        return 0, pblocks[r], pblocks[r]
    return 0, 0, 0


@njit(cache=True)
def _join_group(r, g, sh, group_ref, group_owner, group_blocks):
    if sh > 0:
        if group_ref[g] == 0:
            group_owner[g] = r
            group_blocks[g] = sh
        group_ref[g] += 1


@njit(cache=True)
def _run(prompt, output, gid, pblocks, n_groups, C, P, R_max, B, cap_blocks, prefill_first,
         chunked, decodes_first, upfront, reserve_full, fast, max_steps):
    n = prompt.shape[0]
    computed = np.zeros(n, dtype=np.int64)
    generated = np.zeros(n, dtype=np.int64)
    blocks = np.zeros(n, dtype=np.int64)  # private blocks of each request
    shared = np.zeros(n, dtype=np.int64)  # prefix blocks it uses from its group (0: none)
    finish_step = np.full(n, -1, dtype=np.int64)
    group_ref = np.zeros(max(n_groups, 1), dtype=np.int64)
    group_ready = np.zeros(max(n_groups, 1), dtype=np.bool_)
    group_owner = np.full(max(n_groups, 1), -1, dtype=np.int64)
    group_blocks = np.zeros(max(n_groups, 1), dtype=np.int64)  # set by the group's owner
    running = np.empty(n, dtype=np.int64)
    nrun = 0
    wq = np.empty(n, dtype=np.int64)  # circular deque of waiting requests
    for i in range(n):
        wq[i] = i
    wh = 0
    wc = n
    free = cap_blocks
    sched_r = np.empty(n, dtype=np.int64)
    sched_new = np.empty(n, dtype=np.int64)
    sched_pf = np.empty(n, dtype=np.bool_)
    next_alloc = np.empty(n, dtype=np.int64)
    rec = np.zeros((1024, 9), dtype=np.int64)
    cached_tokens = 0
    step = 0
    done = 0
    status = 0
    while done < n:
        if step >= max_steps:
            status = 2
            break
        budget = C
        pbudget = P
        ns = 0
        preempted = 0
        prefill_only = False
        nrun_start = nrun
        if prefill_first:
            # vLLM V0: admit whole prompts while they fit; such a step holds no decodes.
            while wc > 0 and nrun < R_max:
                r = wq[wh]
                hit, sh, extra = _prefix_lookup(r, gid, pblocks, group_ref, group_ready,
                                                group_blocks, prompt, generated, B)
                need = prompt[r] + generated[r] - hit
                if need > budget or need > pbudget:
                    break
                # V0's block manager allocates the whole prompt (+ output when eviction-free)
                nb = _admit_blocks(r, prompt, output, generated, need, B, True, reserve_full, sh)
                if nb + extra > free:
                    break
                wh = (wh + 1) % n
                wc -= 1
                _join_group(r, gid[r], sh, group_ref, group_owner, group_blocks)
                free -= nb + extra
                blocks[r] = nb
                shared[r] = sh
                computed[r] = hit
                cached_tokens += hit
                running[nrun] = r
                nrun += 1
                sched_r[ns] = r
                sched_new[ns] = need
                sched_pf[ns] = True
                ns += 1
                budget -= need
                pbudget -= need
            prefill_only = ns > 0
        if not prefill_only:
            passes = 2 if decodes_first else 1
            stop = False
            for ps in range(passes):
                if stop:
                    break
                i = 0
                while i < nrun:
                    if budget <= 0:
                        break
                    r = running[i]
                    remaining = prompt[r] + generated[r] - computed[r]
                    is_pf = not (remaining == 1 and generated[r] > 0)
                    if decodes_first and ((ps == 0 and is_pf) or (ps == 1 and not is_pf)):
                        i += 1
                        continue
                    if is_pf:
                        lim = budget if budget < pbudget else pbudget
                        if chunked:
                            new = remaining if remaining < lim else lim
                        else:
                            new = remaining if remaining <= lim else 0
                        if new <= 0:
                            i += 1
                            continue
                    else:
                        new = 1
                    need = _ceil_div(computed[r] + new, B) - shared[r] - blocks[r]
                    self_preempted = False
                    while need > free:
                        victim = running[nrun - 1]
                        nrun -= 1
                        free += blocks[victim]
                        blocks[victim] = 0
                        computed[victim] = 0
                        gv = gid[victim]
                        if shared[victim] > 0:
                            group_ref[gv] -= 1
                            if group_ref[gv] == 0:
                                free += group_blocks[gv]
                                group_ready[gv] = False
                            shared[victim] = 0
                        wh = (wh - 1 + n) % n
                        wq[wh] = victim
                        wc += 1
                        preempted += 1
                        if victim == r:
                            self_preempted = True
                            break
                    if self_preempted:
                        stop = True
                        break
                    if need > 0:
                        free -= need
                        blocks[r] += need
                    sched_r[ns] = r
                    sched_new[ns] = new
                    sched_pf[ns] = is_pf
                    ns += 1
                    budget -= new
                    if is_pf:
                        pbudget -= new
                    i += 1
            if preempted == 0 and not prefill_first:
                while wc > 0 and budget > 0 and pbudget > 0 and nrun < R_max:
                    r = wq[wh]
                    hit, sh, extra = _prefix_lookup(r, gid, pblocks, group_ref, group_ready,
                                                    group_blocks, prompt, generated, B)
                    remaining = prompt[r] + generated[r] - hit
                    lim = budget if budget < pbudget else pbudget
                    if chunked:
                        new = remaining if remaining < lim else lim
                    else:
                        if remaining > lim:
                            break
                        new = remaining
                    nb = _admit_blocks(r, prompt, output, generated, new, B, upfront,
                                       reserve_full, sh)
                    if nb < 0:
                        nb = _ceil_div(hit + new, B) - sh
                        if nb < 0:
                            nb = 0
                    if nb + extra > free:
                        break
                    wh = (wh + 1) % n
                    wc -= 1
                    _join_group(r, gid[r], sh, group_ref, group_owner, group_blocks)
                    free -= nb + extra
                    blocks[r] = nb
                    shared[r] = sh
                    computed[r] = hit
                    cached_tokens += hit
                    running[nrun] = r
                    nrun += 1
                    sched_r[ns] = r
                    sched_new[ns] = new
                    sched_pf[ns] = True
                    ns += 1
                    budget -= new
                    pbudget -= new
        if ns == 0:
            status = 1
            break
        if step >= rec.shape[0]:
            rec = _grow(rec)
        row = rec[step]
        any_done = False
        for k in range(ns):
            r = sched_r[k]
            new = sched_new[k]
            ctx = computed[r]
            if sched_pf[k]:
                row[0] += new
                row[1] += new * new
                row[2] += new * ctx
            else:
                row[3] += 1
                row[4] += ctx + 1
            computed[r] = ctx + new
            g = gid[r]
            if g >= 0 and shared[r] > 0 and group_owner[g] == r and computed[r] >= group_blocks[g] * B:
                group_ready[g] = True
            if computed[r] == prompt[r] + generated[r]:
                generated[r] += 1
                row[5] += 1
                if generated[r] == output[r]:
                    free += blocks[r]
                    blocks[r] = 0
                    if shared[r] > 0:
                        group_ref[g] -= 1
                        if group_ref[g] == 0:
                            free += group_blocks[g]
                            group_ready[g] = False
                    finish_step[r] = step
                    done += 1
                    any_done = True
        if any_done:
            j = 0
            for i in range(nrun):
                r = running[i]
                if finish_step[r] < 0:
                    running[j] = r
                    j += 1
            nrun = j
        row[6] = cap_blocks - free
        row[7] = preempted
        row[8] = nrun
        step += 1
        # ---- fast mode: skip ahead over decode-only steps --------------------------------
        # After a step with only decodes, no preemption, no completion and every running
        # request scheduled, the following steps repeat it until the first request finishes:
        # admission cannot
        # succeed (free KV only shrinks, the running count and budget stay), so the batch only
        # changes by one token of context per request per step. Emit those rows directly.
        if (fast and row[0] == 0 and preempted == 0 and not any_done and ns == nrun_start
                and nrun > 0):
            m = output[running[0]] - generated[running[0]]
            for i in range(1, nrun):
                r = running[i]
                if output[r] - generated[r] < m:
                    m = output[r] - generated[r]
            kmax = m - 1  # the step where a request finishes runs through the exact path
            if kmax > max_steps - step:
                kmax = max_steps - step
            if kmax > 0:
                # step j (1-based) allocates a block for r when c_r + j crosses its holding
                inc = np.zeros(kmax + 1, dtype=np.int64)
                sum_c = 0
                for i in range(nrun):
                    r = running[i]
                    sum_c += computed[r]
                    a = (blocks[r] + shared[r]) * B - computed[r] + 1
                    if a < 1:
                        a = 1
                    next_alloc[r] = a
                    while a <= kmax:
                        inc[a] += 1
                        a += B
                k = 0
                used = cap_blocks - free
                acc = 0
                while k < kmax and acc + inc[k + 1] <= free:
                    k += 1
                    acc += inc[k]
                while step + k > rec.shape[0]:
                    rec = _grow(rec)
                acc = 0
                for j in range(1, k + 1):
                    acc += inc[j]
                    rw = rec[step + j - 1]
                    rw[3] = nrun
                    rw[4] = sum_c + nrun * j
                    rw[5] = nrun
                    rw[6] = used + acc
                    rw[8] = nrun
                if k > 0:
                    for i in range(nrun):
                        r = running[i]
                        a = next_alloc[r]
                        if k >= a:
                            blocks[r] += 1 + (k - a) // B
                        computed[r] += k
                        generated[r] += k
                    free -= acc
                    step += k
    return rec[:step], finish_step, status, cached_tokens


@dataclass(frozen=True)
class Schedule:
    """What the scheduler did, one row per step (columns named by the module constants)."""

    steps: np.ndarray  # int64 [n_steps, N_COLS]
    finish_step: np.ndarray  # step index at which each request produced its last token
    status: int
    cached_tokens: int = 0  # prompt tokens served from the prefix cache instead of computed

    def column(self, c: int) -> np.ndarray:
        return self.steps[:, c]


def run_schedule(prompt_tokens: np.ndarray, output_tokens: np.ndarray, params: SchedulerParams,
                 *, prefix_ids: np.ndarray | None = None, prefix_tokens: np.ndarray | None = None,
                 fast: bool = True, max_steps: int | None = None) -> Schedule:
    """Run the unified scheduler over requests queued in the given order.

    prefix_ids/prefix_tokens: requests of one group share a prompt prefix. Its full KV blocks are
    held once per group while any request of the group runs; a request admitted while they are
    cached and complete skips their prefill (vLLM's automatic prefix caching; blocks are not kept
    after the group's last request leaves, a conservative reading of its LRU cache).
    fast: skip ahead over decode-only stretches (same result as fast=False, step for step).
    """
    prompt = np.ascontiguousarray(prompt_tokens, dtype=np.int64)
    output = np.ascontiguousarray(output_tokens, dtype=np.int64)
    n = prompt.shape[0]
    if prefix_ids is None:
        gid = np.full(n, -1, dtype=np.int64)
        pblocks = np.zeros(n, dtype=np.int64)
        n_groups = 0
    else:
        raw = np.asarray(prefix_ids, dtype=np.int64)
        ptok = np.asarray(prefix_tokens, dtype=np.int64)
        pblocks = np.where(raw >= 0, ptok // params.block_size, 0).astype(np.int64)
        has = (raw >= 0) & (pblocks > 0)
        _, dense = np.unique(np.where(has, raw, -1), return_inverse=True)
        gid = np.where(has, dense - (0 if (~has).sum() == 0 else 1), -1).astype(np.int64)
        n_groups = int(gid.max()) + 1 if has.any() else 0
        pblocks = np.where(has, pblocks, 0).astype(np.int64)
    if max_steps is None:
        # Every step makes progress on at least one token; recompute after preemption can at
        # most repeat work, so this bound is generous without being unbounded.
        max_steps = int(4 * (prompt.sum() + output.sum()) + 1000)
    rec, finish, status, cached = _run(
        prompt, output, gid, pblocks, n_groups, params.token_budget, params.prefill_budget,
        params.max_running, params.block_size, params.capacity_blocks, params.prefill_first,
        params.chunked_prefill, params.decodes_first, params.upfront_prompt_alloc,
        params.reserve_full, fast, max_steps)
    return Schedule(steps=rec, finish_step=finish, status=int(status), cached_tokens=int(cached))
