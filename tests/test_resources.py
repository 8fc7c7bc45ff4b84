"""Resource lab: cross-compiles on a CPU-only machine; plausibility; model vs compiler; occupancy by hand."""
import pandas as pd
import pytest

from workbench.resources import lab_frame
from workbench.targets import TARGETS, get_target

PROBE = {"BLOCK_H": 64, "BLOCK_T": 16, "num_warps": 8, "num_stages": 1, "PREFETCH": 0}
MMA_KIND = {"sm_90": "HGMMA", "sm_100": "UTCMMA", "sm_120": "HMMA", "sm_89": "HMMA"}


@pytest.mark.parametrize("arch", list(TARGETS))
def test_one_config_per_target_compiles_with_plausible_numbers(arch):
    r = lab_frame(arch, "mma", [PROBE]).iloc[0]
    assert r.status in ("fits", "over_limit"), r.reason
    assert r.shared_bytes > 0 and 0 < r.registers <= 255
    assert r.num_warps == 8 and r.num_stages == 1
    if MMA_KIND[arch]:
        assert r.mma == MMA_KIND[arch], f"{arch}: expected {MMA_KIND[arch]} in the SASS, got {r.mma}"
    if r.status == "fits":
        assert r.blocks_per_sm >= 1 and r.warps_per_sm == r.blocks_per_sm * 8


def test_model_prune_agrees_with_compiler_on_sm120():
    df = lab_frame("sm_120", "mma", [{"BLOCK_H": 16, "BLOCK_T": 16, "num_warps": 4, "num_stages": 1, "PREFETCH": 1},
                                     {"BLOCK_H": 64, "BLOCK_T": 32, "num_warps": 8, "num_stages": 1, "PREFETCH": 0}])
    small, big = df.iloc[0], df.iloc[1]
    limit = get_target("sm_120").smem_per_block
    assert small.status == "fits" and small.shared_bytes <= limit
    assert big.status == "over_limit" and big.shared_bytes > limit and big.model_shared_bytes > limit


def test_occupancy_by_hand():
    # 255 regs -> 8160 per warp, allocated in units of 256 -> 8192; 8 warps -> 65536 = the whole file: 1 block
    occ = get_target("sm_90").occupancy(num_warps=8, regs_per_thread=255, shared_bytes=131072)
    assert occ["blocks_per_sm"] == 1 and occ["warps_per_sm"] == 8 and occ["limiter"] == "registers"
    # 40 regs -> 1280 per warp; 4 warps: 65536 // 5120 = 12 blocks; shared 37376+1024: 233472 // 38400 = 6 blocks
    occ = get_target("sm_90").occupancy(num_warps=4, regs_per_thread=40, shared_bytes=37376)
    assert occ["blocks_per_sm"] == 6 and occ["limiter"] == "shared_memory" and occ["warps_per_sm"] == 24
    assert get_target("sm_120").occupancy(num_warps=8, regs_per_thread=64, shared_bytes=131072)["blocks_per_sm"] == 0


def test_unknown_arch():
    with pytest.raises(ValueError, match="arch"):
        get_target("sm_75")


def test_committed_lab_tables_agree_with_the_pruning_model():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    for arch in TARGETS:
        df = pd.read_csv(root / "data" / f"resources_{arch}.csv")
        mma = df[df.kernel == "mma"]
        assert len(mma) == 72 and (mma.status != "compile_error").all()
        limit = get_target(arch).smem_per_block
        kept = mma[mma.model_shared_bytes <= limit]
        over = kept[kept.shared_bytes > limit]
        assert over.empty, f"{arch}: the model keeps configs that do not fit:\n{over[['config', 'shared_bytes']]}"
        pruned = mma[mma.model_shared_bytes > limit]
        assert (pruned.shared_bytes > limit).all(), f"{arch}: the model prunes configs that fit"
        assert ((mma.registers > 0) & (mma.registers <= 255)).all()


def test_pruning_record_is_exposed_with_reasons():
    import workbench as wb
    from workbench.kernels.common import target_override
    from workbench.kernels.mma import MMA_CONFIGS, prune_mma_configs
    with target_override("sm_120"):
        kept = prune_mma_configs(MMA_CONFIGS, {"H": 64})
    rec = [r for r in wb.pruned_configs("mma") if r["arch"] == "sm_120"]
    # BLOCK_H=64 needs 128 KB on sm_120 (over 101,376 B): 64 heads run as two groups of 32 there
    assert kept and {c.kwargs["BLOCK_H"] for c in kept} == {32}
    smem = [r for r in rec if not r["kept"] and "shared memory" in r["reason"]]
    assert {r["BLOCK_H"] for r in smem} >= {64}
    assert all(r["estimated_shared_bytes"] > r["limit_bytes"] for r in smem)
    assert any(not r["kept"] and "head group" in r["reason"] for r in rec)
    with target_override("sm_90"):
        kept90 = prune_mma_configs(MMA_CONFIGS, {"H": 64})
    assert {c.kwargs["BLOCK_H"] for c in kept90} == {64} and all(c.num_warps == 8 for c in kept90)
