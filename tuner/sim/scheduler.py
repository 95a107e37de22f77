"""The step loop: InferMax's unified scheduler (Alg. 1), in C (tuner/sim/_kernels.c).

Free of I/O and of timing: for an offline job every request is known at t=0, so the schedule
does not depend on how long a step takes. The loop only decides each step's batch and records
its composition (tuner.sim.steps); the cost model prices all steps afterwards in one
vectorised call.

One step: start the budgets (`_begin_step`); under vLLM V0, admit whole prompts first
(`_admit_waiting`); otherwise give the running requests their next tokens, evicting by
recompute when KV runs out (`_schedule_running`), then admit waiting requests into what is
left; write the step's row and retire finished requests (`_record_step`); and, in fast mode,
jump over the decode-only stretch that follows (`_skip_decodes`). Those helpers are the C
file's functions of the same names; this module owns the state's layout and the Python API.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

import numpy as np

from tuner.core.schedulers import SCHEDULER_PRESETS
from tuner.sim import steps
from tuner.sim.kernels import check_layout, library
from tuner.sim.steps import (  # noqa: F401  (the step columns, re-exported for callers)
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
# How one call of the C loop paused (never a schedule's final status).
STATUS_FULL = 3  # the step record is full: grown, then the loop resumes
STATUS_PAUSED = 4  # a slice of steps is done: Python runs its signal handlers (Ctrl-C), resumes
_PAUSE_EVERY_STEPS = 1 << 16  # ~10-50 ms of steps between chances to react to Ctrl-C
_ABI_VERSION = 6  # the C functions' argument lists (tk_layout reports the library's); 5: client_cap,
# 6: state_blocks
#: rows of the step record handed on at a time when the caller streams them (on_steps): 4.5 MiB
#: of int64, so a job of millions of steps never holds its whole record
STREAM_ROWS = 1 << 16

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
    """Knobs of the unified scheduler (the C loop reads its fields in this order). C: tokens per step; P: prefill
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
    # a closed-loop client's cap on requests in flight (vllm bench serve --max-concurrency):
    # request r of the submission order is sent once r + 1 - client_cap have finished; 0: none
    client_cap: int = 0
    # blocks of a hybrid model's recurrent state (vLLM V1: one per Mamba / Gated DeltaNet KV
    # cache group, tuner.core.memory.MemoryPlan.state_blocks_per_request) every running request
    # holds besides its KV blocks: taken from the same pool at its admission (a preempted
    # request's again when it is readmitted) and counted in the admission check, freed when it
    # finishes or is preempted; 0: every layer attends (no state)
    state_blocks: int = 0


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


# The loop's state lives in four arrays with named columns (req, grp, q, c) that the helpers
# share (the C file indexes them with the same numbers, checked when it is loaded). Per-request
# state (req, grp, q) is int32: half the memory of a multi-million-request job; steps are
# capped below 2^31 (MAX_STEPS) so step numbers fit.
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
# `q`: one row per list, flat: the first four rows hold w = min(n, R_max) entries (no step
# runs or batches more than R_max requests), the waiting deque, last, all n.
Q_RUNNING = 0  # running requests in admission order, q[Q_RUNNING * w:][:c[N_RUNNING]]
Q_BATCH_REQ = 1  # the step's batch, q[Q_BATCH_* * w:][:c[N_BATCH]]
Q_BATCH_NEW = 2  # tokens scheduled for it
Q_BATCH_PREFILL = 3  # 1: a prefill chunk (else one decode token)
Q_WAITING = 4  # circular deque of waiting requests, front at c[WAIT_HEAD]
N_Q_COLS = 5
MAX_STEPS = 2**31 - 1  # step numbers are int32 in the request state


def _new_state(prompt, output, gid, prefix_blocks, n_groups: int, capacity_blocks: int,
               arrival_step, width: int):
    """(req, grp, q, c) at step 0: every request waiting, in the given order; `width`: the
    length of q's short rows (min(n, R_max)); gid, prefix_blocks, arrival_step None: no group,
    no prefix, every request there at step 0 (no n-long temporaries for the common case)."""
    n = prompt.shape[0]
    req = np.zeros((n, N_REQ_COLS), dtype=np.int32)
    req[:, PROMPT] = prompt
    req[:, OUTPUT] = output
    req[:, GROUP] = -1 if gid is None else gid
    if prefix_blocks is not None:
        req[:, PREFIX_BLOCKS] = prefix_blocks
    if arrival_step is not None:
        req[:, ARRIVAL_STEP] = arrival_step
    req[:, FINISH_STEP] = req[:, FIRST_STEP] = -1
    grp = np.zeros((max(n_groups, 1), N_GRP_COLS), dtype=np.int32)
    grp[:, G_OWNER] = -1
    q = np.zeros(Q_WAITING * width + n, dtype=np.int32)
    q[Q_WAITING * width:] = np.arange(n)
    c = np.zeros(N_SLOTS, dtype=np.int64)
    c[N_WAITING] = n
    c[FREE_BLOCKS] = capacity_blocks
    return req, grp, q, c


