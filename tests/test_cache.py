"""Cache bytes against FlashMLA's golden cases; quantisation round trip; index helpers; the builder and its catalogue."""
import math

import pytest
import torch

import workbench as wb
from workbench.format import cases
from workbench.format.cases import build_case
from workbench.format.codec import (SCALE_CONVENTIONS, _row_views, copy_cache, dequantize_kv, gather_dequantized,
                                    indices_to_positions, page_bytes_view, positions_to_indices, quantize_kv,
                                    raw_scale_bytes, to_device)
from workbench.format.golden import golden_names, load_golden
from workbench.format.layout import MODEL1


def _page_bytes(cache):
    nb, bs = cache.shape[:2]
    return cache.as_strided((nb, bs * 584), (cache.stride(0), 1))


@pytest.mark.parametrize("name", golden_names())
def test_quantize_matches_golden_bytes(name):
    g = load_golden(name)
    if g.get("kv_bf16") is None:
        pytest.skip(f"{name}: the compact golden case keeps FlashMLA's bytes but not kv_bf16; the quantiser is "
                    "checked on the compact cases that keep it, and on every original (tests/test_golden_compaction.py) "
                    "when $WORKBENCH_GOLDEN or ../shared/golden holds them")
    scopes = [("", "kv_bf16")] + ([("extra_", "extra_kv_bf16")] if "extra_kv_bf16" in g else [])
    for prefix, key in scopes:
        cache = quantize_kv(g[key])
        assert cache.stride() == (g[f"{prefix}cache_block_stride"], 584, 584, 1)
        assert cache.stride(0) == MODEL1.page_bytes(g[f"{prefix}block_size"] if prefix == "" else g["extra_block_size"])
        got = _page_bytes(cache)
        assert torch.equal(got, g[f"{prefix}cache_bytes"]), f"{name} {prefix or 'main'}: " \
            f"{int((got != g[f'{prefix}cache_bytes']).sum())} bytes differ"
        # page padding past bs*584 is zero
        nb = cache.shape[0]
        flat = cache.as_strided((nb, cache.stride(0)), (cache.stride(0), 1))
        assert int(flat[:, cache.shape[1] * 584:].sum()) == 0


@pytest.mark.parametrize("convention", SCALE_CONVENTIONS)
def test_roundtrip_within_fp8_step(convention):
    g = torch.Generator().manual_seed(1)
    mag = torch.pow(10.0, torch.empty(5, 61, 8).uniform_(-4, 3, generator=g))
    x = (torch.randn(5, 61, 512, generator=g) * mag.repeat_interleave(64, dim=-1)).to(torch.bfloat16)
    cache = quantize_kv(x, scale_convention=convention)
    y = dequantize_kv(cache)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
    assert torch.equal(y[..., 448:], x[..., 448:]), "rope must be stored exactly"
    sb = raw_scale_bytes(cache)
    scale = torch.exp2(sb[..., :7].double() - 127).repeat_interleave(64, dim=-1)
    v = (x[..., :448].double() / scale).abs()
    # half the e4m3 spacing at |v|: 2**(floor(log2 v) - 3) / 2, subnormal spacing 2**-9
    half_step = torch.exp2(torch.clamp(torch.floor(torch.log2(v.clamp_min(1e-30))), min=-6) - 3) / 2
    err = (y[..., :448].double() - x[..., :448].double()).abs()
    assert bool((err <= half_step * scale * (1 + 1e-9)).all())


@pytest.mark.parametrize("amax,byte", [(448.0, 127), (450.0, 128), (224.0, 126), (1.0, 119), (0.0, 114)],
                         ids=["448", "450", "224", "1", "zero-tile"])
def test_scale_bytes_are_exact_powers_of_two(amax, byte):
    # s = 2**ceil(log2(max(amax/448, 1e-4))): 448 -> 2**0, 450 (449 is no bf16) -> 2**1, 224 -> 2**-1,
    # 1 -> 2**ceil(log2(1/448)) = 2**-8, 0 -> 2**ceil(log2(1e-4)) = 2**-13
    x = torch.zeros(1, 1, 512, dtype=torch.bfloat16)
    x[0, 0, 5] = amax
    sb = raw_scale_bytes(quantize_kv(x))
    assert int(sb[0, 0, 0]) == byte
    assert int(sb[0, 0, 7]) == 0, "pad byte must be zero"
    assert 2.0 ** (byte - 127) == 2 ** math.ceil(math.log2(max(amax / 448, 1e-4)))


