"""One decode shape, run a few times, for Nsight Compute: ``python -m workbench.lab.profile --impl tile512 ...``.

ncu captures the kernels of the last call, which runs inside the NVTX range ``PROFILED_RANGE`` (the warm-up calls
before it compile the kernels and autotune the combine, whose autotuning launches it many times: a launch count
from the start would land among those); the inputs are the bench's cold-KV pool, so the profile sees what the
timings see. Used by scripts/gpu_session.sh (NCU=1).
"""
from __future__ import annotations

import argparse
import json

import torch

PROFILED_RANGE = "profiled"  # gpu_session.sh's ncu: --nvtx --nvtx-include "profiled/"


def run(impl: str, batch: int, heads: int, topk: int, config: dict | None, calls: int = 3) -> None:
    from ..bench import BenchShape, InputPool, make_provider
    pool = InputPool("cuda", pool_tokens=1 << 18)
    kw = pool.inputs(BenchShape(batch, heads, topk), rotations=1)[0]
    fn = make_provider(impl).prepare(kw, config)
    for _ in range(calls - 1):
        fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(PROFILED_RANGE)
    fn()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


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
