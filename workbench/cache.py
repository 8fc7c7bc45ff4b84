"""Building and reading MODEL1 paged FP8 caches, byte for byte.

``quantize_kv`` writes the exact tensor FlashMLA's ``flash_mla_with_kvcache``
accepts; ``dequantize_kv`` reads it back; ``build_case`` makes hostile synthetic
decode problems (shuffled pages, orphan pages, wild tile magnitudes, invalid
indices, NaN in unselected pages).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .layout import MODEL1, CacheLayout
from .validate import CACHE_DTYPES, check_cache, check_tensor


def quantize_kv(kv_bf16: torch.Tensor, layout: CacheLayout = MODEL1) -> torch.Tensor:
    """Quantise latent KV into the paged FP8 cache.

    kv_bf16: [num_blocks, block_size, d] bf16.
    Returns a uint8 view [num_blocks, block_size, 1, bytes_per_token] with strides
    (page_bytes, bytes_per_token, bytes_per_token, 1); pad bytes and page padding are zero.
    """
    check_tensor("kv_bf16", kv_bf16, dtype=torch.bfloat16, ndim=3)
    nb, bs, d = kv_bf16.shape
    if d != layout.d:
        raise ValueError(f"kv_bf16: expected last dimension {layout.d}, got shape {tuple(kv_bf16.shape)}")
    page_bytes = layout.page_bytes(bs)
    flat = torch.zeros(nb, page_bytes, dtype=torch.uint8, device=kv_bf16.device)

    nope = kv_bf16[..., : layout.d_nope].float().reshape(nb, bs, layout.num_tiles, layout.tile)
    amax = nope.abs().amax(dim=-1)  # [nb, bs, num_tiles]
    exponent = torch.ceil(torch.log2(torch.clamp(amax / layout.fp8_max, min=layout.min_scale_amax)))
    scale = torch.exp2(exponent)
    q8 = (nope / scale[..., None]).to(torch.float8_e4m3fn).reshape(nb, bs, layout.d_nope)

    data = flat[:, : layout.scale_offset(bs)].view(nb, bs, layout.data_bytes_per_token)
    data[..., : layout.d_nope] = q8.view(torch.uint8)
    rope = kv_bf16[..., layout.d_nope:].contiguous().view(torch.uint8)  # little-endian bf16 bytes
    data[..., layout.d_nope:] = rope
    scales = flat[:, layout.scale_offset(bs): bs * layout.bytes_per_token].view(
        nb, bs, layout.scale_bytes_per_token)
    scales[..., : layout.num_tiles] = (exponent + 127).to(torch.uint8)
    return flat.as_strided((nb, bs, 1, layout.bytes_per_token),
                           (page_bytes, layout.bytes_per_token, layout.bytes_per_token, 1))


def _decode_rows(data: torch.Tensor, scale_bytes: torch.Tensor, layout: CacheLayout) -> torch.Tensor:
    """data [..., 576] u8 and scale bytes [..., 8] u8 -> [..., 512] bf16 (``bf16(fp8) * bf16(scale)``)."""
    nope8 = data[..., : layout.d_nope].contiguous().view(torch.float8_e4m3fn).float()
    scale = torch.exp2(scale_bytes[..., : layout.num_tiles].float() - 127)
    nope = (nope8.unflatten(-1, (layout.num_tiles, layout.tile)) * scale[..., None]).flatten(-2)
    rope = data[..., layout.d_nope:].contiguous().view(torch.bfloat16)
    return torch.cat([nope.to(torch.bfloat16), rope], dim=-1)


def _row_views(cache: torch.Tensor, layout: CacheLayout):
    """([nb, bs, 576] data view, [nb, bs, 8] scale view) of a cache, without copying."""
    nb, bs, stride0 = check_cache("cache", cache, layout)
    u8 = cache.view(torch.uint8) if cache.dtype != torch.uint8 else cache
    base = u8.storage_offset()
    data = u8.as_strided((nb, bs, layout.data_bytes_per_token), (stride0, layout.data_bytes_per_token, 1), base)
    scales = u8.as_strided((nb, bs, layout.scale_bytes_per_token), (stride0, layout.scale_bytes_per_token, 1),
                           base + layout.scale_offset(bs))
    return data, scales


def page_bytes_view(cache: torch.Tensor) -> torch.Tensor:
    """[num_blocks, page_stride] uint8 view of every page's bytes, padding included (no copy)."""
    u8 = cache.view(torch.uint8) if cache.dtype != torch.uint8 else cache
    return u8.as_strided((cache.shape[0], cache.stride(0)), (cache.stride(0), 1), u8.storage_offset())


