"""`--set key=value`: every study's one generic override flag."""

import pytest

from experiments.cifar_robustness.config import profile
from experiments.overrides import apply_overrides


def test_fields_are_parsed_by_their_type_with_fractions_in_pixel_units():
    config = apply_overrides(
        profile("quick"), ["eps_list=0,8/255", "pgd_steps=7", "learning_rate=2e-3"]
    )
    assert config.eps_list == (0.0, 8 / 255)
    assert config.pgd_steps == 7 and isinstance(config.pgd_steps, int)
    assert config.learning_rate == 2e-3


def test_model_fields_for_one_model_or_all():
    base = profile("quick")
    one = apply_overrides(base, ["models.standard.epochs=3"])
    assert {m.name: m.epochs for m in one.models}["standard"] == 3
    others = [m for m in one.models if m.name != "standard"]
    assert others == [m for m in base.models if m.name != "standard"]
    every = apply_overrides(base, ["models.*.epochs=1"])
    assert {m.epochs for m in every.models} == {1}


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("no_such_field=1", "unknown field 'no_such_field'"),
        ("pgd_steps=many", "pgd_steps='many': expected int"),
        ("models.nope.epochs=1", "unknown model 'nope'"),
        ("pgd_steps", "expected key=value"),
    ],
)
def test_bad_overrides_name_the_key_and_what_was_expected(assignment, message):
    with pytest.raises(ValueError, match=message):
        apply_overrides(profile("quick"), [assignment])


def test_the_configs_own_checks_run_on_the_result():
    """An override outside the config's range is refused by the config itself."""
    with pytest.raises(ValueError, match="eps"):
        apply_overrides(profile("quick"), ["eps_list=0,300/255"])


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("dropout_rate=1.5", r"dropout_rate=1.5 must be in \[0, 1\)"),
        ("attack_batch_size=0", "attack_batch_size=0 must be an integer >= 1"),
        ("val_size=0", "val_size=0 must be an integer >= 1"),
        ("models.standard.dropout_rate=2", r"models.standard.dropout_rate=2.0 must be in \[0, 1\)"),
        ("models.*.epochs=0", "epochs=0 must be an integer >= 1"),
        ("eps_list=0,300/255", r"eps_list\[1\]=1.176"),
        ("eval_size=15", "multiple of the 10 classes"),
    ],
)
def test_the_whole_config_is_checked_before_any_work_in_the_flags_units(assignment, message):
    """Every bad value is refused when the config is built (before data or training), naming
    the field as --set spells it."""
    with pytest.raises(ValueError, match=message):
        apply_overrides(profile("quick"), [assignment])


def test_a_bad_flag_is_a_one_line_error_with_exit_code_2_before_any_work(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "experiments.cifar_robustness", "--profile", "quick",
         "--set", "dropout_rate=1.5", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, env={k: v for k, v in __import__("os").environ.items()
                                             if k != "ADVJAX_DEBUG"},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "dropout_rate=1.5 must be in [0, 1)" in done.stderr
    assert not (tmp_path / "run").exists(), "nothing written"
