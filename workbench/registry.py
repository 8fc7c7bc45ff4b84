"""One registry of kernels: each is declared once, as a spec, and found by the rest of the package.

``decode`` dispatches ``impl=`` through it, the bench builds its providers from it, the CLI
takes its choices from it, and the ladder notebook reads the rungs' predictions from it.
A new variant costs one module and one ``register(KernelSpec(...))``.

Kinds:
- ``split``: a partial kernel per KV scope into fp32 split scratch, merged by the combine kernel
  (``launch`` takes the partial-launch keywords of :func:`workbench.kernels.common.split_args`);
- ``fused``: one launch writes out and lse (``launch`` takes the whole call);
- ``reference``: torch, no kernel;
- ``probe``: not a decode; the bench times it beside the decodes (the gather floor).
"""
from __future__ import annotations

from .kernel_spec import KINDS, REGISTRY, KernelSpec, register, unregister  # noqa: F401  (the registry's API)


def get(name: str) -> KernelSpec:
    _load_builtin()
    if name not in REGISTRY:
        raise ValueError(f"impl: expected one of {decode_impls()} or a probe {names('probe')}, got {name!r}")
    return REGISTRY[name]


def names(*kinds: str) -> tuple[str, ...]:
    """Registered names, in registration order; only of the given kinds when any are named."""
    _load_builtin()
    return tuple(n for n, s in REGISTRY.items() if not kinds or s.kind in kinds)


AUTO = "auto"


def decode_impls() -> tuple[str, ...]:
    """What ``sparse_mla_decode(impl=...)`` takes: "auto" and every registered decode."""
    return (AUTO,) + names("split", "fused", "reference")


# auto_kernel's thresholds, from the crossover sweeps (data/*_crossover.csv; the numbers: docs/decisions.md). A
# "head-token" is one head's score for one selected token: heads * tokens, the QK work of a call
TWO_BLOCK_MAX_TOKENS_H64 = 4096      # 17-32 heads (from older h64 crossovers)
H32_MIN_TOKENS_SM90 = 16384          # 17-32 heads: from b8 topk2048 the portable 32-head block (rung 24) beats the
                                     # 16-head groups (the heads sweep at 0590dbc; data/explore/..._h32_hopper.csv)
H32_WS_MIN_TOKENS_SM90 = 1 << 15     # 17-32 heads: from b16 topk2048 and b64 topk512 the 64-head block (rung 15,
                                     # half its heads padding), one-split calls too, since its producer issues a
                                     # half tile's gathers early (f6a483c crossover, H100: b16 topk2048 23.84 us
                                     # against rung 24's 24.25, b64 topk512 24.28 against 25.01, b128 topk512 32.86
                                     # against wgmma_f16's 33.89); from b32 topk2048 since c48ae8a
ONE_SPLIT_MIN_QUERIES_SM90 = 89     # 17-64 heads: from 89 queries a 64-head block's split plan on 132 SMs is one
                                    # split (decode.plan_splits, waves 1), and wgmma_f16 runs it with no combine
                                    # (KernelSpec.direct): b128 topk512 32.87 us against rung 24's 37.29
                                    # (data/bench_h200_20261204-1125_crossover.csv)
HEAD_BLOCK = 64                      # 33-63 heads run as one 64-head block, so auto counts them as 64
WS_MIN_TOKENS_H16 = 65536            # <= 16 heads: from b32 topk2048 the warp-specialised kernel wins
JOINED_MIN_TOKENS_H16 = 1 << 15       # <= 16 heads, a call of two scopes: from here rung 15 (one padded 64-head
                                     # block reading both scopes as one stream), at any size above (production b64
                                     # h16, topk 128 + extra 512, 40,960 tokens: 26.93 us against the two-block
                                     # rung's 28.04, b128 38.15 against wgmma_ws's 45.27, b132 38.69 against 45.30,
                                     # on the H100 at 90799f7; at b32, 20,480 tokens, 19.24 against wgmma_f16's 16.04)
JOINED_MAX_TOPK_H16 = 1024           # ... for calls of fewer tokens a query than this on average (the shape
                                     # measured has 640): a two-scope call of long rows at 16 heads is untimed, and in
                                     # one scope rung 15 trails wgmma_ws there (b256 h16 topk2048: 169.7 us
                                     # against 163.0 in the same H100 crossover)
