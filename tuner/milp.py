"""InferMax's optimal schedule (seed 001 §3.3) as a MILP for tiny instances, solved by HiGHS
through `scipy.optimize.milp`. It is a yardstick for the scheduler presets, not a scheduler: a
few requests of a few tokens each, a horizon of tens of batches.

Model (offline: every request is present at batch 1). Request i has I_i prompt tokens and
O_i output tokens, so N_i = I_i + O_i - 1 tokens pass through the model (the last output is
never fed back), and its KV peaks at N_i tokens (InferMax: I + O - 1). KV is counted in tokens
(block size 1). For batches j = 1..T:

  h[i,j]  int in [0, N_i]   KV tokens of i held after batch j
  q[i,j]  int in [0, N_i]   progress: the furthest position i has ever computed
  c[i,j]  int in [0, N_i]   tokens of i processed in batch j
  a[i,j]  bin               q[i,j] >= I_i          (the prompt is done: outputs exist)
  f[i,j]  bin               q[i,j] == N_i          (finished)
  e[i,j]  bin               i is evicted at batch j (fixed to 0 without eviction)
  z[i,j]  bin               selects q[i,j] = max(q[i,j-1], h[i,j])
  s[i,j]  bin               i holds KV after batch j (only when R_max < number of requests)
  dec[i,j] bin, w[i,j] >= 0 i decodes in batch j, and the KV it reads (only when delta > 0)
  b[j]    bin               batch j is not empty
State before batch 1 is h = q = a = f = 0. Big-M constants are N_i. Constraints:

  tokens:     c = h - h[j-1] unless evicted   (c >= h - h[j-1], c <= h - h[j-1] + N e, c <= h)
  eviction:   h <= N (1 - e)                  (the KV is dropped, nothing is processed)
  prefill:    h <= I + N a[j-1]               (before the prompt is done: chunks of any size,
                                               but not past the prompt in the same batch)
  decode:     h <= q[j-1] + 1 + N (1 - a[j-1]) (afterwards one new position per batch; after an
                                               eviction the q + 1 tokens are recomputed as a
                                               chunked "refill", InferMax's I_{i,j} = m + 1)
  progress:   q = max(q[j-1], h)              (q >= q[j-1], q >= h, q <= q[j-1] + N z,
                                               q <= h + N (1 - z))
  phase:      I a <= q <= I - 1 + N a ;  N f <= q <= N - 1 + f ;  f[i,T] = 1
  finished:   h >= N f[j-1]                   (a finished request keeps h = N, never evicted,
                                               and its KV is no longer counted below)
  budget:     sum_i c <= C b ;  b[j] >= b[j+1]                     (InferMax (5), P = C)
  memory:     sum_i (h - N f[j-1]) <= M       (KV during batch j, finishing requests included)
  running:    N s >= h ;  sum_i (s - f[j-1]) <= R_max
  decode KV:  dec >= c - N (1 - a[j-1]) - N (q[j-1] - h[j-1]) ;  w >= h - N (1 - dec)

Objective, the linear batch-time model of InferMax §3.2 (`LinearCost`):
  sum_j  alpha b + beta sum_i c + gamma sum_i (h - N f) + delta sum_i w
i.e. per batch a fixed cost, a cost per token processed, a cost per KV token held after the
batch (the scheduler's KV_BLOCKS column) and a cost per KV token read by decode attention (its
DECODE_KV column). alpha = 1 and the rest 0 minimises the number of batches.

This is exactly the schedule space of `tuner.scheduler.run_schedule` with block size 1 and
P = C: every preset's schedule is feasible here (with a horizon of at least its step count), so
the optimum is a lower bound on every preset's `schedule_cost`. It relaxes the engines in that
any request may be evicted at any batch (not only the last admitted) and no order is imposed.
Compared with the paper's CSP it drops the separate prefill budget P (P = C, as in the presets)
and tracks progress q instead of InferMax's growing input size I_{i,j} (the same information:
after an eviction the refill target is max(I, q + 1)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from tuner import scheduler as sch


@dataclass(frozen=True)
class LinearCost:
    """t_batch = alpha + beta * tokens + gamma * kv_held + delta * decode_kv_read (seconds or any
    unit). tokens: prefill + decode tokens of the batch; kv_held: KV tokens held after the batch
    by unfinished requests; decode_kv_read: KV tokens read by the batch's decodes."""

    alpha: float = 1.0
    beta: float = 0.0
    gamma: float = 0.0
    delta: float = 0.0

    def __post_init__(self) -> None:
        if min(self.alpha, self.beta, self.gamma, self.delta) < 0:
            raise ValueError("LinearCost coefficients must be >= 0")


