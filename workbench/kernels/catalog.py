"""The built-in kernels, registered once each. A new variant adds one module and one entry here.

Only the kernels that serve a purpose today are registered: the per-head "before" (simt), the seed (mma), the
portable kernels off Hopper (tile512, and portable_ws where warp specialisation runs), the fastest bf16 Hopper rung
(wgmma_xchg), the f16 rungs "auto" runs (registry.auto_kernel), the two gather probes and the reference. Every rung
that was ever registered, with the commit that still runs it and the tables that hold its measured rows, is in
data/rungs.csv.
"""
from __future__ import annotations

from ..kernel_spec import KernelSpec, register
from . import gather, gluon_common, mma, simt, tile512, wgmma, wgmma_ws
from .configs import SimtConfig, TiledConfig
from .common import layout_constexprs

# runtime arguments describing one KV scope (common.scope_args); pointers are 16-byte aligned like torch allocations
SCOPE_SIGNATURE = dict(
    cache_f8="*fp8e4nv", cache_u8="*u8", cache_bf16="*bf16", stride_page="i64", block_size="i32", num_tokens="i32",
    idx_ptr="*i32", stride_ib="i32", stride_is="i32", topk_len_ptr="*i32", stride_tl="i32")
Q_SIGNATURE = dict(q_ptr="*bf16", stride_qb="i32", stride_qs="i32", stride_qh="i32")
# runtime arguments of every split (partial) kernel
SPLIT_SIGNATURE = dict(
    **Q_SIGNATURE, **SCOPE_SIGNATURE, part_out_ptr="*fp32", part_lse_ptr="*fp32", sm_scale_log2="fp32",
    H="i32", S_Q="i32", TOPK="i32", split_offset="i32", tokens_per_split="i32", s_total="i32",
    TOKENS_BUCKET="i32", QUERIES_BUCKET="i32")
# the Gluon kernels' runtime arguments (common.split_args): the cache as bytes alone, no autotuner's keys. Their page
# stride is a multiple of 16 bytes at every launch (256 tokens * 584 B), and their gathers address through it with
# no multiple_of hint: typed plainly, the lab would compile narrower loads than run
GLUON_SIGNATURE = {**{k: t for k, t in SPLIT_SIGNATURE.items()
                      if k not in ("cache_f8", "cache_bf16", "TOKENS_BUCKET", "QUERIES_BUCKET")},
                   "stride_page": "i64:16", "sink_ptr": "*fp32", "stride_sink": "i32"}
# wgmma's kernel also takes the extra scope (x_), read when it runs both scopes in one launch (KernelSpec.two_scopes)
X_SCOPE_SIGNATURE = {**{f"x_{k}": GLUON_SIGNATURE[k] for k in SCOPE_SIGNATURE if k in GLUON_SIGNATURE},
                     "X_TOPK": "i32"}
WGMMA_SIGNATURE = {**GLUON_SIGNATURE, **X_SCOPE_SIGNATURE, "x_tokens_per_split": "i32", "splits_1": "i32",
                   "bs_shift": "i32", "x_bs_shift": "i32"}
# a kernel that reads the extra scope after scope 1's tokens in each split (KernelSpec.joined_scopes)
JOINED_SIGNATURE = {**GLUON_SIGNATURE, **X_SCOPE_SIGNATURE}
# runtime arguments of the fused SIMT baseline: both scopes (the extra one's prefixed x_), the sink, out and lse
SIMT_SIGNATURE = dict(
    **Q_SIGNATURE, **{f"{p}{k}": t for p in ("", "x_") for k, t in SCOPE_SIGNATURE.items()}, TOPK="i32",
    X_TOPK="i32", sink_ptr="*fp32", stride_sink="i32", out_ptr="*bf16", lse_ptr="*fp32", sm_scale_log2="fp32",
    H="i32", S_Q="i32", TOPK_BUCKET="i32")

register(KernelSpec(
    name="reference", kind="reference", summary="fp32 torch: gather, dequantise, softmax, PV"))

