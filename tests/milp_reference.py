"""InferMax's optimal schedule (§3.3) as a MILP for tiny instances, solved by HiGHS
through `scipy.optimize.milp`. A yardstick for the scheduler presets, not a scheduler: a few
requests of a few tokens each, a horizon of tens of batches. Test-only (tests/test_milp.py):
scipy comes with scikit-learn, not as a dependency of tuner's own.

What is scheduled (offline: every request is present at batch 1). Request i has I_i prompt and
O_i output tokens, so N_i = I_i + O_i - 1 tokens pass through the model (the last output is
never fed back) and its KV peaks at N_i tokens (InferMax: I + O - 1). KV is counted in tokens
(block size 1). The state of a request after a batch is (h, q): h the KV tokens it holds, q its
progress, the furthest position it has computed (h <= q; without eviction h = q). In one batch
it may
  * process tokens: h -> h' with h <= h' <= min(target, h + C), target = I while q < I
    (prefill in chunks of any size, but not past the prompt) and q + 1 afterwards (one new
    position per batch: a decode; after an eviction the q + 1 tokens are recomputed as a
    chunked prefill, InferMax's growing input size I_{i,j} = m_{i,j-1} + 1); q' = max(q, h').
    h' = h is waiting. An output token is produced whenever q' > q and q' >= I.
  * be evicted (when allowed and h > 0): h -> 0, q unchanged, nothing processed.
  * once q = N it is finished: it stays, holds nothing, costs nothing.
Each move has the batch features it contributes: tokens c = h' - h, KV during the batch h'
(memory), KV held after it (h' unless finished), decode KV read (h' if it is a decode), and
whether it occupies a running slot (h' > 0).

Formulation (a time-expanded network per request, coupled per batch). Identical requests
(same I, O) form a class g of k_g requests; x[g,j,a] in {0..k_g} counts the requests of class
g taking move a in batch j (j = 1..T), b[j] in {0,1} says batch j runs.
  flow:      k_g requests leave (0, 0) in batch 1; flow into each state after batch j equals
             the flow out of it in batch j + 1; all k_g end in (N, N) after batch T
  tokens:    sum_{g,a} c_a x[g,j,a] <= C b[j]                        (InferMax (5), P = C)
  memory:    sum_{g,a} h'_a x[g,j,a] <= M        (KV during batch j, finishing requests included)
  running:   sum_{g,a: h'_a > 0, unfinished} x[g,j,a] <= R_max
  batches:   k_g b[j] >= sum_{a from an unfinished state} x[g,j,a] ;  b[j] >= b[j+1]
Moves that cannot lie on a path from (0, 0) to (N, N) within T batches are left out.
Objective, the linear batch-time model of InferMax §3.2 (`LinearCost`):
  sum_j alpha b[j] + sum_{g,j,a} (beta c_a + gamma held_a + delta read_a) x[g,j,a]
a fixed cost per batch, a cost per token processed, per KV token held after the batch (the
scheduler's KV_BLOCKS column) and per KV token read by decode attention (its DECODE_KV column).
alpha = 1 and the rest 0 (`BATCHES`) minimises the number of batches.

The paper states the CSP with per-request integers and Big-M indicators (I_{i,j}, m_{i,j},
c_{i,j}, d, g, e, ...). Written that way (h, q, c integers with Big-M phase, finish, eviction
and decode indicators) HiGHS did not prove optimality for 8 requests within minutes; the
network form encodes the same (h, q) states one-hot, its LP relaxation is the convex hull of
each request's own schedules, and aggregating identical requests removes their symmetry. (The
Big-M form, not kept, and this one both agreed with an exhaustive search over the joint
states on a few hundred random tiny instances; tests/test_milp.py keeps that check.)

This is the schedule space of `tuner.sim.scheduler.run_schedule` with block size 1 and P = C:
every preset's schedule is feasible (with a horizon of at least its step count), so the
optimum is a lower bound on every preset's `schedule_cost`. It is wider than any engine's in
that any request may be evicted at any batch (not only the most recently admitted) and no
queue order is imposed. Against the paper's CSP it drops the separate prefill budget P (P = C,
as in the presets).

Size: 8 requests of up to ~8 tokens each solve in seconds without eviction; with eviction the
state space is quadratic in N and proving optimality for 8 distinct requests under tight
memory and R_max can take minutes (`time_limit_s` returns the best schedule found, status
"time limit").
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from tuner.core.schedulers import SCHEDULER_PRESETS
from tuner.sim import scheduler as sch
from tuner.sim import steps as cols


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
    """Time of each step of a `tuner.sim.scheduler` record (`Schedule.steps`) under `coeffs`.
    kv_held is the kv_blocks column times `block_size` (what the scheduler holds, reserved
    blocks included)."""
    st = np.asarray(steps, dtype=np.float64).reshape(-1, cols.N_COLS)
    tokens = st[:, cols.PREFILL_TOKENS] + st[:, cols.DECODES]
    return (coeffs.alpha + coeffs.beta * tokens + coeffs.gamma * st[:, cols.KV_BLOCKS] * block_size
            + coeffs.delta * st[:, cols.DECODE_KV])


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
    steps: np.ndarray  # int [batches, N_COLS]: the step record (tuner.sim.steps)

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
        return int(self.steps[:, cols.PREEMPTED].sum()) if self.steps.size else 0


class _Model:
    """Variables added in blocks; rows as lists of (coefficient, variable) terms."""

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
        """lo <= sum(coef * x[var]) <= hi."""
        r = len(self.row_lb)
        for coef, var in terms:
            if coef != 0:
                self.rows.append(r)
                self.cols.append(int(var))
                self.vals.append(float(coef))
        self.row_lb.append(lo)
        self.row_ub.append(hi)


def _preset_schedules(prompt, output, C, M, R_max, allow_eviction):
    """Steps of the scheduler presets that run on this instance (block size 1), each over a few
    request orders, keyed by (preset, order): upper bounds and a starting horizon."""
    names = ["vllm-basic", "sarathi", "vllm-v0"] if allow_eviction else []
    names += ["vllm-basic-noevict", "sarathi-noevict", "vllm-v0-noevict"]
    total = prompt + output
    orders = {"given": np.arange(prompt.size),
              "shortest-first": np.argsort(total, kind="stable"),
              "longest-first": np.argsort(-total, kind="stable"),
              "shortest-prompt": np.argsort(prompt, kind="stable"),
              "longest-output": np.argsort(-output, kind="stable")}
    out = {}
    for name in names:
        if not SCHEDULER_PRESETS[name].chunked_prefill and int(prompt.max()) > C:
            continue
        params = sch.preset(name, token_budget=C, max_running=R_max, block_size=1,
                            capacity_blocks=M)
        for oname, idx in orders.items():
            s = sch.run_schedule(prompt[idx], output[idx], params, fast=False)
            if s.status == sch.STATUS_OK:
                out[(name, oname)] = s.steps
    return out


def solve_optimal_schedule(prompt_tokens, output_tokens, *, token_budget: int,
                           kv_capacity: int, max_running: int | None = None,
                           coeffs: LinearCost = BATCHES, allow_eviction: bool = True,
                           horizon: int | None = None, time_limit_s: float = 60.0
                           ) -> MilpSchedule:
    """The optimal schedule of the requests (see the module docstring).

    token_budget: C (tokens per batch); kv_capacity: M (KV tokens); max_running: R_max
    (default: unlimited). time_limit_s: for the whole solve (status "time limit" if it ran out:
    the schedule is then the best found, not proven optimal).

    Horizon: a schedule of k batches costs at least k alpha + beta sum_i N_i, so a schedule of
    cost V has at most (V - beta sum N) / alpha batches. By default the solver starts from the
    step count of the cheapest scheduler preset that runs on the instance (its schedule fits,
    so its cost bounds the optimum and cuts the search), then widens the horizon until the
    best schedule found is cheaper than any schedule longer than the horizon: the result is the
    optimum over all schedules. With alpha = 0 there is no such bound: the horizon is the most
    steps any preset takes. `horizon` fixes T instead (the optimum over schedules of at most
    T batches).
    """
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    output = np.asarray(output_tokens, dtype=np.int64)
    n = prompt.shape[0]
    if n == 0 or prompt.min() < 1 or output.min() < 1:
        raise ValueError("need at least one request, each with >= 1 prompt and >= 1 output token")
    C, M = int(token_budget), int(kv_capacity)
    R = n if max_running is None else int(max_running)
    N = prompt + output - 1
    chain = -(-prompt // C) + output - 1  # fewest batches a request needs on its own
    valid = _preset_schedules(prompt, output, C, M, R, allow_eviction)
    costs = [(schedule_cost(st, coeffs), st.shape[0]) for st in valid.values()]
    floor_cost = coeffs.beta * float(N.sum())

    def cutoff(T):  # the cheapest known schedule that fits in T batches
        return min((v for v, k in costs if k <= T), default=np.inf)

    if horizon is not None:
        return _solve(prompt, output, C, M, R, coeffs, allow_eviction, int(horizon), np.inf,
                      time_limit_s)
    if coeffs.alpha <= 0:
        T = max((k for _, k in costs), default=int(chain.sum()))
        return _solve(prompt, output, C, M, R, coeffs, allow_eviction, T, cutoff(T),
                      time_limit_s)
    # every batch costs >= alpha: a schedule of cost V has <= (V - beta sum N) / alpha batches
    cap = (int(np.floor((min(costs)[0] - floor_cost) / coeffs.alpha + 1e-9)) if costs
           else int(chain.sum()))  # one request at a time fits if each request fits alone
    hints = _preset_schedules(prompt, output, C, M, R, True) if not allow_eviction else valid
    T = min(min((st.shape[0] for st in hints.values()), default=cap), cap)
    deadline = time.monotonic() + time_limit_s
    while True:
        T = max(T, int(chain.max()))
        res = _solve(prompt, output, C, M, R, coeffs, allow_eviction, T, cutoff(T),
                     deadline - time.monotonic())
        if res.status == "infeasible" and T < cap:
            T = min(2 * T, cap)  # no schedule that short: widen
            continue
        if res.status != "optimal":
            return res
        longest = int(np.floor((res.objective - floor_cost) / coeffs.alpha + 1e-9))
        if longest <= T:
            return res  # nothing longer than the horizon can be cheaper
        T = longest


@dataclass(frozen=True)
class _Network:
    """One request's states (h, q) and the moves between consecutive batches."""

    states: list[tuple[int, int]]
    src: np.ndarray  # per arc: state index before the batch
    dst: np.ndarray  # per arc: state index after it
    tokens: np.ndarray  # tokens processed
    held: np.ndarray  # KV held after the batch if still unfinished (else 0)
    mem: np.ndarray  # KV held during the batch (0 once finished before it)
    read: np.ndarray  # KV read by a decode (else 0)
    active: np.ndarray  # 1 if the request is unfinished before the batch and holds KV after
    evict: np.ndarray  # 1 for an eviction of a request holding KV
    start: int
    done: int


