"""The golden cases the repository ships (golden/*.pt) are FlashMLA's, compacted without changing an answer
(and, last, a check on conftest's list of slow tests).

Without the originals: every compact case loads, its indices are in range of its caches, its keys are those
golden/README.md lists; compaction keeps the fp32 reference's bits on the hostile catalogue's cases (-1 and
out-of-range indices on both sides, topk_length of 0 and past topk, all-invalid queries, an extra scope, NaN
pages); the loader's precedence (the repository's cases first, an outside folder's added). The reference against
FlashMLA's stored outputs on the compact cases is tests/test_reference.py's test_reference_matches_flashmla
(it reads golden/ through workbench.format.golden).

With FlashMLA's originals (an outside folder, workbench.format.golden.original_dir: $WORKBENCH_GOLDEN or
../shared/golden beside the checkout; skipped without them): the compact case is what compacting the original
gives now, FlashMLA's tensors are unchanged byte for byte, and the reference gives the same out and lse, bit for
bit. Bit-equal, not merely close: the reference gathers each selected token's bytes by index, in the order of
``indices``, and reduces over topk in that order; the compact case holds the same bytes under other indices, in
the same order, so every fp32 operation sees the same operands in the same order (invalid slots are replaced by
zeros with ``torch.where`` whatever they point at).
"""
from __future__ import annotations

import hashlib

import pytest
import torch

import workbench as wb
from workbench.format import cases, golden
from workbench.format.codec import _row_views, page_bytes_view, quantize_kv
from workbench.format.golden import (compact_case, golden_cache, golden_kwargs, golden_names, load_golden, original_dir,
                                     original_names, same_bytes, save_compact)
from workbench.format.layout import MODEL1

REPO_NAMES = sorted(p.stem for p in golden.golden_dir().glob("*.pt"))
SCOPES = golden.SCOPES


def _originals() -> list[str]:
    try:
        return [n for n in original_names() if n in REPO_NAMES]
    except FileNotFoundError:  # $WORKBENCH_GOLDEN set to a folder without cases: the loader tests say so
        return []


ORIGINALS = _originals()
needs_originals = pytest.mark.skipif(
    not ORIGINALS, reason="FlashMLA's original golden cases not found (set WORKBENCH_GOLDEN to their folder, or put "
                          f"them in {golden.ROOT.parent / 'shared' / 'golden'}); the compact cases are checked without")


def _reference(kw: dict):
    return wb.sparse_mla_decode_reference(**kw)


def _scopes(g: dict):
    for prefix, bs_key in SCOPES:
        if f"{prefix}indices" in g:
            yield prefix, g[bs_key]


# ------------------------------------------------------------------------------------------------ without originals

def test_repository_ships_the_five_cases_within_budget():
    assert len(REPO_NAMES) == 5, REPO_NAMES
    assert (golden.COMPACT_DIR / "README.md").is_file()
    total = sum(p.stat().st_size for p in golden.COMPACT_DIR.glob("*.pt"))
    assert total < 6.5 * 2 ** 20, f"golden/ grew to {total / 2 ** 20:.2f} MiB"


@pytest.mark.parametrize("name", REPO_NAMES)
def test_compact_case_loads_in_range(name):
    g = load_golden(name)
    c = g["compact"]
    assert c["format"] == golden.COMPACT_FORMAT and c["source"] == f"{name}.pt" and len(c["source_sha256"]) == 64
    assert g["name"] == name and "ref_out_fp32" not in g and "ref_lse" not in g
    assert (g["kv_bf16"] is not None) == (name in golden.KEEP_KV)
    assert ("extra_kv_bf16" in g) == ("extra_indices" in g)  # how tests/test_engine.py finds the extra scope
    b, s_q, h, d = g["q"].shape
    assert d == MODEL1.d and g["flashmla_out"].shape == g["q"].shape and g["flashmla_lse"].shape == (b, h, s_q)
    for prefix, bs in _scopes(g):
        info = c["scopes"][prefix or "main"]
        cache = golden_cache(g, prefix)
        nb = cache.shape[0]
        assert (nb, cache.shape[1]) == (info["num_blocks"], bs) and cache.stride(0) == MODEL1.page_bytes(bs)
        idx = g[f"{prefix}indices"]
        assert idx.dtype == torch.int32 and idx.shape[:2] == (b, s_q)
        # every index is -1 (the goldens hold no other invalid ones) or a token of the compact cache ...
        assert bool(((idx == -1) | ((idx >= 0) & (idx < nb * bs))).all())
        # ... that is a referenced token, not a filler slot; the fillers are all-zero tokens as quantize_kv writes
        src = g[f"{prefix}source_index"]
        live = idx[idx >= 0].long()
        assert bool((src[live] >= 0).all()) and int((src >= 0).sum()) == info["tokens"] == live.unique().numel()
        assert bool((src[info["tokens"]:] == -1).all()) and bool((src[: info["tokens"]] >= 0).all())
        zero_data, zero_scales = _row_views(quantize_kv(torch.zeros(1, 1, MODEL1.d, dtype=torch.bfloat16)), MODEL1)
        data, scales = _row_views(cache, MODEL1)
        fill = torch.arange(nb * bs) >= info["tokens"]
        assert bool((data.reshape(nb * bs, -1)[fill] == zero_data[0, 0]).all())
        assert bool((scales.reshape(nb * bs, -1)[fill] == zero_scales[0, 0]).all())
        bt = g[f"{prefix}block_table"]
        assert bt.dtype == torch.int32 and bt.shape[0] == b and bool(((bt >= -1) & (bt < nb)).all())
        if g[f"{prefix}topk_length"] is not None:
            assert g[f"{prefix}topk_length"].dtype == torch.int32


