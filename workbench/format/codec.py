"""The MODEL1 paged FP8 cache, byte for byte: the codec and the index maths.

``quantize_kv`` writes the exact tensor FlashMLA's ``flash_mla_with_kvcache`` accepts, its scale bytes picked by
FlashMLA's or vLLM's convention (``scale_exponents``); ``dequantize_kv``
reads it back (``gather_dequantized`` only the selected tokens); ``page_bytes_view`` and ``raw_scale_bytes``
expose the stored bytes; ``to_device`` / ``copy_cache`` move or copy a cache with its page stride; and
``positions_to_indices`` / ``indices_to_positions`` / ``valid_index_mask`` are the index rules every module
shares. The hostile test cases built on top of this live in :mod:`workbench.format.cases`.
"""
from __future__ import annotations

import torch

from .layout import MODEL1, CacheLayout
from ..validate import CACHE_DTYPES, check_cache, check_tensor


SCALE_CONVENTIONS = ("flashmla", "vllm")  # how a cache writer picks a tile's UE8M0 scale (quantize_kv)


def scale_exponents(amax: torch.Tensor, layout: CacheLayout = MODEL1,
                    scale_convention: str = "flashmla") -> torch.Tensor:
    """The power-of-two exponent ``e`` (scale ``2**e``, scale byte ``e + 127``) a writer picks for tiles of max
    magnitude ``amax`` (fp32), by ``scale_convention``:

    - "flashmla": ``ceil(log2(max(amax / 448, 1e-4)))``, FlashMLA's ``tests/quant.py`` (the floor is on the
      scale: bytes from 114 up; an all-zero tile gets 114);
    - "vllm": ``ceil(log2(max(amax, 1e-4) / 448))``, vLLM's DeepSeek-V4 cache writers (the floor is on amax,
      before the division: a tile with amax <= 448 * 2**-16 (0.0068) gets bytes 105-111, an all-zero tile 105).

    The two agree for amax >= 448e-4 (0.0448). Any finite bf16 amax gives a byte of at most 247 (bf16's largest,
    3.39e38, / 448 is 2**119.2), so no scale is beyond 2**127 in either convention.
    """
    if scale_convention == "flashmla":
        x = torch.clamp(amax / layout.fp8_max, min=layout.min_scale_amax)
    elif scale_convention == "vllm":
        x = torch.clamp(amax, min=layout.min_scale_amax) / layout.fp8_max
    else:
        raise ValueError(f"scale_convention: expected one of {SCALE_CONVENTIONS}, got {scale_convention!r}")
    return torch.ceil(torch.log2(x))


def quantize_kv(kv_bf16: torch.Tensor, layout: CacheLayout = MODEL1,
                scale_convention: str = "flashmla") -> torch.Tensor:
    """Quantise latent KV into the paged FP8 cache.

    kv_bf16: [num_blocks, block_size, d] bf16.
    scale_convention: "flashmla" (default: FlashMLA's ``tests/quant.py``, the golden cases' bytes) or "vllm"
    (vLLM's DeepSeek-V4 cache writers); see :func:`scale_exponents`. Only the scale bytes of tiles with amax below
    0.0448 differ (and with them those tiles' fp8 codes); the dequantised value is ``bf16(fp8) * bf16(2**(byte-127))``
    either way.
    Returns a uint8 view [num_blocks, block_size, 1, bytes_per_token] with strides
    (page_bytes, bytes_per_token, bytes_per_token, 1); pad bytes and page padding are zero.

    Every finite input gives finite fp8 codes (torch saturates at 448) and scale bytes <= 247. One edge of the
    format itself: a tile whose amax is 248 * 2**120 (3.2965e38, a bf16) or more gets byte 247 and the code 256
    (0x78) for that value, and 256 * 2**120 = 2**128 reads back as inf. Below that every value reads back finite.
    """
    check_tensor("kv_bf16", kv_bf16, dtype=torch.bfloat16, ndim=3)
    nb, bs, d = kv_bf16.shape
    if d != layout.d:
        raise ValueError(f"kv_bf16: expected last dimension {layout.d}, got shape {tuple(kv_bf16.shape)}")
    page_bytes = layout.page_bytes(bs)
    flat = torch.zeros(nb, page_bytes, dtype=torch.uint8, device=kv_bf16.device)

    nope = kv_bf16[..., : layout.d_nope].float().reshape(nb, bs, layout.num_tiles, layout.tile)
    amax = nope.abs().amax(dim=-1)  # [nb, bs, num_tiles]
    exponent = scale_exponents(amax, layout, scale_convention)
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
