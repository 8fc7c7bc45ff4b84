"""A call with an extra KV scope on a ``two_scopes`` kernel (the rungs of ``kernels/wgmma.py``): one partial launch
over both scopes, then the combine. On the CPU, what reaches that launch and how a plan binds it; on the GPU, that
the one launch writes the same out and lse bit for bit as a launch per scope (the same kernel's per-scope path is
the independent reference: each split reads the same tokens, into the same partial slot)."""
import dataclasses

import pytest
import torch

from workbench import decode, registry
from workbench.format.cases import CATALOGUE, build_case
from workbench.kernels import common, gluon_common, wgmma

from test_direct import _bits  # out and lse as integers: bit equality, NaN included
from test_direct import call_scopes as _scopes, decode_stages as _stages, run_decode

WGMMA_RUNGS = ("wgmma_xchg", "wgmma_f16", "wgmma_f16_2cta")


def test_the_wgmma_rungs_and_only_they_take_both_scopes_in_one_launch():
    assert {n for n in registry.names("split") if registry.get(n).two_scopes} == set(WGMMA_RUNGS)


@pytest.mark.parametrize("two_scopes", [True, False], ids=["one-launch", "a-launch-per-scope"])
def test_an_extra_scope_is_one_partial_launch_then_the_combine(two_scopes):
    calls = []
    spec = dataclasses.replace(registry.get("tile512"), two_scopes=two_scopes, launch=lambda **kw: calls.append(kw))
    case = build_case(batch=2, heads=16, topk=40, block_size=61, extra_topk=24, extra_block_size=2,
                      extra_topk_length=True, seed=3)
    kw = case.kwargs()
    work, stages = _stages(spec, kw)
    (s1, s2) = work.splits
    assert s1.num_splits > 1 and s2.num_splits > 1  # tile512's 16-token granule: both scopes split
    assert len(stages) == (2 if two_scopes else 3) and stages[-1].inputs == ("attn_sink",)
    for stage in stages[:-1]:
        stage.run()
    if two_scopes:
        assert stages[0].inputs == ("q", "cache", "indices", "topk_length", "extra_cache", "extra_indices",
                                    "extra_topk_length")
        (c,) = calls
        assert c["cache"] is kw["cache"] and c["extra_cache"] is kw["extra_cache"]
        assert c["extra_indices"] is kw["extra_indices"] and c["extra_topk_length"] is kw["extra_topk_length"]
        assert (c["split_offset"], c["num_splits"], c["tokens_per_split"]) == (0, s1.num_splits, s1.tokens_per_split)
        assert (c["extra_num_splits"], c["extra_tokens_per_split"]) == (s2.num_splits, s2.tokens_per_split)
    else:
        assert [c["split_offset"] for c in calls] == [0, s1.num_splits]
        assert all("extra_cache" not in c for c in calls)
    assert work.part_lse.shape[-1] == s1.num_splits + s2.num_splits


def _recorded_launch(monkeypatch, case, impl="wgmma_f16", **splits):
    """The one launch wgmma's launcher makes for ``case`` (recorded, not run: its sm_90 check patched away)."""
    monkeypatch.setattr(wgmma, "require_sm90", lambda q, name: None)
    kw = case.kwargs()
    s = dict(num_splits=3, tokens_per_split=64, extra_num_splits=2, extra_tokens_per_split=64) | splits
    b, s_q, h, _ = kw["q"].shape
    total = s["num_splits"] + s["extra_num_splits"]
    part_out = torch.empty(b * s_q, h, total, 512)
    part_lse = torch.empty(b * s_q, h, total)
    with common.capture_launches() as records:
        registry.get(impl).launch(q=kw["q"], cache=kw["cache"], indices=kw["indices"],
                                  topk_length=kw.get("topk_length"), part_out=part_out, part_lse=part_lse,
                                  split_offset=0, sm_scale=0.1, extra_cache=kw["extra_cache"],
                                  extra_indices=kw["extra_indices"], extra_topk_length=kw.get("extra_topk_length"),
                                  **s)
    ((_, grid, args),) = records
    return kw, grid, args


@pytest.mark.parametrize("pages, shift, runtime", [((256, 64), gluon_common.BS_SHIFT_RUNTIME.value, (8, 6)),
                                                   ((64, 64), 6, (6, 6)), ((61, 64), -1, (-1, 6)),
                                                   ((2, 61), -1, (1, -1))],
                         ids=["pow2-differ", "pow2-same", "odd-and-pow2", "pow2-and-odd"])
