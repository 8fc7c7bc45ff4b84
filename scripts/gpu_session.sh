#!/usr/bin/env bash
# Everything a GPU is needed for, in one call: correctness table, compute-sanitizer, benchmark sweeps and Nsight
# Compute profiles, on any CUDA GPU (the H200 the tables in data/ come from, or an sm_120 RTX PRO 6000 / RTX 5090).
# Results go to $OUT; publish them into data/ afterwards (publish names them after the GPU their rows record).
# Usage (device tool, carry .whl; .golden optional): WORKBENCH_COMMIT=<sha> bash scripts/gpu_session.sh [sweep ...]
#   A sweep name workbench.bench.sweeps does not know stops the call before its first step (exit 2), with the
#   names there are.
#   Off Hopper: the first lines say whether FlashMLA runs here (sm_90 only; where it does not, one line says why,
#   and its bench rows are skipped and the check table's flashmla_* columns empty, with that reason) and which
#   kernels do not run on this GPU (the Gluon wgmma rungs: sm_90 only), which check and compute-sanitizer leave out
#   unless CHECK_IMPLS / SANITIZE_IMPLS name them; a sweep that times them stops at the first (said before it runs).
#   Tables are named after the GPU (correctness_<gpu>.csv: correctness_h200.csv on the H200) and every row carries
#   its name and capability (gpu, capability, sm_count: workbench.report.provenance).
#   <sha> typed out here: $(git rev-parse HEAD) in the device command runs in the machine's copy of the tree,
#   which reported an older commit than the one sent (data/errata.csv, the 1102-1103 tables)
#   SKIP_CHECK=1 / SKIP_PYTEST_GPU=1 / SKIP_SANITIZE=1 / SKIP_BENCH=1 leave a part out (to fit the 10-minute limit
#   of one call); the pytest step (TRITON_INTERPRET=0 pytest -m gpu: the GPU checks as tests, and every other
#   gpu-marked test) writes the same correctness table as check, as $OUT/correctness_<gpu>_pytest.csv, and runs
#   under `timeout ${GPU_TEST_TIMEOUT:-540}` (exit 124), so a kernel that hangs fails the step, not the whole call;
#   GPU_TESTS="tests/test_a.py ..." limits that step to those files (default: tests);
#   CHECK_IMPLS="a b" limits the correctness table to those kernels (and any "auto" named); CHECK_JOBS=N checks
#   them in N processes at once (the check is bound by one core's compiling) and merges their rows into one table:
#   the kernels are dealt to min(N, kernels) groups, and with more processes than kernels each group's cases are
#   split among N // groups of them (`check --shard I/N`), so one slow kernel's check no longer sets the time;
#   SANITIZE_IMPLS="a b" limits compute-sanitizer to those kernels (default: every checked kernel; not "auto",
#   which is refused with a line, as check --sanitize takes kernels);
#   BUNDLE=1 writes every file into one archive, $OUT/bundle.tgz, at exit (the device tool returns at most 8 files);
#   RACECHECK_IMPLS="a b" / SYNCCHECK_IMPLS="a b" also run compute-sanitizer racecheck / synccheck on those kernels'
#   sanitizer case; SANITIZE_ARGS adds arguments to each `check --sanitize` (e.g. "--case ID --combine serial") and
#   SANITIZER_FLAGS to each compute-sanitizer, both named in the log's file name (<tool>_<impl>_case-ID_...log);
#   WS_PROBES=1 runs scripts/ws_protocol_probe.py's variants under racecheck (racecheck_probe_<variant>.log);
#   PF2_MEMCHECK=1 runs scripts/memcheck_pf2.py under memcheck (sanitizer_wgmma_ws_h64_pf2.log: rung 15's builds for
#   two head groups and long splits, one scope and the two joined at the production shape's sizes, which no
#   catalogue case reaches);
#   every log starts with its command and ends with "# exit <status>" (124: timed out);
#   $OUT/steps.log has a UTC time stamp as each step starts (setup, check, gpu_tests, sanitize, racecheck <impl>,
#   synccheck <impl>, pf2_memcheck, ws_probes, cluster_probe, bench <sweep>, baseline <sweep>, explore, baseline
#   explore, ncu <impl>) and as the call exits (with its status), so a step's length is the gap to the next line, for
#   planning the next call's limits; with BUNDLE=1 it is also kept beside bundle.tgz, as each line is written, so a
#   call killed mid-step still says which step it was in;
#   NCU="impl=JSON-config ..." profiles each impl once at b64 h16 topk2048 (NCU_HEADS, NCU_BATCH, NCU_TOPK to change
#   the shape; a batch or topk changed is named in the file: ncu_<impl>_h<heads>_b<batch>_k<topk>.txt): its partial
#   kernel (a name with "partial"; FlashMLA's: "splitkv") of the last call, which workbench.lab.profile runs in the
#   NVTX range "profiled" after warm-up calls; NCU_COMBINE=1 (a call of several splits: one with no combine gets no
#   profile) also its combine, the launch after it (each kernel's section is headed by its name); an ncu that fails
#   or times out makes the call's exit status non-zero;
#   BASELINE=<dir> (BASELINE_COMMIT=<sha>) runs the same sweeps again from an earlier commit's tree, into
#   $OUT/baseline/, for a same-run comparison (the folder: `git archive <sha> | tar -x -C <dir>`, carried);
#   PATCHES="data/explore/x.patch ..." applies untimed patches to this copy first (git apply; the call stops if one
#   does not apply), keeps the tree before them as BASELINE, and names the rows WORKBENCH_COMMIT+x (check,
#   GPU tests, sanitizer, sweeps and ncu all run the patched code; the baseline only the sweeps); at exit they are
#   taken back out, so several sessions in one call each start from the same tree;
#   EXPLORE="auto flashmla wgmma_ws_h64 ..." runs scripts/explore.py with those providers after the sweeps
#   (EXPLORE_ARGS: its other arguments, e.g. "--shape 64,128,2048 --shape 1,64,512"; $OUT/explore.csv), and with
#   PATCHES or BASELINE the same script, on the package of the tree before them ($OUT/baseline/explore.csv): an A/B
#   of a few shapes in one call, each provider checked against the fp32 reference first (a failed check or a
#   timeout, EXPLORE_TIMEOUT, 300 s for each of the two, makes the call's exit status non-zero); BASELINE_EXPLORE
#   and BASELINE_EXPLORE_ARGS replace EXPLORE and EXPLORE_ARGS for the baseline (a --spec-variant its tree lacks);
#   NCU_SOURCE=1 also writes each profile's per-SASS-instruction counters (stall samples, executed instructions,
#   sectors) as ncu_source_<impl>_<tag>.csv (the .txt's tag: h<heads>, and _b<batch>_k<topk> where changed);
#   CLUSTER_PROBE=1 runs scripts/cluster_share_probe.py (sm_90: a cluster of two sharing the dequant) before the
#   sweeps: its check alone under `timeout ${PROBE_CHECK_TIMEOUT:-120}` (cluster_probe_check.log; a protocol
#   error traps or hangs there), then, unless that timed out, check and time under `timeout 400`
#   (cluster_probe_time.log, the table cluster_share.csv; CLUSTER_PROBE_ARGS adds arguments, e.g. "--shape
#   64,128,2048,256"); CLUSTER_PROBE_NCU="local shared ..." then profiles one launch of each named variant at the first
#   shape under Nsight Compute (ncu_cluster_probe_<variant>.txt).
set -uo pipefail
SWEEPS="${*:-smoke}"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
BUNDLE_TO=""
checkpoint() {  # BUNDLE=1: every file so far into $BUNDLE_TO/bundle.tgz (replaced whole, never half-written)
  [ -n "$BUNDLE_TO" ] || return 0
  tar czf "$BUNDLE_TO/.bundle.part" -C "$OUT" . && mv -f "$BUNDLE_TO/.bundle.part" "$BUNDLE_TO/bundle.tgz"
}
if [ "${BUNDLE:-0}" = 1 ]; then
  # the device tool brings back at most 8 files of a call's $OUT: every file goes to a folder of its own, and into
  # one archive, $OUT/bundle.tgz, after each step and at exit, so that a call killed before its exit trap (SIGKILL,
  # or a TERM deferred behind a step's own timeout) still returns what the steps before it wrote
  BUNDLE_TO="$OUT"; OUT=$(mktemp -d)
