"""The optimal-schedule MILP (tests/milp_reference.py): hand-computed optima, an exhaustive
search on tiny instances, the scheduler presets' gaps to the optimum, and InferMax §4.5
(evicting short requests beats the eviction-free optimum; evicting long ones does not pay)."""

import heapq
import itertools

import numpy as np
import pytest

from tests.milp_reference import BATCHES, LinearCost, schedule_cost, solve_optimal_schedule
from tuner.sim import scheduler as sch

PRESETS = ("vllm-basic", "vllm-v0", "sarathi", "vllm-basic-noevict", "vllm-v0-noevict", "sarathi-noevict")


def run_preset(name, prompt, output, C, M, R):
    """The preset's schedule (block size 1, so KV capacity M in tokens), or None if it cannot
    run (vllm-v0 without chunking on a prompt > C, or an eviction-free preset that cannot
    reserve I + O tokens)."""
    prompt, output = np.asarray(prompt), np.asarray(output)
    if name.startswith("vllm-v0") and prompt.max() > C:
        return None
    params = sch.preset(name, token_budget=C, max_running=R, block_size=1, capacity_blocks=M)
    s = sch.run_schedule(prompt, output, params, fast=False)
    return s.steps if s.status == sch.STATUS_OK else None


def brute_force(prompt, output, C, M, R, coeffs, allow_eviction):
    """Cheapest schedule by Dijkstra over the joint state ((h, q) per request), the moves as
    defined in tests/milp_reference.py's docstring: an independent check of the MILP on tiny
    instances."""
    n = len(prompt)
    N = [p + o - 1 for p, o in zip(prompt, output, strict=True)]

    def moves(i, h, q):
        if q == N[i]:
            return [(h, q, 0, False)]
        target = prompt[i] if q < prompt[i] else q + 1
        out = [(h2, max(q, h2), h2 - h, q >= prompt[i] and h == q and h2 == h + 1)
               for h2 in range(h, target + 1)]
        if allow_eviction and h > 0:
            out.append((0, q, 0, False))
        return out

    start = tuple((0, 0) for _ in range(n))
    best = {start: 0.0}
    heap = [(0.0, start)]
    while heap:
        cost, state = heapq.heappop(heap)
        if cost > best[state] + 1e-12:
            continue
        if all(q == N[i] for i, (_, q) in enumerate(state)):
            return cost
        for combo in itertools.product(*(moves(i, h, q) for i, (h, q) in enumerate(state))):
            unfinished = [state[i][1] < N[i] for i in range(n)]
            tokens = sum(mv[2] for mv in combo)
            if tokens == 0 or tokens > C:
                continue
            if sum(mv[0] for mv, u in zip(combo, unfinished, strict=True) if u) > M:
                continue
            if sum(1 for mv, u in zip(combo, unfinished, strict=True) if u and mv[0] > 0) > R:
                continue
            held = sum(mv[0] for i, mv in enumerate(combo) if mv[1] < N[i])
            read = sum(mv[0] for mv in combo if mv[3])
            t = coeffs.alpha + coeffs.beta * tokens + coeffs.gamma * held + coeffs.delta * read
            nxt = tuple((mv[0], mv[1]) for mv in combo)
            if cost + t < best.get(nxt, np.inf) - 1e-12:
                best[nxt] = cost + t
                heapq.heappush(heap, (cost + t, nxt))
    return np.inf


def check_schedule(res, prompt, output, C, M):
    """The returned schedule obeys the token budget and the KV capacity, produces every output
    token and computes every position at least once."""
    N = np.asarray(prompt) + np.asarray(output) - 1
    assert res.tokens.sum(axis=0).max() <= C
    unfinished = res.finish_batch[:, None] >= np.arange(res.n_batches)[None, :]
    assert (np.where(unfinished, res.kv, 0).sum(axis=0) <= M).all()
    assert (res.kv[np.arange(len(N)), res.finish_batch] == N).all()
    assert res.steps[:, sch.SAMPLED].sum() == np.asarray(output).sum()
    computed = res.steps[:, sch.PREFILL_TOKENS].sum() + res.steps[:, sch.DECODES].sum()
    assert computed == res.tokens.sum() >= N.sum()


# ---- hand-computed optima ----------------------------------------------------------------
def test_two_prompts_that_do_not_fit_one_batch():
    # I = 3, O = 2 twice, C = 4: both prompts (6 tokens) cannot finish in batch 1, and a
    # request decodes only in a batch after its prompt is done, so 2 batches are impossible;
    # 3 work: [A 3 + B 1], [A decode + B 2], [B decode].
    res = solve_optimal_schedule([3, 3], [2, 2], token_budget=4, kv_capacity=100)
    assert res.optimal and res.objective == 3 and res.n_batches == 3
    check_schedule(res, [3, 3], [2, 2], 4, 100)


