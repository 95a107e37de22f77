"""The search spaces shipped with tuner (YAML data, installed with the package): `default.yaml`
(what `tuner search` uses without --space), `offload.yaml`, `quality.yaml`. Read them with
:func:`tuner.search.space.shipped_space_path`."""