def test_the_launch_carries_both_scopes_and_their_page_shifts(monkeypatch, pages, shift, runtime):
    """One kernel, one page arithmetic: shift and mask by a constexpr where both page sizes are the same power of
    two, by a register where they are different powers of two, else divide."""
    case = build_case(batch=2, heads=16, topk=40, block_size=pages[0], extra_topk=24, extra_block_size=pages[1],
                      seed=4)
    kw, grid, args = _recorded_launch(monkeypatch, case)
    assert grid == (1, 5, 2) and args["splits_1"] == 3 and args["split_offset"] == 0 and args["s_total"] == 5
    assert args["TWO_SCOPES"] is True and args["X_HAS_TOPK_LEN"] is False and args["HAS_TOPK_LEN"] is False
    assert args["BS_SHIFT"] == shift and (args["bs_shift"], args["x_bs_shift"]) == runtime
    assert args["x_cache_u8"].data_ptr() == kw["extra_cache"].data_ptr() and args["x_idx_ptr"] is kw["extra_indices"]
    assert args["x_block_size"] == pages[1] and args["X_TOPK"] == 24 and args["TOPK"] == 40
    assert args["cache_u8"].data_ptr() == kw["cache"].data_ptr() and args["block_size"] == pages[0]


def test_one_scope_leaves_the_extra_arguments_unread(monkeypatch):
    monkeypatch.setattr(wgmma, "require_sm90", lambda q, name: None)
    kw = build_case(batch=2, heads=16, topk=40, block_size=64, seed=4).kwargs()
    with common.capture_launches() as records:
        registry.get("wgmma_f16").launch(q=kw["q"], cache=kw["cache"], indices=kw["indices"], topk_length=None,
                                         part_out=torch.empty(2, 16, 1, 512), part_lse=torch.empty(2, 16, 1),
                                         split_offset=0, num_splits=1, tokens_per_split=64, sm_scale=0.1)
    ((_, grid, args),) = records
    assert grid == (1, 1, 2) and args["TWO_SCOPES"] is False and args["BS_SHIFT"] == 6
    assert args["x_idx_ptr"] is kw["indices"]  # a stand-in


def test_a_direct_launch_never_has_two_scopes(monkeypatch):
    monkeypatch.setattr(wgmma, "require_sm90", lambda q, name: None)
    kw = build_case(batch=1, heads=16, topk=40, extra_topk=8, seed=4).kwargs()
    with pytest.raises(ValueError, match="two scopes"):
        registry.get("wgmma_f16").launch(q=kw["q"], cache=kw["cache"], indices=kw["indices"], topk_length=None,
                                         part_out=None, part_lse=torch.empty(1, 16, 1), split_offset=0, num_splits=1,
                                         tokens_per_split=64, sm_scale=0.1, direct=True, extra_cache=kw["extra_cache"],
                                         extra_indices=kw["extra_indices"], extra_num_splits=1,
                                         extra_tokens_per_split=64)


@pytest.mark.parametrize("shared", [None, "cache", "topk_length"], ids=["distinct", "one-cache", "one-topk_length"])
def test_a_plan_binds_each_scope_to_its_own_input(monkeypatch, shared):
    """The plan matches arguments to inputs by data_ptr; where one tensor is passed for both scopes, the launcher's
    x_ names say which input an argument is, so a later call with two different tensors still reads each right."""
    monkeypatch.setattr(wgmma, "require_sm90", lambda q, name: None)
    partial, _combine = two_scope_plan("wgmma_f16", 16, shared).launches
    assert_each_scope_bound(partial)


def two_scope_plan(impl, heads, shared):
    """A plan of ``impl`` for a call of two scopes with topk lengths (b2, topk 40 + 24, pages of 64); ``shared``:
    the input ("cache", "topk_length") passed for both scopes, or None."""
    from workbench import plan as plan_mod
    case = build_case(batch=2, heads=heads, topk=40, block_size=64, topk_length=True, extra_topk=24,
                      extra_block_size=64, extra_topk_length=True, seed=6)
    user = {name: None for name in decode.INPUT_NAMES}
    user.update({k: v for k, v in case.kwargs().items() if k in user})
    if shared:
        user[f"extra_{shared}"] = user[shared]
    return plan_mod.build_plan(user, sm_scale=case.sm_scale, impl=impl, config=None, output_slots=False)


def assert_each_scope_bound(launch):
    """Each scope's arguments of a planned launch (scope 1's, and the extra scope's named x_) read that scope's
    input."""
    from workbench import plan as plan_mod
    slots = {arg: i for arg, i, _ in launch.slots}
    for arg, name in [("cache_u8", "cache"), ("x_cache_u8", "extra_cache"), ("idx_ptr", "indices"),
                      ("x_idx_ptr", "extra_indices"), ("topk_len_ptr", "topk_length"),
                      ("x_topk_len_ptr", "extra_topk_length")]:
        assert slots[arg] == plan_mod.INPUT_INDEX[name], (arg, name)


