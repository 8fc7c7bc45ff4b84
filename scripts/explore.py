"""Exploratory timing on the GPU: named providers at the headline shapes (or --heads/--batch/--topk), graph replay,
each checked against the fp32 reference first, as the bench does; one line a row, and the rows as CSV with --csv.

For a quick A/B of a new rung before it goes into a published sweep (the published tables come from
``python -m workbench bench --sweep ...``): ``python scripts/explore.py wgmma_f16_2cta wgmma_ws gather``.
Configs: ``provider@{"BLOCK_H": 16, ...}`` (JSON) times one forced config. ``--ws-variant NAME:K=V[,K=V]``
registers, for this run only, a rung of the warp-specialised kernel with wgmma_ws's switches so changed (e.g.
``ws_nb2:NUM_BUFS=2``), to be named among the providers. ``--spec-variant NAME:BASE:FIELD=V`` registers a copy of
kernel BASE with a boolean (V 0 or 1) or integer KernelSpec field so set (e.g.
``f16_2cta_ps:wgmma_f16_2cta:two_scopes=0``: the same kernel, a launch per KV scope, each scope's splits planned
apart as well: decode.spec_split_plans; ``h32t_p32:portable_ws_h32t:split_block_h=32``: its splits planned on
32-head programs), for a same-run A/B of a decode path; ``NAME:BASE:switches.KEY=V`` sets one of the kernel's
constexpr switches (an integer) instead, e.g. an A/B switch added to a kernel for one run (BASE may be a variant
named before it, to set two).
"""
import argparse
import inspect
import json
import sys

from workbench.bench import HEADLINE, BenchShape, InputPool, bench_one, measure_ceilings, rows_frame
from workbench.bench.providers import SINK
from workbench.report.provenance import provenance


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("providers", nargs="+")
    p.add_argument("--shape", action="append", default=[],
                   help="batch,heads,topk[,s_q,block_size,extra_topk,extra_block_size] (repeatable; default: the "
                        "headline shapes)")
    p.add_argument("--csv", default=None)
    p.add_argument("--sink", action="store_true",
                   help="every call also takes an attention sink, as DeepSeek-V4's engines pass one (per head, fp32, "
                        "standard normal, fixed per shape); each provider runs as '<provider>+sink' "
                        "(workbench.bench.providers.SinkProvider), and its rows are named so (a probe or launch floor "
                        "reads no sink: its row is an error)")
    p.add_argument("--ws-variant", action="append", default=[], metavar="NAME:K=V[,K=V]",
                   help="register a wgmma_ws rung with these switches changed (repeatable)")
    p.add_argument("--spec-variant", action="append", default=[], metavar="NAME:BASE:FIELD=V",
                   help="register kernel BASE again as NAME with a boolean or integer KernelSpec field changed, or "
                        "with FIELD switches.KEY one of its constexpr switches (repeatable; BASE may be a variant "
                        "named before)")
    a = p.parse_args(argv)
    for v in a.ws_variant:
        register_ws_variant(p, v)
    for v in a.spec_variant:
        register_spec_variant(p, v)
    shapes = [BenchShape(*map(int, s.split(","))) for s in a.shape] or list(HEADLINE)
    ceilings, pool, prov, cache = measure_ceilings("cuda"), InputPool("cuda"), provenance(), {}
    rows = []
    for shape in shapes:
        for item in a.providers:
            name, _, cfg = item.partition("@")
            name += SINK if a.sink else ""  # providers.SinkProvider: the pool gives its calls a sink
            try:
                got = bench_one(shape, name, ("graph",), pool=pool, ceilings=ceilings,
                                config=json.loads(cfg) if cfg else None, sweep="explore", prov=prov,
                                providers_cache=cache)
            except Exception as e:  # noqa: BLE001 - a rung that does not build or run is a row, not the end
                got = [dict(provider=name, status="error", reason=f"{type(e).__name__}: {e}"[:400])]
            ran = name + ("@" + cfg if cfg else "")
            for r in got:
                rows.append(r)
                print(f"{shape.label:32s} {ran:40s} {r.get('status'):8s} {r.get('median_us') or float('nan'):8.2f} us "
                      f"({r.get('p20_us') or float('nan'):.2f}-{r.get('p80_us') or float('nan'):.2f}) "
                      f"check={r.get('check_passed')} rel={r.get('check_rel_err')} {r.get('reason') or ''}"[:240],
                      flush=True)
    if a.csv:
        rows_frame(rows).to_csv(a.csv, index=False)  # the bench's long-format columns
    return 0 if all(r.get("status") in ("ok", "skipped") for r in rows) else 1


