"""A call with an extra KV scope on a ``joined_scopes`` kernel (rung 15, ``wgmma_ws_h64``): one partial launch whose
splits run over each query's two index rows as one (scope 1's, then the extra scope's), so a call of one split in
all writes out and lse itself and no combine follows. On the CPU, the plan and what reaches the launch; on the GPU,
the output against the fp32 reference, with splits that end inside one scope and splits that hold the end of one
and the start of the other."""
import dataclasses

import pytest
import torch

from workbench import decode, registry
from workbench.format.cases import CATALOGUE, build_case
from workbench.kernels import common, wgmma_ws_h64

from test_direct import decode_stages, run_decode

RUNG = "wgmma_ws_h64"


def test_rung_15_and_only_it_reads_the_scopes_as_one_stream():
    assert {n for n in registry.names("split") if registry.get(n).joined_scopes} == {RUNG}
    assert not registry.get(RUNG).two_scopes  # its splits are not shared out per scope


@pytest.mark.parametrize("batch, heads, topks, want",
                         [(64, 128, [128, 512], (1, 640)), (16, 128, [128, 512], (4, 192)),
                          (8, 64, [128, 512], (10, 64)), (1, 64, [40, 24], (1, 64))],
                         ids=["b64-h128-production", "b16-h128-production", "b8-h64-production", "b1-h64-odd"])
def test_one_plan_over_the_joined_rows(batch, heads, topks, want):
    """Hand-derived on 132 SMs, one wave, 64-token granules, over topk + extra topk: b64 h128 128 programs a split,
    round(132 / 128) = 1 split of 640; b16 h128 32 programs, round(4.125) = 4 splits, 640 / 4 = 160 -> 192 tokens,
    so ceil(640 / 192) = 4; b8 h64 8 programs, round(16.5) = 16, 40 -> 64 tokens, 10 splits; b1 h64 64 tokens in
    all, one split. A launch a scope (joined_scopes off) plans each scope apart."""
    spec = registry.get(RUNG)
    (plan,) = decode.spec_split_plans(spec, queries=batch, heads=heads, topks=topks, num_sms=132)
    assert (plan.num_splits, plan.tokens_per_split) == want
    apart = decode.spec_split_plans(dataclasses.replace(spec, joined_scopes=False), queries=batch, heads=heads,
                                    topks=topks, num_sms=132)
    assert len(apart) == 2


def test_at_b64_h128_the_production_shape_is_one_split_and_no_combine(monkeypatch):
    """128 programs (64 queries, two 64-head groups) fill 132 SMs once: one split of all 640 tokens, which rung 15
    writes as out and lse itself. A launch per scope made two launches of 128 programs and a combine."""
    monkeypatch.setattr(decode, "sm_count", lambda device: 132)
    calls = []
    spec = dataclasses.replace(registry.get(RUNG), launch=lambda **kw: calls.append(kw))
    kw = build_case(batch=64, heads=128, topk=128, block_size=256, extra_topk=512, extra_block_size=64,
                    sink=True, seed=2).kwargs()
    work, stages = decode_stages(spec, kw)
    assert work.direct and [(p.num_splits, p.tokens_per_split) for p in work.splits] == [(1, 640)]
    (stage,) = stages
    assert stage.inputs == ("q", "cache", "indices", "topk_length", "extra_cache", "extra_indices",
                            "extra_topk_length", "attn_sink")
    stage.run()
    (c,) = calls
    assert c["extra_cache"] is kw["extra_cache"] and c["extra_indices"] is kw["extra_indices"]
    assert c["direct"] is True and c["attn_sink"] is kw["attn_sink"] and c["part_out"] is work.out
    assert (c["split_offset"], c["num_splits"], c["tokens_per_split"]) == (0, 1, 640)


def test_several_joined_splits_then_the_combine(monkeypatch):
    """b8 h64 at topk 128 + 512 on 132 SMs: 8 programs a split, so round(132 / 8) = 16 splits would fill them once;
    640 / 16 = 40 tokens, in 64-token granules 64, so 10 splits of one tile (the first two scope 1's; no split
    straddles the scopes here, the GPU tests force ones that do), then the combine."""
    monkeypatch.setattr(decode, "sm_count", lambda device: 132)
    calls = []
    spec = dataclasses.replace(registry.get(RUNG), launch=lambda **kw: calls.append(kw))
    kw = build_case(batch=8, heads=64, topk=128, block_size=256, extra_topk=512, extra_block_size=64,
                    seed=2).kwargs()
    work, stages = decode_stages(spec, kw)
    assert not work.direct and [(p.num_splits, p.tokens_per_split) for p in work.splits] == [(10, 64)]
    assert len(stages) == 2 and stages[-1].inputs == ("attn_sink",)
    stages[0].run()
    (c,) = calls
    assert "direct" not in c and work.part_lse.shape[-1] == 10 and c["num_splits"] == 10