BATCHES = LinearCost(1.0)  # minimise the number of batches


def batch_times(steps: np.ndarray, coeffs: LinearCost, *, block_size: int = 1) -> np.ndarray:
    """Time of each step of a `tuner.scheduler` record (`Schedule.steps`) under `coeffs`.
    kv_held is the KV_BLOCKS column times `block_size` (what the scheduler holds, reserved
    blocks included)."""
    st = np.asarray(steps, dtype=np.float64).reshape(-1, sch.N_COLS)
    tokens = st[:, sch.PREFILL_TOKENS] + st[:, sch.DECODES]
    return (coeffs.alpha + coeffs.beta * tokens + coeffs.gamma * st[:, sch.KV_BLOCKS] * block_size
            + coeffs.delta * st[:, sch.DECODE_KV])


def schedule_cost(steps: np.ndarray, coeffs: LinearCost, *, block_size: int = 1) -> float:
    """Total time of a schedule (a `Schedule.steps` array, or `MilpSchedule.steps`)."""
    return float(batch_times(steps, coeffs, block_size=block_size).sum())


@dataclass(frozen=True)
class MilpSchedule:
    status: str  # "optimal", "time limit" (best found, not proven) or "infeasible"
    objective: float  # total time of the schedule under the LinearCost (inf when infeasible)
    bound: float  # the solver's lower bound on the optimum
    horizon: int
    tokens: np.ndarray  # int [n, batches]: tokens of each request processed in each batch
    kv: np.ndarray  # int [n, batches]: KV tokens held after each batch (finished: N_i)
    evicted: np.ndarray  # bool [n, batches]: request evicted (its KV dropped) at that batch
    finish_batch: np.ndarray  # int [n]: batch (0-based) producing each request's last token
    steps: np.ndarray  # int [batches, N_COLS], the scheduler's per-step record format

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"

    @property
    def makespan(self) -> float:
        return self.objective

    @property
    def n_batches(self) -> int:
        return int(self.steps.shape[0])

    @property
    def evictions(self) -> int:
        return int(self.steps[:, sch.PREEMPTED].sum()) if self.steps.size else 0


class _Model:
    """Variables in named [n, T] blocks; rows as (coefficient, variable) terms."""

    def __init__(self) -> None:
        self.lb: list[np.ndarray] = []
        self.ub: list[np.ndarray] = []
        self.integer: list[np.ndarray] = []
        self.size = 0
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.row_lb: list[float] = []
        self.row_ub: list[float] = []

    def add(self, shape, lb, ub, integer: bool) -> np.ndarray:
        k = int(np.prod(shape))
        idx = np.arange(self.size, self.size + k).reshape(shape)
        self.size += k
        self.lb.append(np.broadcast_to(np.asarray(lb, dtype=np.float64), shape).ravel())
        self.ub.append(np.broadcast_to(np.asarray(ub, dtype=np.float64), shape).ravel())
        self.integer.append(np.full(k, 1 if integer else 0))
        return idx

    def row(self, terms, lo=-np.inf, hi=np.inf) -> None:
        """lo <= sum(coef * x[var]) + constant <= hi; a term with var None is a constant."""
        r = len(self.row_lb)
        const = 0.0
        for coef, var in terms:
            if var is None:
                const += coef
            elif coef != 0:
                self.rows.append(r)
                self.cols.append(int(var))
                self.vals.append(float(coef))
        self.row_lb.append(lo - const)
        self.row_ub.append(hi - const)