XCHG_MAX_TOKENS_H16 = 8192           # <= 16 heads (one 16-head group): up to b4 topk2048 the bf16 rung wins
TWO_BLOCK_BELOW_HEAD_TOKENS = 1 << 18  # >= 33 heads: below b8 topk512 at h64, b4 topk512 at h128
XCHG_MAX_HEAD_TOKENS = 1 << 20       # >= 33 heads: up to b8 topk2048 and b32 topk512 at h64, b4 topk2048 and b16
                                     # topk512 at h128 (2**20 itself: wgmma_xchg within 1.4% of the fastest at all
                                     # four shapes in the H100 crossovers at aa5fd52 and 11c3638 and the H200's at
                                     # 877f643, the 64-head block 1.7-5.9% behind in the H100s'); then that block.
                                     # Also the 32-head portable band's top, which stops below it (at 2**20 rung 26
                                     # is 1.5-2.0% behind wgmma_xchg at b8 h64 topk2048 in the same three tables)
H32_BAND_MIN_HEAD_TOKENS_SM90 = 1 << 19  # >= 33 heads, below XCHG_MAX_HEAD_TOKENS: a 32-head portable rung (25,
                                         # then 26) beat wgmma_xchg at every 2**19 shape of the crossover at dcff189
                                         # (rung 25: 6.4-14.2%) and of the A/B at 875fc90
H32_BAND_MIN_TOPK_SM90 = 2048  # ... and at 2**18 with 2048 tokens a query (b2 h64, b1 h128 topk2048: rung 25 6-7.4%
                               # at dcff189), not with 512 (b8 h64, b4 h128 topk512: wgmma_xchg 4-8% faster)
                               # There rung 25 (portable_ws_h32p) itself, below 2**19: it beat rung 26 at b1 h128
                               # topk2048 in all 15 H100 crossovers since 2026-12-05 (0.925-0.996x its time) and
                               # at b2 h64 topk2048 in 14 (0.977-0.995x; 1.12x in the first, 2026-12-05 16:16)
PORTABLE_WS_BELOW_HEAD_TOKENS = 1 << 18  # off Hopper, > 32 heads: below b8 topk512 (b2 topk2048) at h64, b4 topk512
                                         # at h128; then the 32-head groups (rung 25 first: the crossover at dcff189)
PORTABLE_H32P_BELOW_HEAD_TOKENS = 1 << 19  # off Hopper, > 32 heads: below b4 topk2048 (b16 topk512) at h64 the 32-head
                                           # rung that plans on its own head group (P as a bf16 pair); then rung 26
                                           # (the crossover at bb8550e, the first to time rung 26 by name: 2^19-2^21
                                           # rung 26 first at 9 of 12 shapes, by up to 8.2% at b8 h128 topk2048)
PORTABLE_H32F_ANY_TOPK_BELOW_HEAD_TOKENS = 1 << 22  # ... rung 26 (its plan, f16 operands) at any topk below b64
                                                    # topk1024 at h64 (b64 h64 topk512: 32.79 us against rung 24's
                                                    # 40.28, bb8550e); from there as below
PORTABLE_H32F_MAX_HEAD_TOKENS = 1 << 23  # ... and up to b64 topk2048 at h64 (103.75 us against rung 24's 108.75 at
                                         # bb8550e); at b64 h128 rung 24 (185.44 against 198.43)
PORTABLE_H32F_MIN_TOPK = 2048  # ... for calls of 2048 tokens a query from PORTABLE_H32F_ANY_TOPK_BELOW_HEAD_TOKENS, not
                               # 512 (rung 24 7.6-8.0% faster at b64 h128, b128 h64 and b128 h128 topk512 at c8e518c,
                               # 7.7-8.4% at bb8550e)
PORTABLE_H32_MIN_TOKENS_H16 = 8192  # off Hopper, <= 32 heads: from b4 topk2048 (b16 topk512) the 32-head kernel (half
                                    # its heads padding at 16) beats portable_ws's split plan (16-head groups)


