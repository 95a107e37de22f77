"""The C loop's lazy decodes (tuner/sim/_kernels.c, fast_step): decodes priced as a count and a
context sum between the steps where one of them finishes; the schedule must be the exact
loop's step for step, at sizes where many decodes run at once, with shared prefixes (also
prefixes longer than the prompt, whose group becomes ready while its owner decodes), arrivals,
KV pressure (evictions) and the loop paused and resumed every few steps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.core.schedulers import SCHEDULER_PRESETS
from tuner.sim import scheduler as sch

LAZY_PRESETS = sorted(n for n, p in SCHEDULER_PRESETS.items() if not p.prefill_first)


@st.composite
def jobs(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 120))
    name = draw(st.sampled_from(LAZY_PRESETS))
    prompt = rng.integers(1, draw(st.sampled_from([8, 64, 400])), n)
    output = rng.integers(1, draw(st.sampled_from([4, 40, 200])), n)
    B = draw(st.sampled_from([1, 4, 16]))
    need = int(np.ceil((prompt + output) / B).max())
    cap = need + draw(st.integers(0, need * 40))  # from tight (evictions) to ample
    params = sch.preset(name, token_budget=draw(st.sampled_from([16, 128, 512, 4096])),
                        max_running=draw(st.integers(1, 64)), block_size=B, capacity_blocks=cap,
                        prefill_budget=draw(st.sampled_from([None, 64, 1024])))
    kw = {}
    if draw(st.booleans()):
        kw["prefix_ids"] = np.where(rng.random(n) < 0.7, rng.integers(0, 4, n), -1)
        kw["prefix_tokens"] = rng.integers(0, 600, n)  # may be longer than the prompt
    if draw(st.booleans()):
        kw["arrival_step"] = np.sort(rng.integers(0, 300, n))
    return prompt, output, params, kw


def _same(a: sch.Schedule, b: sch.Schedule) -> None:
    assert a.status == b.status
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.finish_step, b.finish_step)
    np.testing.assert_array_equal(a.first_step, b.first_step)
    assert a.cached_tokens == b.cached_tokens


@settings(max_examples=400, deadline=None)
@given(jobs())
def test_lazy_decodes_give_the_exact_loops_schedule(job):
    prompt, output, params, kw = job
    _same(sch.run_schedule(prompt, output, params, fast=True, **kw),
          sch.run_schedule(prompt, output, params, fast=False, **kw))


@settings(max_examples=60, deadline=None)
@given(jobs(), st.integers(1, 7))
def test_lazy_decodes_survive_pauses_and_a_streamed_record(job, every):
    """Every pause (Ctrl-C's chance) ends the lazy session and the next call starts another:
    the state in the arrays must be exact at each."""
    prompt, output, params, kw = job
    exact = sch.run_schedule(prompt, output, params, fast=False, **kw)
    old = sch._PAUSE_EVERY_STEPS
    sch._PAUSE_EVERY_STEPS = every
    try:
        paused = sch.run_schedule(prompt, output, params, fast=True, **kw)
    finally:
        sch._PAUSE_EVERY_STEPS = old
    _same(paused, exact)


@pytest.mark.parametrize("name", ["vllm", "sarathi"])
def test_lazy_decodes_at_hundreds_running(name):
    """The case the lazy path is for: hundreds of decodes, a request finishing and another
    admitted at most steps, prefill chunks behind them."""
    rng = np.random.default_rng(7)
    p, o = rng.integers(20, 600, 6000), rng.integers(1, 400, 6000)
    params = sch.preset(name, token_budget=2048, max_running=512, block_size=16,
                        capacity_blocks=200_000)
    fast = sch.run_schedule(p, o, params, fast=True)
    _same(fast, sch.run_schedule(p, o, params, fast=False))
    assert fast.steps[:, sch.SAMPLED].sum() == o.sum()
    assert fast.steps[:, sch.RUNNING].max() > 300
