"""`--set key=value`: every study's one generic override flag."""

import re

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


def test_a_nested_field_is_set_by_its_dotted_key():
    from experiments.seq2seq_robustness.config import profile as seq2seq_profile
    from experiments.text_robustness.config import profile as text_profile

    text = apply_overrides(text_profile("quick"), ["classifier.epochs=3"])
    assert text.classifier.epochs == 3
    assert text.classifier.embed_dim == text_profile("quick").classifier.embed_dim
    seq = apply_overrides(seq2seq_profile("quick"), ["model.train.learning_rate=1/1000"])
    assert seq.model.train.learning_rate == 1e-3
    assert seq.transformer == seq2seq_profile("quick").transformer


def test_pairs_inside_a_tuple_are_written_a_colon_b():
    from experiments.text_robustness.config import profile as text_profile

    config = apply_overrides(text_profile("quick"), ["points=100:0.1,500:0.3"])
    assert config.points == ((100, 0.1), (500, 0.3))


def test_the_whole_result_is_checked_not_each_step():
    """Flags that are consistent together pass in any order, though a prefix of them is not."""
    from experiments.seq2seq_robustness.config import profile as seq2seq_profile

    config = apply_overrides(
        seq2seq_profile("quick"), ["model.train.batch_size=700", "model.train_size=800"]
    )
    assert (config.model.train.batch_size, config.model.train_size) == (700, 800)


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("classifier.epoch=3", "--set classifier.epoch: unknown field 'epoch' of classifier"),
        ("classifier=3", "set one of them by its dotted key, e.g. classifier.embed_dim"),
        ("classifier.epochs=many", "classifier.epochs='many': expected int"),
        ("seed.low=1", "seed=0 has no fields to set"),
        ("points=100", "points='100': expected 2 items as int:float"),
    ],
)
def test_a_bad_nested_key_is_refused_naming_the_full_key(assignment, message):
    from experiments.text_robustness.config import profile as text_profile

    with pytest.raises(ValueError, match=re.escape(message)):
        apply_overrides(text_profile("quick"), [assignment])


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("seed=-1", "seed=-1 must be an integer in [0, 4294967295]"),
        ("classifier.epochs=0", "classifier.epochs=0 must be an integer >= 1"),
        ("classifier.dropout_rate=1", "classifier.dropout_rate=1.0 must be in [0, 1)"),
        ("classifier.learning_rate=0", "classifier.learning_rate=0.0 must be a number > 0"),
        ("classifier.weight_decay=-1/1000", "classifier.weight_decay=-0.001 must be a number >= 0"),
        ("classifier.train_size=10", "classifier.train_size=10 must be >= batch_size"),
        ("classifier.widths=3,0", "classifier.widths=(3, 0)"),
        ("classifier.augment_rate=0.2", "classifier.augment_rate=0.2 must be 0"),
        ("defense_augment_rate=1.5", "defense_augment_rate=1.5 must be a number in [0, 1)"),
        ("char_candidates=0", "char_candidates=0 must be an integer >= 1"),
        ("rerun_cases=-1", "rerun_cases=-1 must be an integer >= 0"),
        ("eval_size=900", "eval_size=900 must be an integer in [1, 872]"),
        ("chrf_floor=1.5", "chrf_floor=1.5 must be a number in [0, 1]"),
        ("attacks=char,char", "attacks=('char', 'char') (repeated names)"),
        ("query_caps=", "query_caps=() must declare at least one point"),
        ("points=100:0.1,5000:0.2", "points[1] queries=5000 must be an integer in [1, 500]"),
        ("share_caps=0.05,0.5", "share_caps[1]=0.5 must be a number in (0, 0.3]"),
    ],
)
def test_every_text_study_field_is_refused_before_any_work_naming_its_key(assignment, message):
    from experiments.text_robustness.config import profile as text_profile

    with pytest.raises(ValueError, match=re.escape(message)):
        apply_overrides(text_profile("quick"), [assignment])