fi
trap 'exit 143' TERM INT HUP  # so that the exit trap below runs when a call's timeout stops the script
stamp() {  # a step starts now (how long each took); beside the bundle too, which a SIGKILL leaves a step behind
  local line; line="$(date -u +%FT%TZ) $*"
  echo "$line" >> "$OUT/steps.log"; [ -z "$BUNDLE_TO" ] || echo "$line" >> "$BUNDLE_TO/steps.log"
}
stamp setup
ROOT_DIR=$PWD UNPATCH=""  # UNPATCH: the PATCHES applied below, newest first
apply_patch() {  # apply_patch [-R] FILE: git apply, or patch(1) where this copy has no git
  local rev=""; [ "$1" = -R ] && { rev=-R; shift; }
  if command -v git >/dev/null; then git apply $rev "$1"
  elif [ -n "$rev" ]; then patch -R -p1 --batch --quiet < "$1"
  else patch -p1 --batch --forward --quiet < "$1"; fi
}
on_exit() {
  stamp "exit $?"
  # PATCHES are taken back out of this copy, so that the next session of the same device call starts from the tree
  # it was given (a second PATCHES run would otherwise fail to apply, and a third patch would stack on the first
  # while its rows named only its own)
  for p in $UNPATCH; do
    (cd "$ROOT_DIR" && apply_patch -R "$p") || echo "PATCHES: $p could not be taken back out of this copy"
  done
  [ -z "$BUNDLE_TO" ] || { checkpoint && echo "bundle: $BUNDLE_TO/bundle.tgz ($(find "$OUT" -type f | wc -l) files)"; }
}
trap on_exit EXIT
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
# the golden cases ship in golden/; a carried .golden/ (FlashMLA's originals) adds to them
[ -d .golden ] && export WORKBENCH_GOLDEN="$PWD/.golden"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} || echo "flash_mla wheel did not install"
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -n "${PATCHES:-}" ]; then
  # untimed patches (data/explore/*.patch) applied in this copy, for a same-run A/B: the tree before them is the
  # baseline (unless BASELINE names one), timed after the sweeps; rows carry WORKBENCH_COMMIT+<each patch's name>,
  # the baseline's WORKBENCH_COMMIT. A patch that does not apply stops the call before anything runs
  if [ -z "${BASELINE:-}" ]; then
    BASELINE=$(mktemp -d)
    tar -cf - --exclude=./.whl --exclude=./.venv --exclude=./runs . | tar -xf - -C "$BASELINE"
  fi
  BASELINE_COMMIT="${BASELINE_COMMIT:-${WORKBENCH_COMMIT:-baseline}}"
  for p in $PATCHES; do
    apply_patch "$p" || { echo "PATCHES: $p does not apply to this tree"; exit 3; }
    UNPATCH="$p $UNPATCH"
    name=$(basename "$p" .patch); WORKBENCH_COMMIT="${WORKBENCH_COMMIT:-unknown}+${name#explore_untimed_}"
  done
  export WORKBENCH_COMMIT
  python3 -c "from workbench.report.provenance import kernel_source_hash as k; print('patched: kernel hash', k())"
