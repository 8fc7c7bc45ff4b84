"""Notebook 03's sm_120 projection (plots_occupancy.sm120_projection): per headline shape, the H200 proxy time of
auto_portable, the sm_120 memory floor (the decode's bytes over the RTX PRO 6000 Blackwell's 1,792 GB/s) beside the
H200's measured floors, and the lab's occupancy on sm_120 for the config the kernel runs there. The expectations are
worked out by hand here, not by the code under test."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.report import plots_occupancy
from workbench.lab.targets import get_target

SM120 = get_target("sm_120")
H16 = "BLOCK_H=16,BLOCK_T=32,num_warps=4,num_stages=1"
H64 = "BLOCK_H=64,BLOCK_T=16,num_warps=8,num_stages=1"


def _bytes(batch, heads, topk):
    """What a decode reads at s_q = 1 with every index valid: 584 bytes a selected token (576 data + 8 scale
    bytes), bf16 q in and bf16 out (2 bytes x 512 dims x heads x batch, each)."""
    return batch * topk * 584 + 2 * (batch * heads * 512 * 2)


def _row(provider, kernel, batch, heads, topk, median, *, mode="graph", status="ok", p20=None, p80=None):
    return dict(sweep="headline", provider=provider, kernel=kernel, mode=mode, batch=batch, s_q=1, heads=heads,
                topk=topk, extra_topk=0, config=None, status=status, median_us=median,
                p20_us=median - 1 if p20 is None else p20, p80_us=median + 2 if p80 is None else p80,
                bytes=_bytes(batch, heads, topk), hbm_copy_gbps=4000.0, gpu="NVIDIA H200", source="bench_x.csv")


def _table():
    """Two shapes: b64 h16 topk2048 (auto_portable ran portable_ws) and b64 h64 topk2048 (tile512), each with both
    floors, an eager row and FlashMLA beside them."""
    return pd.DataFrame([
        _row("auto_portable", "portable_ws", 64, 16, 2048, 57.0, p20=56.5, p80=57.5),
        _row("auto_portable", "portable_ws", 64, 16, 2048, 64.0, mode="eager"),
        _row("gather_async", "gather_async", 64, 16, 2048, 26.0),
        _row("gather", "gather", 64, 16, 2048, 33.0),
        _row("flashmla", "flashmla", 64, 16, 2048, 82.0),
        _row("auto_portable", "tile512", 64, 64, 2048, 181.0),
        _row("gather_async", "gather_async", 64, 64, 2048, 26.5),
        _row("gather", "gather", 64, 64, 2048, 32.5),
    ])


def _lab():
    """sm_120 lab rows: the two configs the kernels run there, and a decoy config of tile512 that must not be read."""
    base = dict(arch="sm_120", status="fits", mma="HMMA", spill_stores=0, blocks_per_sm=1)
    return pd.DataFrame([
        dict(base, kernel="portable_ws", config=H16, registers=128, shared_bytes=84180, warps_per_sm=8,
             occupancy=8 / 48, limiter="shared_memory"),
        dict(base, kernel="tile512", config=H64, registers=255, shared_bytes=98304, warps_per_sm=8,
             occupancy=8 / 48, limiter="registers"),
        dict(base, kernel="tile512", config="BLOCK_H=64,BLOCK_T=16,num_warps=4,num_stages=1", registers=168,
             shared_bytes=98304, warps_per_sm=4, occupancy=4 / 48, limiter="shared_memory"),
    ])


def _configs(kernel, heads, arch):
    assert arch == "sm_120"
    return [{"portable_ws": H16, "tile512": H64}[kernel]]


def test_the_sm120_target_carries_nvidias_spec():
    assert SM120.sms == 188 and SM120.dram_gbps == 1792.0 and SM120.example_gpu == "RTX PRO 6000 Blackwell"


def test_projection_floor_is_the_bytes_over_1792_gbs_and_the_rest_comes_from_the_table():
    proj = plots_occupancy.sm120_projection(_table(), _lab(), SM120, configs=_configs)
    assert list(proj["shape"]) == ["b64 h16 topk2048", "b64 h64 topk2048"], "the table's shapes, in its order"
    h16 = proj.iloc[0]
    # 64 x 2048 tokens x 584 B = 76,546,048 B of cache, plus q and out: 2 x 64 x 16 x 512 x 2 B = 2,097,152 B
    assert h16["bytes"] == 78_643_200
    assert h16["target_floor_us"] == pytest.approx(78_643_200 / 1792e9 * 1e6)  # 43.886 us
    assert h16["target_floor_us"] == pytest.approx(43.8857, abs=1e-4)
    assert (h16["kernel"], h16["proxy_us"], h16["proxy_p20_us"], h16["proxy_p80_us"]) == ("portable_ws", 57.0, 56.5,
                                                                                       57.5), "graph rows only"
    assert h16["proxy_over_target_floor"] == pytest.approx(57.0 / 43.8857, rel=1e-4)
    assert (h16["h200_gather_async_us"], h16["h200_gather_us"]) == (26.0, 33.0)
    assert h16["h200_copy_floor_us"] == pytest.approx(78_643_200 / 4000e9 * 1e6)
    assert (h16["target_configs"], h16["warps_per_sm_max"], h16["limiter"]) == (H16, 8, "shared_memory")
    h64 = proj.iloc[1]
    assert h64["bytes"] == 64 * 2048 * 584 + 2 * 64 * 64 * 512 * 2 == 84_934_656
    assert h64["target_floor_us"] == pytest.approx(84_934_656 / 1792e3)
    # the config sm_120 runs (8 warps, registers), not the 4-warp decoy beside it in the lab
    assert (h64["kernel"], h64["registers_max"], h64["warps_per_sm_max"], h64["limiter"]) == ("tile512", 255, 8,
                                                                                              "registers")
    assert h64["occupancy_min"] == h64["occupancy_max"] == pytest.approx(1 / 6)


def test_projection_bytes_are_the_count_the_bench_uses():
    """The table's bytes column is accounting.decode_cost's count (what its GB/s divide): the hand count above
    agrees with it, so the floor is the bench's bytes, not a second formula."""
    from workbench.accounting import decode_cost
    assert decode_cost(batch=64, s_q=1, heads=16, valid_tokens=64 * 2048).bytes == _bytes(64, 16, 2048)
    assert decode_cost(batch=1, s_q=1, heads=64, valid_tokens=512).bytes == _bytes(1, 64, 512) == 430_080


