"""workbench.lab.stalls: warp-stall samples of a warp-specialised kernel by partition (no GPU: a hand-made table)."""
from __future__ import annotations

from pathlib import Path

import pytest

from workbench.lab import stalls

ROOT = Path(__file__).resolve().parents[1]
HEADER = '"Kernel Name","k",\n"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb"\n'
# a producer (112 registers) that waits on an mbarrier through a retry stub, a consumer (160) that does not
SASS = [("0x00", "NOP", 1, 0),
        ("0x10", "USETMAXREG.DEALLOC.CTAPOOL 0x70", 0, 0),
        ("0x20", "FFMA R1, R2, R3, R4", 5, 0),
        ("0x30", "@!P0  BRA 0x100", 7, 7),
        ("0x40", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xa0", 0, 0),
        ("0x50", "HGMMA.64x256x16.F32 R24, gdesc[UR16], R24", 3, 0),
        ("0x100", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R1+URZ+0x10], R2", 2, 0),
        ("0x110", "@!P0  BRA 0x100", 4, 4),
        ("0x120", "BRA 0x20", 0, 0)]


def _table(tmp_path):
    path = tmp_path / "source.csv"
    path.write_text(HEADER + "".join(f'"{a}","{s}","{n}","{lsb}"\n' for a, s, n, lsb in SASS))
    return stalls.read_source_csv(path)


def test_partitions_are_named_by_their_register_share_and_stubs_go_to_their_caller(tmp_path):
    table = stalls.partition_stalls(_table(tmp_path), {112: "producer", 160: "consumer"}).set_index("partition")
    # producer: FFMA 5 + its branch into the stub 7 + the stub's wait 2 and its branch back 4
    assert table.loc["producer", "samples"] == 18
    assert table.loc["producer", "mbarrier_wait_samples"] == 13
    assert table.loc["consumer", "samples"] == 3
    assert table.loc["consumer", "mbarrier_wait_samples"] == 0
    assert table.loc["0 registers", "samples"] == 1  # before the first setmaxnreg
    assert table["share"].sum() == pytest.approx(1.0)


def test_committed_profile_splits_into_rung_15s_three_partitions():
    """Every sample of the committed rung-15 profile lands in one partition, and its three shares are there."""
    path = ROOT / "data/ncu/source/c6506d3_ncu_source_wgmma_ws_h64_h128.csv.gz"
    df = stalls.read_source_csv(path)
    table = stalls.partition_stalls(df)
    assert table["samples"].sum() == df[stalls.SAMPLES].sum()
    assert {112, 160, 232} <= set(table["registers"])


def test_cli_rejects_a_bad_name(capsys):
    with pytest.raises(SystemExit):
        stalls.main(["x.csv", "--names", "producer"])
    assert "REGS=NAME" in capsys.readouterr().err
