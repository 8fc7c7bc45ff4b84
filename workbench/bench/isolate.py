"""Cost isolation: the default Gluon decode with one stage left out, timed beside the whole decode.

Issue 9 asks that a missed goal name its limit and back it with "a variant that isolates the cost". Each variant
here runs the decode's own launch sequence (``decode.launch_stages``) with a Gluon partial kernel's ``LEAVE_OUT``
switch set (``workbench.kernels.gluon_common.LEAVE_OUT_BITS``: no next-tile gathers, no dequant, no softmax, no QK
MMA, no PV MMA; the Gluon kernels of wgmma, wgmma_ws and wgmma_ws_h64 take the same bits), or without the combine
launch. With every bit clear the switch compiles to the same SASS as the kernel had without it (every Gluon rung and
config, sm_90 lab, checked when the switch was added; wgmma_f16_2cta again when the pv bit was; wgmma_ws_h64 when it
got the switch), so the whole decode timed beside the variants is the one every other table times. In wgmma_ws_h64
the no-PV bit drops both warpgroups' PV wgmmas, and every variant with the softmax bit ("no_softmax", "loads_only")
compiles with serialised wgmmas (ptxas C7515; sm_90 lab, 2026-12-07: a `WARPGROUP.DEPBAR` after every HGMMA of
the tile loops, 36 of 36 in the softmax warpgroup's with "no_softmax", where the whole build has 2, and 4 of 4 in
the PV warpgroup's, where it has 1), so at 64 and 128 heads those two rows time a slower MMA chain, not the chain
less a stage. Rung 13 (wgmma_ws) keeps its 2 a tile with the softmax bit.

The variants that drop the softmax ("no_softmax", "loads_only", "gather_dequant") take the scores as P with a
rescale factor of 1 built directly (gluon_common.softmax_step, since 2236853), so they time one pass. Before that,
the factor came from the running max while it was still -inf, every row sum went non-finite and every split ran
again with bf16 operands: the isolate tables of that time show no_softmax about twice the whole decode (two passes).

What a variant leaves out beyond its name (a review of fce87fb; the compiler drops loads whose values go unused):
with the dequant bit, the scale bytes are never read (every kernel), and in wgmma_ws and wgmma_ws_h64 the rope's
bytes are not read either (their rope merge is skipped with the dequant), so their "no_dequant" and "loads_only"
also leave out 64 of a token's 584 bytes. "no_loads", "gather_dequant", "no_pv", "no_qk" and "no_softmax" keep every byte.

A variant's output is wrong by design, so the bench treats it as a probe (no check against the reference).
Provider names are ``<decode>~<variant>``, e.g. ``auto~no_loads``.
"""
from __future__ import annotations

import dataclasses

import torch

SEPARATOR = "~"
# variant -> the loop stages it drops (LEAVE_OUT_BITS keys); "no_combine" drops the combine launch instead
VARIANTS = {
    "no_loads": ("loads",),        # every tile reuses the first tile's bytes: no gathers inside the loop
    "no_dequant": ("dequant",),    # the words are masked into f16 1.0/0 instead of converted and scaled
    "no_softmax": ("softmax",),    # the scores are P; no max, exp2 or rescaling
    "no_qk": ("qk",),              # constant scores: no QK wgmma (and q is never read)
    "loads_only": ("dequant", "softmax", "qk"),  # gathers, K stores, barriers and the PV wgmma
    "no_pv": ("pv",),              # no PV wgmma: the accumulator stays zero
    "gather_dequant": ("softmax", "qk", "pv"),   # gathers, dequant, K stores and barriers: no MMA, no softmax
    "no_combine": (),              # the partial launches alone: what the combine adds to the call
}


def leave_out_bits(stages) -> int:
    """The LEAVE_OUT mask for stage names (``LEAVE_OUT_BITS`` keys); a ValueError names an unknown one."""
    from ..kernels.gluon_common import LEAVE_OUT_BITS
    unknown = [s for s in stages if s not in LEAVE_OUT_BITS]
    if unknown:
        raise ValueError(f"stages: expected some of {tuple(LEAVE_OUT_BITS)}, got {unknown}")
    bits = 0
    for s in stages:
        bits |= LEAVE_OUT_BITS[s]
    return bits


def split_provider(name: str) -> tuple[str, str] | None:
    """(decode, variant) for an isolation provider name, None for any other name; a ValueError for an unknown
    variant after the separator."""
    if SEPARATOR not in name:
        return None
    impl, variant = name.split(SEPARATOR, 1)
    if variant not in VARIANTS:
        raise ValueError(f"provider {name!r}: expected a variant of {tuple(VARIANTS)} after {SEPARATOR!r}")
    return impl, variant


def provider_names(impl: str = "auto") -> tuple[str, ...]:
    return tuple(f"{impl}{SEPARATOR}{v}" for v in VARIANTS)


def is_gluon(spec) -> bool:
    """Whether a registered kernel is a rung of a Gluon partial kernel with the LEAVE_OUT switch (wgmma's,
    wgmma_ws's, wgmma_ws_h64's or wgmma_ws_bal's, which give its bits the same meaning)."""
    from ..kernels.wgmma import wgmma_partial_kernel
    from ..kernels.wgmma_ws import ws_partial_kernel
    from ..kernels.wgmma_ws_bal import ws_bal_partial_kernel
    from ..kernels.wgmma_ws_h64 import ws_h64_partial_kernel
    return spec.kind == "split" and spec.jit in (wgmma_partial_kernel, ws_partial_kernel, ws_h64_partial_kernel,
                                                 ws_bal_partial_kernel)


def isolated_launches(kw: dict, *, impl: str, variant: str, config=None):
    """A zero-argument callable that runs one decode call (``kw``: sparse_mla_decode's inputs) with ``variant``
    left out, and returns the decode's (out, lse) buffers (wrong by design). The kernel is the one the decode
    would run (``impl="auto"`` resolved as decode resolves it); it must be a Gluon rung."""
    from ..decode import INPUT_NAMES, allocate_workspace, decode_scopes, launch_stages, resolve_call
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {tuple(VARIANTS)}, got {variant!r}")
    spec, sm_scale = resolve_call(**{k: kw.get(k) for k in INPUT_NAMES}, sm_scale=kw.get("sm_scale"), impl=impl)
    if not is_gluon(spec):
        raise ValueError(f"{impl} runs {spec.name} here, which has no LEAVE_OUT switch (only the Gluon rungs do)")
    bits = leave_out_bits(VARIANTS[variant])
    if bits:
        base_launch = spec.launch
        spec = dataclasses.replace(spec, launch=lambda **k: base_launch(**k, LEAVE_OUT=bits))
    q = kw["q"]
    scopes = decode_scopes(kw["cache"], kw["indices"], kw.get("topk_length"), kw.get("extra_cache"),
                           kw.get("extra_indices"), kw.get("extra_topk_length"))
    work = allocate_workspace(spec, q, scopes)
    stages = launch_stages(spec, q=q, scopes=scopes, attn_sink=kw.get("attn_sink"), sm_scale=sm_scale,
                           config=config, work=work)
    if variant == "no_combine" and not work.direct:  # a direct call (one split) has no combine to drop
        stages = stages[:-1]

    def run():
        for stage in stages:
            stage.run()
        return work.out, work.lse
    return run
