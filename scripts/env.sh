# Sourced by the README commands: make .venv with the pinned CPU stack once, reuse it after.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.lock-$(sha1sum "$ROOT/requirements.lock" "$ROOT/pyproject.toml" | sha1sum | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  echo "[env] creating $VENV from requirements.lock (first run takes a few minutes)"
  LOG="$(mktemp)"
  # The lock asks for torch's CPU build ("+cpu" on Linux x86_64): where the configured index does not carry it
  # (plain PyPI only has the CUDA build there), retry once with PyTorch's CPU index, never the CUDA wheel.
  TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
  install_lock() {
    "$VENV/bin/python" -m pip install -r "$ROOT/requirements.lock" "$@" >"$LOG.lock" 2>&1 && cat "$LOG.lock" && return
    local rc=$?; cat "$LOG.lock"
    grep -q "No matching distribution found for torch" "$LOG.lock" || return $rc
    echo "[env] torch's CPU build is not on the configured index; retrying with $TORCH_CPU_INDEX"
    "$VENV/bin/python" -m pip install -r "$ROOT/requirements.lock" --extra-index-url "$TORCH_CPU_INDEX" "$@"
  }
  {
    python3 -m venv "$VENV" &&
    "$VENV/bin/python" -m pip install --upgrade pip &&
    install_lock &&
    "$VENV/bin/python" -m pip install --no-deps -e "$ROOT" &&
    "$VENV/bin/python" -m ipykernel install --prefix "$VENV" --name mla-workbench --display-name "MLA workbench"
  } >"$LOG" 2>&1 || { grep -v "^WARNING: Location" "$LOG" | tail -40; echo "[env] install failed (log: $LOG)"; exit 1; }
  touch "$STAMP"
  echo "[env] ready"
fi
export PATH="$VENV/bin:$PATH"
export JUPYTER_PATH="$VENV/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
cd "$ROOT"
