"""What the bench measures: shapes, the named sweeps over them, and the cold-KV inputs a shape is timed on.

A sweep is a list of (shape, providers, modes, forced config) items; :func:`workbench.bench.run_sweep`
runs each provider on each shape in each timing mode (:mod:`workbench.bench.timing`).
Every timed call reads cold KV: indices are drawn at random from a pool cache of about 600 MB (ten times
the H200's L2), and the timed calls cycle through several index sets (:data:`ROTATIONS`).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from ..format.codec import quantize_kv
from ..format.layout import MODEL1

POOL_TOKENS = 1 << 20        # ~612 MB of cache per page size
ROTATIONS = 8                # index sets cycled through by the timed calls
SM_SCALE = MODEL1.d ** -0.5  # one float object for every call, as a server passes its constant


@dataclass(frozen=True)
class BenchShape:
    batch: int
    heads: int
    topk: int
    s_q: int = 1
    block_size: int = 256
    extra_topk: int = 0
    extra_block_size: int = 64

    @property
    def label(self) -> str:
        x = f"+x{self.extra_topk}@{self.extra_block_size}" if self.extra_topk else ""
        return f"b{self.batch}-h{self.heads}-sq{self.s_q}-k{self.topk}@{self.block_size}{x}"


BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 132)
ALL_ORDER = ("headline", "baselines", "batch", "warps", "production", "s_q2", "configs")  # most important first
SWEEPS = ("smoke", "headline", "ladder", "forced", "crossover", "heads", "pdl", "isolate", "sink", "batch", "s_q2",
          "production", "baselines", "warps", "configs", "overhead", "all")
HEADLINE = (BenchShape(64, 16, 2048), BenchShape(64, 64, 2048), BenchShape(64, 128, 2048), BenchShape(1, 64, 512),
            BenchShape(64, 16, 128, block_size=256, extra_topk=512, extra_block_size=64))
HEADS = (16, 32, 64, 128)
# Host overhead (issue 10): the plain default decode, the same decode through a plan, and FlashMLA, at a
# host-bound and a GPU-bound shape, each timed every way, beside the host's floor for a call of one and of two
# empty launches (providers.LaunchFloorProvider); its "overhead" rows are eager_idle minus graph per call
# (workbench.bench.timing).
OVERHEAD_SHAPES = (BenchShape(1, 64, 512), BenchShape(64, 16, 2048))
OVERHEAD_PROVIDERS = ("auto", "auto+plan", "auto+compiled", "flashmla", "launch_floor", "launch_floor2")
OVERHEAD_MODES = ("eager", "eager_idle", "graph", "overhead")
# the rungs auto chooses among on sm_90 and off it (registry.auto_kernel; auto_portable: what it runs without wgmma),
# the newest Hopper rung (wgmma_ws_bal, a candidate for the rule), rung 20 (portable_ws_h32q: out of the rule since
# rung 21, timed beside it as the reference its successors are measured against; at f78a059 it won only b1 h64
# topk2048, below 2^18 head-tokens, where the rule runs portable_ws), rungs 25 and 26 (portable_ws_h32p and
# portable_ws_h32f: rung 24 on its own 32-head plan, P as a bf16 pair or in f16; the sweeps at c8e518c timed rung 26
# only where auto_portable ran it), the fastest bf16 Gluon rung and the best Triton one, timed from small to large calls
CROSSOVER_PROVIDERS = ("tile512", "wgmma_xchg", "wgmma_f16", "wgmma_f16_2cta", "wgmma_ws", "wgmma_ws_h64",
                       "wgmma_ws_bal", "portable_ws", "portable_ws_h32q", "portable_ws_h32t", "portable_ws_h32p",
                       "portable_ws_h32f", "auto_portable")
# The Hopper rungs auto picks among for a large call of two KV scopes at 64 and 128 heads (the production sweep times
# them by name from b16, where every crossover rung would cost minutes: the portable ones launch a scope at a time)
TWO_SCOPE_HOPPER_RUNGS = ("wgmma_xchg", "wgmma_f16", "wgmma_f16_2cta", "wgmma_ws_h64")
# Head counts between the powers of two (issue 25): each pads up to a head group, and must cost no more than the next
# power of two; the default and every crossover rung beside FlashMLA and the floors, at a large and a small call
ODD_HEADS = (16, 20, 24, 32, 40, 48, 64, 128)
ODD_HEADS_BATCHES = (8, 64)
# The combine as a programmatic dependent launch or an ordinary one (decode.combine_pdl), for the default kernel:
# the headline shapes and b32 h16 topk2048 (1-8 splits a row), b8 h16 and h64 topk2048 (16), and b2, b4 h64
# topk2048 (32 splits a row)
PDL_SHAPES = HEADLINE + (BenchShape(32, 16, 2048), BenchShape(8, 16, 2048), BenchShape(8, 64, 2048),
                         BenchShape(2, 64, 2048), BenchShape(4, 64, 2048))
PDL_PROVIDERS = ("auto+pdl", "auto+serial")
# The gather floors timed beside the decodes: the old probes stay so that the history still reads; "gather_fine"
# (the "gather" kernel, at most 64 tokens a program: providers.FINE_PROBES) says what the hardware can gather
FLOOR_PROBES = ("gather", "gather_async", "gather_fine")
# Where the default kernel's time goes (workbench.bench.isolate): the whole decode, the same with one stage left out,
# FlashMLA and the gather floors, in one run at the headline shapes


def sweep_shapes(name: str) -> list[tuple[BenchShape, tuple[str, ...], tuple[str, ...], dict | None]]:
    """(shape, providers, modes, forced config) for a named sweep."""
    # the default kernel beside FlashMLA and the gather floors: "gather" (one Triton loop of synchronous 16-byte
    # loads, the decode's plan), "gather_async" (cp.async rings, the decode's plan) and "gather_fine" ("gather" with
    # at most 64 tokens a program: the fastest on the H200)
    fast = ("auto", "flashmla") + FLOOR_PROBES
    if name == "smoke":
        return [(BenchShape(2, 64, 512), ("auto", "flashmla", "simt", "reference"), ("eager", "graph"), None)]
    if name == "batch":  # the default across batch beside FlashMLA, the floors and the seed's kernel
        return [(BenchShape(b, h, k), fast + ("mma",), ("eager", "graph"), None)  # graph too: the kernels' own time
                for k in (512, 2048) for h in HEADS for b in BATCHES]
    if name == "s_q2":  # graph replay too where the kernels' time is not hidden by the host's (as production)
        return [(BenchShape(b, 64, 2048, s_q=2), fast, ("eager",) + (("graph",) if b <= 8 else ()), None)
                for b in BATCHES]
    if name == "production":  # graph replay up to b8 also times every crossover rung by name: the crossover's calls
        # have one scope, so only this sweep can say which rung a call with an extra scope wants (auto lost to
        # FlashMLA there at b4 h128, b8 h64 and b8 h128, 0.92-0.95x on the H100 at aa5fd52); from b16 graph replay
        # too, with the Hopper rungs the rule picks among for such calls by name
        # (until f0da957 these batches were eager only, and rung 15, then a launch a scope, ran them at up to twice
        # wgmma_xchg's time unseen; since rung 15 reads both scopes as one stream the rule's two-scope step is gone)
        # At 16 and 32 heads every batch, graph replay only, every rung by name: the rule's two-scope step at 16
        # heads (registry.JOINED_MIN_TOKENS_H16) rests on these rows, and no other sweep times such calls; at 32
        # heads (128 heads over four GPUs) the rule's 17-32-head steps were set on calls of one scope, and send
        # 16,384-32,767 tokens of two scopes to a portable rung, which launches a scope at a time (unmeasured)
        plan = []
        for h in (64, 128):
            for b in BATCHES:
                shape = BenchShape(b, h, 128, block_size=256, extra_topk=512, extra_block_size=64)
                plan.append((shape, fast, ("eager", "graph"), None))
                plan.append((shape, CROSSOVER_PROVIDERS if b <= 8 else TWO_SCOPE_HOPPER_RUNGS, ("graph",), None))
        plan += [(BenchShape(b, h, 128, block_size=256, extra_topk=512, extra_block_size=64),
                  fast + CROSSOVER_PROVIDERS, ("graph",), None) for h in (16, 32) for b in BATCHES]
        return plan
    if name == "baselines":  # the seed and the default beside SIMT, so that the speed-ups over SIMT are one run's
        return [(BenchShape(b, 64, 2048), ("simt", "reference", "mma", "auto"), ("eager",), None)
                for b in (1, 8, 64, 132)]
    if name == "warps":
        return [(BenchShape(b, h, 2048), ("mma",), ("eager",),
                 {"BLOCK_H": min(64, h), "BLOCK_T": 16, "num_warps": w, "num_stages": 1, "PREFETCH": int(h <= 32)})
                for h in (16, 64) for b in BATCHES for w in (4, 8)]
    if name == "configs":
        plan = []
        for h in (16, 64, 128):
            shape = BenchShape(64, h, 2048)
            plan += [(shape, ("mma",), ("graph",), {"BLOCK_H": min(64, h), "BLOCK_T": bt, "num_warps": w,
                                                      "num_stages": 1, "PREFETCH": pf})
                     for bt in (16, 32) for w in (4, 8) for pf in (0, 1)]
            plan.append((shape, fast, ("graph",), None))
        return plan + [(BenchShape(1, 64, 512), fast, ("graph",), None)]
    if name == "ladder":  # every rung beside FlashMLA and the gather floor, at the headline shapes
        from .. import registry
        provs = tuple(r.name for r in registry.rungs()) + ("auto_portable", "flashmla") + FLOOR_PROBES
        return [(shape, provs, ("graph",), None) for shape in HEADLINE]
    if name == "forced":  # the configs the autotuner chooses among, each forced, to check its choice
        plan = []
        for shape, group in ((BenchShape(64, 16, 2048), 16), (BenchShape(64, 64, 2048), 64)):
            for kernel in ("tile512",):
                plan += [(shape, (kernel,), ("graph",), {"BLOCK_H": group, "BLOCK_T": bt, "num_warps": w,
                                                         "num_stages": st})
                         for bt in (16, 32) for w in ((4, 8) if group < 64 else (8,)) for st in (1, 3)]
            plan += [(shape, ("mma",), ("graph",), {"BLOCK_H": group, "BLOCK_T": bt, "num_warps": w, "num_stages": 1,
                                                    "PREFETCH": pf})
                     for bt in (16, 32) for w in ((4, 8) if group < 64 else (8,)) for pf in (0, 1)]
        return plan
    if name == "crossover":  # where the Gluon kernel starts to beat the best Triton rung ("auto" picks by it)
        # up to b128: the 64-head block (wgmma_ws_h64) fills the SMs only at large calls; and b256 h16 topk2048
        # (2**19 tokens): auto ran that block at <= 16 heads from 2**18 tokens until rung 13 was measured ahead of it
        # at b128-b256 (docs/decisions.md), and this point keeps checking that rung 13 is the pick there
        return [(BenchShape(b, h, k), CROSSOVER_PROVIDERS, ("graph",), None)
                for k in (512, 2048) for h in (16, 32, 64, 128) for b in (1, 2, 4, 8, 16, 32, 64, 128)] + \
               [(BenchShape(256, 16, 2048), CROSSOVER_PROVIDERS, ("graph",), None)]
    if name == "heads":
        return [(BenchShape(b, h, 2048), fast + CROSSOVER_PROVIDERS, ("graph",), None)
                for b in ODD_HEADS_BATCHES for h in ODD_HEADS]
    if name == "pdl":
        return [(shape, PDL_PROVIDERS, ("graph",), None) for shape in PDL_SHAPES]
    if name == "isolate":
        from .isolate import provider_names
        provs = ("auto",) + provider_names("auto") + ("flashmla",) + FLOOR_PROBES
        return [(shape, provs, ("graph",), None) for shape in HEADLINE]
    if name == "headline":
        head = fast + ("auto_portable",)  # beside the default: what auto runs on a GPU without wgmma (issue 24)
        return [(BenchShape(64, h, 2048), head, ("eager", "graph"), None) for h in (16, 64, 128)] + \
               [(BenchShape(1, 64, 512), head, ("eager", "graph"), None)]
    if name == "sink":  # the headline shapes with an attention sink, as DeepSeek-V4's engines pass one, beside the
        # same calls without (providers.SinkProvider): a sink changes what a one-split call builds
        return [(shape, ("auto", "auto+sink", "flashmla", "flashmla+sink"), ("graph",), None) for shape in HEADLINE]
    if name == "overhead":  # host cost per call (eager_idle minus graph), every provider timed in one run
        return [(shape, OVERHEAD_PROVIDERS, OVERHEAD_MODES, None) for shape in OVERHEAD_SHAPES]
    if name == "all":
        return [x for n in ALL_ORDER for x in sweep_shapes(n)]
    raise ValueError(f"sweep: expected one of {SWEEPS}; got {name!r}")


# ----------------------------------------------------------------------------- inputs

class InputPool:
    """Pool caches (one per page size) and per-shape rotating index sets, built on the GPU."""

    def __init__(self, device="cuda", pool_tokens: int = POOL_TOKENS, seed: int = 0):
        self.device, self.pool_tokens, self.seed = device, pool_tokens, seed
        self._caches: dict[int, torch.Tensor] = {}

    def cache(self, block_size: int) -> torch.Tensor:
        if block_size not in self._caches:
            g = torch.Generator(device=self.device).manual_seed(self.seed + block_size)
            nb = self.pool_tokens // block_size
            kv = torch.randn(nb, block_size, MODEL1.d, device=self.device, generator=g)
            mag = torch.pow(10.0, torch.rand(nb, block_size, MODEL1.num_tiles + 1, device=self.device, generator=g)
                            * 2 - 1)
            kv[..., : MODEL1.d_nope] *= mag[..., : MODEL1.num_tiles].repeat_interleave(MODEL1.tile, dim=-1)
            kv[..., MODEL1.d_nope:] *= mag[..., MODEL1.num_tiles:]
            self._caches[block_size] = quantize_kv(kv.to(torch.bfloat16))
            del kv
        return self._caches[block_size]

    def inputs(self, shape: BenchShape, rotations: int = ROTATIONS, sink: bool = False) -> list[dict]:
        """The calls a provider is timed on, rotating through index sets over the same q; sink: each also takes an
        attention sink, [heads] fp32, standard normal, the same in every rotation and seeded apart from q."""
        # crc32, not hash(): str hashes change from process to process (PYTHONHASHSEED), so the seed would too
        seed = self.seed + zlib.crc32(shape.label.encode()) % 10_000
        g = torch.Generator(device=self.device).manual_seed(seed)
        q = (torch.randn(shape.batch, shape.s_q, shape.heads, MODEL1.d, device=self.device, generator=g)
             .to(torch.bfloat16))
        out = []
        for _ in range(rotations):
            kw = dict(q=q, cache=self.cache(shape.block_size), sm_scale=SM_SCALE,
                      indices=torch.randint(0, self.pool_tokens, (shape.batch, shape.s_q, shape.topk),
                                            device=self.device, generator=g, dtype=torch.int32))
            if shape.extra_topk:
                kw.update(extra_cache=self.cache(shape.extra_block_size),
                          extra_indices=torch.randint(0, self.pool_tokens,
                                                      (shape.batch, shape.s_q, shape.extra_topk),
                                                      device=self.device, generator=g, dtype=torch.int32))
            out.append(kw)
        if sink:
            g = torch.Generator(device=self.device).manual_seed(seed + 1)
            attn_sink = torch.randn(shape.heads, device=self.device, generator=g, dtype=torch.float32)  # [h]
            out = [dict(kw, attn_sink=attn_sink) for kw in out]
        return out
