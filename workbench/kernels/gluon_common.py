"""What the Gluon partial kernels share (``wgmma``: every warp runs the whole loop; ``wgmma_ws``: a producer
partition gathers and dequantises, a consumer warpgroup runs the MMAs; ``wgmma_ws_h64``: the same for 64 heads, with
a softmax and a PV warpgroup): the launch checks and constexprs, the gathers, the dequants, the producer partitions,
q's per-head scaling, the softmax step and the epilogue, and the f16 window's constants.

The kernels gather a tile of BLOCK_T tokens as [BLOCK_T, G, W] int32 words (G = 8 groups of TILE = 64 columns,
W = 16 words of four e4m3 bytes each, 16 bytes a load) with the rope in the last group's words, and dequantise it
in one of two ways:

- bf16 (:func:`dequant_words`): the e4m3 bits moved into bf16 and two exact bf16x2 multiplies, every scale byte
  0..254 (:func:`workbench.kernels.common.e4m3_bf16x2_asm`);
- f16 (:func:`dequant_words_f16`): the hardware e4m3x2 -> f16x2 convert and one f16 multiply by the scale times
  2**F16_K_SHIFT, exact inside the f16 window (scale bytes F16_MIN_SCALE_BYTE..F16_MAX_SCALE_BYTE, ropes below
  512); a split with a valid token outside it comes out non-finite (:func:`not_finite`) and runs again in bf16.

GPU only (sm_90): Gluon does not run under the interpreter.
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from ..format.layout import layout_of
from .common import e4m3_bf16x2_asm, layout_constexprs, sink_args

# the cache layout's constants the Gluon kernels declare (common.layout_constexprs)
LAYOUT_KEYS = ("D_NOPE", "D_ROPE", "TILE", "DATA_BYTES", "SCALE_BYTES")

# The f16 window. The hardware converts e4m3 pairs to f16 pairs exactly in one instruction (cvt.rn.f16x2.e4m3x2,
# sm_89+); it has no bf16 form, and the bit-built bf16 costs ~6 instructions a pair. One f16 multiply then applies
# the scale, times 2**F16_K_SHIFT: the f16 K tile holds K * 2**7, and the scores and the output take the 2**-7
# back (qk_scale, F16_OUT_MULT). f16 has 5 exponent bits: e4m3 magnitudes are 2**-9..448 and f16's
# 2**-24..65504, so the product is exact for scale bytes e in [F16_MIN_SCALE_BYTE, F16_MAX_SCALE_BYTE] = [105, 127]
# (scales 2**-22..2**0: vLLM's writers give small tiles bytes 105..111, FlashMLA's quantiser 114 and up; 127 is
# amax 448), and the rope (bf16, scaled by 2**7 in fp32 before its f16 rounding) for |rope| < 512 (exact from
# 2**-24 up; below that, absolute errors under 2**-32). q needs no window: each head is scaled by a power of two,
# so its products stay far inside fp32. Outside the window nothing is checked per tile: a scale byte outside it
# dequantises to NaN and a rope of 512 or more to f16 inf, so the split's row sums or accumulator come out
# non-finite, and the split runs again with bf16 operands (unscaled q), exactly as the bf16 kernel: every scale
# byte 0..254, any rope. Non-finite data (NaN in a selected token) takes the same second pass, to FlashMLA's NaN.
F16_MIN_SCALE_BYTE, F16_MAX_SCALE_BYTE = 105, 127
F16_K_SHIFT = 7
_K_SHIFT = gl.constexpr(F16_K_SHIFT)
F16_OUT_MULT = gl.constexpr(2.0 ** -F16_K_SHIFT)
Q_TOP = gl.constexpr(14)     # each head's largest |q| is scaled into [2**Q_TOP, 2**(Q_TOP+1)): f16-exact down to
                             # 2**-31 of it
Q_EXP_CLAMP = gl.constexpr(100)  # the head exponent's range: zero, tiny and inf heads stay finite powers of two
# LEAVE_OUT's bits (measurement only, workbench.bench.isolate): the loop stages a timing may drop (the first tile is
# still loaded with "loads" left out). Any bit set makes the output wrong.
LEAVE_OUT_BITS = {"loads": 1, "dequant": 2, "softmax": 4, "qk": 8, "pv": 16}


# ----------------------------------------------------------------------------- host side

def require_sm90(q: torch.Tensor, name: str) -> None:
    """A RuntimeError naming the registered kernel unless q is on an sm_90 GPU."""
    if q.device.type != "cuda" or torch.cuda.get_device_capability(q.device)[0] != 9:
        raise RuntimeError(f"impl={name!r} is a Hopper (sm_90) Gluon kernel: it needs an sm_90 GPU "
                           "(it does not run under TRITON_INTERPRET)")


BS_SHIFT_RUNTIME = gl.constexpr(-2)  # load_tile's BS_SHIFT for power-of-two pages whose log2 is a runtime value


def page_shift(cache: torch.Tensor) -> int:
    """log2 of a cache's page size where it is a power of two, else -1."""
    bs = cache.shape[1]
    return bs.bit_length() - 1 if bs & (bs - 1) == 0 else -1


def cache_constexprs(cache: torch.Tensor) -> dict:
    """The constexprs a cache fixes: its layout's (LAYOUT_KEYS) and BS_SHIFT, log2 of a power-of-two page size
    (the gathers then shift and mask) or -1 (they divide)."""
    return dict(BS_SHIFT=page_shift(cache), **layout_constexprs(layout_of(cache), LAYOUT_KEYS))


def _scope_constexprs(cache: torch.Tensor, extra_cache: torch.Tensor) -> tuple[dict, dict]:
    """cache_constexprs of both scopes of one launch, which must share a layout: one kernel's constexprs describe
    both (ValueError otherwise)."""
    own, other = cache_constexprs(cache), cache_constexprs(extra_cache)
    if {k: v for k, v in own.items() if k != "BS_SHIFT"} != {k: v for k, v in other.items() if k != "BS_SHIFT"}:
        raise ValueError(f"extra_cache: one launch takes both scopes only in the same layout, got {own} and {other}")
    return own, other


def two_scope_constexprs(cache: torch.Tensor, extra_cache: torch.Tensor) -> dict:
    """cache_constexprs of one launch over two scopes: their common BS_SHIFT, BS_SHIFT_RUNTIME where both page
    sizes are powers of two but differ (the kernel picks each split's shift at run time), else -1 (divisions). The
    two caches must share a layout."""
    own, other = _scope_constexprs(cache, extra_cache)
    a, b = own["BS_SHIFT"], other["BS_SHIFT"]
    return dict(own, BS_SHIFT=a if a == b else (BS_SHIFT_RUNTIME.value if min(a, b) >= 0 else -1))


def joined_scope_constexprs(cache: torch.Tensor, extra_cache: torch.Tensor) -> dict:
    """cache_constexprs of a launch that reads each split's two scopes one after the other (each in a loop of its
    own): scope 1's, and the extra scope's page-size shift as X_BS_SHIFT. The two caches must share a layout."""
    own, other = _scope_constexprs(cache, extra_cache)
    return dict(own, X_BS_SHIFT=other["BS_SHIFT"])