def to_device(cache: torch.Tensor, device: str | torch.device, layout: CacheLayout = MODEL1) -> torch.Tensor:
    """A copy of a cache on ``device`` that keeps its page layout: the public way to move or copy a cache.

    ``.to``, ``.clone`` and ``.contiguous`` on the strided view copy only its 584-byte rows, so the page
    stride (page_bytes, 584, 584, 1) is lost and the kernels refuse the result. This allocates whole pages,
    copies every page's bytes (padding included) and rebuilds the same strided view, same dtype. Given such
    a packed copy (stride(0) == block_size*584), it restores the page stride ``layout.page_bytes(block_size)``
    with zero padding: the packed rows are the pages' bytes in order. A view whose storage ends at its last
    token's byte gets its missing padding as zeros. Always a new allocation, even on the same device.
    """
    check_tensor("cache", cache, dtype=CACHE_DTYPES, ndim=4)
    nb, bs = cache.shape[:2]
    row = layout.bytes_per_token
    u8 = cache.view(torch.uint8) if cache.dtype != torch.uint8 else cache
    if cache.shape[2:] == (1, row) and cache.is_contiguous():  # packed: the pages' bytes without padding
        stride0, src = layout.page_bytes(bs), u8.reshape(nb, bs * row)
    else:
        _, _, stride0 = check_cache("cache", cache, layout, whole_pages=False)
        whole = u8.untyped_storage().nbytes() >= u8.storage_offset() + nb * stride0
        # storage that ends at the last token's byte: copy the tokens' bytes, the padding stays zero
        src = page_bytes_view(cache) if whole else u8.as_strided((nb, bs * row), (stride0, 1), u8.storage_offset())
    pages = torch.zeros(nb, stride0, dtype=torch.uint8, device=device)
    pages[:, : src.shape[1]].copy_(src)
    return pages.view(cache.dtype).as_strided((nb, bs, 1, row), (stride0, row, row, 1))


def copy_cache(cache: torch.Tensor, layout: CacheLayout = MODEL1) -> torch.Tensor:
    """A copy of a cache on its own device with its page layout (what ``.clone()`` would lose)."""
    return to_device(cache, cache.device, layout)


def dequantize_kv(cache: torch.Tensor, layout: CacheLayout = MODEL1) -> torch.Tensor:
    """Read a paged cache back as [num_blocks, block_size, d] bf16 (``bf16(fp8) * bf16(scale)``)."""
    data, scales = _row_views(cache, layout)
    return _decode_rows(data, scales, layout)


def gather_dequantized(cache: torch.Tensor, indices: torch.Tensor, layout: CacheLayout = MODEL1) -> torch.Tensor:
    """Dequantise only the selected tokens: indices [...] (all in range) -> [..., d] bf16."""
    data, scales = _row_views(cache, layout)
    idx = indices.long()
    page, off = idx // cache.shape[1], idx % cache.shape[1]
    return _decode_rows(data[page, off], scales[page, off], layout)


def raw_scale_bytes(cache: torch.Tensor, layout: CacheLayout = MODEL1) -> torch.Tensor:
    """[num_blocks, block_size, scale_bytes_per_token] uint8: the stored scale bytes, pad byte included."""
    return _row_views(cache, layout)[1]