def register_ws_variant(p: argparse.ArgumentParser, text: str) -> None:
    """NAME:K=V[,K=V] -> a registered rung: wgmma_ws's fixed switches with these changed (integers), or any other
    constexpr of its kernel that has a default (an A/B switch a patch adds), except the two its launcher sets."""
    from workbench import registry
    from workbench.kernels import catalog, wgmma_ws
    name, _, switches = text.partition(":")
    base = dict(registry.get("wgmma_ws").fixed_meta)
    known = set(base) | {q.name for q in wgmma_ws.ws_partial_kernel.params
                         if q.is_constexpr and q.has_default and q.name not in ("HAS_SINK", "DIRECT")}
    try:
        changed = {k: int(v) for k, v in (kv.split("=") for kv in switches.split(","))}
    except ValueError:
        p.error(f"--ws-variant {text!r}: expected NAME:K=V[,K=V] with integer values")
    unknown = set(changed) - known
    if name in registry.names():
        p.error(f"--ws-variant {text!r}: {name!r} is a registered kernel already")
    if not name or unknown:
        p.error(f"--ws-variant {text!r}: switches are {sorted(known)}"
                + (f", not {sorted(unknown)}" if unknown else ""))
    catalog._wgmma_ws(name, None, f"exploratory: wgmma_ws with {switches}", "exploratory", **{**base, **changed})


def register_spec_variant(p: argparse.ArgumentParser, text: str) -> None:
    """NAME:BASE:FIELD=V -> a registered copy of kernel BASE with that KernelSpec field set: a boolean (V 0 or 1) or
    an integer (or an optional one, left None by BASE); FIELD switches.KEY: the constexpr switch KEY, a non-negative
    integer, passed by BASE's launcher (a rung of catalog._block, or a variant of one)."""
    import dataclasses

    from workbench import registry
    from workbench.kernel_spec import register
    try:
        name, base, assignment = text.split(":")
        field, value = assignment.split("=")
        spec = registry.get(base)
    except (ValueError, KeyError) as e:
        p.error(f"--spec-variant {text!r}: expected NAME:BASE:FIELD=V with BASE a registered kernel ({e})")
    key = field.removeprefix("switches.")
    if key != field:  # a constexpr switch of the kernel: an integer (booleans as 0 or 1)
        takes = spec.launch is not None and "switches" in inspect.signature(spec.launch).parameters
        if name in registry.names() or not takes or not key.isidentifier() or not (value.isascii() and value.isdigit()):
            p.error(f"--spec-variant {text!r}: switches.KEY=V takes a new NAME, a BASE whose launcher takes switches "
                    f"(a rung of catalog._block) and a non-negative integer V")
        switches = {**spec.fixed_meta, key: int(value)}
        # the copy keeps BASE's shared_model and lab_constexprs (only the lab reads them, and explore never does): a
        # switch that changes the shared bytes (NUM_BUFS) is timed right but would be modelled as BASE
        register(dataclasses.replace(spec, name=name, rung=None, fixed_meta=switches,
                                     launch=lambda switches=switches, base=spec.launch, **kw: base(**kw,
                                                                                                   switches=switches)))
        return
    flags = [f.name for f in dataclasses.fields(spec) if isinstance(getattr(spec, f.name), bool)]
    ints = [f.name for f in dataclasses.fields(spec)
            if f.name not in flags and f.name != "rung" and f.type in ("int", "int | None")]
    if name in registry.names() or not (field in flags and value in ("0", "1")
                                        or field in ints and value.isdigit() and int(value) >= 1):
        p.error(f"--spec-variant {text!r}: FIELD is one of {flags} (V 0 or 1) or of {ints} (V a positive integer), "
                f"and NAME a new name")
    register(dataclasses.replace(spec, name=name, rung=None, **{field: value == "1" if field in flags else int(value)}))


if __name__ == "__main__":
    sys.exit(main())
