"""GPU correctness checks, one table: golden cases, the hostile catalogue (NaN in unselected pages among
it), CUDA-graph replay vs eager (bit for bit), run-to-run determinism, and a small case for
compute-sanitizer. Run with ``python -m workbench check --out DIR``, or as tests on the GPU with
``TRITON_INTERPRET=0 pytest -m gpu`` (``tests/test_gpu_checks.py``), which writes the same table.

The cases come from :mod:`workbench.format.cases`: every catalogue entry as it is (the very case the interpreter
tests run, GPU-only ones included) and then its ``gpu_scale`` version; the table's ``case`` column is the
entry's id (``<id>@<overrides>`` for a scaled one).

On each catalogue case FlashMLA's SM90 decode runs once (where it can: an sm_90 GPU, ``flash_mla`` importable,
at most 128 heads, padded to 64 or 128 as servers do; see :func:`run_flashmla`), and every row of that case gets
its columns: ``flashmla_finite``, ``flashmla_out_rel_norm`` and ``flashmla_passed`` (FlashMLA against the fp32
reference, the same ``compare``), ``flashmla_reason`` (why it did not run; empty when it did), and the kernel's
``finite_where_flashmla_is`` (its out and lse are finite wherever FlashMLA's are, element by element) with
``nonfinite_where_flashmla_finite`` (how many elements are not). Where FlashMLA did not run they are NaN.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from .format import cases as catalogue
from . import registry
from .decode import sparse_mla_decode, warmup
from .format.golden import golden_expected, golden_kwargs, golden_names, load_golden
from .metrics import compare
from .report.provenance import provenance, write_meta
from .format.reference import sparse_mla_decode_reference

# the table's checks, in its row order
CHECKS = ("golden_vs_flashmla", "random_vs_reference", "nan_unselected", "run_to_run_bitwise",
          "cuda_graph_vs_eager_bitwise")
METRICS = ("out_rel_norm", "out_cos_dist", "out_elem_ratio", "lse_ratio", "passed")
TABLE_NAME = "correctness_h200.csv"  # what `python -m workbench check` names it unless --name


def checked_impls() -> tuple[str, ...]:
    """Every registered kernel that decodes (the reference is what they are checked against)."""
    return registry.names("split", "fused")


def case_impls() -> tuple[str, ...]:
    """What the golden and catalogue checks run: every kernel, and "auto" (the default, whichever kernel it picks
    for the case, in its own config)."""
    return checked_impls() + (registry.AUTO,)


def fixed_config(impl: str) -> dict:
    return registry.get(impl).check_configs[0]


def grid_configs(impl: str) -> tuple:
    """The catalogue cases cycle through these: more configs covered, far fewer compiles than autotuning."""
    return registry.get(impl).check_configs[1:] or registry.get(impl).check_configs


def config_label(config: dict | None) -> str:
    """A config as the tables write it (``BLOCK_H=16,BLOCK_T=32,num_warps=4``; ``results.parse_config`` reads it)."""
    return ",".join(f"{k}={v}" for k, v in (config or {}).items())


def gpu_cases() -> tuple[catalogue.HostileCase, ...]:
    """The catalogue cases the GPU checks run: every entry, then every entry's scaled version."""
    return catalogue.gpu_cases()


def case_check(entry: catalogue.HostileCase) -> str:
    """The check a catalogue case's rows are filed under."""
    return "nan_unselected" if entry.spec.get("nan_unselected") else "random_vs_reference"


def case_config(impl: str, position: int) -> dict | None:
    """The config ``impl`` runs the ``position``-th GPU case with (None for "auto": its own)."""
    if impl == registry.AUTO:
        return None
    configs = grid_configs(impl)
    return configs[position % len(configs)]


def _row(check, case, impl, m=None, **extra):
    r = dict(check=check, case=case, impl=impl)
    if m is not None:
        r.update({k: m[k] for k in METRICS})
    r.update(extra)
    return r


def golden_rows(name: str, impls=None, device="cuda", g: dict | None = None) -> list[dict]:
    """Each kernel on one FlashMLA golden case (``g``, loaded when not given) against FlashMLA's own output."""
    g = g if g is not None else load_golden(name)
    kw = golden_kwargs(g, device)
    exp = golden_expected(g)
    rows = []
    for impl in impls or case_impls():
        out, lse = sparse_mla_decode(**kw, impl=impl)
        rows.append(_row("golden_vs_flashmla", name, impl, compare(out.float(), lse, *exp)))
    return rows


