"""Provenance for every measured row: GPU, driver, CUDA, torch, triton, git commit, date."""
from __future__ import annotations

import datetime as _dt
import functools
import os
import subprocess
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]


def git_commit() -> str:
    """The commit being measured; $WORKBENCH_COMMIT wins (the GPU machine gets a tree without .git)."""
    env = os.environ.get("WORKBENCH_COMMIT")
    if env:
        return env
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "workbench"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _smi(field: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "n/a"
    except (OSError, subprocess.TimeoutExpired):
        return "n/a"


def provenance() -> dict:
    """One flat dict; every data row carries these columns."""
    p = dict(date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), git_commit=git_commit(),
             kernel_hash=kernel_source_hash(),
             torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda or "none")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        p.update(gpu=props.name, sm_count=props.multi_processor_count,
                 capability=f"sm_{props.major}{props.minor}", driver=_smi("driver_version"),
                 sm_clock_mhz=_smi("clocks.sm"), mem_clock_mhz=_smi("clocks.mem"),
                 max_sm_clock_mhz=_smi("clocks.max.sm"))
    else:
        p.update(gpu="cpu", sm_count=0, capability="none", driver="none", sm_clock_mhz="n/a", mem_clock_mhz="n/a",
                 max_sm_clock_mhz="n/a")
    return p


def meta_path(csv) -> Path:
    """Where a table's provenance is kept beside it: ``<table>.meta.json``."""
    csv = Path(csv)
    return csv.with_name(csv.stem + ".meta.json")


def write_meta(csv, prov: dict | None = None) -> Path:
    """Write ``prov`` (default: :func:`provenance` now) as the table's ``.meta.json``; returns its path."""
    import json
    path = meta_path(csv)
    path.write_text(json.dumps(provenance() if prov is None else prov, indent=1))
    return path


# What a timing row describes: the jit code and its launchers, the split planning and kernel choice (decode,
# registry) and the launch path (plan). Hashed without comments and docstrings, so a note does not stale a row, and
# by file name without folder, so a move does not either; when one of these moves, keep its old path here too, so
# that an old commit's tree (kernel_source_hash_at) still finds it.
KERNEL_SOURCES = ("workbench/kernels", "workbench/registry.py", "workbench/decode.py", "workbench/plan.py")


PROSE_KEYWORDS = ("summary", "prediction")  # keyword arguments whose string values are text about the code


def _is_text(node) -> bool:
    """A string literal, or literals joined by + (implicit concatenation already parses as one constant)."""
    import ast
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _is_text(node.left) and _is_text(node.right)


@functools.lru_cache(maxsize=None)  # the same file text recurs in every commit that did not touch it
def code_fingerprint(source: str) -> str:
    """Python source without its comments, docstrings, layout (``ast.unparse``) and a kernel entry's prose (the
    string values of ``PROSE_KEYWORDS`` arguments: a KernelSpec's summary and prediction): what runs, not how it reads.
    A relative ``from ..pkg.mod import x`` keeps only the module's own name (``from mod import x``), so moving a
    module to another package (which rewrites every relative import of it) is not a change of code; an absolute
    import keeps its whole path. Text that does not parse is kept whole."""
    import ast
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source

    class NoProse(ast.NodeTransformer):
        def visit_keyword(self, node):
            # a kernel entry's prose (KernelSpec(summary=..., prediction=...)) describes the code; it does not run
            if node.arg in PROSE_KEYWORDS and _is_text(node.value):
                return ast.copy_location(ast.keyword(arg=node.arg, value=ast.Constant("")), node)
            return self.generic_visit(node)
    tree = NoProse().visit(tree)

    class BoundNames(ast.NodeTransformer):
        def visit_ImportFrom(self, node):
            # a relative import keeps the module's own name (its package may move), an absolute one its whole path
            # (hopper's mbarrier is not ampere's): "from ..format.layout import x" -> "from layout import x"
            module = (node.module or "").rsplit(".", 1)[-1] if node.level else node.module
            return ast.copy_location(ast.ImportFrom(module=module or None, names=node.names, level=0), node)
    tree = BoundNames().visit(tree)

    class PlainFStrings(ast.NodeTransformer):
        # ast.unparse picks an f-string's quotes by Python version (3.12, PEP 701: single quotes where 3.11 wrote
        # double), so the same source hashed differently on the H200 (3.12) and here (3.11): f-strings become calls
        def visit_JoinedStr(self, node):
            self.generic_visit(node)
            return ast.copy_location(ast.Call(ast.Name("__fstring__", ast.Load()), node.values, []), node)

        def visit_FormattedValue(self, node):
            self.generic_visit(node)
            args = [node.value, ast.Constant(node.conversion)] + ([node.format_spec] if node.format_spec else [])
            return ast.copy_location(ast.Call(ast.Name("__format__", ast.Load()), args, []), node)
    tree = PlainFStrings().visit(tree)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def _source_paths(root: Path) -> list[str]:
    paths = []
    for top in KERNEL_SOURCES:
        p = root / top
        if p.is_dir():
            paths += [q.relative_to(root).as_posix() for q in p.rglob("*.py")]
        elif p.exists():
            paths.append(top)
    return sorted(paths)


def _hash_sources(files: dict[str, str]) -> str:
    """Each file by its name without its folder (a module moved between packages keeps its identity) and its
    :func:`code_fingerprint`."""
    import hashlib
    h = hashlib.sha256()
    for name, text in sorted((Path(n).name, code_fingerprint(t)) for n, t in files.items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()[:12]


def kernel_source_hash(root: Path = ROOT) -> str:
    """12 hex digits over what changes timings (``KERNEL_SOURCES``, comments and docstrings stripped), so a row
    can say which code it timed without git."""
    return _hash_sources({name: (root / name).read_text() for name in _source_paths(root)})


_HASH_AT: dict = {}


def kernel_source_hash_at(commit: str, root: Path = ROOT) -> str | None:
    """:func:`kernel_source_hash` of ``commit``'s tree (from git); None when git does not know the commit."""
    sha = str(commit).split("+")[0]
    if not sha or sha in ("unknown", "nan", "None"):
        return None
    if (root, sha) in _HASH_AT:
        return _HASH_AT[root, sha]
    result = None
    try:
        ls = subprocess.run(["git", "ls-tree", "-r", "--name-only", sha, "--", *KERNEL_SOURCES], cwd=root,
                            capture_output=True, text=True, timeout=30)
        if ls.returncode == 0:
            names = [n for n in ls.stdout.split() if n.endswith(".py")]
            cat = subprocess.run(["git", "cat-file", "--batch"], cwd=root, capture_output=True, timeout=60,
                                 input="".join(f"{sha}:{n}\n" for n in names).encode())
            files, buf = {}, cat.stdout
            for n in names:  # "<oid> blob <size>\n<bytes>\n" each
                header, _, buf = buf.partition(b"\n")
                size = int(header.split()[2])
                files[n], buf = buf[:size].decode(), buf[size + 1:]
            result = _hash_sources(files)
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        result = None
    _HASH_AT[root, sha] = result
    return result


def kernels_changed_since(commit: str, root: Path = ROOT) -> bool | None:
    """True when the checked-out timing sources differ from ``commit``'s (comments and docstrings aside); None
    when git cannot tell."""
    then = kernel_source_hash_at(commit, root)
    return None if then is None else then != kernel_source_hash(root)
