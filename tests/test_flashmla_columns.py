"""The GPU check table's FlashMLA columns (issue 22), on the CPU: the parts that need no GPU.

``gpu_check.run_flashmla`` runs FlashMLA once per catalogue case and never raises (a failure is the row's
reason); ``flashmla_kwargs`` hands FlashMLA the case with the same meaning (it reads through any index but -1);
``finite_where`` compares finiteness element by element; ``case_rows`` adds the columns to every kernel's row and
calls FlashMLA once for all kernels. FlashMLA itself stands in here as a fake ``call``.
"""
import math

import pytest
import torch

import workbench as wb
from workbench import gpu_check
from workbench.format import cases


def _ref(case):
    return wb.sparse_mla_decode_reference(**case.kwargs())


def test_nonfinite_where_finite_by_hand():
    theirs = torch.zeros(1, 1, 2, 4)
    theirs[0, 0, 1, 2] = float("nan")
    ours = torch.zeros(1, 1, 2, 4)
    their_lse = torch.tensor([[[0.5], [float("inf")]]])  # head 1: no valid token
    assert gpu_check.finite_where(ours, their_lse.clone(), theirs, their_lse)
    ours[0, 0, 1, 2] = float("nan")  # NaN where FlashMLA is NaN too: not counted
    assert gpu_check.nonfinite_where_finite(ours, their_lse, theirs, their_lse) == 0
    ours[0, 0, 0, 1] = float("inf")
    ours[0, 0, 1, 3] = float("nan")
    assert gpu_check.nonfinite_where_finite(ours, their_lse, theirs, their_lse) == 2
    lse = their_lse.clone()
    lse[0, 0, 0] = float("nan")  # NaN lse where FlashMLA's is a number
    lse[0, 1, 0] = float("nan")  # NaN where FlashMLA says +inf (no valid token)
    assert gpu_check.nonfinite_where_finite(torch.zeros_like(ours), lse, theirs, their_lse) == 2
    lse[0, 1, 0] = 3.0  # a number where FlashMLA says +inf is wrong, but finite
    lse[0, 0, 0] = float("inf")  # +inf where FlashMLA has a number is not
    assert gpu_check.nonfinite_where_finite(torch.zeros_like(ours), lse, theirs, their_lse) == 1
    assert not gpu_check.finite_where(torch.zeros_like(ours), lse, theirs, their_lse)


@pytest.mark.parametrize("case_id", ["h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid",
                                     "h8-k40-bs256-sink-extra-bs2-xtklen"])
def test_flashmla_kwargs_mean_the_same(case_id, catalogue_case):
    """Out-of-range indices become -1 and topk_length past topk is clamped; the reference gives the same bits."""
    c = catalogue_case(case_id)
    kw = gpu_check.flashmla_kwargs(c)
    for prefix, s in (("", c.main), ("extra_", c.extra)):
        if s is None:
            continue
        n = s.cache.shape[0] * s.block_size
        idx = kw[f"{prefix}indices"]
        assert idx.dtype == torch.int32 and idx.is_contiguous()
        assert bool(((idx == -1) | ((idx >= 0) & (idx < n))).all())
        assert bool((s.indices < -1).any() | (s.indices >= n).any()), "the case had out-of-range indices to drop"
        if s.topk_length is not None:
            assert int(kw[f"{prefix}topk_length"].max()) <= idx.shape[-1]
    want = wb.sparse_mla_decode_reference(**c.kwargs())
    got = wb.sparse_mla_decode_reference(**kw)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_run_flashmla_never_raises_and_says_why(catalogue_case):
    c = catalogue_case("h1-k1-bs2-one-token")
    ref = _ref(c)
    here = gpu_check.run_flashmla(c)  # this machine: no flash_mla / no sm_90 GPU
    if not here.ran:
        assert here.reason

    def boom(kw):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    failed = gpu_check.run_flashmla(c, call=boom)
    assert not failed.ran and failed.reason.startswith("RuntimeError: CUDA error")
    cols = failed.case_columns(ref)
    assert set(cols) == set(gpu_check.FLASHMLA_CASE_COLUMNS) and cols["flashmla_reason"] == failed.reason
    assert all(math.isnan(cols[k]) for k in ("flashmla_finite", "flashmla_out_rel_norm", "flashmla_passed"))
    row = failed.row_columns(*ref)
    assert set(row) == set(gpu_check.FLASHMLA_ROW_COLUMNS) and all(math.isnan(v) for v in row.values())


