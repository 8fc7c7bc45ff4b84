# Sourced by the README commands: make .venv with the pinned CPU stack once, reuse it after.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.lock-$(sha1sum "$ROOT/requirements.lock" "$ROOT/pyproject.toml" | sha1sum | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  echo "[env] creating $VENV from requirements.lock (first run takes a few minutes)"
  LOG="$(mktemp)"
  {
    python3 -m venv "$VENV" &&
    "$VENV/bin/python" -m pip install --upgrade pip &&
    "$VENV/bin/python" -m pip install -r "$ROOT/requirements.lock" &&
    "$VENV/bin/python" -m pip install --no-deps -e "$ROOT" &&
    "$VENV/bin/python" -m ipykernel install --prefix "$VENV" --name mla-workbench --display-name "MLA workbench"
  } >"$LOG" 2>&1 || { grep -v "^WARNING: Location" "$LOG" | tail -40; echo "[env] install failed (log: $LOG)"; exit 1; }
  touch "$STAMP"
  echo "[env] ready"
fi
export PATH="$VENV/bin:$PATH"
export JUPYTER_PATH="$VENV/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
cd "$ROOT"