# amax -> (FlashMLA's byte, vLLM's byte), worked by hand from s = 2**ceil(log2(max(amax/448, 1e-4))) (FlashMLA)
# and s = 2**ceil(log2(max(amax, 1e-4)/448)) (vLLM); byte = log2(s) + 127. amax is the bf16 value written.
SCALE_BYTES_BY_HAND = {
    "zero-tile": (0.0, 114, 105),        # FlashMLA: 2**ceil(log2(1e-4)) = 2**-13; vLLM: 1e-4/448 = 2**-22.09 -> 2**-22
    "5e-5": (5e-5, 114, 105),            # below both floors
    "1e-4": (1e-4, 114, 105),            # bf16 1.0002e-4: vLLM 1.0002e-4/448 = 2**-22.09 -> 2**-22
    "0.001": (0.001, 114, 109),          # vLLM: 0.0010004/448 = 2.23e-6 = 2**-18.77 -> 2**-18: 127 - 18
    "0.0068": (0.0068, 114, 111),        # bf16 0.0068054 < 448 * 2**-16 = 0.0068359: 2**-16.006 -> 2**-16
    "0.007": (0.007, 114, 112),          # bf16 0.0070190 > 448 * 2**-16: 2**-15.96 -> 2**-15
    "0.0448": (0.0448, 114, 114),        # bf16 0.0446777: 0.0446777/448 = 9.97e-5 = 2**-13.29 -> 2**-13 in both
    "1": (1.0, 119, 119),                # 1/448 = 2**-8.81 -> 2**-8
    "448": (448.0, 127, 127),
    "70000": (70000.0, 135, 135),        # bf16 70144: 70144/448 = 156.6 = 2**7.29 -> 2**8
    "3e38": (3e38, 247, 247),            # 3.004e38/448 = 6.7e35 = 2**119.0x -> 2**120
    "bf16-max": (3.3895313892515355e38, 247, 247),  # 2**119.19 -> 2**120: no byte is ever above 247
}


@pytest.mark.parametrize("amax,flashmla,vllm", SCALE_BYTES_BY_HAND.values(), ids=SCALE_BYTES_BY_HAND.keys())
def test_scale_bytes_of_each_convention_by_hand(amax, flashmla, vllm):
    x = torch.zeros(1, 1, 512, dtype=torch.bfloat16)
    x[0, 0, 64 + 9] = -amax  # tile 1, negative: amax is of |x|
    a = float(x[0, 0, 64 + 9].abs())
    assert flashmla == 127 + math.ceil(math.log2(max(a / 448, 1e-4)))
    assert vllm == 127 + math.ceil(math.log2(max(a, 1e-4) / 448))
    for convention, byte in (("flashmla", flashmla), ("vllm", vllm)):
        cache = quantize_kv(x, scale_convention=convention)
        sb = raw_scale_bytes(cache)[0, 0]
        assert int(sb[1]) == byte, convention
        assert sb[[0, 2, 3, 4, 5, 6]].tolist() == [114 if convention == "flashmla" else 105] * 6  # zero tiles
        assert int(sb[7]) == 0, "pad byte must be zero"
        code = cache[0, 0, 0, 64 + 9: 64 + 10].view(torch.float8_e4m3fn).to(torch.bfloat16)
        want = code * torch.tensor(2.0 ** (byte - 127)).to(torch.bfloat16)  # bf16(fp8) * bf16(scale), in bf16
        assert torch.equal(dequantize_kv(cache)[0, 0, 64 + 9: 64 + 10].view(torch.int16), want.view(torch.int16))


def test_vllm_zero_tile_is_byte_105_and_small_tiles_105_to_111():
    """A token whose tile t has amax 0.75 * 448 * 2**(b-127): byte b under vLLM's convention for b in 106..111,
    114 under FlashMLA's; an all-zero tile is 105 / 114."""
    x = torch.zeros(1, 1, 512, dtype=torch.bfloat16)
    for t, b in enumerate(range(106, 112)):
        x[0, 0, 64 * t: 64 * t + 64] = torch.linspace(-1, 1, 64) * 0.75 * 448 * 2.0 ** (b - 127)
    assert raw_scale_bytes(quantize_kv(x, scale_convention="vllm"))[0, 0].tolist() == [106, 107, 108, 109, 110, 111,
                                                                                       105, 0]
    assert raw_scale_bytes(quantize_kv(x))[0, 0].tolist() == [114] * 7 + [0]