def test_an_unknown_character_family_is_refused_naming_the_known_ones():
    from experiments.text_robustness.config import profile as text_profile

    with pytest.raises(ValueError, match=r"unknown \['bogus'\].*'charswap', 'homoglyph'"):
        apply_overrides(text_profile("quick"), ["char_families=charswap,bogus"])


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("model.dropout_rate=1", "model.dropout_rate=1.0 must be a number in [0, 1)"),
        ("transformer.dropout_rate=-0.1", "transformer.dropout_rate=-0.1 must be a number in"),
        ("transformer.num_heads=3", "transformer.num_heads=3 must divide transformer.embed_dim=32"),
        ("model.hidden_dim=31", "model.hidden_dim=31 must be even"),
        ("model.embed_dim=0", "model.embed_dim=0 must be an integer >= 1"),
        ("transformer.ff_dim=0", "transformer.ff_dim=0 must be an integer >= 1"),
        ("model.train_size=50", "model.train_size=50 must be an integer in [100, 29000]"),
        ("model.train.epochs=0", "model.train.epochs=0 must be an integer >= 1"),
        ("model.train.epochs=-1", "model.train.epochs=-1 must be >= 0"),
        ("model.train.learning_rate=0", "model.train.learning_rate=0.0 must be > 0"),
        ("model.train.clip_norm=0", "model.train.clip_norm=0.0 must be a number > 0"),
        ("model.train.seed=-1", "model.train.seed=-1 must be an integer in [0, 4294967295]"),
        ("model.train.max_len=1", "model.train.max_len=1 must be >= 2"),
        ("model.src_lang=de", "model.src_lang='de' is not used"),
        ("model.unit=bpe", "model.unit='bpe' is not used"),
        ("model.tgt_lang=xx", "model.tgt_lang='xx' must be one of"),
        ("src_langs=fr,xx", "src_langs=('fr', 'xx') (unknown ['xx'])"),
        ("src_langs=en", "src_langs=('en',) must not hold model.tgt_lang='en'"),
        ("test_split=val", "test_split='val' must be one of ('test_2016_flickr'"),
        ("units=char", "units=('char',) (unknown ['char'])"),
        ("settings=", "settings=() (empty)"),
        ("n_attack=5000", "n_attack=5000 must be an integer in [1, 1000]"),
        ("n_clean=0", "n_clean=0 must be an integer in [1, 1000]"),
        ("top_k=0", "top_k=0 must be an integer >= 1"),
        ("attack_batch=0", "attack_batch=0 must be an integer >= 1"),
        ("profile=huge", "profile='huge' must be one of ('default', 'quick')"),
    ],
)
def test_every_translation_study_field_is_refused_before_any_work_naming_its_key(
    assignment, message
):
    from experiments.seq2seq_robustness.config import profile as seq2seq_profile

    with pytest.raises(ValueError, match=re.escape(message)):
        apply_overrides(seq2seq_profile("quick"), [assignment])


def test_czech_with_a_test_split_without_czech_is_refused():
    from experiments.seq2seq_robustness.config import profile as seq2seq_profile

    with pytest.raises(ValueError, match="has no sentences of"):
        apply_overrides(
            seq2seq_profile("quick"), ["src_langs=fr,cs", "test_split=test_2017_mscoco"]
        )
    apply_overrides(seq2seq_profile("quick"), ["src_langs=fr,cs", "test_split=test_2018_flickr"])


@pytest.mark.parametrize(
    "study, assignment, message",
    [
        ("text_robustness", "classifier.dropout_rate=1.5", "classifier.dropout_rate=1.5"),
        ("seq2seq_robustness", "model.train.epochs=0", "model.train.epochs=0"),
    ],
)
def test_a_bad_text_or_translation_flag_exits_2_before_any_work(
    tmp_path, study, assignment, message
):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ADVJAX_DEBUG"}
    env["ADVJAX_TEXT_DIR"] = str(tmp_path / "no_data")
    done = subprocess.run(
        [sys.executable, "-m", f"experiments.{study}", "--profile", "quick",
         "--set", assignment, "--out", str(tmp_path / "run")],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "run").exists(), "nothing written"
