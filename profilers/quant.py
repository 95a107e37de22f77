"""Group-wise min-max (de)quantization, FlexGen's kernel as LM-Offload models it (its
Alg. 2 and Eqs. 10-11): pad, find min and max per group, normalise to 0...2^b - 1, clamp, pack
(two 4-bit codes per byte). torch is imported by the caller; these functions take tensors."""

from __future__ import annotations


def quantize(x, bits: int, group_size: int = 64):
    """x (any shape) -> (codes uint8, mins, scales, numel). codes hold 2 values per byte at 4 bits."""
    import torch
    import torch.nn.functional as F

    if bits not in (4, 8):
        raise ValueError("bits must be 4 or 8")
    flat = x.reshape(-1)
    numel = flat.numel()
    pad = (-numel) % group_size  # Alg. 2 lines 5-6: pad to whole groups
    if pad:
        flat = F.pad(flat, (0, pad))
    data = flat.view(-1, group_size)
    mn = data.amin(dim=1, keepdim=True)  # lines 9-10
    mx = data.amax(dim=1, keepdim=True)
    levels = (1 << bits) - 1
    scale = levels / (mx - mn).clamp_min(1e-8)
    q = ((data - mn) * scale).round_().clamp_(0, levels).to(torch.uint8)  # Eq. 10, line 14
    if bits == 4:  # line 16: pack
        q = q[:, 0::2] | (q[:, 1::2] << 4)
    return q, mn, scale, numel


def dequantize(q, mn, scale, bits: int, numel: int, shape=None, dtype=None):
    """Inverse of quantize (Eq. 11): x = code / scale + min, unpacked and un-padded."""
    import torch

    if bits == 4:
        q = torch.stack((q & 0xF, q >> 4), dim=-1).view(q.shape[0], -1)
    x = q.to(dtype or mn.dtype) / scale + mn
    x = x.view(-1)[:numel]
    return x.view(shape) if shape is not None else x
