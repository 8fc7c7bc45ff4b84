"""Pieces every decode kernel shares: the KV-tile gather/dequant, the dot wrapper, the interpreter
switch, the layout and scope arguments of a launch, and ``launch``, the one launch point a plan captures.

The autotuners' tuning state (target, pruning record) is in :mod:`workbench.kernels.tuning`.
"""
from __future__ import annotations

import os
import threading

import torch
import triton
import triton.language as tl

from ..format.layout import MODEL1, CacheLayout

# Must be read when the kernels are decorated: TRITON_INTERPRET is fixed at import.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

L = MODEL1
D_NOPE, NOPE_PAD, D_ROPE = L.d_nope, L.nope_pad, L.d_rope
TILE, DATA_BYTES, SCALE_BYTES, NUM_TILES = L.tile, L.data_bytes_per_token, L.scale_bytes_per_token, L.num_tiles
assert NOPE_PAD // TILE == SCALE_BYTES, "padded nope columns must map onto the pad scale byte"


@triton.jit
def load_kv_raw(cache_f8, cache_u8, cache_bf16, idx, valid, stride_page, block_size,
                D_NOPE: tl.constexpr, NOPE_PAD: tl.constexpr, D_ROPE: tl.constexpr,
                NUM_TILES: tl.constexpr, DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr):
    """Issue the loads of BLOCK_T tokens' bytes, undecoded, so they can be prefetched.

    idx, valid: [BLOCK_T]. Returns (k8 [BLOCK_T, NOPE_PAD] fp8, sbyte [BLOCK_T, SCALE_BYTES] u8,
    rope [BLOCK_T, D_ROPE] bf16). Invalid tokens and padded columns load as zero: they are
    never read, so NaN in an unselected page cannot reach the output.
    """
    safe = tl.where(valid, idx, 0)
    page = (safe // block_size).to(tl.int64)
    off = (safe % block_size).to(tl.int64)
    row = tl.multiple_of(page * stride_page + off * DATA_BYTES, 16)  # [BLOCK_T] byte offset of the token
    d = tl.arange(0, NOPE_PAD)
    k8 = tl.load(cache_f8 + row[:, None] + d[None, :], mask=valid[:, None] & (d < D_NOPE)[None, :], other=0.0)
    g = tl.arange(0, SCALE_BYTES)
    srow = tl.multiple_of(page * stride_page + block_size * DATA_BYTES + off * SCALE_BYTES, 8)
    # group NUM_TILES is the pad byte: masked so padded columns get scale 0, never a stray byte
    sbyte = tl.load(cache_u8 + srow[:, None] + g[None, :], mask=valid[:, None] & (g < NUM_TILES)[None, :], other=0)
    r = tl.arange(0, D_ROPE)
    rrow = tl.multiple_of((row + D_NOPE) // 2, 8)  # bf16 element offset of the rope part
    rope = tl.load(cache_bf16 + rrow[:, None] + r[None, :], mask=valid[:, None], other=0.0)
    return k8, sbyte, rope


@triton.jit
def ue8m0_fp32(sbyte):
    """UE8M0 scale bytes -> fp32 2**(e-127), exactly, for every byte 0..254: e >= 1 goes straight into the fp32
    exponent field; e == 0 is the subnormal 2**-127 (bits 0x00400000), not zero. Masked loads that give 0 stay
    harmless: their fp8 bytes load as 0 too."""
    e = sbyte.to(tl.int32)
    return tl.where(e == 0, 0x00400000, e << 23).to(tl.float32, bitcast=True)


@triton.jit
def dequant_kv(k8, sbyte, TILE: tl.constexpr, SCALE_BYTES: tl.constexpr, NOPE_PAD: tl.constexpr,
               BLOCK_T: tl.constexpr):
    """[BLOCK_T, NOPE_PAD] fp32 nope values: fp8 times its tile's UE8M0 scale."""
    scale = ue8m0_fp32(sbyte)  # [BLOCK_T, SCALE_BYTES]
    # broadcast the 8 scales over their 64 columns; only the small scale tensor is reshaped
    scale = tl.reshape(tl.broadcast_to(scale[:, :, None], (BLOCK_T, SCALE_BYTES, TILE)), (BLOCK_T, NOPE_PAD))
    return k8.to(tl.float32) * scale


@triton.jit
def gather_kv_tile(cache_f8, cache_u8, cache_bf16, idx, valid, stride_page, block_size,
                   D_NOPE: tl.constexpr, NOPE_PAD: tl.constexpr, D_ROPE: tl.constexpr,
                   TILE: tl.constexpr, NUM_TILES: tl.constexpr,
                   DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr, BLOCK_T: tl.constexpr):
    """Gather and dequantise BLOCK_T tokens: (k_nope [BLOCK_T, NOPE_PAD] fp32, k_rope [BLOCK_T, D_ROPE] fp32)."""
    k8, sbyte, rope = load_kv_raw(cache_f8, cache_u8, cache_bf16, idx, valid, stride_page, block_size,
                                  D_NOPE, NOPE_PAD, D_ROPE, NUM_TILES, DATA_BYTES, SCALE_BYTES)
    return dequant_kv(k8, sbyte, TILE, SCALE_BYTES, NOPE_PAD, BLOCK_T), rope.to(tl.float32)


@triton.jit
def mma(a, b, DOT_FP32: tl.constexpr):
    """a @ b with fp32 accumulation; DOT_FP32 upcasts for the interpreter, whose bf16 dot is wrong."""
    if DOT_FP32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def to_bf16(x, RNE_BY_HAND: tl.constexpr):
    """fp32 -> bf16, round to nearest even.

    The interpreter truncates on this cast (0.2089 -> 0.2080); RNE_BY_HAND rounds
    the bits first so the cast is exact and CPU numerics match the GPU's.
    """
    if RNE_BY_HAND:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)
    else:
        return x.to(tl.bfloat16)


def e4m3_bf16x2_asm(scale_lo: str, scale_hi: str) -> str:
    """PTX of the bf16-bits dequant, for ``inline_asm_elementwise``: one 32-bit register of four e4m3 bytes
    (operand $2) -> two registers of bf16 pairs ($0: bytes 0-1, $1: bytes 2-3), exactly, with no fp32 step.

    ``((b & 0x80) << 8) | ((b & 0x7F) << 4)`` is the bf16 of the e4m3 value times 2**-120 (subnormals
    included); two exact bf16x2 multiplies restore it and apply the UE8M0 scale: by 2**120 (bf16 0x7B80), then by
    the scale pair 2**(e-127), which :func:`workbench.kernels.gluon_common.bf16_scale_pairs` gives for every byte
    0..254 (byte 0 as the bf16 subnormal 2**-127), so the result is bf16(fp8) * bf16(scale), FlashMLA's value.
    ``scale_lo`` and ``scale_hi`` are the operands holding the scale pairs of bytes 0-1 and 2-3: "$3", "$3" where
    one register holds one scale twice (the Gluon kernels, pack=1). Jit code reads it through a module-level
    ``constexpr``.
    """
    return f"""{{
        .reg .b32 t0, t1, u0, u1, c120;
        mov.b32 c120, 0x7B807B80;
        prmt.b32 t0, $2, 0, 0x1404;
        prmt.b32 t1, $2, 0, 0x3424;
        shr.b32 u0, t0, 4;
        shr.b32 u1, t1, 4;
        and.b32 u0, u0, 0x07F007F0;
        and.b32 u1, u1, 0x07F007F0;
        and.b32 t0, t0, 0x80008000;
        and.b32 t1, t1, 0x80008000;
        or.b32 t0, t0, u0;
        or.b32 t1, t1, u1;
        mul.rn.bf16x2 t0, t0, c120;
        mul.rn.bf16x2 t1, t1, c120;
        mul.rn.bf16x2 $0, t0, {scale_lo};
        mul.rn.bf16x2 $1, t1, {scale_hi};
        }}"""


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) in plain ints: ``triton.cdiv`` called from host code is a ConstexprFunction call (5-10 us each
    on a 2-core CPU, several per decode call)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (0 for n <= 0), as ``triton.next_power_of_2`` gives it, in plain ints."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def head_group(heads: int) -> int:
    """The head group that covers ``heads`` in one program: the MMA's 16-row minimum up to 64 (a warpgroup's
    tile; more heads take more programs). 0 heads (a prune hook that did not see the call) gives 64."""
    return min(64, max(16, next_pow2(heads))) if heads > 0 else 64