@dataclass(frozen=True)
class Schedule:
    """What the scheduler did, one row per step (columns: tuner.sim.steps.STEP_COLUMNS)."""

    steps: np.ndarray  # int64 [n_steps, N_COLS]
    finish_step: np.ndarray  # step index at which each request produced its last token
    first_step: np.ndarray  # step index at which each request was first admitted
    status: int
    cached_tokens: int = 0  # prompt tokens served from the prefix cache instead of computed


def prefix_groups(prefix_ids, prefix_tokens, n: int, block_size: int):
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


@cache
def _kernel():
    """The C library, checked once against this module's layout (the order is tk_layout's)."""
    lib = library()
    check_layout(lib, [steps.N_COLS, steps.PREFILL_TOKENS, steps.PREFILL_SQ, steps.PREFILL_CTX,
                       steps.DECODES, steps.DECODE_KV, steps.SAMPLED, steps.KV_BLOCKS,
                       steps.PREEMPTED, steps.RUNNING, N_SLOTS, N_REQ_COLS, N_GRP_COLS,
                       N_Q_COLS, len(SchedulerParams._fields), PROMPT, OUTPUT, GROUP,
                       PREFIX_BLOCKS, FINISH_STEP, ARRIVAL_STEP, FIRST_STEP, CACHED_TOKENS,
                       N_WAITING, FREE_BLOCKS, G_OWNER, Q_WAITING, STATUS_FULL, STATUS_PAUSED,
                       _ABI_VERSION])
    return lib


def _run(k: SchedulerParams, req, grp, q, width: int, c, fast: bool, max_steps: int,
         on_steps=None, cancel=None):
    """The C loop until the schedule ends; returns to Python every _PAUSE_EVERY_STEPS steps so
    a Ctrl-C lands promptly. With `on_steps` None the step record grows when full (doubling, as
    a list would) and is returned whole; else every STREAM_ROWS steps are handed to
    on_steps(rows) (a view, reused afterwards) and the record returned is empty: the memory
    stays flat however many steps the job takes. `cancel`: a threading.Event; when it is set
    the loop raises KeyboardInterrupt at its next pause (a replica scheduled on a worker
    thread, whose own thread never sees Ctrl-C). Returns (records, status, prompt tokens
    served from the prefix cache)."""
    lib = _kernel()
    kp = np.array(k, dtype=np.int64)
    n = req.shape[0]
    # not zeroed: the loop writes every column of each row it records (write_row, or a memset
    # first), and no row past the steps recorded is read; zeroing the ~4.7 MB of STREAM_ROWS
    # was ~0.25 ms a replica
    rec = np.empty((STREAM_ROWS if on_steps is not None else 1024, N_COLS), dtype=np.int64)
    max_out = int(req[:, OUTPUT].max(initial=0))
    inc = np.zeros(max_out + 2, dtype=np.int64)  # skip scratch
    # the lazy decodes' scratch (tk_run): finish buckets by step mod H (H > any request's
    # steps left), block phases, the running list (2 x width) and its exact requests; per
    # request: its base step (-1: exact) and bucket link
    hsize = 1 << max(max_out + 2, 2).bit_length()
    lz = np.zeros(hsize + k.block_size + 3 * width + 3, dtype=np.int64)
    lz[:hsize] = -1
    aux = np.zeros(2 * n, dtype=np.int32)
    aux[:n] = -1
    step = np.zeros(1, dtype=np.int64)
    base = 0  # the step in rec's first row
    while True:
        status = lib.tk_run(kp, req, n, grp, q, width, c, rec, base, rec.shape[0], step,
                            int(fast), max_steps, int(step[0]) + _PAUSE_EVERY_STEPS, inc, lz,
                            hsize, aux)
        if status == STATUS_FULL and on_steps is not None:
            on_steps(rec)
            base = int(step[0])
        elif status == STATUS_FULL:
            grown = np.zeros((rec.shape[0] * 2, N_COLS), dtype=np.int64)
            grown[: rec.shape[0]] = rec
            rec = grown
        elif status == STATUS_PAUSED:
            if cancel is not None and cancel.is_set():
                raise KeyboardInterrupt
        else:
            done = rec[: int(step[0]) - base]
            if on_steps is None:
                return done, int(status), int(c[CACHED_TOKENS])
            if len(done):
                on_steps(done)
            return rec[:0], int(status), int(c[CACHED_TOKENS])


