"""The search summary's tables on the terminal: compact configurations, and tables that fit the
terminal's width (less important columns move to a second table, or go, when it is narrow)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.console import Group
from rich.table import Table

from tuner.core.config import ENGINE_HELD, ServingConfig

DEFAULTS = {f.name: f.default for f in dataclasses.fields(ServingConfig)
            if f.default is not dataclasses.MISSING}
CONFIG_LINES = 2  # a configuration takes at most this many lines of its cell


def varying_knobs(configs: Iterable[dict]) -> set[str]:
    """The knobs that take more than one value among these configurations."""
    configs = list(configs)
    keys = {k for c in configs for k in c}
    return {k for k in keys if len({str(c.get(k)) for c in configs}) > 1}


def _num(v: float) -> str:
    """0.85 -> '.85', 0.9 -> '.9' (fractions, as short as they are exact)."""
    s = f"{float(v):.3g}"
    return s[1:] if s.startswith("0.") else s


def config_tokens(cfg: dict, varying: Iterable[str] = ()) -> list[str]:
    """A plan's knobs, compact: ['TP4×DP8', 'scheduler sarathi', 'chunk 16384', 'R 64',
    'order longest-output', 'mem .85']. TP×DP, the chunk and R_max always; any other knob where
    it varies among the plans shown or is not vLLM's default. Each knob once, named where its
    value alone could be another knob's: an SGLang plan's schedule policy follows the engine
    ('SGLang lpm'), tuner's request order reads 'order fcfs' and the InferMax preset 'scheduler
    vllm' (both would otherwise print a bare 'fcfs' or 'vllm'). One token never splits over two
    lines."""
    varying = set(varying)

    engine = cfg.get("engine", "vllm")
    held = ENGINE_HELD.get(engine, {})  # knobs the plan's engine lacks: the same in every plan

    def shown(k: str) -> bool:
        return k in cfg and k not in held and (k in varying or cfg[k] != DEFAULTS.get(k))

    pp = int(cfg.get("pp", 1))
    toks = [f"TP{cfg.get('tp', 1)}×" + (f"PP{pp}×" if pp > 1 else "") + f"DP{cfg.get('dp', 1)}"]
    if engine == "sglang":  # the engine first: the rest reads in its terms
        policy = cfg.get("schedule_policy", "fcfs")
        toks.append("SGLang" + (f" {policy}" if shown("schedule_policy") else ""))
    elif shown("engine"):
        toks.append("vLLM")
    if shown("scheduler"):
        toks.append(f"scheduler {cfg['scheduler']}")
    toks += [f"chunk {cfg.get('chunk_size', '?')}", f"R {cfg.get('max_running', '?')}"]
    if shown("ordering"):  # the order tuner submits the requests in (reports/views: the same)
        toks.append(f"order {cfg['ordering']}")
    if shown("gpu_memory_utilization"):
        toks.append(f"mem {_num(cfg['gpu_memory_utilization'])}")
    if shown("weight_bits") or shown("kv_bits"):
        toks.append(f"W{cfg.get('weight_bits', 16)}/KV{cfg.get('kv_bits', 16)}")
    if shown("kv_offload_layers"):
        toks.append(f"KV offload {cfg['kv_offload_layers']} layers")
    if shown("weight_offload_fraction"):
        toks.append(f"W offload {100 * float(cfg['weight_offload_fraction']):.0f}%")
    if shown("attention_on_cpu"):
        toks.append("CPU attn" if cfg["attention_on_cpu"] else "GPU attn")
    if shown("cpu_threads_intra") or shown("cpu_threads_inter"):
        toks.append(f"threads {cfg.get('cpu_threads_intra', 0)}/{cfg.get('cpu_threads_inter', 0)}")
    if shown("block_size"):
        toks.append(f"block {cfg['block_size']}")
    if shown("expert_parallel"):
        toks.append("EP" if cfg["expert_parallel"] else "no EP")
    done = {"gpu", "tp", "dp", "pp", "scheduler", "chunk_size", "max_running", "ordering",
            "gpu_memory_utilization", "weight_bits", "kv_bits", "kv_offload_layers",
            "weight_offload_fraction", "attention_on_cpu", "cpu_threads_intra",
            "cpu_threads_inter", "block_size", "expert_parallel", "engine", "schedule_policy"}
    toks += [f"{k} {cfg[k]}" for k in cfg if k not in done and shown(k)]
    return toks


def wrap_tokens(tokens: list[str], width: int) -> list[str]:
    """Tokens packed greedily into lines of at most `width` cells (a longer token: its own line)."""
    lines: list[str] = []
    for tok in tokens:
        if lines and cell_len(lines[-1]) + 1 + cell_len(tok) <= width:
            lines[-1] += " " + tok
        else:
            lines.append(tok)
    return lines


@dataclass
class Column:
    title: str
    cells: list[str] = field(default_factory=list)
    justify: str = "right"
    # 0: always in the first table; a higher level moves to the second table before a lower one
    # when the terminal is narrow
    level: int = 0
    # where the second table is still too wide, the columns with the highest `drop` go first
    drop: int = 0
    # what the column's figure is, where its title alone cannot say: printed once, under the
    # table that holds the column (its caption)
    note: str = ""

    @property
    def width(self) -> int:
        return max([cell_len(self.title), *(cell_len(c) for c in self.cells)])


def table_width(widths: Iterable[int]) -> int:
    """Width of a rich Table (default box, padding 1) with columns this wide."""
    widths = list(widths)
    return sum(widths) + 3 * len(widths) + 1


def _table(title: str | None, columns: list[Column], config: tuple[str, list[str]] | None,
           at: int) -> Table:
    notes = [c.note for c in columns if c.note]
    t = Table(title=title, caption="; ".join(notes) or None, caption_justify="left")
    for c in columns[:at]:
        t.add_column(c.title, justify=c.justify, no_wrap=True)
    if config is not None:
        t.add_column(config[0], justify="left", overflow="fold")
    for c in columns[at:]:
        t.add_column(c.title, justify=c.justify, no_wrap=True)
    n = len(columns[0].cells) if columns else len(config[1]) if config else 0
    for i in range(n):
        cells = [c.cells[i] for c in columns]
        if config is not None:
            cells.insert(at, config[1][i])
        t.add_row(*cells)
    return t


def fitted_tables(title: str, keys: list[Column], columns: list[Column],
                  configs: list[list[str]], width: int, *, config_title: str = "config",
                  config_at: int | None = None,
                  split_titles: tuple[str, str] | None = None) -> Group:
    """A table of `keys`, `columns` and a config column (each row's config_tokens) at most
    `width` wide, each config in at most CONFIG_LINES lines: where it does not fit, the columns
    of the highest level move to a second table (the keys repeated), then the next level;
    where that second table is too wide, its columns of the highest `drop` go. config_at:
    where the config column goes among `columns` (default: last). split_titles: the two
    tables' titles when split (default: title, and title + ', continued')."""
    at = len(columns) if config_at is None else config_at
    levels = sorted({c.level for c in columns if c.level > 0}, reverse=True)
    config_lines: list[str] = []
    main, moved = columns, []
    for cut in [None, *levels]:
        main = [c for c in columns if cut is None or c.level < cut]
        moved = [c for c in columns if c not in main]
        room = width - table_width([c.width for c in keys + main]) - 3
        config_lines = ["\n".join(wrap_tokens(toks, max(room, 1))) for toks in configs]
        if room >= cell_len(config_title) and all(
                s.count("\n") < CONFIG_LINES for s in config_lines):
            break
    main_at = len(keys) + sum(1 for c in columns[:at] if c in main)
    first, more = split_titles or (title, f"{title}, continued")
    tables = [_table(first if moved else title, keys + main, (config_title, config_lines),
                     main_at)]
    if moved:
        while len(moved) > 1 and table_width(c.width for c in keys + moved) > width:
            moved.remove(max(moved, key=lambda c: (c.drop, moved.index(c))))
        tables.append(_table(more, keys + moved, None, len(keys) + len(moved)))
    return Group(*tables)
