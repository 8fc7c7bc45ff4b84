"""compute-sanitizer's target for rung 15's two-tiles-ahead build (wgmma_ws_h64 at PF_AHEAD 2), which only calls of two
64-head groups or more with splits of 512 tokens or more reach (``wgmma_ws_h64.prefetch_ahead``); no catalogue case
does. It runs the hostile catalogue entry ``h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid`` (page size 61, the sink,
topk_length with 0 and past topk, -1 and out-of-range indices, an all-invalid query, a non-default sm_scale) at
SCALE, as compute-sanitizer's other cases run (``gpu_check.run_sanitizer_case``), records each launch's (head
groups, tokens a split, PF_AHEAD) and fails unless one ran at PF 2. GPU only (sm_90):

    compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/memcheck_pf2.py

(``PF2_MEMCHECK=1 scripts/gpu_session.sh`` runs it so, into sanitizer_wgmma_ws_h64_pf2.log.)
"""
from __future__ import annotations

import dataclasses
import sys

ENTRY = "h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid"
SCALE = dict(batch=16, heads=128, topk=2048)


def case_entry():
    """The catalogue entry at SCALE, as HostileCase.scaled builds an entry's GPU version (its own seed)."""
    from workbench.format import cases as catalogue
    return dataclasses.replace(catalogue.get(ENTRY), gpu_scale=SCALE).scaled()


def main() -> int:
    from workbench.gpu_check import run_sanitizer_case
    from workbench.kernels import wgmma_ws_h64

    seen = []
    choose = wgmma_ws_h64.prefetch_ahead

    def recorded(groups, tokens_per_split):
        seen.append((groups, tokens_per_split, choose(groups, tokens_per_split)))
        return seen[-1][2]

    wgmma_ws_h64.prefetch_ahead = recorded
    run_sanitizer_case("wgmma_ws_h64", case_entry())
    print(f"memcheck_pf2: launches (head groups, tokens a split, PF_AHEAD) {seen}")
    if not any(pf == 2 for _, _, pf in seen):
        print("memcheck_pf2: no launch ran at PF_AHEAD 2", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