def test_compact_cases_keep_what_the_tests_rely_on():
    """The hostile parts of FlashMLA's cases survive compaction: a query with no valid token, indices past
    topk_length that name real tokens, s_q = 2, an extra scope, page size 61."""
    gs = {n: load_golden(n) for n in REPO_NAMES}
    assert any(bool((g["indices"] == -1).all(-1).any()) for g in gs.values())
    assert any(g["q"].shape[1] == 2 for g in gs.values()) and any("extra_indices" in g for g in gs.values())
    assert {61, 64, 256} <= {g["block_size"] for g in gs.values()}
    past = 0
    for g in gs.values():
        for prefix, _ in _scopes(g):
            tl = g[f"{prefix}topk_length"]
            if tl is not None:
                idx = g[f"{prefix}indices"]
                tail = torch.arange(idx.shape[-1]) >= tl.long().view(-1, 1, 1)
                past += int(((idx >= 0) & tail).sum())
    assert past > 0


def _as_golden(case: cases.DecodeCase, name: str) -> dict:
    """A built case in the golden files' form (no FlashMLA outputs)."""
    g = dict(name=name, q=case.q, sm_scale=case.sm_scale, attn_sink=case.attn_sink)
    for prefix, scope in (("", case.main), ("extra_", case.extra)):
        if scope is None:
            continue
        bs = scope.block_size
        g.update({"block_size" if prefix == "" else "extra_block_size": bs,
                  f"{prefix}kv_bf16": scope.kv_bf16, f"{prefix}indices": scope.indices,
                  f"{prefix}block_table": scope.block_table, f"{prefix}topk_length": scope.topk_length,
                  f"{prefix}cache_bytes": page_bytes_view(scope.cache)[:, : bs * MODEL1.bytes_per_token].clone(),
                  f"{prefix}cache_block_stride": scope.cache.stride(0)})
    return g


@pytest.mark.parametrize("entry", cases.catalogue(), ids=lambda e: e.id)
def test_compaction_keeps_reference_bits_on_hostile_cases(entry, catalogue_case):
    """-1, out-of-range indices on both sides, topk_length 0 and past topk, all-invalid queries, extra scopes,
    NaN pages, odd page sizes: the reference on the compacted case gives the same bits."""
    g = _as_golden(catalogue_case(entry.id), entry.id)
    c = compact_case(g)
    out, lse = _reference(golden_kwargs(g))
    c_out, c_lse = _reference(golden_kwargs(c))
    assert same_bytes(out, c_out) and same_bytes(lse, c_lse)
    for prefix, bs in _scopes(g):
        n_old, n_new = g[f"{prefix}cache_bytes"].shape[0] * bs, c[f"{prefix}cache_bytes"].shape[0] * bs
        old, new = g[f"{prefix}indices"].long(), c[f"{prefix}indices"].long()
        assert torch.equal(old < 0, new < 0) and torch.equal(old[old < 0], new[new < 0])  # negatives kept
        past = old >= n_old
        assert torch.equal(new[past], old[past] - n_old + n_new)  # k past the end stays k past the end
        live = (old >= 0) & ~past
        assert torch.equal(c[f"{prefix}source_index"][new[live]].long(), old[live])
        assert c[f"{prefix}cache_bytes"].shape[0] <= g[f"{prefix}cache_bytes"].shape[0]


def test_compaction_keeps_kv_rows_consistent_with_bytes():
    """keep_kv: the kept bf16 rows quantise to the compact bytes, filler slots included (tests/test_cache.py's
    check on the KEEP_KV case)."""
    g = _as_golden(cases.build_case(batch=2, heads=2, topk=40, block_size=61, topk_length=True, seed=3), "kv")
    c = compact_case(g, keep_kv=True)
    got = quantize_kv(c["kv_bf16"])
    assert torch.equal(page_bytes_view(got)[:, : 61 * MODEL1.bytes_per_token], c["cache_bytes"])


