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
ONE_SPLIT_MIN_QUERIES_SM90 = 89     # 17-64 heads: from 89 queries a 64-head block's split plan on 132 SMs is one
                                    # split (decode.plan_splits, waves 1), and wgmma_f16 runs it with no combine
                                    # (KernelSpec.direct): b128 topk512 32.87 us against rung 24's 37.29
                                    # (data/bench_h200_20261204-1125_crossover.csv)
HEAD_BLOCK = 64                      # 33-63 heads run as one 64-head block, so auto counts them as 64
WS_MIN_TOKENS_H16 = 65536            # <= 16 heads: from b32 topk2048 the warp-specialised kernel wins
XCHG_MAX_TOKENS_H16 = 8192           # <= 16 heads (one 16-head group): up to b4 topk2048 the bf16 rung wins
TWO_BLOCK_BELOW_HEAD_TOKENS = 1 << 18  # >= 33 heads: below b8 topk512 at h64, b4 topk512 at h128
XCHG_BELOW_HEAD_TOKENS = 1 << 20     # >= 33 heads: below b8 topk2048 at h64, b4 topk2048 at h128; then the 64-head block
ONE_SPLIT_MAX_TOPK_SM90 = 512        # >= 33 heads, from XCHG_BELOW_HEAD_TOKENS: a call of one split (from
                                     # ONE_SPLIT_MIN_QUERIES_SM90 queries) of at most 512 tokens a query runs
                                     # wgmma_f16: b128 h64 topk512 39.6-40.0 us against the 64-head block's 41.5-41.8
                                     # in three crossover runs (1125, 1322, 1515), b128 h128 within 0.5-2.1%
PORTABLE_WS_MAX_HEAD_TOKENS = 1 << 18  # off Hopper, > 32 heads: up to b8 topk512 (b2 topk2048) at h64, b4 topk512 at
                                       # h128; then the 32-head groups
PORTABLE_H32P_MAX_HEAD_TOKENS = 1 << 21  # off Hopper, > 32 heads: up to b64 topk512 (b16 topk2048) at h64 the 32-head
                                         # rung that plans on its own head group (P as a bf16 pair); then rung 24
PORTABLE_H32_MIN_TOKENS_H16 = 8192  # off Hopper, <= 32 heads: from b4 topk2048 (b16 topk512) the 32-head kernel (half
                                    # its heads padding at 16) beats portable_ws's split plan (16-head groups)