register(KernelSpec(
    name="simt", kind="fused", summary="per-head SIMT baseline: one program per (query, head), fp32, tl.sum",
    launch=simt.launch_simt, jit=simt.simt_kernel, config_cls=SimtConfig, allowed=simt.ALLOWED,
    check_configs=({"BLOCK_T": 32, "num_warps": 4}, {"BLOCK_T": 16, "num_warps": 2}, {"BLOCK_T": 64, "num_warps": 8}),
    config_space=tuple(simt.CONFIG_SPACE),
    shared_model=lambda c: simt.estimate_simt_shared_bytes(c.BLOCK_T, c.num_warps),
    lab_signature=SIMT_SIGNATURE,
    lab_constexprs=lambda c: dict(HAS_TOPK_LEN=False, HAS_EXTRA=False, X_HAS_TOPK_LEN=False, HAS_SINK=True,
                                  RNE_BY_HAND=False, **layout_constexprs(), **c.meta())))

register(KernelSpec(
    name="mma", kind="split", rung=1,
    summary="the seed: BLOCK_H heads share each gathered tile through tl.dot; nope padded to 512 + a rope dot",
    prediction="(the seed: measured as found)",
    launch=mma.launch_mma_partial, jit=mma.mma_partial_kernel, config_cls=TiledConfig, allowed=mma.ALLOWED,
    check_configs=tuple(dict(BLOCK_H=bh, BLOCK_T=bt, num_warps=w, num_stages=st, PREFETCH=pf)
                        for bh, bt, w, st, pf in ((64, 32, 8, 1, 0), (16, 16, 4, 1, 1), (32, 32, 8, 2, 0),
                                                  (64, 16, 8, 1, 1), (16, 64, 4, 1, 0))),
    config_space=tuple(TiledConfig.from_triton(c) for c in mma.MMA_CONFIG_SPACE),
    shared_model=lambda c: mma.estimate_mma_shared_bytes(c.BLOCK_H, c.BLOCK_T, c.num_warps, c.num_stages,
                                                         c.PREFETCH if c.PREFETCH is not None else 1),
    lab_signature=SPLIT_SIGNATURE,
    lab_constexprs=lambda c: dict(HAS_TOPK_LEN=False, DOT_FP32=False, **layout_constexprs(), **c.meta())))


register(KernelSpec(
    name="tile512", kind="split", rung=2,
    summary="one [BLOCK_T, 512] tile: rope in the nope padding slot, one QK and one PV dot",
    prediction="11% fewer dequant/MMA columns and one dot instead of two: 5-10% at b64; registers stay ~255 "
               "(q's mma.sync operand is 128 of them), so occupancy should not move",
    launch=tile512.launch_tile512_partial, jit=tile512.tile512_partial_kernel, config_cls=TiledConfig,
    allowed=tile512.ALLOWED, config_space=tuple(tile512.CONFIG_SPACE), lab_signature=SPLIT_SIGNATURE,
    shared_model=tile512.estimate_shared_bytes,
    check_configs=tuple(dict(BLOCK_H=bh, BLOCK_T=bt, num_warps=w, num_stages=st)
                        for bh, bt, w, st in ((64, 32, 8, 1), (16, 16, 4, 1), (32, 32, 8, 3), (64, 16, 8, 3),
                                              (16, 64, 4, 1))),
    lab_constexprs=lambda c: dict(HAS_TOPK_LEN=False, DOT_FP32=False, **layout_constexprs(keys=tile512.LAYOUT_KEYS),
                                  **c.meta())))


def _gluon_lab_constexprs(fixed, **more):
    """Every constexpr of a lab compile of a Gluon rung: pages of 256 tokens (BS_SHIFT=8), as every benchmark shape
    has them, and the rung's switches (and ``more``: a kernel's own, at their values for one scope)."""
    return lambda c: dict(HAS_TOPK_LEN=False, BS_SHIFT=8, **layout_constexprs(keys=gluon_common.LAYOUT_KEYS), **fixed,
                          **more, **c.meta())