def auto_kernel(capability: str, *, heads: int, tokens: int, queries: int | None = None, scopes: int = 1) -> str:
    """What "auto" runs on a GPU of ``capability`` ("sm_90", ...) for a call of this size (a pure rule).

    ``queries`` (b * s_q) tells the rule that a call of ``scopes`` == 1 KV scope makes one split (no combine); with
    an extra scope its query count gives only the tokens a query (None: not known): the kernels it picks among there
    run two splits at least, except rung 15, which reads both scopes in one split where the plan makes one.

    On sm_90: at <= 16 heads (padded to one 16-head group) "wgmma_xchg" up to XCHG_MAX_TOKENS_H16 tokens,
    "wgmma_ws" from WS_MIN_TOKENS_H16, "wgmma_f16" between, except for a call
    of two scopes from JOINED_MIN_TOKENS_H16 with fewer than JOINED_MAX_TOPK_H16 tokens a query (queries known),
    which runs "wgmma_ws_h64": rung 15 reads both scopes as one stream, where the others launch a scope at a time
    and combine (the production sweep at 90799f7, data/bench_h100_80gb_hbm3_20261208-0022_production.csv, every rung
    by name: b64 h16 26.93 us against the two-block rung's 28.04, which the rule ran there from 1c42267 until this
    step, b128 38.15 against wgmma_ws's 45.27, FlashMLA 49.13; b33-b51 are not timed, so the start is placed between
    b32 and b64, and calls above b132 are the same kernel on more programs, not a measured pick). At 17-32
    heads "wgmma_ws_h64" from H32_WS_MIN_TOKENS_SM90 tokens, "wgmma_f16" for a one-split call (from
    ONE_SPLIT_MIN_QUERIES_SM90 queries) below it, else "wgmma_f16_2cta" up to TWO_BLOCK_MAX_TOKENS_H64 tokens,
    "portable_ws_h32t" (one 32-head block, mma.sync) from H32_MIN_TOKENS_SM90 tokens, else "wgmma_xchg". At >= 33
    heads, by head-tokens (heads * tokens, 33-63 heads counted as HEAD_BLOCK: they run padded to one 64-head block):
    "wgmma_f16_2cta" below TWO_BLOCK_BELOW_HEAD_TOKENS, and on it from 64 heads unless the rows are long
    (H32_BAND_MIN_TOPK_SM90 tokens a query); below XCHG_MAX_HEAD_TOKENS, and on it from 64 heads, for a call of one
    scope below it "portable_ws_h32f" (rung 26) from H32_BAND_MIN_HEAD_TOKENS_SM90, "portable_ws_h32p" (rung 25) below
    that with H32_BAND_MIN_TOPK_SM90 tokens a query or more (b1 h128 and b2 h64 topk2048), else "wgmma_xchg";
    above it, and on it at 33-63 heads, "wgmma_ws_h64" (a one-split call of at most 512 tokens a query at 33-64
    heads ran "wgmma_f16" until rung 15 staged its one-split output: b128 h64 topk512 35.46 us against wgmma_f16's
    41.64 in the H100 crossover at aa7560b). A call of two scopes takes the
    same head-token steps (the 32-head portable band and the one-split pick stay calls of one scope): rung 15 reads
    both scopes in each split as one stream (KernelSpec.joined_scopes), and at the production shape (topk 128 + 512,
    one H100 call at 4ba3b9f with rung 15's joined producer at 144 registers, graph replay,
    data/explore/explore_h100_20261207-1743_joined_scopes.csv and ..._1750_joined_scopes_rule.csv) it took b16 h128
    23.21 us against wgmma_xchg's 23.69, b32 h64 25.04 against 25.03, b32 h128 30.54 against 42.99, b64 h64 34.41
    against 47.33, b64 h128 37.37 against 88.71 (FlashMLA 34.83), b128 h64 41.51, b128 h128 71.60 (67.30); below
    2**20, at b8 h64 (2**18.3) 17.55 against 16.95 and at b8 h128 and b16 h64 (2**19.3) within 0.7% of it. Until
    this step (f0da957-4ba3b9f) calls of two scopes under 2**22 head-tokens stayed on "wgmma_xchg", when rung 15 ran
    a launch a scope and a combine at 1.4-2.0x its time. Two calls on 2**20 at 64 heads go to "wgmma_xchg"
    unmeasured: a one-split call (b128 topk128, which went to "wgmma_f16" before 56c1c77) and a call of two scopes
    of 2048 tokens a query in all (b8); no sweep has such a shape. At 17-32 heads a call of two scopes from
    H32_WS_MIN_TOKENS_SM90 tokens still runs rung 15 (unmeasured: no sweep has 32 heads with an extra scope). Any
    other GPU: :func:`portable_kernel`.

    Why: the crossover and heads sweeps, each rule checked by the next sweeps; the tables, the margins and the history
    are in docs/decisions.md ("What `auto` runs on sm_90"). The tables that hold the rule as it stands (the margins:
    tests/test_registry.py, HOPPER_MARGINS and PRODUCTION_MARGINS):
    data/bench_h100_80gb_hbm3_20261208-0018_crossover.csv, data/bench_h100_80gb_hbm3_20261208-0019_heads.csv and
    data/bench_h100_80gb_hbm3_20261208-0022_production.csv (an H100, 90799f7, kernel hash c0e8582a6595; every rung
    also timed by name; measured under the rule before the two steps of the commit after, rung 15 at <= 16 heads
    with two scopes and rung 25 at 2**18 with long rows): within 2% of the fastest Hopper rung at 64 of the 65
    crossover shapes (b4 h128 topk2048 2.5%: wgmma_xchg 21.73 us against rung 15's 21.20; 1.8% in the crossover
    before) and all 16 heads shapes, and within 3% at 25 of the 27
    production shapes; the two over are b1 and b4 h16, 8.4-8.7 us calls where wgmma_xchg and wgmma_f16 trade places
    run to run (wgmma_f16 0.960-1.042x wgmma_xchg's time at b1-b8 h16 in the six H100 production tables since
    2026-12-07). b1 h128 topk2048, 4.5% under the rule before (rung 26 14.24 us against rung 25's 13.63), is rung
    25's own time now. The tables before these (e44d2e2, kernel hash 05a692ccfbbd, data/archive/): within 2% at all
    65 crossover shapes and all 16 heads shapes. The 2**18 step at 64 heads moved b8 h64 topk512 from wgmma_xchg,
    2.9% behind there at e44d2e2 (13.86 us against wgmma_f16_2cta's 13.47; the two-block rung was ahead in 10 of the
    12 H100 crossovers of 2026-12-06/07, by 0.2-3.5%, and behind in 2 by 0.1-0.2%).
    b8 h48 topk2048, 2.0% at cc49d4c, is the pick's own time in the heads tables since e44d2e2. The tables before
    those (cc49d4c, kernel hash e88dc48456ea, data/archive/): within 2% at all 65 crossover shapes and 15 of the 16
    heads shapes. Four of the five shapes over 2% in the tables at 4f5d850 (b1 h16, b8 h64, b2 h64, b1 h128
    topk2048, between rungs whose machine code had not changed) were within 1.2% at cc49d4c: run-to-run spread
    between machines; the fifth, b128 h16 topk2048, is the step below.
    At <= 16 heads the 64-head block ran calls from 2**18 tokens until rung 13's barriers were cut (4f5d850); since
    then rung 13 was ahead of it at b128, b192 and b256 h16 topk2048 (one H100 call: 86.88 / 157.30 / 165.37 us
    against 87.23 / 163.42 / 167.53, data/explore/explore_h100_20261207-0950_h16_step.csv; in the crossover at cc49d4c
    84.33 and 162.29 against the block's 85.61 and 167.30, in the one above 83.70 and 161.48 against 85.32 and
    166.89), so that step is gone. Every call measured at 2**18
    tokens and more is s_q 1, topk 2048, b128-b256: rung 13 at larger calls, or at other row lengths of that size,
    is the same kernel on more programs, not a measured pick. On the H200 at 877f643,
    before the staged output, wgmma_f16 was 4% ahead of rung 15 at b128 h64 topk512 (40.18 against 41.80): not
    measured since. The rule
    was derived from the H100's crossovers at 56c1c77 (the 2**18 head-token step at >= 33 heads) and aa5fd52
    (data/bench_h100_80gb_hbm3_20261206-0420_crossover.csv, ..._0422_heads.csv), the partial one at 11c3638 (rung 15
    two tiles ahead at two head groups; data/explore/explore_h100_20261206-0737_crossover_partial.csv) and the
    H200's at 877f643, before the producers' L2
    prefetch (data/bench_h200_20261205-1812_crossover.csv, ..._1815_heads.csv). The H200's put rung 24 first at b32-b64
    h20-32 topk2048 by 4-9%: the next H200 crossover decides H32_WS_MIN_TOKENS_SM90 there. ``tokens`` is the call's
    selected tokens in all: b * s_q * (topk + extra topk).
    """
    if capability != "sm_90":
        return portable_kernel(capability, heads=heads, tokens=tokens, queries=queries)
    if heads <= 16:
        if tokens <= XCHG_MAX_TOKENS_H16:
            return "wgmma_xchg"
        short_rows = queries is not None and not _rows_at_least(JOINED_MAX_TOPK_H16, tokens=tokens, queries=queries)
        if scopes == 2 and tokens >= JOINED_MIN_TOKENS_H16 and short_rows:
            return "wgmma_ws_h64"
        return "wgmma_ws" if tokens >= WS_MIN_TOKENS_H16 else "wgmma_f16"
    one_split = scopes == 1 and queries is not None and queries >= ONE_SPLIT_MIN_QUERIES_SM90
    if heads <= 32:
        if tokens >= H32_WS_MIN_TOKENS_SM90:
            return "wgmma_ws_h64"
        if one_split:
            return "wgmma_f16"
        if tokens >= H32_MIN_TOKENS_SM90:
            return "portable_ws_h32t"
        return "wgmma_f16_2cta" if tokens <= TWO_BLOCK_MAX_TOKENS_H64 else "wgmma_xchg"
    work = max(heads, HEAD_BLOCK) * tokens
    long_rows = _rows_at_least(H32_BAND_MIN_TOPK_SM90, tokens=tokens, queries=queries)
    # on 2**18 itself from 64 heads too, unless the rows are long (b4 h128 topk512: wgmma_xchg 2.7-4.0% behind on
    # the H100 at aa5fd52 and 56c1c77, the two-block rung 0.6-1.3% behind it at 11c3638 and on the H200; b8 h64
    # topk512: wgmma_xchg 0.998-1.035x the two-block rung's time in the twelve H100 crossovers of 2026-12-06/07,
    # 1.017-1.021x by name in the A/B data/explore/explore_h100_20261207-1535_two_block_rule.csv)
    if work < TWO_BLOCK_BELOW_HEAD_TOKENS or (work == TWO_BLOCK_BELOW_HEAD_TOKENS and heads >= HEAD_BLOCK
                                              and not long_rows):
        return "wgmma_f16_2cta"
    # at 2**20 itself only from 64 heads: at 33-63 the padded 64-head block leads (b8 h40 topk2048: 4.7% on the H100
    # at aa5fd52, 6.6% on the H200 at 877f643, the heads sweeps)
    if work < XCHG_MAX_HEAD_TOKENS or (work == XCHG_MAX_HEAD_TOKENS and heads >= HEAD_BLOCK):
        # one scope only: the portable rungs launch a scope at a time (production b8 h128, topk 128 + extra 512,
        # 2**19.3 head-tokens: 27.5 us against wgmma_xchg's 18.8; the production sweeps at c8e518c and dcff189)
        if scopes != 1 or work == XCHG_MAX_HEAD_TOKENS:
            return "wgmma_xchg"
        if work >= H32_BAND_MIN_HEAD_TOKENS_SM90:
            return "portable_ws_h32f"
        return "portable_ws_h32p" if long_rows else "wgmma_xchg"
    return "wgmma_ws_h64"


