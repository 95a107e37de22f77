"""CLI command groups beyond the core ones in tuner/cli.py.

Each module here defines ``register(app: typer.Typer) -> None`` and adds its commands; tuner.cli
calls every module's ``register`` at import. Modules must import heavy dependencies (torch,
vLLM) inside the command functions, never at module level.
"""
