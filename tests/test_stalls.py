"""workbench.lab.stalls: warp-stall samples of a warp-specialised kernel by partition (no GPU: a hand-made table)."""
from __future__ import annotations

from pathlib import Path

import pytest

from workbench.lab import stalls

ROOT = Path(__file__).resolve().parents[1]
HEADER = '"Kernel Name","k",\n"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb"\n'
# a producer (112 registers) and a consumer (160) that each wait on an mbarrier through a retry stub after the
# kernel's EXIT; the consumer's stub rebuilds the barrier's address first and branches back to that prologue
SASS = [("0x00", "NOP", 1),
        ("0x10", "USETMAXREG.DEALLOC.CTAPOOL 0x70", 0),
        ("0x20", "FFMA R1, R2, R3, R4", 5),
        ("0x30", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R1+URZ+0x10], R2", 1),
        ("0x40", "@!P0  BRA 0x100", 7),
        ("0x48", "IADD3 R1, R1, 0x1, RZ", 0),
        ("0x50", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xa0", 0),
        ("0x60", "HGMMA.64x256x16.F32 R24, gdesc[UR16], R24", 3),
        ("0x70", "@!P1  BRA 0x130", 6),
        ("0x80", "FMUL R5, R5, R6", 2),
        ("0x90", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0x100", 0),
        ("0xa0", "STG.E desc[UR6][R6.64], R11", 9),
        ("0xb0", "EXIT", 0),
        ("0x100", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R1+URZ+0x10], R2", 2),
        ("0x110", "@!P0  BRA 0x100", 4),
        ("0x120", "BRA 0x48", 0),
        ("0x130", "S2R R15, SR_CgaCtaId", 3),
        ("0x140", "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R15+URZ+0x18], R2", 2),
        ("0x150", "@!P1  BRA 0x130", 1),
        ("0x160", "BRA 0x80", 0)]


def _table(tmp_path):
    path = tmp_path / "source.csv"
    path.write_text(HEADER + "".join(f'"{a}","{s}","{n}","0"\n' for a, s, n in SASS))
    return stalls.read_source_csv(path)


def test_partitions_are_named_by_their_register_share_and_stubs_go_to_their_caller(tmp_path):
    table = stalls.partition_stalls(_table(tmp_path), {112: "producer", 160: "consumer"}).set_index("partition")
    # producer: FFMA 5, its try-wait 1 and branch into its stub 7, the stub's wait 2 and retry 4; consumer: HGMMA 3,
    # its branch into its stub 6, FMUL 2, the stub's address prologue 3, wait 2 and retry 1
    assert table.loc["producer", "samples"] == 5 + 1 + 7 + 2 + 4
    assert table.loc["consumer", "samples"] == 3 + 6 + 2 + 3 + 2 + 1
    assert table.loc["producer", "mbarrier_wait_samples"] == 1 + 7 + 2 + 4
    assert table.loc["consumer", "mbarrier_wait_samples"] == 6 + 3 + 2 + 1
    assert table.loc["256 registers", "samples"] == 9  # the default partition's epilogue is not a loop's
    assert table.loc["0 registers", "samples"] == 1  # before the first setmaxnreg
    assert table["share"].sum() == pytest.approx(1.0)


def test_committed_profile_of_rung_15_by_partition():
    """The numbers docs/decisions.md quotes for rung 15 at b64 h128 (ncu at c6506d3)."""
    path = ROOT / "data/ncu/source/c6506d3_ncu_source_wgmma_ws_h64_h128.csv.gz"
    table = stalls.partition_stalls(stalls.read_source_csv(path)).set_index("registers")
    assert table.loc[[232, 160, 112], "samples"].tolist() == [3911, 3602, 3584]
    assert table.loc[[232, 160, 112], "mbarrier_wait_samples"].tolist() == [812, 2739, 1479]
    assert table.loc[[120, 256], "share"].sum() < 0.05  # the prologue and the default partition's epilogue


def test_cli_rejects_a_bad_name(capsys):
    with pytest.raises(SystemExit):
        stalls.main(["x.csv", "--names", "producer"])
    assert "REGS=NAME" in capsys.readouterr().err


def test_a_profile_of_two_kernels_reads_the_one_asked_for(tmp_path):
    """NCU_COMBINE=1 writes the partial's table, then the combine's, each under its own name line."""
    path = tmp_path / "two.csv"
    combine = '"Kernel Name","combine_kernel",\n"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb"\n'
    path.write_text(HEADER.replace('"k"', '"wgmma_partial_kernel"')
                    + "".join(f'"{a}","{s}","{n}","0"\n' for a, s, n in SASS)
                    + combine + '"0x00","LDG.E R2, desc[UR4][R2.64]","11","11"\n"0x10","EXIT","0","0"\n')
    assert stalls.read_source_csv(path)[stalls.SAMPLES].sum() == sum(n for _, _, n in SASS)
    assert stalls.read_source_csv(path, "partial")[stalls.SAMPLES].sum() == sum(n for _, _, n in SASS)
    assert stalls.read_source_csv(path, "combine")[stalls.SAMPLES].tolist() == [11, 0]
    with pytest.raises(ValueError, match="combine_kernel"):
        stalls.read_source_csv(path, "splitkv")
    twice = tmp_path / "twice.csv"  # one kernel profiled twice (the old launch count's two combines): both kept
    twice.write_text(combine + '"0x00","EXIT","5","0"\n' + combine + '"0x00","EXIT","7","0"\n')
    assert stalls.read_source_csv(twice, "combine")[stalls.SAMPLES].tolist() == [5]
    assert stalls.read_source_csv(twice, "combine_kernel #2")[stalls.SAMPLES].tolist() == [7]


def test_a_template_name_keeps_its_commas_and_a_file_without_names_is_refused(tmp_path):
    """FlashMLA's kernels are C++ templates: their quoted names hold commas."""
    path = tmp_path / "t.csv"
    path.write_text('"Kernel Name","void flash_fwd_splitkv<64, 8>(Params)",\n' + HEADER.split("\n", 1)[1]
                    + '"0x00","EXIT","3","0"\n')
    assert stalls.read_source_csv(path, "<64, 8>")[stalls.SAMPLES].tolist() == [3]
    bare = tmp_path / "bare.csv"
    bare.write_text(HEADER.split("\n", 1)[1] + '"0x00","EXIT","3","0"\n')
    with pytest.raises(ValueError, match="Kernel Name"):
        stalls.read_source_csv(bare)


def test_the_committed_b1_profile_holds_the_partial_and_the_combine():
    """The numbers docs/decisions.md quotes for rung 12 at b1 h64 topk512 (ncu of 5edb960's kernels, an H100, with
    the NVTX range of c259a73's profile.py): 175 samples, 75 before the loop (its first trip's code begins at
    0x1ce0), 52 in it (the back edge at 0x42e0), 48 after."""
    path = ROOT / "data/explore/explore_h100_20261205-2325_ncu_source_wgmma_f16_2cta_h64_b1_k512.csv.gz"
    df = stalls.read_source_csv(path, "partial")
    offset = df["address"] - df["address"].iloc[0]
    before, loop = df[offset < 0x1ce0], df[(offset >= 0x1ce0) & (offset <= 0x42e0)]
    assert [int(t[stalls.SAMPLES].sum()) for t in (df, before, loop)] == [175, 75, 52]
    assert stalls.read_source_csv(path, "combine")[stalls.SAMPLES].sum() > 0
