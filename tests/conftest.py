"""Shared fixtures: real CIFAR-10, a briefly trained CompactCNN, and a tiny linear model.

Strict rank promotion is on for the whole suite (STYLE.md item 14): implicit broadcasting
between arrays of different ranks raises instead of silently broadcasting.

Real-data fixtures need ``ADVJAX_DATA_DIR`` (a folder with the official binary CIFAR-10
files) and skip the tests that use them otherwise.
"""

import atexit
import os
import shutil
import tempfile
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax import backend

backend.configure()  # the suite runs with the XLA CPU settings the entry points use
jax.config.update("jax_numpy_rank_promotion", "raise")
# One compilation cache per run, empty at its start: identical programs that tests build
# from fresh closures compile once.
_CACHE = tempfile.mkdtemp(prefix="advjax-tests-xla-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

from advjax.data import DATA_DIR_ENV, Cifar10, load_cifar10, stratified_indices  # noqa: E402
from advjax.records import ROBUST_STATUSES, CaseRecord  # noqa: E402
from advjax_train import (  # noqa: E402
    Batch,
    CompactCNN,  # noqa: E402
    FitResult,
    TrainConfig,
    fit,
)

# ---------------------------------------------------------------------------
# A tiny linear model for fast attack property tests.

LINEAR_SHAPE = (8, 8, 3)
LINEAR_CLASSES = 10


def make_linear_logits_fn(seed: int = 0) -> Callable[[jax.Array], jax.Array]:
    """A fixed random linear classifier on (B, 8, 8, 3) inputs: logits = flat(x) @ W + b."""
    w_key, b_key = jax.random.split(jax.random.key(seed))
    dim = int(np.prod(LINEAR_SHAPE))
    w = jax.random.normal(w_key, (dim, LINEAR_CLASSES)) / np.sqrt(dim)
    b = 0.1 * jax.random.normal(b_key, (LINEAR_CLASSES,))

    def logits_fn(x: jax.Array) -> jax.Array:
        return x.reshape(x.shape[0], -1) @ w.astype(x.dtype) + b.astype(x.dtype)[None, :]

    return logits_fn


def linear_weights(logits_fn) -> tuple[np.ndarray, np.ndarray]:
    """(W, b) of a linear `logits_fn` on 8x8x3 inputs, read off its outputs in float64."""
    dim = 8 * 8 * 3
    b = np.asarray(logits_fn(jnp.zeros((1, 8, 8, 3))), np.float64)[0]
    w = np.asarray(logits_fn(jnp.eye(dim).reshape(dim, 8, 8, 3)), np.float64) - b
    return w, b


def numpy_ce_and_grad(w, b, x, y):
    """Per-example cross-entropy of x @ W + b and its input gradient, in closed form."""
    flat = x.reshape(len(x), -1).astype(np.float64)
    z = flat @ w + b
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y])
    p[np.arange(len(y)), y] -= 1.0
    return loss, (p @ w.T).reshape(x.shape), z.argmax(axis=1) != y


def make_linear_batch(seed: int = 0, n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Pixels uniform in [0, 1] (as numpy float32) and int32 labels in [0, 10)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, size=(n, *LINEAR_SHAPE)).astype(np.float32)
    y = rng.integers(0, LINEAR_CLASSES, size=n).astype(np.int32)
    return x, y


@pytest.fixture(scope="session")
def linear_logits_fn() -> Callable[[jax.Array], jax.Array]:
    return make_linear_logits_fn()


DUAL_ORDER = {"linf": 1, "l2": 2}