fi
echo "rows record git_commit=${WORKBENCH_COMMIT:-(none: git in this copy)}"
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
# What this GPU runs, said first: one line on FlashMLA (workbench.bench.providers.flashmla_line), one on the kernels
# that do not run here (a Gluon kernel runs on the targets its module is written for: resources.gluon_archs) and one per
# requested sweep that times them; then the GPU part of the tables' names and the kernels check and sanitize run
GPU_TAG=gpu; HERE_IMPLS=""; HERE_KERNELS=""; NOT_HERE=""
SESSION_ENV=$(mktemp)
python3 - "$SESSION_ENV" $SWEEPS <<'PY' || echo "could not ask torch and the registry about this GPU: all kernels run"
import shlex
import sys

import torch

from workbench.__main__ import gpu_slug
from workbench.gpu_check import case_impls, checked_impls
from workbench.bench.providers import flashmla_line
from workbench.lab.resources import gluon_archs, is_gluon, lab_kernels
from workbench.bench.sweeps import SWEEPS, sweep_shapes
from workbench.lab.targets import target_for_capability

# a misspelt sweep stops the call after this block, before the check, the sanitizers and the sweeps ahead of it
# spend device time
unknown = [s for s in sys.argv[2:] if s not in SWEEPS]
if unknown:
    print(f"sweeps: {' '.join(unknown)}: not a sweep (the sweeps: {' '.join(SWEEPS)}); nothing ran")