def _network(prompt: int, output: int, C: int, allow_eviction: bool) -> _Network:
    N = prompt + output - 1
    states = [(h, q) for q in range(N + 1) for h in range(q + 1)] if allow_eviction else \
        [(h, h) for h in range(N + 1)]
    index = {st: k for k, st in enumerate(states)}
    arcs = []
    for (h, q) in states:
        k = index[(h, q)]
        if q == N:  # finished: stays, costs nothing
            arcs.append((k, k, 0, 0, 0, 0, 0, 0))
            continue
        target = prompt if q < prompt else q + 1
        for h2 in range(h, min(target, h + C) + 1):
            q2 = max(q, h2)
            dec = q >= prompt and h == q and h2 == h + 1
            arcs.append((k, index[(h2, q2)], h2 - h, h2 if q2 < N else 0, h2,
                         h2 if dec else 0, 1 if h2 > 0 else 0, 0))
        if allow_eviction and h > 0:
            arcs.append((k, index[(0, q)], 0, 0, 0, 0, 0, 1))
    a = np.array(arcs, dtype=np.int64)
    return _Network(states, a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5], a[:, 6],
                    a[:, 7], index[(0, 0)], index[(N, N)])


def _reach(net: _Network, T: int) -> tuple[np.ndarray, np.ndarray]:
    """Fewest batches from the start to each state, and from each state to the end."""
    S = len(net.states)
    fwd = np.full(S, T + 1)
    fwd[net.start] = 0
    bwd = np.full(S, T + 1)
    bwd[net.done] = 0
    for _ in range(S + 1):  # Bellman-Ford with unit lengths (tiny graphs)
        nf = np.minimum(fwd, np.full(S, T + 1))
        np.minimum.at(nf, net.dst, fwd[net.src] + 1)
        nb = bwd.copy()
        np.minimum.at(nb, net.src, bwd[net.dst] + 1)
        nb[net.done] = 0
        nf[net.start] = 0
        if np.array_equal(nf, fwd) and np.array_equal(nb, bwd):
            break
        fwd, bwd = nf, nb
    return fwd, bwd