def _heuristic_horizon(prompt, output, C, M, R_max, allow_eviction) -> int:
    """Steps of the feasible scheduler presets (block size 1) on this instance, so that the
    optimum is over at least every preset's schedule; a one-request-at-a-time schedule
    otherwise."""
    names = ["vllm", "sarathi", "vllm-v0"] if allow_eviction else []
    names += ["vllm-noevict", "sarathi-noevict", "vllm-v0-noevict"]
    best = 0
    for name in names:
        if name.startswith("vllm-v0") and int(prompt.max()) > C:
            continue
        params = sch.preset(name, token_budget=C, max_running=R_max, block_size=1,
                            capacity_blocks=M)
        s = sch.run_schedule(prompt, output, params, fast=False)
        if s.status == sch.STATUS_OK:
            best = max(best, s.steps.shape[0])
    if best == 0:
        best = int((-(-prompt // C) + output - 1).sum())
    return best


def solve_optimal_schedule(prompt_tokens, output_tokens, *, token_budget: int,
                           kv_capacity: int, max_running: int | None = None,
                           coeffs: LinearCost = BATCHES, allow_eviction: bool = True,
                           horizon: int | None = None, time_limit_s: float = 60.0
                           ) -> MilpSchedule:
    """The optimal schedule of the requests within `horizon` batches (see the module docstring).

    token_budget: C (tokens per batch); kv_capacity: M (KV tokens); max_running: R_max
    (default: unlimited). horizon: T batches (default: the most steps any feasible scheduler
    preset takes on this instance, so every preset's schedule is a candidate).
    """
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    output = np.asarray(output_tokens, dtype=np.int64)
    n = prompt.shape[0]
    if n == 0 or prompt.min() < 1 or output.min() < 1:
        raise ValueError("need at least one request, each with >= 1 prompt and >= 1 output token")
    C, M = int(token_budget), int(kv_capacity)
    R = n if max_running is None else int(max_running)
    N = prompt + output - 1
    T = int(horizon) if horizon is not None else _heuristic_horizon(prompt, output, C, M, R,
                                                                   allow_eviction)
    I = prompt
    Nc = N[:, None].astype(np.float64)
    m = _Model()
    h = m.add((n, T), 0, Nc, True)
    q = m.add((n, T), 0, Nc, True)
    c = m.add((n, T), 0, np.minimum(Nc, C), True)
    a = m.add((n, T), 0, 1, True)
    f_ub = np.ones((n, T))
    f_lb = np.zeros((n, T))
    f_lb[:, T - 1] = 1.0  # everything finishes within the horizon
    f = m.add((n, T), f_lb, f_ub, True)
    e = m.add((n, T), 0, 1 if allow_eviction else 0, True)
    z = m.add((n, T), 0, 1, True)
    b = m.add((T,), 0, 1, True)
    use_s = R < n
    s = m.add((n, T), 0, 1, True) if use_s else None
    use_w = coeffs.delta > 0
    dec = m.add((n, T), 0, 1, True) if use_w else None
    w = m.add((n, T), 0, Nc, False) if use_w else None

    def prev(var, i, j):
        return (1.0, var[i, j - 1]) if j > 0 else (0.0, None)

    for j in range(T):
        for i in range(n):
            Ni, Ii = float(N[i]), float(I[i])
            hp, qp, ap, fp = prev(h, i, j), prev(q, i, j), prev(a, i, j), prev(f, i, j)
            neg = lambda t: (-t[0], t[1])  # noqa: E731
            # tokens processed
            m.row([(1, c[i, j]), (-1, h[i, j]), hp], lo=0)
            m.row([(1, c[i, j]), (-1, h[i, j]), hp, (-Ni, e[i, j])], hi=0)
            m.row([(1, c[i, j]), (-1, h[i, j])], hi=0)
            # eviction drops the KV
            m.row([(1, h[i, j]), (Ni, e[i, j])], hi=Ni)
            # prefill up to the prompt, then one new position per batch
            m.row([(1, h[i, j]), (-Ni * ap[0], ap[1])], hi=Ii)
            m.row([(1, h[i, j]), neg(qp), (Ni * ap[0], ap[1])], hi=1 + Ni)
            # progress q = max(q[j-1], h)
            m.row([(1, q[i, j]), neg(qp)], lo=0)
            m.row([(1, q[i, j]), (-1, h[i, j])], lo=0)
            m.row([(1, q[i, j]), neg(qp), (-Ni, z[i, j])], hi=0)
            m.row([(1, q[i, j]), (-1, h[i, j]), (Ni, z[i, j])], hi=Ni)
            # phase and completion
            m.row([(1, q[i, j]), (-Ii, a[i, j])], lo=0)
            m.row([(1, q[i, j]), (-Ni, a[i, j])], hi=Ii - 1)
            m.row([(1, q[i, j]), (-Ni, f[i, j])], lo=0)
            m.row([(1, q[i, j]), (-1, f[i, j])], hi=Ni - 1)
            m.row([(1, h[i, j]), (-Ni * fp[0], fp[1])], lo=0)
            if use_s:
                m.row([(Ni, s[i, j]), (-1, h[i, j])], lo=0)
            if use_w:
                # dec >= c - N (1 - a[j-1]) - N (q[j-1] - h[j-1])
                m.row([(1, dec[i, j]), (-1, c[i, j]), (-Ni * ap[0], ap[1]),
                       (Ni * qp[0], qp[1]), (-Ni * hp[0], hp[1])], lo=-Ni)
                m.row([(1, w[i, j]), (-1, h[i, j]), (-Ni, dec[i, j])], lo=-Ni)
        m.row([(1, c[i, j]) for i in range(n)] + [(-C, b[j])], hi=0)
        if j + 1 < T:
            m.row([(1, b[j]), (-1, b[j + 1])], lo=0)
        mem = [(1, h[i, j]) for i in range(n)]
        if j > 0:
            mem += [(-float(N[i]), f[i, j - 1]) for i in range(n)]
        m.row(mem, hi=M)
        if use_s:
            run = [(1, s[i, j]) for i in range(n)]
            if j > 0:
                run += [(-1, f[i, j - 1]) for i in range(n)]
            m.row(run, hi=R)

    obj = np.zeros(m.size)
    obj[b] = coeffs.alpha
    obj[c.ravel()] += coeffs.beta
    obj[h.ravel()] += coeffs.gamma
    obj[f] += -coeffs.gamma * Nc
    if use_w:
        obj[w.ravel()] += coeffs.delta
    A = sparse.csr_array((m.vals, (m.rows, m.cols)), shape=(len(m.row_lb), m.size))
    res = milp(obj, integrality=np.concatenate(m.integer),
               bounds=Bounds(np.concatenate(m.lb), np.concatenate(m.ub)),
               constraints=LinearConstraint(A, m.row_lb, m.row_ub),
               options={"time_limit": float(time_limit_s), "mip_rel_gap": 1e-9})
    if res.x is None:
        empty = np.zeros((n, 0), dtype=np.int64)
        return MilpSchedule("infeasible", float("inf"), float("inf"), T, empty, empty,
                            empty.astype(bool), np.full(n, -1), np.zeros((0, sch.N_COLS), np.int64))
    x = np.rint(res.x).astype(np.int64)
    status = "optimal" if res.status == 0 else "time limit"
    bound = float(res.mip_dual_bound) if res.mip_dual_bound is not None else float("nan")
    return _decode(x[h], x[q], x[e].astype(bool), I, N, T, x[b], float(res.fun), bound, status)


def _decode(h, q, e, I, N, T, b, objective, bound, status) -> MilpSchedule:
    """Turn the solution into per-batch arrays and the scheduler's step record."""
    n = h.shape[0]
    used = int(b.sum())
    zero = np.zeros((n, 1), dtype=np.int64)
    hp = np.concatenate([zero, h], axis=1)[:, :T]
    qp = np.concatenate([zero, q], axis=1)[:, :T]
    tokens = np.where(e, 0, h - hp)
    evicted = e & (hp > 0) & (qp < N[:, None])
    decode = (qp >= I[:, None]) & (hp == qp) & (tokens == 1)
    prefill = (tokens > 0) & ~decode
    sampled = (q > qp) & (q >= I[:, None])
    finished = q >= N[:, None]
    steps = np.zeros((T, sch.N_COLS), dtype=np.int64)
    steps[:, sch.PREFILL_TOKENS] = np.where(prefill, tokens, 0).sum(0)
    steps[:, sch.PREFILL_SQ] = np.where(prefill, tokens * tokens, 0).sum(0)
    steps[:, sch.PREFILL_CTX] = np.where(prefill, tokens * hp, 0).sum(0)
    steps[:, sch.DECODES] = decode.sum(0)
    steps[:, sch.DECODE_KV] = np.where(decode, h, 0).sum(0)
    steps[:, sch.SAMPLED] = sampled.sum(0)
    steps[:, sch.KV_BLOCKS] = np.where(finished, 0, h).sum(0)
    steps[:, sch.PREEMPTED] = evicted.sum(0)
    steps[:, sch.RUNNING] = ((h > 0) & ~finished).sum(0)
    first = np.argmax(finished, axis=1)
    return MilpSchedule(status=status, objective=objective, bound=bound, horizon=T,
                        tokens=tokens[:, :used], kv=h[:, :used], evicted=evicted[:, :used],
                        finish_batch=first, steps=steps[:used])