def _wgmma(name, rung, summary, prediction, *, allowed=wgmma.ALLOWED, split_waves=1, maxnreg=None, **fixed):
    """A rung of the Gluon kernel of ``wgmma``: its constexpr switches (``fixed``: K_BUFFERS, F16), head groups and
    register cap. Every rung lets its combine launch as a programmatic dependent (pdl; see decode.combine_pdl)."""
    checks = tuple({"BLOCK_H": bh, "BLOCK_T": 64, "num_warps": 8} for bh in (64, 16, 32) if bh in allowed["BLOCK_H"])
    options = {"maxnreg": maxnreg} if maxnreg else {}
    return register(KernelSpec(
        name=name, kind="split", rung=rung, interpretable=False, split_waves=split_waves, summary=summary, pdl=True,
        direct=True, two_scopes=True,
        # whole 64-token tiles: b1 h64 topk512, 18.3 us at 16-token splits, 14.5 at 64 (rung 6, the 4-lane build)
        split_granule=64,
        prediction=prediction, jit=wgmma.wgmma_partial_kernel, config_cls=TiledConfig, allowed=allowed,
        launch=lambda **kw: wgmma.launch_wgmma_partial(**kw, allowed=allowed, name=name, **options, **fixed),
        config_space=tuple(c for c in wgmma.CONFIG_SPACE if c.BLOCK_H in allowed["BLOCK_H"]), fixed_meta=fixed,
        shared_model=lambda c: wgmma.estimate_shared_bytes(c, **fixed), check_configs=checks,
        compile_options=options, lab_signature=WGMMA_SIGNATURE,
        lab_constexprs=_gluon_lab_constexprs(fixed, TWO_SCOPES=False, X_HAS_TOPK_LEN=False)))


# split_waves=1: one 150-205 KB block per SM, so one wave, and half the fp32 partials the combine reads
_wgmma("wgmma_xchg", 10, "Gluon, sm_90, bf16 operands: K and q in shared memory for wgmma (tokens as M), the next "
       "tile's loads in flight, async PV overlapping the next dequant, 4 lanes a token, the rope in the words' layout, "
       "a softmax with whole heads per warp, and the valid mask and rescale factors moved through shared memory at "
       "the tile's existing barriers instead of by layout conversions",
       "each conversion (valid mask into the softmax layout, alpha into the accumulator's) brought a barrier of "
       "its own. Written to shared memory before the barriers the tile already has and read after them: lab "
       "barriers per tile 8 -> 4 at h16 and h64, instructions unchanged. Expect a few % where barrier stalls "
       "lead (h16, one block of 8 warps per SM), nothing at h64",
       K_BUFFERS=2, F16=0)
_wgmma("wgmma_f16", 11, "wgmma_xchg with K, q and P in f16: the hardware e4m3 -> f16 pair convert and one f16 "
       "multiply by the scale replace the bit-built bf16 dequant; q scaled per head by a power of two; a split "
       "with a scale byte outside 105..127 or a rope value of 512 or more runs again in bf16 (exact everywhere)",
       "ncu (wgmma_xchg, h16): CPI 7.0 at 8 warps per SM, and ~420 of the loop's 720 instructions are the "
       "dequant (PRMT, SHF, LOP3 and two HMUL2 a pair). Lab (sm_90) loop body: h16 720 -> 568 instructions, "
       "registers 132 -> 128 (lab table); h64 944 -> 793. The loop is latency-bound, not issue-bound, so expect "
       "less than the 22%: 5-10% at h16 and h64",
       K_BUFFERS=2, F16=1)
_wgmma("wgmma_f16_2cta", 12, "wgmma_f16 at 16 heads, two blocks per SM: one K buffer and a 128-register cap",
       "at 16 heads wgmma_f16 needs 128 registers (lab) but 154 KB: one block of 8 warps per SM. With one K "
       "buffer (88,192 B, lab) two blocks fit, 16 warps, at 128 registers (lab: no spills). Two blocks lost to "
       "one at rung 10 (56.4 vs 55.2 us, exploratory run): the bf16 dequant kept the ALUs busy. With a fifth "
       "fewer instructions a tile, expect h16 at b64 3-5% below wgmma_f16 (an exploratory run before this "
       "entry: 53.1 vs 55.6 us)",
       allowed=dict(wgmma.ALLOWED, BLOCK_H=(16,)), split_waves=2, maxnreg=128, K_BUFFERS=1, F16=1)


