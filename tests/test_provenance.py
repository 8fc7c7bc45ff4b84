"""What a row's provenance says about the code it timed: the timing sources' hash (comments and docstrings
stripped) and git's view of a row's commit."""
import subprocess

import pandas as pd
import pytest

from workbench.report import provenance, results

KERNEL = '''"""A kernel module."""
import math


def launch(x):
    """Launch it."""
    return math.sqrt(x)  # why: the sqrt
'''


def _tree(root, kernel=KERNEL, decode="SPLITS = 4\n"):
    (root / "workbench" / "kernels").mkdir(parents=True, exist_ok=True)
    (root / "workbench" / "kernels" / "k.py").write_text(kernel)
    (root / "workbench" / "decode.py").write_text(decode)
    (root / "workbench" / "notes.py").write_text("X = 1\n")  # not a timing source
    return root


def test_fingerprint_drops_comments_docstrings_and_layout_but_not_code():
    base = provenance.code_fingerprint(KERNEL)
    reworded = KERNEL.replace("Launch it.", "Launches it, now documented.").replace("# why: the sqrt", "")
    assert provenance.code_fingerprint(reworded) == base
    assert provenance.code_fingerprint(KERNEL.replace("(x)", "( x )")) == base
    assert provenance.code_fingerprint(KERNEL.replace("math.sqrt(x)", "math.sqrt(x) * 2")) != base
    assert provenance.code_fingerprint("def broken(:\n") == "def broken(:\n", "unparsable text is kept whole"


def test_fingerprint_writes_no_f_string_so_python_versions_agree():
    """ast.unparse quotes f-strings by version (3.12 writes f'...' where 3.11 wrote f"..."), which gave the H200's
    rows (Python 3.12) another kernel_hash than this checkout's for the same sources. f-strings become calls, so the
    text carries no version's quoting; their parts, conversions and format specs still count."""
    import re
    fp = provenance.code_fingerprint
    f_string = re.compile(r"""(?<![\w'"])[rR]?[fF][rR]?['"]""")  # an f-string's prefix, not a word ending in f
    src = 'def f(x, n):\n    return f"{x!r:>{n}} and {x}"\n'
    out = fp(src)
    assert not f_string.search(out) and f_string.search(src), out
    assert fp(src.replace("!r", "!s")) != out and fp(src.replace(">", "<")) != out
    assert fp(src.replace(" and ", " or ")) != out and fp(src.replace('"', "'")) == out
    # every kernel source's fingerprint is free of f-strings (the package's own files, as hashed)
    for path in (provenance.ROOT / "workbench" / "kernels").glob("*.py"):
        assert not f_string.search(fp(path.read_text())), path.name


def test_a_kernel_entrys_prose_is_not_code():
    """A KernelSpec's summary and prediction describe the rung; rewording them does not stale its rows. Any other
    argument, and a prose keyword whose value is not a string literal, is code."""
    fp = provenance.code_fingerprint
    entry = 'register(KernelSpec(name="k", rung=15, summary="P from registers", prediction="80-" "100 us", pdl=True))'
    assert fp(entry.replace("P from registers", "P from shared memory")) == fp(entry)
    assert fp(entry.replace('"80-" "100 us"', '"90 us " + "at h128"')) == fp(entry)
    assert fp(entry.replace("rung=15", "rung=16")) != fp(entry)
    assert fp(entry.replace('name="k"', 'name="k2"')) != fp(entry), "a name is code: the registry keys on it"
    assert fp(entry.replace('summary="P from registers"', "summary=describe(k)")) != fp(entry)


def test_a_module_moved_to_another_package_keeps_its_hash_but_a_new_binding_does_not(tmp_path):
    """Moving modules between packages rewrites their relative imports and their folder, not their code."""
    root = _tree(tmp_path, decode="from .layout import layout_of\nfrom . import registry\nSPLITS = 4\n")
    h = provenance.kernel_source_hash(root)
    (root / "workbench" / "decode.py").write_text(
        "from ..format.layout import layout_of\nfrom .. import registry\nSPLITS = 4\n")
    assert provenance.kernel_source_hash(root) == h, "the same names bound from elsewhere: the same code"
    (root / "workbench" / "decode.py").rename(root / "workbench" / "kernels" / "decode.py")
    assert provenance.kernel_source_hash(root) == h, "the same file in another hashed folder"
    (root / "workbench" / "kernels" / "decode.py").write_text(
        "from ..format.layout import layout_of as lay\nfrom .. import registry\nSPLITS = 4\n")
    assert provenance.kernel_source_hash(root) != h, "a different binding is different code"
    fp = provenance.code_fingerprint
    assert fp("from .common import launch") != fp("from .tuning import launch"), "another module's launch"
    assert fp("from triton.experimental.gluon.language.nvidia.hopper import mbarrier") != fp(
        "from triton.experimental.gluon.language.nvidia.ampere import mbarrier"), "an absolute path is kept whole"


def test_the_hash_covers_kernels_and_split_planning_not_other_modules(tmp_path):
    root = _tree(tmp_path)
    h = provenance.kernel_source_hash(root)
    (root / "workbench" / "notes.py").write_text("X = 2\n")
    assert provenance.kernel_source_hash(root) == h
    (root / "workbench" / "kernels" / "k.py").write_text(KERNEL.replace("Launch it.", "Reworded."))
    assert provenance.kernel_source_hash(root) == h, "a docstring edit does not stale a row"
    (root / "workbench" / "decode.py").write_text("SPLITS = 8\n")
    assert provenance.kernel_source_hash(root) != h, "the split planning is hashed"


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    root = _tree(tmp_path)
    _git(root, "init", "-q")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "first")
    return root


def test_git_tells_a_changed_kernel_from_a_changed_note(repo):
    sha = _git(repo, "rev-parse", "HEAD")
    assert provenance.kernel_source_hash_at(sha, repo) == provenance.kernel_source_hash(repo)
    (repo / "workbench" / "kernels" / "k.py").write_text(KERNEL + "# a note\n")
    assert provenance.kernels_changed_since(sha, repo) is False
    (repo / "workbench" / "kernels" / "k.py").write_text(KERNEL.replace("sqrt", "exp"))
    assert provenance.kernels_changed_since(sha, repo) is True
    assert provenance.kernels_changed_since("0123456789ab", repo) is None
    assert provenance.kernels_changed_since("unknown", repo) is None


def test_stale_flags_trust_git_over_an_old_style_hash(repo, monkeypatch):
    sha = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(results, "kernel_source_hash", lambda: provenance.kernel_source_hash(repo))
    monkeypatch.setattr(results, "kernels_changed_since", lambda c: provenance.kernels_changed_since(c, repo))
    current = provenance.kernel_source_hash(repo)
    df = pd.DataFrame([dict(kernel_hash=current, git_commit="whatever"),          # the current hash: fresh
                       dict(kernel_hash="0ld5ty1eh45h", git_commit=sha),          # same code at its commit: fresh
                       dict(kernel_hash="0ld5ty1eh45h", git_commit="0123456789ab"),  # git cannot place it: stale
                       dict(kernel_hash=None, git_commit="0123456789ab")])          # no hash, no commit: unknown
    assert results.stale_flags(df) == [False, False, True, None]
    (repo / "workbench" / "decode.py").write_text("SPLITS = 8\n")
    assert results.stale_flags(df.iloc[[1]]) == [True]
