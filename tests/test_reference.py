"""The fp32 reference against FlashMLA's golden outputs, hand-derived cases and the catalogue worked by the rules."""
import math

import pytest
import torch

import workbench as wb
from workbench.format import cases
from workbench.format.golden import golden_expected, golden_kwargs, golden_names, load_golden


@pytest.mark.parametrize("name", golden_names())
def test_reference_matches_flashmla(name):
    g = load_golden(name)
    out, lse = wb.sparse_mla_decode_reference(**golden_kwargs(g))
    exp_out, exp_lse = golden_expected(g)
    m = wb.assert_close(out, lse, exp_out, exp_lse, name)
    assert m["out_rel_norm"] < 3e-3


def _one_page_cache(rows):
    """A cache of one 4-token page holding exactly representable rows (fp8 values times 2**k)."""
    kv = torch.zeros(1, 4, 512, dtype=torch.bfloat16)
    for i, r in enumerate(rows):
        kv[0, i] = r
    return wb.quantize_kv(kv)


def test_single_token_gives_that_token():
    k = torch.zeros(512)
    k[0], k[100], k[460] = 1.0, -2.0, 0.5  # exact in fp8 (nope) and bf16 (rope)
    cache = _one_page_cache([k])
    q = torch.zeros(1, 1, 1, 512, dtype=torch.bfloat16)
    q[..., 0], q[..., 460] = 3.0, 4.0
    idx = torch.tensor([[[2, -1, 0, 77]]], dtype=torch.int32)  # token 0 valid; 2 is a zero row; 77 out of range
    out, lse = wb.sparse_mla_decode_reference(q, cache, idx[..., 2:3], sm_scale=0.25)
    assert torch.equal(out[0, 0, 0], k)
    assert lse.item() == pytest.approx(0.25 * (3 * 1 + 4 * 0.5))
    assert lse.shape == (1, 1, 1)


def test_two_tokens_and_sink_by_hand():
    a, b = torch.zeros(512), torch.zeros(512)
    a[0], b[0], b[1] = 1.0, 2.0, 1.0
    cache = _one_page_cache([a, b])
    q = torch.zeros(1, 1, 2, 512, dtype=torch.bfloat16)
    q[0, 0, :, 0] = 1.0
    idx = torch.tensor([[[0, 1, -1]]], dtype=torch.int32)
    sink = torch.tensor([0.5, float("inf")])
    out, lse = wb.sparse_mla_decode_reference(q, cache, idx, sm_scale=1.0, attn_sink=sink)
    # logits 1 and 2: lse = log(e + e^2); p = softmax
    l = math.log(math.e + math.e ** 2)
    p0, p1 = math.exp(1 - l), math.exp(2 - l)
    gate = 1 / (1 + math.exp(0.5 - l))
    assert lse[0, 0, 0].item() == pytest.approx(l, rel=1e-6)
    assert out[0, 0, 0, 0].item() == pytest.approx(gate * (p0 * 1 + p1 * 2), rel=1e-6)
    assert out[0, 0, 0, 1].item() == pytest.approx(gate * p1, rel=1e-6)
    assert torch.equal(out[0, 0, 1], torch.zeros(512)), "sink=+inf silences the head"
    assert lse[0, 1, 0].item() == pytest.approx(l, rel=1e-6), "lse excludes the sink"


def test_no_valid_token_gives_zero_and_plus_inf():
    cache = _one_page_cache([torch.ones(512)])
    q = torch.ones(1, 2, 3, 512, dtype=torch.bfloat16)
    idx = torch.tensor([[[-1, 4, -9], [0, -1, -1]]], dtype=torch.int32)  # 4 = num_tokens: out of range
    out, lse = wb.sparse_mla_decode_reference(q, cache, idx, attn_sink=torch.full((3,), -float("inf")))
    assert torch.equal(out[0, 0], torch.zeros(3, 512)) and bool(torch.isposinf(lse[0, :, 0]).all())
    assert bool(torch.isfinite(lse[0, :, 1]).all()) and bool(torch.isfinite(out).all())


def _by_the_rules(case):
    """out, lse of a catalogue case in float64, query by query, from the rules written out (DESIGN.md):

    an index counts when 0 <= idx < num_blocks*block_size and its position is below min(topk_length, topk);
    the rows come from dequantize_kv of the whole cache (NaN pages included); lse over every counted token of
    both scopes; the sink scales out by 1/(1+exp(sink-lse)); no counted token: out 0, lse +inf.
    """
    b, s_q, h, d = case.q.shape
    out = torch.zeros(b, s_q, h, d, dtype=torch.float64)
    lse = torch.full((b, h, s_q), float("inf"), dtype=torch.float64)
    rows = [(wb.dequantize_kv(sc.cache).double().reshape(-1, d), sc) for sc in case.scopes]
    for i in range(b):
        for j in range(s_q):
            picked = []
            for kv, sc in rows:
                n = kv.shape[0]
                limit = sc.indices.shape[2] if sc.topk_length is None else int(sc.topk_length[i])
                idx = sc.indices[i, j].long()
                picked.append(kv[idx[(idx >= 0) & (idx < n) & (torch.arange(idx.numel()) < limit)]])
            k = torch.cat(picked)                                       # [tokens, d]
            if not len(k):
                continue
            logits = case.q[i, j].double() @ k.T * case.sm_scale        # [h, tokens]
            l = torch.logsumexp(logits, dim=-1)
            o = torch.softmax(logits, dim=-1) @ k
            if case.attn_sink is not None:
                o = o / (1 + torch.exp(case.attn_sink.double() - l))[:, None]
            out[i, j], lse[i, :, j] = o, l
    return out, lse


@pytest.mark.parametrize("entry", cases.catalogue(), ids=lambda e: e.id)
def test_reference_follows_the_rules_on_every_catalogue_case(entry, catalogue_case):
    """Every catalogue case, GPU-only ones included (the reference is torch: NaN pages read as NaN here); the
    range cases (scale bytes 1..254, q up to 3e38, rope up to 1e30, one nope value of 3e38) stay finite in fp32."""
    c = catalogue_case(entry.id)
    out, lse = wb.sparse_mla_decode_reference(**c.kwargs())
    want_out, want_lse = _by_the_rules(c)
    assert torch.equal(torch.isposinf(lse), torch.isposinf(want_lse)), "+inf exactly where nothing counts"
    assert bool(torch.isfinite(out).all()), "no NaN from pages nothing selects, no overflow from huge values"
    assert bool((torch.isfinite(lse) | torch.isposinf(lse)).all()), "lse is a number wherever a token counts"
    fin = torch.isfinite(want_lse)
    assert torch.allclose(lse.double()[fin], want_lse[fin], rtol=1e-6, atol=1e-6)
    scale = want_out.abs().amax().clamp_min(1e-30)
    assert float((out.double() - want_out).abs().max() / scale) < 1e-5


def test_unselected_nan_pages_do_not_leak(catalogue_case):
    for entry in cases.catalogue():
        if "nan-unselected" not in entry.covers:
            continue
        c = catalogue_case(entry.id)
        assert any(bool(torch.isnan(wb.dequantize_kv(s.cache).float()).any()) for s in c.scopes), entry.id
        out, lse = wb.sparse_mla_decode_reference(**c.kwargs())
        assert bool(torch.isfinite(out).all()), entry.id