def epilogue_args(*, part_lse: torch.Tensor, direct: bool, attn_sink, num_splits: int) -> dict:
    """The epilogue's arguments of a Gluon partial launch. direct: the call has one split in all and no combine runs,
    so the launch was given the call's out and lse as its part_out and part_lse, and writes them as the combine
    would (the sink applied; :func:`store_partial`); else the sink is not read (part_lse stands in for it). A direct
    launch of more than one split would have its splits overwrite each other's rows: refused."""
    if direct and num_splits != 1:
        raise ValueError(f"direct: a partial launch writes out and lse itself only as the call's one split, got "
                         f"num_splits={num_splits}")
    if not direct:
        return dict(sink_ptr=part_lse, stride_sink=0, HAS_SINK=False, DIRECT=False)
    return dict(**sink_args(attn_sink, part_lse), HAS_SINK=attn_sink is not None, DIRECT=True, s_total=1)


# ----------------------------------------------------------------------------- gathers

@gluon.jit
def load_idx(idx_row, t0, end, BLOCK_T: gl.constexpr, ROWS: gl.constexpr):
    offs = t0 + gl.arange(0, BLOCK_T, layout=ROWS)
    return gl.load(idx_row + offs, mask=offs < end, other=-1)


@gluon.jit
def token_pages(idx, t0, end, num_tokens, block_size, BLOCK_T: gl.constexpr, ROWS: gl.constexpr,
                BS_SHIFT: gl.constexpr, bs_shift=0):
    """(valid, page, off) [BLOCK_T] of the selected tokens [t0, t0 + BLOCK_T) (indices idx in the ROWS layout):
    whether each is in the split and the cache, and its page and slot in that page as int64 (those of token 0 where
    it is not valid). BS_SHIFT: as :func:`load_tile`."""
    offs = t0 + gl.arange(0, BLOCK_T, layout=ROWS)
    valid = (offs < end) & (idx >= 0) & (idx < num_tokens)
    safe = gl.where(valid, idx, 0)
    if BS_SHIFT >= 0:  # power-of-two pages: every lane of a warp splits the same 8 indices, so keep it cheap
        page = (safe >> BS_SHIFT).to(gl.int64)
        off = (safe & ((1 << BS_SHIFT) - 1)).to(gl.int64)
    elif BS_SHIFT == BS_SHIFT_RUNTIME:  # as cheap: a shift and a mask by a register
        page = (safe >> bs_shift).to(gl.int64)
        off = (safe & ((1 << bs_shift) - 1)).to(gl.int64)
    else:
        page = (safe.to(gl.uint32) // block_size.to(gl.uint32)).to(gl.int64)
        off = (safe.to(gl.uint32) % block_size.to(gl.uint32)).to(gl.int64)
    return valid, page, off


@gluon.jit
def token_rows(page, off, stride_page, block_size, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr):
    """(data, scale) [BLOCK_T] int64: the byte offsets in the cache of each token's data bytes and of its scale
    bytes (a page holds its tokens' data bytes, then their scale bytes: workbench.format)."""
    return page * stride_page + off * DATA_BYTES, page * stride_page + block_size * DATA_BYTES + off * SCALE_BYTES


@gluon.jit
def load_tile(cache_w, cache_d, cache_u8, idx, t0, end, num_tokens, stride_page, block_size, g, g3, w3,
              D_NOPE: gl.constexpr, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr, W: gl.constexpr,
              BLOCK_T: gl.constexpr, ROWS: gl.constexpr, BS_SHIFT: gl.constexpr, bs_shift=0):
    """Issue one tile's loads: (words [BLOCK_T, G, W] int32 = 4 fp8 each, rope [BLOCK_T, G, W] int64, scale bytes
    [BLOCK_T, G] u8, valid [BLOCK_T]). The rope comes in the words' layout, group G-1 only: two bf16 pairs each,
    the ones that group's outputs must become. Invalid tokens load as zero, so NaN in an unselected page never
    enters a dot. Group G-1 of the words reads the first rope bytes and the pad scale byte: both are replaced.
    cache_w and cache_d are the cache's bytes as int32 and int64. BS_SHIFT: log2 of a power-of-two page size,
    BS_SHIFT_RUNTIME (power-of-two pages of log2 ``bs_shift``, a runtime value: two scopes' in one launch) or -1
    (any page size: divisions).
    """
    valid, page, off = token_pages(idx, t0, end, num_tokens, block_size, BLOCK_T, ROWS, BS_SHIFT, bs_shift)
    row, srow = token_rows(page, off, stride_page, block_size, DATA_BYTES, SCALE_BYTES)
    row3 = gl.expand_dims(gl.expand_dims(row // 4, 1), 2)
    v3 = gl.expand_dims(gl.expand_dims(valid, 1), 2)
    words = gl.load(cache_w + row3 + g3 * W + w3, mask=v3, other=0)
    sbyte = gl.load(cache_u8 + gl.expand_dims(srow, 1) + gl.expand_dims(g, 0), mask=gl.expand_dims(valid, 1),
                    other=_F16_LO)  # a masked token's zero words times an in-window scale: 0 in both dequants
    rrow3 = gl.expand_dims(gl.expand_dims((row + D_NOPE) // 8, 1), 2)
    rope = gl.load(cache_d + rrow3 + w3, mask=v3 & (g3 == SCALE_BYTES - 1), other=0)
    return words, rope, sbyte, valid


# the four lanes of a token (the producer layout's lanes 4t..4t+3) ask L2 for its data bytes' lines (576 bytes touch
# at most 6 lines of 128: lane k the one holding byte 128k, lane 0 also byte 512's, lane 1 the last byte's) and lane
# 2 for the line holding its scale bytes. Per-thread prefetches: the bulk form takes a uniform address, and ptxas
# ran one lane at a time through it. A hint: nothing is written and nothing waits for it.
_PREFETCH_ASM = gl.constexpr("""{
    .reg .pred p, q;
    .reg .b32 lane;
    .reg .b64 a, o;
    setp.ne.b32 p, $3, 0;
    mov.u32 lane, %laneid;
    and.b32 lane, lane, 3;
    mul.wide.u32 o, lane, 128;
    add.s64 a, $1, o;
    @p prefetch.global.L2 [a];
    setp.eq.and.b32 q, lane, 0, p;
    @q prefetch.global.L2 [$1+512];
    setp.eq.and.b32 q, lane, 1, p;
    @q prefetch.global.L2 [$1+575];
    setp.eq.and.b32 q, lane, 2, p;
    @q prefetch.global.L2 [$2];
    mov.b32 $0, 0;
    }""")


@gluon.jit
def prefetch_tile_l2(cache_u8, idx, t0, end, num_tokens, stride_page, block_size, DATA_BYTES: gl.constexpr,
                     SCALE_BYTES: gl.constexpr, BLOCK_T: gl.constexpr, ROWS: gl.constexpr, BS_SHIFT: gl.constexpr,
                     bs_shift=0):
    """Ask L2 for the selected tokens [t0, t0 + BLOCK_T) (indices idx [BLOCK_T] in the ROWS layout) ahead of their
    loads: their latency then starts one or more tiles earlier (the caller's distance), holding none of the tile's
    words (only its indices, which the caller loads an iteration before the prefetch) and no shared memory.
    BS_SHIFT and bs_shift as :func:`load_tile`'s. The asm's line offsets (128 k, 512, 575) are for DATA_BYTES =
    576, MODEL1's, which a static_assert holds it to."""
    gl.static_assert(DATA_BYTES == 576, "prefetch_tile_l2's line offsets are MODEL1's 576 data bytes")
    valid, page, off = token_pages(idx, t0, end, num_tokens, block_size, BLOCK_T, ROWS, BS_SHIFT, bs_shift)
    data, scale = token_rows(page, off, stride_page, block_size, DATA_BYTES, SCALE_BYTES)
    gl.inline_asm_elementwise(asm=_PREFETCH_ASM, constraints="=r,l,l,r",
                              args=[(cache_u8 + data).to(gl.int64, bitcast=True),
                                    (cache_u8 + scale).to(gl.int64, bitcast=True), valid.to(gl.int32)],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def prefetch_tile_l2_in_halves(cache_u8, idx_a, idx_b, t0, end, num_tokens, stride_page, block_size,
                               DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr, HT: gl.constexpr,
                               ROWS: gl.constexpr, BS_SHIFT: gl.constexpr):
    """:func:`prefetch_tile_l2` of the tile [t0, t0 + 2 * HT) as the producer holds its indices: two halves of HT
    (idx_a, idx_b [HT] in the ROWS layout)."""
    prefetch_tile_l2(cache_u8, idx_a, t0, end, num_tokens, stride_page, block_size, DATA_BYTES, SCALE_BYTES, HT,
                     ROWS, BS_SHIFT)
    prefetch_tile_l2(cache_u8, idx_b, t0 + HT, end, num_tokens, stride_page, block_size, DATA_BYTES, SCALE_BYTES,
                     HT, ROWS, BS_SHIFT)


# ----------------------------------------------------------------------------- dequants

# common.e4m3_bf16x2_asm with pack=1: one int32 register ($3) holds the group's bf16 scale twice
_DEQUANT_ASM = gl.constexpr(e4m3_bf16x2_asm("$3", "$3"))


@gluon.jit
def bf16_scale_pairs(sbyte):
    """Scale bytes [BLOCK_T, G] u8 -> int32 words holding the bf16 of 2**(e-127) twice, for every byte 0..254
    (byte 0 as the bf16 subnormal 0x0040)."""
    e = sbyte.to(gl.int32)
    return gl.where(e == 0, 0x0040, e << 7) * 65537


@gluon.jit
def dequant_words(words, sc):
    """Four e4m3 bytes (one int32 word) -> two words of bf16 pairs, exactly, with no fp32 step, times the scale
    pair sc (:func:`bf16_scale_pairs`; the formula: :func:`workbench.kernels.common.e4m3_bf16x2_asm`)."""
    return gl.inline_asm_elementwise(
        asm=_DEQUANT_ASM,
        constraints="=r,=r,r,r", args=[words, sc], dtype=(gl.int32, gl.int32), is_pure=True, pack=1)


_F16_LO = gl.constexpr(F16_MIN_SCALE_BYTE)  # 2**-22 * 2**7 = 2**-15: f16's subnormal 0x0200
_F16_HI = gl.constexpr(F16_MAX_SCALE_BYTE)
_DEQUANT_F16_ASM = gl.constexpr("""{
    .reg .b16 l, h;
    .reg .b32 a, b;
    mov.b32 {l, h}, $2;
    cvt.rn.f16x2.e4m3x2 a, l;
    cvt.rn.f16x2.e4m3x2 b, h;
    mul.rn.f16x2 $0, a, $3;
    mul.rn.f16x2 $1, b, $3;
    }""")
# four bf16 (one int64) -> two f16 pairs of the values times 2**F16_K_SHIFT, scaled exactly in fp32 and then
# rounded: exact for 2**-24 <= |x| < 512 (and 0), f16 inf from 512 up (which makes the split's result non-finite)
_BF16X4_F16_ASM = gl.constexpr("""{
    .reg .b32 a, b, x0, x1, x2, x3;
    mov.b64 {a, b}, $2;
    shl.b32 x0, a, 16;
    and.b32 x1, a, 0xFFFF0000;
    shl.b32 x2, b, 16;
    and.b32 x3, b, 0xFFFF0000;
    mul.f32 x0, x0, 0f43000000;
    mul.f32 x1, x1, 0f43000000;
    mul.f32 x2, x2, 0f43000000;
    mul.f32 x3, x3, 0f43000000;
    cvt.rn.f16x2.f32 $0, x1, x0;
    cvt.rn.f16x2.f32 $1, x3, x2;
    }""")


@gluon.jit
def f16_scale_pairs(sbyte):
    """Scale bytes [BLOCK_T, G] u8 -> int32 words holding the f16 of 2**(e - 127 + F16_K_SHIFT) twice, for e in
    the window [105, 127]; NaN for every other byte, so that a valid token outside the window makes its split's
    result non-finite (masked tokens load an in-window byte and zero words)."""
    e = sbyte.to(gl.int32)
    bits = gl.where(e > _F16_LO, (e - _F16_LO) << 10, 0x200)  # f16's exponent field: e - 120 + 15
    return gl.where((e < _F16_LO) | (e > _F16_HI), 0x7E00, bits) * 65537


@gluon.jit
def dequant_words_f16(words, sc):
    """Four e4m3 bytes (one int32 word) -> two words of f16 pairs (bytes 0-1, 2-3), times the scale pair sc."""
    return gl.inline_asm_elementwise(asm=_DEQUANT_F16_ASM, constraints="=r,=r,r,r", args=[words, sc],
                                     dtype=(gl.int32, gl.int32), is_pure=True, pack=1)


@gluon.jit
def bf16x4_to_f16(rope):
    """int64 words of four bf16 -> (int32, int32) words of two f16 each (times 2**F16_K_SHIFT), in the same
    order."""
    return gl.inline_asm_elementwise(asm=_BF16X4_F16_ASM, constraints="=r,=r,l", args=[rope],
                                     dtype=(gl.int32, gl.int32), is_pure=True, pack=1)


# ----------------------------------------------------------------------------- the producer partition

@gluon.jit
def _tile_layouts(BLOCK_T: gl.constexpr, SCALE_BYTES: gl.constexpr, TILE: gl.constexpr):
    """(g [G], g3 [1, G, 1], w3 [1, 1, W]) of a [BLOCK_T, G, W] tile of raw words in the producer's layout: 4
    lanes share a token, each 16 B of every group (G = SCALE_BYTES groups of W = TILE/4 words)."""
    L3: gl.constexpr = gl.BlockedLayout([1, 8, 4], [8, 1, 4], [gl.num_warps(), 1, 1], [2, 1, 0])
    g = gl.arange(0, SCALE_BYTES, layout=gl.SliceLayout(0, gl.SliceLayout(2, L3)))
    g3 = gl.expand_dims(gl.expand_dims(g, 0), 2)
    w3 = gl.expand_dims(gl.expand_dims(gl.arange(0, TILE // 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, L3))), 0), 1)
    return g, g3, w3


@gluon.constexpr_function
def _rows_layout(num_warps):
    """The layout of a tile's [BLOCK_T] token vectors (indices, valid), matching :func:`_tile_layouts`."""
    return gl.SliceLayout(1, gl.SliceLayout(2, gl.BlockedLayout([1, 8, 4], [8, 1, 4], [num_warps, 1, 1], [2, 1, 0])))


@gluon.jit
def dequant_tile(words, rope, sbyte, is_rope, F16: gl.constexpr, LEAVE_OUT: gl.constexpr = 0):
    """A gathered tile's words -> (lo, hi) int32 words of 16-bit pairs (f16 with F16, else bf16), the rope in the
    last group's words."""
    if LEAVE_OUT & 2:  # no dequant: f16 1.0 or 0 in every half
        lo = words & 0x3C003C00
        hi = lo
    else:
        if F16:
            lo, hi = dequant_words_f16(words, gl.expand_dims(f16_scale_pairs(sbyte), 2))
            rlo, rhi = bf16x4_to_f16(rope)
        else:
            lo, hi = dequant_words(words, gl.expand_dims(bf16_scale_pairs(sbyte), 2))
            rlo = rope.to(gl.int32)
            rhi = (rope >> 32).to(gl.int32)
        lo = gl.where(is_rope, rlo, lo)
        hi = gl.where(is_rope, rhi, hi)
    return lo, hi


@gluon.jit
def store_tile_rows(k_slot, lo, hi, ROW0: gl.constexpr, ROWS: gl.constexpr, BLOCK_T: gl.constexpr, D: gl.constexpr):
    """(lo, hi) of ROWS tokens into rows ROW0.. of k_slot [BLOCK_T, D] 16-bit (128-byte swizzle), as int32 words.
    The whole slot is viewed as int32 first and the rows sliced from that view: the swizzled layout keeps each
    64-column block of all BLOCK_T rows together, so a row slice is not a smaller tile of the same layout."""
    KW: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32)
    words = k_slot._reinterpret(gl.int32, [BLOCK_T, D // 2], KW)
    if ROWS < BLOCK_T:
        words = words.slice(ROW0, ROWS)
    words.store(gl.reshape(gl.join(lo, hi), [ROWS, D // 2]))


@gluon.jit
def produce_k_tiles(k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens, idx_row, start,
                    end, D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr, DATA_BYTES: gl.constexpr,
                    SCALE_BYTES: gl.constexpr, BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr, NUM_BUFS: gl.constexpr,
                    F16: gl.constexpr, LEAVE_OUT: gl.constexpr = 0):
    """wgmma_ws's producer partition: gather and dequantise each tile of the split into the next free slot of the
    ring k_smem [NUM_BUFS, BLOCK_T, D] (its valid mask into valid_smem), then mark it full. The next tile's gathers
    are in flight while this one waits for its slot and is dequantised: two tiles of words live in registers."""
    D: gl.constexpr = D_NOPE + D_ROPE
    ROWS: gl.constexpr = _rows_layout(gl.num_warps())
    W: gl.constexpr = TILE // 4
    g, g3, w3 = _tile_layouts(BLOCK_T, SCALE_BYTES, TILE)
    cache_w = cache_u8.to(gl.pointer_type(gl.int32), bitcast=True)
    cache_d = cache_u8.to(gl.pointer_type(gl.int64), bitcast=True)
    is_rope = g3 == SCALE_BYTES - 1

    idx = load_idx(idx_row, start, end, BLOCK_T, ROWS)
    words, rope, sbyte, valid = load_tile(cache_w, cache_d, cache_u8, idx, start, end, num_tokens, stride_page,
                                          block_size, g, g3, w3, D_NOPE, DATA_BYTES, SCALE_BYTES, W, BLOCK_T, ROWS,
                                          BS_SHIFT)
    idx = load_idx(idx_row, start + BLOCK_T, end, BLOCK_T, ROWS)
    p_idx = load_idx(idx_row, start + 2 * BLOCK_T, end, BLOCK_T, ROWS)  # the tile after, asked of L2 a tile early
    i = 0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        if LEAVE_OUT & 1:  # no loads: every tile reuses the first tile's bytes
            n_words, n_rope, n_sbyte, n_valid = words, rope, sbyte, valid
        else:
            n_words, n_rope, n_sbyte, n_valid = load_tile(cache_w, cache_d, cache_u8, idx, t0 + BLOCK_T, end,
                                                          num_tokens, stride_page, block_size, g, g3, w3, D_NOPE,
                                                          DATA_BYTES, SCALE_BYTES, W, BLOCK_T, ROWS, BS_SHIFT)
            prefetch_tile_l2(cache_u8, p_idx, t0 + 2 * BLOCK_T, end, num_tokens, stride_page, block_size, DATA_BYTES,
                             SCALE_BYTES, BLOCK_T, ROWS, BS_SHIFT)
            idx = p_idx
            p_idx = load_idx(idx_row, t0 + 3 * BLOCK_T, end, BLOCK_T, ROWS)
        lo, hi = dequant_tile(words, rope, sbyte, is_rope, F16, LEAVE_OUT)
        # a fresh barrier counts as completed in phase 1, so each slot's first wait passes
        mbarrier.wait(empty.index(buf), ((i // NUM_BUFS) & 1) ^ 1)
        store_tile_rows(k_smem.index(buf), lo, hi, 0, BLOCK_T, BLOCK_T, D)
        valid_smem.index(buf).store(valid.to(gl.int8))
        fence_async_shared()  # the generic stores before the consumer's wgmma reads the slot
        gl.thread_barrier()   # every producer warp's part of the tile before the one arrive
        mbarrier.arrive(full.index(buf))
        words, rope, sbyte, valid = n_words, n_rope, n_sbyte, n_valid
        i += 1


@gluon.jit
def produce_k_tiles_in_halves(k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens,
                              idx_row, start, end, D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr,
                              DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr, BLOCK_T: gl.constexpr,
                              BS_SHIFT: gl.constexpr, NUM_BUFS: gl.constexpr, F16: gl.constexpr,
                              LEAVE_OUT: gl.constexpr = 0, HALF_SLOTS: gl.constexpr = False,
                              PF_AHEAD: gl.constexpr = 1):
    """The producer partition of one scope's tokens [start, end): :func:`produce_range_in_halves` from ring slot 0."""
    produce_range_in_halves(k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens, idx_row,
                            start, end, 0, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_T, BS_SHIFT, NUM_BUFS,
                            F16, LEAVE_OUT, HALF_SLOTS, PF_AHEAD)


@gluon.jit
def produce_joined_scopes_in_halves(k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens,
                                    idx_row, start, end, x_cache_u8, x_stride_page, x_block_size, x_num_tokens,
                                    x_idx_row, x_start, x_end, D_NOPE: gl.constexpr, D_ROPE: gl.constexpr,
                                    TILE: gl.constexpr, DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr,
                                    BLOCK_T: gl.constexpr, BS_SHIFT: gl.constexpr, X_BS_SHIFT: gl.constexpr,
                                    NUM_BUFS: gl.constexpr, F16: gl.constexpr, LEAVE_OUT: gl.constexpr = 0,
                                    PF_AHEAD: gl.constexpr = 1, JOINED: gl.constexpr = False):
    """The producer partition of a split over two scopes read as one stream (JOINED): scope 1's tokens [start, end)
    and then the extra scope's [x_start, x_end), each tiled on its own, into one ring whose slot count runs on, so
    the consumers see only a number of tiles. The extra scope's first gathers are issued once scope 1's last tile is
    stored (one tile's latency at the boundary, not overlapped). Without JOINED, scope 1's alone, as
    :func:`produce_k_tiles_in_halves` (the x_ arguments unread)."""
    i = produce_range_in_halves(k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens,
                                idx_row, start, end, 0, D_NOPE, D_ROPE, TILE, DATA_BYTES, SCALE_BYTES, BLOCK_T,
                                BS_SHIFT, NUM_BUFS, F16, LEAVE_OUT, False, PF_AHEAD)
    if JOINED:
        produce_range_in_halves(k_smem, valid_smem, full, empty, x_cache_u8, x_stride_page, x_block_size,
                                x_num_tokens, x_idx_row, x_start, x_end, i, D_NOPE, D_ROPE, TILE, DATA_BYTES,
                                SCALE_BYTES, BLOCK_T, X_BS_SHIFT, NUM_BUFS, F16, LEAVE_OUT, False, PF_AHEAD)


@gluon.jit
def produce_range_in_halves(k_smem, valid_smem, full, empty, cache_u8, stride_page, block_size, num_tokens, idx_row,
                            start, end, i0, D_NOPE: gl.constexpr, D_ROPE: gl.constexpr, TILE: gl.constexpr,
                            DATA_BYTES: gl.constexpr, SCALE_BYTES: gl.constexpr, BLOCK_T: gl.constexpr,
                            BS_SHIFT: gl.constexpr, NUM_BUFS: gl.constexpr, F16: gl.constexpr,
                            LEAVE_OUT: gl.constexpr = 0, HALF_SLOTS: gl.constexpr = False,
                            PF_AHEAD: gl.constexpr = 1):
    """The producer partition in fewer registers (wgmma_ws_h64's 4 warps): two half tiles of words at a time, not
    two tiles. Each half is dequantised and stored on its own (only half a tile of 16-bit words is live at once),
    and once it is stored its registers take the next tile's same half: half a's gathers are in flight while half
    b is dequantised and while the producer waits for its next slot, half b's during that wait and while half a is
    dequantised. The last pass's gathers fall past the split's end, every token masked, so no memory is read.
    HALF_SLOTS: k_smem is [2 * NUM_BUFS, BLOCK_T / 2, D], each half tile a slot of its own (wgmma_ws_bal, whose
    consumers each score one half). PF_AHEAD: L2 is asked for the tile that many ahead of the one whose gathers are
    issued, 1 or 2; the prologue, which gathers the first tile, asks for the PF_AHEAD tiles after it (at 2 the
    indices asked of L2 are kept a pass, na/nb, and become the next tile's gathers). For this producer 3 was
    measured slower than 2, and for rung 13's 3 and 4 slower than its 2. The ring's tiles are counted from i0
    (the tiles an earlier range of the same split filled); returns the count after this range's."""
    D: gl.constexpr = D_NOPE + D_ROPE
    HT: gl.constexpr = BLOCK_T // 2
    ROWS: gl.constexpr = _rows_layout(gl.num_warps())
    W: gl.constexpr = TILE // 4
    g, g3, w3 = _tile_layouts(HT, SCALE_BYTES, TILE)
    cache_w = cache_u8.to(gl.pointer_type(gl.int32), bitcast=True)
    cache_d = cache_u8.to(gl.pointer_type(gl.int64), bitcast=True)
    is_rope = g3 == SCALE_BYTES - 1
    gl.static_assert(PF_AHEAD == 1 or PF_AHEAD == 2, "PF_AHEAD: 1 or 2 (3 measured slower than 2)")
    ia = load_idx(idx_row, start, end, HT, ROWS)
    ib = load_idx(idx_row, start + HT, end, HT, ROWS)
    na = ia  # (unused at PF_AHEAD 1)
    nb = ib
    if PF_AHEAD == 2:  # the next tile's indices, loaded once: asked of L2 here, gathered by the loop's first pass
        na = load_idx(idx_row, start + BLOCK_T, end, HT, ROWS)
        nb = load_idx(idx_row, start + BLOCK_T + HT, end, HT, ROWS)
        prefetch_tile_l2_in_halves(cache_u8, na, nb, start + BLOCK_T, end, num_tokens, stride_page, block_size,
                                   DATA_BYTES, SCALE_BYTES, HT, ROWS, BS_SHIFT)
    pa = load_idx(idx_row, start + PF_AHEAD * BLOCK_T, end, HT, ROWS)  # asked of L2 PF_AHEAD tiles early
    pb = load_idx(idx_row, start + PF_AHEAD * BLOCK_T + HT, end, HT, ROWS)
    # the first tile's gathers, both halves; in the loop each half's registers take the next tile's same half once
    # the half is stored, so a half's gathers are in flight while the other half is dequantised
    wa, ra, sa, va = load_tile(cache_w, cache_d, cache_u8, ia, start, end, num_tokens, stride_page, block_size, g,
                               g3, w3, D_NOPE, DATA_BYTES, SCALE_BYTES, W, HT, ROWS, BS_SHIFT)
    wb, rb, sb, vb = load_tile(cache_w, cache_d, cache_u8, ib, start + HT, end, num_tokens, stride_page, block_size,
                               g, g3, w3, D_NOPE, DATA_BYTES, SCALE_BYTES, W, HT, ROWS, BS_SHIFT)
    prefetch_tile_l2_in_halves(cache_u8, pa, pb, start + PF_AHEAD * BLOCK_T, end, num_tokens, stride_page,
                               block_size, DATA_BYTES, SCALE_BYTES, HT, ROWS, BS_SHIFT)
    ia, ib, na, nb, pa, pb = _advance_indices(idx_row, na, nb, pa, pb, start + (PF_AHEAD + 1) * BLOCK_T, end, HT,
                                              ROWS, PF_AHEAD)
    i = i0
    for t0 in range(start, end, BLOCK_T):
        buf = i % NUM_BUFS
        # a fresh barrier counts as completed in phase 1, so each slot's first wait passes
        mbarrier.wait(empty.index(buf), ((i // NUM_BUFS) & 1) ^ 1)
        _store_half(k_smem, valid_smem, buf, 0, wa, ra, sa, va, is_rope, F16, LEAVE_OUT, HALF_SLOTS, HT, D)
        if not (LEAVE_OUT & 1):  # (no loads: every tile reuses the first tile's bytes)
            # past the split's end every token is masked: no memory is read
            wa, ra, sa, va = load_tile(cache_w, cache_d, cache_u8, ia, t0 + BLOCK_T, end, num_tokens, stride_page,
                                       block_size, g, g3, w3, D_NOPE, DATA_BYTES, SCALE_BYTES, W, HT, ROWS, BS_SHIFT)
        _store_half(k_smem, valid_smem, buf, 1, wb, rb, sb, vb, is_rope, F16, LEAVE_OUT, HALF_SLOTS, HT, D)
        if not (LEAVE_OUT & 1):
            wb, rb, sb, vb = load_tile(cache_w, cache_d, cache_u8, ib, t0 + BLOCK_T + HT, end, num_tokens,
                                       stride_page, block_size, g, g3, w3, D_NOPE, DATA_BYTES, SCALE_BYTES, W, HT,
                                       ROWS, BS_SHIFT)
            prefetch_tile_l2_in_halves(cache_u8, pa, pb, t0 + (PF_AHEAD + 1) * BLOCK_T, end, num_tokens,
                                       stride_page, block_size, DATA_BYTES, SCALE_BYTES, HT, ROWS, BS_SHIFT)
            ia, ib, na, nb, pa, pb = _advance_indices(idx_row, na, nb, pa, pb, t0 + (PF_AHEAD + 2) * BLOCK_T, end,
                                                      HT, ROWS, PF_AHEAD)
        fence_async_shared()  # the generic stores before the consumers' wgmma read the slot
        gl.thread_barrier()   # every producer warp's part of the tile before the one arrive
        mbarrier.arrive(full.index(buf))
        i += 1
    return i


@gluon.jit
def _store_half(k_smem, valid_smem, buf, HALF: gl.constexpr, words, rope, sbyte, valid, is_rope, F16: gl.constexpr,
                LEAVE_OUT: gl.constexpr, HALF_SLOTS: gl.constexpr, HT: gl.constexpr, D: gl.constexpr):
    """Half HALF (0 or 1) of slot buf's tile: its gathered words dequantised into its rows of the slot (HALF_SLOTS:
    into a half slot of its own) and its valid bytes beside them."""
    lo, hi = dequant_tile(words, rope, sbyte, is_rope, F16, LEAVE_OUT)
    if HALF_SLOTS:
        store_tile_rows(k_smem.index(2 * buf + HALF), lo, hi, 0, HT, HT, D)
    else:
        store_tile_rows(k_smem.index(buf), lo, hi, HALF * HT, HT, 2 * HT, D)
    valid_smem.index(buf).slice(HALF * HT, HT).store(valid.to(gl.int8))


@gluon.jit
def _advance_indices(idx_row, na, nb, pa, pb, t_next, end, HT: gl.constexpr, ROWS: gl.constexpr,
                     PF_AHEAD: gl.constexpr):
    """The producer's index tiles a pass on: (ia, ib) the next gathers', (na, nb) the queue's (PF_AHEAD 2: the
    indices asked of L2 a pass ago are the next tile's gathers'), (pa, pb) the tile at t_next, loaded now for the
    next L2 prefetch."""
    if PF_AHEAD == 1:
        ia = pa
        ib = pb
    else:
        ia = na
        ib = nb
        na = pa
        nb = pb
    return ia, ib, na, nb, load_idx(idx_row, t_next, end, HT, ROWS), load_idx(idx_row, t_next + HT, end, HT, ROWS)


# ----------------------------------------------------------------------------- q, softmax, epilogue

@gluon.jit
def launch_dependents():
    """griddepcontrol.launch_dependents (sm_90 and up): a kernel launched as this grid's programmatic dependent (the
    combine, decode.combine_pdl) may be scheduled once every block has passed here; it still waits for the whole
    grid (griddepcontrol.wait) before it reads what this grid wrote. No effect on an ordinary launch."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def pow2(e):
    """int32 e in [-126, 127] -> fp32 2**e, exactly."""
    return ((e + 127) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def load_q(q_row, stride_qh, pid_h, H, BLOCK_H: gl.constexpr, D: gl.constexpr, QL: gl.constexpr):
    """The block's heads of one query: [BLOCK_H, D] bf16 in layout QL, zero past the last head."""
    qh = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, QL))
    qd = gl.arange(0, D, layout=gl.SliceLayout(0, QL))
    return gl.load(q_row + qh[:, None] * stride_qh + qd[None, :], mask=(qh < H)[:, None], other=0.0)


@gluon.jit
def scale_q_per_head(q):
    """q [BLOCK_H, D] bf16 -> (q * 2**-E fp32, E int32 [BLOCK_H]): E puts each head's largest |q| in
    [2**Q_TOP, 2**(Q_TOP+1)), so q fits f16 wherever bf16 puts it (a power of two: exact in bf16 too). Heads of
    zeros, subnormals or non-finite values get E clamped to +-Q_EXP_CLAMP."""
    qf = q.to(gl.float32)
    e = head_exponent(gl.max(gl.abs(qf), axis=1))
    return qf * gl.expand_dims(pow2(-e), 1), e


@gluon.constexpr_function
def _q_piece_layout(QC, RERUN):
    """[QC, 64] bf16 in 4 warps: one 16-byte load a thread. The bf16 rerun's q takes a layout of its own, so
    LLVM cannot merge the two passes' q addresses and keep them alive through the f16 pass (the lab's spills)."""
    if RERUN:
        return gl.BlockedLayout([1, 8], [8, 4], [QC // 8, 4 // (QC // 8)], [1, 0])
    return gl.BlockedLayout([1, 8], [4, 8], [QC // 4, 4 // (QC // 4)], [1, 0])


@gluon.jit
def _load_q_pieces(q_row, head_offs, cols, mask, CB: gl.constexpr):
    """One chunk of heads (their row offsets) as CB column blocks of 64: a tuple of [QC, 64] bf16, every load
    issued together."""
    ptrs = q_row + head_offs[:, None] + cols[None, :]
    pieces = ()
    for cb in gl.static_range(CB):
        pieces = pieces + (gl.load(ptrs + cb * 64, mask=mask, other=0.0),)
    return pieces


@gluon.jit
def stage_q(q_smem, exp_smem, q_row, stride_qh, pid_h, H, BLOCK_H: gl.constexpr, D: gl.constexpr,
            F16: gl.constexpr):
    """q [BLOCK_H, D] bf16 of one query into q_smem (an NVMMA [BLOCK_H, D] tile, 128-byte swizzle), zero past the
    last head, 16 heads a step of a loop that is not unrolled; with F16 each head scaled as
    :func:`scale_q_per_head` (the same exponent: the maximum is exact in any order), its exponent into exp_smem
    ([BLOCK_H] fp32) as a float. Unrolled, this was ~1,800 SASS instructions run once a warp and bound by
    instruction fetch (ncu source counters, docs/decisions.md); looped, ~350 run four times. Each step issues the
    next chunk's loads before its own work.

    A 128-byte swizzled [BLOCK_H, D] tile is D/64 column blocks of [BLOCK_H, 64], and 16 rows of one are a
    [16, 64] tile of the same swizzle (it repeats every 8 rows): viewed as [D/64 * BLOCK_H/16, 16, 64], chunk c's
    column block cb is index cb * BLOCK_H/16 + c, a runtime index (the same stores as static slices: lab).
    Triton's barrier pass cannot tell the runtime-indexed stores apart and puts a warpgroup barrier between them."""
    KT: gl.constexpr = q_smem.dtype
    QC: gl.constexpr = 16
    NC: gl.constexpr = BLOCK_H // QC
    CB: gl.constexpr = D // 64
    PL: gl.constexpr = _q_piece_layout(QC, not F16)
    pieces_smem = q_smem._reinterpret(KT, [CB * NC, QC, 64],
                                      gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16))
    exps = exp_smem._reinterpret(gl.float32, [NC, QC], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    rows = gl.arange(0, QC, layout=gl.SliceLayout(1, PL))
    cols = gl.arange(0, 64, layout=gl.SliceLayout(0, PL))
    offs = rows * stride_qh
    head = pid_h * BLOCK_H  # the chunk's first head
    nxt = _load_q_pieces(q_row + head * stride_qh, offs, cols, (rows < H - head)[:, None], CB)
    for c in range(0, NC):
        cur = nxt
        head += QC
        live = (rows < H - head) & (c + 1 < NC)
        nxt = _load_q_pieces(q_row + head * stride_qh, offs, cols, live[:, None], CB)
        if F16:
            a = gl.abs(cur[0].to(gl.float32))
            for cb in gl.static_range(1, CB):
                a = gl.maximum(a, gl.abs(cur[cb].to(gl.float32)))
            e = head_exponent(gl.max(a, axis=1))
            mult = gl.expand_dims(pow2(-e), 1)
            exps.index(c).store(e.to(gl.float32))
            for cb in gl.static_range(CB):
                pieces_smem.index(cb * NC + c).store((cur[cb].to(gl.float32) * mult).to(KT))
        else:
            for cb in gl.static_range(CB):
                pieces_smem.index(cb * NC + c).store(cur[cb].to(KT))


@gluon.jit
def head_exponent(amax):
    """Each head's largest |q| (fp32, any shape) -> the E of :func:`scale_q_per_head` (int32)."""
    e = ((amax.to(gl.int32, bitcast=True) >> 23) & 0xFF) - 127 - Q_TOP
    return gl.minimum(gl.maximum(e, -Q_EXP_CLAMP), Q_EXP_CLAMP)


@gluon.jit
def qk_scale(sm_scale_log2, q_exp, F16: gl.constexpr):
    """The per-head factor that turns an MMA score into log2 units: sm_scale * log2(e) * 2**E, and 2**-7 more
    for the f16 K tile (it holds K * 2**F16_K_SHIFT)."""
    if F16:
        return sm_scale_log2 * pow2(q_exp - _K_SHIFT)
    return sm_scale_log2 * pow2(q_exp)


@gluon.jit
def softmax_step(s, v, m_i, scale, INF_TO_NAN: gl.constexpr, SKIP: gl.constexpr, AXIS: gl.constexpr = 0):
    """_online_softmax, or with SKIP (LEAVE_OUT's softmax bit) the scores as P and no rescaling."""
    if SKIP:  # (alpha 1 built directly: m_i * 0 + 1 is NaN at the first tile's -inf max)
        return s, gl.full_like(m_i, 1.0), m_i
    return _online_softmax(s, v, m_i, scale, INF_TO_NAN, AXIS)


@gluon.jit
def _online_softmax(s, v, m_i, scale, INF_TO_NAN: gl.constexpr, AXIS: gl.constexpr = 0):
    """One tile's step of the base-2 online softmax over the scores, tokens on axis AXIS (S^T [BLOCK_T, BLOCK_H]
    with AXIS 0, S [BLOCK_H, BLOCK_T] with AXIS 1; any layout): masked scores in log2 units (scale [BLOCK_H]:
    qk_scale), the new running max, P and the factor alpha that rescales what came before. wgmma_ws (rung 13) runs
    the same step with its maxima met through shared memory (wgmma_ws._softmax_step_by_warps): a fix here belongs
    there too."""
    if INF_TO_NAN:
        # f16 operands: q is scaled and K in the window stays below 2**16, so the fp32 scores cannot overflow: an
        # infinite score comes from an f16 inf in K (a rope of 512 or more). -inf would drop its token without a
        # trace; NaN makes the split's row sums NaN (+inf already does, through inf - inf in exp2), and so sends
        # it to the bf16 pass (not_finite)
        s = gl.where(s == float("-inf"), float("nan"), s)
    HEADS: gl.constexpr = 1 - AXIS
    s = gl.where(gl.expand_dims(v, HEADS), s * gl.expand_dims(scale, AXIS), float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, AXIS))
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # no (-inf) - (-inf)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - gl.expand_dims(m_use, AXIS))
    return p, alpha, m_new


@gluon.jit
def not_finite(l_i):
    """Whether any head's row sum in the block is NaN or infinite (a full reduction). With f16 operands, a scale
    byte outside the window (NaN in K), a rope of 512 or more (f16 inf in K: an infinite score, or NaN where q is
    0) and NaN in the data all make some row sum NaN. (A check of the accumulator too made ptxas serialise every
    wgmma of the kernel: C7515, sm_90 lab.)"""
    return gl.reduce_or((l_i != l_i) | (gl.abs(l_i) == float("inf")), 0)


@gluon.jit
def split_lse2(m_i, l_i):
    """(live, the split's base-2 LSE m + log2(l)) per head; a NaN sum is live (its LSE NaN), never dropped by the
    combine as an empty split."""
    live = l_i != 0
    return live, gl.where(live, m_i + gl.log2(l_i), float("-inf"))


@gluon.jit
def direct_factor(lse2, live, heads, H, sink_ptr, stride_sink, HAS_SINK: gl.constexpr):
    """A call of one split with no combine (DIRECT): (lse, f) per head, what the combine would make of that one
    split, in its own operations: lse (natural log; +inf for an empty row) and the factor its normalised output is
    multiplied by (the sink's 1/(1+exp(sink - lse)) with HAS_SINK, else 1; 0 for an empty row)."""
    lse = gl.where(live, lse2 * 0.6931471805599453, float("inf"))
    if HAS_SINK:
        sink = gl.load(sink_ptr + heads * stride_sink, mask=heads < H, other=0.0)
        f = gl.where(live, 1.0 / (1.0 + gl.exp(sink - lse)), 0.0)
    else:
        f = gl.where(live, 1.0, 0.0)
    return lse, f


@gluon.jit
def store_lse(lse2, live, pid_q, heads, H, S_Q, part_lse_ptr, slot, sink_ptr, stride_sink, HAS_SINK: gl.constexpr,
              DIRECT: gl.constexpr, KEEP: gl.constexpr = False):
    """The split's base-2 LSE into its partial slot (``slot`` [BLOCK_H]); DIRECT: the call's lse [b, h, s_q] (natural
    log, part_lse_ptr is lse) instead. Returns direct_factor's factor with DIRECT (else lse2, for no one). KEEP: as
    :func:`store_half`'s."""
    if DIRECT:
        lse, f = direct_factor(lse2, live, heads, H, sink_ptr, stride_sink, HAS_SINK)
        gl.store(part_lse_ptr + ((pid_q // S_Q) * H + heads) * S_Q + pid_q % S_Q, lse, mask=heads < H)
        return f
    else:
        gl.store(part_lse_ptr + slot, lse2, mask=heads < H, eviction_policy="evict_last" if KEEP else "")
        return lse2


@gluon.jit
def store_partial(m_i, l_i, acc, out_mult, part_out_ptr, part_lse_ptr, pid_q, pid_h, split, split_offset, s_total,
                  H, S_Q, sink_ptr, stride_sink, BLOCK_H: gl.constexpr, D: gl.constexpr, HAS_SINK: gl.constexpr,
                  DIRECT: gl.constexpr):
    """The epilogue: the split's normalised output acc / l * out_mult (acc: O^T [D, BLOCK_H] fp32) and its
    base-2 LSE m + log2(l) into the partial buffers. DIRECT (a call of one split): the call's out (bf16, times the
    sink's factor; part_out_ptr is out) and lse instead, as the combine would write them."""
    NW: gl.constexpr = gl.num_warps()
    OL: gl.constexpr = acc.type.layout
    OUT: gl.constexpr = gl.BlockedLayout([4, 1], [32, 1], [1, NW], [0, 1])  # [D, BLOCK_H], coalesced along d
    live, lse2 = split_lse2(m_i, l_i)
    inv_l = gl.where(live, out_mult / l_i, 0.0)
    heads = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=l_i.type.layout)
    slot = (pid_q * H + heads) * s_total + split_offset + split  # [BLOCK_H]
    f = store_lse(lse2, live, pid_q, heads, H, S_Q, part_lse_ptr, slot, sink_ptr, stride_sink, HAS_SINK, DIRECT)
    out = gl.convert_layout(acc * gl.expand_dims(gl.convert_layout(inv_l, gl.SliceLayout(0, OL)), 0), OUT)
    oh = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(0, OUT))
    od = gl.arange(0, D, layout=gl.SliceLayout(1, OUT))
    oslot = (pid_q * H + oh) * s_total + split_offset + split
    live_o = gl.convert_layout(live, gl.SliceLayout(0, OUT))
    ptrs = part_out_ptr + gl.expand_dims(oslot.to(gl.int64) * D, 0) + gl.expand_dims(od, 1)
    if DIRECT:  # every row written; an empty one times the factor 0: zeros, or NaN where acc is NaN (as the reference)
        out = out * gl.expand_dims(gl.convert_layout(f, gl.SliceLayout(0, OUT)), 0)
        gl.store(ptrs, out.to(gl.bfloat16), mask=gl.expand_dims(oh < H, 0))
    else:  # an empty split writes only its -inf LSE; the combine never reads its out
        gl.store(ptrs, out, mask=gl.expand_dims((oh < H) & live_o, 0))


@gluon.jit
def _direct_row_factor(m_i, l_o, live, heads, H, sink_ptr, stride_sink, HAS_SINK: gl.constexpr):
    """:func:`direct_factor` of a DIRECT half's rows in its accumulator's row layout (l_o: the row sums there, live
    where they are not 0): the factor each row of the normalised half is multiplied by."""
    _, lse2 = split_lse2(gl.convert_layout(m_i, l_o.type.layout), l_o)
    _, f = direct_factor(lse2, live, heads, H, sink_ptr, stride_sink, HAS_SINK)
    return f


@gluon.jit
def _direct_stage(slot, BLOCK_H: gl.constexpr, D: gl.constexpr):
    gl.static_assert(slot.shape[0] == BLOCK_H and slot.shape[1] == D, "the stage is a [BLOCK_H, D] 16-bit slot")
    SB: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16)
    return slot._reinterpret(gl.bfloat16, [2 * BLOCK_H, D // 2], SB).slice(0, BLOCK_H)  # [BLOCK_H, D/2] of the slot


@gluon.jit
def stage_half_direct(acc, m_i, l_i, out_mult, pid_h, H, sink_ptr, stride_sink, slot, BLOCK_H: gl.constexpr,
                      D: gl.constexpr, HAS_SINK: gl.constexpr):
    """A DIRECT half, scaled as store_half scales it (the scale and the sink's factor multiplied first: with a sink
    an output can differ from store_half's by a bf16 ulp), into ``slot``'s stage; :func:`write_staged_half` writes it
    out. From the wgmma layout a thread holds two adjacent bf16 every 8 columns: store_half's 64 stores of 4 bytes a
    thread a half took 6 us more a call than 16-byte stores of the staged rows at b64 h128
    (data/explore/explore_h100_20261206-1452_staged_out.csv). The PV warpgroup only stages its half: reading it back
    and writing it out in that partition made the producer's loop spill (4 LDL and 4 STL a tile, 11 and 11 two
    tiles ahead; sm_90 lab)."""
    OL: gl.constexpr = acc.type.layout
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, OL))
    live = l_o != 0
    heads_o = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, OL))
    f = _direct_row_factor(m_i, l_o, live, heads_o, H, sink_ptr, stride_sink, HAS_SINK)
    out = acc * gl.expand_dims(gl.where(live, out_mult / l_o, 0.0) * f, 1)
    _direct_stage(slot, BLOCK_H, D).store(out.to(gl.bfloat16))


@gluon.jit
def write_staged_half(out_ptr, slot0, pid_h, H, s_total, slot, BLOCK_H: gl.constexpr, D: gl.constexpr,
                      HALF: gl.constexpr):
    """A staged half read back a row a warp and written to out with 16-byte stores."""
    DH: gl.constexpr = D // 2
    RL: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])  # 16 B a thread, a row a warp
    vals = _direct_stage(slot, BLOCK_H, D).load(RL)
    heads = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, RL))
    cols = HALF * DH + gl.arange(0, DH, layout=gl.SliceLayout(0, RL))
    rows = (slot0 + heads.to(gl.int64) * s_total) * D
    gl.store(out_ptr + gl.expand_dims(rows, 1) + gl.expand_dims(cols, 0), vals, mask=gl.expand_dims(heads < H, 1))


@gluon.jit
def store_half(acc, m_i, l_i, out_mult, part_out_ptr, slot0, pid_h, H, s_total, sink_ptr, stride_sink,
               BLOCK_H: gl.constexpr, D: gl.constexpr, HALF: gl.constexpr, HAS_SINK: gl.constexpr,
               DIRECT: gl.constexpr, KEEP: gl.constexpr = False):
    """acc / l * out_mult (acc: O[:, HALF*D/2 : (HALF+1)*D/2] of the head group) into the partial buffer, from the
    wgmma layout (each thread's two adjacent columns: whole 32-byte sectors). A split with no valid token (l 0)
    writes nothing: the combine never reads it. DIRECT (a call of one split; m_i is read only then): into the call's
    out (bf16, times the sink's factor; part_out_ptr is out), every row, as the combine would write it.

    KEEP: the partial rows are stored ``evict_last``, so L2 keeps them over the gathers still streaming through it
    until the combine reads them (``evict_first``, which hands the lines back). Rung 15's calls of two and four splits
    at one head group took 0.96-0.97x the time with it (b64 and b32 h64 topk2048, H100; b16 h128 topk1024, four
    splits at two groups, 1.00x), which fits a combine that read some of its rows from DRAM:
    data/explore/explore_h100_20261207-1238_l2_policy.csv, docs/decisions.md."""
    DH: gl.constexpr = D // 2
    OL: gl.constexpr = acc.type.layout
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, OL))
    live = l_o != 0
    out = acc * gl.expand_dims(gl.where(live, out_mult / l_o, 0.0), 1)
    heads = pid_h * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, OL))
    cols = HALF * DH + gl.arange(0, DH, layout=gl.SliceLayout(0, OL))
    rows = (slot0 + heads.to(gl.int64) * s_total) * D
    ptrs = part_out_ptr + gl.expand_dims(rows, 1) + gl.expand_dims(cols, 0)
    if DIRECT:
        f = _direct_row_factor(m_i, l_o, live, heads, H, sink_ptr, stride_sink, HAS_SINK)
        gl.store(ptrs, (out * gl.expand_dims(f, 1)).to(gl.bfloat16), mask=gl.expand_dims(heads < H, 1))
    else:
        gl.store(ptrs, out, mask=gl.expand_dims((heads < H) & live, 1), eviction_policy="evict_last" if KEEP else "")
