"""The Triton kernels under the CPU interpreter: FlashMLA golden cases and the hostile catalogue's cases.

Every Triton split kernel on the ladder runs the golden cases (the Gluon rungs are GPU only). Tests marked
``interpreter`` run the kernels on CPU tensors: with TRITON_INTERPRET=0 they are skipped (on a GPU,
``pytest -m gpu`` runs the same cases through the GPU checks).
"""
import math

import pytest
import torch

import workbench as wb
from workbench.format import cases
from workbench.format.cases import catalogue
from workbench.format.codec import to_device
from workbench.format.golden import golden_expected, golden_kwargs, golden_names, load_golden


SPLIT_KERNELS = ["mma", "tile512"]
interpreter = pytest.mark.interpreter


@interpreter
@pytest.mark.parametrize("impl", SPLIT_KERNELS)
@pytest.mark.parametrize("name", golden_names())
def test_split_kernel_matches_flashmla_golden(name, impl):
    g = load_golden(name)
    out, lse = wb.sparse_mla_decode(**golden_kwargs(g), impl=impl)
    wb.assert_close(out.float(), lse, *golden_expected(g), f"{impl} {name}")


SIMT_HEADS = slice(3, None, 21)  # a spread of heads: the per-head kernel treats each one alone


@interpreter
@pytest.mark.parametrize("name", golden_names())
def test_simt_matches_flashmla_golden(name):
    g = load_golden(name)
    out, lse = wb.sparse_mla_decode(**golden_kwargs(g, heads=SIMT_HEADS), impl="simt")
    wb.assert_close(out.float(), lse, *golden_expected(g, heads=SIMT_HEADS), f"simt {name}")


# The hostile cases are the catalogue's (workbench.format.cases): every entry the interpreter can check, by its id.
HOSTILE = {e.id: e for e in catalogue(interpretable=True)}


@pytest.fixture(scope="module", params=list(HOSTILE), ids=list(HOSTILE))
def hostile(request, catalogue_case):
    case = catalogue_case(request.param)
    return case, wb.sparse_mla_decode_reference(**case.kwargs())


@interpreter
@pytest.mark.parametrize("impl", SPLIT_KERNELS + ["simt"])
def test_kernel_matches_reference_on_hostile_case(hostile, impl):
    _check_hostile(hostile, impl)


def _check_hostile(hostile, impl):
    case, (ref_out, ref_lse) = hostile
    out, lse = wb.sparse_mla_decode(**case.kwargs(), impl=impl)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert out.shape == case.q.shape and lse.shape == (case.q.shape[0], case.q.shape[2], case.q.shape[1])
    wb.assert_close(out.float(), lse, ref_out, ref_lse, impl)
    empty = torch.isposinf(ref_lse)
    assert torch.equal(out.permute(0, 2, 1, 3)[empty].float(), torch.zeros_like(out.permute(0, 2, 1, 3)[empty].float()))


@interpreter
def test_mma_is_deterministic_and_forced_config_matches(catalogue_case):
    case = catalogue_case("h24-k48-bs69-sinkneginf-tklen-invalid50")
    a = wb.sparse_mla_decode(**case.kwargs(), impl="mma")
    b = wb.sparse_mla_decode(**case.kwargs(), impl="mma")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # BLOCK_H=16 on 24 heads: two head groups, the second one part masked
    c = wb.sparse_mla_decode(**case.kwargs(), impl="mma",
                             config={"BLOCK_H": 16, "BLOCK_T": 16, "num_warps": 4, "num_stages": 1})
    ref = wb.sparse_mla_decode_reference(**case.kwargs())
    wb.assert_close(c[0].float(), c[1], *ref, "forced config")