LAYOUT_KEYS = ("D_NOPE", "NOPE_PAD", "D_ROPE", "TILE", "NUM_TILES", "DATA_BYTES", "SCALE_BYTES")


def layout_constexprs(layout: CacheLayout = MODEL1, keys: tuple = LAYOUT_KEYS) -> dict:
    """A layout's constants as kernel constexprs (``keys``: those a kernel declares).

    Launchers pass ``layout_of(cache)``, so the layout travels with the cache, not with a module global.
    """
    every = dict(D_NOPE=layout.d_nope, NOPE_PAD=layout.nope_pad, D_ROPE=layout.d_rope, TILE=layout.tile,
                 NUM_TILES=layout.num_tiles, DATA_BYTES=layout.data_bytes_per_token,
                 SCALE_BYTES=layout.scale_bytes_per_token)
    return {k: every[k] for k in keys}


def cache_views(cache: torch.Tensor):
    """(fp8, uint8, bf16) flat views of one cache's storage, for the three kinds of load."""
    nb, _, _, _ = cache.shape
    u8 = cache.view(torch.uint8) if cache.dtype != torch.uint8 else cache
    flat = u8.as_strided((nb * cache.stride(0),), (1,), u8.storage_offset())
    return flat.view(torch.float8_e4m3fn), flat, flat.view(torch.bfloat16)


CACHE_VIEWS = ("cache_f8", "cache_u8", "cache_bf16")  # the argument names of cache_views' three views