def build_with_reference(entry: catalogue.HostileCase, device="cuda"):
    """(case, (ref_out, ref_lse)) for one catalogue case on ``device``."""
    case = entry.build(device=device)
    return case, sparse_mla_decode_reference(**case.kwargs())


# ------------------------------------------------------------------------------------------------------------
# FlashMLA on the catalogue cases: is the kernel finite wherever FlashMLA is? (issue 22)
# ------------------------------------------------------------------------------------------------------------
FLASHMLA_CASE_COLUMNS = ("flashmla_finite", "flashmla_out_rel_norm", "flashmla_passed", "flashmla_reason")
FLASHMLA_ROW_COLUMNS = ("finite_where_flashmla_is", "nonfinite_where_flashmla_finite")


def flashmla_kwargs(case: catalogue.DecodeCase) -> dict:
    """``case.kwargs()`` as FlashMLA can be given them, meaning the same: FlashMLA treats only -1 as invalid and
    would read through any other index outside the cache, and says nothing of a topk_length past topk, so every
    index outside [0, num_tokens) becomes -1 and topk_lengths are clamped to [0, topk] (the workbench's rules give
    both the same meaning)."""
    kw = case.kwargs()
    for prefix, scope in (("", case.main), ("extra_", case.extra)):
        if scope is None:
            continue
        n = scope.cache.shape[0] * scope.block_size
        idx = kw[f"{prefix}indices"]
        kw[f"{prefix}indices"] = torch.where((idx >= 0) & (idx < n), idx, -1).to(torch.int32).contiguous()
        length = kw.get(f"{prefix}topk_length")
        if length is not None:
            kw[f"{prefix}topk_length"] = length.clamp(0, idx.shape[-1]).to(torch.int32).contiguous()
    return kw


def nonfinite_where_finite(out, lse, their_out, their_lse) -> int:
    """How many elements of (out, lse) are not finite where (their_out, their_lse) are: out element by element,
    lse per (query, head). Where their lse is +inf (a query with no valid token) ours may be +inf too."""
    bad_out = torch.isfinite(their_out) & ~torch.isfinite(out)
    bad_lse = (torch.isfinite(their_lse) & ~torch.isfinite(lse)) | \
        (torch.isposinf(their_lse) & ~(torch.isfinite(lse) | torch.isposinf(lse)))
    return int(bad_out.sum()) + int(bad_lse.sum())


def finite_where(out, lse, their_out, their_lse) -> bool:
    """True when (out, lse) are finite wherever (their_out, their_lse) are (see ``nonfinite_where_finite``)."""
    return nonfinite_where_finite(out, lse, their_out, their_lse) == 0


@dataclass
class FlashMLARun:
    """FlashMLA's (out, lse) on one case, or why there is none (``reason``)."""

    out: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    reason: str = ""

    @property
    def ran(self) -> bool:
        return self.out is not None

    def case_columns(self, ref) -> dict:
        """FlashMLA against the fp32 reference ``ref`` (out, lse); NaN where it did not run."""
        if not self.ran:
            return dict(flashmla_finite=math.nan, flashmla_out_rel_norm=math.nan, flashmla_passed=math.nan,
                        flashmla_reason=self.reason)
        m = compare(self.out.float(), self.lse, *ref)
        return dict(flashmla_finite=m["finite"], flashmla_out_rel_norm=m["out_rel_norm"],
                    flashmla_passed=m["passed"], flashmla_reason="")

    def row_columns(self, out, lse) -> dict:
        """A kernel's (out, lse) against FlashMLA's finiteness, element by element; NaN where it did not run."""
        if not self.ran:
            return dict(finite_where_flashmla_is=math.nan, nonfinite_where_flashmla_finite=math.nan)
        n = nonfinite_where_finite(out, lse, self.out.to(out.device), self.lse.to(lse.device))
        return dict(finite_where_flashmla_is=n == 0, nonfinite_where_flashmla_finite=n)


def _flashmla_call(kw: dict):
    """FlashMLA's decode through the bench's provider (the one call; fewer than 64 heads padded to 64)."""
    from .bench.providers import FlashMLAProvider
    return FlashMLAProvider().prepare(kw)()