def multi_step_outputs(output_tokens: np.ndarray, run_steps: int) -> np.ndarray:
    """The output tokens each request is computed for when the engine runs `run_steps` decode
    steps per scheduler call (vLLM V0 --num-scheduler-steps): the prefill step samples the
    first token, then the worker runs the batch for whole runs of `run_steps` steps without
    checking stop conditions (vLLM 0.6 MultiStepOutputProcessor truncates the tokens after EOS
    or max_tokens on the host afterwards), so a request that stops mid-run keeps its slot, its
    lookahead KV slots and its share of the GPU work to the run's end, and the next scheduler
    call, the first chance to admit a waiting request, comes only then. Scheduling those
    lengths gives both: every request's last step ends a run. Unchanged for run_steps <= 1."""
    out = np.asarray(output_tokens)
    if run_steps <= 1:
        return out
    runs = -(-(out.astype(np.int64) - 1) // run_steps)  # ceil((o - 1) / N) decode runs
    return np.where(out > 1, 1 + runs * run_steps, out).astype(out.dtype, copy=False)


def step_limit(prompt: np.ndarray, output: np.ndarray, max_steps: int | None = None) -> int:
    """The steps a schedule may take: `max_steps`, or (None) a bound no schedule that makes
    progress reaches (every step makes progress on at least one token; recompute after a
    preemption can at most repeat work), within MAX_STEPS either way."""
    if max_steps is None:
        max_steps = int(4 * (prompt.sum(dtype=np.int64) + output.sum(dtype=np.int64)) + 1000)
    return min(int(max_steps), MAX_STEPS)


def run_schedule(prompt_tokens: np.ndarray, output_tokens: np.ndarray, params: SchedulerParams,
                 *, prefix_ids: np.ndarray | None = None, prefix_tokens: np.ndarray | None = None,
                 fast: bool = True, max_steps: int | None = None,
                 arrival_step: np.ndarray | None = None, on_steps=None,
                 cancel=None) -> Schedule:
    """Run the unified scheduler over requests queued in the given order.

    prefix_ids/prefix_tokens: requests of one group share a prompt prefix. Its full KV blocks are
    held once per group while any request of the group runs; a request admitted while they are
    cached and complete skips their prefill (vLLM's automatic prefix caching; blocks are not kept
    after the group's last request leaves, a conservative reading of its LRU cache).
    fast: running decodes priced as a count and a context sum between the steps where one
    finishes (V0's prompt-first loop: skip ahead over decode-only stretches); the same rows
    as fast=False, step for step.
    arrival_step: replaying arrivals, the first step at which each request may be admitted (the
    queue is in arrival order); None: every request is there at step 0.
    on_steps: called with consecutive slices of the step record (in step order, views reused
    after the call) instead of keeping it; Schedule.steps is then empty.
    cancel: a threading.Event that stops the loop (KeyboardInterrupt) at its next pause.
    """
    prompt, output = np.asarray(prompt_tokens), np.asarray(output_tokens)
    gid, pblocks, n_groups = None, None, 0
    if prefix_ids is not None:
        gid, pblocks, n_groups = prefix_groups(prefix_ids, prefix_tokens, prompt.shape[0],
                                                params.block_size)
    max_steps = step_limit(prompt, output, max_steps)
    k = SchedulerParams(*(int(v) for v in params[:5]), *(bool(v) for v in params[5:12]),
                        int(params.client_cap), int(params.state_blocks))
    width = max(min(prompt.shape[0], k.max_running), 1)
    req, grp, q, c = _new_state(prompt, output, gid, pblocks, n_groups, k.capacity_blocks,
                                arrival_step, width)
    rec, status, cached = _run(k, req, grp, q, width, c, bool(fast), max_steps, on_steps,
                               cancel)
    return Schedule(steps=rec, finish_step=req[:, FINISH_STEP].astype(np.int64),
                    first_step=req[:, FIRST_STEP].astype(np.int64), status=int(status),
                    cached_tokens=int(cached))
