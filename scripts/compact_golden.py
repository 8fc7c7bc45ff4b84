"""Regenerate the repository's compact golden cases (golden/*.pt) from a folder of FlashMLA's originals.

    .venv/bin/python scripts/compact_golden.py /path/to/originals            # writes golden/<name>.pt
    .venv/bin/python scripts/compact_golden.py /path/to/originals --out DIR  # elsewhere
    .venv/bin/python scripts/compact_golden.py --check                       # compare golden/ with the originals

The originals are the ``*.pt`` files of FlashMLA's golden cases (default: the outside folder workbench.format.golden
finds: $WORKBENCH_GOLDEN, ../shared/golden, ...). What compaction keeps and drops is in workbench/format/golden.py's
docstring. Each written case is checked before it is kept: the fp32 reference gives the same bits on it as on its
original, and FlashMLA's q, out and lse are unchanged byte for byte. ``--check`` writes nothing: it compacts into
memory and compares with the files in golden/ (tensors equal, strides equal).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from workbench.format.golden import (COMPACT_DIR, compact_case, golden_kwargs, load_golden, original_dir, same_bytes,
                                     save_compact)
from workbench.format.reference import sparse_mla_decode_reference


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return same_bytes(a, b)
    return not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor) and a == b


def reference_pair(g: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return sparse_mla_decode_reference(**golden_kwargs(g))


def verify(original: dict, compact: dict) -> list[str]:
    """What differs between an original and its compact copy, where it must not (empty: nothing)."""
    bad = []
    for k in ("q", "flashmla_out", "flashmla_lse", "attn_sink", "topk_length", "extra_topk_length"):
        a, b = original.get(k), compact.get(k)
        if isinstance(a, torch.Tensor) and not (isinstance(b, torch.Tensor) and same_bytes(a, b)):
            bad.append(f"{k} changed")
        elif a is None and b is not None:
            bad.append(f"{k} appeared")
    (o_out, o_lse), (c_out, c_lse) = reference_pair(original), reference_pair(compact)
    if not same_bytes(o_out, c_out):
        bad.append(f"reference out differs ({int((o_out != c_out).sum())} elements)")
    if not same_bytes(o_lse, c_lse):
        bad.append("reference lse differs")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("originals", nargs="?", type=Path, help="folder of FlashMLA's *.pt cases (default: the "
                                                             "outside folder workbench.format.golden finds)")
    ap.add_argument("--out", type=Path, default=COMPACT_DIR, help=f"where to write (default {COMPACT_DIR})")
    ap.add_argument("--check", action="store_true", help="compare the compact files in --out with the originals; "
                                                         "write nothing")
    args = ap.parse_args(argv)
    src = args.originals or original_dir()
    if src is None or not any(Path(src).glob("*.pt")):
        ap.error(f"no originals (*.pt) in {src}: name the folder, or set WORKBENCH_GOLDEN")
    files = sorted(Path(src).glob("*.pt"))
    failed = 0
    for f in files:
        g = torch.load(f, weights_only=False)
        if "compact" in g:
            print(f"{f.name}: already compact, skipped")
            continue
        c = compact_case(g, source=f)
        target = args.out / f.name
        if args.check:
            if not target.exists():
                print(f"{f.name}: MISSING in {args.out}")
                failed += 1
                continue
            stored = torch.load(target, weights_only=False)
            narrowed = stored["compact"].get("narrowed", [])
            stored = {k: (v.to(torch.int32) if k in narrowed else v) for k, v in stored.items()}
            diff = sorted(k for k in set(c) | set(stored) if k != "compact" and not _same(c.get(k, KeyError),
                                                                                      stored.get(k, KeyError)))
            diff += [] if c["compact"]["source_sha256"] == stored["compact"]["source_sha256"] else ["source_sha256"]
            print(f"{f.name}: " + (f"DIFFERS in {diff}" if diff else "as in the repository"))
            failed += bool(diff)
            continue
        bad = verify(g, c)
        if bad:
            print(f"{f.name}: NOT written: {'; '.join(bad)}")
            failed += 1
            continue
        args.out.mkdir(parents=True, exist_ok=True)
        save_compact(c, target)
        back = load_golden(f.stem) if args.out.resolve() == COMPACT_DIR.resolve() else None
        if back is not None and verify(g, back):
            print(f"{f.name}: written, but reads back differently: {verify(g, back)}")
            failed += 1
            continue
        kept = ", ".join(f"{s}: {i['tokens']} tokens in {i['num_blocks']} of {i['source_num_blocks']} pages"
                         for s, i in c["compact"]["scopes"].items())
        print(f"{f.name}: {f.stat().st_size / 2**20:.2f} MiB -> {target.stat().st_size / 2**20:.2f} MiB ({kept})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
