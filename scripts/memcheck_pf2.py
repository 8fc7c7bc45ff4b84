"""compute-sanitizer's target for rung 15's two-tiles-ahead builds (wgmma_ws_h64 at PF_AHEAD 2), which only calls of
two 64-head groups or more with splits of 512 tokens or more reach (``wgmma_ws_h64.prefetch_ahead``); no catalogue
case does. Two calls, as compute-sanitizer's other cases run (``gpu_check.run_sanitizer_case``), each checked against
the fp32 reference:

- ``one-scope``: the hostile entry ``h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid`` (page size 61, the sink,
  topk_length with 0 and past topk, -1 and out-of-range indices, an all-invalid query, a non-default sm_scale) at
  b16 h128 topk2048;
- ``joined``: the entry ``h8-k40-bs256-sink-extra-bs2-xtklen`` (pages of 256, an extra scope in pages of 2 with its
  own topk_length, out-of-range indices, the sink) at the production shape's sizes, b64 h128 topk128 + extra 512:
  one launch over both scopes as one stream (JOINED), the build the production sweep times.

It records each launch's (grid, PF_AHEAD, JOINED) and fails unless each call ran a launch at PF_AHEAD 2 (and the
joined call one with JOINED). GPU only (sm_90):

    compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/memcheck_pf2.py [one-scope|joined ...]

(``PF2_MEMCHECK=1 scripts/gpu_session.sh`` runs it so, into sanitizer_wgmma_ws_h64_pf2.log.)
"""
from __future__ import annotations

import dataclasses
import sys

CALLS = {  # name: (catalogue entry, gpu scale, needs a JOINED launch)
    "one-scope": ("h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid", dict(batch=16, heads=128, topk=2048), False),
    "joined": ("h8-k40-bs256-sink-extra-bs2-xtklen", dict(batch=64, heads=128, topk=128, extra_topk=512), True),
}


def case_entry(name: str):
    """CALLS[name]'s catalogue entry at its scale, as HostileCase.scaled builds an entry's GPU version (its own seed)."""
    from workbench.format import cases as catalogue
    entry, scale, _ = CALLS[name]
    return dataclasses.replace(catalogue.get(entry), gpu_scale=scale).scaled()


def main(names: list[str]) -> int:
    from workbench.gpu_check import run_sanitizer_case
    from workbench.kernels import wgmma_ws_h64

    unknown = sorted(set(names) - set(CALLS))
    if unknown:
        print(f"memcheck_pf2: unknown calls {unknown}; there are {sorted(CALLS)}", file=sys.stderr)
        return 2
    launch = wgmma_ws_h64.launch
    failed = []
    for name in names:
        seen = []

        def recorded(kernel, grid, kwargs):
            seen.append((tuple(grid), kwargs["PF_AHEAD"], kwargs["JOINED"]))
            return launch(kernel, grid, kwargs)

        wgmma_ws_h64.launch = recorded
        try:
            run_sanitizer_case("wgmma_ws_h64", case_entry(name))
        finally:
            wgmma_ws_h64.launch = launch
        print(f"memcheck_pf2 {name}: launches (grid, PF_AHEAD, JOINED) {seen}")
        needs_joined = CALLS[name][2]
        if not any(pf == 2 and (joined or not needs_joined) for _, pf, joined in seen):
            print(f"memcheck_pf2 {name}: no launch ran at PF_AHEAD 2{' joined' if needs_joined else ''}",
                  file=sys.stderr)
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(CALLS)))