def auto_kernel(capability: str, *, heads: int, tokens: int, queries: int | None = None, scopes: int = 1) -> str:
    """What "auto" runs on a GPU of ``capability`` ("sm_90", ...) for a call of this size (a pure rule).

    ``queries`` (b * s_q) tells the rule that a call of ``scopes`` == 1 KV scope makes one split (no combine); a
    call with an extra scope has two splits at least, so its query count is never used (None: not known).

    On sm_90: at <= 16 heads (padded to one 16-head group) "wgmma_xchg" up to XCHG_MAX_TOKENS_H16 tokens,
    "wgmma_ws" from WS_MIN_TOKENS_H16, "wgmma_f16" between; at >= 33 heads, by head-tokens (heads * tokens),
    "wgmma_f16_2cta" below TWO_BLOCK_BELOW_HEAD_TOKENS, "wgmma_xchg" below XCHG_BELOW_HEAD_TOKENS, "wgmma_ws_h64"
    from there (but "wgmma_f16" for a one-split call of at most ONE_SPLIT_MAX_TOPK_SM90 tokens a query), with 33-63
    heads counted as HEAD_BLOCK (they run padded to one 64-head block; 65-127 heads count as themselves, though
    they run padded to 128: no count between 64 and 128 was timed); at 17-32 heads "wgmma_f16" for a one-split
    call (from ONE_SPLIT_MIN_QUERIES_SM90 queries), else
    "wgmma_f16_2cta" up to TWO_BLOCK_MAX_TOKENS_H64 tokens, "portable_ws_h32t" (one 32-head block, mma.sync) from
    H32_MIN_TOKENS_SM90 tokens, else "wgmma_xchg". Any other GPU: :func:`portable_kernel`.
    Why: derived from a crossover sweep of 48 shapes (data/archive/bench_h200_20261202-1506_crossover.csv) and, for
    33-63 heads and the xchg boundary, from the crossover and heads sweeps at e5db711
    (data/archive/bench_h200_20261203-0630_crossover.csv, data/archive/bench_h200_20261203-0632_heads.csv): there
    h40 and h48 at b64 topk2048 took 71.2-71.7 us in wgmma_f16's 16-head groups (73.0-73.3 in wgmma_xchg's) and
    64.3-64.7 in the 64-head block (h64: 68.1), and at b8 topk2048 h40 took 19.6 us in wgmma_xchg against 18.7 in
    the block. In the
    sweeps at 8de57d1, which runs this rule (data/archive/bench_h200_20261203-0825_crossover.csv and
    data/archive/bench_h200_20261203-0827_heads.csv), the pick is within 2.7% of the fastest Hopper rung at every
    shape of both (48 and 16; the worst: b32 h64 topk512, wgmma_ws_h64 against wgmma_xchg; docs/decisions.md); in
    those at 9328124 (data/archive/bench_h200_20261204-0101_crossover.csv, data/archive/bench_h200_20261204-0103_heads.csv;
    the Hopper rungs' code unchanged) within 2.8% (the worst again b32 h64 topk512: 23.0 us against 22.4; then b64
    h128 topk2048 in the heads sweep, wgmma_ws_h64's 115.3 against wgmma_ws_bal's 112.4, 2.5%; every other shape
    within 1.9%); in those at 4288413 (data/archive/bench_h200_20261204-0303_crossover.csv) 4.3% at b1 h128
    topk2048, exactly 2**18 head-tokens (wgmma_xchg 16.41 us against wgmma_f16_2cta's 15.73). In those at c6216b0
    (data/archive/bench_h200_20261204-0456_crossover.csv, data/archive/bench_h200_20261204-0457_heads.csv; the Hopper
    rungs' code and this rule unchanged) within 2.0% at every shape but one: b8 h64 topk2048, exactly 2**20 head-tokens, where the
    rule runs wgmma_ws_h64 (22.45 us) and wgmma_xchg takes 21.64, 3.7% (issue 25 asks for 3%); the heads sweep of
    the same call timed that shape at 22.08 against 21.90 (0.8%), and b1 h128 topk2048 went the rule's way this time
    (wgmma_xchg 15.55, wgmma_f16_2cta 15.67). So the shapes on the rule's boundaries change winner from run to run,
    by up to ~4%. Moving a boundary does not remove that: at 2**18 head-tokens, in the six crossover runs from
    8de57d1 to c6216b0, b8 h64 topk512 and b4 h128 topk512 went to wgmma_xchg ahead of wgmma_f16_2cta every time
    (by 0.6-6.2% at b4 h128) and b2 h64 topk2048 to wgmma_f16_2cta or a tie every time, while b1 h128 topk2048
    went 4 to 2 to wgmma_xchg; b2 h64 topk2048 and b8 h64 topk512 have the same heads and tokens, so a rule of heads
    and tokens alone cannot pick both (docs/decisions.md). In those at 8431ecd
    (data/archive/bench_h200_20261204-0600_crossover.csv, data/archive/bench_h200_20261204-0602_heads.csv; the Hopper
    rungs' code and this rule unchanged) within 2.2% at every shape but b2 h64 topk2048, 2**18 head-tokens, where
    wgmma_xchg took 16.65 us and wgmma_f16_2cta 16.17 (3.006%, just over issue 25's 3%; the seventh run in a row that
    shape goes to wgmma_f16_2cta or ties); the next: b32 h64 topk512 and b128 h128 topk2048, 2.1% each. In those at
    f78a059 (data/archive/bench_h200_20261204-0728_crossover.csv, data/archive/bench_h200_20261204-0730_heads.csv; the Hopper
    rungs' code and this rule unchanged) within 2.0% at every shape but b8 h64 topk2048, 2**20 head-tokens, where
    wgmma_ws_h64 took 22.16 us and wgmma_xchg 21.51 (3.02%; the heads sweep of the same call: 22.07 against 21.82,
    1.2%), and b1 h128 topk2048, 2**18, wgmma_xchg 16.03 against wgmma_f16_2cta's 15.62 (2.6%): both on boundaries
    again. In the heads sweep at 0590dbc (data/archive/bench_h200_20261204-0852_heads.csv; kernels and rule unchanged) within
    0.7% at every shape (b64 h128: wgmma_ws_h64 114.3 us against wgmma_ws_bal's 113.6). At 695bc42 (a call of one
    split runs no combine, KernelSpec.direct; the 32-head band from the heads sweep at 0590dbc and
    data/explore/explore_h200_20261204-0839_h32_hopper.csv) the crossover sweep times 32 heads too
    (data/bench_h200_20261204-1125_crossover.csv, data/bench_h200_20261204-1123_heads.csv): the heads sweep within
    0.7% at every shape; the crossover within 2.0% at every shape but five (two over 3%): b128 h32 topk512 13.4% (the band runs
    portable_ws_h32t, 37.29 us, where wgmma_f16 runs one split with no combine, 32.87: tokens alone cannot see that
    128 queries make one split; b32 topk2048 has the same tokens, four splits, and goes to portable_ws_h32t, 36.34
    against wgmma_f16's 36.93), b128 h64 topk512 4.0% (wgmma_ws_h64 41.47
    against wgmma_f16's 39.89, both one split), b16 h32 topk512 2.95% (wgmma_f16 14.05 against wgmma_xchg's 13.65), b2
    h64 topk2048 2.9% (wgmma_xchg 16.97 against wgmma_f16_2cta's 16.49, on the 2**18 boundary again) and b128 h128
    topk512 2.3% (wgmma_ws_h64 75.99 against wgmma_ws_bal's 74.30). The next rule should take the query count (one
    split or not), not tokens alone (docs/decisions.md). At d94297c (this rule, with ONE_SPLIT_MIN_QUERIES_SM90; the
    wgmma rungs run both scopes in one launch, which no crossover shape has) in
    data/archive/bench_h200_20261204-1322_crossover.csv and data/archive/bench_h200_20261204-1321_heads.csv: b128 h32 topk512 is the
    fastest (wgmma_f16, one split); the heads sweep within 1.9% at every shape (b8 h64 topk2048: wgmma_ws_h64 22.12
    against wgmma_xchg's 21.70); the crossover within 2.0% at every shape but five: b128 h64 topk512 5.7%
    (wgmma_ws_h64 41.84 against wgmma_f16's 39.58, one split each), b16 h32 topk512 4.7% (wgmma_f16 14.04 against
    wgmma_xchg's 13.41), b8 h64 topk512 2.3% (wgmma_xchg 13.75 against wgmma_ws_bal's 13.44), b32 h64 topk512 2.3%
    (wgmma_ws_h64 22.29 against wgmma_xchg's 21.80) and b2 h64 topk2048 2.1% (wgmma_xchg 16.65 against
    wgmma_f16_2cta's 16.31). Two over issue 25's 3%, both at topk 512, where a 64-head block's call is short. At
    626d036 (two scopes' splits shared by largest remainder; the portable rungs write a call of one split directly)
    in data/archive/bench_h200_20261204-1515_crossover.csv and data/archive/bench_h200_20261204-1514_heads.csv: the crossover within
    2.0% at every shape but three: b16 h32 topk512 5.4% (wgmma_f16 14.14 us against wgmma_xchg's 13.41), b128 h64
    topk512 4.3% (wgmma_ws_h64 41.68 against wgmma_f16's 39.98) and b32 h64 topk512 2.2% (wgmma_ws_h64 21.42 against
    wgmma_xchg's 20.95); the heads sweep within 2.0% at every shape but b8 h64 topk2048, 2**20 head-tokens, 2.9%
    (wgmma_ws_h64 22.33 against wgmma_xchg's 21.71). The same two shapes over 3% as at d94297c: b128 h64 topk512 for
    the third run in a row (4.0-5.7%), b16 h32 topk512 over 2.9% in all three (2.95-5.4%). So from the commit after
    e29171b both go the way those three runs went: at 17-32 heads between TWO_BLOCK_MAX_TOKENS_H64 and
    H32_MIN_TOKENS_SM90 "wgmma_xchg" (b16 h32 topk512 13.41-13.65 us against wgmma_f16's 14.04-14.14; b4 h32
    topk2048, the band's other shape, within 1.4% of wgmma_f16 in all three), and ONE_SPLIT_MAX_TOPK_SM90 above.
    In the sweeps at dcff189, which run this rule (data/bench_h200_20261204-1707_crossover.csv,
    data/bench_h200_20261204-1705_heads.csv), both shapes go to the fastest rung (b16 h32 topk512 wgmma_xchg 13.70
    us, wgmma_f16 13.98; b128 h64 topk512 wgmma_f16 39.43, the 64-head rungs 41.1-41.5; b128 h128 topk512 wgmma_f16
    74.80 against wgmma_ws_h64's 74.21, 0.8%), the heads sweep is within 0.9% at every shape and the crossover
    within 2.0% at every shape but three, each under issue 25's 3% and each on a boundary of the rule: b16 h128
    topk512 2.8% (wgmma_ws_h64 20.45 us against wgmma_xchg's 19.90; 2**20 head-tokens), b1 h128 topk2048 2.3%
    (wgmma_xchg 15.84 against wgmma_f16_2cta's 15.48; 2**18) and b2 h64 topk2048 2.3% (16.21 against 15.85; 2**18).
    That is among the Hopper rungs the rule chooses from. Rung 25 (portable_ws_h32p, mma.sync, its 32-head plan),
    timed for the first time in the same sweeps, beats wgmma_xchg at six shapes of 2**18-2**19 head-tokens above 32
    heads, which the rule does not run it at: b2 h128 topk2048 by 14.2% (16.19 us against 18.48), b4 h64 topk2048
    12.1% (17.28 against 19.36), b8 h128 topk512 10.1% (16.04 against 17.67), b2 h64 topk2048 7.4% (15.10 against
    16.21), b16 h64 topk512 6.4% (17.04 against 18.14) and b1 h128 topk2048 6.2% (14.92 against 15.84); at 2**18 and
    topk512 wgmma_xchg stays first (b4 h128 13.05 against 14.18, b8 h64 13.44 against 14.41), from 2**20 the 64-head
    rungs or wgmma_xchg. One run only; the band it suggests (rung 25 from 2**19 to 2**20 head-tokens on sm_90) is in
    data/explore/explore_untimed_20261204-1730_h32p_from_2_18.patch, untimed.
    ``tokens`` is the call's selected tokens in all: b * s_q * (topk + extra topk).
    """
    if capability != "sm_90":
        return portable_kernel(capability, heads=heads, tokens=tokens)
    if heads <= 16:
        if tokens <= XCHG_MAX_TOKENS_H16:
            return "wgmma_xchg"
        return "wgmma_ws" if tokens >= WS_MIN_TOKENS_H16 else "wgmma_f16"
    one_split = scopes == 1 and queries is not None and queries >= ONE_SPLIT_MIN_QUERIES_SM90
    if heads <= 32:
        if one_split:
            return "wgmma_f16"
        if tokens >= H32_MIN_TOKENS_SM90:
            return "portable_ws_h32t"
        return "wgmma_f16_2cta" if tokens <= TWO_BLOCK_MAX_TOKENS_H64 else "wgmma_xchg"
    work = max(heads, HEAD_BLOCK) * tokens
    if work < TWO_BLOCK_BELOW_HEAD_TOKENS:
        return "wgmma_f16_2cta"
    if work < XCHG_BELOW_HEAD_TOKENS:
        return "wgmma_xchg"
    return "wgmma_f16" if one_split and tokens <= ONE_SPLIT_MAX_TOPK_SM90 * queries else "wgmma_ws_h64"