def test_saved_compact_case_reads_back(tmp_path, monkeypatch):
    """save_compact stores small int32 tensors as int16; load_golden hands them back as int32, equal."""
    g = _as_golden(cases.build_case(batch=2, heads=2, topk=40, block_size=64, extra_topk=16, seed=4), "tiny_case")
    c = compact_case(g)
    monkeypatch.setattr(golden, "COMPACT_DIR", tmp_path)
    save_compact(c, tmp_path / "tiny_case.pt")
    stored = torch.load(tmp_path / "tiny_case.pt", weights_only=False)
    assert stored["indices"].dtype == torch.int16 and "indices" in stored["compact"]["narrowed"]
    back = load_golden("tiny_case")
    for k, v in c.items():
        if isinstance(v, torch.Tensor):
            assert same_bytes(v, back[k]), k


def test_outside_cases_are_additional(tmp_path, monkeypatch):
    """$WORKBENCH_GOLDEN adds its cases; a name the repository has stays the repository's (original=True loads the
    outside one); a $WORKBENCH_GOLDEN without cases is an error that says so."""
    repo = load_golden(REPO_NAMES[0])
    torch.save(dict(repo, name="outside_only"), tmp_path / "outside_only.pt")
    torch.save(dict(repo, marker="outside"), tmp_path / f"{REPO_NAMES[0]}.pt")
    monkeypatch.setenv("WORKBENCH_GOLDEN", str(tmp_path))
    assert golden_names() == sorted(REPO_NAMES + ["outside_only"])
    assert "marker" not in load_golden(REPO_NAMES[0]) and load_golden(REPO_NAMES[0], original=True)["marker"]
    assert load_golden("outside_only")["name"] == "outside_only"
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("WORKBENCH_GOLDEN", str(empty))
    with pytest.raises(FileNotFoundError, match="holds no golden cases"):
        golden_names()


# ------------------------------------------------------------------------------------------------ with originals

@needs_originals
@pytest.mark.parametrize("name", ORIGINALS or ["(none)"])
def test_compact_equals_original(name):
    """FlashMLA's tensors byte for byte; the reference's out and lse bit for bit (the module docstring says why);
    the repository's file is what compacting the original gives now."""
    orig, comp = load_golden(name, original=True), load_golden(name)
    src = original_dir() / f"{name}.pt"
    assert comp["compact"]["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest(), \
        f"golden/{name}.pt was made from another file than {src}: regenerate with scripts/compact_golden.py"
    for k in ("q", "flashmla_out", "flashmla_lse", "attn_sink", "topk_length", "extra_topk_length"):
        if isinstance(orig.get(k), torch.Tensor):
            assert same_bytes(orig[k], comp[k]), k
    assert all(orig[k] == comp[k] for k in ("sm_scale", "block_size", "cache_block_stride", "flashmla_vs_ref_relerr"))
    # the original as it was always decoded: caches quantised from kv_bf16 (FlashMLA's bytes, test below)
    kw = golden_kwargs(orig)
    kw["cache"] = quantize_kv(orig["kv_bf16"])
    if "extra_kv_bf16" in orig:
        kw["extra_cache"] = quantize_kv(orig["extra_kv_bf16"])
    out, lse = _reference(kw)
    c_out, c_lse = _reference(golden_kwargs(comp))
    assert same_bytes(out, c_out), f"out: {int((out != c_out).sum())} elements differ"
    assert same_bytes(lse, c_lse), "lse differs"
    again = compact_case(orig, source=src)
    for k, v in again.items():
        if k != "compact":
            assert (same_bytes(v, comp[k]) if isinstance(v, torch.Tensor) else v == comp[k]), k
    assert {k for k in again if k != "compact"} == {k for k in comp if k != "compact"}


@needs_originals
@pytest.mark.parametrize("name", ORIGINALS or ["(none)"])
def test_quantize_matches_original_bytes(name):
    """The codec's quantiser writes FlashMLA's bytes on every original (tests/test_cache.py checks the compact
    cases that keep kv_bf16)."""
    g = load_golden(name, original=True)
    for prefix, bs in _scopes(g):
        got = page_bytes_view(quantize_kv(g[f"{prefix}kv_bf16"]))[:, : bs * MODEL1.bytes_per_token]
        assert torch.equal(got, g[f"{prefix}cache_bytes"]), f"{name} {prefix or 'main'}"


# ------------------------------------------------------------------------------------------------ the test tiers

def test_slow_tier_names_tests_that_exist():
    """Every entry of conftest's SLOW_TESTS names a test function of its file (a renamed test would otherwise
    silently move into the quick tier)."""
    import re
    from conftest import SLOW_PATTERNS
    tests_dir = golden.ROOT / "tests"
    for file, test, _ in SLOW_PATTERNS:
        src = (tests_dir / file).read_text()
        assert test == "*" or re.search(rf"^def {re.escape(test)}\(", src, re.M), f"{file}::{test} not found"