print(flashmla_line())
arch, tag = None, "cpu"
if torch.cuda.is_available():
    major, minor = torch.cuda.get_device_capability()
    tag = gpu_slug(torch.cuda.get_device_name())
    try:
        arch = target_for_capability(major, minor).arch
    except ValueError:  # below sm_89: no target (and no fp8), so no Gluon kernel either
        arch = f"sm_{major}{minor}"
lab = lab_kernels()
not_here = [k for k in checked_impls() if arch and k in lab and is_gluon(lab[k]) and arch not in gluon_archs(lab[k])]
if not_here:
    print(f"kernels: {' '.join(not_here)} do not run on this GPU ({arch}; Gluon kernels written for "
          f"{', '.join(sorted({a for k in not_here for a in gluon_archs(lab[k])}))}): check and compute-sanitizer "
          f"leave them out unless CHECK_IMPLS / SANITIZE_IMPLS name them")
    for sweep in (s for s in sys.argv[2:] if s not in unknown):
        timed = {p for _, providers, _, _ in sweep_shapes(sweep) for p in providers}
        if timed & set(not_here):
            print(f"bench {sweep}: times {' '.join(sorted(timed & set(not_here)))}, which raise on {arch}: the sweep "
                  f"stops at the first of them, keeping the rows before it (the bench skips only a provider that "
                  f"says it cannot run)")
values = dict(GPU_TAG=tag, NOT_HERE=" ".join(not_here), UNKNOWN_SWEEPS=" ".join(unknown),
              HERE_IMPLS=" ".join(k for k in case_impls() if k not in not_here),
              HERE_KERNELS=" ".join(k for k in checked_impls() if k not in not_here))
with open(sys.argv[1], "w") as f:
    f.writelines(f"{k}={shlex.quote(v)}\n" for k, v in values.items())