PORTABLE_CAPABILITIES = ("sm_100", "sm_103", "sm_110", "sm_120", "sm_121")  # warp specialisation, no wgmma


def portable_kernel(capability: str, *, heads: int, tokens: int) -> str:
    """What "auto" runs off sm_90. On a GPU that can run warp-specialised rungs (register reallocation: sm_90 and
    newer; ``PORTABLE_CAPABILITIES``): at <= 32 heads "portable_ws" (16-head groups) below
    PORTABLE_H32_MIN_TOKENS_H16 tokens and "portable_ws_h32t" (one 32-head group) from there; above 32 heads by
    head-tokens (heads * tokens), "portable_ws" up to PORTABLE_WS_MAX_HEAD_TOKENS, "portable_ws_h32p" (32-head groups
    planned as such, P as a bf16 pair) up to PORTABLE_H32P_MAX_HEAD_TOKENS, "portable_ws_h32t" (planned as 64-head
    programs) beyond. Elsewhere "tile512". Why: on the H200 (the proxy), portable_ws's 32-head successors take 0.55-0.90x its
    time above 2**18 head-tokens at every head count from 20 to 128 and 0.99-1.21x at or below it (the sweeps at
    9328124, data/archive/bench_h200_20261204-0101_crossover.csv and data/archive/bench_h200_20261204-0103_heads.csv);
    each rung since took its predecessor's place on a same-run A/B or the sweeps (docs/decisions.md, rungs 21-24).
    Rung 24 (portable_ws_h32t) took rung 23's place at the commit after db69d6c, from an A/B of the same kernel as an
    uncommitted variant (data/explore/explore_h200_20261204-0620_h32t.csv: 0.89-1.00x rung 23's time at the 8 shapes
    timed, none slower; 0.92x at b64 h16 topk2048 as one padded group). At 16 heads rung 23's one padded group beat
    portable_ws at 8192-16384 tokens and at b16 topk2048 (32768) in the sweeps at 8431ecd
    (data/archive/bench_h200_20261204-0600_crossover.csv, data/archive/bench_h200_20261204-0602_heads.csv: b4 topk2048
    14.40 us against 18.06, b8 topk2048 16.52 against 18.28, b16 topk512 10.91 against 12.73, b32 topk512 14.43
    against 15.11, b16 topk2048 21.72 against 22.51), and lost below 8192 tokens, at b64 topk512 (32768: 21.43 against
    21.24) and at every larger call (b64 topk2048 62.2 against 58.5, the heads sweep 62.3 against 57.6; b128 topk2048
    116.4 against 104.8). Rung 24 took b64 topk2048 in 57.0 us in the A/B, level with portable_ws, so at this commit
    rung 23's band of 8192-16384 tokens became a threshold, which the sweeps at this commit test. In the sweeps at
    f78a059, which run this rule (data/archive/bench_h200_20261204-0728_crossover.csv,
    data/archive/bench_h200_20261204-0730_heads.csv), the threshold holds at every 16-head shape: rung 24 wins from
    b4 topk2048 (13.75 us against portable_ws's 17.59) to b128 topk2048 (103.02 against 103.83) and portable_ws
    below 8192 tokens (b8 topk512: 9.23 against 9.67). Above
    16 heads rung 24 is the fastest portable rung at every shape above 2**18 head-tokens, and the pick is within 0.5%
    at every shape but three calls of one or two rows at topk 2048: b1 h128 5.4% (portable_ws 22.64 us against
    tile512's 21.48), b2 h64 3.5% (portable_ws 23.06 against tile512's 22.29) and b1 h64 1.8% (portable_ws 16.56
    against rung 20's 16.26) (docs/decisions.md). In the heads sweep at 0590dbc
    (data/archive/bench_h200_20261204-0852_heads.csv; kernels and rule unchanged) the pick is the fastest portable rung at
    every shape. In the sweeps at 695bc42 (data/bench_h200_20261204-1125_crossover.csv, which times 32 heads for the
    first time, and data/bench_h200_20261204-1123_heads.csv; the portable kernels and this rule unchanged) the 32-head
    rows show the 2**18 boundary wrong at 32 heads: b4 h32 topk2048 (exactly 2**18) runs portable_ws in 23.78 us
    against portable_ws_h32t's 15.97 (1.49x), b16 h32 topk512 18.67 against portable_ws_h32q's 14.06 (1.33x);
    elsewhere within 1.2% (b1 h64 topk2048 1.2%, b4 h64 topk512 0.6%) and the heads sweep the fastest at every
    shape. At 32 heads portable_ws runs two 16-head groups, each gathering every token: the next rule should start
    the 32-head kernel below 2**18 there (docs/decisions.md). At d94297c, with 17-32 heads on the 16-head threshold
    (data/archive/bench_h200_20261204-1322_crossover.csv, data/archive/bench_h200_20261204-1321_heads.csv, timed on the H200): b4
    h32 topk2048 is the fastest now; the heads sweep the fastest at every shape; the crossover within 0.5% at every
    shape above 16 heads but six: b1 h128 topk2048 4.6% (portable_ws 22.29 against tile512's 21.32), b2 h64 topk2048
    3.7% (23.55 against tile512's 22.70), b16 h32 topk512 3.3% (portable_ws_h32t 14.40 against portable_ws_h32q's
    13.94), b1 h64 topk2048 2.8% (portable_ws 16.94 against portable_ws_h32q's 16.48), b4 h64 topk512 0.9% and b8
    h32 topk512 0.6%. At 626d036 (data/archive/bench_h200_20261204-1515_crossover.csv, data/archive/bench_h200_20261204-1514_heads.csv;
    one-split calls now direct): the heads sweep the fastest at every shape; the crossover within 0.5% at every shape
    above 16 heads but five: b2 h64 topk2048 3.2% (portable_ws 23.13 us against tile512's 22.42), b1 h128 topk2048
    3.1% (22.35 against tile512's 21.69), b16 h32 topk512 1.5% (portable_ws_h32t 14.17 against portable_ws_h32q's
    13.96), b1 h64 topk2048 1.1% (portable_ws 16.41 against portable_ws_h32q's 16.23) and b2 h128 topk512 0.7%;
    within 2% at every 16-head shape. From the commit after e29171b, rung 25 (portable_ws_h32p) runs above 32 heads
    between 2**18 and 2**21 head-tokens, from its A/B as xp_h32t_pair
    (data/explore/explore_h200_20261204-1637_p_pair.csv): b8 h64 topk2048 (2**20) 23.2 us against rung 24's 27.8,
    b64 h64 topk512 (2**21) 34.9 against 41.6, and slower above (b64 h64 topk2048, 2**23: 113.5 against 109.7); the
    other shapes of the band from rung 24 on the same plan without the pair, about 10% slower than with it
    (explore_h200_20261204-1442_split_block_h.csv: b16 h64 topk2048 31.9 against 38.7, b8 h128 topk512 15.8 against
    21.3, b16 h128 topk2048 53.0 against 59.5, level from 2**22). In the sweeps at dcff189, which run this rule
    (data/bench_h200_20261204-1707_crossover.csv, data/bench_h200_20261204-1705_heads.csv): rung 25 is the fastest
    portable rung at every shape of its band (b8 h64 topk2048 22.91 us against rung 24's 27.15; b64 h64 topk512
    34.29 against 40.15) and level above it (b32 h64 topk2048 62.14 against 61.76); the heads sweep is the fastest
    at every shape; the crossover within 0.5% at every shape above 16 heads but six. Four of them sit exactly on
    2**18 head-tokens, where this rule still runs portable_ws and rung 25, which the A/B did not time there, is far
    faster: b2 h64 topk2048 1.53x (portable_ws 23.13 us against rung 25's 15.10), b1 h128 topk2048 1.50x (22.40
    against 14.92), b8 h64 topk512 1.24x (17.92 against 14.41) and b4 h128 topk512 1.22x (17.30 against 14.18); at
    2**17 portable_ws stays first (b4 h64 topk512 10.82 against 11.56, b2 h128 topk512 10.94 against 11.58), so
    rung 25's band should start at 2**18 inclusive (written, not applied:
    data/explore/explore_untimed_20261204-1730_h32p_from_2_18.patch: it changes this module, and every table would go
    stale with no device time left to re-measure them). The other two: b1 h64 topk2048 1.0% (portable_ws 16.49
    against portable_ws_h32q's 16.33) and b16 h32 topk512 0.6%; within 2% at every 16-head shape."""
    if capability not in PORTABLE_CAPABILITIES:
        return "tile512"
    if heads <= 32:  # at 17-32 heads portable_ws runs two 16-head groups: the same tokens threshold as one
        return "portable_ws_h32t" if tokens >= PORTABLE_H32_MIN_TOKENS_H16 else "portable_ws"
    if heads * tokens <= PORTABLE_WS_MAX_HEAD_TOKENS:
        return "portable_ws"
    return "portable_ws_h32p" if heads * tokens <= PORTABLE_H32P_MAX_HEAD_TOKENS else "portable_ws_h32t"


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
