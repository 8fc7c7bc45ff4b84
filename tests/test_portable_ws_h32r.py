"""Rung 23 (portable_ws_h32r, issue 24): rung 22's 32-head portable kernel (rung 21's QK split over the 512 columns,
8 consumer warps, q in registers, with its score and P buffers swizzled free of bank conflicts) with the K slot
handed back one partition barrier later, two barriers a tile in the source instead of three. The resource lab
compiles it on the CPU: for sm_120 and sm_90 it fits sm_120's 101,376 B a block with no spills at all (issue 24's
wording, which rung 20 missed by 24 B), its SASS has HMMA only and loads P by ldmatrix; the committed lab rows say the
same, and off sm_90 "auto" runs it above 2**18 head-tokens and at <= 16 heads from 8192 to 16384 tokens. The
swizzles' bank claims are derived here by hand from the layouts' definition. (Its numbers on a GPU: the GPU checks, which run every registered kernel, and
data/correctness_h200_*.csv.)"""
import json

import pandas as pd
import pytest

from workbench import registry
from workbench.kernels import portable_ws, portable_ws_h32r
from workbench.kernels.configs import TiledConfig
from workbench.lab.resources import without_interpreter
from workbench.lab.targets import get_target
from workbench.report.results import DATA

NAME = "portable_ws_h32r"
CFG = {"BLOCK_H": 32, "BLOCK_T": 32, "num_warps": 8}
SM120_SHARED = get_target("sm_120").smem_per_block  # 101,376 B


def test_registered_as_rung_23_beside_rung_20_and_run_by_auto_off_hopper():
    spec = registry.get(NAME)
    assert spec.kind == "split" and spec.rung == 23 and not spec.interpretable and spec.pdl
    assert spec.split_granule == 32 and spec.split_waves == 1
    assert spec.fixed_meta == portable_ws_h32r.SWITCHES == portable_ws.SWITCHES  # the same producer
    assert spec.compile_options == {"maxnreg": portable_ws_h32r.MAXNREG}
    assert [spec.check_config(c) for c in spec.check_configs] == [TiledConfig(**CFG)]
    assert spec.prediction and "b64 h64" in spec.prediction and spec.summary
    assert NAME in registry.decode_impls() and NAME in registry.compiled_kernels()
    # 12 warps of 32 threads at MAXNREG fit the 65,536 registers of an SM once
    assert 12 * 32 * portable_ws_h32r.MAXNREG <= 65536 < 12 * 32 * (portable_ws_h32r.MAXNREG + 8)
    assert registry.portable_kernel("sm_120", heads=64, tokens=64 * 2048) == NAME
    assert registry.portable_kernel("sm_120", heads=64, tokens=4096) == "portable_ws"  # 2**18 head-tokens


@pytest.fixture(scope="module")
def lab():
    """Lab rows for sm_120 and sm_90 and the sm_120 PTX, from one process without the interpreter."""
    code = ("import json; from workbench.lab.resources import compile_config, compiled_ptx, compiled_sass\n"
            f"rows = [compile_config({NAME!r}, a, {CFG!r}).as_row() for a in ('sm_120', 'sm_90')]\n"
            f"print(json.dumps(dict(rows=rows, ptx=compiled_ptx({NAME!r}, 'sm_120', {CFG!r}), "
            f"sass=compiled_sass({NAME!r}, 'sm_90', {CFG!r}))))")
    out = json.loads(without_interpreter(code).splitlines()[-1])
    return {r["arch"]: r for r in out["rows"]} | {"ptx": out["ptx"], "sass": out["sass"]}