def _flow_rows(m: _Model, nets, arcs, count, b, T: int) -> None:
    """Each class's requests move once per batch along their network, from the start state to
    the finished one; batch j runs while a request of the class is unfinished."""
    for g, net in enumerate(nets):
        k = float(count[g])
        for j in range(T):
            ids, var = arcs[g][j]
            if j == 0:
                m.row([(1, v) for a_, v in zip(ids, var, strict=True) if net.src[a_] == net.start],
                      lo=k, hi=k)
            if j + 1 < T:  # what arrives in a state after batch j leaves it in batch j + 1
                nids, nvar = arcs[g][j + 1]
                inflow: dict[int, list] = {}
                for a_, v in zip(ids, var, strict=True):
                    inflow.setdefault(int(net.dst[a_]), []).append((1, v))
                for a_, v in zip(nids, nvar, strict=True):
                    inflow.setdefault(int(net.src[a_]), []).append((-1, v))
                for terms in inflow.values():
                    m.row(terms, lo=0, hi=0)
            else:
                m.row([(1, v) for a_, v in zip(ids, var, strict=True) if net.dst[a_] == net.done],
                      lo=k, hi=k)
            m.row([(k, b[j])] + [(-1, v) for a_, v in zip(ids, var, strict=True)
                                 if net.src[a_] != net.done], lo=0)