def test_conventions_differ_only_below_0_0448():
    g = torch.Generator().manual_seed(3)
    mag = torch.pow(10.0, torch.empty(4, 64, 8).uniform_(-7, 3, generator=g))
    x = (torch.randn(4, 64, 512, generator=g) * mag.repeat_interleave(64, dim=-1)).to(torch.bfloat16)
    f, v = quantize_kv(x), quantize_kv(x, scale_convention="vllm")
    fb, vb = raw_scale_bytes(f)[..., :7].long(), raw_scale_bytes(v)[..., :7].long()
    amax = x[..., :448].float().abs().unflatten(-1, (7, 64)).amax(dim=-1)
    big = amax >= 448e-4
    assert big.any() and (~big).any()
    assert torch.equal(fb[big], vb[big])
    assert bool((fb >= 114).all()) and bool((vb >= 105).all()) and bool((vb <= fb).all())
    assert bool((vb[~big] < 114).any())
    cols = big.repeat_interleave(64, dim=-1)
    assert torch.equal(dequantize_kv(f)[..., :448][cols].view(torch.int16),
                       dequantize_kv(v)[..., :448][cols].view(torch.int16))
    with pytest.raises(ValueError, match="scale_convention"):
        quantize_kv(x, scale_convention="sglang")


def test_dequantised_value_is_bf16_fp8_times_bf16_scale_for_every_byte():
    """Every scale byte 0..254 and every non-NaN fp8 code: dequantize_kv (and gather_dequantized, the reference's
    read) gives bf16(fp8) * bf16(2**(byte-127)) bit for bit, the multiply done in bf16."""
    nb, bs = 1, 255
    cache = quantize_kv(torch.zeros(nb, bs, 512, dtype=torch.bfloat16))
    codes = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)  # 254 codes, no NaN
    nope = codes.repeat(2)[:448]
    g = torch.Generator().manual_seed(5)
    rope = torch.randn(bs, 64, generator=g).to(torch.bfloat16)
    data, scales = _row_views(cache, MODEL1)
    for o in range(bs):
        data[0, o, :448] = nope.roll(o)
        data[0, o, 448:] = rope[o].view(torch.uint8)
        scales[0, o, :7] = o  # token o: every tile at byte o
    got = dequantize_kv(cache)
    k8 = data[0, :, :448].contiguous().view(torch.float8_e4m3fn).to(torch.bfloat16)
    scale = torch.exp2(torch.arange(bs, dtype=torch.float64) - 127).to(torch.bfloat16)[:, None]
    want = torch.cat([k8 * scale, rope], dim=-1)
    assert want.dtype == torch.bfloat16
    assert torch.equal(got[0].view(torch.int16), want.view(torch.int16))
    # finite exactly where |fp8| * 2**(byte-127) < 2**128 (byte 254 and code 448 is inf, as it must be)
    exact = k8.double().abs() * torch.exp2(torch.arange(bs, dtype=torch.float64) - 127)[:, None]
    assert torch.equal(torch.isfinite(got[0, :, :448]), exact < 2.0 ** 128)
    picked = gather_dequantized(cache, torch.arange(bs, dtype=torch.int32))
    assert torch.equal(picked.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("convention", SCALE_CONVENTIONS)
def test_quantiser_range_ends(convention):
    """Finite input never gives NaN codes or a byte past 247. 70000 is byte 135; 3e38 is byte 247 and reads back
    finite. From 248 * 2**120 (3.2965e38, a bf16) up, the value's code is 256 (0x78) at byte 247, and
    256 * 2**120 = 2**128 reads back as inf: a limit of the format, in either convention."""
    edge = 248 * 2.0 ** 120
    vals = [70000.0, 3e38, 3.2e38, edge, 3.3895313892515355e38]
    x = torch.zeros(1, len(vals), 512, dtype=torch.bfloat16)
    for o, v in enumerate(vals):
        x[0, o, 3] = v
        x[0, o, 100:110] = torch.linspace(-1, 1, 10, dtype=torch.float64) * v
    cache = quantize_kv(x, scale_convention=convention)
    data = _row_views(cache, MODEL1)[0][0, :, :448]
    assert not bool(((data & 0x7F) == 0x7F).any()), "no NaN code"
    sb = raw_scale_bytes(cache)[0, :, :7]
    assert sb[:, 0].tolist() == [135, 247, 247, 247, 247] and int(sb.max()) == 247
    y = dequantize_kv(cache)[0, :, 3].float()
    assert float(y[0]) == 73728.0  # 70144 / 2**8 = 274 -> e4m3 288 -> 288 * 256
    assert bool(torch.isfinite(y[:3]).all()) and float(y[1]) == 224 * 2.0 ** 120
    assert int(data[3, 3]) == 0x78 and bool(torch.isposinf(y[3:]).all())


def test_build_case_scale_convention_changes_only_the_bytes():
    kw = dict(batch=2, heads=2, topk=16, block_size=64, kv_decades=(-6.0, -5.0), seed=4)
    f, v = build_case(**kw), build_case(**kw, scale_convention="vllm")
    assert torch.equal(f.q, v.q) and torch.equal(f.main.indices, v.main.indices)
    assert torch.equal(f.main.kv_bf16, v.main.kv_bf16)
    assert f.meta["scale_convention"] == "flashmla" and v.meta["scale_convention"] == "vllm"
    # amax 3e-6 .. 4e-5: below both floors
    assert set(raw_scale_bytes(f.main.cache)[..., :7].unique().tolist()) == {114}
    assert set(raw_scale_bytes(v.main.cache)[..., :7].unique().tolist()) == {105}
    with pytest.raises(ValueError, match="scale_convention"):
        build_case(**kw, scale_convention="vLLM")
    with pytest.raises(ValueError, match="tweak"):
        build_case(**kw, tweak="no-such-tweak")


def test_a_tweak_keeps_the_cases_draws():
    kw = dict(batch=2, heads=3, topk=24, block_size=64, seed=9)
    plain, tweaked = build_case(**kw), build_case(**kw, tweak="kv-70000")
    assert torch.equal(plain.main.indices, tweaked.main.indices)
    assert torch.equal(plain.main.block_table, tweaked.main.block_table)
    same = torch.ones(512, dtype=torch.bool)
    same[70] = False
    assert torch.equal(plain.q[..., same], tweaked.q[..., same])
    changed = (page_bytes_view(plain.main.cache) != page_bytes_view(tweaked.main.cache)).any(dim=1)
    assert int(changed.sum()) == 1, "one token's page"


def test_positions_to_indices_by_hand():
    block_table = torch.tensor([[7, 2], [0, 5]], dtype=torch.int32)
    pos = torch.tensor([[[0, 3, 4, -1]], [[5, 1, -1, 7]]])
    idx = positions_to_indices(pos, block_table, block_size=4)
    # seq0: pos0 -> page7*4+0=28, pos3 -> 31, pos4 -> page2*4+0=8 ; seq1: pos5 -> page5*4+1=21, pos1 -> 1, pos7 -> 23
    assert idx.tolist() == [[[28, 31, 8, -1]], [[21, 1, -1, 23]]]
    page, off = indices_to_positions(idx, 4)
    assert page.tolist() == [[[7, 7, 2, -1]], [[5, 0, -1, 5]]]
    assert off.tolist() == [[[0, 3, 0, -1]], [[1, 1, -1, 3]]]
    with pytest.raises(ValueError, match="positions"):
        positions_to_indices(torch.tensor([[[8]], [[0]]]), block_table, block_size=4)


@pytest.mark.parametrize("entry", cases.catalogue(), ids=lambda e: e.id)
def test_catalogue_case_has_what_it_claims(entry, catalogue_case):
    c = catalogue_case(entry.id)
    missing = [f for f in entry.covers if not cases.FEATURES[f](c)]
    assert not missing, f"{entry.id} claims {missing} but its case does not have them"
    for s in c.scopes:
        owned = s.block_table.flatten()
        assert owned.unique().numel() == owned.numel(), "pages are owned once"
        n = s.cache.shape[0] * s.block_size
        counts = (s.indices >= 0) & (s.indices < n)
        if s.topk_length is not None:  # an index past its row's topk_length counts for nothing
            counts &= torch.arange(s.indices.shape[2]) < s.topk_length.view(-1, 1, 1)
        live = s.indices.long()[counts]
        selected = torch.zeros(s.cache.shape[0], dtype=torch.bool)
        selected[live // s.block_size] = True
        deq = dequantize_kv(s.cache).float()
        assert bool(torch.isfinite(deq[selected]).all()), "a page a counted index selects holds no NaN"
        assert bool(torch.isnan(deq[~selected]).any()) == ("nan-unselected" in entry.covers)
    assert tuple(c.q.shape[:3]) == tuple(entry.spec.get(k, d) for k, d in (("batch", 2), ("s_q", 1), ("heads", 16)))


@pytest.mark.parametrize("entry", cases.catalogue(), ids=lambda e: e.id)
def test_catalogue_kv_bf16_is_what_the_cache_holds(entry, catalogue_case):
    """kv_bf16 quantises (with the case's convention) to the cache's bytes for every token, but those a tweak
    wrote raw (there kv_bf16 is their dequantised value) and the NaN pages."""
    c = catalogue_case(entry.id)
    for name, s in (("main", c.main), ("extra", c.extra)):
        if s is None:
            continue
        data, scales = _row_views(s.cache, MODEL1)
        want_data, want_scales = _row_views(quantize_kv(s.kv_bf16, scale_convention=c.meta["scale_convention"]),
                                            MODEL1)
        keep = torch.ones(s.cache.shape[:2], dtype=torch.bool)
        keep[(page_bytes_view(s.cache) == 0xFF).all(dim=1)] = False  # NaN pages
        raw = c.meta["raw_tokens"].get(name, torch.zeros(0, dtype=torch.long))
        keep.view(-1)[raw] = False
        assert torch.equal(data[keep], want_data[keep]) and torch.equal(scales[keep], want_scales[keep])
        page, off = raw // s.block_size, raw % s.block_size
        assert torch.equal(s.kv_bf16[page, off].view(torch.int16), dequantize_kv(s.cache)[page, off].view(torch.int16))


def test_catalogue_covers_every_hostile_feature_and_says_which_are_gpu_only():
    on_cpu = set().union(*(e.covers for e in cases.catalogue(interpretable=True)))
    assert set(cases.FEATURES) - on_cpu == {"nan-unselected"}, "the interpreter checks all but NaN pages"
    assert set().union(*(e.covers for e in cases.CATALOGUE)) == set(cases.FEATURES)
    for e in cases.CATALOGUE:
        assert set(e.covers) <= set(cases.FEATURES), e.id
        assert e.interpretable == (not e.spec.get("nan_unselected") and e.id != cases.BITWISE), e.id
    for e in cases.gpu_cases()[len(cases.CATALOGUE):]:  # the scaled versions: GPU only, labelled by their entry
        base, _, label = e.id.partition("@")
        assert not e.interpretable and label and cases.get(base).seed == e.seed


def test_scaled_case_takes_the_overrides_and_keeps_the_seed():
    e = cases.get("h4-k37-bs69-allinvalid")
    big = e.scaled()
    assert big.id == "h4-k37-bs69-allinvalid@h128-k2048"
    assert big.spec == {**e.spec, "heads": 128, "topk": 2048, "seed": e.seed}
    assert cases.get(cases.BITWISE).scaled() is None
    with pytest.raises(ValueError, match="case_id"):
        cases.get("no-such-case")


def test_a_scaled_case_is_found_by_its_id_and_a_wrong_label_is_refused():
    """compute-sanitizer's --case takes an entry's GPU version (rung 15 asks L2 further ahead above 64 heads, which
    only a scaled case reaches): get resolves "<id>@<label>" to the same case, and a label the entry does not have
    is an error, not the base case."""
    big = cases.get("h4-k37-bs69-allinvalid@h128-k2048")
    assert big.spec["heads"] == 128 and big == cases.get("h4-k37-bs69-allinvalid").scaled()
    assert "h4-k37-bs69-allinvalid@h128-k2048" in cases.scaled_ids()
    assert len(cases.scaled_ids()) == len(cases.gpu_cases()) - len(cases.CATALOGUE)
    for wrong in ("h4-k37-bs69-allinvalid@h64-k2048", f"{cases.BITWISE}@h128", "h4-k37-bs69-allinvalid@"):
        with pytest.raises(ValueError, match="case_id"):
            cases.get(wrong)


def test_builder_invalid_indices_fall_on_both_sides_of_the_cache():
    c = build_case(batch=2, heads=1, topk=200, block_size=2, invalid_frac=0.5, seed=1)
    idx, n = c.main.indices.long(), c.main.cache.shape[0] * 2
    bad = (idx < 0) | (idx >= n)
    assert 0.4 < bad.float().mean().item() < 0.6  # invalid_frac 0.5; a valid index is never bad by chance
    # of the bad ones about 60% are -1, 20% past the last token, 20% below -1
    for kind, want in (((idx == -1), 0.6), ((idx >= n), 0.2), ((idx < -1), 0.2)):
        assert abs(kind.sum().item() / bad.sum().item() - want) < 0.12


def test_builder_extra_scope_and_sink_modes():
    c = build_case(batch=2, heads=6, topk=8, extra_topk=12, extra_block_size=2, sink="mixed", topk_length=True,
                   extra_topk_length=True)
    assert c.extra is not None and c.extra.block_size == 2 and c.extra.indices.shape == (2, 1, 12)
    s = c.attn_sink
    assert bool(torch.isposinf(s[0])) and bool(torch.isneginf(s[1])) and bool(torch.isfinite(s[2]))
    assert c.main.topk_length.tolist()[:2] == [8, 0]
    c3 = build_case(batch=4, heads=2, topk=8, extra_topk=12, topk_length=True, extra_topk_length=True)
    for tl, k in ((c3.main.topk_length, 8), (c3.extra.topk_length, 12)):  # topk, 0, past topk, then in [0, topk]
        assert tl[:2].tolist() == [k, 0] and tl[2] > k and 0 <= tl[3] <= k
    kw = c.kwargs()
    assert set(kw) >= {"extra_cache", "extra_indices", "extra_topk_length"}


def _moved_case():
    """Page size 61 (padded pages) and an extra scope of page size 2, NaN in the pages nothing selects."""
    return cases.get(cases.SANITIZER).build()


def _assert_same_cache(moved, cache):
    assert moved.shape == cache.shape and moved.stride() == cache.stride() and moved.dtype == cache.dtype
    assert moved.untyped_storage().data_ptr() != cache.untyped_storage().data_ptr(), "a copy, not a view"
    assert torch.equal(page_bytes_view(moved), page_bytes_view(cache)), "every page byte, padding included"


@pytest.mark.parametrize("move", ["to_device", "copy_cache"])
def test_moved_cache_keeps_layout_bytes_and_output(move):
    c = _moved_case()
    want = wb.sparse_mla_decode(**c.kwargs(), impl="reference")
    fn = (lambda x: to_device(x, "cpu")) if move == "to_device" else copy_cache
    main, extra = fn(c.main.cache), fn(c.extra.cache)
    _assert_same_cache(main, c.main.cache)
    _assert_same_cache(extra, c.extra.cache)
    got = wb.sparse_mla_decode(**dict(c.kwargs(), cache=main, extra_cache=extra), impl="reference")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_to_device_keeps_fp8_dtype_and_restores_a_cloned_cache():
    c = _moved_case()
    cache = c.main.cache
    f8 = to_device(cache.view(torch.float8_e4m3fn), "cpu")
    assert f8.dtype == torch.float8_e4m3fn and f8.stride() == cache.stride()
    packed = cache.clone()  # what .clone()/.to() give: the rows without page padding
    assert packed.stride(0) == cache.shape[1] * 584
    restored = to_device(packed, "cpu")
    assert restored.stride() == cache.stride()
    rows = cache.shape[1] * 584
    assert torch.equal(page_bytes_view(restored)[:, :rows], page_bytes_view(cache)[:, :rows])
    assert int(page_bytes_view(restored)[:, rows:].sum()) == 0, "restored padding is zero"
    assert torch.equal(dequantize_kv(restored).view(torch.int16), dequantize_kv(cache).view(torch.int16))


def test_to_device_completes_storage_that_ends_at_the_last_token():
    cache = _moved_case().main.cache
    nb, bs, s0 = cache.shape[0], cache.shape[1], cache.stride(0)
    short = cache.as_strided((nb * s0,), (1,))[: (nb - 1) * s0 + bs * 584].clone().as_strided(cache.shape,
                                                                                            cache.stride())
    with pytest.raises(ValueError, match="cache: .*whole pages"):
        wb.sparse_mla_decode(**dict(_moved_case().kwargs(), cache=short), impl="reference")
    fixed = to_device(short, "cpu")
    assert fixed.stride() == cache.stride()
    assert torch.equal(page_bytes_view(fixed)[:, : bs * 584], page_bytes_view(cache)[:, : bs * 584])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to move to")
def test_to_device_cuda_round_trip():
    cache = _moved_case().main.cache
    there = to_device(cache, "cuda")
    assert there.is_cuda and there.stride() == cache.stride()
    _assert_same_cache(to_device(there, "cpu"), cache)