def test_the_partitions_register_shares(lab):
    """sm_120 PTX: the producer's 4 warps rise to PRODUCER_REGS (96), the consumer's 8 settle at the rest of
    12 x MAXNREG rounded down to a multiple of 8, 200: its accumulator (64), q (32) and a tile's scores (32) a
    thread fit there without spilling (the lab test below)."""
    import re
    counts = {(kind, int(n)) for kind, n in
              re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", lab["ptx"])}
    producer = portable_ws_h32r.SWITCHES["PRODUCER_REGS"]
    consumer = (12 * portable_ws_h32r.MAXNREG - 4 * producer) // 8 // 8 * 8
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
    assert r["registers"] <= portable_ws_h32r.MAXNREG
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


def test_every_mma_operand_from_shared_memory_loads_by_ldmatrix(lab):
    """sm_90 SASS, counted by hand a warp: q [32 heads, 64 columns] bf16 is 4 KB, 8 LDSM.x4 of 512 B (once); a
    tile's K [32 tokens, 64 columns] another 8 (QK's B operand) and its V the same 8 transposed (PV's B); P [32, 32]
    bf16 is 2 KB, 4 LDSM.x4 (PV's A operand, which rung 21's layout loaded as 16 LDS.32)."""
    import re
    ops = re.findall(r"\b(LDSM\.16\.M88\.4|LDSM\.16\.MT88\.4)\b", lab["sass"])
    assert ops.count("LDSM.16.M88.4") == 8 + 8 + 4 and ops.count("LDSM.16.MT88.4") == 8


def _swizzled(row: int, col: int, vec: int, per_phase: int, max_phase: int) -> int:
    """A SwizzledSharedLayout's column within its row (Triton's definition: units of vec elements XOR'd with the
    row's phase, (row // per_phase) % max_phase)."""
    return ((col // vec) ^ ((row // per_phase) % max_phase)) * vec + col % vec


def _bank_ways(addresses) -> int:
    """How many distinct 4-byte words of one access phase share a bank (1: conflict-free)."""
    words = {a // 4 for a in addresses}
    return max(sum(1 for w in words if w % 32 == b) for b in range(32))


def _layout_args(layout) -> tuple[int, int, int]:
    layout = getattr(layout, "value", layout)
    return layout.vec, layout.per_phase, layout.max_phase


@pytest.mark.parametrize("rung", ["rung 21", "rung 22 and 23"])
def test_the_exchange_buffers_bank_conflicts_by_hand(rung):
    """Each access phase's bank ways, element by element (a row's bytes from the layout's definition):
    - the partial scores ([heads, 32 tokens] fp32 a warp, 128-byte rows), stored from the MMA layout: 8 B a thread,
      lane l at row l // 4, columns 2 (l % 4) + 8 n; a half-warp (lanes 0-15) is one phase of an 8-byte store;
    - the same scores read by the reduction: 16 B a thread, a quarter-warp (one phase of a 16-byte load) reads one
      row, lane l at columns 4 (l % 8);
    - P ([32, 32] bf16, 64-byte rows) read as the A operand by 4-byte loads (what rung 21's layout compiled to):
      lane l at row l // 4, columns 2 (l % 4) + 8 k, one phase a warp; and by ldmatrix (what rung 22's and 23's
      compile to, the SASS test above): each 8 x 8 matrix is one phase, 8 rows of 16 B at one 8-column unit.
    Rung 21's swizzles were 2-way on the score stores and P's 4-byte loads (as ncu counted at 4288413); rung 22's
    (rung 23 keeps them) are conflict-free on every access here."""
    from workbench.kernels.portable_ws_h32r import P_SMEM, S_SMEM
    s_args, p_args = {"rung 21": ((4, 1, 8), (2, 1, 8)),
                      "rung 22 and 23": (_layout_args(S_SMEM), _layout_args(P_SMEM))}[rung]

    def score(r, c):  # byte address of the fp32 score at (row, column)
        return 4 * (r * 32 + _swizzled(r, c, *s_args))

    def p(r, c):  # byte address of P's bf16 at (row, column)
        return 2 * (r * 32 + _swizzled(r, c, *p_args))

    ways = {
        "score store": max(_bank_ways(score(row0 + lane // 4, 2 * (lane % 4) + 8 * n + e)
                                      for lane in range(16) for e in (0, 1))
                           for row0 in range(0, 32, 4) for n in range(4)),
        "score load": max(_bank_ways(score(r, 4 * lane + e) for lane in range(8) for e in range(4)) for r in range(32)),
        "P 4-byte load": max(_bank_ways(p(row0 + lane // 4, 2 * (lane % 4) + 8 * k + e)
                                        for lane in range(32) for e in (0, 1))
                             for row0 in (0, 8, 16, 24) for k in range(4)),
        "P ldmatrix": max(_bank_ways(p(r, 8 * unit + e) for r in range(row0, row0 + 8) for e in range(8))
                          for row0 in (0, 8, 16, 24) for unit in range(4)),
    }
    expected = {"rung 21": {"score store": 2, "score load": 1, "P 4-byte load": 2},
                "rung 22 and 23": {"score store": 1, "score load": 1, "P 4-byte load": 1, "P ldmatrix": 1}}[rung]
    assert {k: ways[k] for k in expected} == expected