def test_projection_refuses_a_table_without_auto_portable_rows_in_one_line():
    old = _table()
    old = old[old.provider != "auto_portable"]
    with pytest.raises(ValueError, match="no ok graph rows of auto_portable in the headline table bench_x.csv") as e:
        plots_occupancy.sm120_projection(old, _lab(), SM120, configs=_configs)
    assert "\n" not in str(e.value)


def test_a_shape_without_proxy_rows_is_nan_not_dropped():
    t = _table()
    t = t[~((t.provider == "auto_portable") & (t.heads == 64))]
    proj = plots_occupancy.sm120_projection(t, _lab(), SM120, configs=_configs)
    h64 = proj.iloc[1]
    assert h64["shape"] == "b64 h64 topk2048" and h64["kernel"] == "" and math.isnan(h64["proxy_us"])
    assert math.isnan(h64["warps_per_sm_max"]) and h64["h200_gather_async_us"] == 26.5
    assert h64["target_floor_us"] == pytest.approx(84_934_656 / 1792e3), "the floor needs only the shape's bytes"


def test_projection_refuses_a_target_without_a_bandwidth():
    with pytest.raises(ValueError, match="sm_90 has no dram_gbps"):
        plots_occupancy.sm120_projection(_table(), _lab(), get_target("sm_90"), configs=_configs)


def test_the_config_sm120_runs_is_what_its_autotuner_keeps_there():
    """tile512 at 64 heads on sm_120, by hand: the head group is 64; BLOCK_T = 32 needs 64 x 1024 + 32 x 2048 =
    131,072 B of shared memory, and 3 stages add a tile of raw bytes and two stages of indices to BLOCK_T = 16's
    98,304 B (16 x 1536 + 2 x 4 x 16 B: 123,008 B), both over sm_120's 101,376 B a block; 4 warps would hold a
    [64, 512] fp32 accumulator in 256 registers a thread. One config is left: BLOCK_T 16, 8 warps, 1 stage.
    portable_ws has one config."""
    assert plots_occupancy.configs_on_target("tile512", 64, "sm_120") == [H64]
    assert plots_occupancy.configs_on_target("tile512", 128, "sm_120") == [H64]
    assert plots_occupancy.configs_on_target("portable_ws", 16, "sm_120") == [H16]
    assert len(plots_occupancy.configs_on_target("tile512", 16, "sm_120")) > 1, "at 16 heads the autotuner picks on the GPU"


@pytest.mark.slow
def test_projection_of_the_committed_headline_table():
    """From data/: the current headline table's auto_portable rows and the committed sm_120 lab table."""
    from workbench import registry
    from workbench.report.results import DATA, current_rows, load_bench
    head = current_rows("headline", df=load_bench(data_dir=DATA))
    proj = plots_occupancy.sm120_projection(head, pd.read_csv(DATA / "resources_sm_120.csv"), SM120).set_index("shape")
    r = proj.loc["b64 h16 topk2048"]
    assert r["target_floor_us"] == pytest.approx(78_643_200 / 1792e3)
    raw = pd.read_csv(DATA / head.source.iloc[0])
    sel = raw[(raw.provider == "auto_portable") & (raw["mode"] == "graph") & (raw.heads == 16) & (raw.batch == 64)
              & (raw.topk == 2048) & (raw.extra_topk == 0)]
    assert r["proxy_us"] == pytest.approx(sel.median_us.median()) and r["kernel"] == sel.kernel.iloc[0]
    assert r["kernel"] == registry.auto_kernel("sm_120", heads=16, tokens=64 * 2048)
    assert r["lab_status"] == "fits" and r["mma"] == "HMMA" and r["spill_stores_max"] == 0
    assert set(proj.kernel) <= {"portable_ws", "portable_ws_h32t", "portable_ws_h32f", "tile512"}
    assert proj.warps_per_sm_max.notna().all()