def _rows_at_least(topk: int, *, tokens: int, queries: int | None) -> bool:
    """Whether a call selects at least ``topk`` tokens a query on average (False where queries is not known)."""
    return queries is not None and tokens >= topk * queries


PORTABLE_CAPABILITIES = ("sm_100", "sm_103", "sm_110", "sm_120", "sm_121")  # warp specialisation, no wgmma


def portable_kernel(capability: str, *, heads: int, tokens: int, queries: int | None = None) -> str:
    """What "auto" runs off sm_90. On a GPU that can run warp-specialised rungs (register reallocation: sm_90 and
    newer; ``PORTABLE_CAPABILITIES``): at <= 32 heads "portable_ws" (16-head groups) below
    PORTABLE_H32_MIN_TOKENS_H16 tokens and "portable_ws_h32t" (one 32-head group) from there; above 32 heads by
    head-tokens (heads * tokens), "portable_ws" below PORTABLE_WS_BELOW_HEAD_TOKENS, "portable_ws_h32p" (rung 25:
    32-head groups planned as such, P as a bf16 pair) below PORTABLE_H32P_BELOW_HEAD_TOKENS, "portable_ws_h32f"
    (rung 26: the same plan, f16 operands) below PORTABLE_H32F_ANY_TOPK_BELOW_HEAD_TOKENS, and up to
    PORTABLE_H32F_MAX_HEAD_TOKENS for calls of PORTABLE_H32F_MIN_TOPK tokens a query (``queries``: b * s_q; None,
    not known: rung 24), "portable_ws_h32t" (rung 24: planned as 64-head programs) otherwise. Elsewhere "tile512".

    Why: the H200 is the proxy; the crossover and heads sweeps time every portable rung, and each rule was checked
    by the next sweeps. The tables, the margins and the history: docs/decisions.md ("What `auto` runs off sm_90").
    The tables that hold the rule as it stands: data/bench_h200_20261205-1812_crossover.csv and
    data/bench_h200_20261205-1815_heads.csv (the margins: tests/test_registry.py, PORTABLE_MARGINS), measured at
    877f643 under this rule, the first crossover after rung 26 took the calls of 2^19-2^22 head-tokens from rung 25
    (out of sample: within 1.9% of the fastest portable rung at every shape).
    """
    if capability not in PORTABLE_CAPABILITIES:
        return "tile512"
    if heads <= 32:  # at 17-32 heads portable_ws runs two 16-head groups: the same tokens threshold as one
        return "portable_ws_h32t" if tokens >= PORTABLE_H32_MIN_TOKENS_H16 else "portable_ws"
    if heads * tokens < PORTABLE_WS_BELOW_HEAD_TOKENS:
        return "portable_ws"
    if heads * tokens < PORTABLE_H32P_BELOW_HEAD_TOKENS:
        return "portable_ws_h32p"
    if heads * tokens < PORTABLE_H32F_ANY_TOPK_BELOW_HEAD_TOKENS:
        return "portable_ws_h32f"
    long_rows = _rows_at_least(PORTABLE_H32F_MIN_TOPK, tokens=tokens, queries=queries)
    return "portable_ws_h32f" if heads * tokens <= PORTABLE_H32F_MAX_HEAD_TOKENS and long_rows else "portable_ws_h32t"