def _wgmma_ws(name, rung, summary, prediction, **fixed):
    """A rung of the warp-specialised Gluon kernel (wgmma_ws): its constexpr switches (``fixed``: NUM_BUFS,
    PRODUCER_WARPS, PRODUCER_REGS). One block per SM, so split waves 1, and a register cap that spreads an SM's
    registers over the block's warps (wgmma_ws.register_cap)."""
    allowed = wgmma_ws.ALLOWED
    checks = ({"BLOCK_H": 16, "BLOCK_T": 64, "num_warps": 4},)
    options = {"maxnreg": wgmma_ws.register_cap(4, fixed["PRODUCER_WARPS"])}
    return register(KernelSpec(
        name=name, kind="split", rung=rung, interpretable=False, split_waves=1, summary=summary, pdl=True,
        direct=True, split_granule=64, prediction=prediction, jit=wgmma_ws.ws_partial_kernel, config_cls=TiledConfig,
        allowed=allowed, launch=lambda **kw: wgmma_ws.launch_ws_partial(**kw, allowed=allowed, name=name, **options,
                                                                        **fixed),
        config_space=tuple(wgmma_ws.CONFIG_SPACE),
        fixed_meta=fixed,
        shared_model=lambda c: wgmma_ws.estimate_shared_bytes(c, **fixed), check_configs=checks,
        compile_options=options, lab_signature=GLUON_SIGNATURE, lab_constexprs=_gluon_lab_constexprs(fixed)))


_wgmma_ws("wgmma_ws", 13, "wgmma_f16 warp-specialised at 16 heads: a producer partition (8 warps) gathers and "
          "dequantises into a ring of 3 K tiles, a consumer warpgroup runs QK, softmax and PV; they meet at mbarriers",
          "cost isolation of wgmma_f16_2cta at b64 h16 (isolate sweep, 2310): 52.1 us whole, 37.0 without the "
          "next-tile gathers, 40.1 with only the gathers, K stores and PV, floor 32.6: the loads and the math "
          "barely overlap. With the gathers in warps of their own, expect b64 h16 at 36-42 us (one 12-warp block "
          "per SM, split waves 1)",
          NUM_BUFS=3, PRODUCER_WARPS=8, PRODUCER_REGS=152)

def _block(module, launch, jit, *, name, rung, summary, prediction, split_waves=1, split_granule=64,
           split_block_h=None, allowed=None, config_space=None, maxnreg=None, direct=False, switches=None,
           joined_scopes=False):
    """A rung of a Gluon kernel with a module of its own, in one block per program: its head group, register cap
    from the module (ALLOWED, CONFIG_SPACE, MAXNREG, estimate_shared_bytes) unless given, its switches from
    module.SWITCHES unless given, its launcher (module.launch_*) called with the rung's name, configs, cap and
    switches; direct: its launcher writes a call of one split itself (KernelSpec.direct); split_block_h: the heads
    its split plan counts a program as (KernelSpec.split_block_h); joined_scopes: its launcher reads an extra scope
    after scope 1's tokens in each split (KernelSpec.joined_scopes)."""
    allowed = module.ALLOWED if allowed is None else allowed  # (a value given, even empty, is used as given)
    config_space = tuple(module.CONFIG_SPACE if config_space is None else config_space)
    maxnreg = module.MAXNREG if maxnreg is None else maxnreg
    switches = dict(module.SWITCHES if switches is None else switches)
    first = config_space[0]
    return register(KernelSpec(
        name=name, kind="split", rung=rung, interpretable=False, split_waves=split_waves,
        split_granule=split_granule, split_block_h=split_block_h, pdl=True, direct=direct,
        joined_scopes=joined_scopes, summary=summary,
        prediction=prediction,
        launch=lambda switches=switches, **kw: launch(**kw, name=name, allowed=allowed, maxnreg=maxnreg,
                                                     switches=switches),  # (a same-run A/B may pass others)
        jit=jit, config_cls=TiledConfig, allowed=allowed, config_space=config_space, fixed_meta=switches,
        shared_model=lambda c: module.estimate_shared_bytes(c, **switches),
        check_configs=({"BLOCK_H": first.BLOCK_H, "BLOCK_T": first.BLOCK_T, "num_warps": first.num_warps},),
        compile_options={"maxnreg": maxnreg}, lab_signature=JOINED_SIGNATURE if joined_scopes else GLUON_SIGNATURE,
        lab_constexprs=_gluon_lab_constexprs(switches)))


