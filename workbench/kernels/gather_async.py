"""Speed-of-light probe "gather_async": the decode's bytes, read through the deepest load pipeline sm_90 offers.

The same reads as the "gather" probe (each selected token's 576 data bytes and its 8 scale bytes, one program per
(query, split) of the decode's split plan, the words xor-reduced into one int32 per program, so both probes write
the same sink), issued so that many tokens are in flight per SM:

- the cache is passed as int32 words (a real ``*i32`` argument, not a cast inside the kernel), so Triton 3.6's
  pipeliner turns the gathers of a ``num_stages >= 3`` loop into ``cp.async.cg`` 16-byte copies (LDGSTS) into a
  ring of ``num_stages - 1`` tiles in shared memory, the index loads one stage ahead of them. A tile's copies
  cost no registers, so ``(num_stages - 2)..(num_stages - 1) x BLOCK_T`` tokens are in flight per program while
  it xors the oldest tile out of shared memory. ("gather" casts a byte pointer to int32 inside the kernel: its
  loads stay synchronous at every num_stages, so it has one tile in flight and an index round trip between
  tiles.)
- with ``num_stages == 1`` the same loop loads into registers with ``ld.global.cg.v4`` (LDG.E.128, L1 bypassed),
  up to 128 tokens a tile: the autotuner picks whichever path is faster for the call.

Its time is the floor of this access pattern as the hardware can serve it: what a decode kernel could reach if
its arithmetic hid entirely under its loads.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..format.layout import layout_of
from .common import INTERPRET, launch, next_pow2
from .configs import KernelConfig

ALLOWED = dict(BLOCK_T=(16, 32, 64, 128), num_warps=(4, 8), num_stages=(1, 3, 4, 6))
SMEM_BUDGET = 200 * 1024  # a ring of at most this: one block per SM fits at least (sm_90 allows 232,448 B a block)


@dataclass(frozen=True)
class GatherAsyncConfig(KernelConfig):
    """BLOCK_T tokens a tile; num_stages is the loop's pipeline depth as well as the launch option (Triton 3.6
    pipelines a loop of loads that feed no dot only when the loop names its stages: the kernel's NUM_STAGES)."""
    BLOCK_T: int = 32

    def meta(self) -> dict:
        return {**super().meta(), "NUM_STAGES": self.num_stages}

    @classmethod
    def from_triton(cls, cfg: triton.Config):
        kw = {k: v for k, v in cfg.kwargs.items() if k != "NUM_STAGES"}
        return cls(**kw, num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def estimate_shared_bytes(c: GatherAsyncConfig, data_bytes: int = 576, scale_bytes: int = 8) -> int:
    """Shared bytes of one program, an upper bound of the compiled ones (sm_90 lab, every config): the pipeliner's
    ring of ``num_stages - 1`` tiles, each BLOCK_T tokens' data and scale bytes and their indices (up to three
    copies of 4 B: one per load shape's layout), plus the xor reduction's scratch (4 B a thread). A synchronous
    config (num_stages 1) has the scratch alone."""
    ring = (c.num_stages - 1) * c.BLOCK_T * (data_bytes + scale_bytes + 3 * 4) if c.num_stages >= 2 else 0
    return ring + 4 * 32 * c.num_warps


def _space() -> list[GatherAsyncConfig]:
    """The autotuner's choices. Pipelined (cp.async): BLOCK_T 16-64, 3-6 stages, 4 or 8 warps, a ring of at most
    SMEM_BUDGET. Synchronous (ld.global.cg.v4): 64 or 128 tokens a tile, 8 warps (128 tokens at 4 warps would hold
    128 data registers a thread)."""
    out = [GatherAsyncConfig(BLOCK_T=bt, num_warps=w, num_stages=s)
           for s in (3, 4, 6) for bt in (16, 32, 64) for w in (4, 8)]
    out = [c for c in out if estimate_shared_bytes(c) <= SMEM_BUDGET]
    return out + [GatherAsyncConfig(BLOCK_T=bt, num_warps=8, num_stages=1) for bt in (64, 128)]


CONFIG_SPACE = _space()

# The interpreter reduces with xor one element at a time in Python (tl.xor_sum of one [128, 128] tile: ~10 s);
# there the rows are xor-folded in halves with numpy instead. Both give the same word.
XOR_BY_HALVES = tl.constexpr(INTERPRET)


@triton.jit
def xor_rows(x, N: tl.constexpr):
    """The xor of each row of x [BLOCK_T, N] (N a power of two) -> [BLOCK_T]."""
    if XOR_BY_HALVES:
        n: tl.constexpr = N
        while n > 1:
            lo, hi = tl.split(tl.reshape(x, [x.shape[0], n // 2, 2]))
            x = lo ^ hi
            n //= 2
        return tl.reshape(x, [x.shape[0]])
    else:
        return tl.xor_sum(x, 1)


@triton.autotune(configs=[c.to_triton() for c in CONFIG_SPACE], key=["TOKENS_BUCKET", "QUERIES_BUCKET"],
                 do_bench=lambda fn, quantiles: triton.testing.do_bench(fn, warmup=3, rep=15, quantiles=quantiles))
@triton.jit(do_not_specialize=["num_tokens", "stride_ib", "stride_is", "TOPK", "tokens_per_split", "TOKENS_BUCKET",
                               "QUERIES_BUCKET"])
def gather_async_kernel(
    cache_w,          # the cache's bytes as int32 words (the flat view of common.cache_views, as int32)
    stride_page_w,    # words per page: page_bytes / 4, a multiple of 144 (pages are whole 576-byte rows)
    block_size, num_tokens,
    idx_ptr,          # [b, s_q, topk] int32
    stride_ib, stride_is,
    sink_ptr,         # [b*s_q, num_splits] int32: one word per program, so nothing is optimised away
    S_Q, TOPK, tokens_per_split, TOKENS_BUCKET, QUERIES_BUCKET,
    DATA_WORDS: tl.constexpr, SCALE_WORDS: tl.constexpr, BLOCK_T: tl.constexpr, NUM_STAGES: tl.constexpr,
):
    split = tl.program_id(0)
    pid_q = tl.program_id(1)
    bi = pid_q // S_Q
    si = pid_q % S_Q
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, TOPK)
    idx_row = idx_ptr + bi * stride_ib + si * stride_is
    w_main = tl.arange(0, 128)                # the first 512 data bytes: 32 lanes x 16 bytes, one token a warp
    w_tail = tl.arange(0, DATA_WORDS - 128)   # the last 64: 4 lanes x 16 bytes a token
    w_scale = tl.arange(0, SCALE_WORDS)       # the 8 scale bytes: one 8-byte copy a token
    acc = tl.zeros([BLOCK_T], tl.int32)
    # from 3 stages on, the index loads and the gathers become cp.async into a ring of NUM_STAGES - 1 tiles
    for t0 in tl.range(start, end, BLOCK_T, num_stages=NUM_STAGES):
        offs = t0 + tl.arange(0, BLOCK_T)
        idx = tl.load(idx_row + offs, mask=offs < end, other=-1)
        valid = (offs < end) & (idx >= 0) & (idx < num_tokens)
        safe = tl.where(valid, idx, 0)
        page = (safe // block_size).to(tl.int64)
        off = (safe % block_size).to(tl.int64)
        row = tl.multiple_of(page * stride_page_w + off * DATA_WORDS, 4)  # the token's first word, 16-byte aligned
        a = tl.load(cache_w + row[:, None] + w_main[None, :], mask=valid[:, None], other=0, cache_modifier=".cg")
        b = tl.load(cache_w + row[:, None] + 128 + w_tail[None, :], mask=valid[:, None], other=0,
                    cache_modifier=".cg")
        srow = tl.multiple_of(page * stride_page_w + block_size * DATA_WORDS + off * SCALE_WORDS, SCALE_WORDS)
        c = tl.load(cache_w + srow[:, None] + w_scale[None, :], mask=valid[:, None], other=0)
        acc ^= xor_rows(a, 128) ^ xor_rows(b, DATA_WORDS - 128) ^ xor_rows(c, SCALE_WORDS)
    tl.store(sink_ptr + pid_q * tl.num_programs(0) + split, tl.xor_sum(acc, 0))


def cache_words(cache: torch.Tensor) -> torch.Tensor:
    """The cache's storage as flat int32 words (``num_blocks * stride(0) / 4`` of them). The probe reads 16-byte
    words, so the page stride and the first byte must be 16-byte aligned (every cache the workbench makes is:
    a page is a whole number of 576-byte rows)."""
    nb = cache.shape[0]
    u8 = cache.view(torch.uint8) if cache.dtype != torch.uint8 else cache
    if cache.stride(0) % 16 or (u8.storage_offset() % 16) or (u8.data_ptr() % 16):
        raise ValueError(f"gather_async reads 16-byte words: the cache's page stride ({cache.stride(0)} B) and "
                         f"first byte must be 16-byte aligned")
    return u8.as_strided((nb * cache.stride(0),), (1,), u8.storage_offset()).view(torch.int32)


def launch_gather_async(*, cache, indices, num_splits, tokens_per_split, sink=None, config=None):
    """Read every selected token's bytes once; returns the [b*s_q, num_splits] int32 sink (the same words as
    ``launch_gather``'s)."""
    b, s_q, topk = indices.shape
    if sink is None:
        sink = torch.empty(b * s_q, num_splits, dtype=torch.int32, device=indices.device)
    lay = layout_of(cache)
    args = dict(cache_w=cache_words(cache), stride_page_w=cache.stride(0) // 4, block_size=cache.shape[1],
                num_tokens=cache.shape[0] * cache.shape[1], idx_ptr=indices, stride_ib=indices.stride(0),
                stride_is=indices.stride(1), sink_ptr=sink, S_Q=s_q, TOPK=topk, tokens_per_split=tokens_per_split,
                TOKENS_BUCKET=next_pow2(tokens_per_split), QUERIES_BUCKET=next_pow2(b * s_q),
                DATA_WORDS=lay.data_bytes_per_token // 4, SCALE_WORDS=lay.scale_bytes_per_token // 4)
    grid = (num_splits, b * s_q)
    if INTERPRET and config is None:
        config = GatherAsyncConfig(BLOCK_T=32, num_warps=4, num_stages=3)
    if config is None:
        launch(gather_async_kernel, grid, args)
    else:
        cfg = GatherAsyncConfig.from_any(config, ALLOWED, "gather_async")
        launch(gather_async_kernel.fn, grid,
               dict(**args, **cfg.meta(), num_warps=cfg.num_warps, num_stages=cfg.num_stages))
    return sink