def test_kv_held_cost_by_hand():
    # I = 1, O = 3 twice (N = 3), t = 1 + 1 * (KV held after the batch by unfinished
    # requests). Without eviction each request holds 1 then 2 tokens after its first two
    # batches and nothing after its last, whatever the schedule: 6 in all. At least 3 batches
    # (prefill, two decodes): the optimum is 3 + 6 = 9, both running side by side.
    coeffs = LinearCost(alpha=1.0, gamma=1.0)
    res = solve_optimal_schedule([1, 1], [3, 3], token_budget=2, kv_capacity=100, coeffs=coeffs,
                                 allow_eviction=False)
    assert res.optimal and res.objective == pytest.approx(9.0) and res.n_batches == 3
    assert res.steps[:, sch.KV_BLOCKS].tolist() == [2, 4, 0]


def test_three_prefill_only_requests_by_hand():
    # O = 1: each request is its prompt (2 tokens). C = 4, t = 1 + 0.5 tokens: 6 tokens need
    # >= 2 batches, so the optimum is 2 + 0.5 * 6 = 5.
    res = solve_optimal_schedule([2, 2, 2], [1, 1, 1], token_budget=4, kv_capacity=100,
                                 coeffs=LinearCost(1.0, 0.5))
    assert res.optimal and res.objective == pytest.approx(5.0) and res.n_batches == 2


def test_eviction_free_needs_one_request_at_a_time():
    # I = 1, O = 4 twice (N = 4) with M = 4: whenever one request holds its full 4 tokens
    # (its last decode) the other must hold none, so without eviction the other cannot have
    # started: 4 + 4 = 8 batches. Evicting lets both start at once: 6 batches (the exhaustive
    # search agrees), as vllm does on it.
    no = solve_optimal_schedule([1, 1], [4, 4], token_budget=8, kv_capacity=4,
                                allow_eviction=False)
    ev = solve_optimal_schedule([1, 1], [4, 4], token_budget=8, kv_capacity=4)
    assert no.objective == 8 and no.evictions == 0
    assert ev.objective == 6 == brute_force([1, 1], [4, 4], 8, 4, 2, BATCHES, True)
    assert ev.evictions > 0
    check_schedule(ev, [1, 1], [4, 4], 8, 4)
    assert schedule_cost(run_preset("vllm-basic", [1, 1], [4, 4], 8, 5, 2), BATCHES) == 6


# ---- exhaustive search agrees -------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_milp_matches_exhaustive_search(seed):
    rng = np.random.default_rng(seed)
    for _ in range(5):
        n = int(rng.integers(1, 4))
        p = rng.integers(1, 5, n).tolist()
        o = rng.integers(1, 4, n).tolist()
        C = int(rng.integers(2, 7))
        M = int(max(a + b - 1 for a, b in zip(p, o, strict=True)) + rng.integers(0, 5))
        R = int(rng.integers(1, n + 1))
        coeffs = LinearCost(1.0, float(rng.choice([0, 0.1, 0.3])), float(rng.choice([0, 0.05])),
                            float(rng.choice([0, 0.02])))
        for ev in (False, True):
            res = solve_optimal_schedule(p, o, token_budget=C, kv_capacity=M, max_running=R,
                                         coeffs=coeffs, allow_eviction=ev, time_limit_s=20)
            assert res.optimal
            assert res.objective == pytest.approx(brute_force(p, o, C, M, R, coeffs, ev))
            assert schedule_cost(res.steps, coeffs) == pytest.approx(res.objective)
            check_schedule(res, p, o, C, M)


# ---- the presets against the optimum --------------------------------------------------------
INSTANCES = [  # (prompt, output, C, M, R_max): random tiny instances that solve in seconds
    ([4, 3, 3], [2, 2, 1], 8, 6, 2),
    ([2, 3, 4, 4], [1, 1, 4, 4], 8, 9, 2),
    ([4, 2, 1, 2, 2], [4, 2, 1, 2, 3], 8, 12, 4),
    ([4, 1, 1, 1, 1, 4], [4, 3, 1, 1, 2, 2], 8, 11, 4),
    ([4, 3, 3, 4], [3, 4, 4, 1], 8, 7, 2),
    ([2, 4, 4, 2, 1, 3], [3, 4, 3, 3, 4, 4], 8, 13, 6),
    ([3, 4, 1, 4, 4, 4, 4], [1, 1, 1, 4, 2, 2, 4], 8, 9, 7),
    ([1, 1, 1, 4, 1, 1, 1], [3, 1, 2, 2, 4, 1, 4], 8, 8, 7),
    ([3, 1, 4, 1, 1, 1, 3, 2], [1, 1, 3, 1, 2, 4, 3, 4], 8, 11, 2),
    ([1, 1, 4, 2, 3, 3, 3, 1], [2, 1, 2, 4, 3, 1, 3, 1], 8, 10, 8),
]
COEFFS = LinearCost(alpha=1.0, beta=0.05, gamma=0.0, delta=0.01)


