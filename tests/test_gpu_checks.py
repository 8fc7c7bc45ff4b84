"""The GPU checks as tests: ``TRITON_INTERPRET=0 pytest -m gpu`` on a CUDA machine (skipped elsewhere).

Every kernel of ``gpu_check.checked_impls()`` on FlashMLA's golden cases, on every case of the hostile
catalogue (``workbench.format.cases``: each entry as the interpreter tests run it, GPU-only ones included, then its
scaled version), and bit for bit under CUDA-graph replay and run to run. The catalogue rows carry FlashMLA's
columns (``gpu_check.run_flashmla``, once per case; NaN where it cannot run). The rows are those of
``python -m workbench check``; the module writes them as the same correctness table (CSV and .meta.json)
into ``$WORKBENCH_CHECK_OUT``, or a new ``runs/<date-time>-check/`` folder (``$WORKBENCH_CHECK_NAME`` names
the file; default ``correctness_h200.csv``), failed rows included.
"""
import functools
import math
import os
from pathlib import Path

import pytest
import torch

from workbench import gpu_check
from workbench.format.golden import golden_names, load_golden

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
IMPLS = gpu_check.checked_impls()
CASE_IMPLS = gpu_check.case_impls()  # the kernels and "auto"
CASES = gpu_check.gpu_cases()


def out_dir() -> Path:
    """$WORKBENCH_CHECK_OUT, or a new runs/<UTC date-time>-check/ (as ``python -m workbench check``)."""
    if os.environ.get("WORKBENCH_CHECK_OUT"):
        return Path(os.environ["WORKBENCH_CHECK_OUT"])
    from workbench.report.pipeline import new_run_dir
    return new_run_dir(ROOT / "runs", "check")


@pytest.fixture(scope="module")
def table(request):
    """The rows every test here adds; written as the correctness table when the module is done."""
    rows = []
    yield rows
    if rows:
        csv = gpu_check.write_table(rows, out_dir(), os.environ.get("WORKBENCH_CHECK_NAME", gpu_check.TABLE_NAME))
        failed = sum(r["passed"] is not True for r in rows)
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"\ncorrectness table: {csv} ({len(rows)} checks, {failed} failed)")


def _runs_here(impl):
    if impl.startswith("wgmma") and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{impl} is a Gluon kernel for sm_90")


def _record(table, rows):
    table.extend(rows)
    bad = [{k: (f"{v:.3g}" if isinstance(v, float) and math.isfinite(v) else v) for k, v in r.items()}
           for r in rows if r["passed"] is not True]
    assert not bad, f"{len(bad)} failed: {bad}"


@functools.lru_cache(maxsize=None)
def _golden(name):
    return load_golden(name)


@pytest.mark.parametrize("impl", CASE_IMPLS)
@pytest.mark.parametrize("name", golden_names())
def test_golden_vs_flashmla(table, name, impl):
    _runs_here(impl)
    _record(table, gpu_check.golden_rows(name, [impl], g=_golden(name)))


@pytest.fixture(scope="module", params=list(enumerate(CASES)), ids=[e.id for e in CASES])
def built_case(request):
    """A catalogue case, its fp32 reference and FlashMLA's run on it (once per case, not per kernel)."""
    position, entry = request.param
    built = gpu_check.build_with_reference(entry, "cuda")
    return position, entry, built, gpu_check.run_flashmla(built[0])


@pytest.mark.parametrize("impl", CASE_IMPLS)
def test_catalogue_case_vs_reference(table, built_case, impl):
    _runs_here(impl)
    position, entry, built, flashmla = built_case
    _record(table, gpu_check.case_rows(entry, position, [impl], built=built, flashmla=flashmla))


@pytest.fixture(scope="module")
def bitwise_case():
    from workbench.format import cases
    return cases.get(cases.BITWISE).build(device="cuda")


@pytest.mark.parametrize("impl", IMPLS)
def test_graph_replay_and_run_to_run_are_bitwise(table, bitwise_case, impl):
    _runs_here(impl)
    _record(table, gpu_check.bitwise_rows(impl, "cuda", bitwise_case))
