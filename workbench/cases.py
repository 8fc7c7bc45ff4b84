"""Hostile decode problems: the builder and the one catalogue every check draws from.

``build_case`` makes a synthetic decode problem out of the codec (:mod:`workbench.codec`): shuffled page
tables, orphan pages, wild tile magnitudes, -1 and out-of-range indices, all-invalid queries, topk_length
of 0 and past topk, sinks of +inf/-inf/finite, an extra KV scope, NaN in pages nothing selects.

``CATALOGUE`` names the hostile cases once. The interpreter tests (``tests/test_kernels.py``,
``tests/test_reference.py``, ``tests/test_cache.py``), the GPU checks (:mod:`workbench.gpu_check`, also
``pytest -m gpu``) and notebook 02 all take their cases from it, by id; the id is the pytest id and the
``case`` label of the correctness tables. Entries are tiny, so the CPU suite stays fast; an entry's
``gpu_scale`` is the larger version the GPU checks run as well (its label is ``<id>@<overrides>``). An entry
with ``gpu_only`` set is one the interpreter cannot check, and says why.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch

from .codec import page_bytes_view, positions_to_indices, quantize_kv, to_device, valid_index_mask
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

    cache = quantize_kv(kv_bf16, layout)
    if nan_unselected:
        live = indices.long()[valid_index_mask(indices, n_total, topk_length)]
        selected_pages = torch.zeros(num_blocks, dtype=torch.bool)
        selected_pages[live // block_size] = True
        page_bytes_view(cache)[~selected_pages] = 0xFF  # fp8 NaN, bf16 NaN, scale byte 255 (inf)
    return DecodeScope(kv_bf16.to(device), to_device(cache, device, layout),
                       block_table.to(device), indices.to(device),
                       None if topk_length is None else topk_length.to(device))


def build_case(*, batch: int = 2, s_q: int = 1, heads: int = 16, topk: int = 64, seq_len: int | None = None,
               block_size: int = 64, sink: bool | str = False, topk_length: bool = False,
               invalid_frac: float = 0.1, all_invalid_queries: int = 0, nan_unselected: bool = False,
               extra_topk: int = 0, extra_block_size: int = 64, extra_seq_len: int | None = None,
               extra_topk_length: bool = False, kv_decades: tuple[float, float] = (-3.0, 2.0),
               sm_scale: float | None = None, orphan_pages: int | None = None,
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
    if case_id not in _BY_ID:
        raise ValueError(f"case_id: expected one of {list(_BY_ID)}, got {case_id!r}")
    return _BY_ID[case_id]


def catalogue(*, interpretable: bool | None = None) -> tuple[HostileCase, ...]:
    """The entries; ``interpretable=True`` only those the interpreter can check, False only the GPU-only ones."""
    return tuple(e for e in CATALOGUE if interpretable is None or e.interpretable == interpretable)


def gpu_cases() -> tuple[HostileCase, ...]:
    """What the GPU checks run: every entry as it is, then every entry's scaled version."""
    return CATALOGUE + tuple(s for s in (e.scaled() for e in CATALOGUE) if s is not None)
