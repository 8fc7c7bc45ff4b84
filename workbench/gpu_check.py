"""GPU correctness checks, one table: golden cases, a random grid, NaN in unselected pages,
CUDA-graph replay vs eager (bit for bit), run-to-run determinism, and a small case for
compute-sanitizer. Run with ``python -m workbench check --out DIR``.
"""
from __future__ import annotations

import itertools

import torch

from .cache import build_case
from .decode import sparse_mla_decode, warmup
from .golden import golden_expected, golden_kwargs, golden_names, load_golden
from .metrics import compare
from .provenance import provenance
from .reference import sparse_mla_decode_reference

from . import registry


def checked_impls() -> tuple[str, ...]:
    """Every registered kernel that decodes (the reference is what they are checked against)."""
    return registry.names("split", "fused")


def fixed_config(impl: str) -> dict:
    return registry.get(impl).check_configs[0]


def grid_configs(impl: str) -> tuple:
    """The random grid cycles through these: more configs covered, far fewer compiles than autotuning."""
    return registry.get(impl).check_configs[1:] or registry.get(impl).check_configs


def random_grid():
    """Hostile shapes beyond what the interpreter can afford."""
    specs = []
    for heads, s_q, topk, bs in itertools.product((1, 5, 20, 64, 128), (1, 3), (37, 2048), (2, 61, 256)):
        if (heads + s_q + topk + bs) % 3:  # a third of the product keeps the run short
            continue
        specs.append(dict(batch=4, heads=heads, s_q=s_q, topk=topk, block_size=bs, sink="mixed" if heads > 2 else True,
                          topk_length=topk > 100, invalid_frac=0.2, all_invalid_queries=1, sm_scale=0.05,
                          kv_decades=(-1.0, 1.0)))
    specs.append(dict(batch=3, heads=64, s_q=1, topk=128, block_size=256, extra_topk=512, extra_block_size=64,
                      sink=True, topk_length=True, extra_topk_length=True, kv_decades=(-1.0, 1.0)))
    specs.append(dict(batch=2, heads=16, s_q=2, topk=1, block_size=61, extra_topk=37, extra_block_size=2))
    return specs


def _row(check, case, impl, m=None, **extra):
    r = dict(check=check, case=case, impl=impl)
    if m is not None:
        r.update({k: m[k] for k in ("out_rel_norm", "out_cos_dist", "out_elem_ratio", "lse_ratio", "passed")})
    r.update(extra)
    return r


def _label(spec):
    return "-".join(f"{k}{v}" for k, v in spec.items() if k in ("heads", "s_q", "topk", "block_size", "extra_topk"))


def run_checks(device="cuda", progress=True) -> list[dict]:
    from tqdm.auto import tqdm
    rows = []
    for name in tqdm(golden_names(), desc="golden", disable=not progress):
        g = load_golden(name)
        kw = golden_kwargs(g, device)
        exp = golden_expected(g)
        for impl in checked_impls():
            out, lse = sparse_mla_decode(**kw, impl=impl)
            rows.append(_row("golden_vs_flashmla", name, impl, compare(out.float(), lse, *exp)))
    for i, spec in enumerate(tqdm(random_grid(), desc="random grid", disable=not progress)):
        for nan in (False, True):
            case = build_case(**spec, nan_unselected=nan, device=device, seed=len(rows))
            ref = sparse_mla_decode_reference(**case.kwargs())
            for impl in checked_impls():
                cfg = grid_configs(impl)[i % len(grid_configs(impl))]
                out, lse = sparse_mla_decode(**case.kwargs(), impl=impl, config=cfg)
                m = compare(out.float(), lse, *ref)
                rows.append(_row("nan_unselected" if nan else "random_vs_reference", _label(spec), impl, m,
                                 finite=bool(torch.isfinite(out).all()), config=str(cfg)))
    case = build_case(batch=8, heads=64, topk=512, block_size=64, sink=True, extra_topk=64, device=device,
                      kv_decades=(-1.0, 1.0))
    for impl in checked_impls():
        a = sparse_mla_decode(**case.kwargs(), impl=impl)
        b = sparse_mla_decode(**case.kwargs(), impl=impl)
        same = torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        rows.append(_row("run_to_run_bitwise", "b8-h64-k512+x64", impl, passed=same))
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
            rows.append(_row("cuda_graph_vs_eager_bitwise", f"b8-h64-k512+x64 {label}", impl, passed=same))
    prov = provenance()
    return [dict(r, **prov) for r in rows]


def sanitizer_case(impl: str, device="cuda") -> None:
    """A small hostile case with a fixed config, for compute-sanitizer (no autotuning under it)."""
    case = build_case(batch=2, heads=20, s_q=2, topk=70, block_size=61, sink="mixed", topk_length=True,
                      extra_topk=20, extra_block_size=2, invalid_frac=0.3, all_invalid_queries=1,
                      nan_unselected=True, device=device)
    out, lse = sparse_mla_decode(**case.kwargs(), impl=impl, config=fixed_config(impl))
    ref = sparse_mla_decode_reference(**case.kwargs())
    torch.cuda.synchronize()
    m = compare(out.float(), lse, *ref)
    print(f"sanitizer case {impl}: passed={m['passed']} rel={m['out_rel_norm']:.2e}")
    if not m["passed"]:
        raise SystemExit(1)