def linear_boundary_case(seed: int = 0, *, classes: int = 6, batch: int = 8, dim: int = 48):
    """A linear model and points well inside [0, 1] whose nearest boundary is the runner-up
    class's, with the exact minimal adversarial distance per norm in closed form (NumPy).

    Each x solves (w_y - w_k) . (x - 1/2) = m (small, m in [0.05, 0.3]) for the runner-up t
    and = 2 for every other k; the minimal distance is the smallest over k != y of
    (z_y - z_k) / ||w_y - w_k||_dual (the box never binds that close to the boundary).
    Returns (logits_fn, x, y, exact) with exact = {"linf": (batch,), "l2": (batch,)}.
    """
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(dim, classes))
    xs, ys = [], []
    for _ in range(batch):
        y, t = rng.choice(classes, 2, replace=False)
        others = [k for k in range(classes) if k != y]
        a = np.stack([w[:, y] - w[:, k] for k in others])
        goal = np.where(np.array(others) == t, rng.uniform(0.05, 0.3), 2.0)
        x0 = rng.uniform(0.45, 0.55, dim)
        xs.append(x0 + a.T @ np.linalg.solve(a @ a.T, goal - a @ (x0 - 0.5)))
        ys.append(y)
    x, y = np.stack(xs), np.asarray(ys)
    assert np.all((x > 0.25) & (x < 0.75))
    z = (x - 0.5) @ w
    exact = {}
    for norm, dual in DUAL_ORDER.items():
        with np.errstate(divide="ignore", invalid="ignore"):  # k == y: masked below
            gaps = np.stack(
                [(z[np.arange(batch), y] - z[:, k])
                 / np.linalg.norm(w[:, y] - w[:, [k]], dual, axis=0) for k in range(classes)],
                axis=1,
            )  # fmt: skip
        gaps[np.arange(batch), y] = np.inf
        exact[norm] = gaps.min(axis=1)
    assert np.all(exact["linf"] < 0.2)  # inside the box: the closed form is the minimum
    wj = jnp.asarray(w, jnp.float32)
    logits_fn = lambda v: (v.reshape(v.shape[0], -1) - 0.5) @ wj  # noqa: E731
    return logits_fn, jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32), exact