from . import portable_ws, wgmma_ws_bal, wgmma_ws_h64  # noqa: E402 - beside their entries

_block(wgmma_ws_h64, wgmma_ws_h64.launch_ws_h64_partial, wgmma_ws_h64.ws_h64_partial_kernel,
       name="wgmma_ws_h64", rung=15,
       summary=("wgmma_ws for a group of 64 heads in three partitions: a softmax warpgroup (QK, softmax, PV of half "
                "the columns), a PV warpgroup (the other half), both reading P from shared memory, and a producer "
                "warpgroup (gathers and dequantises one tile at a time into a ring of 2 K tiles)"),
       prediction=("wgmma_ws's schedule with 64 heads a block gathers each token once per 64 heads, not once per 16. "
                   "A 64-head group in wgmma_ws's two partitions spilled (lab) and ran 1.8-3x slower than wgmma_f16 "
                   "(data/explore/explore_h200_20261202-1309_ws64.csv); with FlashMLA's unequal register shares (lab: "
                   "76 B of spill stores, no serialised wgmma) expect b64 h128 topk2048 at 80-100 us (wgmma_f16: 130, "
                   "FlashMLA: 87) and b64 h64 at 45-55 us (auto: 74)"), direct=True, joined_scopes=True)
_block(wgmma_ws_bal, wgmma_ws_bal.launch_ws_bal_partial, wgmma_ws_bal.ws_bal_partial_kernel,
       name="wgmma_ws_bal", rung=16,
       summary=("wgmma_ws_h64 with equal consumer warpgroups: each scores half of every 64-token tile (half of QK), "
                "they swap their rows' maxima through shared memory, and each runs PV over the whole tile for half of "
                "the output columns (its own P first, the other's after an mbarrier)"),
       prediction=("ncu of rung 15 at b64 h128 (c6506d3): the softmax warpgroup is the critical path (34% of stall "
                   "samples, 3x the PV warpgroup's MMA work), the PV warpgroup waits 76% of its samples. Balanced, "
                   "each warpgroup carries 2 of the tile's 4 MMA units instead of 3, plus one swap of the maxima a "
                   "tile: expect the loop ~25% shorter, b64 h128 topk2048 at 85-95 us (rung 15: 113) and b64 h64 at "
                   "55-60 us (68)"), direct=True)
