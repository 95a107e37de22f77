"""The HTML cost report of a search: ``context`` (the typed ReportContext) -> ``extras`` (winners'
timelines, importances, export snippets, real runs) -> ``views`` (formatted rows) -> ``figures``
(plotly) -> ``html`` (one self-contained file); ``outputs`` is the pipeline `tuner search`,
`tuner results` and `tuner report` share (winners -> exports -> report -> results.json)."""
