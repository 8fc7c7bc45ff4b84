"""The 448 -> 512 padding, as live checks: the compile error, exactness, the pad scale group, costs."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .codec import page_bytes_view, quantize_kv
from .layout import MODEL1


@triton.jit
def _arange_nope(out_ptr, N: tl.constexpr):
    d = tl.arange(0, N)
    tl.store(out_ptr + d, d)


def arange_error(n: int = MODEL1.d_nope, arch: int = 90) -> str:
    """Compile ``tl.arange(0, n)`` for sm_<arch> (no GPU needed); return the compiler's error, or '' if it compiles."""
    from ..kernels.common import INTERPRET
    if INTERPRET:  # interpreted functions cannot be compiled: ask a process without the interpreter
        from ..lab.resources import without_interpreter
        return without_interpreter("from workbench.format.padding import arange_error; "
                                   f"print(arange_error({n}, {arch}))")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    src = ASTSource(_arange_nope, {"out_ptr": "*i32", "N": "constexpr"}, {"N": n})
    try:
        triton.compile(src, target=GPUTarget("cuda", arch, 32))
    except Exception as e:  # noqa: BLE001 - the message is the result
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return f"{type(e).__name__}: " + next((ln for ln in lines if "power of 2" in ln), lines[-1])
    return ""


def padded_dot_check(q: torch.Tensor, k: torch.Tensor) -> dict:
    """Scores q.k^T over the 448 nope columns vs the same vectors zero-padded to 512.

    q [h, 448], k [t, 448] (bf16). In float64 every bf16 product is exact and the
    appended terms are exact zeros, so the two must agree bit for bit.
    """
    pad = MODEL1.nope_pad - MODEL1.d_nope
    qp = torch.nn.functional.pad(q, (0, pad))
    kp = torch.nn.functional.pad(k, (0, pad))
    a64 = q.double() @ k.double().T
    b64 = qp.double() @ kp.double().T
    a32 = q.float() @ k.float().T
    b32 = qp.float() @ kp.float().T
    return dict(float64_bitwise_equal=bool(torch.equal(a64, b64)), float32_max_abs_diff=(a32 - b32).abs().max().item(),
                float32_bitwise_equal=bool(torch.equal(a32, b32)))


def pad_column_groups() -> torch.Tensor:
    """Scale group (byte slot) of each padded nope column d in [448, 512): d // 64."""
    d = torch.arange(MODEL1.d_nope, MODEL1.nope_pad)
    return d // MODEL1.tile


def poison_pad_bytes(cache: torch.Tensor, value: int = 0xFF) -> torch.Tensor:
    """A copy of the cache with every token's pad scale byte set to ``value`` (0xFF: a scale of 2**128 = inf)."""
    nb, bs = cache.shape[:2]
    flat = page_bytes_view(cache).clone()
    scales = flat[:, MODEL1.scale_offset(bs): bs * MODEL1.bytes_per_token].view(nb, bs, MODEL1.scale_bytes_per_token)
    scales[..., MODEL1.pad_scale_group] = value
    return flat.as_strided(cache.shape, cache.stride())


def padding_costs(block_t: int = 64) -> list[dict]:
    """MMA work and shared memory of the padded tile against exact alternatives."""
    L = MODEL1
    rows = []
    for name, widths in (("pad 448 -> 512 (one dot)", [L.nope_pad]), ("256 + 128 + 64 (three dots)", [256, 128, 64]),
                         ("7 x 64 (seven dots)", [L.tile] * L.num_tiles)):
        cols = sum(widths)
        rows.append(dict(layout=name, dots_per_qk=len(widths), k_columns=cols,
                         wasted_mma_fraction=(cols - L.d_nope) / cols,
                         k_tile_smem_bytes=cols * block_t * 2,
                         note="one power-of-two arange" if len(widths) == 1 else "every width a power of two"))
    return rows


def demo_cache(block_size: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return quantize_kv((torch.randn(1, block_size, MODEL1.d, generator=g) * 3).to(torch.bfloat16))


def page_byte_map(block_size: int = 4) -> list[dict]:
    """Byte ranges of one page: per-token nope / rope, per-token scale bytes and pad, page padding."""
    L = MODEL1
    spans = []
    for o in range(block_size):
        base = o * L.data_bytes_per_token
        spans += [dict(kind="nope fp8", token=o, start=base, end=base + L.d_nope),
                  dict(kind="rope bf16", token=o, start=base + L.d_nope, end=base + L.data_bytes_per_token)]
    for o in range(block_size):
        base = L.scale_offset(block_size) + o * L.scale_bytes_per_token
        spans += [dict(kind="scale UE8M0", token=o, start=base, end=base + L.num_tiles),
                  dict(kind="pad byte", token=o, start=base + L.num_tiles, end=base + L.scale_bytes_per_token)]
    used = block_size * L.bytes_per_token
    if L.page_bytes(block_size) > used:
        spans.append(dict(kind="page padding", token=-1, start=used, end=L.page_bytes(block_size)))
    return spans
