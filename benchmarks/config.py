"""Benchmark configuration, the workload list and the analytic FLOP model.

The FLOP counts come from `../shared/peers/README.md` (per image: forward 58.9 MFLOP, training
step 175 MFLOP, PGD-20 2,416 MFLOP). A backward pass with respect to the input only costs about
one forward (PGD-20 = 20 x (forward + input-backward) + final forward = 41 x 58.9 = 2,415 MFLOP),
and a training step about three forwards (3 x 58.9 = 177 ~ 175). The derived counts are:

* FGSM attack = forward + input-backward + the final forward that scores the attacked batch
  = 3 x 58.9 = 176.7 MFLOP per image;
* FGSM adversarial training (clean + adv) = FGSM generation on the clean batch (forward +
  input-backward, 2 x 58.9) + one training step on the doubled batch (2 x 175)
  = 467.8 MFLOP per clean image (images/s counts clean images, as the reference does);
* PGD-20 with 4 restarts = 4 x 2,416 MFLOP per image (the work of four 1-restart runs).

Only this useful work is counted; extra evaluations that advjax's PGD does to track the
first-broken iterate are not, so GFLOP/s is an efficiency figure, not a hardware counter.
"""

import dataclasses
import math

FORWARD_MFLOP = 58.9
TRAIN_STEP_MFLOP = 175.0
PGD20_MFLOP = 2416.0
EPS = 8 / 255


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """Every size of one benchmark run (defaults: the reference's full protocol).

    Attributes:
      reps: measured repetitions per framework and workload, over all rounds together.
      rounds: the workload list is run this many times, alternating JAX and PyTorch, and the
        repetitions are split between rounds so slow drifts of machine load hit both.
      train_batch: images per training step.
      train_steps: training steps per repetition (the reference's `--steps`).
      n_data: size of the synthetic training pool the batches are drawn from.
      eval_batch: batch size of attacks and inference.
      n_eval: images per attack / inference repetition.
      pgd_steps: PGD iterations.
      matmul_size: side of the square float32 matmul that measures the peak.
      matmul_reps: repetitions of that matmul.
    """

    reps: int = 4
    rounds: int = 2
    train_batch: int = 128
    train_steps: int = 10
    n_data: int = 15000
    eval_batch: int = 250
    n_eval: int = 1000
    pgd_steps: int = 20
    matmul_size: int = 2048
    matmul_reps: int = 20

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field.name}={value!r} must be an integer >= 1")
        if self.n_eval % self.eval_batch:
            raise ValueError(
                f"n_eval={self.n_eval} must be a multiple of eval_batch={self.eval_batch}"
            )
        if self.n_data < self.train_batch:
            raise ValueError(f"n_data={self.n_data} must be >= train_batch={self.train_batch}")

    @property
    def reps_per_round(self) -> int:
        """Repetitions each round measures (the total is rounded up to a multiple of rounds)."""
        return math.ceil(self.reps / self.rounds)


PROFILES: dict[str, BenchConfig] = {
    "full": BenchConfig(),
    # ~2 minutes on 2 idle cores: checks that everything runs, numbers are indicative only.
    "quick": BenchConfig(
        reps=2, rounds=1, train_steps=2, n_data=2048, eval_batch=50, n_eval=100, matmul_reps=5
    ),
}


@dataclasses.dataclass(frozen=True)
class WorkloadSpec:
    """One row of the benchmark table.

    Attributes:
      key: short identifier used in the JSON.
      label: the row label (`{n}` is replaced by the number of images).
      kind: "train" (a TrainConfig mode follows in `mode`) or an eval kind: fgsm, pgd, infer.
      mode: TrainConfig mode for training workloads.
      restarts: PGD restarts.
      torch_workload: the torch_reference.py workload to compare against, or None.
      torch_divisor: torch images/s are divided by this (4 for the 4-restart row).
      torch_from: reuse the torch measurements of this row instead of running torch again.
    """

    key: str
    label: str
    kind: str
    mode: str = "standard"
    restarts: int = 1
    torch_workload: str | None = None
    torch_divisor: int = 1
    torch_from: str | None = None

    def mflop_per_image(self, pgd_steps: int) -> float:
        """Analytic MFLOP per image (per clean image for FGSM adversarial training)."""
        if self.kind == "train":
            if self.mode == "fgsm":
                return 2 * FORWARD_MFLOP + 2 * TRAIN_STEP_MFLOP
            return TRAIN_STEP_MFLOP
        if self.kind == "fgsm":
            return 3 * FORWARD_MFLOP
        if self.kind == "pgd":
            return self.restarts * PGD20_MFLOP * (2 * pgd_steps + 1) / 41
        return FORWARD_MFLOP


WORKLOADS: tuple[WorkloadSpec, ...] = (
    WorkloadSpec("train", "train step", "train", torch_workload="train"),
    WorkloadSpec(
        "fgsm_at",
        "FGSM adversarial training, clean+adv",
        "train",
        mode="fgsm",
        torch_workload="fgsm_at_mix",
    ),
    WorkloadSpec("fgsm", "FGSM on {n} images", "fgsm", torch_workload="fgsm"),
    WorkloadSpec("pgd", "PGD-{steps} on {n} images, 1 restart", "pgd", torch_workload="pgd"),
    WorkloadSpec(
        "pgd4",
        "PGD-{steps} on {n} images, 4 restarts",
        "pgd",
        restarts=4,
        torch_divisor=4,
        torch_from="pgd",
    ),
    WorkloadSpec("infer", "clean inference on {n} images", "infer", torch_workload="infer"),
)
