"""FlashMLA's golden cases: the compact copies in the repository (``golden/``), plus any outside folder.

The cases are FlashMLA's own inputs and outputs (``golden/README.md`` lists the keys). The repository ships them
compacted by :func:`compact_case` (``scripts/compact_golden.py`` regenerates them from a folder of originals):
every cache keeps only the tokens that some in-range index references (past ``topk_length`` included), packed
into fresh pages of the same page size, sequence by sequence and in the original index order, and the indices
are renamed to match; FlashMLA's cache bytes of those tokens, ``q``, the sink, ``topk_length`` and FlashMLA's
``out`` and ``lse`` are kept byte for byte. What an index means is kept: ``-1`` and every negative index stay
as they are, an index ``k`` past the end of the original cache is ``k`` past the end of the compact one, a
valid index past ``topk_length`` still names a valid token. Dropped: the bf16 source ``kv_bf16`` (the key stays,
``None``; ``KEEP_KV``'s cases keep the rows of their tokens, for the quantiser's outside check) and the producer's
own fp32 reference (``ref_out_fp32``, ``ref_lse``; :mod:`workbench.format.reference` recomputes it). The fp32 reference
gives the same bits on a compact case as on its original (``tests/test_golden_compaction.py``).

Where cases come from (:func:`golden_paths`): the in-repository folder ``golden/``; then, as additional cases,
an outside folder of ``*.pt`` files (the originals, or cases of your own): ``$WORKBENCH_GOLDEN`` if set (it must
hold ``*.pt`` files), else the first of ``<repo>/../shared/golden``, ``<repo>/shared/golden``, ``<repo>/.golden``
that holds some. A name in both is the in-repository case; ``load_golden(name, original=True)`` loads the
outside one.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from .codec import _row_views, page_bytes_view, quantize_kv, to_device
from .layout import MODEL1

ROOT = Path(__file__).resolve().parents[2]
COMPACT_DIR = ROOT / "golden"  # the compact cases, tracked by git
COMPACT_FORMAT = 1
# Cases whose compact copy keeps the bf16 source rows (kv_bf16) of its tokens, so that the codec's quantiser is
# checked against FlashMLA's bytes without the originals (tests/test_cache.py); the smallest case, 131 KB.
KEEP_KV = ("v4_b2_h64_k64_bs64",)
SCOPES = (("", "block_size"), ("extra_", "extra_block_size"))  # (key prefix, page-size key) of each KV scope
DROPPED = ("ref_out_fp32", "ref_lse")  # the producer's fp32 reference: recomputed by workbench.format.reference
NARROW = ("indices", "extra_indices", "topk_length", "extra_topk_length", "block_table", "extra_block_table",
          "source_block_table", "extra_source_block_table", "source_index", "extra_source_index")


# ------------------------------------------------------------------------------------------------- where they are

def original_candidates() -> list[Path]:
    """The outside folders looked in, in order: $WORKBENCH_GOLDEN alone when set, else the usual places."""
    env = os.environ.get("WORKBENCH_GOLDEN")
    if env:
        return [Path(env)]
    return [ROOT.parent / "shared" / "golden", ROOT / "shared" / "golden", ROOT / ".golden"]


def original_dir() -> Path | None:
    """The outside folder of cases (FlashMLA's originals, or extra ones), or None when there is none.

    $WORKBENCH_GOLDEN, when set, must be a folder holding ``*.pt`` files (FileNotFoundError otherwise)."""
    outside = [c for c in original_candidates() if c.resolve() != COMPACT_DIR.resolve()]  # golden/ is no outside
    for c in outside:
        if c.is_dir() and any(c.glob("*.pt")):
            return c.resolve()
    if os.environ.get("WORKBENCH_GOLDEN") and outside:
        raise FileNotFoundError(f"WORKBENCH_GOLDEN={os.environ['WORKBENCH_GOLDEN']} holds no golden cases (*.pt); "
                                f"unset it to use the compact cases in {COMPACT_DIR}")
    return None


def golden_dir() -> Path:
    """The repository's folder of compact golden cases (``golden/``)."""
    if not (COMPACT_DIR.is_dir() and any(COMPACT_DIR.glob("*.pt"))):
        raise FileNotFoundError(f"golden cases not found in {COMPACT_DIR} (they are tracked by git: restore them "
                                "with git, or regenerate them with scripts/compact_golden.py from the originals)")
    return COMPACT_DIR


def original_paths() -> dict[str, Path]:
    """{name: path} of the outside folder's cases (empty without one)."""
    d = original_dir()
    return {} if d is None else {p.stem: p for p in sorted(d.glob("*.pt"))}


def golden_paths() -> dict[str, Path]:
    """{name: path} of every golden case: the compact ones, then the outside folder's other names."""
    paths = {p.stem: p for p in sorted(golden_dir().glob("*.pt"))}
    for name, p in original_paths().items():
        paths.setdefault(name, p)
    return dict(sorted(paths.items()))


def golden_names() -> list[str]:
    return list(golden_paths())


def original_names() -> list[str]:
    """Names of the outside folder's cases (FlashMLA's originals where it holds them)."""
    return list(original_paths())


def load_golden(name: str, original: bool = False) -> dict:
    """A golden case as a dict (``golden/README.md``): the compact one when the repository has ``name``,
    else the outside folder's; ``original=True``: the outside folder's."""
    paths = original_paths() if original else golden_paths()
    if name not in paths:
        where = original_dir() if original else f"{COMPACT_DIR} or {original_dir()}"
        raise FileNotFoundError(f"golden case {name!r} not found in {where}")
    g = torch.load(paths[name], weights_only=False)
    for key in g.get("compact", {}).get("narrowed", ()):  # stored as int16, handed out as FlashMLA had them
        g[key] = g[key].to(torch.int32)
    return g


# ------------------------------------------------------------------------------------------------- decode inputs

def golden_cache(g: dict, scope: str = "", device="cpu") -> torch.Tensor:
    """The cache of a scope ("" or "extra_") as FlashMLA read it: its ``cache_bytes`` in whole pages
    (page stride ``cache_block_stride``, zero padding), viewed [num_blocks, block_size, 1, 584] uint8."""
    data = g[f"{scope}cache_bytes"]
    nb, bs = data.shape[0], g["block_size" if scope == "" else "extra_block_size"]
    cache = to_device(data.view(nb, bs, 1, MODEL1.bytes_per_token), device)
    assert cache.stride(0) == g[f"{scope}cache_block_stride"], (cache.stride(), g[f"{scope}cache_block_stride"])
    return cache


def _scope_cache(g: dict, scope: str, device) -> torch.Tensor:
    if g.get(f"{scope}cache_bytes") is not None:
        return golden_cache(g, scope, device)
    return quantize_kv(g[f"{scope}kv_bf16"].to(device))


def golden_kwargs(g: dict, device="cpu", heads: slice | None = None) -> dict:
    """Decode keyword arguments for a golden case, optionally a head subset. The caches are FlashMLA's bytes
    (``cache_bytes``; ``quantize_kv(kv_bf16)`` gives the same bytes, tests/test_cache.py), or ``kv_bf16``
    quantised for a case without them."""
    hs = heads or slice(None)
    kw = dict(q=g["q"][:, :, hs].contiguous().to(device), cache=_scope_cache(g, "", device),
              indices=g["indices"].to(device), sm_scale=g["sm_scale"],
              attn_sink=None if g["attn_sink"] is None else g["attn_sink"][hs].contiguous().to(device),
              topk_length=None if g["topk_length"] is None else g["topk_length"].to(device))
    if "extra_indices" in g:
        kw.update(extra_cache=_scope_cache(g, "extra_", device),
                  extra_indices=g["extra_indices"].to(device),
                  extra_topk_length=None if g["extra_topk_length"] is None else g["extra_topk_length"].to(device))
    return kw


def golden_expected(g: dict, heads: slice | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's (out fp32, lse) for the case, optionally a head subset."""
    hs = heads or slice(None)
    return g["flashmla_out"][:, :, hs].float(), g["flashmla_lse"][:, hs]


# ------------------------------------------------------------------------------------------------- compaction

def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes, dtypes, strides and bytes (NaN included): "byte for byte"."""
    if (a.shape, a.dtype, a.stride()) != (b.shape, b.dtype, b.stride()):
        return False
    return torch.equal(a.flatten().contiguous().view(torch.uint8), b.flatten().contiguous().view(torch.uint8))


def _zero_token_bytes() -> torch.Tensor:
    """The 584 bytes FlashMLA's quantiser writes for an all-zero token (what fills a compact page's unused slots)."""
    c = quantize_kv(torch.zeros(1, 1, MODEL1.d, dtype=torch.bfloat16))
    data, scales = _row_views(c, MODEL1)
    return torch.cat([data[0, 0], scales[0, 0]])


def _compact_scope(g: dict, scope: str, keep_kv: bool) -> tuple[dict, dict]:
    """The compact keys of one scope, and what the compaction did (for ``compact``)."""
    bs = g["block_size" if scope == "" else "extra_block_size"]
    src = _scope_cache(g, scope, "cpu")
    nb = src.shape[0]
    n_src = nb * bs
    idx = g[f"{scope}indices"].long()
    in_range = (idx >= 0) & (idx < n_src)

    # the referenced tokens, sequence by sequence (a token two sequences share goes with the first), each
    # sequence's in the original index order
    order, first_slot = [], []
    taken = torch.zeros(n_src, dtype=torch.bool)
    for b in range(idx.shape[0]):
        u = torch.unique(idx[b][in_range[b]])
        u = u[~taken[u]]
        taken[u] = True
        first_slot.append((len(order), len(order) + u.numel()))
        order += u.tolist()
    n_tok = len(order)
    n_pages = max(1, -(-n_tok // bs))
    n_new = n_pages * bs
    source_index = torch.full((n_new,), -1, dtype=torch.int32)
    source_index[:n_tok] = torch.tensor(order, dtype=torch.int32)
    rename = torch.full((n_src,), -1, dtype=torch.long)
    rename[source_index[:n_tok].long()] = torch.arange(n_tok)

    # -1 and other negative indices stay; k past the old end is k past the new end; in range: renamed
    new_idx = torch.where(in_range, rename[idx.clamp(0, n_src - 1)], torch.where(idx >= n_src, idx - n_src + n_new,
                                                                                  idx))
    assert new_idx.numel() == 0 or int(new_idx.max()) < 2 ** 31

    # the tokens' bytes (576 data bytes, 8 scale bytes each), moved to their new slots of fresh pages
    src_data, src_scales = _row_views(src, MODEL1)
    page, off = source_index[:n_tok].long() // bs, source_index[:n_tok].long() % bs
    rows = torch.cat([src_data[page, off], src_scales[page, off]], dim=-1)  # [n_tok, 584]
    rows = torch.cat([rows, _zero_token_bytes().expand(n_new - n_tok, -1)])
    pages = torch.zeros(n_pages, MODEL1.page_bytes(bs), dtype=torch.uint8)
    new = pages.as_strided((n_pages, bs, 1, MODEL1.bytes_per_token),
                           (pages.stride(0), MODEL1.bytes_per_token, MODEL1.bytes_per_token, 1))
    dst_data, dst_scales = _row_views(new, MODEL1)
    dst_data.copy_(rows[:, : MODEL1.data_bytes_per_token].view(n_pages, bs, -1))
    dst_scales.copy_(rows[:, MODEL1.data_bytes_per_token:].view(n_pages, bs, -1))

    # the pages each sequence's tokens lie in (neighbours may share one; -1 pads): sparse decode reads no table
    spans = [(lo // bs, -(-hi // bs)) if hi > lo else (0, 0) for lo, hi in first_slot]
    width = max(1, max(hi - lo for lo, hi in spans))
    block_table = torch.full((idx.shape[0], width), -1, dtype=torch.int32)
    for b, (lo, hi) in enumerate(spans):
        block_table[b, : hi - lo] = torch.arange(lo, hi, dtype=torch.int32)

    out = {f"{scope}indices": new_idx.to(torch.int32),
           f"{scope}cache_bytes": page_bytes_view(new)[:, : bs * MODEL1.bytes_per_token].clone(),
           f"{scope}block_table": block_table,
           f"{scope}source_index": source_index}
    if f"{scope}block_table" in g:
        out[f"{scope}source_block_table"] = g[f"{scope}block_table"].clone()
    out[f"{scope}kv_bf16"] = None  # the key stays (callers test for it to find the extra scope); None: not kept
    if keep_kv and g.get(f"{scope}kv_bf16") is not None:
        kv = torch.zeros(n_new, MODEL1.d, dtype=torch.bfloat16)
        kv[:n_tok] = g[f"{scope}kv_bf16"].reshape(n_src, MODEL1.d)[source_index[:n_tok].long()]
        out[f"{scope}kv_bf16"] = kv.view(n_pages, bs, MODEL1.d)
    info = dict(source_num_blocks=nb, num_blocks=n_pages, tokens=n_tok)
    return out, info


def compact_case(g: dict, keep_kv: bool | None = None, source: str | Path | None = None) -> dict:
    """The compact copy of a golden case ``g`` (see the module docstring), ready for :func:`save_compact`.

    keep_kv: keep the bf16 source rows of the kept tokens (default: the case is in ``KEEP_KV``).
    source: the original file, recorded with its SHA-256 in ``compact``."""
    if "compact" in g:
        raise ValueError(f"{g.get('name')}: already compact")
    keep_kv = (g.get("name") in KEEP_KV) if keep_kv is None else keep_kv
    scope_keys = {"kv_bf16", "cache_bytes", "indices", "block_table"}
    skip = set(DROPPED) | {p + k for p, _ in SCOPES for k in scope_keys}
    c = {}
    for k, v in g.items():  # everything else as it was, byte for byte (a clone keeps strides, not spare storage)
        if k not in skip:
            c[k] = v.clone() if isinstance(v, torch.Tensor) else v
    info = {}
    for scope, _ in SCOPES:
        if f"{scope}indices" in g:
            part, info[scope or "main"] = _compact_scope(g, scope, keep_kv)
            c.update(part)
    dropped = [k for k in g if k in skip and c.get(k) is None and g[k] is not None]
    c["compact"] = dict(format=COMPACT_FORMAT, dropped=dropped, scopes=info,
                        source=None if source is None else Path(source).name,
                        source_sha256=None if source is None else hashlib.sha256(Path(source).read_bytes()).hexdigest())
    return c


def save_compact(c: dict, path: str | Path) -> None:
    """torch.save a compact case, int32 tensors whose values fit stored as int16 (``load_golden`` widens them)."""
    c = dict(c)
    narrowed = []
    for k in NARROW:
        v = c.get(k)
        if isinstance(v, torch.Tensor) and v.dtype == torch.int32 and (v.numel() == 0 or (
                int(v.min()) >= -2 ** 15 and int(v.max()) < 2 ** 15)):
            c[k] = v.to(torch.int16)
            narrowed.append(k)
    c["compact"] = dict(c["compact"], narrowed=narrowed)
    torch.save(c, path)
