"""Rung 21 (portable_ws_h32d, issue 24): the 32-head portable kernel with QK split over the 512 columns, 8 consumer
warps, q in registers. The resource lab compiles it on the CPU: for sm_120 and sm_90 it fits sm_120's 101,376 B a
block with no spills at all (issue 24's wording, which rung 20 missed by 24 B) and its SASS has HMMA only; the
committed lab rows say the same, and off sm_90 "auto" runs it above 2**18 head-tokens. (Its numbers on a GPU: the
GPU checks, which run every registered kernel, and data/correctness_h200_*.csv.)"""
import json

import pandas as pd
import pytest

from workbench import registry
from workbench.kernels import portable_ws, portable_ws_h32d
from workbench.kernels.configs import TiledConfig
from workbench.lab.resources import without_interpreter
from workbench.lab.targets import get_target
from workbench.report.results import DATA

NAME = "portable_ws_h32d"
CFG = {"BLOCK_H": 32, "BLOCK_T": 32, "num_warps": 8}
SM120_SHARED = get_target("sm_120").smem_per_block  # 101,376 B


def test_registered_as_rung_21_beside_rung_20_and_run_by_auto_off_hopper():
    spec = registry.get(NAME)
    assert spec.kind == "split" and spec.rung == 21 and not spec.interpretable and spec.pdl
    assert spec.split_granule == 32 and spec.split_waves == 1
    assert spec.fixed_meta == portable_ws_h32d.SWITCHES == portable_ws.SWITCHES  # the same producer
    assert spec.compile_options == {"maxnreg": portable_ws_h32d.MAXNREG}
    assert [spec.check_config(c) for c in spec.check_configs] == [TiledConfig(**CFG)]
    assert spec.prediction and "b64 h64" in spec.prediction and spec.summary
    assert NAME in registry.decode_impls() and NAME in registry.compiled_kernels()
    # 12 warps of 32 threads at MAXNREG fit the 65,536 registers of an SM once
    assert 12 * 32 * portable_ws_h32d.MAXNREG <= 65536 < 12 * 32 * (portable_ws_h32d.MAXNREG + 8)
    assert registry.portable_kernel("sm_120", heads=64, tokens=64 * 2048) == NAME
    assert registry.portable_kernel("sm_120", heads=64, tokens=4096) == "portable_ws"  # 2**18 head-tokens


@pytest.fixture(scope="module")
def lab():
    """Lab rows for sm_120 and sm_90 and the sm_120 PTX, from one process without the interpreter."""
    code = ("import json; from workbench.lab.resources import compile_config, compiled_ptx\n"
            f"rows = [compile_config({NAME!r}, a, {CFG!r}).as_row() for a in ('sm_120', 'sm_90')]\n"
            f"print(json.dumps(dict(rows=rows, ptx=compiled_ptx({NAME!r}, 'sm_120', {CFG!r}))))")
    out = json.loads(without_interpreter(code).splitlines()[-1])
    return {r["arch"]: r for r in out["rows"]} | {"ptx": out["ptx"]}


def test_the_partitions_register_shares(lab):
    """sm_120 PTX: the producer's 4 warps rise to PRODUCER_REGS (96), the consumer's 8 settle at the rest of
    12 x MAXNREG rounded down to a multiple of 8, 200: its accumulator (64), q (32) and a tile's scores (32) a
    thread fit there without spilling (the lab test below)."""
    import re
    counts = {(kind, int(n)) for kind, n in
              re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", lab["ptx"])}
    producer = portable_ws_h32d.SWITCHES["PRODUCER_REGS"]
    consumer = (12 * portable_ws_h32d.MAXNREG - 4 * producer) // 8 // 8 * 8
    assert consumer == 200
    assert ("inc", producer) in counts and ("dec", consumer) in counts, counts
    assert "mma.sync.aligned.m16n8k16" in lab["ptx"] and "wgmma" not in lab["ptx"]


@pytest.mark.parametrize("arch", ["sm_120", "sm_90"])
def test_compiles_with_hmma_only_and_no_spills_and_fits_sm120(lab, arch):
    r = lab[arch]
    assert r["status"] == "fits", r["reason"]
    assert r["mma"] == "HMMA" and r["hgmma"] == 0 and r["utcmma"] == 0
    assert r["hmma"] == 64  # a warp a tile: QK 2 x 4 x 4 (32 heads, 32 tokens, 64 columns) and PV 2 x 8 x 2
    assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["stack_bytes"] == 0
    # the partial scores reuse q's 32 KB: the block no bigger than the model, under sm_120's limit
    assert r["shared_bytes"] <= r["model_shared_bytes"] <= SM120_SHARED
    assert r["registers"] <= portable_ws_h32d.MAXNREG
    assert r["blocks_per_sm"] == 1 and r["warps_per_sm"] == 12


@pytest.mark.parametrize("arch", ["sm_120", "sm_100", "sm_90"])
def test_the_committed_lab_rows_are_this_compile(lab, arch):
    rows = pd.read_csv(DATA / f"resources_{arch}.csv")
    row = rows[(rows.kernel == NAME) & (rows.config == TiledConfig(**CFG).label)]
    assert len(row) == 1
    row = row.iloc[0]
    assert row.status == "fits" and row.mma == "HMMA" and row.spill_stores == 0 and row.stack_bytes == 0
    if arch in lab:
        assert (row.shared_bytes, row.registers) == (lab[arch]["shared_bytes"], lab[arch]["registers"])
