"""Stop 52: SGLang's decode retraction as the modelled release (sglang 0.5.23; the form since
0.5.2) does it: ``ScheduleBatch.retract_decode`` takes at least one request out, then more
only until the kept requests' next decode has its pages (``check_decode_mem``), not until
each kept request has 20 decode steps of room (the <= 0.5.1 form); each request taken out
evicts unused cached prefixes until 20 x the requests still kept are free (``release_req``).
The C loop and the Python reference alike."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from tuner.core import sglang as sg
from tuner.sim import sglang as sgl
from tuner.sim.steps import PREEMPTED


def _both(p, o, **kw):
    c = sgl.run_schedule(p, o, **kw)
    ref = sgl.run_schedule(p, o, reference=True, **kw)
    for a, b in ((c.steps, ref.steps), (c.finish_step, ref.finish_step),
                 (c.first_step, ref.first_step)):
        np.testing.assert_array_equal(a, b)
    assert c.status == ref.status == 0
    return c


def test_a_retraction_takes_one_request_when_it_frees_the_next_decode():
    # 40 running requests of 200-token prompts in a tight pool (page 1): each one taken out
    # frees >= 200 tokens, more than the 39 kept need for their next decode, so every
    # retraction takes exactly one; the 20-steps-per-request rule (39 x 20 = 780 tokens) took
    # several at once
    n = 160
    p, o = np.full(n, 200), 300 + (np.arange(n) * 37) % 500
    kw = dict(capacity_tokens=12_000, chunked_prefill_size=8192, max_running=40,
              settings=sg.SGLangSettings(schedule_conservativeness=0.3))
    for fast in (True, False):
        s = _both(p, o, fast=fast, **kw)
        out = s.steps[:, PREEMPTED]
        assert out.sum() > 0 and out.max() == 1


def test_a_retraction_takes_more_while_the_kept_next_decode_lacks_pages():
    # page 64, equal lengths: every kept request needs a new page at once and a victim
    # frees one or two pages, so one retraction takes several
    page, n = 64, 96
    p, o = np.full(n, 64), np.full(n, 400)
    kw = dict(capacity_tokens=64 * 200, chunked_prefill_size=256, max_running=96,
              settings=sg.SGLangSettings(schedule_conservativeness=0.3), page_size=page)
    s = _both(p, o, **kw)
    assert s.steps[:, PREEMPTED].max() > 1


def _scheduler_with(running, computed, generated, cache_groups, capacity):
    """A reference scheduler in the given decode state: `running` requests holding
    `computed` tokens each (no shared prefix), unused cached groups `cache_groups` (tokens
    each, oldest first) in the LRU."""
    n = len(running)
    ng = len(cache_groups)
    s = sgl.SGLangScheduler(np.full(n, 100), np.full(n, 10_000), capacity_tokens=capacity,
                            chunked_prefill_size=8192, max_running=n,
                            settings=sg.SGLangSettings(), prefix_ids=np.full(n, -1),
                            prefix_tokens=np.zeros(n, dtype=np.int64))
    s.glen = np.asarray(cache_groups, dtype=np.int64)
    s.cached = np.ones(ng, dtype=bool)
    s.ref = np.zeros(ng, dtype=np.int64)
    s.lru = OrderedDict((g, None) for g in range(ng))
    s.cache_tokens = s.evictable = int(s.glen.sum())
    s.waiting = []
    s.running = list(running)
    s.computed[:] = computed
    s.generated[:] = generated
    s.private = int(s.computed.sum())
    return s


def test_each_retracted_request_evicts_cached_prefixes_for_20_steps_of_the_rest():
    # 10 running requests of 100 tokens (page 1), no token free, two unused cached prefixes
    # of 150 tokens: the first one out frees 100 (enough for the kept 9's next decode, so
    # it is the only one), then release_req evicts until 20 x 9 = 180 are free: the oldest
    # prefix goes (100 + 150 >= 180), the newer one stays cached
    s = _scheduler_with(range(10), 100, np.arange(10) + 1, [150, 150], 1000 + 300)
    assert s._retract() == 1
    assert s.waiting == [0]  # fewest outputs first
    assert s.cached.tolist() == [False, True]
    assert s.available == 250
    # the ratio after it: (decoded + 20 x kept) / (sum max_new + 1)
    assert s.ratio == min(1.0, (np.arange(2, 11).sum() + 20 * 9) / (9 * 10_000 + 1))


def test_the_eviction_follows_each_release_not_the_last():
    # page 1, nothing free, one unused cached prefix of 5 tokens; the first one out (1 output
    # token) frees 2 tokens: 2 + 5 < the 9 kept's next decode, so release_req evicts until
    # 20 x 9 are free (all of it) and a second goes (300 tokens); the <= 0.5.1 form evicted
    # once after the loop, to 20 x 8 = 160 free, and kept the prefix cached
    computed = np.array([2, 300] + [50] * 8)
    generated = np.array([1, 2] + [10] * 8)
    s = _scheduler_with(range(10), computed, generated, [5], 2 + 300 + 400 + 5)
    assert s._retract() == 2
    assert s.waiting == [0, 1]
    assert s.cached.tolist() == [False]
    assert s.available == 2 + 300 + 5


# ---- page > 1: prompts charged and cut in whole pages (PrefillAdder, 0.5.23) ----------------
def test_a_cut_prompt_ends_on_a_page_and_the_chunk_is_charged_in_pages():
    from tuner.sim.steps import PREFILL_TOKENS
    kw = dict(capacity_tokens=64 * 200, max_running=8, page_size=64)
    # chunk 256: a 100-token prompt takes two pages of it, so the 300-token one after it is
    # cut at 128 (two pages), not 156, and finishes in the next step
    s = _both(np.array([100, 300]), np.array([5, 5]), chunked_prefill_size=256, **kw)
    assert s.steps[:2, PREFILL_TOKENS].tolist() == [228, 172]
    # chunk 256: a 100-token prompt takes two pages (128) of it, so two fit whole in the
    # first step and the third waits (charged raw, the third was cut to 56 tokens)
    s = _both(np.full(3, 100), np.full(3, 5), chunked_prefill_size=256, **kw)
    assert s.steps[:2, PREFILL_TOKENS].tolist() == [200, 100]
    assert s.first_step.tolist() == [0, 0, 1]


def test_at_page_one_the_charges_and_cuts_are_unchanged():
    from tuner.sim.steps import PREFILL_TOKENS
    s = _both(np.array([2500]), np.array([5]), capacity_tokens=20_000,
              chunked_prefill_size=1000, max_running=8)
    assert s.steps[:3, PREFILL_TOKENS].tolist() == [1000, 1000, 500]
    s = _both(np.full(3, 100), np.full(3, 5), capacity_tokens=20_000,
              chunked_prefill_size=256, max_running=8)
    assert s.steps[:2, PREFILL_TOKENS].tolist() == [256, 44]


def test_a_chunk_below_a_page_runs_as_one_page():
    # SGLang refuses a chunk that is not whole pages; tuner runs the page multiple below it
    # (at least one page) instead of cutting prompts to nothing forever
    s = _both(np.array([51]), np.array([3]), capacity_tokens=128, chunked_prefill_size=16,
              max_running=1, page_size=64)
    assert s.finish_step.tolist() == [2]


def test_a_chunk_that_is_not_whole_pages_is_refused_as_sglang_does():
    """SGLang's validation_hook refuses --chunked-prefill-size that is not a multiple of the
    page; at page 64 (B200) tuner says so instead of simulating a plan that cannot start."""
    import pytest

    from tuner.core.catalog import load_gpus, load_models
    from tuner.core.config import ServingConfig
    from tuner.core.workload import Workload
    from tuner.sim.simulator import InfeasibleConfig, check_feasible

    gpus, models = load_gpus(), load_models()
    w = Workload(prompt_tokens=np.full(8, 300), output_tokens=np.full(8, 50))
    model = models["llama-3-8b"]
    with pytest.raises(InfeasibleConfig, match="whole pages.*e.g. 64"):
        check_feasible(w, model, gpus["B200"],
                       ServingConfig(gpu="B200", engine="sglang", chunk_size=100))
    check_feasible(w, model, gpus["B200"], ServingConfig(gpu="B200", engine="sglang",
                                                         chunk_size=128))
    check_feasible(w, model, gpus["H100"], ServingConfig(gpu="H100", engine="sglang",
                                                         chunk_size=100))  # page 1