# The portable rungs write a call of one split directly (no combine). Rungs 14, 20 and 24 plan their splits on the
# nominal 64-head programs, not their own 16 or 32 heads (split_block_h; rung 25 does, with P as a bf16 pair), though
# a same-call A/B at 72b0880 (data/explore/explore_h200_20261204-1442_split_block_h.csv) made them faster on their own
# head group (b64 h64 topk2048 101.7 us against 108.8, b8 h64 20.8 against 27.2, b8 h128 topk512 15.8 against 21.3;
# portable_ws b8 h64 topk512 12.6 against 18.0; none slower at the 11 shapes timed): the longer splits it gives fail
# the GPU check's extreme-scale case at b4 h128 topk2048 (out_rel_norm 3.09e-3 against the 3e-3 tolerance, 1.40e-3 on
# the nominal plan: 128-token splits for the 32-head rungs, 64 for portable_ws; the correctness table at 11c7000:
# data/explore/explore_h200_20261204-1453_split_block_h_check.csv; docs/decisions.md): bf16 P rounds a dominant token
# that shares a split with a larger one
_block(portable_ws, portable_ws.launch_portable_partial, portable_ws.portable_ws_partial_kernel,
       name="portable_ws", rung=14,
       summary=("wgmma_ws's schedule from instructions sm_120 has: a producer partition (4 warps) gathers and "
                "dequantises (bf16, exact) into a ring of 2 K tiles of 32 tokens, a consumer partition (4 warps) runs "
                "QK and PV as mma.sync (ldmatrix operands) and the softmax; they meet at mbarriers; ~83 KB a block"),
       prediction=("b64 h16 topk2048 on the H200: 55-75 us, between wgmma_ws (~51 us) and tile512 (~115 us). The "
                   "schedule is wgmma_ws's (gathers in warps of their own, no CTA barrier on the MMA path), which "
                   "took the ladder from ~113 to ~51 us. Against wgmma_ws it loses: mma.sync at about half of wgmma's "
                   "rate, with its operands through ldmatrix into registers (each consumer warp re-reads q, 16 KB a "
                   "tile); the exact bf16 dequant, ~3x the f16 convert's instructions; 32-token tiles (sm_120's 101 "
                   "KB a block), so twice the barriers and slot hand-overs per token and one 18.7 KB tile of loads in "
                   "flight a block. Two 8-warp blocks per SM on sm_90 (lab: 128 registers, no spills, 84 KB each) put "
                   "37 KB of loads in flight an SM, as wgmma_ws's one block does; the MMAs (~9 us of HMMA issue an "
                   "SM) and the dequant stay well under the ~33 us gather floor, so the time is the gathers' latency"),
       split_waves=2, split_granule=32, direct=True)
_block(portable_ws, portable_ws.launch_portable_partial, portable_ws.portable_ws_partial_kernel,
       name="portable_ws_h32q", rung=20,
       summary=("portable_ws for a group of 32 heads (rung 17, portable_ws_h32: the consumer's 4 warps exchange P "
                "in bf16, so that the block fits sm_120's 101,376 B) with QK split 2 x 2 over the consumer warps (16 "
                "heads by 16 tokens a warp) instead of 1 x 4: each warp re-reads half of q a tile, and twice the K "
                "rows; 100,708 B (lab), one block per SM at 240 consumer registers"),
       prediction=("ncu of rung 17 at b64 h64 (8de57d1): its consumer waits on ldmatrix (62% of its HMMA samples "
                   "short scoreboard), and each warp reads all of q every tile, 64% of its 50 KB; rung 19 (82614c3: "
                   "157.8 us against 140.5) showed more warps only move the wait to issuing the loads (mio "
                   "throttle), so the bytes must shrink. 2 x 2 cuts a warp's shared-memory reads a tile from 50 KB "
                   "(q 32, K 8 + 8, P 2) to 42 (q 16, K 16 + 8, P 2), 16% fewer, with the same HMMAs and the row max "
                   "across 2 warps instead of 4; alpha's change of layout adds partition barriers (lab, sm_90: 80 LDSM "
                   "a warp a tile against 96; 8 B of stack spilled outside the loop). Expect b64 h64 topk2048 at "
                   "122-132 us (rung 17: 140.5), b64 h128 at 225-245 (256.2), b64 h16 (one padded 32-head group) "
                   "63-69 (72.0), nothing at b1 h64 topk512"),
       allowed=portable_ws.ALLOWED_H32, config_space=portable_ws.CONFIG_SPACE_H32, maxnreg=portable_ws.MAXNREG_H32,
       split_granule=32, direct=True)

from . import portable_ws_h32t  # noqa: E402 - beside its entries


def _h32t_rung(**kw):
    """A rung of portable_ws_h32t's kernel (rungs 24-26): that module's launcher and kernel, 32-token split granule,
    a call of one split written directly; the rung's own name, notes, plan and switches in ``kw``."""
    _block(portable_ws_h32t, portable_ws_h32t.launch_portable_h32t_partial,
           portable_ws_h32t.portable_ws_h32t_partial_kernel, split_granule=32, direct=True, **kw)


