"""Each named group of a profile is the run its committed folder holds: `--profile robust_cnn
--group G` alone gives that run's config (its digest), models, output folder and policy, so it
reuses what the folder holds instead of training anew."""

import json
import types
from pathlib import Path

import pytest

from experiments.cifar_robustness import main, strong_evaluation
from experiments.cifar_robustness.config import PROFILE_GROUPS, group, phases

REPO = Path(__file__).resolve().parents[2]


def _protocol(config: dict) -> dict:
    """A run's config as data, without the profile's name and without the fields left unset
    (the digest leaves them out too; model specs gained some after some runs were made)."""
    config = json.loads(json.dumps(config))
    config.pop("profile")
    for optional in ("budget_cases", "transfer_sources"):
        if not config.get(optional):
            config.pop(optional, None)
    for spec in [*config["models"], config["surrogate"]]:
        for key in [k for k, v in spec.items() if v is None]:
            del spec[key]
    return config


@pytest.mark.parametrize("name", sorted(PROFILE_GROUPS["robust_cnn"]))
def test_a_group_alone_rebuilds_the_config_of_its_committed_run(name):
    chosen = PROFILE_GROUPS["robust_cnn"][name]
    committed = json.loads((REPO / chosen.out / "results.json").read_text())
    config = main.config_from_args(main.parse_args(["--profile", "robust_cnn", "--group", name]))
    assert [m.name for m in config.models] == list(committed["models"])
    assert _protocol(config.to_dict()) == _protocol(committed["config"])
    if name != "capacity":  # the one run made before model specs had batch_size, weight_decay
        assert config.digest() == committed["config_digest"]
    assert committed["folder"] == chosen.out
    assert (Path(main.__file__).parent / chosen.policy).is_file()


def test_the_profile_alone_is_its_first_group_and_models_still_select_from_the_profile():
    alone = main.config_from_args(main.parse_args(["--profile", "robust_cnn"]))
    assert [m.name for m in alone.models] == ["pgd_silu_scratch", "pgd_silu_scratch_ema"]
    picked = main.config_from_args(
        main.parse_args(["--profile", "robust_cnn", "--models", "pgd_silu_scratch_flip_ema"])
    )
    assert [m.name for m in picked.models] == ["pgd_silu_scratch_flip_ema"]
    default = main.config_from_args(main.parse_args([]))
    assert [m.name for m in default.models] == ["standard", "fgsm_reference", "fgsm_matched"]


def test_a_group_the_profile_does_not_have_is_one_clear_error():
    with pytest.raises(ValueError, match="--group 'capacity': profile default has no groups"):
        main.config_from_args(main.parse_args(["--group", "capacity"]))
    with pytest.raises(ValueError, match="--group 'wider': profile robust_cnn has"):
        group("robust_cnn", "wider")


def test_set_overrides_apply_after_the_groups_own():
    config = main.config_from_args(
        main.parse_args(["--profile", "robust_cnn", "--group", "wide", "--set", "pgd_steps=7"])
    )
    assert config.pgd_steps == 7 and config.budget_restarts == 1
    assert config.eps_list == (0.0, 8 / 255)


def _runs_with_phases():
    runs = [("research", None, "results/cifar10/research")]
    runs += [("robust_cnn", k, g.out) for k, g in PROFILE_GROUPS["robust_cnn"].items() if g.phases]
    return runs


@pytest.mark.parametrize("profile_name, group_name, out", _runs_with_phases())
def test_each_declared_phase_is_what_made_the_committed_subfolder(profile_name, group_name, out):
    """The phase's models (its `--models`, else every model of the run) are the models of the
    committed summary in its subfolder, so the profile's command rebuilds it from its records."""
    run = json.loads((REPO / out / "results.json").read_text())
    for name, *extra in phases(profile_name, group_name):
        models = (
            extra[extra.index("--models") + 1 :] if "--models" in extra else list(run["models"])
        )
        for part in {"strong_evaluation": [""], "attack_variants": ["linf", "l2"]}[name]:
            summary = json.loads((REPO / out / name / part / "summary.json").read_text())
            assert sorted(summary["models"]) == sorted(models), (name, part)


def test_the_default_profile_runs_no_phase_and_research_runs_both():
    assert phases("default", None) == ()
    assert [p[0] for p in phases("research", None)] == ["strong_evaluation", "attack_variants"]
    assert phases("robust_cnn", "capacity") == () and phases("robust_cnn", None)


def test_phases_run_as_their_commands_on_the_run_each_holding_its_subfolder(tmp_path, monkeypatch):
    calls = []

    def work(args, folder, argv):
        lock = folder / ".advjax.lock"
        calls.append((args.study, args.models, args.no_progress, folder, argv, lock.exists()))

    fake = types.SimpleNamespace(PROG="fake", parse_args=strong_evaluation.parse_args)
    table = {**main.PHASE_COMMANDS, "strong_evaluation": (fake, work, ("",))}
    monkeypatch.setattr(main, "PHASE_COMMANDS", table)
    args = main.parse_args(["--profile", "robust_cnn", "--group", "levers", "--no-progress"])
    main.run_phases(phases("robust_cnn", "levers"), tmp_path, args)
    [(study, models, quiet, folder, argv, locked)] = calls
    assert study == str(tmp_path) and quiet and locked
    assert models == ["pgd_silu_scratch_batch64_ema", "pgd_silu_scratch_batch64"]
    assert folder == tmp_path / "strong_evaluation"
    assert not (folder / ".advjax.lock").exists()
    assert main.phase_records(phases("research", None), tmp_path) == [
        tmp_path / "strong_evaluation" / "records.jsonl.gz",
        tmp_path / "attack_variants" / "linf" / "records.jsonl.gz",
        tmp_path / "attack_variants" / "l2" / "records.jsonl.gz",
    ]


def test_a_group_with_an_unknown_phase_is_refused():
    from experiments.cifar_robustness.config import Group

    with pytest.raises(ValueError, match=r"phases \['strong_eval'\]: expected among"):
        Group(("standard",), "results/x", "release_policy.json", phases=(("strong_eval",),))
