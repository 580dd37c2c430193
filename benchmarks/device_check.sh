#!/bin/bash
# The prepared GPU check of the performance issue, for a session lent a device machine:
#
#   run(command="bash benchmarks/device_check.sh", timeout_s=540)
#
# The device image has jax (CUDA), flax, optax, chex, pytest and matplotlib; nothing is
# installed. It writes into $OUT (at most 8 files come back): the JAX-only benchmark table
# of the same workloads as the CPU runs (the PyTorch reference is CPU-only and its script
# lives in ../shared, which does not travel) and a test run of the numerics that must hold
# on any backend (attacks, model, training steps; the GPU's TF32 convolutions may not meet
# the CPU tolerances, which is itself a finding to report).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/device_check}
mkdir -p "$OUT"
{
  nvidia-smi -L
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"
} 2>&1 | tee "$OUT/machine.txt"
timeout 300 python3 -m benchmarks.run --no-torch --rounds 1 --out "$OUT" 2>&1 | tail -40 > "$OUT/bench.log"
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/attacks/test_pgd.py tests/model/test_cnn.py \
  tests/train/test_train.py 2>&1 | tail -30 > "$OUT/tests.log"
ls -l "$OUT"
