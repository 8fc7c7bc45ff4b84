"""Golden cases (FlashMLA's outputs) for the named impls on this GPU; one line each. GPU session helper."""
import sys

import torch

import workbench as wb
from workbench.format.golden import golden_expected, golden_kwargs, golden_names, load_golden

bad = 0
for impl in sys.argv[1:]:
    for name in golden_names():
        g = load_golden(name)
        kw = golden_kwargs(g, "cuda")
        out, lse = wb.sparse_mla_decode(**kw, impl=impl)
        m = wb.compare(out.float(), lse, *golden_expected(g))
        bad += not m["passed"]
        print(f"{impl:16s} {name:45s} passed={m['passed']} rel={m['out_rel_norm']:.2e} elem={m['out_elem_ratio']:.3f} "
              f"lse={m['lse_ratio']:.4f}")
torch.cuda.synchronize()
sys.exit(1 if bad else 0)
