"""Cost models, and fitting profiles into them (README.md, "What it does": "Measured cost
models"; how a profile folder becomes a CostModel: predictors.loader.PROFILE_MODES).

Light to import: tuner imports predictors.features and predictors.roofline on every run, so
the fitting machinery (scikit-learn) loads only when one of these names is used:

    cost_model_for(model, profile=None, mode="auto", engine_version=None)
        -> (gpu, config) -> CostModel    the cost-source registry (predictors.sources: own
                                         profile -> measured tables -> transfer -> roofline)
    resolve_cost_model(model, gpu, config, ...) -> CostModel, COST_SOURCES
    load_cost_model(profile_or_fit_dir, model, gpu, config, mode="auto") -> CostModel
    fit_profile(profile_dir) -> FitResult          (FitResult.save(out_dir))
    FittedCostModel, shipped_cost_model, shipped_data_dir
    table_cost_model(model, gpu, tp=..) -> MeasuredTableCostModel | None   (predictors.aic)
    EngineProfile, get_profile(name)                        (predictors.engine_overhead)
"""

from __future__ import annotations

_LAZY = {
    "cost_model_for": "tuner.predictors.sources",
    "resolve_cost_model": "tuner.predictors.sources",
    "COST_SOURCES": "tuner.predictors.sources",
    "load_cost_model": "tuner.predictors.sources",
    "shipped_cost_model": "tuner.predictors.loader",
    "shipped_data_dir": "tuner.predictors.loader",
    "fit_profile": "tuner.predictors.fit",
    "FitResult": "tuner.predictors.fit",
    "FittedCostModel": "tuner.predictors.fitted",
    # measured kernel tables (NVIDIA AIConfigurator) and engine-overhead profiles
    "MeasuredTableCostModel": "tuner.predictors.aic",
    "KernelTables": "tuner.predictors.aic_tables",
    "table_cost_model": "tuner.predictors.aic",
    "EngineProfile": "tuner.predictors.engine_overhead",
    "get_profile": "tuner.predictors.engine_overhead",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tuner.predictors' has no attribute {name!r}")
