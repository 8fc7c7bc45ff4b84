"""Is the gather floor a limit of the load path or of the memory? Time the floor probes on the same number of
tokens a call, chosen four ways, each in the bench's graph replay over 8 rotations of index sets:

- ``random``: the bench's own indices (uniform over the 2^20-token pool: ~612 MB, 12x the L2), every row a
  scattered 576-byte read plus an 8-byte scale read elsewhere in its page;
- ``sorted``: the same indices sorted within each query (the same bytes, in address order a query);
- ``contiguous``: each query reads a run of ``topk`` consecutive tokens from a random page-aligned start;
- ``l2``: every query of the call reads the same ``topk`` random tokens (1.2 MB at topk 2048), so after the first
  touch the call is served from L2: the probe's own ceiling when DRAM is out of the way.

``--split-tokens N`` launches each probe on its own grid as well: ceil(topk / N) programs a query, N tokens each
(0: the decode's split plan, as the bench runs the probes; for "gather_fine", its own capped grid). A provider
``name@{json}`` runs one forced config (the ``config`` column holds that JSON). A probe that fails to build or run
is a row with status "error" and its reason, not the end of the run.

Counted bytes are the bench's (584 a token a query), so GB/s compares directly with the published floor rows.
One CSV, long format, one row a (shape, pattern, provider), with the median, p20 and p80 and the provenance.

    python scripts/floor_patterns.py --csv $OUT/floor_patterns.csv
"""
import argparse
import json
import sys

import torch

from workbench.accounting import call_valid_tokens, decode_cost
from workbench.bench import BenchShape, InputPool, rows_frame
from workbench.bench.providers import FINE_PROBES, ProbeProvider, make_provider, tuned_columns
from workbench.bench.timing import graph_samples, measure_ceilings, summarize
from workbench.report.provenance import provenance

PATTERNS = ("random", "sorted", "contiguous", "l2")


def pattern_indices(ix: torch.Tensor, pattern: str, *, pool_tokens: int, block_size: int,
                    gen: torch.Generator) -> torch.Tensor:
    """[b, s_q, topk] int32 indices for ``pattern``, built from the bench's random ``ix`` of the same shape."""
    b, s_q, topk = ix.shape
    if pattern == "random":
        return ix
    if pattern == "sorted":
        return ix.sort(dim=-1).values.contiguous()
    if pattern == "contiguous":
        pages = (pool_tokens - topk) // block_size
        start = torch.randint(0, pages, (b, s_q, 1), device=ix.device, generator=gen, dtype=torch.int32) * block_size
        return (start + torch.arange(topk, device=ix.device, dtype=torch.int32)).contiguous()
    if pattern == "l2":
        return ix[:1, :1].expand(b, s_q, topk).contiguous()
    raise ValueError(f"pattern: expected one of {PATTERNS}; got {pattern!r}")


def probe_provider(name: str, split_tokens: int):
    """Probe ``name`` through the bench's provider: the decode's split plan (gather_fine: its capped grid and pinned
    config) when split_tokens is 0, else ceil(topk / split_tokens) programs a query of ``split_tokens`` tokens
    each."""
    return (ProbeProvider(FINE_PROBES.get(name, name), tokens_per_program=split_tokens) if split_tokens
            else make_provider(name))


def check_providers(p: argparse.ArgumentParser, items) -> None:
    """Each ``name[@json]`` names a probe (registered, or a FINE_PROBES name) and valid JSON, else an argument error
    (exit 2, one line) before anything runs."""
    from workbench import registry
    known = registry.names("probe") + tuple(FINE_PROBES)
    for item in items:
        name, _, cfg = item.partition("@")
        if name not in known:
            p.error(f"provider {name!r}: expected one of {known}")
        try:
            json.loads(cfg) if cfg else None
        except json.JSONDecodeError as e:
            p.error(f"provider {item!r}: its config is not JSON ({e})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", default=[], help="batch,heads,topk (repeatable; default b64 h16 and "
                                                                 "b64 h128 at topk 2048)")
    p.add_argument("--providers", nargs="+", default=["gather_async", "gather"])
    p.add_argument("--split-tokens", nargs="+", type=int, default=[0],
                   help="tokens a program (0: the decode's split plan)")
    p.add_argument("--patterns", nargs="+", default=list(PATTERNS), choices=PATTERNS)
    p.add_argument("--csv", required=True)
    a = p.parse_args(argv)
    check_providers(p, a.providers)
    if not torch.cuda.is_available():
        print("floor_patterns: needs a CUDA GPU", file=sys.stderr)
        return 2
    shapes = [BenchShape(*map(int, s.split(","))) for s in a.shape] or [BenchShape(64, 16, 2048),
                                                                         BenchShape(64, 128, 2048)]
    pool, prov, ceilings = InputPool("cuda"), provenance(), measure_ceilings("cuda")
    gen = torch.Generator(device="cuda").manual_seed(7)
    rows = []
    for shape in shapes:
        base = pool.inputs(shape)
        for pattern in a.patterns:
            kws = [dict(kw, indices=pattern_indices(kw["indices"], pattern, pool_tokens=pool.pool_tokens,
                                                     block_size=shape.block_size, gen=gen)) for kw in base]
            valid = call_valid_tokens(kws[0])
            cost = decode_cost(batch=shape.batch, s_q=shape.s_q, heads=shape.heads, valid_tokens=valid)
            for item, split_tokens in ((i, n) for n in a.split_tokens for i in a.providers):
                name, _, cfg = item.partition("@")
                row = dict(sweep="floor_patterns", provider=name, kernel=name, mode="graph", pattern=pattern,
                           split_tokens=split_tokens, config=cfg or None, batch=shape.batch, s_q=shape.s_q,
                           heads=shape.heads, topk=shape.topk, block_size=shape.block_size, valid_tokens=valid,
                           bytes=cost.bytes, **ceilings, **prov)
                try:
                    provider = probe_provider(name, split_tokens)
                    fns = [provider.prepare(kw, json.loads(cfg) if cfg else None) for kw in kws]
                    med, p20, p80 = summarize(graph_samples(fns))
                    if not cfg:  # the config it ran: pinned, or the autotuner's pick (which varies)
                        row.update(tuned_columns(provider))
                except Exception as e:  # noqa: BLE001 - a probe that does not build or run is a row
                    rows.append(dict(row, status="error", reason=f"{type(e).__name__}: {e}"[:300]))
                    print(f"{shape.label:26s} {pattern:10s} {item:52s} error: {rows[-1]['reason']}", flush=True)
                    continue
                rows.append(dict(row, status="ok", median_us=med, p20_us=p20, p80_us=p80,
                                 gbps=cost.bytes / (med * 1e-6) / 1e9,
                                 frac_hbm=cost.bytes / (med * 1e-6) / 1e9 / ceilings["hbm_copy_gbps"]))
                r = rows[-1]
                print(f"{shape.label:26s} {pattern:10s} {item:52s} split={split_tokens:<4d} {med:7.2f} us "
                      f"({p20:.2f}-{p80:.2f}) {r['gbps']:5.0f} GB/s ({r['frac_hbm']:.2f} of copy)", flush=True)
    df = rows_frame(rows)  # the bench's columns, then the pattern
    df.insert(df.columns.get_loc("mode") + 1, "pattern", [r["pattern"] for r in rows])
    df.insert(df.columns.get_loc("pattern") + 1, "split_tokens", [r["split_tokens"] for r in rows])
    df.to_csv(a.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
