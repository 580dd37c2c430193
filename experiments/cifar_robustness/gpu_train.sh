#!/bin/bash
# Train robust_cnn models on a lent GPU machine and bring back their checkpoints, for a
# session whose task draws one. The CIFAR-10 training split (141 MB gzipped) is larger than
# one call's 64 MiB, so it travels in three parts, one call each, while the machine stays
# warm (30 s between calls), and the tracked results/ (86 MB) must stay behind:
#
#   here, once:  bash experiments/cifar_robustness/gpu_train.sh --stage   # .devtrain_{a,b,c}
#                mv results /tmp/results_aside                            # back after the calls
#   device:      run("bash experiments/cifar_robustness/gpu_train.sh --receive a", carry=[".devtrain_a"])
#                run("bash experiments/cifar_robustness/gpu_train.sh --receive b", carry=[".devtrain_b"])
#                run("bash experiments/cifar_robustness/gpu_train.sh --receive r", carry=[".devtrain_r"])
#                                                       # only where --stage made .devtrain_r
#                run("BUDGET_S=480 bash experiments/cifar_robustness/gpu_train.sh --train \
#                     pgd_silu_scratch_flip_ema,pgd_silu_scratch_flip \
#                     pgd_silu_scratch_batch64_ema,pgd_silu_scratch_batch64",
#                    carry=[".devtrain_c"], timeout_s=560)
#
# Each argument of --train is one training process (a comma-separated model list of the
# robust_cnn profile, trained by `python -m experiments.cifar_robustness --train-only`);
# the processes share the GPU. Float32 at full precision (no TF32), as on the CPU. At the
# deadline (BUDGET_S seconds from the start) each process gets Ctrl-C: it keeps its last
# finished epoch in training_progress/, which comes back and resumes the same training,
# here or on the CPU, when copied into the profile's folder. Writes $OUT/log.txt and
# $OUT/<first model>/{checkpoints,training_progress}/*.msgpack (EXTRA_ARGS, e.g. a --set,
# go to every process; a rehearsal on the CPU runs the whole flow small); copy those into
# results/cifar10/robust_cnn/ and run the profile with --models there to evaluate them.
#
# A training begun elsewhere (its last finished epoch in RESUME_FROM, by default
# results/cifar10/robust_cnn/levers/training_progress/) goes on from there: --stage also
# puts those files in .devtrain_r, `--receive r` (carry=[".devtrain_r"]) sends them, and
# --train starts each group whose first model has one from it.
set -o pipefail
export PYTHONUNBUFFERED=1 JAX_DEFAULT_MATMUL_PRECISION=highest
SRC=${ADVJAX_DATA_DIR:-../shared/data/cifar10}
DATA=${DATA:-/tmp/advjax_cifar10}
OUT=${OUT:-/tmp/gpu_train}
BUDGET_S=${BUDGET_S:-480}
RESUME_FROM=${RESUME_FROM:-results/cifar10/robust_cnn/levers/training_progress}
PARTS=(a:data_batch_1,data_batch_2,batches.meta b:data_batch_3,data_batch_4 c:data_batch_5,test_batch)

git_ignore() {  # staged folder $1 stays out of git, so a device call takes it only when carried
  grep -qx "/$1/" .git/info/exclude 2>/dev/null || echo "/$1/" >>.git/info/exclude
}

part_files() {  # the files of part $1, one per line
  for entry in "${PARTS[@]}"; do
    [ "${entry%%:*}" = "$1" ] || continue
    tr ',' '\n' <<<"${entry#*:}" | sed -e 's/batches.meta$/batches.meta.txt/' \
      -e '/\.txt$/!s/$/.bin.gz/'
  done | sort -u
}

case "$1" in
--stage)
  for p in a b c; do
    rm -rf ".devtrain_$p" && mkdir -p ".devtrain_$p"
    part_files "$p" | while read -r f; do cp "$SRC/$f" ".devtrain_$p/" || exit 1; done
    git_ignore ".devtrain_$p"
    du -sh ".devtrain_$p"
  done
  rm -rf .devtrain_r
  if compgen -G "$RESUME_FROM/*.msgpack" >/dev/null; then
    mkdir -p .devtrain_r && cp "$RESUME_FROM"/*.msgpack .devtrain_r/ || exit 1
    git_ignore .devtrain_r
    du -sh .devtrain_r
  fi
  ;;
--receive)
  if [ "$2" = r ]; then
    mkdir -p "$DATA/progress" && cp .devtrain_r/* "$DATA/progress/" && ls -l "$DATA/progress"
  else
    mkdir -p "$DATA" && cp ".devtrain_$2"/* "$DATA"/ && ls -l "$DATA"
  fi
  ;;
--train)
  shift
  mkdir -p "$DATA"
  for p in a b c; do [ -d ".devtrain_$p" ] && cp -f ".devtrain_$p"/* "$DATA"/ && chmod u+w "$DATA"/*; done
  for p in a b c; do
    for f in $(part_files "$p"); do
      if [ ! -s "$DATA/$f" ]; then
        echo "missing $DATA/$f: send part $p (--receive $p) on this machine before --train" >&2
        exit 2
      fi
    done
  done
  mkdir -p "$OUT"
  LOG="$OUT/log.txt"
  {
    echo "command: bash experiments/cifar_robustness/gpu_train.sh --train $* (BUDGET_S=$BUDGET_S)"
    echo "git revision: ${GIT_REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
    nvidia-smi -L
    python3 -c "import jax, jaxlib, flax, optax; print('jax', jax.__version__, 'jaxlib', \
jaxlib.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
  } 2>&1 | tee "$LOG"
  export XLA_PYTHON_CLIENT_MEM_FRACTION=$(python3 -c "print(round(0.9 / $#, 2))")
  start=$(date +%s)
  pids=()
  for group in "$@"; do
    name=${group%%,*}
    mkdir -p "$OUT/$name"
    staged="$DATA/progress/$name.msgpack"
    if [ -s "$staged" ] && [ ! -e "$OUT/$name/training_progress/$name.msgpack" ]; then
      mkdir -p "$OUT/$name/training_progress" && cp "$staged" "$OUT/$name/training_progress/"
      echo "$name: goes on from the staged progress" | tee -a "$LOG"
    fi
    timeout -s INT -k 60 "$BUDGET_S" python3 -m experiments.cifar_robustness --profile robust_cnn \
      --train-only --no-progress --data-dir "$DATA" --out "$OUT/$name" --models ${group//,/ } $EXTRA_ARGS \
      >"$OUT/$name.out" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    group=${*:$((i + 1)):1}
    name=${group%%,*}
    { grep -E "epoch|resum|Error|error|msgpack" "$OUT/$name.out" | tail -n 60
      echo "$name: exit $rc after $(($(date +%s) - start)) s"; } | tee -a "$LOG"
    rm -f "$OUT/$name.out"
    rm -f "$OUT/$name/.advjax.lock"
  done
  ls -lR "$OUT" | tee -a "$LOG"
  ;;
*)
  echo "usage: $0 --stage | --receive a|b|c|r | --train MODEL[,MODEL...] ..." >&2
  exit 2
  ;;
esac