def tanh_mlp(seed: int = 0, shape=(4, 4, 3), hidden: int = 32, classes: int = 10):
    """A small fixed tanh network on (B, *shape) inputs (not linear: boundary estimates of
    minimum-norm attacks are approximate on it)."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    d = int(np.prod(shape))
    w1 = jax.random.normal(k1, (d, hidden)) * 3.0 / np.sqrt(d)
    w2 = jax.random.normal(k2, (hidden, classes)) / np.sqrt(hidden)
    return lambda z: jnp.tanh(z.reshape(z.shape[0], -1) @ w1 - 1.5) @ w2


def tanh_mlp_batch(batch: int = 8, seed: int = 1):
    """`tanh_mlp()`, uniform (batch, 4, 4, 3) inputs and its own predictions as labels."""
    logits_fn = tanh_mlp()
    x = jax.random.uniform(jax.random.key(seed), (batch, 4, 4, 3))
    return logits_fn, x, jnp.argmax(logits_fn(x), -1)


# ---------------------------------------------------------------------------
# Per-case records.


def case_record(
    case_id: int = 0,
    *,
    status: str = "success",
    true_class: int = 3,
    eps: float = 8 / 255,
    **overrides,
) -> CaseRecord:
    """A `CaseRecord` whose predictions and first-break fields agree with `status`.

    clean_pred is wrong (true_class + 1) only for skipped_clean_wrong; adv_pred is right
    (true_class) only for failed / budget_exhausted; success broke at step 1 of restart 0,
    every other status never broke. linf = l2 = eps; the other fields are neutral constants
    (loss 1.0, 10 queries, model "m", attack "pgd", hashes "mh" / "ah" / "th") and
    key_path is (0, case_id). `overrides` (any `CaseRecord` field) are applied last.
    """
    broke = status == "success"
    fields = dict(
        case_id=case_id,
        true_class=true_class,
        clean_pred=true_class + 1 if status == "skipped_clean_wrong" else true_class,
        adv_pred=true_class if status in ROBUST_STATUSES else true_class + 1,
        final_loss=1.0,
        linf=eps,
        l2=eps,
        first_break_step=1 if broke else None,
        first_break_restart=0 if broke else None,
        queries=10,
        status=status,
        model="m",
        model_hash="mh",
        attack="pgd",
        attack_config_hash="ah",
        threat_model_hash="th",
        eps=eps,
        key_path=(0, case_id),
    )
    fields.update(overrides)
    return CaseRecord(**fields)


# ---------------------------------------------------------------------------
# Real CIFAR-10 and a briefly trained CompactCNN.

TRAIN_SIZE, VAL_SIZE, EVAL_SIZE = 3000, 500, 150
TRAIN_CONFIG = TrainConfig(
    epochs=3, batch_size=50, learning_rate=2e-3, dropout_rate=0.0, augment=False, seed=0
)


@pytest.fixture(scope="session")
def cifar10() -> Cifar10:
    """Real CIFAR-10 from $ADVJAX_DATA_DIR (skips the test when it is not set)."""
    if not os.environ.get(DATA_DIR_ENV):
        pytest.skip(f"{DATA_DIR_ENV} is not set")
    return load_cifar10()


class TrainedRun(NamedTuple):
    config: TrainConfig
    result: FitResult
    val: Batch


class TrainedModel(NamedTuple):
    model: CompactCNN
    variables: dict
    x: jax.Array  # float32 eval images in [0, 1]
    y: jax.Array  # int32 labels


@pytest.fixture(scope="session")
def trained_run(cifar10) -> TrainedRun:
    """`fit` of CompactCNN on a stratified 3,000-image subset for 3 epochs (~20-40 s)."""
    key = jax.random.key(0)
    train_idx = stratified_indices(cifar10.train_labels, TRAIN_SIZE, jax.random.fold_in(key, 0))
    val_idx = stratified_indices(
        cifar10.train_labels, VAL_SIZE, jax.random.fold_in(key, 1), exclude=train_idx
    )
    train = Batch(cifar10.train_images[train_idx], cifar10.train_labels[train_idx])
    val = Batch(cifar10.train_images[val_idx], cifar10.train_labels[val_idx])
    result = fit(TRAIN_CONFIG, train, val, show_progress=False, log=lambda _: None)
    return TrainedRun(TRAIN_CONFIG, result, val)


@pytest.fixture(scope="session")
def trained_model(cifar10, trained_run) -> TrainedModel:
    """(model, variables, x_eval float32 in [0, 1], y_eval) with 150 stratified test images."""
    state = trained_run.result.state
    model = CompactCNN(dropout_rate=trained_run.config.dropout_rate)
    variables = {"params": state.params, "batch_stats": state.batch_stats}
    idx = stratified_indices(cifar10.test_labels, EVAL_SIZE, jax.random.key(2))
    x = jnp.asarray(cifar10.test_images[idx], jnp.float32) / 255.0
    y = jnp.asarray(cifar10.test_labels[idx], jnp.int32)
    return TrainedModel(model, variables, x, y)


SLOW_FIXTURES = {"worker", "trained_run", "trained_model", "quick_run"}
"""Fixtures that make a test slow: `worker` runs a 4-device JAX process (tests/test_sharding.py),
`trained_run` and `trained_model` train a CompactCNN on real data, `quick_run` runs the quick
profile of the study end to end (tests/experiments/test_cifar_study.py)."""


SLOW_TESTS = frozenset(
    {
        "tests/attacks/test_apgd.py::JitOfTheCallerTest::test_apgd_ce_and_targeted_dlr_called_eagerly_equal_the_jitted_program__without_jit",
        "tests/attacks/test_fab.py::test_at_least_as_strong_as_pgd",
        "tests/attacks/test_fab.py::test_budget_box_and_misclassification[linf-0.03]",
        "tests/attacks/test_fab.py::test_jit_same_key_same_result_and_batch_independence",
        "tests/attacks/test_square_l2.py::JitOfTheCallerTest::test_the_eager_call_equals_the_jitted_program__without_jit",
        "tests/attacks/test_square_l2.py::test_a_case_gives_the_same_result_alone_and_within_a_batch",
        "tests/attacks/test_square_l2.py::test_autoattack_l2_runs_square_on_the_cases_left_robust",
        "tests/benchmarks/test_user_models.py::test_every_framework_builds_the_plain_cnn[equinox_cnn]",
        "tests/evaluation/test_autoattack.py::test_a_random_model_fails_the_randomness_check_of_a_deterministic_version",
        "tests/evaluation/test_autoattack.py::test_cases_sharded_over_4_devices_give_the_one_device_outcome[small]",
        "tests/evaluation/test_autoattack.py::test_eps_zero_leaves_every_case_as_clean",
        "tests/evaluation/test_autoattack.py::test_equinox_and_haiku_models_work_as_they_are[equinox]",
        "tests/evaluation/test_autoattack.py::test_every_case_spends_at_most_the_declared_query_budget[standard]",
        "tests/evaluation/test_autoattack.py::test_flax_linen_and_nnx_models_work_as_they_are",
        "tests/evaluation/test_autoattack.py::test_rand_version_on_a_random_model_is_stronger_than_one_fixed_draw",
        "tests/evaluation/test_evaluate_cli.py::test_a_custom_member_list_from_the_registry_writes_each_members_records",
        "tests/evaluation/test_processes.py::test_a_process_log_resumes_past_merged_records_and_merging_twice_adds_nothing",
        "tests/experiments/test_cifar_study.py::test_a_model_without_averaging_comes_from_its_averaged_twins_training",
        "tests/experiments/test_cifar_study.py::test_train_only_trains_the_chosen_models_and_attacks_nothing",
        "tests/test_backend.py::test_attacks_warn_once_when_the_flags_are_missing",
        "tests/test_fast_path.py::test_attack_results_unchanged_on_a_model_already_in_the_fast_layout",
        "tests/test_fast_path.py::test_attacks_apply_it_to_the_users_model",
        "tests/test_fast_path.py::test_same_function_value_gradient_and_tangent[equinox]",
        "tests/test_fast_path.py::test_same_function_value_gradient_and_tangent[linen]",
        "tests/test_readme.py::test_the_attack_example_runs_fast_as_written",
        "tests/text/test_transformer.py::test_beam_of_size_one_is_greedy_and_reports_its_teacher_forced_score[lstm]",
        "tests/train/test_defenses.py::test_make_train_step_builds_each_mode_from_the_config",
        "tests/train/test_defenses.py::test_new_steps_are_pure_deterministic_and_key_dependent[trades]",
        "tests/train/test_ema.py::test_fit_with_ema_returns_averaged_weights_selected_by_their_own_validation",
        "tests/train/test_resume.py::test_a_run_resumed_after_an_epoch_equals_the_uninterrupted_run[averaged_weights]",
        "tests/train/test_resume.py::test_progress_of_another_run_or_model_is_refused",
        "tests/train/test_resume.py::test_the_history_of_a_stopped_run_reads_without_its_model",
        "tests/train/test_resume.py::test_the_saved_progress_restores_every_part_of_the_loop_state",
        "tests/train/test_train.py::test_fit_with_the_same_seed_gives_bit_identical_weights_and_history[standard]",
    }
)
"""The costliest default tests by their measured duration (9 s or more each on 2 cores, with
two workers), run with the slow suite so that the default run stays within 10 minutes; their
properties are checked on every CI run all the same (`.ci/run` runs both suites)."""


def pytest_collection_modifyitems(items):
    """Mark tests using a slow fixture, and those in `SLOW_TESTS`, `slow`; the default run
    deselects them (pyproject addopts), `python -m pytest -m slow` runs them, and `.ci/run`
    runs both."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or item.nodeid in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def small_fast(monkeypatch):
    """The fast version at small budgets (its schedule, not its strength), in both the pure
    function and the record runner."""
    from advjax.evaluation import AttackSpec, _autoattack, _autoattack_records
    from advjax.evaluation._autoattack import FastMembers

    small = FastMembers(
        always=(AttackSpec("apgd-ce", steps=10), AttackSpec("malt", targets=3, steps=10)),
        probe=(AttackSpec("fab-t", steps=10), AttackSpec("square", steps=200)),
        escalation=(AttackSpec("apgd-t", steps=10), AttackSpec("fab-t", steps=10),
                    AttackSpec("square", steps=200)),
    )  # fmt: skip
    for module in (_autoattack, _autoattack_records):
        monkeypatch.setattr(module, "FAST", small)
    return small
