#!/bin/bash
# AutoAttack's standard version on all 10,000 CIFAR-10 test images on one GPU, one model
# after another, for a session lent a device machine:
#
#   run(command="bash benchmarks/gpu_autoattack.sh CKPT...", carry=[".devdata"], timeout_s=560)
#
# .devdata/cifar10 (ignored by git) holds test_batch.bin.gz and batches.meta.txt from the
# shared data: an evaluation reads the test split alone, and the whole dataset does not fit a
# call's carry. Float32 convolutions run at full precision (no TF32), as on the CPU, so the
# decisions are the model's own; PRECISION=tensorfloat32 runs them in TF32, as PyTorch's
# cuDNN convolutions do by default, to measure what that buys and which decisions it moves.
# Each model has until a shared deadline (BUDGET_S seconds from the start); a model cut off
# keeps its records, and the same command resumes it.
# Writes $OUT/log.txt (machine, versions, each model's wall time) and $OUT/<model>/ with
# records.jsonl.gz and summary.json (report.html is left out: the same command run again on
# the CPU over the returned records attacks nothing and writes it). Every run keeps its
# compiled programs in JAX's persistent cache (ADVJAX_COMPILE_CACHE, default /tmp/aa_cache);
# WARM=1 runs the first model a second time into $OUT/<model>_warm, which times the same
# evaluation with every program already compiled.
set -o pipefail
export PYTHONUNBUFFERED=1 JAX_DEFAULT_MATMUL_PRECISION=${PRECISION:-highest}
OUT=${OUT:-/tmp/gpu_autoattack}
DATA=${DATA:-.devdata/cifar10}
BATCH=${BATCH:-2500}
BUDGET_S=${BUDGET_S:-500}
export ADVJAX_COMPILE_CACHE=${ADVJAX_COMPILE_CACHE:-/tmp/aa_cache}
WARM=${WARM:-0}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
start=$(date +%s)
{
  echo "command: bash benchmarks/gpu_autoattack.sh $* (BATCH=$BATCH, BUDGET_S=$BUDGET_S, WARM=$WARM, PRECISION=$JAX_DEFAULT_MATMUL_PRECISION)"
  echo "git revision: ${GIT_REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi -L
  python3 -c "import jax, jaxlib, flax, optax, chex; print('jax', jax.__version__, 'jaxlib', \
jaxlib.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'chex', \
chex.__version__, jax.devices())"
} 2>&1 | tee "$LOG"
runs=("$@")
if [ "$WARM" = 1 ] && [ $# -gt 0 ]; then runs=("$1" "$1#warm" "${@:2}"); fi
for run in "${runs[@]}"; do
  ckpt=${run%#warm}
  name=$(basename "$ckpt" .msgpack)
  [ "$run" != "$ckpt" ] && name="${name}_warm"
  left=$((start + BUDGET_S - $(date +%s)))
  if [ "$left" -lt 30 ]; then
    echo "$name: not started ($left s left of the budget)" | tee -a "$LOG"
    continue
  fi
  t0=$(date +%s.%N)
  timeout -s INT -k 20 "$left" python3 -m advjax.evaluate --checkpoint "$ckpt" \
    --data-dir "$DATA" --n 10000 --eps 8/255 --batch-size "$BATCH" --out "$OUT/$name" --name "$(basename "$ckpt" .msgpack)" \
    >"$OUT/$name.out" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  grep -E "robust accuracy|members:|apgd-ce target 0|error" "$OUT/$name.out" | tee -a "$LOG"
  tail -n 25 "$OUT/$name.out" >>"$LOG"
  rm -f "$OUT/$name.out" "$OUT/$name/report.html"  # at most 8 files come back
  echo "$name: exit $rc, wall $(python3 -c "print(round($t1 - $t0, 1))") s" | tee -a "$LOG"
done
ls -lR "$OUT" | tee -a "$LOG"