def nan_head_case(device="cpu", heads=4, topk=96, seed=0):
    """q with NaN in every column of head 1 of batch 0, over a 2-page cache (64-token pages) of which each query
    selects ``topk`` shuffled tokens: (kwargs, reference). The reference gives that head NaN and every other head
    a number."""
    g = torch.Generator().manual_seed(seed)
    cache = to_device(wb.quantize_kv(torch.randn(2, 64, 512, generator=g).to(torch.bfloat16)), device)
    idx = torch.stack([torch.randperm(128, generator=g)[:topk] for _ in range(2)]).int()[:, None, :].to(device)
    q = torch.randn(2, 1, heads, 512, generator=g).to(torch.bfloat16)
    q[0, 0, 1] = float("nan")
    kw = dict(q=q.to(device), cache=cache, indices=idx)
    return kw, wb.sparse_mla_decode_reference(**kw)


def check_nan_head(kw, ref, impl):
    """The NaN head is NaN in out and lse (not an empty split the combine drops: that gave 0 and +inf);
    the others match the reference."""
    out, lse = wb.sparse_mla_decode(**kw, impl=impl)
    assert torch.isnan(ref[0][0, 0, 1]).all(), "the reference itself"
    assert torch.isnan(out[0, 0, 1]).all() and torch.isnan(lse[0, 1]).all(), impl
    keep = torch.ones(out.shape[2], dtype=torch.bool)
    keep[1] = False
    wb.assert_close(out[:, :, keep].float(), lse[:, keep], ref[0][:, :, keep], ref[1][:, keep], impl)
    wb.assert_close(out[1:].float(), lse[1:], ref[0][1:], ref[1][1:], impl)


@interpreter
@pytest.mark.parametrize("impl", SPLIT_KERNELS + ["simt"])
def test_nan_in_q_reaches_its_heads_output(impl):
    check_nan_head(*nan_head_case(), impl)


