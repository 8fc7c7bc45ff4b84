"""compute-sanitizer's target for rung 15's two-tiles-ahead build (wgmma_ws_h64 at PF_AHEAD 2), which only calls of two
64-head groups or more with splits of 512 tokens or more reach (``wgmma_ws_h64.prefetch_ahead``); no catalogue case
does. It runs the hostile catalogue entry ``h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid`` (page size 61, the sink,
topk_length with 0 and past topk, -1 and out-of-range indices, an all-invalid query, a non-default sm_scale) at b16
h128 topk2048, records each launch's (head groups, tokens a split, PF_AHEAD) and fails unless one ran at PF 2 and
the output matches the fp32 reference. GPU only (sm_90):

    compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/memcheck_pf2.py

(``PF2_MEMCHECK=1 scripts/gpu_session.sh`` runs it so, into sanitizer_wgmma_ws_h64_pf2.log.)
"""
from __future__ import annotations

import sys

ENTRY = "h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid"
SCALE = dict(batch=16, heads=128, topk=2048)
LABEL = "b16-h128-k2048"


def case_entry():
    """The catalogue entry at SCALE (its own seed), as a GPU-only case."""
    from workbench.format import cases as catalogue
    e = catalogue.get(ENTRY)
    return catalogue.HostileCase(f"{e.id}@{LABEL}", {**e.spec, **SCALE, "seed": e.seed}, e.covers, "gpu")


def main() -> int:
    import torch

    from workbench import sparse_mla_decode
    from workbench.gpu_check import build_with_reference, fixed_config
    from workbench.kernels import wgmma_ws_h64
    from workbench.metrics import compare

    seen = []
    choose = wgmma_ws_h64.prefetch_ahead

    def recorded(groups, tokens_per_split):
        pf = choose(groups, tokens_per_split)
        seen.append((groups, tokens_per_split, pf))
        return pf

    wgmma_ws_h64.prefetch_ahead = recorded
    case, ref = build_with_reference(case_entry(), "cuda")
    out, lse = sparse_mla_decode(**case.kwargs(), impl="wgmma_ws_h64", config=fixed_config("wgmma_ws_h64"))
    torch.cuda.synchronize()
    m = compare(out.float(), lse, *ref)
    print(f"memcheck_pf2: launches (head groups, tokens a split, PF_AHEAD) {seen}; passed={m['passed']} "
          f"rel={m['out_rel_norm']:.2e}")
    if not any(pf == 2 for _, _, pf in seen):
        print("memcheck_pf2: no launch ran at PF_AHEAD 2", file=sys.stderr)
        return 1
    return 0 if m["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