def run_flashmla(case: catalogue.DecodeCase, call=None) -> FlashMLARun:
    """FlashMLA on a case (``call(kwargs) -> (out, lse)``; default the bench's FlashMLA provider), with indices
    and topk_lengths as ``flashmla_kwargs`` gives them. Any failure (no GPU, not importable, more than 128 heads,
    an error inside) is recorded as the reason, never raised, so one case cannot stop the run."""
    try:
        if case.q.shape[2] > 128:
            return FlashMLARun(reason=f"FlashMLA runs 64 or 128 heads (fewer are padded), not {case.q.shape[2]}")
        out, lse = (call or _flashmla_call)(flashmla_kwargs(case))
        if out.is_cuda:
            torch.cuda.synchronize(out.device)  # an error inside FlashMLA surfaces here, not in the next kernel
        b, s_q, h, _ = case.q.shape
        if tuple(out.shape) != tuple(case.q.shape) or tuple(lse.shape) != (b, h, s_q):
            return FlashMLARun(reason=f"FlashMLA returned out {tuple(out.shape)}, lse {tuple(lse.shape)} for q "
                                      f"{tuple(case.q.shape)}")
        return FlashMLARun(out=out, lse=lse)
    except Exception as e:  # noqa: BLE001 - recorded as the row's reason
        return FlashMLARun(reason=f"{type(e).__name__}: {e}".strip()[:300])


def case_rows(entry: catalogue.HostileCase, position: int, impls=None, device="cuda", built=None,
              flashmla: FlashMLARun | None = None) -> list[dict]:
    """Each kernel on one catalogue case (with the config its position picks) against the fp32 reference, with
    FlashMLA's columns (``flashmla``: run here, once for all ``impls``, when not given)."""
    case, ref = built or build_with_reference(entry, device)
    flashmla = flashmla if flashmla is not None else run_flashmla(case)
    fm = flashmla.case_columns(ref)
    rows = []
    for impl in impls or case_impls():
        cfg = case_config(impl, position)
        out, lse = sparse_mla_decode(**case.kwargs(), impl=impl, config=cfg)
        rows.append(_row(case_check(entry), entry.id, impl, compare(out.float(), lse, *ref),
                         finite=bool(torch.isfinite(out).all()), config=config_label(cfg), **fm,
                         **flashmla.row_columns(out, lse)))
    return rows


def bitwise_rows(impl: str, device="cuda", case=None) -> list[dict]:
    """Run to run, and CUDA-graph replay vs eager (autotuned and fixed config), bit for bit, on the BITWISE case."""
    entry = catalogue.get(catalogue.BITWISE)
    case = case or entry.build(device=device)
    a = sparse_mla_decode(**case.kwargs(), impl=impl)
    b = sparse_mla_decode(**case.kwargs(), impl=impl)
    same = torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    rows = [_row("run_to_run_bitwise", entry.id, impl, passed=same)]
    for label, config in (("autotuned", None), ("fixed_config", fixed_config(impl))):
        if config is None:
            warmup([case], impl=impl)
        eager = sparse_mla_decode(**case.kwargs(), impl=impl, config=config)
        graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            sparse_mla_decode(**case.kwargs(), impl=impl, config=config)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(graph):
            captured = sparse_mla_decode(**case.kwargs(), impl=impl, config=config)
        captured[0].fill_(float("nan"))  # poison: replay must rewrite every element
        graph.replay()
        torch.cuda.synchronize()
        same = torch.equal(eager[0], captured[0]) and torch.equal(eager[1], captured[1])
        rows.append(_row("cuda_graph_vs_eager_bitwise", f"{entry.id} {label}", impl, passed=same,
                         config=config_label(config)))
    return rows


def table_rows(rows: list[dict], prov: dict | None = None) -> list[dict]:
    """The table: rows in check order (then as run), each with the run's provenance columns (``prov``: taken now
    when not given)."""
    prov = provenance() if prov is None else prov
    ordered = sorted(rows, key=lambda r: CHECKS.index(r["check"]) if r["check"] in CHECKS else len(CHECKS))
    return [dict(r, **prov) for r in ordered]


def write_table(rows: list[dict], out_dir: str | Path, name: str = TABLE_NAME) -> Path:
    """Write the table (``table_rows``) as ``out_dir/name`` with its ``.meta.json``, as ``check`` does; returns the CSV."""
    import pandas as pd
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv = out_dir / name
    prov = provenance()  # once: the rows' columns and the .meta.json say the same
    pd.DataFrame(table_rows(rows, prov)).to_csv(csv, index=False)
    write_meta(csv, prov)
    return csv