_h32t_rung(name="portable_ws_h32t", rung=24,
           summary=("rung 23 (portable_ws_h32r) with QK split as 4 column groups of 128 by 2 token halves (q's two "
                    "parities in registers, 64 a thread): 4 partial scores a head-token meet in shared memory, not 8; "
                    "the slot stored as [token half x group] planes"),
           prediction=("ncu of rung 23 at b64 h64 (8431ecd): the consumer runs one tile at a time through a serial "
                       "chain in which the 8 partial scores of each head-token (32 KB of fp32 a tile) are stored and "
                       "read back; halving them halves that traffic and the reduction's loads and adds. An A/B of this "
                       "kernel as an uncommitted variant on 99ed294 (data/explore/explore_h200_20261204-0620_h32t.csv, "
                       "two timings a shape) took b64 h64 topk2048 from 119.3-120.7 us to 108.3-108.9, b64 h128 from "
                       "215.4-217.0 to 191.2-192.0, b64 h16 as one padded group from 62.2 to 57.0, b16 h64 topk512 "
                       "from 22.6-23.1 to 21.4-22.0, none slower; its ncu: the partial 100.0 us against 112.5, the "
                       "consumer's mio throttle from 10.9% to 1.8% of its samples. The same shared bytes (100,692) and "
                       "register cap (168). Expect b64 h64 topk2048 at 106-111 us, b64 h128 at 187-196, b64 h16 (one "
                       "padded group) 55-59, b1 h64 topk512 level with rung 23; the issue's 100 us at b64 h64 stays "
                       "about 8% away"))
_h32t_rung(name="portable_ws_h32p", rung=25,
           summary=("rung 24 with P as a bf16 pair (hi + lo) in PV, so that its split plan counts its own 32-head "
                    "programs: fewer, longer splits, one wave where the nominal 64-head count made two"),
           prediction=("Rung 24 on a plan of 32-head programs took b64 h64 topk2048 from 108.8 us to 101.7 and b8 h64 "
                       "from 27.2 to 20.8 (data/explore/explore_h200_20261204-1442_split_block_h.csv), but failed the "
                       "extreme-scale check at 256-token splits (3.09e-3): bf16 P's rounding. Written before the A/B: "
                       "the pair takes P to ~2^-17 and the error near the output's own rounding; 32 more HMMA a warp a "
                       "tile at the end of the consumer's chain (tensor pipe 27% active, ncu f78a059) should add "
                       "8-15%, so b64 h64 topk2048 at 103-112 us (about rung 24's), b8 h64 topk2048 at 21-23. Measured "
                       "(data/explore/explore_h200_20261204-1637_p_pair.csv, as xp_h32t_pair): b64 h64 113.5 against "
                       "rung 24's 109.7 (over the range), b8 h64 23.2 against 27.8, b64 h64 topk512 34.9 against 41.6, "
                       "b64 h128 218.1 against 191.9; the extreme-scale case at b4 h128 topk2048 1.40e-3 (FlashMLA "
                       "1.54e-3). So it runs between portable_ws and rung 24: 2**18 to 2**21 head-tokens"),
           split_block_h=32, switches=dict(portable_ws_h32t.SWITCHES, P_PAIR=True))
