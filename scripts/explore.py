"""Exploratory timing on the GPU: named providers at the headline shapes (or --heads/--batch/--topk), graph replay,
each checked against the fp32 reference first, as the bench does; one line a row, and the rows as CSV with --csv.

For a quick A/B of a new rung before it goes into a published sweep (the published tables come from
``python -m workbench bench --sweep ...``): ``python scripts/explore.py wgmma_f16_2cta wgmma_ws gather``.
Configs: ``provider@{"BLOCK_H": 16, ...}`` (JSON) times one forced config. ``--ws-variant NAME:K=V[,K=V]``
registers, for this run only, a rung of the warp-specialised kernel with wgmma_ws's switches so changed (e.g.
``ws_nb2:NUM_BUFS=2``), to be named among the providers.
"""
import argparse
import json
import sys

from workbench.bench import HEADLINE, BenchShape, InputPool, bench_one, measure_ceilings, rows_frame
from workbench.report.provenance import provenance


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("providers", nargs="+")
    p.add_argument("--shape", action="append", default=[],
                   help="batch,heads,topk[,s_q,block_size,extra_topk,extra_block_size] (repeatable; default: the "
                        "headline shapes)")
    p.add_argument("--csv", default=None)
    p.add_argument("--ws-variant", action="append", default=[], metavar="NAME:K=V[,K=V]",
                   help="register a wgmma_ws rung with these switches changed (repeatable)")
    a = p.parse_args(argv)
    for v in a.ws_variant:
        register_ws_variant(p, v)
    shapes = [BenchShape(*map(int, s.split(","))) for s in a.shape] or list(HEADLINE)
    ceilings, pool, prov, cache = measure_ceilings("cuda"), InputPool("cuda"), provenance(), {}
    rows = []
    for shape in shapes:
        for item in a.providers:
            name, _, cfg = item.partition("@")
            try:
                got = bench_one(shape, name, ("graph",), pool=pool, ceilings=ceilings,
                                config=json.loads(cfg) if cfg else None, sweep="explore", prov=prov,
                                providers_cache=cache)
            except Exception as e:  # noqa: BLE001 - a rung that does not build or run is a row, not the end
                got = [dict(provider=name, status="error", reason=f"{type(e).__name__}: {e}"[:400])]
            for r in got:
                rows.append(r)
                print(f"{shape.label:32s} {item:40s} {r.get('status'):8s} {r.get('median_us') or float('nan'):8.2f} us "
                      f"({r.get('p20_us') or float('nan'):.2f}-{r.get('p80_us') or float('nan'):.2f}) "
                      f"check={r.get('check_passed')} rel={r.get('check_rel_err')} {r.get('reason') or ''}"[:240],
                      flush=True)
    if a.csv:
        rows_frame(rows).to_csv(a.csv, index=False)  # the bench's long-format columns
    return 0 if all(r.get("status") in ("ok", "skipped") for r in rows) else 1


def register_ws_variant(p: argparse.ArgumentParser, text: str) -> None:
    """NAME:K=V[,K=V] -> a registered rung: wgmma_ws's fixed switches with these changed (integers)."""
    from workbench import registry
    from workbench.kernels import catalog
    name, _, switches = text.partition(":")
    base = dict(registry.get("wgmma_ws").fixed_meta)
    try:
        changed = {k: int(v) for k, v in (kv.split("=") for kv in switches.split(","))}
    except ValueError:
        p.error(f"--ws-variant {text!r}: expected NAME:K=V[,K=V] with integer values")
    unknown = set(changed) - set(base)
    if name in registry.names():
        p.error(f"--ws-variant {text!r}: {name!r} is a registered kernel already")
    if not name or unknown:
        p.error(f"--ws-variant {text!r}: switches are {sorted(base)}"
                + (f", not {sorted(unknown)}" if unknown else ""))
    catalog._wgmma_ws(name, None, f"exploratory: wgmma_ws with {switches}", "exploratory", **{**base, **changed})


if __name__ == "__main__":
    sys.exit(main())
