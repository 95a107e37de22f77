"""Start-up (issue #29 item 3): `tuner CMD` imports only CMD's module; `tuner --help` lists every
command from docstrings read, not imported, and prints exactly what the fully loaded app does."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import typer.main

import tuner.cli.main as cli_main

CLI_MODULES = sorted({m for m, _ in cli_main.COMMANDS.values()})


def _loaded_after(argv: list[str]) -> set[str]:
    """The command modules a `tuner ARGV` process imported (run in-process in a child)."""
    probe = ("import sys\n"
             f"sys.argv = ['tuner', *{argv!r}]\n"
             "from tuner.cli.main import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             f"print(' '.join(m for m in {CLI_MODULES!r} if m in sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "100"})
    return set(r.stderr.strip().splitlines()[-1].split()) if r.stderr.strip() else set()


def test_every_registered_command_is_in_the_table_with_its_function():
    app = cli_main.load_commands()
    group = typer.main.get_command(app)
    real = {n: c for n, c in group.commands.items() if n != "workload"}
    assert set(real) | {"workload"} == set(cli_main.COMMANDS)
    for name, cmd in real.items():
        module, fn = cli_main.COMMANDS[name]
        assert cmd.callback is not cli_main._stub, name
        func = inspect.unwrap(cmd.callback)
        assert (func.__module__, func.__name__) == (module, fn), name
        # the stub's help (read from the source) is the loaded command's docstring
        assert cli_main._docstring(module, fn) == inspect.getdoc(func), name


def test_help_loads_no_command_module_and_a_command_loads_only_its_own():
    assert _loaded_after(["--help"]) == set()
    assert _loaded_after([]) == set()
    assert _loaded_after(["gpus"]) == {"tuner.cli.catalogs"}
    assert _loaded_after(["simulate", "--help"]) == {"tuner.cli.simulate"}
    assert _loaded_after(["export", "--help"]) == {"tuner.cli.exports"}


def test_lazy_help_is_the_full_apps_help():
    env = {**os.environ, "COLUMNS": "120"}
    lazy = subprocess.run([sys.executable, "-c",
                           "import sys\nsys.argv = ['tuner', '--help']\n"
                           "from tuner.cli.main import main\nmain()"],
                          capture_output=True, text=True, timeout=120, env=env)
    full = subprocess.run([sys.executable, "-c",
                           "from tuner.cli.main import app\n"
                           "app(['--help'], prog_name='tuner')"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert lazy.returncode == 0 and lazy.stdout and lazy.stdout == full.stdout
    assert "simulate" in lazy.stdout and "calibrate" in lazy.stdout


def test_an_unknown_command_is_one_line_with_a_suggestion():
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "simulat"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "No such command 'simulat'" in r.stderr and "simulate" in r.stderr


def test_commands_load_for_real_in_any_order():
    """main() loads one command per call on the one app a process has: a command whose stub
    an earlier call registered (e.g. `export` after `simulate`) must run for real, once."""
    probe = ("import inspect, tuner.cli.main as m, typer.main\n"
             "m.load_commands(['simulate'])\n"
             "m.load_commands(['export'])\n"
             "m.load_commands(['gpus'])\n"
             "names = [m._name(c) for c in m.load_commands(['search']).registered_commands]\n"
             "g = typer.main.get_command(m.load_commands(['results']))\n"
             "assert len(names) == len(set(names)), names\n"
             "for n in ('simulate', 'export', 'gpus', 'search', 'results'):\n"
             "    assert inspect.unwrap(g.commands[n].callback) is not m._stub, n\n"
             "assert inspect.unwrap(g.commands['fit'].callback) is m._stub\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_console_entry_leaves_without_teardown_but_runs_atexit_and_flushes():
    """entry() (the `tuner` script, `python -m tuner.cli`) ends the process itself after a
    finished command (no interpreter teardown, issue #29 item 3): the exit code is the
    command's, every line printed arrives, and atexit handlers still run; main() called from
    Python returns to its caller as before."""
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
             "sys.argv = ['tuner', *sys.argv[1:]]\n"
             "from tuner.cli.main import entry\n"
             "entry()\n"
             "print('after entry', file=sys.stderr)\n")
    ok = subprocess.run([sys.executable, "-c", probe, "gpus"], capture_output=True, text=True,
                        timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert ok.returncode == 0, ok.stderr
    assert "A100-80G" in ok.stdout and "H100" in ok.stdout
    assert "atexit ran" in ok.stderr and "after entry" not in ok.stderr
    bad = subprocess.run([sys.executable, "-c", probe, "simulate", "-w", "nowhere.jsonl", "-m",
                          "llama-3-8b", "-g", "A10"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "error:" in bad.stderr, bad.stderr
    back = subprocess.run([sys.executable, "-c",
                           "import sys\nsys.argv = ['tuner', 'gpus']\n"
                           "from tuner.cli.main import main as run\n"
                           "try:\n    run()\nexcept SystemExit as e:\n"
                           "    print('returned', e.code, file=sys.stderr)\n"],
                          capture_output=True, text=True, timeout=120)
    assert "returned 0" in back.stderr, back.stderr