_h32t_rung(name="portable_ws_h32f", rung=26,
           summary=("rung 25's plan with K, q and P in f16 (wgmma_f16's window: the hardware e4m3x2 -> f16x2 convert "
                    "in the producer, q scaled per head, one P of 2^-12); a split with a token outside the window "
                    "runs again as rung 25 (bf16, P as a pair)"),
           prediction=("Written before the A/B: rung 24 on the 32-head plan took b64 h64 topk2048 to 100.9 us with "
                       "bf16 P (inexact), the pair to 113.5. f16 P drops the pair's 32 HMMA a warp a tile and is 8x "
                       "finer than bf16; the producer's dequant becomes two converts and two multiplies a word "
                       "(wgmma_f16's). Expect b64 h64 topk2048 at 95-102 us, b8 h64 topk2048 at 20-22, b64 h128 "
                       "within 3% of rung 24's plan-for-plan, and the extreme-scale case (scale bytes outside the "
                       "window) to take the rerun at rung 25's error. Measured (data/explore/"
                       "explore_h200_20261204-1907_f16.csv, 875fc90): b64 h64 topk2048 104.5 against rung 25's 113.0 "
                       "and rung 24's 108.4, b8 h64 24.5 against 23.7, b64 h128 199.2 against rung 24's 186.6: plan "
                       "for plan 6-7% slower than rung 24 (ncu: more short-scoreboard stalls in the consumer), so it "
                       "runs from 2**21 to 2**23 head-tokens; its catalogue check 43 of 43, memcheck clean"),
           split_block_h=32, switches=dict(portable_ws_h32t.SWITCHES, F16=True))

register(KernelSpec(
    name="gather", kind="probe", summary="speed-of-light probe: the decode's bytes and split plan, no math",
    launch=gather.launch_gather, jit=gather.gather_kernel, config_cls=gather.GatherConfig, allowed=gather.ALLOWED,
    config_space=tuple(gather.CONFIG_SPACE)))

from . import gather_async  # noqa: E402 - beside its entry, so that the entry is one block

register(KernelSpec(
    name="gather_async", kind="probe",
    summary="speed-of-light probe by the deepest load path: the gather probe's bytes, split plan and sink, the "
            "cache as int32 words so that Triton pipelines the gathers into a cp.async (LDGSTS.128) ring of up to "
            "5 tiles a program; the autotuner may pick synchronous ld.global.cg.v4 tiles of 64-128 tokens instead",
    prediction="b64 h16 topk2048 (256 programs of 512 tokens, 2 per SM): gather keeps one synchronous tile in flight "
               "per program and waits an index round trip between tiles, so its time follows programs per SM (32.5 us "
               "at 2 per SM, 52.8 at h128's 1 per SM, the same 76.5 MB). Here the tuner should take a 3-4-stage ring "
               "of 32-64 tokens: 64-192 tokens (37-112 KB) in flight per program, 75-225 KB per SM, against ~40 KB "
               "per SM that Little's law asks at 3.5 TB/s and ~1.5 us loaded latency. The limit moves to DRAM: 576 "
               "data bytes and a 32-64 B sector for the 8 scale bytes, 608-640 B a token, 19-20 us at the 4.24 "
               "TB/s copy rate, plus ~2 us of launch and first round trip. Expect 22-25 us at b64 h16 (3.1-3.5 TB/s "
               "of counted bytes), 23-27 us at b64 h128 (gather 52.8), no change at b1 h64 topk512 (one 16-token "
               "tile a split, latency-bound: 2.2-2.6 us). Above 27 us at b64 h16 the scattered DRAM reads "
               "themselves (row activations; the scale sector is a second access per token) are the limit, not "
               "the SMs",
    launch=gather_async.launch_gather_async, jit=gather_async.gather_async_kernel,
    config_cls=gather_async.GatherAsyncConfig, allowed=gather_async.ALLOWED,
    config_space=tuple(gather_async.CONFIG_SPACE),
    # launch types: a page stride in words (37,440 at 256-token pages) is an i32 and a multiple of 16, as are the
    # benchmark page sizes (256, 64), which Triton specialises on
    lab_signature=dict(cache_w="*i32", stride_page_w="i32:16", block_size="i32:16", num_tokens="i32", idx_ptr="*i32",
                       stride_ib="i32", stride_is="i32", sink_ptr="*i32", S_Q="i32", TOPK="i32",
                       tokens_per_split="i32", TOKENS_BUCKET="i32", QUERIES_BUCKET="i32"),
    lab_constexprs=lambda c: dict(DATA_WORDS=144, SCALE_WORDS=2, **c.meta())))
