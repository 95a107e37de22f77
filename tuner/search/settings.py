"""Search settings and the Optuna sampler they choose (TPE or NSGA-II)."""

from __future__ import annotations

from dataclasses import dataclass, field

import optuna

from tuner.core.errors import TunerError
from tuner.search.constraints import Constraints

OBJECTIVES = ("makespan_s", "cost_usd")
SAMPLERS = ("auto", "tpe", "nsga2")
# "auto": TPE for small budgets (it learns fastest per trial, but each proposal costs time
# growing with the study: ~20 s for 1,000 trials of 9 knobs, against ~3 s for NSGA-II).
AUTO_TPE_MAX_TRIALS = 300


@dataclass(frozen=True)
class SearchSettings:
    # 300: TPE + polish reaches the exhaustive grid's best makespan and $ on 3 seeds of 3 on
    # the default space (6 GPUs, 81,648 configurations); 150 missed by up to 6 %.
    n_trials: int = 300
    timeout_s: float | None = None
    seed: int = 0
    sampler: str = "auto"  # "auto" | "tpe" | "nsga2"
    storage: str | None = None  # Optuna storage URL; None: in-memory
    study_name: str = "tuner"
    resume: bool = False
    exhaustive: bool = False  # every point of the space, full workload (n_trials ignored)
    # Share of the workload simulated first (multi-fidelity); None: SAMPLE_FRACTION when the
    # workload has >= 4 x MIN_SAMPLE requests; 1.0 (or 0): full workload only.
    sample_fraction: float | None = None
    # --deadline / --budget / --max-gpus / --quantized-model (tuner.search.constraints)
    constraints: Constraints = field(default_factory=Constraints)

    def __post_init__(self) -> None:
        if not 0 <= self.seed < 2**32:  # numpy's and Optuna's seed range
            raise TunerError(f"--seed must be in [0, 2**32 - 1], got {self.seed}.")

    @property
    def defer_candidates(self) -> bool:
        """Configurations near a front keep their sample estimate until the end
        (tuner.search.loop.add_final_candidates); with --deadline / --budget they are promoted
        at once (the best plan within them is judged on full figures as the search goes)."""
        return not self.constraints.on_figures


def sampler_name(settings: SearchSettings) -> str:
    if settings.sampler == "auto":
        return "tpe" if settings.n_trials <= AUTO_TPE_MAX_TRIALS else "nsga2"
    return settings.sampler


class OrderedNSGAII(optuna.samplers.NSGAIISampler):
    """NSGA-II whose parent population is always in trial order. Optuna's returns it in its
    elite-selection order when it computes it (the first trial of a generation) and in trial
    order when it reads its cache (every later trial of the generation); children are drawn by
    index from it, so a search resumed in the middle of a generation (whose in-memory study
    recomputes the parents) proposed other children than the uninterrupted one. One order
    makes the proposals depend only on the trials (and the per-trial seed)."""

    def get_parent_population(self, study, generation: int):
        return sorted(super().get_parent_population(study, generation), key=lambda t: t.number)


def make_sampler(settings: SearchSettings) -> optuna.samplers.BaseSampler:
    name = sampler_name(settings)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=settings.seed, multivariate=True,
                                          n_startup_trials=20)
    if name == "nsga2":
        # Mutation 0.3 (Optuna's default: 1 / number of knobs, ~0.1): in a categorical space
        # the population otherwise converges onto configurations already simulated, and each
        # repeat is a wasted trial (measured on the default space, 6 GPUs, 1,500 trials: ~1,000
        # distinct configurations at the default, ~1,350 at 0.3, both reaching the grid's best).
        pop = int(min(100, max(20, settings.n_trials // 15)))
        return OrderedNSGAII(seed=settings.seed, population_size=pop, mutation_prob=0.3)
    raise TunerError(f"Unknown sampler {settings.sampler!r}; choose auto, tpe or nsga2.")