# ------------------------------------------------------------------------------------------------ GPU

def _one_launch_and_apart(spec, kw, monkeypatch):
    """(out, lse) of ``spec``'s one launch over both scopes, and of the same kernel launched per scope on the same
    split plans (the one launch's joint plan: splits elsewhere would round differently in the combine)."""
    got = run_decode(spec, kw)[1:]  # (out, lse)
    plans = decode.call_splits(spec, kw["q"], _scopes(kw))
    monkeypatch.setattr(decode, "call_splits", lambda *a: plans)
    return got, run_decode(dataclasses.replace(spec, two_scopes=False), kw)[1:]


TWO_SCOPE_CASES = [e for e in CATALOGUE if e.spec.get("extra_topk")]


@pytest.mark.gpu
@pytest.mark.parametrize("impl", WGMMA_RUNGS)
@pytest.mark.parametrize("entry", TWO_SCOPE_CASES, ids=lambda e: e.id)
def test_one_launch_is_a_launch_per_scope_bit_for_bit(impl, entry, monkeypatch):
    """Odd page sizes (2, 61), 256 beside 64, topk_length on either scope, all-invalid queries, NaN in unselected
    pages, -inf and +inf sinks."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is a Gluon kernel for sm_90")
    (out, lse), (ref_out, ref_lse) = _one_launch_and_apart(registry.get(impl), entry.build("cuda").kwargs(),
                                                           monkeypatch)
    assert torch.equal(_bits(out), _bits(ref_out)) and torch.equal(_bits(lse), _bits(ref_lse))


@pytest.mark.gpu
@pytest.mark.parametrize("impl, batch, heads", [("wgmma_f16_2cta", 1, 64), ("wgmma_xchg", 8, 128)],
                         ids=["f16_2cta-b1-h64", "xchg-b8-h128"])
def test_one_launch_at_the_production_shape(impl, batch, heads, monkeypatch):
    """The shape the change is for: topk 128 in pages of 256 and an extra 512 in pages of 64 (at b8 h128 the joint
    plan's splits of 128 tokens)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is a Gluon kernel for sm_90")
    kw = build_case(batch=batch, heads=heads, topk=128, block_size=256, extra_topk=512, extra_block_size=64,
                    sink=True, seed=12, device="cuda").kwargs()
    (out, lse), (ref_out, ref_lse) = _one_launch_and_apart(registry.get(impl), kw, monkeypatch)
    assert torch.equal(_bits(out), _bits(ref_out)) and torch.equal(_bits(lse), _bits(ref_lse))


@pytest.mark.parametrize("batch, heads, want", [(1, 64, (2, 8)), (8, 64, (2, 8)), (8, 128, (2, 4)), (32, 128, (1, 1)),
                                                (64, 128, (1, 1))],
                         ids=["b1-h64", "b8-h64", "b8-h128", "b32-h128", "b64-h128"])
def test_scopes_in_one_launch_share_the_waves(batch, heads, want):
    """Hand-derived on 132 SMs, one wave (wgmma_xchg), 64-token granules, topk 128 + 512: queries * head groups
    programs want round(132 / that) splits in all, shared in proportion to topk (1/5 and 4/5), one at least each,
    the remainder to the larger fraction. At b8 h128 that is 8: 1 + 6 * 1/5 = 2.2 and 1 + 6 * 4/5 = 5.8 -> 2 and 6
    -> 86 tokens, in 64-token granules 128, so 4 splits; planned apart, the second scope alone would want 8 splits,
    160 programs in all: two waves. At b32 h128, 2 in all: 1 and 1 (rounding each share up gave 1 and 2, 192
    programs)."""
    spec = registry.get("wgmma_xchg")
    plans = decode.spec_split_plans(spec, queries=batch, heads=heads, topks=[128, 512], num_sms=132)
    assert tuple(p.num_splits for p in plans) == want
    apart = decode.spec_split_plans(dataclasses.replace(spec, two_scopes=False), queries=batch, heads=heads,
                                    topks=[128, 512], num_sms=132)
    assert tuple(p.num_splits for p in apart) == {(8, 128): (2, 8), (32, 128): (2, 2)}.get((batch, heads), want)
    one = decode.spec_split_plans(spec, queries=batch, heads=heads, topks=[512], num_sms=132)
    assert one == decode.spec_split_plans(dataclasses.replace(spec, two_scopes=False), queries=batch, heads=heads,
                                          topks=[512], num_sms=132)


def _tweaked_scope_as_extra(device="cpu"):
    """A case whose main scope holds raw scale bytes outside the f16 window (tweak "extreme-scale-bytes": the f16
    rungs' splits over it run again in bf16), passed with its scopes swapped, so that the tweaked one is the extra
    scope: one softmax over the union either way."""
    kw = build_case(batch=2, heads=16, topk=64, block_size=64, extra_topk=64, extra_block_size=256,
                    kv_decades=(-1.0, 1.0), tweak="extreme-scale-bytes", seed=21, device=device).kwargs()
    swapped = dict(kw, cache=kw["extra_cache"], indices=kw["extra_indices"], topk_length=kw["extra_topk_length"],
                   extra_cache=kw["cache"], extra_indices=kw["indices"], extra_topk_length=kw["topk_length"])
    return kw, swapped


def test_swapping_the_scopes_is_the_same_softmax():
    """The premise of the GPU test below, on the fp32 reference: the swapped call's output is the original's."""
    import workbench as wb
    kw, swapped = _tweaked_scope_as_extra()
    out, lse = wb.sparse_mla_decode_reference(**kw)
    s_out, s_lse = wb.sparse_mla_decode_reference(**swapped)
    torch.testing.assert_close(s_out, out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(s_lse, lse, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", WGMMA_RUNGS)
def test_the_extra_scope_runs_its_bf16_second_pass(impl, monkeypatch):
    """Scale bytes outside the f16 window in the extra scope only: its splits run again in bf16 from the extra
    scope's arguments (the second pass selects the scope anew), bit for bit as a launch of that scope alone, and
    within the check's tolerance of the fp32 reference."""
    import workbench as wb
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is a Gluon kernel for sm_90")
    _, swapped = _tweaked_scope_as_extra("cuda")
    (out, lse), (ref_out, ref_lse) = _one_launch_and_apart(registry.get(impl), swapped, monkeypatch)
    assert torch.equal(_bits(out), _bits(ref_out)) and torch.equal(_bits(lse), _bits(ref_lse))
    f_out, f_lse = wb.sparse_mla_decode_reference(**swapped)
    wb.assert_close(out.float(), lse, f_out, f_lse, impl)


@pytest.mark.parametrize("total, weights, parts", [(2, [128, 512], [1, 1]), (8, [128, 512], [2, 6]),
                                                   (264, [128, 512], [53, 211]), (3, [1, 1], [2, 1]),
                                                   (2, [0, 512], [1, 1])])
def test_largest_remainder_by_hand(total, weights, parts):
    assert decode.largest_remainder(total, weights) == parts


def test_an_extra_scope_is_never_one_split_to_the_rule(monkeypatch):
    """auto's query count stands for "one split, no combine" only with one scope: with an extra scope there are two
    splits at least. decode tells the rule the call's scopes, and the rule then leaves the one-split picks alone
    (b128 h32, topk 64 + 64: the 32-head portable block, not wgmma_f16's one split; at 64 heads the 64-head block
    either way, since rung 15 stages its one-split output: ab55493)."""
    seen = []
    monkeypatch.setattr(registry, "resolve", lambda impl, device, **kw: seen.append(kw) or "tile512")
    for extra in (0, 8):
        kw = build_case(batch=2, heads=32, topk=16, extra_topk=extra, seed=3).kwargs()
        decode.resolve_call(**{k: kw.get(k) for k in decode.INPUT_NAMES}, sm_scale=None, impl="auto")
    assert [(s["queries"], s["scopes"]) for s in seen] == [(2, 1), (2, 2)]
    assert registry.auto_kernel("sm_90", heads=32, tokens=128 * 128, queries=128, scopes=1) == "wgmma_f16"
    assert registry.auto_kernel("sm_90", heads=32, tokens=128 * 128, queries=128, scopes=2) == "portable_ws_h32t"
    assert registry.auto_kernel("sm_90", heads=64, tokens=128 * 512, queries=128, scopes=1) == "wgmma_ws_h64"
    assert registry.auto_kernel("sm_90", heads=64, tokens=128 * 512, queries=128, scopes=2) == "wgmma_ws_h64"


def test_the_launcher_refuses_an_extra_scope_without_splits(monkeypatch):
    monkeypatch.setattr(wgmma, "require_sm90", lambda q, name: None)
    kw = build_case(batch=1, heads=16, topk=40, extra_topk=8, seed=4).kwargs()
    with pytest.raises(ValueError, match="extra_num_splits"):
        registry.get("wgmma_f16").launch(q=kw["q"], cache=kw["cache"], indices=kw["indices"], topk_length=None,
                                         part_out=torch.empty(1, 16, 1, 512), part_lse=torch.empty(1, 16, 1),
                                         split_offset=0, num_splits=1, tokens_per_split=64, sm_scale=0.1,
                                         extra_cache=kw["extra_cache"], extra_indices=kw["extra_indices"])