def positions_to_indices(positions: torch.Tensor, block_table: torch.Tensor, block_size: int) -> torch.Tensor:
    """Map absolute token positions through a block table to cache indices.

    positions: [b, ...] int, position of each token inside its sequence (-1 = none).
    block_table: [b, pages_per_seq] int32, the page each sequence's page slot lives in.
    Returns int32 indices ``page * block_size + offset`` with -1 where positions is negative.
    """
    check_tensor("block_table", block_table, dtype=torch.int32, ndim=2)
    b = block_table.shape[0]
    if positions.shape[0] != b:
        raise ValueError(f"positions: expected batch {b} (block_table), got shape {tuple(positions.shape)}")
    pos = positions.long()
    valid = pos >= 0
    slot = torch.where(valid, pos // block_size, 0)
    if valid.any() and int(slot[valid].max()) >= block_table.shape[1]:
        raise ValueError("positions: a position lies past the pages the block table gives its sequence")
    rows = torch.arange(b, device=pos.device).view(b, *([1] * (pos.dim() - 1))).expand_as(pos)
    page = block_table.long()[rows, slot]
    idx = page * block_size + pos % block_size
    return torch.where(valid, idx, -1).to(torch.int32)


def valid_index_mask(indices: torch.Tensor, num_tokens: int, topk_length: torch.Tensor | None = None) -> torch.Tensor:
    """Which selected indices count: inside [0, num_tokens) and, with topk_length [b], among the first topk_length[i].

    indices: [b, s_q, topk]. The one definition the reference, the accounting and the builder share.
    """
    idx = indices.long()
    valid = (idx >= 0) & (idx < num_tokens)
    if topk_length is not None:
        valid &= torch.arange(idx.shape[-1], device=idx.device) < topk_length.long().view(-1, 1, 1)
    return valid


def indices_to_positions(indices: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split cache indices into (page, offset); both -1 where the index is -1."""
    idx = indices.long()
    valid = idx >= 0
    return (torch.where(valid, idx // block_size, -1), torch.where(valid, idx % block_size, -1))


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


def _build_scope(g, *, b, s_q, topk, seq_len, block_size, orphan_pages, invalid_frac,
                 with_topk_length, all_invalid_queries, nan_unselected, kv_decades, layout, device):
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
    out_of_range = torch.where(kind < 0.5, n_total + (kind * 1000).long(), -2 - (kind * 1000).long())
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

    cache = quantize_kv(kv_bf16, layout)
    if nan_unselected:
        live = indices.long()[valid_index_mask(indices, n_total, topk_length)]
        selected_pages = torch.zeros(num_blocks, dtype=torch.bool)
        selected_pages[live // block_size] = True
        page_bytes_view(cache)[~selected_pages] = 0xFF  # fp8 NaN, bf16 NaN, scale byte 255 (inf)
    return DecodeScope(kv_bf16.to(device), _to_device(cache, device),
                       block_table.to(device), indices.to(device),
                       None if topk_length is None else topk_length.to(device))


def _to_device(cache: torch.Tensor, device) -> torch.Tensor:
    """Move a cache with its page stride: ``.to`` on the strided view would drop the padding."""
    return page_bytes_view(cache).to(device).as_strided(cache.shape, cache.stride())


def build_case(*, batch: int = 2, s_q: int = 1, heads: int = 16, topk: int = 64, seq_len: int | None = None,
               block_size: int = 64, sink: bool | str = False, topk_length: bool = False,
               invalid_frac: float = 0.1, all_invalid_queries: int = 0, nan_unselected: bool = False,
               extra_topk: int = 0, extra_block_size: int = 64, extra_seq_len: int | None = None,
               extra_topk_length: bool = False, kv_decades: tuple[float, float] = (-3.0, 2.0),
               sm_scale: float | None = None, orphan_pages: int | None = None,
               seed: int = 0, device: str | torch.device = "cpu", layout: CacheLayout = MODEL1) -> DecodeCase:
    """Build a hostile synthetic decode case.

    sink: False (none), True (finite random), or "inf" / "-inf" / "mixed" (+inf, -inf and finite heads).
    invalid_frac: share of indices replaced by -1 or by out-of-range values (both sides).
    nan_unselected: fill every page that no valid index selects with 0xFF bytes (NaN/inf).
    extra_topk > 0 adds an extra KV scope with its own page size and indices.
    kv_decades: each (token, 64-wide tile) is scaled by 10**u, u uniform in this range.
    """
    for name, v in dict(batch=batch, s_q=s_q, heads=heads, topk=topk, block_size=block_size).items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    if not 0.0 <= invalid_frac <= 1.0:
        raise ValueError(f"invalid_frac: expected a fraction in [0, 1], got {invalid_frac}")
    g = torch.Generator().manual_seed(seed)
    seq_len = seq_len or max(topk + topk // 2, 2 * block_size)
    orphan = orphan_pages if orphan_pages is not None else max(1, (batch * -(-seq_len // block_size)) // 8)
    common = dict(b=batch, s_q=s_q, invalid_frac=invalid_frac, all_invalid_queries=all_invalid_queries,
                  nan_unselected=nan_unselected, kv_decades=kv_decades, layout=layout, device=device)
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
    q = torch.randn(batch, s_q, heads, layout.d, generator=g).to(torch.bfloat16).to(device)
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
        attn_sink = s.to(device)
    meta = dict(batch=batch, s_q=s_q, heads=heads, topk=topk, block_size=block_size, seed=seed,
                extra_topk=extra_topk, extra_block_size=extra_block_size if extra_topk else None)
    return DecodeCase(q=q, main=main, extra=extra, sm_scale=sm_scale or layout.d ** -0.5,
                      attn_sink=attn_sink, meta=meta)