def _batch_rows(m: _Model, nets, arcs, b, T: int, C: int, M: int, R: int, n: int) -> None:
    """Per batch: at most C tokens, at most M KV tokens held, at most R running requests; the
    batches used come first."""
    for j in range(T):
        tok, mem, run = [(-C, b[j])], [], []
        for g, net in enumerate(nets):
            ids, var = arcs[g][j]
            for a_, v in zip(ids, var, strict=True):
                if net.tokens[a_]:
                    tok.append((net.tokens[a_], v))
                if net.mem[a_]:
                    mem.append((net.mem[a_], v))
                if net.active[a_]:
                    run.append((1, v))
        m.row(tok, hi=0)
        if mem:
            m.row(mem, hi=M)
        if run and R < n:
            m.row(run, hi=R)
        if j + 1 < T:
            m.row([(1, b[j]), (-1, b[j + 1])], lo=0)


def _objective(m: _Model, nets, arcs, b, coeffs: LinearCost) -> np.ndarray:
    obj = np.zeros(m.size)
    obj[b] = coeffs.alpha
    for g, net in enumerate(nets):
        arc_cost = (coeffs.beta * net.tokens + coeffs.gamma * net.held
                    + coeffs.delta * net.read).astype(np.float64)
        for ids, var in arcs[g]:
            obj[var] += arc_cost[ids]
    return obj


def _paths(x: np.ndarray, nets, arcs, cls, T: int):
    """Decompose each class's integer flow into its requests' paths: (KV held h, tokens
    processed q, evicted) of every request after every batch."""
    n = cls.shape[0]
    h = np.zeros((n, T), dtype=np.int64)
    q = np.zeros((n, T), dtype=np.int64)
    ev = np.zeros((n, T), dtype=bool)
    for g, net in enumerate(nets):
        members = np.flatnonzero(cls == g)
        where = {int(r): net.start for r in members}
        for j, (ids, var) in enumerate(arcs[g]):
            taken = {int(r): False for r in members}
            for a_, v in zip(ids, var, strict=True):
                for _ in range(int(x[v])):
                    r = next(r for r in members if not taken[r] and where[r] == net.src[a_])
                    taken[r] = True
                    where[r] = int(net.dst[a_])
                    h[r, j], q[r, j] = net.states[net.dst[a_]]
                    ev[r, j] = bool(net.evict[a_])
    return h, q, ev


