"""FLOPs and bytes of one decode call, for the benchmarks and notebooks.

bytes = valid_tokens * bytes_per_token + |q| + |out|   (each selected token read once per query)
flops = 2 * 2 * h * valid_tokens * d                    (QK and PV, d = 512 each)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .format.codec import valid_index_mask
from .format.layout import MODEL1, CacheLayout


@dataclass(frozen=True)
class DecodeCost:
    valid_tokens: int
    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def count_valid_tokens(indices: torch.Tensor, num_tokens: int, topk_length: torch.Tensor | None = None) -> int:
    """Selected indices that are in range and inside topk_length, summed over all queries."""
    return int(valid_index_mask(indices, num_tokens, topk_length).sum())


def call_valid_tokens(kw: dict) -> int:
    """Valid tokens of one decode call's keyword arguments, main and extra scope together."""
    n = 0
    for prefix in ("", "extra_"):
        cache = kw.get(f"{prefix}cache")
        if cache is not None:
            n += count_valid_tokens(kw[f"{prefix}indices"], cache.shape[0] * cache.shape[1],
                                    kw.get(f"{prefix}topk_length"))
    return n


def decode_cost(*, batch: int, s_q: int, heads: int, valid_tokens: int,
                layout: CacheLayout = MODEL1) -> DecodeCost:
    """Cost of one decode call that reads ``valid_tokens`` (summed over queries) cache rows."""
    qo_bytes = 2 * batch * s_q * heads * layout.d * 2  # bf16 q in, bf16 out
    return DecodeCost(valid_tokens=valid_tokens,
                      flops=2 * 2 * heads * valid_tokens * layout.d,
                      bytes=valid_tokens * layout.bytes_per_token + qo_bytes)


def case_cost(case) -> DecodeCost:
    """Cost of a :class:`workbench.format.cases.DecodeCase`, all scopes together."""
    b, s_q, h, _ = case.q.shape
    return decode_cost(batch=b, s_q=s_q, heads=h, valid_tokens=call_valid_tokens(case.kwargs()))