def test_run_flashmla_refuses_wrong_shapes(catalogue_case):
    c = catalogue_case("h4-k32-bs64-kv-70000")
    out, lse = _ref(c)
    r = gpu_check.run_flashmla(c, call=lambda kw: (out[:, :, :2], lse))
    assert not r.ran and "returned out" in r.reason


def test_run_flashmla_refuses_more_than_128_heads_without_calling():
    c = cases.build_case(batch=1, heads=130, topk=4)
    calls = []
    r = gpu_check.run_flashmla(c, call=lambda kw: calls.append(kw))
    assert not r.ran and "130" in r.reason and not calls


def test_flashmla_columns_with_a_stand_in(catalogue_case):
    """A stand-in FlashMLA that returns the reference in bf16: finite, within tolerance; a kernel with one NaN
    where the stand-in is finite is flagged, with its count."""
    c = catalogue_case("h4-k64-bs64-bytes-254-135-253-1-104")
    ref = _ref(c)
    seen = []

    def stand_in(kw):
        seen.append(kw)
        out, lse = wb.sparse_mla_decode_reference(**kw)
        return out.to(torch.bfloat16), lse
    r = gpu_check.run_flashmla(c, call=stand_in)
    assert r.ran and not r.reason and len(seen) == 1
    cols = r.case_columns(ref)
    assert cols["flashmla_finite"] is True and cols["flashmla_passed"] is True and cols["flashmla_reason"] == ""
    assert cols["flashmla_out_rel_norm"] < 3e-3
    out = ref[0].to(torch.bfloat16).clone()
    assert r.row_columns(out, ref[1]) == dict(finite_where_flashmla_is=True, nonfinite_where_flashmla_finite=0)
    out[0, 0, 1, 5] = float("nan")
    assert r.row_columns(out, ref[1]) == dict(finite_where_flashmla_is=False, nonfinite_where_flashmla_finite=1)


def test_case_rows_run_flashmla_once_for_all_kernels(monkeypatch, catalogue_case):
    entry = cases.get("h4-k32-bs64-kv-70000")
    c = catalogue_case(entry.id)
    ref = _ref(c)
    calls = []

    def fake_flashmla(case, call=None):
        calls.append(case)
        return gpu_check.FlashMLARun(out=ref[0].to(torch.bfloat16), lse=ref[1])
    monkeypatch.setattr(gpu_check, "run_flashmla", fake_flashmla)
    nan_out = ref[0].to(torch.bfloat16).clone()
    nan_out[1] = float("nan")
    outs = {"mma": (ref[0].to(torch.bfloat16), ref[1]), "tile512": (nan_out, ref[1])}
    monkeypatch.setattr(gpu_check, "sparse_mla_decode", lambda impl, config=None, **kw: outs[impl])
    rows = gpu_check.case_rows(entry, 0, impls=list(outs), device="cpu", built=(c, ref))
    assert len(calls) == 1, "FlashMLA runs once per case, not once per kernel"
    by = {r["impl"]: r for r in rows}
    assert by["mma"]["passed"] and by["mma"]["finite_where_flashmla_is"] is True
    assert by["tile512"]["finite_where_flashmla_is"] is False
    assert by["tile512"]["nonfinite_where_flashmla_finite"] == nan_out[1].numel()
    for r in rows:
        assert r["flashmla_finite"] is True and r["flashmla_reason"] == "" and r["flashmla_out_rel_norm"] < 3e-3