@pytest.mark.parametrize("device", [pytest.param("cpu", marks=interpreter),
                                    pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("lse_parts", [[float("nan")], [float("nan"), float("-inf")], [0.5, float("nan"), 1.0]],
                         ids=["nan-only", "nan-and-empty", "nan-among-live"])
def test_combine_turns_a_nan_split_into_nan(device, lse_parts):
    """The combine on hand-made partials: a NaN LSE among empty (-inf) or live splits makes out and lse NaN.
    tl.max skips NaN on the GPU, so without the combine's own test a lone NaN split read as an empty query (out 0,
    lse +inf); numpy's max (the interpreter) propagates it, so the CPU case cannot tell the two apart."""
    from workbench.kernels.combine import launch_combine
    s = len(lse_parts)
    part_out = torch.randn(1, 1, s, 512).to(device)
    part_lse = torch.tensor(lse_parts, dtype=torch.float32).reshape(1, 1, s).to(device)
    out = torch.empty(1, 1, 1, 512, dtype=torch.bfloat16, device=device)
    lse = torch.empty(1, 1, 1, dtype=torch.float32, device=device)
    launch_combine(part_out=part_out, part_lse=part_lse, attn_sink=None, out=out, lse=lse, pinned=True)
    assert torch.isnan(lse).all() and torch.isnan(out).all(), (lse, out[..., :4])


@pytest.mark.parametrize("device", [pytest.param("cpu", marks=interpreter),
                                    pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("s", [3, 8, 11], ids=["3-splits", "8-splits-one-chunk", "11-splits-two-chunks"])
@pytest.mark.parametrize("sink", [None, 0.3], ids=["no-sink", "sink"])
def test_combine_weighs_live_splits_and_never_uses_an_empty_ones_row(device, s, sink):
    """The combine on hand-made partials against the merge written out in torch: every third split empty (LSE
    -inf) with NaN and inf in its row (a row nobody wrote may hold anything), the others live. The combine reads
    the first chunk's rows with the LSEs, before it knows which are empty, so an empty row must be selected away,
    not multiplied by its zero weight."""
    from workbench.kernels.combine import launch_combine
    g = torch.Generator().manual_seed(s)
    h, d = 2, 512
    part_out = torch.randn(1, h, s, d, generator=g)
    part_lse = torch.randn(1, h, s, generator=g) * 3  # base 2
    empty = torch.arange(s) % 3 == 1
    part_lse[..., empty] = float("-inf")
    part_out[..., empty, ::2] = float("nan")
    part_out[..., empty, 1::2] = float("inf")
    w = torch.exp2(part_lse - part_lse.amax(-1, keepdim=True))  # [1, h, s]
    live = torch.where(empty[:, None], 0.0, part_out)
    want = (w[..., None] * live).sum(-2) / w.sum(-1, keepdim=True)  # [1, h, d]
    want_lse = torch.logsumexp(part_lse * math.log(2), -1)  # natural log, as decode returns it
    attn_sink = None
    if sink is not None:
        attn_sink = torch.full((h,), sink)
        want = want / (1 + torch.exp(attn_sink - want_lse))[..., None]
    out = torch.empty(1, 1, h, d, dtype=torch.bfloat16, device=device)
    lse = torch.empty(1, h, 1, dtype=torch.float32, device=device)
    launch_combine(part_out=part_out.to(device), part_lse=part_lse.to(device),
                   attn_sink=None if attn_sink is None else attn_sink.to(device), out=out, lse=lse, pinned=True)
    torch.testing.assert_close(lse.cpu()[:, :, 0], want_lse, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.cpu()[0].float(), want.to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", [i for i in wb.registry.decode_impls() if i not in ("auto", "reference")])
def test_nan_in_q_reaches_its_heads_output_on_the_gpu(impl):
    """Every kernel on the GPU (where tl.max and gl.max skip NaN), the Gluon rungs included (sm_90)."""
    if wb.registry.get(impl).interpretable is False and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is a Gluon kernel for sm_90")
    check_nan_head(*nan_head_case("cuda", heads=16), impl)


def test_split_plan_fills_the_gpu_and_is_bounded():
    p = wb.plan_splits(queries=1, heads=64, topk=512, num_sms=132)
    assert p.num_splits * p.tokens_per_split >= 512 and p.num_splits > 16
    p = wb.plan_splits(queries=128, heads=128, topk=2048, num_sms=132)
    assert p.num_splits == 1 and p.tokens_per_split == 2048
    p = wb.plan_splits(queries=1, heads=1, topk=1 << 20, num_sms=188)
    assert p.num_splits <= 64
    p = wb.plan_splits(queries=1, heads=64, topk=512, num_sms=132, granule=64)
    assert (p.num_splits, p.tokens_per_split) == (8, 64)  # whole tiles, not 32 splits of 16 tokens


@pytest.mark.parametrize("batch, heads, block_h, want", [(64, 64, None, 2), (64, 64, 32, 1), (16, 64, 32, 4),
                                                         (64, 32, 16, 1), (8, 128, 32, 4), (8, 128, 16, 2)],
                         ids=["b64-h64-nominal", "b64-h64-h32", "b16-h64-h32", "b64-h32-h16", "b8-h128-h32",
                              "b8-h128-h16"])
def test_split_plan_counts_the_programs_of_the_specs_head_group(batch, heads, block_h, want):
    """Hand-derived, one wave on 132 SMs, topk 2048 in 32-token granules: round(132 / (batch * ceil(heads /
    block_h))) splits, at least one (block_h None: decode.NOMINAL_BLOCK_H, 64). b64 h64 in 32-head programs: 128 of
    them already, so one split, where the nominal 64-head count asks for two (256 programs, two waves)."""
    import dataclasses
    spec = dataclasses.replace(wb.registry.get("portable_ws_h32t"), split_waves=1, split_granule=32,
                               split_block_h=block_h)
    (plan,) = wb.decode.spec_split_plans(spec, queries=batch, heads=heads, topks=[2048], num_sms=132)
    assert plan.num_splits == want and plan.tokens_per_split == 2048 // want


def test_kernels_require_gpu_or_interpreter(monkeypatch):
    import workbench.decode as dec
    monkeypatch.setattr(dec, "INTERPRET", False)
    case = cases.get("h1-k1-bs2-one-token").build()
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        wb.sparse_mla_decode(**case.kwargs(), impl="mma")
