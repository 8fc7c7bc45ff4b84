"""Hostile decode problems: the builder and the one catalogue every check draws from.

``build_case`` makes a synthetic decode problem out of the codec (:mod:`workbench.format.codec`): shuffled page
tables, orphan pages, wild tile magnitudes, -1 and out-of-range indices, all-invalid queries, topk_length
of 0 and past topk, sinks of +inf/-inf/finite, an extra KV scope, NaN in pages nothing selects; its cache
written with FlashMLA's or vLLM's scale convention (``scale_convention``), and post-processed by a named
``tweak`` (``TWEAKS``) for what the draws cannot express: exact or raw scale bytes anywhere in 1..254, all-zero
tiles, and q, rope and nope values near the ends of bf16 (issue 22).

``CATALOGUE`` names the hostile cases once. The interpreter tests (``tests/test_kernels.py``,
``tests/test_reference.py``, ``tests/test_cache.py``), the GPU checks (:mod:`workbench.gpu_check`, also
``pytest -m gpu``) and notebook 02 all take their cases from it, by id; the id is the pytest id and the
``case`` label of the correctness tables. Entries are tiny, so the CPU suite stays fast; an entry's
``gpu_scale`` is the larger version the GPU checks run as well (its label is ``<id>@<overrides>``). An entry
with ``gpu_only`` set is one the interpreter cannot check, and says why.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import torch

from .codec import (SCALE_CONVENTIONS, _decode_rows, _row_views, page_bytes_view, positions_to_indices, quantize_kv,
                    to_device, valid_index_mask)
from .layout import MODEL1, CacheLayout


@dataclass
class DecodeScope:
    """One KV scope: its bf16 source, the cache built from it, and what each query selects."""

    kv_bf16: torch.Tensor       # [num_blocks, block_size, 512] bf16
    cache: torch.Tensor         # [num_blocks, block_size, 1, 584] uint8 view
    block_table: torch.Tensor   # [b, pages_per_seq] int32
    indices: torch.Tensor       # [b, s_q, topk] int32
    topk_length: torch.Tensor | None  # [b] int32

    @property
    def block_size(self) -> int:
        return self.cache.shape[1]


@dataclass
class DecodeCase:
    """A whole decode problem; ``kwargs()`` gives the keyword arguments of a decode call."""

    q: torch.Tensor              # [b, s_q, h, 512] bf16
    main: DecodeScope
    extra: DecodeScope | None
    sm_scale: float
    attn_sink: torch.Tensor | None  # [h] fp32
    meta: dict = field(default_factory=dict)

    def kwargs(self) -> dict:
        kw = dict(q=self.q, cache=self.main.cache, indices=self.main.indices, sm_scale=self.sm_scale,
                  attn_sink=self.attn_sink, topk_length=self.main.topk_length)
        if self.extra is not None:
            kw.update(extra_cache=self.extra.cache, extra_indices=self.extra.indices,
                      extra_topk_length=self.extra.topk_length)
        return kw

    @property
    def scopes(self) -> list[DecodeScope]:
        return [self.main] + ([self.extra] if self.extra is not None else [])


def _build_scope(g, *, b, s_q, topk, seq_len, block_size, orphan_pages, invalid_frac,
                 with_topk_length, all_invalid_queries, kv_decades, scale_convention, layout):
    """One scope on the CPU (``build_case`` applies any tweak, fills NaN pages and moves it to its device)."""
    pages_per_seq = -(-seq_len // block_size)
    num_blocks = b * pages_per_seq + orphan_pages
    perm = torch.randperm(num_blocks, generator=g).to(torch.int32)
    block_table = perm[: b * pages_per_seq].view(b, pages_per_seq).contiguous()

    # tiles of very different magnitudes: each (token, 64-wide tile) gets its own decade
    mag = torch.pow(10.0, torch.empty(num_blocks, block_size, layout.num_tiles + 1).uniform_(*kv_decades, generator=g))
    kv = torch.randn(num_blocks, block_size, layout.d, generator=g)
    kv[..., : layout.d_nope] *= mag[..., : layout.num_tiles].repeat_interleave(layout.tile, dim=-1)
    kv[..., layout.d_nope:] *= mag[..., layout.num_tiles:]
    kv_bf16 = kv.to(torch.bfloat16)

    positions = torch.full((b, s_q, topk), -1, dtype=torch.long)
    n_pick = min(topk, seq_len)
    for i in range(b):
        for j in range(s_q):
            positions[i, j, :n_pick] = torch.randperm(seq_len, generator=g)[:n_pick]
            positions[i, j] = positions[i, j, torch.randperm(topk, generator=g)]
    indices = positions_to_indices(positions, block_table, block_size)

    n_total = num_blocks * block_size
    bad = torch.rand(b, s_q, topk, generator=g) < invalid_frac
    kind = torch.rand(b, s_q, topk, generator=g)
    # of the bad ones: 60% -1, 20% past the last token, 20% below -1
    out_of_range = torch.where(kind < 0.8, n_total + (kind * 1000).long(), -2 - (kind * 1000).long())
    indices = torch.where(bad & (kind < 0.6), -1, torch.where(bad, out_of_range, indices.long())).to(torch.int32)
    for k in range(min(all_invalid_queries, b * s_q)):
        i, j = divmod(b * s_q - 1 - k, s_q)
        indices[i, j] = torch.where(torch.arange(topk) % 2 == 0, -1, n_total + 7).to(torch.int32)

    topk_length = None
    if with_topk_length:
        topk_length = torch.randint(0, topk + 1, (b,), generator=g, dtype=torch.int32)
        topk_length[0] = topk
        if b > 1:
            topk_length[1] = 0
        if b > 2:  # past topk: every index counts (the kernels clamp it to topk)
            topk_length[2] = topk + 1 + topk_length[2]

    cache = quantize_kv(kv_bf16, layout, scale_convention)
    return DecodeScope(kv_bf16, cache, block_table, indices, topk_length)


def _fill_nan_unselected(scope: DecodeScope) -> None:
    """Every page that no valid index selects becomes 0xFF bytes (fp8 NaN, bf16 NaN, scale byte 255 = inf)."""
    n_total = scope.cache.shape[0] * scope.block_size
    live = scope.indices.long()[valid_index_mask(scope.indices, n_total, scope.topk_length)]
    selected_pages = torch.zeros(scope.cache.shape[0], dtype=torch.bool)
    selected_pages[live // scope.block_size] = True
    page_bytes_view(scope.cache)[~selected_pages] = 0xFF


def _scope_on(scope: DecodeScope, device, layout: CacheLayout) -> DecodeScope:
    return DecodeScope(scope.kv_bf16.to(device), to_device(scope.cache, device, layout),
                       scope.block_table.to(device), scope.indices.to(device),
                       None if scope.topk_length is None else scope.topk_length.to(device))


def build_case(*, batch: int = 2, s_q: int = 1, heads: int = 16, topk: int = 64, seq_len: int | None = None,
               block_size: int = 64, sink: bool | str = False, topk_length: bool = False,
               invalid_frac: float = 0.1, all_invalid_queries: int = 0, nan_unselected: bool = False,
               extra_topk: int = 0, extra_block_size: int = 64, extra_seq_len: int | None = None,
               extra_topk_length: bool = False, kv_decades: tuple[float, float] = (-3.0, 2.0),
               sm_scale: float | None = None, orphan_pages: int | None = None,
               scale_convention: str = "flashmla", tweak: str | None = None,
               seed: int = 0, device: str | torch.device = "cpu", layout: CacheLayout = MODEL1) -> DecodeCase:
    """Build a hostile synthetic decode case.

    sink: False (none), True (finite random), or "inf" / "-inf" / "mixed" (+inf, -inf and finite heads).
    topk_length / extra_topk_length: per batch row, topk for row 0, 0 for row 1, past topk for row 2, random
    in [0, topk] after that.
    invalid_frac: share of indices replaced by -1 or by out-of-range values (both sides).
    all_invalid_queries: that many queries (the last ones) select no valid token in any scope.
    nan_unselected: fill every page that no valid index selects with 0xFF bytes (NaN/inf).
    extra_topk > 0 adds an extra KV scope with its own page size and indices.
    kv_decades: each (token, 64-wide tile) is scaled by 10**u, u uniform in this range.
    scale_convention: how the cache writer picks each tile's scale byte, "flashmla" or "vllm"
    (:func:`workbench.format.codec.scale_exponents`); it changes the bytes, not the random draws.
    tweak: the name of a post-processing hook in ``TWEAKS``, applied to the built case (on the CPU, before the
    NaN fill and the move to ``device``) with a generator of its own, so the draws above stay those of the case
    without it. A tweak writes tokens' bytes (quantised with ``scale_convention``, or raw) and may change q;
    ``case.meta["raw_tokens"]`` lists, per scope, the tokens whose bytes it wrote raw.

    The cache bytes are the truth (the reference dequantises them). ``kv_bf16`` is what the writer was given:
    ``quantize_kv(kv_bf16, scale_convention)`` gives the cache's bytes for every token but those in
    ``meta["raw_tokens"]`` (there ``kv_bf16`` is ``dequantize_kv`` of the raw bytes) and the NaN pages.
    """
    for name, v in dict(batch=batch, s_q=s_q, heads=heads, topk=topk, block_size=block_size).items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    if not 0.0 <= invalid_frac <= 1.0:
        raise ValueError(f"invalid_frac: expected a fraction in [0, 1], got {invalid_frac}")
    if scale_convention not in SCALE_CONVENTIONS:
        raise ValueError(f"scale_convention: expected one of {SCALE_CONVENTIONS}, got {scale_convention!r}")
    if tweak is not None and tweak not in TWEAKS:
        raise ValueError(f"tweak: expected None or one of {sorted(TWEAKS)}, got {tweak!r}")
    g = torch.Generator().manual_seed(seed)
    seq_len = seq_len or max(topk + topk // 2, 2 * block_size)
    orphan = orphan_pages if orphan_pages is not None else max(1, (batch * -(-seq_len // block_size)) // 8)
    common = dict(b=batch, s_q=s_q, invalid_frac=invalid_frac, all_invalid_queries=all_invalid_queries,
                  kv_decades=kv_decades, scale_convention=scale_convention, layout=layout)
    main = _build_scope(g, topk=topk, seq_len=seq_len, block_size=block_size, orphan_pages=orphan,
                        with_topk_length=topk_length, **common)
    extra = None
    if extra_topk:
        eseq = extra_seq_len or max(extra_topk + extra_topk // 2, 2 * extra_block_size)
        common["all_invalid_queries"] = 0
        extra = _build_scope(g, topk=extra_topk, seq_len=eseq, block_size=extra_block_size,
                             orphan_pages=max(1, (batch * -(-eseq // extra_block_size)) // 8),
                             with_topk_length=extra_topk_length, **common)
        if all_invalid_queries:  # an all-invalid query must be invalid in every scope
            for k in range(min(all_invalid_queries, batch * s_q)):
                i, j = divmod(batch * s_q - 1 - k, s_q)
                extra.indices[i, j] = -1
    q = torch.randn(batch, s_q, heads, layout.d, generator=g).to(torch.bfloat16)
    attn_sink = None
    if sink:
        s = torch.randn(heads, generator=g) * 2
        if sink == "inf":
            s[:] = float("inf")
        elif sink == "-inf":
            s[:] = float("-inf")
        elif sink == "mixed":
            s[0::3] = float("inf")
            s[1::3] = float("-inf")
        attn_sink = s
    meta = dict(batch=batch, s_q=s_q, heads=heads, topk=topk, block_size=block_size, seed=seed,
                extra_topk=extra_topk, extra_block_size=extra_block_size if extra_topk else None,
                scale_convention=scale_convention, tweak=tweak, raw_tokens={})
    case = DecodeCase(q=q, main=main, extra=extra, sm_scale=sm_scale or layout.d ** -0.5, attn_sink=attn_sink,
                      meta=meta)
    if tweak is not None:
        TWEAKS[tweak](case, torch.Generator().manual_seed(zlib.crc32(f"{tweak}:{seed}".encode())), layout)
    for sc in case.scopes:
        if nan_unselected:
            _fill_nan_unselected(sc)
    case.main = _scope_on(main, device, layout)
    case.extra = None if extra is None else _scope_on(extra, device, layout)
    case.q = case.q.to(device)
    case.attn_sink = None if attn_sink is None else attn_sink.to(device)
    return case


# ------------------------------------------------------------------------------------------------------------
# Tweaks: post-processing hooks for what build_case's draws cannot express (exact scale bytes, raw bytes, q)
# ------------------------------------------------------------------------------------------------------------
def _live(scope: DecodeScope) -> torch.Tensor:
    """[b, s_q, topk] bool: which indices count (in range, within topk_length)."""
    return valid_index_mask(scope.indices, scope.cache.shape[0] * scope.block_size, scope.topk_length)


def _selected_tokens(scope: DecodeScope) -> torch.Tensor:
    """The distinct tokens (cache indices, int64) that some counted index selects."""
    return scope.indices.long()[_live(scope)].unique()


def _pick(scope: DecodeScope, g, per_query: int, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """Up to ``per_query`` distinct tokens drawn from each query's counted selection (none of ``exclude``), as one
    sorted int64 tensor: the union, so a token several queries select is picked once."""
    live = _live(scope)
    picked = []
    for i in range(live.shape[0]):
        for j in range(live.shape[1]):
            toks = scope.indices[i, j][live[i, j]].long().unique()
            if exclude is not None:
                toks = toks[~torch.isin(toks, exclude)]
            picked.append(toks[torch.randperm(toks.numel(), generator=g)[:per_query]])
    return torch.cat(picked).unique()


def _slots(scope: DecodeScope, tokens: torch.Tensor):
    return tokens // scope.block_size, tokens % scope.block_size


def _write_tokens(case: DecodeCase, scope: DecodeScope, tokens: torch.Tensor, rows: torch.Tensor,
                  layout: CacheLayout) -> None:
    """Write ``rows`` ([n, 512] bf16) into the tokens' slots as a cache writer would: quantised with the case's
    scale convention (all 584 bytes of each token); ``kv_bf16`` gets the rows."""
    if tokens.numel() == 0:
        return
    page, off = _slots(scope, tokens)
    rows = rows.to(torch.bfloat16)
    one = quantize_kv(rows.reshape(1, -1, layout.d), layout, case.meta["scale_convention"])
    src_data, src_scales = _row_views(one, layout)
    data, scales = _row_views(scope.cache, layout)
    data[page, off] = src_data[0]
    scales[page, off] = src_scales[0]
    scope.kv_bf16[page, off] = rows


def _write_tile_raw(case: DecodeCase, scope: DecodeScope, tokens: torch.Tensor, tile: int, codes: torch.Tensor,
                    scale_bytes: torch.Tensor, layout: CacheLayout) -> None:
    """Write raw bytes into one nope tile of each token: ``codes`` [n, 64] fp8 e4m3 bytes (uint8) and
    ``scale_bytes`` [n] (uint8), whatever a writer would have picked; ``kv_bf16`` gets the dequantised rows and the
    tokens are listed in ``meta["raw_tokens"]``."""
    if tokens.numel() == 0:
        return
    page, off = _slots(scope, tokens)
    data, scales = _row_views(scope.cache, layout)
    cols = slice(tile * layout.tile, (tile + 1) * layout.tile)
    data[page, off, cols] = codes.to(torch.uint8)
    scales[page, off, tile] = scale_bytes.to(torch.uint8)
    scope.kv_bf16[page, off] = _decode_rows(data[page, off], scales[page, off], layout)
    name = "main" if scope is case.main else "extra"
    raw = case.meta["raw_tokens"]
    raw[name] = torch.cat([raw.get(name, tokens.new_empty(0)), tokens]).unique()


def _fp8_codes(values: torch.Tensor) -> torch.Tensor:
    """fp8 e4m3 bytes of fp32 values (exact when they are e4m3 values; torch saturates at 448, never NaN)."""
    return values.float().to(torch.float8_e4m3fn).view(torch.uint8)


def _random_codes(n: int, g) -> torch.Tensor:
    """[n, 64] nonzero, finite fp8 codes of random sign and magnitude (1/64 .. 448)."""
    mag = torch.pow(2.0, torch.empty(n, 64).uniform_(-6.0, 8.8, generator=g))
    sign = torch.where(torch.rand(n, 64, generator=g) < 0.5, -1.0, 1.0)
    return _fp8_codes(sign * mag)


def _tile_cols(tile: int, layout: CacheLayout) -> slice:
    return slice(tile * layout.tile, (tile + 1) * layout.tile)


def _vllm_small_tiles(case: DecodeCase, g, layout: CacheLayout) -> None:
    """Small and all-zero tiles as vLLM's writers store them: a quarter of each query's selected tokens (at least
    2) get, tile by tile in rotation, an all-zero tile, a tile of amax 5e-5 (below vLLM's 1e-4 floor: byte 105,
    nonzero codes) or a tile of amax 0.75 * 448 * 2**(b-127) for b in 106..111 (exactly byte b under vLLM's
    convention; 114 under FlashMLA's), written through the quantiser with the case's convention."""
    s = case.main
    per_query = max(2, s.indices.shape[2] // 4)
    tokens = _pick(s, g, per_query)
    rows = s.kv_bf16[_slots(s, tokens)].float()
    amaxes = torch.tensor([0.0, 5e-5] + [0.75 * layout.fp8_max * 2.0 ** (b - 127) for b in range(106, 112)])
    n, nt = tokens.numel(), layout.num_tiles
    which = (torch.arange(n)[:, None] + torch.arange(nt)[None, :]) % amaxes.numel()  # [n, tiles], in rotation
    x = torch.randn(n, nt, layout.tile, generator=g)
    rows[:, : layout.d_nope] = (x / x.abs().amax(dim=-1, keepdim=True) * amaxes[which][..., None]).flatten(1)
    _write_tokens(case, s, tokens, rows, layout)


def _extreme_scale_bytes(case: DecodeCase, g, layout: CacheLayout) -> None:
    """Raw scale bytes at both ends of UE8M0, in selected tokens (main scope):

    - 2 tokens per query: tile 0 at byte 254 (2**127, the largest finite scale) with codes of magnitude
      2**-9..2**-6 (values 2**118..2**121, finite in bf16 and fp32); q is ~1e-36 on dims 0..63, so those
      tokens' scores are O(1) and a few of them summed stay far below fp32's 2**128;
    - 4 other tokens per query: tiles 1 and 2 at random bytes 128..200 (2 .. 2**73 times 448), random nonzero
      codes; q is ~1e-24 on dims 64..191;
    - 4 other tokens per query: tiles 3 and 4 at random bytes 1..104 (2**-126 .. 2**-23), random nonzero codes.
    """
    s = case.main
    top = _pick(s, g, 2)
    big = _pick(s, g, 4, exclude=top)
    small = _pick(s, g, 4, exclude=torch.cat([top, big]))
    n = top.numel()
    mag = torch.pow(2.0, -torch.randint(6, 10, (n, layout.tile), generator=g).float())
    sign = torch.where(torch.rand(n, layout.tile, generator=g) < 0.5, -1.0, 1.0)
    _write_tile_raw(case, s, top, 0, _fp8_codes(sign * mag), torch.full((n,), 254), layout)
    for tile in (1, 2):
        _write_tile_raw(case, s, big, tile, _random_codes(big.numel(), g),
                        torch.randint(128, 201, (big.numel(),), generator=g), layout)
    for tile in (3, 4):
        _write_tile_raw(case, s, small, tile, _random_codes(small.numel(), g),
                        torch.randint(1, 105, (small.numel(),), generator=g), layout)
    q = case.q.float()
    q[..., _tile_cols(0, layout)] = torch.randn(q[..., _tile_cols(0, layout)].shape, generator=g) * 1e-36
    q[..., layout.tile: 3 * layout.tile] = torch.randn(q[..., layout.tile: 3 * layout.tile].shape,
                                                        generator=g) * 1e-24
    case.q = q.to(torch.bfloat16)


def _huge_q_and_rope(case: DecodeCase, g, layout: CacheLayout) -> None:
    """q and rope values near bf16's limits, with every product q.K finite (main scope, every token rewritten
    through the quantiser with the case's convention):

    - tile 6 (dims 384..447) is all zero in every token and rope dims 504..511 are zero: q holds +-1e38 at dims
      384, 401, 447 and +-1e38 / -3e38 on dims 504..511 (products 0);
    - tile 5 (dims 320..383) is ~1e-5 in every token: q holds +-7e4..3e5 (past f16's 65504) on dims 320..327
      (products ~1);
    - 3 tokens per query hold rope values 1e4..1e30 on dims 448..463, where q is 0;
    - 3 other tokens per query hold rope values +-3e4..2e5 on dims 464..471, where q is ~1e-4.
    """
    s = case.main
    nb, bs, d = s.kv_bf16.shape
    kv = s.kv_bf16.float().reshape(nb * bs, d)
    kv[:, _tile_cols(6, layout)] = 0.0
    kv[:, 504:512] = 0.0
    kv[:, _tile_cols(5, layout)] = torch.randn(nb * bs, layout.tile, generator=g) * 1e-5
    huge_rope = _pick(s, g, 3)
    mid_rope = _pick(s, g, 3, exclude=huge_rope)
    decade = torch.empty(huge_rope.numel(), 1).uniform_(4.0, 30.0, generator=g)
    decade[0] = 30.0  # one token at 1e30 whatever the draw
    kv[huge_rope, 448:464] = torch.randn(huge_rope.numel(), 16, generator=g) * torch.pow(10.0, decade)
    sign = torch.where(torch.rand(mid_rope.numel(), 8, generator=g) < 0.5, -1.0, 1.0)
    kv[mid_rope, 464:472] = sign * torch.empty(mid_rope.numel(), 8).uniform_(3e4, 2e5, generator=g)
    _write_tokens(case, s, torch.arange(nb * bs), kv, layout)

    q = case.q.float()
    pm = lambda shape: torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)  # noqa: E731
    for dim in (384, 401, 447):
        q[..., dim] = pm(q.shape[:-1]) * 1e38
    q[..., 504:512] = pm(q[..., 504:512].shape) * 1e38
    q[..., 510] = -3e38
    q[..., 320:328] = pm(q[..., 320:328].shape) * torch.empty(q[..., 320:328].shape).uniform_(7e4, 3e5,
                                                                                              generator=g)
    q[..., 448:464] = 0.0
    q[..., 464:472] *= 1e-4
    case.q = q.to(torch.bfloat16)


def _one_huge_value(value: float, dim: int):
    def tweak(case: DecodeCase, g, layout: CacheLayout) -> None:
        s = case.main
        first = s.indices[0, 0][_live(s)[0, 0]].long().unique()
        token = first[torch.randint(first.numel(), (1,), generator=g)]
        row = s.kv_bf16[_slots(s, token)].float()
        row[:, dim] = value
        _write_tokens(case, s, token, row, layout)
        q = case.q.float()
        q[..., dim] = 0.0 if value > 1e30 else q[..., dim] * 1e-4
        case.q = q.to(torch.bfloat16)
    tweak.__doc__ = (f"One token that query (0, 0) selects holds {value:g} at nope dim {dim}, written through the "
                     f"quantiser with the case's convention; q is {'0' if value > 1e30 else '1e-4 times itself'} "
                     f"there, so the score stays O(1).")
    return tweak


# name -> fn(case, generator, layout), mutating the CPU case (build_case's ``tweak=``)
TWEAKS = {
    "vllm-small-tiles": _vllm_small_tiles,
    "extreme-scale-bytes": _extreme_scale_bytes,
    "huge-q-and-rope": _huge_q_and_rope,
    "kv-70000": _one_huge_value(70000.0, 70),
    "kv-3e38": _one_huge_value(3e38, 200),
}


# ------------------------------------------------------------------------------------------------------------
# The catalogue
# ------------------------------------------------------------------------------------------------------------
def _valid(case: DecodeCase, scope: DecodeScope) -> torch.Tensor:
    return valid_index_mask(scope.indices, scope.cache.shape[0] * scope.block_size, scope.topk_length)


def _shuffled(case):
    return any(not torch.equal(s.block_table.flatten().sort().values, s.block_table.flatten()) for s in case.scopes)


def _orphans(case):
    return all(s.block_table.numel() < s.cache.shape[0] for s in case.scopes)


def _out_of_range(case):
    return any(bool((s.indices >= s.cache.shape[0] * s.block_size).any()) and bool((s.indices < -1).any())
               for s in case.scopes)


def _all_invalid_query(case):
    any_valid = torch.stack([_valid(case, s).any(dim=-1) for s in case.scopes]).any(dim=0)  # [b, s_q]
    return bool((~any_valid).any())


def _lengths(case):
    return [(s.topk_length.long(), s.indices.shape[2]) for s in case.scopes if s.topk_length is not None]


def _sink(case, pred):
    return case.attn_sink is not None and bool(pred(case.attn_sink).any())


def _nan_unselected(case):
    """Some page is all 0xFF bytes, and every such page is one no valid index selects."""
    for s in case.scopes:
        pages = page_bytes_view(s.cache)
        nan_page = (pages == 0xFF).all(dim=1)
        selected = torch.zeros_like(nan_page)
        selected[s.indices.long()[_valid(case, s)] // s.block_size] = True
        if not nan_page.any() or (nan_page & selected).any():
            return False
    return True


def _selected_rows(case):
    """What the counted indices of all scopes select, token by token (each distinct token once per scope):
    (scale bytes [n, 7] int64, tile has a nonzero code [n, 7], tile is all zero codes [n, 7], dequantised rows
    [n, 512] fp32), on the CPU."""
    sbs, nzs, zeros, deqs = [], [], [], []
    for s in case.scopes:
        data, scales = _row_views(s.cache, MODEL1)
        page, off = _slots(s, _selected_tokens(s))
        d, sb = data[page, off].cpu(), scales[page, off].cpu()
        codes = d[:, : MODEL1.d_nope].reshape(-1, MODEL1.num_tiles, MODEL1.tile) & 0x7F  # magnitude bits
        sbs.append(sb[:, : MODEL1.num_tiles].long())
        nzs.append((codes != 0).any(dim=-1))
        zeros.append((codes == 0).all(dim=-1))
        deqs.append(_decode_rows(d, sb, MODEL1).float())
    return torch.cat(sbs), torch.cat(nzs), torch.cat(zeros), torch.cat(deqs)


def _bytes_with_codes(case, lo, hi):
    """Some selected tile has a scale byte in [lo, hi] and a nonzero code."""
    sb, nz, _, _ = _selected_rows(case)
    return bool((nz & (sb >= lo) & (sb <= hi)).any())


def _zero_tile(case, byte):
    sb, _, zero, _ = _selected_rows(case)
    return bool((zero & (sb == byte)).any())


def _selected_abs(case, cols):
    """The largest |value| the selected tokens hold in ``cols`` (dequantised; inf/NaN count as inf)."""
    deq = _selected_rows(case)[3][:, cols].abs()
    return float(torch.nan_to_num(deq, nan=float("inf")).max()) if deq.numel() else 0.0


F16_OVERFLOW = 65536.0   # the smallest bf16 value that is inf in f16 (f16's largest is 65504)
NEAR_BF16_MAX = 2.0 ** 126  # 8.5e37: within a factor 4 of bf16's largest (3.39e38)
_NOPE, _ROPE = slice(0, MODEL1.d_nope), slice(MODEL1.d_nope, MODEL1.d)

# feature -> a predicate on the built case that is true when the case has it
FEATURES = {
    "shuffled-pages": _shuffled,
    "orphan-pages": _orphans,
    **{f"page-size-{n}": (lambda n: lambda c: any(s.block_size == n for s in c.scopes))(n)
       for n in (2, 61, 64, 69, 256)},
    "index-minus-one": lambda c: any(bool((s.indices == -1).any()) for s in c.scopes),
    "index-out-of-range": _out_of_range,
    "all-invalid-query": _all_invalid_query,
    "topk-length": lambda c: bool(_lengths(c)),
    "topk-length-0": lambda c: any(bool((tl == 0).any()) for tl, _ in _lengths(c)),
    "topk-length-over-topk": lambda c: any(bool((tl > k).any()) for tl, k in _lengths(c)),
    "sink-finite": lambda c: _sink(c, torch.isfinite),
    "sink-+inf": lambda c: _sink(c, torch.isposinf),
    "sink--inf": lambda c: _sink(c, torch.isneginf),
    "extra-scope": lambda c: c.extra is not None,
    "sm-scale": lambda c: c.sm_scale != MODEL1.d ** -0.5,
    "s_q-2": lambda c: c.q.shape[1] >= 2,
    "heads-not-a-power-of-2": lambda c: c.q.shape[2] & (c.q.shape[2] - 1) != 0,
    "nan-unselected": _nan_unselected,
    # scale bytes and magnitudes in selected tokens (issue 22: a reader must accept every byte 0..254)
    "scale-bytes-105-to-111": lambda c: set(range(105, 112)) <= set(_selected_rows(c)[0].unique().tolist()),
    "zero-tile-byte-105": lambda c: _zero_tile(c, 105),  # an all-zero tile as vLLM's writers store it
    "zero-tile-byte-114": lambda c: _zero_tile(c, 114),  # ... and as FlashMLA's quantiser does
    "scale-bytes-1-to-104": lambda c: _bytes_with_codes(c, 1, 104),
    "scale-bytes-135-to-253": lambda c: _bytes_with_codes(c, 135, 253),
    "scale-byte-254": lambda c: _bytes_with_codes(c, 254, 254) and math.isfinite(_selected_abs(c, _NOPE)),
    "q-over-65504": lambda c: float(c.q.float().abs().max()) >= F16_OVERFLOW,
    "q-near-bf16-max": lambda c: float(c.q.float().abs().max()) >= NEAR_BF16_MAX,
    "rope-over-65504": lambda c: _selected_abs(c, _ROPE) >= F16_OVERFLOW,
    "rope-over-1e29": lambda c: _selected_abs(c, _ROPE) >= 1e29,
    "kv-over-65504": lambda c: _selected_abs(c, _NOPE) >= F16_OVERFLOW,
    "kv-near-bf16-max": lambda c: _selected_abs(c, _NOPE) >= NEAR_BF16_MAX,
}
NAN_ON_INTERPRETER = "NaN pages: the interpreter reads fp8 NaN (0xFF) as 480, so a leak would go unseen"
TOO_BIG_FOR_INTERPRETER = "size: minutes under the interpreter"
_SHORT = dict(batch="b", heads="h", s_q="sq", topk="k", block_size="bs", extra_topk="x", extra_block_size="xbs")


@dataclass(frozen=True)
class HostileCase:
    """One catalogue entry: a readable id, the ``build_case`` keywords, and the features it claims.

    ``covers`` is checked against the built case (``FEATURES``) by the tests; ``gpu_only`` says why the
    interpreter cannot check it (empty: it can); ``gpu_scale`` overrides ``spec`` for a larger GPU run.
    """

    id: str
    spec: dict
    covers: tuple[str, ...]
    gpu_only: str = ""
    gpu_scale: dict = field(default_factory=dict)

    @property
    def interpretable(self) -> bool:
        return not self.gpu_only

    @property
    def seed(self) -> int:
        return self.spec.get("seed", zlib.crc32(self.id.encode()) % 10_000)

    def build(self, device: str | torch.device = "cpu", **overrides) -> DecodeCase:
        """The case on ``device``; ``overrides`` replace spec keywords (the seed stays the entry's)."""
        return build_case(**{"seed": self.seed, **self.spec, **overrides}, device=device)

    def scaled(self) -> HostileCase | None:
        """The larger GPU version (``<id>@b4-h128-k2048``), or None when the entry has none."""
        if not self.gpu_scale:
            return None
        label = "-".join(f"{_SHORT.get(k, k)}{v}" for k, v in self.gpu_scale.items())
        return HostileCase(f"{self.id}@{label}", {**self.spec, **self.gpu_scale, "seed": self.seed}, self.covers,
                           self.gpu_only or TOO_BIG_FOR_INTERPRETER)


_S = 0.07  # a non-default sm_scale (the default is 512**-0.5 = 0.044)

CATALOGUE: tuple[HostileCase, ...] = (
    HostileCase("h1-k1-bs2-one-token",
                dict(batch=2, heads=1, topk=1, block_size=2, invalid_frac=0.0, sm_scale=_S),
                ("page-size-2", "orphan-pages", "sm-scale"),
                gpu_scale=dict(batch=4, topk=2048)),
    HostileCase("h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid",
                dict(batch=3, s_q=2, heads=5, topk=100, block_size=61, sink="mixed", topk_length=True,
                     invalid_frac=0.2, all_invalid_queries=1, kv_decades=(-1.0, 1.0), sm_scale=0.06),
                ("s_q-2", "page-size-61", "sink-+inf", "sink--inf", "sink-finite", "topk-length", "topk-length-0",
                 "topk-length-over-topk", "all-invalid-query", "index-minus-one", "index-out-of-range",
                 "heads-not-a-power-of-2", "sm-scale", "shuffled-pages"),
                gpu_scale=dict(batch=4, heads=128, s_q=3, topk=2048)),
    HostileCase("h8-k40-bs256-sink-extra-bs2-xtklen",
                dict(batch=3, heads=8, topk=40, block_size=256, sink=True, extra_topk=24, extra_block_size=2,
                     extra_topk_length=True, sm_scale=_S),
                ("page-size-256", "page-size-2", "extra-scope", "sink-finite", "topk-length-0",
                 "topk-length-over-topk", "index-out-of-range", "shuffled-pages"),
                gpu_scale=dict(heads=64, topk=128, extra_topk=512)),
    HostileCase("b1-h20-sq2-k24-bs2-sinkinf-extra-bs61-allinvalid",
                dict(batch=1, s_q=2, heads=20, topk=24, block_size=2, sink="inf", extra_topk=8,
                     extra_block_size=61, all_invalid_queries=1, sm_scale=_S),
                ("sink-+inf", "extra-scope", "page-size-2", "page-size-61", "all-invalid-query", "s_q-2",
                 "heads-not-a-power-of-2", "shuffled-pages"),
                gpu_scale=dict(batch=4, s_q=3, topk=2048)),
    HostileCase("h24-k48-bs69-sinkneginf-tklen-invalid50",
                dict(batch=3, heads=24, topk=48, block_size=69, sink="-inf", topk_length=True, invalid_frac=0.5,
                     sm_scale=_S),
                ("page-size-69", "sink--inf", "topk-length-0", "topk-length-over-topk", "index-minus-one",
                 "index-out-of-range", "heads-not-a-power-of-2", "shuffled-pages"),
                gpu_scale=dict(batch=4, heads=64, topk=2048)),
    HostileCase("h4-k37-bs69-allinvalid",
                dict(batch=2, heads=4, topk=37, block_size=69, invalid_frac=1.0, sm_scale=_S),
                ("page-size-69", "all-invalid-query", "index-minus-one", "index-out-of-range"),
                gpu_scale=dict(heads=128, topk=2048)),
    HostileCase("h5-k64-bs64-mild-defaultscale",
                dict(batch=2, heads=5, topk=64, block_size=64, kv_decades=(-0.5, 0.5)),
                ("page-size-64", "index-minus-one", "shuffled-pages"),
                gpu_scale=dict(batch=4, topk=2048)),
    HostileCase("b1-h64-k40-bs64-sink-tklen",
                dict(batch=1, heads=64, topk=40, block_size=64, sink=True, topk_length=True, sm_scale=_S),
                ("page-size-64", "sink-finite", "topk-length"),
                gpu_scale=dict(batch=4, heads=128, s_q=2, topk=512)),
    # the scale bytes and magnitudes real writers produce (issue 22): every byte a reader must accept, and q,
    # rope and nope values near the ends of bf16, with every product q.K and the fp32 reference finite
    HostileCase("h4-k48-bs61-vllm-bytes-105-111-zero-tiles",
                dict(batch=2, heads=4, topk=48, block_size=61, kv_decades=(-4.0, -2.0), scale_convention="vllm",
                     tweak="vllm-small-tiles", sm_scale=_S),
                ("scale-bytes-105-to-111", "zero-tile-byte-105", "page-size-61", "index-minus-one",
                 "sm-scale"),
                gpu_scale=dict(batch=4, heads=64, topk=2048)),
    HostileCase("h4-k64-bs64-bytes-254-135-253-1-104",
                dict(batch=2, heads=4, topk=64, block_size=64, kv_decades=(-1.0, 1.0), tweak="extreme-scale-bytes",
                     sm_scale=_S),
                ("scale-byte-254", "scale-bytes-135-to-253", "scale-bytes-1-to-104", "page-size-64", "sm-scale"),
                gpu_scale=dict(batch=4, heads=128, topk=2048)),
    HostileCase("h4-sq2-k40-bs64-sink-q-1e38-rope-1e30-zero-tiles",
                dict(batch=2, s_q=2, heads=4, topk=40, block_size=64, kv_decades=(-1.0, 1.0), sink=True,
                     tweak="huge-q-and-rope"),
                ("q-near-bf16-max", "q-over-65504", "rope-over-1e29", "rope-over-65504", "zero-tile-byte-114",
                 "s_q-2", "sink-finite"),
                gpu_scale=dict(batch=4, heads=64, topk=2048)),
    HostileCase("h4-k32-bs64-kv-70000",
                dict(batch=2, heads=4, topk=32, block_size=64, kv_decades=(-1.0, 1.0), tweak="kv-70000", sm_scale=_S),
                ("kv-over-65504", "scale-bytes-135-to-253", "page-size-64"),
                gpu_scale=dict(batch=4, heads=128, topk=512)),
    HostileCase("h4-k32-bs256-vllm-kv-3e38",
                dict(batch=2, heads=4, topk=32, block_size=256, kv_decades=(-1.0, 1.0), scale_convention="vllm",
                     tweak="kv-3e38", sm_scale=_S),
                ("kv-near-bf16-max", "kv-over-65504", "scale-bytes-135-to-253", "page-size-256"),
                gpu_scale=dict(batch=4, heads=64, topk=2048)),
    # GPU only: NaN in the pages nothing selects
    HostileCase("h20-sq2-k70-bs61-sinkmixed-tklen-extra-bs2-nan",
                dict(batch=2, heads=20, s_q=2, topk=70, block_size=61, sink="mixed", topk_length=True,
                     extra_topk=20, extra_block_size=2, invalid_frac=0.3, all_invalid_queries=1,
                     nan_unselected=True),
                ("nan-unselected", "page-size-61", "page-size-2", "extra-scope", "s_q-2", "sink-+inf", "sink--inf",
                 "all-invalid-query", "topk-length-0"),
                gpu_only=NAN_ON_INTERPRETER, gpu_scale=dict(heads=64, topk=2048, extra_topk=128)),
    HostileCase("h16-k200-bs256-sink-extra-bs64-nan",
                dict(batch=3, heads=16, topk=200, block_size=256, sink=True, extra_topk=64, extra_block_size=64,
                     nan_unselected=True, sm_scale=_S),
                ("nan-unselected", "page-size-256", "page-size-64", "extra-scope"),
                gpu_only=NAN_ON_INTERPRETER, gpu_scale=dict(heads=128, topk=2048)),
    HostileCase("h5-sq3-k37-bs2-tklen-allinvalid-nan",
                dict(batch=4, s_q=3, heads=5, topk=37, block_size=2, topk_length=True, all_invalid_queries=1,
                     nan_unselected=True, sm_scale=_S),
                ("nan-unselected", "page-size-2", "topk-length-over-topk", "all-invalid-query"),
                gpu_only=NAN_ON_INTERPRETER, gpu_scale=dict(heads=20, topk=2048)),
    HostileCase("h64-k48-bs69-sinkneginf-nan",
                dict(batch=2, heads=64, topk=48, block_size=69, sink="-inf", invalid_frac=0.3, nan_unselected=True,
                     sm_scale=_S),
                ("nan-unselected", "page-size-69", "sink--inf"),
                gpu_only=NAN_ON_INTERPRETER, gpu_scale=dict(heads=128, topk=512)),
    # GPU only by size: the CUDA-graph and run-to-run case
    HostileCase("b8-h64-k512-bs64-sink-extra-x64",
                dict(batch=8, heads=64, topk=512, block_size=64, sink=True, extra_topk=64, kv_decades=(-1.0, 1.0)),
                ("page-size-64", "extra-scope", "sink-finite"),
                gpu_only=TOO_BIG_FOR_INTERPRETER),
)
_BY_ID = {e.id: e for e in CATALOGUE}
assert len(_BY_ID) == len(CATALOGUE), "catalogue ids must be unique"

SHAPE_SWEEP = "h5-sq2-k100-bs61-sinkmixed-tklen-allinvalid"  # the entry notebook 02 sweeps over shapes
BITWISE = "b8-h64-k512-bs64-sink-extra-x64"                     # the GPU checks' graph and run-to-run case
SANITIZER = "h20-sq2-k70-bs61-sinkmixed-tklen-extra-bs2-nan"    # compute-sanitizer's case


def get(case_id: str) -> HostileCase:
    """The catalogue entry ``case_id``, or an entry's larger GPU version by its id (``<id>@<label>``:
    :meth:`HostileCase.scaled`), so that compute-sanitizer can run a case of more than 64 heads."""
    if case_id in _BY_ID:
        return _BY_ID[case_id]
    base, at, _ = case_id.partition("@")
    scaled = _BY_ID[base].scaled() if at and base in _BY_ID else None
    if scaled is None or scaled.id != case_id:
        raise ValueError(f"case_id: expected one of {list(_BY_ID)} or one's GPU version (<id>@<label>: "
                         f"{scaled_ids()}), got {case_id!r}")
    return scaled


def scaled_ids() -> list[str]:
    """The ids of the entries' larger GPU versions, in catalogue order."""
    return [s.id for s in (e.scaled() for e in CATALOGUE) if s is not None]


def catalogue(*, interpretable: bool | None = None) -> tuple[HostileCase, ...]:
    """The entries; ``interpretable=True`` only those the interpreter can check, False only the GPU-only ones."""
    return tuple(e for e in CATALOGUE if interpretable is None or e.interpretable == interpretable)


def gpu_cases() -> tuple[HostileCase, ...]:
    """What the GPU checks run: every entry as it is, then every entry's scaled version."""
    return CATALOGUE + tuple(s for s in (e.scaled() for e in CATALOGUE) if s is not None)
