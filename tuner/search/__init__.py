"""tuner.search: Optuna multi-objective search (makespan, $) over GPU type x the knobs of a
search space.

tuner composes Optuna's study / sampler / storage and writes no search algorithm of its own:

* **Samplers** (:mod:`.settings`): TPE (default) or NSGA-II propose configurations; infeasible
  ones (model does not fit, host memory exceeded...) are constraints (``trial.set_constraint``),
  not failures. The engines' own defaults (vLLM, Sarathi-Serve) are enqueued first, identical
  configurations are simulated once (a repeat is a ``duplicate`` trial with the first one's
  values).
* **Multi-fidelity** (:mod:`.evaluator`): a proposed configuration is first simulated on a
  stratified sample of the workload (fixed seed; strata = prompt x output length quantiles; the
  longest request always in, so memory feasibility is the full workload's): one replica of the
  plan on min(sample size, n / dp) requests, its makespan scaled by (n / dp) / that and a
  calibration factor (a dp-replica plan's replicas each serve n / dp requests: one replica's
  own share is their real load, at 1/dp of the cost). A configuration of the same GPU type
  already simulated in full that beats the estimate on both objectives by more than the
  sampling error ``eps`` drops it (epsilon-dominance); one within ``eps`` of the front is a
  *candidate*: it keeps its estimate, and at the end (:func:`.loop.add_final_candidates`) every
  candidate that no other configuration of its GPU beats beyond the error is simulated on the
  full workload, so winners and Pareto points are always full-workload simulations. ``eps`` is
  measured, not assumed (1.5 x the largest error seen, at least 0.5 %): the first N_CALIBRATE
  configurations and every AUDIT_EVERY-th trial are simulated both ways, and so is every final
  candidate. The sample is capped at MAX_SAMPLE requests (its error shrinks with its own size,
  not the job's). **Successive rungs** on large jobs: where the job holds RUNG_MIN_JOBS x a
  rung of RUNG_FACTOR x the sample, that rung (one replica's stratified share, scaled like the
  sample) stands in for the full job during the search (calibration, audits, fronts) and for
  the final candidates; then only the rung's front points and the plans no full simulation
  matches within FRONT_TOLERANCE (both figures) beyond the rung's measured error are simulated
  in full (:func:`.loop.full_candidates`): an epsilon-Pareto front whose winners are within
  that of the exhaustive search's. Independent full simulations (a plan's replicas, the
  end's candidates, vLLM's defaults) run on a thread per core. (Optuna's pruners cannot do this: ``Trial.report`` / ``should_prune`` refuse
  multi-objective studies.) With --deadline / --budget a candidate is promoted at once (the
  best plan within them is judged on full figures as the search goes).
* **Polish** (:mod:`.loop`): after most of the budget, the configurations one knob away from
  the fastest and the cheapest so far are simulated one trial at a time (its parameters fixed
  with Optuna's ``PartialFixedSampler``), following each improvement, until every neighbour of
  both is simulated. The sampler is reseeded per trial from (seed, trial number)
  (``SeedPerTrial``), so an interrupted search resumed proposes what the uninterrupted one
  would, to the same Pareto front.
* **Exhaustive** (:mod:`.loop`): every point of the space at full fidelity (the reference the
  search is checked against, ``benchmarks/search_quality.py``).
* **Storage** (:mod:`.storage`): in-memory, an Optuna journal file (the CLI's default, resumable
  after SIGKILL, shared by local workers), SQLite, PostgreSQL or any Optuna RDB URL for many workers (:mod:`.workers`); every worker rebuilds the
  workload, model, GPUs and space from the study's user attributes (``setup_from_study``).
  ``--n-trials`` counts the study's COMPLETE and RUNNING trials, a total over workers and
  --resume. A failed search removes its study when it holds no feasible result; a rerun
  replaces such a study and refuses one with results, saying what to pass. On --resume the
  RUNNING trials of dead workers are failed: in a local file when no other process holds the
  study (a flock on its folder, ``StudyHold``), on a database server by Optuna's heartbeat.
  Local workers die with their search (process group, ``PR_SET_PDEATHSIG``).
* **Records** (:mod:`.records`): from a finished study to plain records, Pareto front, winners.
"""

from tuner.search.evaluator import (
    AUDIT_EVERY,
    MIN_SAMPLE,
    N_CALIBRATE,
    SAMPLE_FRACTION,
    Evaluator,
    Knowledge,
    config_key,
    sample_size,
    stratified_sample,
)
from tuner.search.loop import (
    POLISH_AT,
    PRESETS,
    assert_some_gpu_fits,
    neighbours,
    optimize,
    prepare_study,
    run_search,
)
from tuner.search.meta import STUDY_META_VERSION, StoredSearch, StudyMeta, study_meta
from tuner.search.records import Metrics, TrialRecord, pareto, rank, trial_records, winners
from tuner.search.settings import (
    OBJECTIVES,
    SAMPLERS,
    SearchSettings,
    make_sampler,
    sampler_name,
)
from tuner.search.space import SearchSpace, default_space_path, load_space
from tuner.search.storage import (
    StudySetup,
    check_study_settings,
    default_storage,
    load_study,
    make_storage,
    open_study,
    resolve_storage,
    setup_from_study,
    storage_url,
    stored_model,
    study_metadata,
    study_workload,
    workload_digest,
    workload_tokens,
)
from tuner.search.workers import WorkerJob, connect_worker, study_cost_model_for

__all__ = [
    "AUDIT_EVERY", "MIN_SAMPLE", "N_CALIBRATE", "OBJECTIVES", "POLISH_AT", "PRESETS",
    "SAMPLERS", "SAMPLE_FRACTION", "STUDY_META_VERSION", "Evaluator", "Knowledge", "Metrics",
    "SearchSettings", "SearchSpace", "StoredSearch", "StudyMeta", "StudySetup", "TrialRecord", "WorkerJob", "assert_some_gpu_fits", "check_study_settings", "config_key",
    "connect_worker", "default_space_path", "default_storage", "load_space", "load_study",
    "make_sampler", "make_storage", "neighbours", "open_study", "optimize", "pareto", "prepare_study", "rank",
    "resolve_storage", "run_search", "sample_size", "sampler_name", "setup_from_study",
    "stratified_sample", "storage_url", "stored_model", "study_cost_model_for", "study_meta",
    "study_metadata", "study_workload", "trial_records", "winners", "workload_digest", "workload_tokens",
]