@pytest.mark.parametrize("inst", INSTANCES, ids=[f"n{len(i[0])}" for i in INSTANCES])
def test_optimum_is_no_worse_than_any_preset(inst):
    p, o, C, M, R = inst
    opt = solve_optimal_schedule(p, o, token_budget=C, kv_capacity=M, max_running=R,
                                 coeffs=COEFFS, time_limit_s=30)
    opt_ef = solve_optimal_schedule(p, o, token_budget=C, kv_capacity=M, max_running=R,
                                    coeffs=COEFFS, allow_eviction=False, time_limit_s=30)
    assert opt.optimal and opt_ef.optimal
    assert opt.objective <= opt_ef.objective + 1e-9
    check_schedule(opt, p, o, C, M)
    gaps = {}
    for name in PRESETS:
        steps = run_preset(name, p, o, C, M, R)
        if steps is None:
            continue
        cost = schedule_cost(steps, COEFFS)
        assert opt.objective <= cost + 1e-9, name
        if name.endswith("-noevict"):
            assert opt_ef.objective <= cost + 1e-9, name
        gaps[name] = cost / opt.objective - 1
    print(f"\nI={p} O={o} C={C} M={M} R={R}: optimum {opt.objective:.3f} "
          f"({opt.n_batches} batches, {opt.evictions} evictions), eviction-free "
          f"{opt_ef.objective:.3f}; gaps " + ", ".join(f"{k} {v:+.1%}" for k, v in gaps.items()))
    assert gaps


# ---- InferMax §4.5 -------------------------------------------------------------------------
def test_evicting_short_requests_beats_the_eviction_free_optimum():
    # The paper's setting: B = 4 identical requests, O = 4, M = max(2I, I + O - 1), here I = 1
    # (M = 4). Starting everyone and evicting beats waiting for memory: the optimum with
    # eviction is 28 % cheaper than the eviction-free optimum (the paper: up to 35.2 %).
    p, o, M = [1] * 4, [4] * 4, 4
    coeffs = LinearCost(alpha=1.0, beta=0.05)
    ev = solve_optimal_schedule(p, o, token_budget=64, kv_capacity=M, coeffs=coeffs)
    no = solve_optimal_schedule(p, o, token_budget=64, kv_capacity=M, coeffs=coeffs,
                                allow_eviction=False)
    assert ev.optimal and no.optimal
    assert ev.evictions > 0
    assert ev.objective == pytest.approx(12.1) and no.objective == pytest.approx(16.8)
    assert ev.objective < 0.75 * no.objective
    # vllm-basic (evicting) reaches the optimum here
    assert schedule_cost(run_preset("vllm-basic", p, o, 64, M, 4), coeffs) == pytest.approx(12.1)


def test_evicting_long_requests_does_not_pay():
    # Same setting with I = 4 (M = 8) and a higher per-token cost: a refill recomputes the
    # prompt, so the optimum avoids evictions, and the evicting presets lose to their
    # eviction-free variants (vllm-basic 24.8 vs vllm-basic-noevict 24.4 = the optimum).
    p, o, M = [4] * 4, [4] * 4, 8
    coeffs = LinearCost(alpha=1.0, beta=0.3)
    ev = solve_optimal_schedule(p, o, token_budget=64, kv_capacity=M, coeffs=coeffs)
    assert ev.optimal and ev.evictions == 0 and ev.objective == pytest.approx(24.4)
    vllm = schedule_cost(run_preset("vllm-basic", p, o, 64, M, 4), coeffs)
    noevict = schedule_cost(run_preset("vllm-basic-noevict", p, o, 64, M, 4), coeffs)
    assert noevict == pytest.approx(24.4)
    assert vllm == pytest.approx(24.8)


def test_evicting_preset_beats_its_eviction_free_variant():
    # I = O = 4, M = 8, cheap tokens: vllm-basic (evicting) 15.8 vs vllm-basic-noevict 17.4.
    p, o = [4] * 4, [4] * 4
    coeffs = LinearCost(alpha=1.0, beta=0.05)
    vllm = schedule_cost(run_preset("vllm-basic", p, o, 64, 8, 4), coeffs)
    noevict = schedule_cost(run_preset("vllm-basic-noevict", p, o, 64, 8, 4), coeffs)
    assert vllm == pytest.approx(15.8) and noevict == pytest.approx(17.4)


def test_bad_input():
    with pytest.raises(ValueError):
        solve_optimal_schedule([], [], token_budget=4, kv_capacity=10)
    with pytest.raises(ValueError):
        solve_optimal_schedule([1], [0], token_budget=4, kv_capacity=10)
    with pytest.raises(ValueError):
        LinearCost(alpha=-1.0)
    res = solve_optimal_schedule([5], [3], token_budget=4, kv_capacity=3)  # cannot fit
    assert res.status == "infeasible" and res.objective == np.inf