def _recorded(monkeypatch, kw, **over):
    """The one launch rung 15's launcher makes (recorded, not run: its sm_90 check patched away)."""
    monkeypatch.setattr(wgmma_ws_h64, "require_sm90", lambda q, name: None)
    b, s_q, h, _ = kw["q"].shape
    args = dict(q=kw["q"], cache=kw["cache"], indices=kw["indices"], topk_length=kw.get("topk_length"),
                part_out=torch.empty(b * s_q, h, 2, 512), part_lse=torch.empty(b * s_q, h, 2), split_offset=0,
                num_splits=2, tokens_per_split=64, sm_scale=0.1) | over
    with common.capture_launches() as records:
        registry.get(RUNG).launch(**args)
    ((_, grid, launched),) = records
    return grid, launched


@pytest.mark.parametrize("pages, shifts", [((256, 64), (8, 6)), ((61, 2), (-1, 1)), ((64, 69), (6, -1))],
                         ids=["256-and-64", "61-and-2", "64-and-69"])
def test_the_launch_carries_the_extra_scope_and_its_own_page_shift(monkeypatch, pages, shifts):
    kw = build_case(batch=2, heads=64, topk=40, block_size=pages[0], extra_topk=24, extra_block_size=pages[1],
                    extra_topk_length=True, seed=4).kwargs()
    grid, a = _recorded(monkeypatch, kw, extra_cache=kw["extra_cache"], extra_indices=kw["extra_indices"],
                        extra_topk_length=kw["extra_topk_length"])
    assert grid == (1, 2, 2) and a["JOINED"] is True and a["X_HAS_TOPK_LEN"] is True and a["HAS_TOPK_LEN"] is False
    assert (a["BS_SHIFT"], a["X_BS_SHIFT"]) == shifts and (a["TOPK"], a["X_TOPK"]) == (40, 24)
    assert a["x_cache_u8"].data_ptr() == kw["extra_cache"].data_ptr() and a["x_idx_ptr"] is kw["extra_indices"]
    assert a["x_topk_len_ptr"] is kw["extra_topk_length"] and a["x_block_size"] == pages[1]
    assert a["PRODUCER_REGS"] == 144  # wgmma_ws_h64.producer_regs: the joined producer spills at 128


def test_one_scope_leaves_the_extra_arguments_unread(monkeypatch):
    kw = build_case(batch=2, heads=64, topk=40, block_size=64, seed=4).kwargs()
    grid, a = _recorded(monkeypatch, kw)
    assert grid == (1, 2, 2) and a["JOINED"] is False and a["X_TOPK"] == 0 and "X_BS_SHIFT" not in a
    assert a["PRODUCER_REGS"] == wgmma_ws_h64.SWITCHES["PRODUCER_REGS"]
    assert a["x_idx_ptr"] is kw["indices"]  # a stand-in


def test_the_launcher_refuses_splits_that_miss_tokens(monkeypatch):
    kw = build_case(batch=2, heads=64, topk=40, extra_topk=40, seed=4).kwargs()
    with pytest.raises(ValueError, match="do not cover the joined scopes' 40 \\+ 40"):
        _recorded(monkeypatch, kw, extra_cache=kw["extra_cache"], extra_indices=kw["extra_indices"], num_splits=1)


def test_the_launcher_refuses_extra_indices_of_other_queries(monkeypatch):
    kw = build_case(batch=2, heads=64, topk=40, extra_topk=24, seed=4).kwargs()
    with pytest.raises(ValueError, match="extra_indices"):
        _recorded(monkeypatch, kw, extra_cache=kw["extra_cache"], extra_indices=kw["extra_indices"][:1])
    with pytest.raises(ValueError, match="extra_indices"):
        _recorded(monkeypatch, kw, extra_cache=kw["extra_cache"])


# ------------------------------------------------------------------------------------------------ GPU

def _gpu_only():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{RUNG} is a Gluon kernel for sm_90")


