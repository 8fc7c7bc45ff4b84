"""The MODEL1 (DeepSeek-V4) paged FP8 KV-cache format, as one executable spec.

Every other module takes its numbers from here; nothing else restates them.

One token is 584 bytes:  448 fp8-e4m3 "nope" values, 64 little-endian bf16
"rope" values (the 576 data bytes), then 7 UE8M0 scale bytes and one zero pad
byte (the 8 scale bytes). Inside a page the data bytes of all tokens come
first, then the scale bytes of all tokens, then zero padding up to a multiple
of 576 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CacheLayout:
    """Byte layout of one paged FP8 latent-KV cache format."""

    name: str
    d: int          # latent width; K and V are the same vector
    d_nope: int     # fp8-quantised part
    d_rope: int     # bf16 part
    tile: int       # nope values sharing one scale byte
    fp8_max: float  # largest finite float8_e4m3fn value
    min_scale_amax: float  # amax floor that keeps scales finite for all-zero tiles

    @property
    def num_tiles(self) -> int:
        return self.d_nope // self.tile

    @property
    def rope_bytes(self) -> int:
        return self.d_rope * 2

    @property
    def data_bytes_per_token(self) -> int:
        return self.d_nope + self.rope_bytes

    @property
    def scale_bytes_per_token(self) -> int:
        # num_tiles scale bytes padded to a power of two (the pad byte is zero)
        n = self.num_tiles
        return 1 << (n - 1).bit_length()

    @property
    def bytes_per_token(self) -> int:
        return self.data_bytes_per_token + self.scale_bytes_per_token

    @property
    def page_alignment(self) -> int:
        return self.data_bytes_per_token

    @property
    def nope_pad(self) -> int:
        """d_nope rounded up to a power of two: what tl.arange can address."""
        return 1 << (self.d_nope - 1).bit_length()

    @property
    def pad_scale_group(self) -> int:
        """The scale-byte slot that padded nope columns [d_nope, nope_pad) map to."""
        return self.num_tiles

    def page_bytes(self, block_size: int) -> int:
        """Bytes between consecutive pages for a page of ``block_size`` tokens."""
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        raw = block_size * self.bytes_per_token
        a = self.page_alignment
        return -(-raw // a) * a

    def scale_offset(self, block_size: int) -> int:
        """Byte offset, inside a page, of the first token's scale bytes."""
        return block_size * self.data_bytes_per_token


MODEL1 = CacheLayout(
    name="MODEL1",
    d=512,
    d_nope=448,
    d_rope=64,
    tile=64,
    fp8_max=448.0,
    min_scale_amax=1e-4,
)

assert MODEL1.d == MODEL1.d_nope + MODEL1.d_rope
assert MODEL1.data_bytes_per_token == 576 and MODEL1.bytes_per_token == 584

LAYOUTS = {MODEL1.bytes_per_token: MODEL1}  # bytes per token -> layout; a second format registers here


def layout_of(cache) -> CacheLayout:
    """The layout a cache tensor is in, from its bytes per token (the last dimension, in bytes).

    Kernels take their layout constants from here, so the layout travels with the cache: callers of
    the launchers never name one. ValueError, naming ``cache``, for a width no layout has.
    """
    width = cache.shape[-1] * cache.element_size()
    if width not in LAYOUTS:
        raise ValueError(f"cache: {width} bytes per token matches no known layout "
                         f"({', '.join(f'{n} B: {l.name}' for n, l in LAYOUTS.items())})")
    return LAYOUTS[width]