LOG2E = 1.4426950408889634  # kernels run the softmax in base 2: scores are scaled by sm_scale * LOG2E


def scope_args(prefix: str, cache: torch.Tensor, indices: torch.Tensor, topk_length,
               views: tuple = CACHE_VIEWS) -> dict:
    """Kernel arguments describing one KV scope; ``prefix`` names the scope's parameters (``x_`` = extra).

    cache: [num_blocks, block_size, 1, 584] view; indices: [b, s_q, topk] int32; topk_length: [b] int32 or None
    (the indices pointer stands in, unread, when there is none), any stride: batch i reads
    ``topk_len_ptr + i * stride_tl`` (an expanded tensor has stride 0; an offset view its own data_ptr).
    views: which of the cache's views (:data:`CACHE_VIEWS`) the kernel takes.
    """
    return {**{f"{prefix}{n}": v for n, v in zip(CACHE_VIEWS, cache_views(cache)) if n in views},
            f"{prefix}stride_page": cache.stride(0), f"{prefix}block_size": cache.shape[1],
            f"{prefix}num_tokens": cache.shape[0] * cache.shape[1], f"{prefix}idx_ptr": indices,
            f"{prefix}stride_ib": indices.stride(0), f"{prefix}stride_is": indices.stride(1),
            f"{prefix}topk_len_ptr": topk_length if topk_length is not None else indices,
            f"{prefix}stride_tl": topk_length.stride(0) if topk_length is not None else 0}


def sink_args(attn_sink, stand_in: torch.Tensor) -> dict:
    """The sink's kernel arguments: attn_sink [h] fp32 of any stride (head i reads ``sink_ptr + i * stride_sink``),
    or ``stand_in`` (unread) when there is none."""
    if attn_sink is None:
        return dict(sink_ptr=stand_in, stride_sink=0)
    return dict(sink_ptr=attn_sink, stride_sink=attn_sink.stride(0))


class _Captures(threading.local):
    """Per thread, the stack of open :class:`capture_launches` record lists: a capture never sees another
    thread's launches (a plan made in one thread while another decodes)."""

    def __init__(self):
        self.stack: list[list] = []


_CAPTURE = _Captures()


def launch(kernel, grid, args: dict) -> None:
    """Every kernel launch of the package goes through here: ``kernel[grid](**args)``.

    Inside :class:`capture_launches` (in the same thread) the launch is recorded instead, as
    ``(kernel, grid, args)``, so a decode plan can bind it once (resolve the autotuner, compile) and replay it
    without the launchers' Python.
    """
    stack = _CAPTURE.stack
    if stack:
        stack[-1].append((kernel, grid, args))
        return
    kernel[grid](**args)


class capture_launches:
    """Context manager: record the launches this thread makes inside it (nothing runs); yields the records."""

    def __enter__(self) -> list:
        records: list = []
        _CAPTURE.stack.append(records)
        return records

    def __exit__(self, *exc):
        _CAPTURE.stack.pop()


def split_args(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, tokens_per_split, sm_scale,
               views: tuple = ("cache_u8",)) -> dict:
    """The arguments every split (partial) kernel takes for one KV scope: q, the scope (:func:`scope_args`, with
    the cache ``views`` named: the Gluon kernels read its bytes alone), the partial buffers, the sizes and
    HAS_TOPK_LEN. The Gluon kernels take exactly these (wgmma's also takes the extra scope's, prefixed x_).

    q: [b, s_q, h, 512] bf16; part_out: [b*s_q, h, s_total, 512] fp32; part_lse: [b*s_q, h, s_total] fp32.
    """
    b, s_q, h, _ = q.shape
    return dict(q_ptr=q, stride_qb=q.stride(0), stride_qs=q.stride(1), stride_qh=q.stride(2),
                **scope_args("", cache, indices, topk_length, views), part_out_ptr=part_out, part_lse_ptr=part_lse,
                sm_scale_log2=sm_scale * LOG2E, H=h, S_Q=s_q, TOPK=indices.shape[2], split_offset=split_offset,
                tokens_per_split=tokens_per_split, s_total=part_lse.shape[-1], HAS_TOPK_LEN=topk_length is not None)


def partial_args(*, q, cache, indices, topk_length, part_out, part_lse, split_offset, tokens_per_split,
                 sm_scale) -> dict:
    """:func:`split_args` with all three cache views, and what the Triton split kernels (mma, tile512) take beyond
    it: their autotuners' keys (TOKENS_BUCKET, QUERIES_BUCKET) and DOT_FP32 (fp32 dots under the interpreter)."""
    b, s_q, _, _ = q.shape
    return dict(**split_args(q=q, cache=cache, indices=indices, topk_length=topk_length, part_out=part_out,
                             part_lse=part_lse, split_offset=split_offset, tokens_per_split=tokens_per_split,
                             sm_scale=sm_scale, views=CACHE_VIEWS),
                TOKENS_BUCKET=next_pow2(tokens_per_split), QUERIES_BUCKET=next_pow2(b * s_q), DOT_FP32=INTERPRET)