def _against_the_reference(kw, monkeypatch, tokens_per_split=None):
    """Rung 15's decode of ``kw`` (with tokens_per_split: splits of that many joined tokens, forced) checked
    against the fp32 reference at the GPU check's tolerance; returns the workspace."""
    import workbench as wb
    spec = registry.get(RUNG)
    if tokens_per_split is not None:
        topk_all = kw["indices"].shape[2] + kw["extra_indices"].shape[2]
        plan = decode.SplitPlan(num_splits=-(-topk_all // tokens_per_split), tokens_per_split=tokens_per_split)
        monkeypatch.setattr(decode, "call_splits", lambda *a: (plan,))
    work, out, lse = run_decode(spec, kw)
    ref_out, ref_lse = wb.sparse_mla_decode_reference(**kw)
    wb.assert_close(out.float(), lse, ref_out, ref_lse, RUNG)
    return work


TWO_SCOPE_CASES = [e for e in CATALOGUE if e.spec.get("extra_topk")]


@pytest.mark.gpu
@pytest.mark.parametrize("tokens_per_split", [None, 64], ids=["planned", "64-token-splits"])
@pytest.mark.parametrize("entry", TWO_SCOPE_CASES, ids=lambda e: e.id)
def test_joined_scopes_against_the_reference(entry, tokens_per_split, monkeypatch):
    """The catalogue's two-scope cases: odd page sizes (2, 61), 256 beside 64, topk_length on either scope,
    all-invalid queries, NaN in unselected pages, -inf and +inf sinks; planned, and in 64-token splits (a split
    that ends inside scope 1's last partial tile reads the extra scope's first tokens as a tile of their own)."""
    _gpu_only()
    _against_the_reference(entry.build("cuda").kwargs(), monkeypatch, tokens_per_split)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens_per_split", [64, 192, 704], ids=["64", "192-straddles", "one-split"])
def test_a_split_that_straddles_the_scopes(tokens_per_split, monkeypatch):
    """topk 100 (pages of 61, topk_length) + extra 600 (pages of 64): at 192 tokens a split, the first holds scope
    1's 100 and the extra scope's first 92 (two tiles, then two), the next three the extra scope alone; at 704, one
    split of both (direct, with a sink)."""
    _gpu_only()
    kw = build_case(batch=3, heads=64, topk=100, block_size=61, topk_length=True, extra_topk=600,
                    extra_block_size=64, extra_topk_length=True, sink=True, seed=31, device="cuda").kwargs()
    work = _against_the_reference(kw, monkeypatch, tokens_per_split)
    assert work.direct == (tokens_per_split == 704)


@pytest.mark.gpu
@pytest.mark.parametrize("batch, heads", [(64, 128), (8, 128), (16, 64)], ids=["b64-h128", "b8-h128", "b16-h64"])
def test_joined_scopes_at_the_production_shape(batch, heads, monkeypatch):
    """topk 128 in pages of 256 and an extra 512 in pages of 64, with a sink (b64 h128: one split, direct)."""
    _gpu_only()
    kw = build_case(batch=batch, heads=heads, topk=128, block_size=256, extra_topk=512, extra_block_size=64,
                    sink=True, seed=12, device="cuda").kwargs()
    work = _against_the_reference(kw, monkeypatch)
    assert work.direct == ((batch, heads) == (64, 128))


@pytest.mark.gpu
def test_the_extra_scope_runs_its_bf16_second_pass(monkeypatch):
    """Scale bytes outside the f16 window in the extra scope only, in one split of 128 tokens that holds both scopes
    (64 + 64): its bf16 second pass reads both scopes again. (Only the output against the reference is checked
    here, not that the rerun ran.)"""
    _gpu_only()
    from test_two_scopes import _tweaked_scope_as_extra
    _, swapped = _tweaked_scope_as_extra("cuda")
    swapped["q"] = swapped["q"].repeat(1, 1, 4, 1)  # 64 heads: rung 15's group
    _against_the_reference(swapped, monkeypatch, tokens_per_split=128)


@pytest.mark.parametrize("shared", [None, "cache", "topk_length"], ids=["distinct", "one-cache", "one-topk_length"])
def test_a_plan_binds_each_scope_to_its_own_input(monkeypatch, shared):
    """The plan matches the joined launch's arguments to the call's inputs by data_ptr; where one tensor is passed
    for both scopes, the x_ names say which input an argument is."""
    from test_two_scopes import assert_each_scope_bound, two_scope_plan
    monkeypatch.setattr(wgmma_ws_h64, "require_sm90", lambda q, name: None)
    (launch,) = two_scope_plan(RUNG, 64, shared).launches  # one split of 64 joined tokens: direct, no combine
    assert_each_scope_bound(launch)