def _solve(prompt, output, C, M, R, coeffs, allow_eviction, T, ub, time_limit_s) -> MilpSchedule:
    """One MILP over a horizon of T batches (objective cut off at ub). Identical requests form
    one class whose network carries an integer flow (how many of them take each move), which
    removes their symmetry."""
    n = prompt.shape[0]
    N = prompt + output - 1
    pairs, cls, count = np.unique(np.stack([prompt, output], axis=1), axis=0,
                                  return_inverse=True, return_counts=True)
    cls = cls.reshape(n)
    nets = [_network(int(pi), int(oi), C, allow_eviction) for pi, oi in pairs]
    m = _Model()
    b = m.add((T,), 0, 1, True)
    arcs = []  # per class, per batch: (arc ids, variable ids)
    for g, net in enumerate(nets):
        fwd, bwd = _reach(net, T)
        per = []
        for j in range(T):  # batch j moves from "after batch j-1" to "after batch j"
            ids = np.flatnonzero((fwd[net.src] <= j) & (j + 1 + bwd[net.dst] <= T))
            per.append((ids, m.add((ids.size,), 0, count[g], True)))
        arcs.append(per)
    _flow_rows(m, nets, arcs, count, b, T)
    _batch_rows(m, nets, arcs, b, T, C, M, R, n)
    obj = _objective(m, nets, arcs, b, coeffs)
    if np.isfinite(ub):  # a known schedule fits the horizon: the optimum is no worse
        nz = np.flatnonzero(obj)
        m.row([(obj[k], k) for k in nz], hi=ub * (1 + 1e-9) + 1e-9)
    A = sparse.csr_array((m.vals, (m.rows, m.cols)), shape=(len(m.row_lb), m.size))
    res = milp(obj, integrality=np.concatenate(m.integer),
               bounds=Bounds(np.concatenate(m.lb), np.concatenate(m.ub)),
               constraints=LinearConstraint(A, m.row_lb, m.row_ub),
               options={"time_limit": float(max(time_limit_s, 0.1)), "mip_rel_gap": 1e-9})
    if res.x is None:
        empty = np.zeros((n, 0), dtype=np.int64)
        status = "infeasible" if res.status == 2 else "time limit"
        return MilpSchedule(status, float("inf"), float("nan"), T, empty, empty,
                            empty.astype(bool), np.full(n, -1), np.zeros((0, cols.N_COLS), np.int64))
    x = np.rint(res.x).astype(np.int64)
    h, q, ev = _paths(x, nets, arcs, cls, T)
    status = "optimal" if res.status == 0 else "time limit"
    bound = float(res.mip_dual_bound) if res.mip_dual_bound is not None else float("nan")
    return _decode(h, q, ev, prompt, N, T, x[b], coeffs, bound, status)


def _decode(h, q, e, prompt, N, T, b, coeffs, bound, status) -> MilpSchedule:
    """Turn the solution into per-batch arrays and the scheduler's step record (whose
    `schedule_cost` is the objective)."""
    n = h.shape[0]
    used = int(b.sum())
    zero = np.zeros((n, 1), dtype=np.int64)
    hp = np.concatenate([zero, h], axis=1)[:, :T]
    qp = np.concatenate([zero, q], axis=1)[:, :T]
    tokens = np.where(e, 0, h - hp)
    evicted = e & (hp > 0) & (qp < N[:, None])
    decode = (qp >= prompt[:, None]) & (hp == qp) & (tokens == 1)
    prefill = (tokens > 0) & ~decode
    sampled = (q > qp) & (q >= prompt[:, None])
    finished = q >= N[:, None]
    steps = np.zeros((T, cols.N_COLS), dtype=np.int64)
    steps[:, cols.PREFILL_TOKENS] = np.where(prefill, tokens, 0).sum(0)
    steps[:, cols.PREFILL_SQ] = np.where(prefill, tokens * tokens, 0).sum(0)
    steps[:, cols.PREFILL_CTX] = np.where(prefill, tokens * hp, 0).sum(0)
    steps[:, cols.DECODES] = decode.sum(0)
    steps[:, cols.DECODE_KV] = np.where(decode, h, 0).sum(0)
    steps[:, cols.SAMPLED] = sampled.sum(0)
    steps[:, cols.KV_BLOCKS] = np.where(finished, 0, h).sum(0)
    steps[:, cols.PREEMPTED] = evicted.sum(0)
    steps[:, cols.RUNNING] = ((h > 0) & ~finished).sum(0)
    first = np.argmax(finished, axis=1)
    objective = schedule_cost(steps[:used], coeffs)
    return MilpSchedule(status=status, objective=objective, bound=bound, horizon=T,
                        tokens=tokens[:, :used], kv=h[:, :used], evicted=evicted[:, :used],
                        finish_batch=first, steps=steps[:used])
