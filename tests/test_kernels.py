"""The Triton kernels under the CPU interpreter: FlashMLA golden cases and hostile synthetic cases.

Every split kernel on the ladder runs the golden cases; "tile512_bf16dq" runs tile512's numerics under
the interpreter (its bit dequant is GPU-only; test_dequant_bits checks the formula), so it gets one
hostile case for its launch path.
"""
import pytest
import torch

import workbench as wb
from workbench.golden import golden_expected, golden_kwargs, golden_names, load_golden


SPLIT_KERNELS = ["mma", "tile512"]


@pytest.mark.parametrize("impl", SPLIT_KERNELS)
@pytest.mark.parametrize("name", golden_names())
def test_split_kernel_matches_flashmla_golden(name, impl):
    g = load_golden(name)
    out, lse = wb.sparse_mla_decode(**golden_kwargs(g), impl=impl)
    wb.assert_close(out.float(), lse, *golden_expected(g), f"{impl} {name}")


SIMT_HEADS = slice(3, None, 21)  # a spread of heads: the per-head kernel treats each one alone


@pytest.mark.parametrize("name", golden_names())
def test_simt_matches_flashmla_golden(name):
    g = load_golden(name)
    out, lse = wb.sparse_mla_decode(**golden_kwargs(g, heads=SIMT_HEADS), impl="simt")
    wb.assert_close(out.float(), lse, *golden_expected(g, heads=SIMT_HEADS), f"simt {name}")


# heads 1/5/16/20/64, s_q 1/3, topk 1/37/200, pages 2/61/256, sink +inf/-inf/finite/mixed,
# topk_length 0/partial/full, extra scope on/off, invalid and out-of-range indices, all-invalid queries
HOSTILE = {
    "h1-sq1-topk1-bs2": dict(heads=1, s_q=1, topk=1, block_size=2, invalid_frac=0.0),
    "h5-sq3-topk37-bs61-sinkmixed-tklen": dict(heads=5, s_q=3, topk=37, block_size=61, sink="mixed",
                                               topk_length=True, all_invalid_queries=1),
    "h16-sq1-topk200-bs256-sink-extra-bs2": dict(heads=16, s_q=1, topk=200, block_size=256, sink=True,
                                                 extra_topk=37, extra_block_size=2, extra_topk_length=True),
    "h20-sq3-topk37-bs2-sinkinf-extra-bs61": dict(heads=20, s_q=3, topk=37, block_size=2, sink="inf",
                                                  extra_topk=1, extra_block_size=61, all_invalid_queries=2),
    "h64-sq1-topk200-bs61-sinkneginf-tklen": dict(heads=64, s_q=1, topk=200, block_size=61, sink="-inf",
                                                  topk_length=True, invalid_frac=0.5),
    "h16-sq1-topk37-bs69-allinvalid": dict(heads=16, s_q=1, topk=37, block_size=69, invalid_frac=1.0),
    "h5-sq1-topk200-bs2-mild-nosink": dict(heads=5, s_q=1, topk=200, block_size=2, kv_decades=(-0.5, 0.5)),
}


@pytest.fixture(scope="module", params=list(HOSTILE), ids=list(HOSTILE))
def hostile(request):
    spec = dict(batch=3, sm_scale=0.07, seed=len(request.param))
    spec.update(HOSTILE[request.param])
    case = wb.build_case(**spec)
    return case, wb.sparse_mla_decode_reference(**case.kwargs())


@pytest.mark.parametrize("impl", SPLIT_KERNELS + ["simt"])
def test_kernel_matches_reference_on_hostile_case(hostile, impl):
    _check_hostile(hostile, impl)


def test_bf16_dequant_rung_launches_and_matches_reference():
    spec = dict(batch=3, sm_scale=0.07, seed=5, **HOSTILE["h5-sq3-topk37-bs61-sinkmixed-tklen"])
    case = wb.build_case(**spec)
    _check_hostile((case, wb.sparse_mla_decode_reference(**case.kwargs())), "tile512_bf16dq")


def _check_hostile(hostile, impl):
    case, (ref_out, ref_lse) = hostile
    out, lse = wb.sparse_mla_decode(**case.kwargs(), impl=impl)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert out.shape == case.q.shape and lse.shape == (case.q.shape[0], case.q.shape[2], case.q.shape[1])
    wb.assert_close(out.float(), lse, ref_out, ref_lse, impl)
    empty = torch.isposinf(ref_lse)
    assert torch.equal(out.permute(0, 2, 1, 3)[empty].float(), torch.zeros_like(out.permute(0, 2, 1, 3)[empty].float()))


def test_mma_is_deterministic_and_forced_config_matches():
    case = wb.build_case(batch=2, heads=20, topk=70, block_size=61, sink=True, extra_topk=20)
    a = wb.sparse_mla_decode(**case.kwargs(), impl="mma")
    b = wb.sparse_mla_decode(**case.kwargs(), impl="mma")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = wb.sparse_mla_decode(**case.kwargs(), impl="mma",
                             config={"BLOCK_H": 32, "BLOCK_T": 16, "num_warps": 4, "num_stages": 1})
    ref = wb.sparse_mla_decode_reference(**case.kwargs())
    wb.assert_close(c[0].float(), c[1], *ref, "forced config")


def test_split_plan_fills_the_gpu_and_is_bounded():
    p = wb.plan_splits(queries=1, heads=64, topk=512, num_sms=132)
    assert p.num_splits * p.tokens_per_split >= 512 and p.num_splits > 16
    p = wb.plan_splits(queries=128, heads=128, topk=2048, num_sms=132)
    assert p.num_splits == 1 and p.tokens_per_split == 2048
    p = wb.plan_splits(queries=1, heads=1, topk=1 << 20, num_sms=188)
    assert p.num_splits <= 64


def test_kernels_require_gpu_or_interpreter(monkeypatch):
    import workbench.decode as dec
    monkeypatch.setattr(dec, "INTERPRET", False)
    case = wb.build_case(batch=1, heads=2, topk=4)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        wb.sparse_mla_decode(**case.kwargs(), impl="mma")
