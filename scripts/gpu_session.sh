#!/usr/bin/env bash
# Everything the H200 is needed for, in one device call: correctness table, compute-sanitizer,
# and a benchmark sweep. Results go to $OUT; copy them into data/ afterwards.
# Usage (device tool, carry .golden and .whl): WORKBENCH_COMMIT=<sha> bash scripts/gpu_session.sh [sweep]
# SKIP_CHECK=1 or SKIP_BENCH=1 leave a part out (to fit the 10-minute limit of one call).
set -uo pipefail
SWEEP="${1:-smoke}"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 WORKBENCH_GOLDEN="$PWD/.golden" TRITON_CACHE_DIR=/tmp/triton-cache
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || echo "flash_mla wheel did not install"
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
rc=0
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  python3 -m workbench check --out "$OUT" 2>&1 | tee "$OUT/check.log" | grep -v "it/s\]" ; rc=$((rc | PIPESTATUS[0]))
  for impl in mma simt; do
    timeout 240 compute-sanitizer --tool memcheck --print-limit 20 python3 -m workbench check --sanitize $impl \
      > "$OUT/sanitizer_$impl.log" 2>&1
    echo "compute-sanitizer $impl: exit $?; $(grep -E 'ERROR SUMMARY|passed=' "$OUT/sanitizer_$impl.log" | tr '\n' ' ')"
  done
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  python3 -m workbench bench --sweep "$SWEEP" --out "$OUT" --no-progress 2>&1 | tee "$OUT/bench.log" | tail -60
fi
exit $rc