def run_checks(device="cuda", progress=True, impls=None, on_rows=None, shard: tuple[int, int] | None = None
               ) -> list[dict]:
    """Every check's rows, as run (``write_table`` orders them and adds the provenance); ``impls``: only these
    (default: ``case_impls()``, every kernel and "auto"); ``on_rows(rows)``: called with the rows so far after
    each case, so a run cut short (a device call's time limit) still leaves what it checked.

    ``shard=(i, n)``: only the i-th of n interleaved parts of the work (the golden cases, the catalogue's cases,
    then each kernel's bitwise case, dealt out in that order), so that n processes check one kernel at once; the
    n parts' rows together are the whole run's."""
    from tqdm.auto import tqdm
    i_shard, n_shards = check_shard(shard)
    # every unit of work in run order; shard i takes every n-th of them from the i-th on
    checked = checked_impls()
    units = [*(("golden", n) for n in golden_names()), *(("case", c) for c in enumerate(gpu_cases())),
             *(("bitwise", i) for i in (impls or checked) if i in checked)]
    mine = units[i_shard::n_shards]

    def of(kind):
        return [u for k, u in mine if k == kind]
    rows = []

    def add(new):
        rows.extend(new)
        if on_rows is not None:
            on_rows(rows)
    for name in tqdm(of("golden"), desc="golden", disable=not progress):
        add(golden_rows(name, impls=impls, device=device))
    for i, entry in tqdm(of("case"), desc="catalogue", disable=not progress):
        add(case_rows(entry, i, impls=impls, device=device))
    if bitwise := of("bitwise"):
        bitwise_case = catalogue.get(catalogue.BITWISE).build(device=device)
        for impl in bitwise:
            add(bitwise_rows(impl, device, bitwise_case))
    return rows


def check_shard(shard) -> tuple[int, int]:
    """``shard`` as (i, n) with 0 <= i < n (None: the whole run, (0, 1)); ValueError otherwise."""
    if shard is None:
        return 0, 1
    i, n = (int(v) for v in shard)
    if not 0 <= i < n:
        raise ValueError(f"shard: expected (i, n) with 0 <= i < n; got {tuple(shard)}")
    return i, n


def partial_writer(out_dir: str | Path, name: str = TABLE_NAME):
    """An ``on_rows`` for :func:`run_checks`: the rows so far as ``<name stem>.partial.csv`` in ``out_dir``
    (provenance columns included), rewritten after each case; :func:`write_table` writes the whole table at the
    end, and the caller removes the partial one then."""
    import pandas as pd
    out_dir = Path(out_dir)
    path = out_dir / (Path(name).stem + ".partial.csv")
    prov = provenance()

    def write(rows):
        out_dir.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(table_rows(rows, prov)).to_csv(path, index=False)
    write.path = path
    return write


def sanitizer_case(impl: str, device="cuda", case_id: str = catalogue.SANITIZER, pdl: bool | None = None) -> None:
    """A small hostile case (the catalogue's SANITIZER entry, or ``case_id``) with a fixed config, for
    compute-sanitizer; ``pdl`` False/True launches the combine as an ordinary/programmatic dependent launch
    (None: decode's rule), to tell a report that comes from the launches' overlap from one inside a kernel."""
    run_sanitizer_case(impl, catalogue.get(case_id), device, pdl)


def run_sanitizer_case(impl: str, entry: catalogue.HostileCase, device="cuda", pdl: bool | None = None) -> None:
    """:func:`sanitizer_case` of any hostile case, e.g. an entry at a scale of its own (scripts/memcheck_pf2.py):
    one call with ``impl``'s fixed config, checked against the fp32 reference (SystemExit(1) when it misses)."""
    from .decode import combine_launch
    case, ref = build_with_reference(entry, device)
    with contextlib.nullcontext() if pdl is None else combine_launch(pdl):
        out, lse = sparse_mla_decode(**case.kwargs(), impl=impl, config=fixed_config(impl))
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    m = compare(out.float(), lse, *ref)
    print(f"sanitizer case {impl} ({entry.id}, combine pdl={'rule' if pdl is None else pdl}): "
          f"passed={m['passed']} rel={m['out_rel_norm']:.2e}")
    if not m["passed"]:
        raise SystemExit(1)
