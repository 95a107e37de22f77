"""TorchScript helpers for profilers.cpu_threads (imports torch at module level: TorchScript
resolves the annotations from this module's globals). Imported only inside the subprocess."""

from typing import List  # noqa: UP035 - TorchScript resolves typing.List

import torch


def mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x, w)


def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    rep = q.shape[1] // k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1))


def fork_mm(x: torch.Tensor, w: torch.Tensor, n: int) -> List[torch.Tensor]:  # noqa: UP006
    fs = [torch.jit.fork(mm, x, w) for _ in range(n)]
    return [torch.jit.wait(f) for f in fs]


def fork_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: int) -> List[torch.Tensor]:  # noqa: UP006
    fs = [torch.jit.fork(attn, q, k, v) for _ in range(n)]
    return [torch.jit.wait(f) for f in fs]


def scripted():
    """(fork_mm, fork_attn, how): TorchScript versions (forks run on the inter-op pool), or the
    plain ones (forks run inline) where scripting fails."""
    try:
        return torch.jit.script(fork_mm), torch.jit.script(fork_attn), "torchscript fork"
    except Exception:  # noqa: BLE001
        return fork_mm, fork_attn, "inline (TorchScript unavailable)"
