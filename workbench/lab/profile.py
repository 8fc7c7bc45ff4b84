"""One decode shape, run a few times, for Nsight Compute: ``python -m workbench.lab.profile --impl tile512 ...``.

ncu captures the kernels of one call after a warm-up call; the inputs are the bench's cold-KV
pool, so the profile sees what the timings see. Used by scripts/gpu_session.sh (NCU=1).
"""
from __future__ import annotations

import argparse
import json

import torch


def run(impl: str, batch: int, heads: int, topk: int, config: dict | None, calls: int = 3) -> None:
    from ..bench import BenchShape, InputPool, make_provider
    pool = InputPool("cuda", pool_tokens=1 << 18)
    kw = pool.inputs(BenchShape(batch, heads, topk), rotations=1)[0]
    fn = make_provider(impl).prepare(kw, config)
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.lab.profile", description=__doc__)
    p.add_argument("--impl", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--topk", type=int, default=2048)
    p.add_argument("--config", type=json.loads, default=None, help='JSON, e.g. \'{"BLOCK_H": 16, "BLOCK_T": 32}\'')
    a = p.parse_args(argv)
    run(a.impl, a.batch, a.heads, a.topk, a.config or None)  # {} (as gpu_session.sh passes): the default
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