def resolve(impl: str, device, *, heads: int, tokens: int, queries: int | None = None, scopes: int = 1) -> str:
    """The kernel "auto" stands for on ``device``: :func:`auto_kernel` for its GPU; "tile512" on the CPU or
    under the interpreter. A named kernel is returned unchanged."""
    if impl != AUTO:
        return impl
    import torch

    from .kernels.common import INTERPRET
    dev = torch.device(device)
    if dev.type != "cuda" or INTERPRET:
        return "tile512"
    major, minor = torch.cuda.get_device_capability(dev)
    return auto_kernel(f"sm_{major}{minor}", heads=heads, tokens=tokens, queries=queries, scopes=scopes)


def compiled_kernels() -> tuple[str, ...]:
    """Kernels the resource lab can compile: those with a lab signature."""
    return tuple(n for n in names() if REGISTRY[n].lab_signature)


def rungs() -> list[KernelSpec]:
    """The registered rungs of the optimisation ladder, by rung number (the removed ones: data/rungs.csv)."""
    return sorted((s for s in (REGISTRY[n] for n in names()) if s.rung is not None), key=lambda s: s.rung)


_LOADED = []


def _load_builtin():
    if not _LOADED:
        _LOADED.append(True)
        from .kernels import catalog  # noqa: F401  (registers the built-in kernels)
