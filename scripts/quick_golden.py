"""Golden cases (FlashMLA's outputs) for the named impls on this GPU; one line each. GPU session helper.

Usage: python scripts/quick_golden.py IMPL [IMPL ...]   (e.g. auto wgmma_ws_h64); exit 1 if any case fails.
"""
import argparse
import sys

import torch

import workbench as wb
from workbench.format.golden import golden_expected, golden_kwargs, golden_names, load_golden


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("impls", nargs="+", choices=wb.registry.decode_impls(), metavar="IMPL",
                   help=f"one of {', '.join(wb.registry.decode_impls())}")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU: the golden cases are checked as the GPU runs them")
    bad = 0
    for impl in a.impls:
        for name in golden_names():
            g = load_golden(name)
            out, lse = wb.sparse_mla_decode(**golden_kwargs(g, "cuda"), impl=impl)
            m = wb.compare(out.float(), lse, *golden_expected(g))
            bad += not m["passed"]
            print(f"{impl:16s} {name:45s} passed={m['passed']} rel={m['out_rel_norm']:.2e} "
                  f"elem={m['out_elem_ratio']:.3f} lse={m['lse_ratio']:.4f}")
    torch.cuda.synchronize()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
