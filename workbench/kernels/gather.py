"""Speed-of-light probe "gather": read exactly the bytes a decode must read, do no math.

One program per (query, split), the decode's own split plan and indices. Each selected token's
576 data bytes are read as 16-byte words (512 + 64 bytes) and its 8 scale bytes as two words;
the words are xor-reduced so the loads cannot be dropped, and each program writes one int32. Its
time is the floor of this access pattern as Triton issues it: a decode kernel can approach it
only by hiding all of its arithmetic under these loads.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..format.layout import layout_of
from .common import INTERPRET, launch, next_pow2, scope_args
from .configs import KernelConfig

ALLOWED = dict(BLOCK_T=(16, 32, 64), num_warps=(4, 8), num_stages=(1, 3))


@dataclass(frozen=True)
class GatherConfig(KernelConfig):
    BLOCK_T: int = 32


CONFIG_SPACE = [GatherConfig(BLOCK_T=bt, num_warps=w, num_stages=s)
                for bt in ALLOWED["BLOCK_T"] for w in ALLOWED["num_warps"] for s in ALLOWED["num_stages"]]


@triton.autotune(configs=[c.to_triton() for c in CONFIG_SPACE], key=["TOKENS_BUCKET", "QUERIES_BUCKET"],
                 do_bench=lambda fn, quantiles: triton.testing.do_bench(fn, warmup=3, rep=15, quantiles=quantiles))
@triton.jit(do_not_specialize=["stride_ib", "stride_is", "num_tokens", "TOPK", "TOKENS_BUCKET", "QUERIES_BUCKET"])
def gather_kernel(
    cache_u8,         # flat uint8 view of one cache
    stride_page, block_size, num_tokens,
    idx_ptr,          # [b, s_q, topk] int32
    stride_ib, stride_is,
    sink_ptr,         # [b*s_q, num_splits] int32: one word per program, so nothing is optimised away
    S_Q, TOPK, tokens_per_split, TOKENS_BUCKET, QUERIES_BUCKET,
    DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr, BLOCK_T: tl.constexpr,
):
    split = tl.program_id(0)
    pid_q = tl.program_id(1)
    bi = pid_q // S_Q
    si = pid_q % S_Q
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, TOPK)
    idx_row = idx_ptr + bi * stride_ib + si * stride_is
    words = cache_u8.to(tl.pointer_type(tl.int32))
    w_main = tl.arange(0, 128)                # 512 bytes as 128 int32 (16-byte vectors)
    w_tail = tl.arange(0, 16)                 # the last 64 data bytes
    w_scale = tl.arange(0, SCALE_BYTES // 4)  # the 8 scale bytes
    acc = tl.zeros([BLOCK_T], tl.int32)
    for t0 in range(start, end, BLOCK_T):
        offs = t0 + tl.arange(0, BLOCK_T)
        idx = tl.load(idx_row + offs, mask=offs < end, other=-1)
        valid = (offs < end) & (idx >= 0) & (idx < num_tokens)
        safe = tl.where(valid, idx, 0)
        page = (safe // block_size).to(tl.int64)
        off = (safe % block_size).to(tl.int64)
        row = tl.multiple_of((page * stride_page + off * DATA_BYTES) // 4, 4)  # int32 word of the token
        a = tl.load(words + row[:, None] + w_main[None, :], mask=valid[:, None], other=0)
        b = tl.load(words + row[:, None] + 128 + w_tail[None, :], mask=valid[:, None], other=0)
        srow = tl.multiple_of((page * stride_page + block_size * DATA_BYTES + off * SCALE_BYTES) // 4, 2)
        c = tl.load(words + srow[:, None] + w_scale[None, :], mask=valid[:, None], other=0)
        acc ^= tl.xor_sum(a, 1) ^ tl.xor_sum(b, 1) ^ tl.xor_sum(c, 1)
    tl.store(sink_ptr + pid_q * tl.num_programs(0) + split, tl.xor_sum(acc, 0))


def launch_gather(*, cache, indices, num_splits, tokens_per_split, sink=None, config=None):
    """Read every selected token's bytes once; returns the [b*s_q, num_splits] int32 sink."""
    b, s_q, topk = indices.shape
    if sink is None:
        sink = torch.empty(b * s_q, num_splits, dtype=torch.int32, device=indices.device)
    sa = scope_args("", cache, indices, None)
    args = dict(cache_u8=sa["cache_u8"], stride_page=sa["stride_page"], block_size=sa["block_size"],
                num_tokens=sa["num_tokens"], idx_ptr=indices, stride_ib=indices.stride(0),
                stride_is=indices.stride(1), sink_ptr=sink, S_Q=s_q, TOPK=topk, tokens_per_split=tokens_per_split,
                TOKENS_BUCKET=next_pow2(tokens_per_split), QUERIES_BUCKET=next_pow2(b * s_q),
                DATA_BYTES=layout_of(cache).data_bytes_per_token, SCALE_BYTES=layout_of(cache).scale_bytes_per_token)
    grid = (num_splits, b * s_q)
    if INTERPRET and config is None:
        config = GatherConfig(BLOCK_T=64)
    if config is None:
        launch(gather_kernel, grid, args)
    else:
        cfg = GatherConfig.from_any(config, ALLOWED, "gather")
        launch(gather_kernel.fn, grid, dict(**args, **cfg.meta(), num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    return sink
