"""The package's modules import each other without a cycle (function-local imports count too)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its body (``from . import x`` counts as x)."""
    top = package_dir.name
    mods = {}
    for p in package_dir.rglob("*.py"):
        parts = p.relative_to(package_dir.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    deps.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = {d for d in deps if d in mods and d != name and d != top}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle():
    graph = import_graph(ROOT / "workbench")
    assert "workbench.registry" in graph and "workbench.kernels.catalog" in graph
    assert cycles(graph) == []


def test_the_check_finds_a_cycle_through_a_function_local_import(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n    return a\n")
    (pkg / "c.py").write_text("import toy.a\n")
    assert cycles(import_graph(pkg)) == [["toy.a", "toy.sub.b"]]


# The public API as it stood before the modules moved into format/, bench/ and report/ (issue 23): a move never
# renames what `import workbench` gives.
PUBLIC = {"MODEL1", "CacheLayout", "DecodeCase", "DecodeScope", "DecodeCost", "DecodePlan", "IMPLS", "INTERPRET",
          "assert_close", "build_case", "case_cost", "compare", "count_valid_tokens", "decode_cost", "dequantize_kv",
          "indices_to_positions", "plan_decode", "plan_splits", "positions_to_indices", "pruned_configs", "quantize_kv",
          "sparse_mla_decode", "sparse_mla_decode_reference", "warmup"}


def test_the_public_api_keeps_its_names():
    import workbench
    assert PUBLIC <= set(workbench.__all__)
    assert [n for n in workbench.__all__ if not hasattr(workbench, n)] == []


def test_every_module_imports():
    """Each module of the package imports on its own (a moved module's relative imports all resolve)."""
    import importlib
    graph = import_graph(ROOT / "workbench")
    failed = {}
    for name in sorted(graph):
        if name.endswith("__main__"):
            continue
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - report every module that fails, with why
            failed[name] = f"{type(e).__name__}: {e}"
    assert failed == {}