PY
. "$SESSION_ENV"; rm -f "$SESSION_ENV"
[ -n "${UNKNOWN_SWEEPS:-}" ] && exit 2  # said above
CHECK_IMPLS="${CHECK_IMPLS:-${NOT_HERE:+$HERE_IMPLS}}"  # off Hopper: the kernels that run here (and auto)
rc=0
# --force on check and bench: $OUT collects every step's files, and tee has made each step's log there first
[ "${SKIP_CHECK:-0}" != 1 ] && stamp check
if [ "${SKIP_CHECK:-0}" != 1 ] && [ "${CHECK_JOBS:-1}" -gt 1 ]; then
  # the check is compile-bound (one core): CHECK_JOBS processes, the kernels dealt to `groups` of them, each group's
  # cases split `shards` ways (rung 15's had reached 32 of 35 catalogue cases after 149 s when a 170-s call ended,
  # auto's whole check took 69: data/explore/explore_h100_20261207-2227_head_check_partial.log), then one table of
  # all their rows (correctness_<gpu>.csv, as one process writes it)
  impls=(${CHECK_IMPLS:-${HERE_IMPLS:-$(python3 -c "from workbench.gpu_check import case_impls; print(*case_impls())")}})
  groups=$(( CHECK_JOBS < ${#impls[@]} ? CHECK_JOBS : ${#impls[@]} )); groups=$(( groups > 0 ? groups : 1 ))
  shards=$(( CHECK_JOBS / groups ))
  pids=()
  for ((g = 0; g < groups; g++)); do
    part=(); for ((i = g; i < ${#impls[@]}; i += groups)); do part+=("${impls[i]}"); done
    for ((k = 0; k < shards; k++)); do
      j=$((g * shards + k)); shard=(); [ "$shards" -gt 1 ] && shard=(--shard "$k/$shards")
      python3 -m workbench check --out "$OUT/check_part$j" --force --name "correctness_$GPU_TAG.csv" \
        --impls "${part[@]}" ${shard[@]+"${shard[@]}"} > "$OUT/check_part$j.log" 2>&1 &
      pids+=($!)
    done
  done
  for pid in "${pids[@]}"; do wait "$pid"; rc=$((rc | $?)); done
  tail -n 3 "$OUT"/check_part*.log
  python3 - "$OUT" "correctness_$GPU_TAG" <<'PY' || rc=1
import glob, os, shutil, sys
import pandas as pd
out, name = sys.argv[1:3]
done, cut = [], []  # a process that finished wrote <name>.csv; one cut short left <name>.partial.csv, or nothing
# by process number (check_part10 after check_part9), so that rows keep the order one process would write
for d in sorted(glob.glob(f"{out}/check_part*/"), key=lambda d: int(d.rstrip("/").rsplit("check_part", 1)[1])):
    final, partial = f"{d}{name}.csv", f"{d}{name}.partial.csv"
    done.append(final) if os.path.exists(final) else cut.append(partial if os.path.exists(partial) else d)
frames = [pd.read_csv(p) for p in done + [c for c in cut if c.endswith(".csv")]]
if not frames:
    sys.exit(f"{name}: no check process wrote a row ({len(cut)} cut short)")
table = pd.concat(frames, ignore_index=True)
from workbench.gpu_check import CHECKS  # noqa: E402 - the order one process writes (shards interleave a check's rows)
table = table.sort_values("check", key=lambda c: c.map(lambda v: CHECKS.index(v) if v in CHECKS else len(CHECKS)),
                          kind="stable")
# the whole table's name only when every process finished: a cut-short run's rows stay a .partial.csv
target = f"{out}/{name}.csv" if not cut else f"{out}/{name}.partial.csv"
table.to_csv(target, index=False)
meta = done[0].replace(".csv", ".meta.json") if done else ""
if not cut and os.path.exists(meta):
    shutil.copy(meta, f"{out}/{name}.meta.json")
print(f"{os.path.basename(target)}: {len(table)} rows; {len(done)} of {len(done) + len(cut)} processes finished"
      + (f", cut short: {', '.join(cut)}" if cut else "") + f"; passed {int(table.passed.astype(bool).sum())}, "
      f"failed {int((~table.passed.astype(bool)).sum())}")
sys.exit(1 if cut else 0)
PY
elif [ "${SKIP_CHECK:-0}" != 1 ]; then
  python3 -m workbench check --out "$OUT" --force --name "correctness_$GPU_TAG.csv" ${CHECK_IMPLS:+--impls $CHECK_IMPLS} \
    2>&1 | tee "$OUT/check.log" | grep -v "it/s\]" ; rc=$((rc | PIPESTATUS[0]))
fi
checkpoint
if [ "${SKIP_PYTEST_GPU:-0}" != 1 ]; then
  stamp gpu_tests
  WORKBENCH_CHECK_OUT="$OUT" WORKBENCH_CHECK_NAME="correctness_${GPU_TAG}_pytest.csv" TRITON_INTERPRET=0 \
    timeout "${GPU_TEST_TIMEOUT:-540}" python3 -m pytest -m gpu -q -rfEs -p no:cacheprovider --continue-on-collection-errors ${GPU_TESTS:-tests} \
    2>&1 | tee "$OUT/pytest_gpu.log" | tail -40
  rc=$((rc | PIPESTATUS[0]))
  checkpoint
fi
tag() {  # "--case ID --combine serial" -> "_case-ID_combine-serial": a log name's suffix for extra arguments
  local t; t=$(echo "$*" | sed -E 's/--([a-z-]+) +([^ -][^ ]*)/\1-\2/g; s/(^| )--/\1/g; s/ +/_/g; s/^_+|_+$//g')
  [ -n "$t" ] && echo "_$t"
}
logged() {  # logged LOG CMD...: CMD's output in LOG, headed by CMD and ended by its exit status; a summary line
  local log="$1"; shift
  { echo "# $*"; timeout "${LOG_TIMEOUT:-300}" "$@" 2>&1; echo "# exit $?"; } > "$log"
  echo "$(basename "$log" .log): $(grep -E '^# exit|SUMMARY|passed=|probe \(' "$log" | tr '\n' ' ')"
  checkpoint
}
sanitize() {  # sanitize TOOL LOG-PREFIX IMPL: one kernel's sanitizer case under one tool
  if [ "$3" = auto ]; then  # check --sanitize takes a kernel: auto's are the rungs its rule picks
    echo "${2}_auto: not run: auto is not a kernel (name the kernels its rule picks)"; rc=1; return
  fi
  SANITIZED=1
  logged "$OUT/${2}_$3$(tag ${SANITIZER_FLAGS:-} ${SANITIZE_ARGS:-}).log" compute-sanitizer --tool "$1" --print-limit 20 \
    ${SANITIZER_FLAGS:-} python3 -m workbench check --sanitize "$3" ${SANITIZE_ARGS:-}
}
if [ "${SKIP_SANITIZE:-${SKIP_CHECK:-0}}" != 1 ]; then
  stamp sanitize
  for impl in ${SANITIZE_IMPLS:-${HERE_KERNELS:-$(python3 -c "from workbench.gpu_check import checked_impls; print(*checked_impls())")}}; do
    sanitize memcheck sanitizer "$impl"
  done
fi
for impl in ${RACECHECK_IMPLS:-}; do stamp racecheck "$impl"; sanitize racecheck racecheck "$impl"; done
for impl in ${SYNCCHECK_IMPLS:-}; do stamp synccheck "$impl"; sanitize synccheck synccheck "$impl"; done
if [ "${PF2_MEMCHECK:-0}" = 1 ]; then  # rung 15's PF 2 build, which no catalogue case reaches
  stamp pf2_memcheck
  SANITIZED=1
  logged "$OUT/sanitizer_wgmma_ws_h64_pf2.log" compute-sanitizer --tool memcheck --print-limit 20 \
    python3 scripts/memcheck_pf2.py
fi
if [ "${WS_PROBES:-0}" = 1 ]; then  # the race-free probes: what racecheck reports on Triton's protocol alone
  stamp ws_probes
  for v in "" "--blocks 528" "--pre --cbar --epi" "--pre --cbar --epi --blocks 528" \
           "--no-handoff --pre --cbar --epi --blocks 528" "--no-handoff --blocks 528" "--no-handoff --cbar --blocks 528" \
           "--no-handoff --pre --blocks 528" "--no-handoff --epi --blocks 528" "--no-handoff --capture --blocks 528" \
           "--no-handoff --capture --pre --blocks 528" "--capture --pre --cbar --epi --blocks 528"; do
    SANITIZED=1
    LOG_TIMEOUT=120 logged "$OUT/racecheck_probe$(tag $v || echo _plain).log" compute-sanitizer --tool racecheck --print-limit 20 \
      python3 scripts/ws_protocol_probe.py $v
  done
fi
if [ "${CLUSTER_PROBE:-0}" = 1 ]; then
  stamp cluster_probe
  LOG_TIMEOUT="${PROBE_CHECK_TIMEOUT:-120}" logged "$OUT/cluster_probe_check.log" \
    python3 scripts/cluster_share_probe.py --check
  if ! grep -q '^# exit 124$' "$OUT/cluster_probe_check.log"; then
    LOG_TIMEOUT=400 logged "$OUT/cluster_probe_time.log" \
      python3 scripts/cluster_share_probe.py --check --time --csv "$OUT/cluster_share.csv" ${CLUSTER_PROBE_ARGS:-}
  fi
  grep -hE '^(check|time) ' "$OUT"/cluster_probe_*.log
  for v in ${CLUSTER_PROBE_NCU:-}; do  # one launch of each variant at the first shape, under Nsight Compute
    LOG_TIMEOUT=120 logged "$OUT/ncu_cluster_probe_$v.txt" ncu --clock-control none -k regex:probe_kernel -c 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      python3 scripts/cluster_share_probe.py --time --rep 1 --variant "$v" ${CLUSTER_PROBE_ARGS:-}
  done
fi
if [ -n "${SANITIZED:-}" ]; then
  # the logs' provenance, beside them (workbench.report.results.load_sanitizer reads it once they are in data/sanitizer_*/)
  python3 -c "import sys; from workbench.report.provenance import write_meta; write_meta(sys.argv[1] + '/sanitizer.csv')" "$OUT"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for sweep in $SWEEPS; do
    stamp bench "$sweep"
    python3 -m workbench bench --sweep "$sweep" --out "$OUT" --force --name "bench_$sweep.csv" --no-progress 2>&1 \
      | tee "$OUT/bench_$sweep.log" | tail -40
    checkpoint
  done
fi
if [ -n "${BASELINE:-}" ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
  # the same sweeps from an earlier commit's tree (BASELINE: a folder holding `git archive <sha>`, carried as an
  # ignored path), in the same device call, so a kernel change is judged against the code it replaces measured in
  # one run; its rows carry BASELINE_COMMIT as their commit
  for sweep in $SWEEPS; do
    stamp baseline "$sweep"
    (cd "$BASELINE" && PYTHONPATH=/tmp/site WORKBENCH_COMMIT="${BASELINE_COMMIT:-baseline}" \
      python3 -m workbench bench --sweep "$sweep" --out "$OUT/baseline" --name "bench_$sweep.csv" --no-progress 2>&1 \
      | tee "$OUT/baseline_bench_$sweep.log" | tail -20)
    checkpoint
  done
fi
if [ -n "${EXPLORE:-}" ]; then
  # scripts/explore.py's providers at EXPLORE_ARGS's shapes (default: the headline shapes), each checked against the
  # fp32 reference before it is timed: a same-call A/B quicker than a sweep. With PATCHES (or BASELINE) the tree
  # before the patches runs the same command after it, into $OUT/baseline/explore.csv, under the plain commit
  here=$PWD
  explore() {  # explore NAME CSV LOG PROVIDERS ARGS: this tree's explore.py into CSV and LOG; its exit status,
    # said, joins rc
    stamp "$1"
    timeout "${EXPLORE_TIMEOUT:-300}" python3 "$here/scripts/explore.py" $4 $5 --csv "$2" > "$3" 2>&1
    local x=$?; rc=$((rc | x)); echo "$1: exit $x"; grep -v "it/s\]" "$3" | tail -60
    checkpoint
  }
  explore explore "$OUT/explore.csv" "$OUT/explore.log" "$EXPLORE" "${EXPLORE_ARGS:-}"
  if [ -n "${BASELINE:-}" ]; then
    mkdir -p "$OUT/baseline"
    # the same script on the baseline's package: PYTHONPATH comes before the script's folder in what `import
    # workbench` finds, and the script's folder holds no package
    cd "$BASELINE"
    PYTHONPATH="/tmp/site:$BASELINE" WORKBENCH_COMMIT="${BASELINE_COMMIT:-baseline}" \
      explore "baseline explore" "$OUT/baseline/explore.csv" "$OUT/baseline_explore.log" \
      "${BASELINE_EXPLORE:-$EXPLORE}" "${BASELINE_EXPLORE_ARGS:-${EXPLORE_ARGS:-}}"
    cd "$here"
  fi
fi
for item in ${NCU:-}; do
  impl="${item%%=*}"; cfg="${item#*=}"
  stamp ncu "$impl"
  kname=partial; [ "$impl" = flashmla ] && kname=splitkv  # FlashMLA's partial: flash_fwd_splitkv_mla_fp8_sparse_kernel
  count=1  # the partial of the last call (workbench.lab.profile runs it in the NVTX range "profiled"); with its
  # combine, the launch after it (FlashMLA's: flash_fwd_mla_combine_kernel)
  [ -n "${NCU_COMBINE:-}" ] && { kname="$kname|combine"; count=2; }
  tag="h${NCU_HEADS:-16}${NCU_BATCH:+_b$NCU_BATCH}${NCU_TOPK:+_k$NCU_TOPK}"
  timeout 300 ncu --clock-control none --nvtx --nvtx-include "profiled/" --kernel-name "regex:$kname" --launch-count $count \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SourceCounters --section MemoryWorkloadAnalysis --print-details all \
    --metrics "$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' long_scoreboard short_scoreboard \
      barrier wait math_pipe_throttle mio_throttle lg_throttle not_selected selected dispatch_stall membar \
      no_instruction drain imc_miss branch_resolving tex_throttle sleeping | sed 's/,$//')" \
    ${NCU_SOURCE:+-f -o /tmp/ncu_$impl --import-source no} \
    python3 -m workbench.lab.profile --impl "$impl" --heads "${NCU_HEADS:-16}" --batch "${NCU_BATCH:-64}" \
      --topk "${NCU_TOPK:-2048}" --config "$cfg" > "$OUT/ncu_${impl}_$tag.txt" 2>&1
  status=$?; [ $status -ne 0 ] && rc=1  # the profile's own status, not the imports' below
  if [ -n "${NCU_SOURCE:-}" ]; then  # the report went to a file: print its details, and every SASS line's counters
    ncu --import "/tmp/ncu_$impl.ncu-rep" --print-details all >> "$OUT/ncu_${impl}_$tag.txt" 2>&1
    ncu --import "/tmp/ncu_$impl.ncu-rep" --page source --print-source sass --csv \
      > "$OUT/ncu_source_${impl}_$tag.csv" 2>&1
  fi
  echo "ncu $impl: exit $status; $(grep -E 'Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput' "$OUT/ncu_${impl}_$tag.txt" | tr -s ' ' | tr '\n' ';')"
  checkpoint
done
exit $rc
