"""simulate() priced by the cost-source registry's default (predictors.sources), as `tuner
simulate` without --profile resolves it: for tests of the schedule and its pricing, not of the
choice of cost model."""

from __future__ import annotations

from tuner.predictors.sources import resolve_cost_model
from tuner.sim.simulator import SimResult, simulate


def simulate_default(workload, model, gpu, config, **options) -> SimResult:
    return simulate(workload, model, gpu, config, resolve_cost_model(model, gpu, config),
                    **options)
