"""Request orderings for offline jobs: every request is known at t=0, so the order in which they
are submitted to the engine is a free knob (the engine admits them first-come first-served).

Each ordering is a function ``(workload, *, model=None, gpu=None, config=None,
kv_capacity_tokens=None) -> np.ndarray`` returning a permutation of ``range(len(workload))``
(the indices in submission order), registered in `ORDERINGS` and dispatched by
`order_requests`. Inputs an ordering does not use are ignored; inputs it needs but does not get
fall back to the defaults documented on it.

* ``fcfs``: file order.
* ``shortest-prompt``: ascending prompt length (stable).
* ``longest-output``: descending output length (stable).
* ``binpack``: Vasuki's greedy bin packing (§5.2, Appendix A) — see `binpack_order`.
* ``blend``: BlendServe's compute-density dual scanner (§2.3, §3.2-3.4) over prefix
  groups — see `blend_order`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tuner.core.errors import TunerError
from tuner.sim.kernels import library

if TYPE_CHECKING:
    from tuner.core.catalog import GPU, ModelSpec
    from tuner.core.config import ServingConfig
    from tuner.core.workload import Workload

#: Model and GPU the `blend` density falls back to when the caller passes none. Only the ratio
#: of GEMM to attention work matters for the order (a common factor of every density cancels),
#: so a Llama-3-8B shape on an A100-80G is a fair stand-in for any 7-8B decoder.
DEFAULT_DENSITY_MODEL = "llama-3-8b"
DEFAULT_DENSITY_GPU = "A100-80G"


# ---- simple orderings ---------------------------------------------------------------------
def fcfs_order(workload: Workload, **_) -> np.ndarray:
    """Requests in file order."""
    return np.arange(len(workload), dtype=np.int64)


def shortest_prompt_order(workload: Workload, **_) -> np.ndarray:
    """Ascending prompt length; ties keep file order."""
    return np.argsort(workload.prompt_tokens, kind="stable").astype(np.int64)


def longest_output_order(workload: Workload, **_) -> np.ndarray:
    """Descending output length; ties keep file order."""
    return np.argsort(-np.asarray(workload.output_tokens), kind="stable").astype(np.int64)


# ---- binpack: Vasuki §5.2 -------------------------------------------------------------------
def first_fit_bins(sizes, capacity: int, max_items: int | None = None) -> np.ndarray:
    """Bin of each item when `sizes` are placed first-fit, in the given order, into bins of
    `capacity` holding at most `max_items` each (an item larger than `capacity` gets a bin of
    its own). Bins are numbered in the order they open."""
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    n = sizes.shape[0]
    limit = n if max_items is None else int(max_items)
    # the C kernel keeps a max segment tree over the bins' free space (first bin with room in
    # O(log n)); its scratch is allocated here
    size = 1 << max(int(n - 1).bit_length(), 0) if n > 1 else 1
    tree = np.empty(2 * size, dtype=np.int64)
    count = np.empty(size, dtype=np.int64)
    bin_of = np.empty(n, dtype=np.int64)
    library().tk_first_fit(sizes, n, int(capacity), max(limit, 1), size, tree, count, bin_of)
    return bin_of


def _config_value(config, name, default):
    return getattr(config, name, default) if config is not None else default


def binpack_order(workload: Workload, *, model: ModelSpec | None = None, gpu: GPU | None = None,
                  config: ServingConfig | None = None, kv_capacity_tokens: int | None = None,
                  **_) -> np.ndarray:
    """Vasuki's greedy bin packing (§5.2 and its Appendix A MILP).

    What the paper specifies: bin packing serves to limit batch iterations and avoid restarts
    (evictions) under the KV memory limit; its MILP (Appendix A) makes each request occupy its
    maximum length S_i = prompt + output tokens from start to completion and bounds the tokens
    held at every step by the capacity c; §5.2 replaces the MILP by an "approximate bin packing
    scheme" that is greedy, and allocates each request's prompt blocks up front (an allocation
    policy, which the scheduler presets own, not the order).

    What we chose (the paper names no packing rule): first-fit decreasing. Items are requests,
    sized S_i = prompt + output rounded up to whole KV blocks (``config.block_size``; 1 without a
    config), sorted by size descending (ties: longer output first, then file order) and placed
    into the first bin with room. A bin holds at most the KV capacity M tokens and at most
    R_max requests, so a bin's requests can all run at once without eviction. Bins are submitted
    in the order they were opened, each bin's requests in placement order.

    Capacity M: ``kv_capacity_tokens`` (what simulate() passes: the memory plan's KV capacity
    of one replica); else, with ``model``, ``gpu`` and ``config``, `tuner.core.memory.plan_memory`;
    else (documented default) one bin holding everything, i.e. plain size-descending order.
    With ``config.dp`` replicas the simulator deals the order out round-robin, so a bin's
    capacity and count limit are multiplied by dp (each replica receives about M per bin).
    R_max: ``config.max_running`` (unlimited without a config).
    """
    p = np.asarray(workload.prompt_tokens, dtype=np.int64)
    d = np.asarray(workload.output_tokens, dtype=np.int64)
    n = p.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    B = max(int(_config_value(config, "block_size", 1)), 1)
    dp = max(int(_config_value(config, "dp", 1)), 1)
    sizes = -(-(p + d) // B) * B
    if kv_capacity_tokens is None and model is not None and gpu is not None and config is not None:
        from tuner.core.memory import plan_memory

        kv_capacity_tokens = plan_memory(model, gpu, config).kv_capacity_tokens
    if kv_capacity_tokens is None or kv_capacity_tokens <= 0:
        capacity = int(sizes.sum())
    else:
        capacity = int(kv_capacity_tokens) * dp
    max_items = int(_config_value(config, "max_running", n)) * dp
    order = np.lexsort((np.arange(n), -d, -sizes))  # size desc, then output desc, then index
    bins = first_fit_bins(sizes[order], capacity, max_items)
    return order[np.argsort(bins, kind="stable")].astype(np.int64)


# ---- blend: BlendServe §2.3, §3.2-3.4 -------------------------------------------------------
@dataclass(frozen=True)
class DensityModel:
    """BlendServe's per-request cost model (§2.3) for one model on one GPU.

    Comp(r) = ((p + d) * P_model * 2 + p^2 * H * L * 4) / compute
    Mem(r)  = (p * d + d^2 / 2) * H_kv * L * 2 * bytes_per_elem / bandwidth
    with H_kv = num_kv_heads * head_dim (the K or V width of one token in one layer) and the
    factor 2 for K and V (the paper's "4" is K+V at 2 bytes). Seconds; density = Comp / Mem.
    """

    param_count: float  # P_model
    hidden_size: int  # H
    num_layers: int  # L
    kv_dim: int  # H_kv
    peak_flops: float
    hbm_bytes_per_s: float
    kv_bytes_per_elem: float = 2.0

    @classmethod
    def from_specs(cls, model: ModelSpec | None = None, gpu: GPU | None = None,
                   config: ServingConfig | None = None, *,
                   param_count: float | None = None) -> DensityModel:
        """From a ModelSpec and GPU (defaults: `DEFAULT_DENSITY_MODEL` on
        `DEFAULT_DENSITY_GPU`). P_model defaults to the model's total parameter count, as the
        paper writes it; peak FLOP/s is FP8 for 8-bit weights where the GPU has it (as in
        `tuner.sim.simulator.lower_bound_s`); KV bytes follow ``config.kv_bits``."""
        if model is None or gpu is None:
            from tuner.core.catalog import get_gpu, get_model, load_gpus

            model = model or get_model(DEFAULT_DENSITY_MODEL)
            gpu = gpu or get_gpu(DEFAULT_DENSITY_GPU, load_gpus())
        peak = gpu.peak_flops
        if _config_value(config, "weight_bits", 16) == 8 and getattr(gpu, "fp8_tflops", None):
            peak = gpu.fp8_tflops * 1e12
        return cls(
            param_count=float(model.num_params if param_count is None else param_count),
            hidden_size=model.hidden_size, num_layers=model.num_layers,
            kv_dim=model.num_kv_heads * model.head_dim, peak_flops=peak,
            hbm_bytes_per_s=gpu.hbm_bytes_per_s,
            kv_bytes_per_elem=_config_value(config, "kv_bits", 16) / 8.0)

    def comp_s(self, p, d) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        d = np.asarray(d, dtype=np.float64)
        flops = (p + d) * self.param_count * 2 + p * p * self.hidden_size * self.num_layers * 4
        return flops / self.peak_flops

    def prefix_comp_s(self, x) -> np.ndarray:
        """Compute of an x-token shared prefix (what each extra sharer saves)."""
        x = np.asarray(x, dtype=np.float64)
        return (x * self.param_count * 2 + x * x * self.hidden_size * self.num_layers * 4) / self.peak_flops

    def mem_s(self, p, d) -> np.ndarray:
        p = np.asarray(p, dtype=np.float64)
        d = np.asarray(d, dtype=np.float64)
        kv_bytes = (p * d + 0.5 * d * d) * self.kv_dim * self.num_layers * 2 * self.kv_bytes_per_elem
        return kv_bytes / self.hbm_bytes_per_s

    def density(self, p, d) -> np.ndarray:
        """rho(r) = Comp(r) / Mem(r); infinite for a request with no decode KV reads."""
        mem = self.mem_s(p, d)
        with np.errstate(divide="ignore"):
            return np.where(mem > 0, self.comp_s(p, d) / np.where(mem > 0, mem, 1.0), np.inf)


def memory_partition(total: float, rho_left: float, rho_right: float,
                     rho_target: float) -> tuple[float, float]:
    """BlendServe §3.4: split memory M into M_L + M_R = M with
    M_L * rho_L + M_R * rho_R = M * rho_target, clipped to [0, M] (when both nodes lie on one
    side of the target, the one nearer to it gets all); equal densities split evenly."""
    frac = 0.5 if rho_left == rho_right else (rho_target - rho_right) / (rho_left - rho_right)
    frac = min(max(frac, 0.0), 1.0)
    return total * frac, total * (1.0 - frac)


def _dual_scan(unit_of, rho_unit, weight, rho_target, chunk, whole_nodes):
    """Weighted fair merge of the left scanner (flat positions 0, 1, ...) and the right scanner
    (n-1, n-2, ...). Each side advances a virtual clock by weight / share, where share is its
    memory fraction from BlendServe's partition for the two nodes the scanners stand on; the
    side with the earlier clock emits the next `chunk` requests (and, with `whole_nodes`, the
    rest of the node it is in). Returns (positions, side). The loop is tk_dual_scan in C."""
    unit_of = np.ascontiguousarray(unit_of, dtype=np.int64)
    n = unit_of.shape[0]
    out = np.empty(n, dtype=np.int64)
    side = np.empty(n, dtype=np.int8)
    library().tk_dual_scan(unit_of, n, np.ascontiguousarray(rho_unit, dtype=np.float64),
                           np.ascontiguousarray(weight, dtype=np.float64), float(rho_target),
                           int(chunk), int(bool(whole_nodes)), out, side)
    return out, side


@dataclass(frozen=True)
class BlendPlan:
    """What `blend_plan` decided: the order, which scanner emitted each request (0: left,
    compute-dense end; 1: right, memory-dense end), each request's prefix unit and density."""

    order: np.ndarray
    side: np.ndarray  # per position in `order`
    unit: np.ndarray  # per request: its node (prefix group, or itself)
    density: np.ndarray  # per request
    unit_density: np.ndarray  # per unit
    target_density: float  # rho(rt)


def blend_plan(workload: Workload, *, model: ModelSpec | None = None, gpu: GPU | None = None,
               config: ServingConfig | None = None, density_model: DensityModel | None = None,
               whole_groups: bool = True) -> BlendPlan:
    """The BlendServe order with its bookkeeping (see `blend_order`). whole_groups=False
    interleaves the two scanners request by request, as the paper does, instead of emitting a
    prefix group whole."""
    p = np.asarray(workload.prompt_tokens, dtype=np.int64)
    d = np.asarray(workload.output_tokens, dtype=np.int64)
    n = p.shape[0]
    dm = density_model or DensityModel.from_specs(model, gpu, config)
    comp = dm.comp_s(p, d)
    mem = dm.mem_s(p, d)
    rho = dm.density(p, d)
    # prefix nodes: requests sharing a prefix_id >= 0 form one node; every other request is a
    # node of its own
    if workload.prefix_ids is not None:
        ids = np.asarray(workload.prefix_ids, dtype=np.int64)
        ptok = (np.zeros(n, dtype=np.int64) if workload.prefix_tokens is None
                else np.asarray(workload.prefix_tokens, dtype=np.int64))
        grouped = ids >= 0
    else:
        ids = ptok = np.zeros(n, dtype=np.int64)
        grouped = np.zeros(n, dtype=bool)
    key = np.where(grouped, ids, -1 - np.arange(n, dtype=np.int64))
    unit = np.unique(key, return_inverse=True)[1].astype(np.int64).reshape(n)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return BlendPlan(empty, np.zeros(0, dtype=np.int8), empty, np.zeros(0), np.zeros(0), 0.0)
    n_units = int(unit.max()) + 1
    unit_comp = np.bincount(unit, weights=comp, minlength=n_units)
    unit_mem = np.bincount(unit, weights=mem, minlength=n_units)
    if grouped.any():
        # a prefix of x tokens shared by k requests is computed once: (k - 1) copies saved
        # (the shortest prefix length recorded in the group, to stay conservative)
        gx = np.full(n_units, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(gx, unit[grouped], np.minimum(ptok[grouped], p[grouped]))
        size = np.bincount(unit, minlength=n_units)
        has = (size > 1) & (gx < np.iinfo(np.int64).max)
        unit_comp[has] -= (size[has] - 1) * dm.prefix_comp_s(gx[has])
    # a node without decode KV reads (all outputs of length 0) is as dense as can be; a tiny
    # floor keeps the scanner's arithmetic finite
    rho_unit = unit_comp / np.maximum(unit_mem, 1e-30)
    rho_target = float(unit_comp.sum() / max(unit_mem.sum(), 1e-30))
    # layer-wise sort (Alg. 1): nodes by density descending (ties: node id, so a node's requests
    # stay together), the requests inside a node likewise (ties: file order)
    flat = np.lexsort((np.arange(n), -rho, unit, -rho_unit[unit]))
    # weight: KV token-steps a request holds (prompt held through its decode steps + growing
    # output, plus one step for its prefill) -- the memory-time it uses of its partition
    weight = (p * d + 0.5 * d * d + p).astype(np.float64)[flat]
    weight = np.maximum(weight, 1.0)
    chunk = max(int(_config_value(config, "dp", 1)), 1)
    pos, side = _dual_scan(unit[flat], rho_unit, weight, rho_target, chunk, whole_groups)
    return BlendPlan(order=flat[pos].astype(np.int64), side=side, unit=unit, density=rho,
                     unit_density=rho_unit, target_density=rho_target)


def blend_order(workload: Workload, *, model: ModelSpec | None = None, gpu: GPU | None = None,
                config: ServingConfig | None = None, **_) -> np.ndarray:
    """BlendServe's resource-aware order (§3.2-3.4), at the level of prefix groups.

    1. Density: each request's Comp(r) / Mem(r) from §2.3 (`DensityModel`, from the model's
       shape and the GPU's peak FLOP/s and HBM bandwidth). A prefix group (requests with the same
       ``prefix_id``) is one node of the prefix tree; its density is (1 - s) T_comp / T_mem over
       its requests, the shared prefix computed once (§3.2). Other requests are nodes of one.
    2. Layer-wise sort (Alg. 1): nodes by density descending (compute-intensive left), and the
       requests inside a node likewise. A node's requests stay together.
    3. Dual scanner (§3.4): one scanner walks the sorted leaves from the left, one from the
       right. For the two nodes under the scanners, memory is split so that
       M_L rho_L + M_R rho_R = M rho(rt), rho(rt) the density of the whole job
       (`memory_partition`). The engine admits requests in submission order, so the split is
       realised as a weighted fair merge: each request counts by the KV token-steps it occupies
       (p d + d^2/2 + p), each side's share of the merged stream is its memory fraction, and
       the side that is behind its share emits next. A prefix group is emitted whole, so its
       requests are adjacent in the order (and are admitted together, which is what keeps
       its prefix cached in the engine). With ``config.dp`` replicas a side emits at least dp
       requests at a time, so the simulator's round-robin deal gives every replica the blend.

    Simplified against the paper: the prefix tree has one level (prefix groups, from
    ``prefix_id``; no nested prefixes), so there is no node splitting (Alg. 2) or sub-tree
    merging; output lengths are the workload's own (no sampling, §3.2); the per-partition
    batch sizes in multiples of 128 (§4) are left to the engine. BlendServe's scanners take
    requests from the two nodes side by side (two concurrent local DFS orders); emitting a
    group whole is coarser. `blend_plan(..., whole_groups=False)` interleaves at the request
    level as the paper does (a group is then contiguous only within its scanner's stream); in
    the simulator the two differ by under 0.5 % in makespan on mixed prefix workloads.
    """
    return blend_plan(workload, model=model, gpu=gpu, config=config).order


OrderingFn = Callable[..., np.ndarray]

ORDERINGS: dict[str, OrderingFn] = {
    "fcfs": fcfs_order,
    "shortest-prompt": shortest_prompt_order,
    "longest-output": longest_output_order,
    "binpack": binpack_order,
    "blend": blend_order,
}


def order_requests(workload: Workload, ordering: str, *, model: ModelSpec | None = None,
                   gpu: GPU | None = None, config: ServingConfig | None = None,
                   kv_capacity_tokens: int | None = None) -> np.ndarray:
    """Indices of the requests in the order they are submitted to the engine."""
    fn = ORDERINGS.get(ordering)
    if fn is None:
        raise TunerError(f"Unknown ordering {ordering!r}; choose one of {', '.join(ORDERINGS)}.")
    return fn(workload, model=model, gpu=gpu, config=config, kv_capacity_tokens=kv_capacity_tokens)
