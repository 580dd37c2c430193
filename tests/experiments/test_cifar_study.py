"""End-to-end: the quick profile of the CIFAR-10 study on real data, and its invariants."""

import json
import os
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import case_record

from advjax import gate
from advjax.evaluation import ThreatModel, aggregate_records, find_group
from advjax.evaluation.summary import read_run_summary
from advjax.io import save_checkpoint
from advjax.records import RecordLog, read_records, record_file
from advjax_train import CompactCNN
from experiments.cifar_robustness import attack_variants, replay, strong_evaluation
from experiments.cifar_robustness import main as cifar_robustness
from experiments.cifar_robustness.config import profile
from experiments.cifar_robustness.report import tables_markdown
from experiments.cifar_robustness.reuse import reuse_run
from experiments.cifar_robustness.study import DEFAULT_POLICY
from experiments.cifar_robustness.tradeoff import tradeoff_figure, train_time

needs_data = pytest.mark.skipif(
    not os.environ.get("ADVJAX_DATA_DIR"), reason="ADVJAX_DATA_DIR not set"
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("quick")
    results = cifar_robustness.main(["--profile", "quick", "--out", str(out), "--no-progress"])
    return out, results


@needs_data
def test_quick_profile_writes_results_tables_figures_and_checkpoints(quick_run):
    out, results = quick_run
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["models"].keys() == {
        "standard",
        "fgsm_reference",
        "fgsm_matched",
    }
    assert on_disk["config"]["profile"] == "quick"
    for key in ("command", "environment", "data", "timings_seconds", "threat_model", "reference"):
        assert key in on_disk
    assert on_disk["environment"]["versions"]["jax"]
    assert len(list((out / "figures").glob("*.png"))) >= 10
    assert "| model |" in (out / "tables.md").read_text()
    for name in on_disk["models"]:
        assert (out / "checkpoints" / f"{name}.msgpack").is_file()
        assert (out / "examples" / f"{name}.npz").is_file()
    assert not (out / "checkpoints" / "surrogate.msgpack").exists()
    config = profile("quick")
    for name, m in on_disk["models"].items():
        assert m["transfer_source"] == dict(config.transfer_sources)[name] != name
    transfer = [a for a in on_disk["attacks"] if a["name"] == "transfer_pgd"]
    assert sorted(a["source"] for a in transfer) == ["fgsm_matched", "standard"]
    for name in ("records.jsonl.gz", "summary.json", "gate.txt"):
        assert (out / name).is_file()
    assert on_disk["threat_model_hash"] == ThreatModel.from_dict(on_disk["threat_model"]).digest()
    assert (out / "gate.txt").read_text().startswith(on_disk["gate"]["verdict"])


@needs_data
def test_quick_profile_invariants_eps0_equals_clean_robust_below_clean_counts_add_up(quick_run):
    _, results = quick_run
    n = results["data"]["sizes"]["eval"]
    for m in results["models"].values():
        clean = m["clean_accuracy"]
        assert clean["total"] == n
        for attack, per_eps in m["attacks"].items():
            assert per_eps["0"]["robust_accuracy"]["count"] == clean["count"], attack
            previous = clean["count"]
            for eps in sorted(per_eps, key=float):
                s = per_eps[eps]
                robust, success = s["robust_accuracy"], s["attack_success_rate"]
                assert robust["count"] <= clean["count"] and robust["total"] == n
                assert success["total"] == clean["count"]
                assert robust["count"] + success["count"] == clean["count"]
                if attack == "pgd":
                    assert robust["count"] <= previous
                    previous = robust["count"]
        for curves in m["budget_curves"].values():
            steps = [r["count"] for r in curves["steps"]]
            restarts = [r["count"] for r in curves["restarts"]]
            assert steps == sorted(steps, reverse=True) and restarts == sorted(
                restarts, reverse=True
            )
            assert steps[-1] == restarts[0]
            assert curves["restarts"][-1] == curves["robust_accuracy"]
        for eps in m["attacks"]["pgd"]:
            assert m["attacks"]["pgd"][eps]["robust_accuracy"]["count"] <= clean["count"]


@needs_data
def test_every_number_is_computed_from_the_records_of_the_declared_threat_model(quick_run):
    out, results = quick_run
    records = read_records(record_file(out), strict=True)
    n = results["data"]["sizes"]["eval"]
    per_model = {"fgsm": 4 * n, "pgd": 5 * n, "pgd_budget": 50, "transfer_pgd": 3 * n}
    assert len(records) == results["records"]["count"] == 3 * sum(per_model.values())
    for name in results["models"]:
        mine = [r for r in records if r.model == name]
        for attack, count in per_model.items():
            assert sum(r.attack == attack for r in mine) == count, (name, attack)
        budget = [r.true_class for r in mine if r.attack == "pgd_budget"]
        assert np.bincount(budget, minlength=10).tolist() == [5] * 10  # 50 cases, 5 per class
    assert {r.threat_model_hash for r in records} == {results["threat_model_hash"]}
    summary = read_run_summary(out / "summary.json")
    assert summary["aggregates"] == json.loads(
        json.dumps(
            aggregate_records(
                records,
                num_classes=10,
                steps={"fgsm": 1, "pgd": 5, "pgd_budget": 10},
                restarts={"fgsm": 1, "pgd": 1, "pgd_budget": 3},
            )
        )
    )
    for name, m in results["models"].items():
        for attack, per_eps in m["attacks"].items():
            for eps, numbers in per_eps.items():
                group = find_group(
                    summary["aggregates"], model=name, attack=attack, eps=float(eps) / 255
                )
                assert numbers["robust_accuracy"] == group["robust_accuracy"]
    names = {c["name"] for c in results["checks"]}
    for prefix in (
        "eps0_equals_clean",
        "monotone_in_eps",
        "pgd_not_weaker_than_fgsm",
        "perturbations_within_threat_model",
        "finite_loss",
        "zero_input_gradients",
        "transfer_not_stronger_than_whitebox",
        "large_eps_breaks_model",
        "replay_reproduces_records",
        "monotone_in_restarts",
        "monotone_in_steps",
    ):
        assert any(name.startswith(prefix) for name in names), prefix
    replays = [c for c in results["checks"] if c["name"].startswith("replay_reproduces_records")]
    assert replays and all(c["passed"] and "8 of 8 bit-identical" in c["evidence"] for c in replays)


@needs_data
def test_gate_cli_on_the_run_agrees_with_the_study(quick_run, capsys):
    out, results = quick_run
    code = gate.main(["--policy", str(DEFAULT_POLICY), "--run", str(out / "summary.json")])
    assert code == (0 if results["gate"]["allow"] else 1)
    assert capsys.readouterr().out.startswith("ALLOW" if code == 0 else "HOLD")


@needs_data
def test_rerun_resumes_finished_phases_with_identical_numbers(quick_run, capsys):
    out, first = quick_run
    lines = len(read_records(record_file(out)))
    again = cifar_robustness.main(["--profile", "quick", "--out", str(out), "--no-progress"])
    assert "reusing" in capsys.readouterr().out
    assert len(read_records(record_file(out))) == lines
    for name, m in again["models"].items():
        for key in ("clean_accuracy", "attacks", "budget_curves", "transfer", "per_class"):
            assert m[key] == first["models"][name][key]


@needs_data
def test_a_model_reused_from_another_run_is_neither_trained_nor_attacked_again(
    quick_run, tmp_path, capsys
):
    """--reuse-from copies the model's checkpoint and its records: the new run trains
    nothing, attacks nothing and reports the source run's numbers for it; its transfer
    source (the standard CNN) is not in this run, so it has no transfer check, and the
    copied transfer records are not counted."""
    out, first = quick_run
    new = tmp_path / "beside"
    argv = ["--profile", "quick", "--models", "fgsm_matched", "--out", str(new), "--no-progress"]
    again = cifar_robustness.main([*argv, "--reuse-from", str(out)])
    printed = capsys.readouterr().out
    assert "[reuse] fgsm_matched: checkpoint and 1,250 records" in printed
    assert "[train] fgsm_matched: reusing" in printed and "[train] standard" not in printed
    assert "[attack] fgsm_matched: no transfer check" in printed
    assert "[attack] fgsm_matched " not in printed  # nothing attacked

    def lines(folder):
        return sorted(
            r.to_json() for r in read_records(record_file(folder)) if r.model == "fgsm_matched"
        )

    assert lines(new) == lines(out) and len(lines(new)) == 1250
    mine, theirs = again["models"]["fgsm_matched"], first["models"]["fgsm_matched"]
    for key in ("clean_accuracy", "attacks", "budget_curves", "attack_seconds"):
        assert mine[key] == theirs[key]
    assert theirs["transfer"] and mine["transfer"] == {} and mine["transfer_source"] is None
    assert again["records"]["count"] == 1250 - 300
    with pytest.raises(SystemExit):
        cifar_robustness.parse_args([*argv, "--reuse-from", str(out), "--force"])
    assert "--reuse-from and --force" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="--reuse-from .* no checkpoints/"):
        cifar_robustness.main([*argv, "--reuse-from", str(tmp_path / "nothing")])


def test_a_checkpoint_of_another_config_or_differing_from_this_runs_is_not_reused(tmp_path):
    config = profile("quick")
    source, out = tmp_path / "source", tmp_path / "out"
    model = CompactCNN()
    variables = model.init(jax.random.key(0), np.zeros((1, 32, 32, 3), np.float32), False)
    standard, matched = config.models[0], config.models[2]
    save_checkpoint(source / "checkpoints" / f"{standard.name}.msgpack", model, variables,
                    {"config_digest": "another"})  # fmt: skip
    save_checkpoint(source / "checkpoints" / f"{matched.name}.msgpack", model, variables,
                    {"config_digest": config.model_digest(matched)})  # fmt: skip
    other = model.init(jax.random.key(1), np.zeros((1, 32, 32, 3), np.float32), False)
    save_checkpoint(out / "checkpoints" / f"{matched.name}.msgpack", model, other,
                    {"config_digest": config.model_digest(matched)})  # fmt: skip
    said = []
    assert reuse_run(config, source, out, log=said.append) == {}
    assert not (out / "checkpoints" / f"{standard.name}.msgpack").exists()
    assert any("another config" in line for line in said)
    assert any("differs" in line for line in said)


def test_dry_run_counts_queries_and_attacks_nothing(tmp_path, capsys):
    estimate = cifar_robustness.main(["--profile", "quick", "--dry-run", "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())
    rows = {row["attack"]: row for row in estimate["rows"]}
    assert (
        rows["pgd_budget"]["queries"] == 50 * 3 * 1 * 3 * 10
    )  # cases x models x eps x restarts x steps
    assert rows["transfer_pgd<-standard"]["queries"] == 100 * 2 * 3 * 5  # two models use it
    assert rows["pgd"]["queries"] == 100 * 3 * 5 * 5
    assert estimate["seconds_per_query"] > 0
    assert "Threat model" in capsys.readouterr().out


def test_unknown_profile_and_bad_eps_are_rejected():
    with pytest.raises(ValueError, match="unknown profile"):
        profile("huge")
    with pytest.raises(ValueError, match="eps"):
        cifar_robustness.config_from_args(
            cifar_robustness.parse_args(["--set", "eps_list=0,300/255"])
        )


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@needs_data
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (.ci/run installs it)")
def test_html_report_opens_on_one_screen_with_gate_matrix_and_figure_and_stays_small(quick_run):
    from playwright.sync_api import sync_playwright

    out, results = quick_run
    report = out / "report.html"
    page_text = report.read_text()
    assert "http://" not in page_text and "https://" not in page_text  # no remote file
    assert report.stat().st_size < 2_000_000
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        requests = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(report.as_uri())
        gate_box = page.locator("#gate-decision")
        matrix = page.locator("#robustness-matrix")
        figure = page.locator("#first-figure")
        verdict = "ALLOW" if results["gate"]["allow"] else "HOLD"
        assert f"Release gate: {verdict}" in gate_box.inner_text()
        assert matrix.locator("tbody tr").count() == len(results["models"])
        assert figure.evaluate("img => img.naturalWidth > 0")
        for element in (gate_box, matrix, figure):
            box = element.bounding_box()
            assert box is not None and box["y"] + box["height"] <= 800, "below the first screen"
        page.screenshot(path=str(out / "report_first_screen.png"))
        table = page.locator("#main-table")
        assert not table.is_visible(), "the full table starts collapsed"
        page.locator("#main-section summary").click()
        assert table.is_visible()
        assert table.locator("tbody tr").count() == sum(
            len(per_eps) for m in results["models"].values() for per_eps in m["attacks"].values()
        )
        page.locator("#counts-section summary").click()
        first_link = table.locator("a").first
        target = first_link.get_attribute("href")
        first_link.click()
        assert page.locator(target).is_visible()
        page.locator("#figures-section summary").click()
        images = page.locator("figure img")
        assert images.count() >= 10
        for i in range(3):
            images.nth(i).scroll_into_view_if_needed()
            assert images.nth(i).evaluate("img => img.complete && img.naturalWidth > 0")
        browser.close()
    assert all(url.startswith(("file://", "data:")) for url in requests)


@needs_data
def test_replay_cli_reruns_stored_records_bit_exactly(quick_run, capsys):
    out, _ = quick_run
    records = read_records(record_file(out))
    lines = []
    for attack in ("fgsm", "pgd", "pgd_budget", "transfer_pgd"):
        lines += [i + 1 for i, r in enumerate(records) if r.attack == attack and r.eps > 0][:1]
    lines += [i + 1 for i, r in enumerate(records) if r.first_break_restart][:1]
    argv = ["--run", str(out)] + [a for n in lines for a in ("--line", str(n))]
    assert replay.main(argv) == 0
    # one record per attack (4), plus one broken by a later restart when the run has one
    assert len(lines) >= 4
    assert capsys.readouterr().out.count("identical") == len(lines)
    assert replay.main(["--run", str(out), "--line", str(len(records) + 1)]) == 2


@pytest.mark.slow
def test_strong_evaluation_and_attack_variants_run_on_a_study_and_write_checked_records(
    quick_run, tmp_path, capsys
):
    """Both follow-up evaluations read the study's checkpoints and cases, write records
    within their declared threat models (L-inf / L2), and never report an ensemble weaker
    than its first member or a robust accuracy above clean; a summary that leaves out
    models whose records it holds says so."""
    out, results = quick_run
    models = ["fgsm_matched"]
    strong_args = [
        "--study",
        str(out),
        "--out",
        str(tmp_path / "strong"),
        "--steps",
        "4",
        "--targets",
        "2",
        "--queries",
        "40",
        "--batch-size",
        "100",
        "--no-progress",
    ]
    strong = strong_evaluation.main(strong_args + ["--models", *models])
    assert {c["name"] for c in strong["checks"]} >= {"perturbations_within_threat_model"}
    assert next(c for c in strong["checks"] if c["name"] == "perturbations_within_threat_model")[
        "passed"
    ]
    text = tables_markdown(results, strong)
    row = next(line for line in text.splitlines() if line.startswith("| FGSM-AT, matched"))
    assert "not run" not in row and "not run" in text  # only fgsm_matched was re-attacked
    tradeoff_figure(results, strong, tmp_path / "tradeoff.png")
    assert (tmp_path / "tradeoff.png").stat().st_size > 10_000
    other = next(n for n in results["models"] if n not in models)
    capsys.readouterr()
    strong_evaluation.main(strong_args + ["--models", other])
    assert f"also holds {models[0]}, left out" in capsys.readouterr().out
    variants = attack_variants.main(
        [
            "--study",
            str(out),
            "--out",
            str(tmp_path / "variants"),
            "--models",
            *models,
            "--steps",
            "3",
            "--targets",
            "2",
            "--batch-size",
            "100",
            "--no-progress",
        ]
    )
    for part, norm in (("linf", "linf"), ("l2", "l2")):
        summary = variants[part]
        assert summary["threat_model"]["norm"] == norm
        assert next(
            c for c in summary["checks"] if c["name"] == "perturbations_within_threat_model"
        )["passed"]
        for g in summary["aggregates"]:
            assert g["robust_accuracy"]["count"] <= g["clean_accuracy"]["count"]
    records = read_records(record_file(tmp_path / "variants" / "l2"))
    assert max(r.l2 for r in records) <= 0.5 + 1e-5
    assert len(records) == len(models) * 2 * 2 * len(results["data"]["eval_indices"])
    assert (tmp_path / "variants" / "tables.md").read_text().count("pgd_l2") >= 1


def test_attack_variants_says_it_reused_a_folders_records_of_its_models(
    tmp_path, monkeypatch, capsys
):
    """A part whose record file already holds every case of its models reports them all
    reused and none computed, counting only those models' records (a study's folder may hold
    another study's)."""
    log = RecordLog(tmp_path / "linf" / "records.jsonl.gz")
    log.append(
        [case_record(i, model=m, attack="pgd_margin") for m in ("a", "b") for i in range(3)]
        + [case_record(0, model="other", attack="pgd_margin")]
    )
    monkeypatch.setattr(attack_variants, "load_logits_fn", lambda path: (None, "mh"))
    monkeypatch.setattr(attack_variants, "run_attack", lambda log, *args, **kwargs: 0)
    tm = ThreatModel(eps=(8 / 255,), steps=2, restarts=1)
    specs = attack_variants.linf_specs(2, 1, 10)
    study = {"config": {"seed": 0}}
    groups = attack_variants.run_part(
        tmp_path / "linf", tm, specs, ["a", "b"], study, tmp_path, None, np.zeros(3), False
    )
    assert "6 records of 2 models, 6 reused and 0 computed now" in capsys.readouterr().out
    assert sorted({g["model"] for g in groups}) == ["a", "b"]


def test_a_fine_tuned_model_is_retrained_when_its_parent_changes():
    """The fine-tuned model's checkpoint digest covers its parent's training: changing the
    parent's epochs changes it, an attack setting does not, and `--models` may name the
    fine-tuned model alone."""
    import dataclasses

    from experiments.cifar_robustness.model_specs import FGSM_RS_FULL_NODROP, PGD_FINETUNE_NODROP

    config = profile("research")
    child = PGD_FINETUNE_NODROP
    assert child.init_from == FGSM_RS_FULL_NODROP and child in config.models
    longer_parent = dataclasses.replace(
        child, init_from=dataclasses.replace(FGSM_RS_FULL_NODROP, epochs=21)
    )
    assert config.model_digest(longer_parent) != config.model_digest(child)
    assert dataclasses.replace(config, pgd_steps=50).model_digest(child) == config.model_digest(
        child
    )
    alone = cifar_robustness.config_from_args(
        cifar_robustness.parse_args(["--profile", "research", "--models", "pgd_finetune_nodrop"])
    )
    assert [m.name for m in alone.models] == ["pgd_finetune_nodrop"]


def test_the_silu_model_differs_from_its_control_in_the_activation_alone():
    """pgd_continue_silu is pgd_continue_nodrop with SiLU: same parent, data, epochs,
    learning rate and attack, another digest; adding the field left older digests alone."""
    import dataclasses

    from experiments.cifar_robustness import study
    from experiments.cifar_robustness.model_specs import PGD_CONTINUE_NODROP, PGD_CONTINUE_SILU

    config = profile("research")
    assert PGD_CONTINUE_SILU in config.models and PGD_CONTINUE_NODROP in config.models
    assert PGD_CONTINUE_SILU.activation == "silu" and PGD_CONTINUE_NODROP.activation is None
    same = dataclasses.replace(
        PGD_CONTINUE_SILU,
        name=PGD_CONTINUE_NODROP.name,
        label=PGD_CONTINUE_NODROP.label,
        activation=None,
    )
    assert same == PGD_CONTINUE_NODROP
    assert config.model_digest(PGD_CONTINUE_SILU) != config.model_digest(PGD_CONTINUE_NODROP)
    assert "activation" not in PGD_CONTINUE_NODROP.to_dict()
    assert config.model_digest(PGD_CONTINUE_NODROP) == "c4cba2af72b5b945"  # its checkpoint's
    # a model's digest does not depend on the profile that trains it
    assert profile("default").model_digest(PGD_CONTINUE_NODROP) == "c4cba2af72b5b945"
    assert study.train_config(config, PGD_CONTINUE_SILU).activation == "silu"
    assert study.train_config(config, PGD_CONTINUE_NODROP).activation == "relu"


def test_the_robust_cnn_candidates_differ_from_each_other_in_one_setting_each():
    """The robust_cnn profile's candidates: the from-scratch PGD-5-AT SiLU recipe, the same
    with weight averaging, the averaged recipe with doubled widths, and the capacity check
    (the recipe on less data and fewer epochs, at both widths); the averaging and the width
    reach the training config; the policy, declared before training, names a
    candidate and rolls back against another; the research models' digests are unchanged
    by the new fields."""
    import dataclasses

    from advjax.evaluation.gate import load_policy
    from experiments.cifar_robustness import study
    from experiments.cifar_robustness.config import PROFILE_GROUPS
    from experiments.cifar_robustness.model_specs import (
        CAPACITY_SHORT,
        CAPACITY_SHORT_WIDE,
        FULL_LENGTH_LEVERS,
        PGD_CONTINUE_NODROP,
        PGD_SILU_SCRATCH,
        PGD_SILU_SCRATCH_EMA,
        PGD_SILU_SCRATCH_WIDE,
        REGULARISATION_PROBES,
    )

    config = profile("robust_cnn")
    assert config.models == (
        PGD_SILU_SCRATCH, PGD_SILU_SCRATCH_EMA, PGD_SILU_SCRATCH_WIDE, CAPACITY_SHORT,
        CAPACITY_SHORT_WIDE, *REGULARISATION_PROBES, *FULL_LENGTH_LEVERS,
    )  # fmt: skip
    # The capacity check: the from-scratch recipe at a shorter budget, then only the width.
    assert dataclasses.replace(
        CAPACITY_SHORT, name=PGD_SILU_SCRATCH.name, label=PGD_SILU_SCRATCH.label,
        train_size=PGD_SILU_SCRATCH.train_size, epochs=PGD_SILU_SCRATCH.epochs,
    ) == PGD_SILU_SCRATCH  # fmt: skip
    assert dataclasses.replace(
        CAPACITY_SHORT_WIDE, name=CAPACITY_SHORT.name, label=CAPACITY_SHORT.label, width=None
    ) == CAPACITY_SHORT  # fmt: skip
    assert dataclasses.replace(
        PGD_SILU_SCRATCH_EMA, name=PGD_SILU_SCRATCH.name, label=PGD_SILU_SCRATCH.label,
        ema_decay=None,
    ) == PGD_SILU_SCRATCH  # fmt: skip
    assert PGD_SILU_SCRATCH_WIDE.width == 2 and PGD_SILU_SCRATCH_EMA.width is None
    trained = {m.name: study.train_config(config, m) for m in config.models}
    assert trained["pgd_silu_scratch"].ema_decay is None
    assert trained["pgd_silu_scratch_ema"].ema_decay == 0.999
    assert trained["pgd_silu_scratch_wide"].width == 2
    assert len({config.model_digest(m) for m in config.models}) == 13
    finalists = PROFILE_GROUPS["robust_cnn"]["finalists"]
    policy, _ = load_policy(Path(study.__file__).parent / finalists.policy)
    names = {m.name for m in config.models}
    assert set(policy["models"]) <= names and policy["rollback_below"]["baseline_model"] in names
    capacity, _ = load_policy(Path(study.__file__).parent / "capacity_policy.json")
    assert set(capacity["models"]) == {CAPACITY_SHORT.name, CAPACITY_SHORT_WIDE.name}
    wide, _ = load_policy(Path(study.__file__).parent / "wide_policy.json")
    assert wide["models"] == [PGD_SILU_SCRATCH_WIDE.name] and wide["require_sanity"]
    assert config.model_digest(PGD_CONTINUE_NODROP) == "c4cba2af72b5b945"


def test_each_regularisation_probe_is_the_short_recipe_with_one_setting_less_regularising():
    """The probes differ from `capacity_short` in exactly one training setting, that setting
    reaches the training config, and their policy (declared before training) names the
    baseline and every probe; the existing models' digests do not move with the new fields."""
    import dataclasses

    from advjax.evaluation.gate import load_policy
    from experiments.cifar_robustness import study
    from experiments.cifar_robustness.model_specs import CAPACITY_SHORT, REGULARISATION_PROBES

    config = profile("robust_cnn")
    base = study.train_config(config, CAPACITY_SHORT)
    changed = {}
    for probe in REGULARISATION_PROBES:
        assert probe.name != CAPACITY_SHORT.name and probe.label != CAPACITY_SHORT.label
        same_names = dataclasses.replace(
            probe, name=CAPACITY_SHORT.name, label=CAPACITY_SHORT.label
        )
        diff = {
            f.name
            for f in dataclasses.fields(same_names)
            if getattr(same_names, f.name) != getattr(CAPACITY_SHORT, f.name)
        }
        assert len(diff) == 1, (probe.name, diff)
        trained = study.train_config(config, probe)
        changed[probe.name] = {
            f.name: getattr(trained, f.name)
            for f in dataclasses.fields(trained)
            if getattr(trained, f.name) != getattr(base, f.name)
        }
    assert changed == {
        "short_no_decay": {"weight_decay": 0.0},
        "short_flip_only": {"augment_pad": 0},
        "short_batch64": {"batch_size": 64},
        "short_lr2x": {"learning_rate": 2e-3},
    }
    policy, _ = load_policy(Path(study.__file__).parent / "regularisation_policy.json")
    assert set(policy["models"]) == {CAPACITY_SHORT.name} | {p.name for p in REGULARISATION_PROBES}
    assert config.model_digest(CAPACITY_SHORT) == "94db2b075b95972f"  # its committed checkpoint
    with pytest.raises(ValueError, match="batch_size"):
        dataclasses.replace(CAPACITY_SHORT, batch_size=0)
    with pytest.raises(ValueError, match="weight_decay"):
        dataclasses.replace(CAPACITY_SHORT, weight_decay=-1.0)


def test_each_full_length_lever_is_the_from_scratch_recipe_with_one_probe_setting():
    """The full-length lever runs are `pgd_silu_scratch` (and its averaged twin) with exactly
    the one setting of a probe that helped (no crop; batch 64), so one training gives both
    twins; their policy, declared before training, names a candidate and rolls back against
    the averaged baseline; the models already trained keep their digests."""
    import dataclasses

    from advjax.evaluation.gate import load_policy
    from experiments.cifar_robustness import study
    from experiments.cifar_robustness.model_specs import (
        CAPACITY_SHORT,
        FULL_LENGTH_LEVERS,
        PGD_SILU_SCRATCH,
        PGD_SILU_SCRATCH_EMA,
        SHORT_BATCH64,
        SHORT_FLIP_ONLY,
    )

    config = profile("robust_cnn")

    def differences(spec, base):
        same = dataclasses.replace(spec, name=base.name, label=base.label)
        return {f.name: getattr(same, f.name) for f in dataclasses.fields(same)
                if getattr(same, f.name) != getattr(base, f.name)}  # fmt: skip

    levers = {}
    for spec in FULL_LENGTH_LEVERS:
        base = PGD_SILU_SCRATCH_EMA if spec.ema_decay else PGD_SILU_SCRATCH
        levers[spec.name] = differences(spec, base)
    assert levers == {
        "pgd_silu_scratch_flip_ema": {"augment_pad": 0},
        "pgd_silu_scratch_flip": {"augment_pad": 0},
        "pgd_silu_scratch_batch64_ema": {"batch_size": 64},
        "pgd_silu_scratch_batch64": {"batch_size": 64},
    }
    assert {"augment_pad": 0} == differences(SHORT_FLIP_ONLY, CAPACITY_SHORT)
    assert {"batch_size": 64} == differences(SHORT_BATCH64, CAPACITY_SHORT)
    flip_ema, flip, batch64_ema, batch64 = FULL_LENGTH_LEVERS
    assert study.averaged_twin(flip, config.models) == flip_ema
    assert study.live_twins(batch64_ema, config.models) == [batch64]
    policy, _ = load_policy(Path(study.__file__).parent / "full_length_levers_policy.json")
    assert policy["models"] == [flip_ema.name]
    assert policy["rollback_below"]["baseline_model"] == PGD_SILU_SCRATCH_EMA.name
    assert config.model_digest(CAPACITY_SHORT) == "94db2b075b95972f"


def test_train_only_trains_the_chosen_models_and_attacks_nothing(tmp_path, monkeypatch):
    """`--train-only --models M` writes M's checkpoint and nothing of the attack phases (no
    records, results or report), and a second call reuses it."""
    from experiments.cifar_robustness import main as study_main

    synthetic = _synthetic_study_data()
    monkeypatch.setattr(study_main, "load_study_data", lambda config, data_dir: synthetic)
    argv = ["--profile", "quick", "--models", "standard", "--train-only", "--no-progress",
            "--out", str(tmp_path), "--set", "train_size=40", "--set", "val_size=20",
            "--set", "eval_size=10", "--set", "batch_size=20", "--set", "models.*.train_size=40",
            "--set", "models.*.epochs=1"]  # fmt: skip
    first = study_main.main(argv)
    assert list(first["checkpoints"]) == ["standard"]
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["checkpoints/standard.msgpack"]
    before = (tmp_path / "checkpoints" / "standard.msgpack").read_bytes()
    study_main.main(argv)
    assert (tmp_path / "checkpoints" / "standard.msgpack").read_bytes() == before


def test_train_phase_trains_or_reuses_the_parent_and_fine_tunes_from_its_weights(
    tmp_path, monkeypatch
):
    """A fine-tuned model's training starts from its parent's checkpoint, trained first when
    missing and reused when present."""
    import dataclasses

    import jax
    import numpy as np

    from advjax_train import FitResult, TrainConfig, create_train_state
    from experiments.cifar_robustness import study
    from experiments.cifar_robustness.config import StudyConfig
    from experiments.cifar_robustness.model_specs import ModelSpec

    parent = ModelSpec("parent", "standard", 40, 1, "parent")
    child = ModelSpec("child", "pgd", 40, 1, "child", init_from=parent, adv_steps=2)
    config = StudyConfig(
        profile="t",
        train_size=40,
        val_size=20,
        eval_size=10,
        models=(parent, child),
        surrogate=None,
    )
    calls = []

    def fake_fit(train_config, train, val, *, init=None, **_):
        calls.append((train_config.mode, init))
        seed = len(calls)
        state = create_train_state(jax.random.key(seed), TrainConfig(), 1)
        return FitResult(state, [], 1, 0.5)

    monkeypatch.setattr(study, "fit", fake_fit)
    data, splits = _synthetic_study_data()
    log = lambda _: None  # noqa: E731
    study.train_phase(config, child, data, splits, tmp_path, False, log)
    assert [mode for mode, _ in calls] == ["standard", "pgd"]
    assert calls[0][1] is None
    saved = study.read_checkpoint(tmp_path / "checkpoints" / "parent.msgpack")["variables"]
    jax.tree.map(np.testing.assert_array_equal, calls[1][1], saved)
    calls.clear()
    study.train_phase(
        config, dataclasses.replace(child, epochs=2), data, splits, tmp_path, False, log
    )
    assert [mode for mode, _ in calls] == ["pgd"]


def test_a_fine_tunes_train_time_adds_its_parents_and_names_a_missing_one():
    def model(seconds, parent=None):
        spec = {"name": "x"} | ({"init_from": parent} if parent else {})
        return {"training": {"seconds": seconds}, "spec": spec}

    grand = {"name": "a"}
    parent = {"name": "b", "init_from": grand}
    results = {"models": {"a": model(100.0), "b": model(20.0, grand)}}
    assert train_time(results, results["models"]["a"]) == "100"
    assert train_time(results, model(3.0, parent)) == "3 + 20 + 100 = 123"
    assert train_time({"models": {}}, model(3.0, parent)) == "3 + b (not in this run)"


@pytest.mark.slow
def test_training_interrupted_after_an_epoch_resumes_there_with_the_uninterrupted_weights(
    tmp_path, monkeypatch
):
    """Ctrl-C during training keeps the finished epochs: the same call resumes after the last
    one, ends with the weights and history of a run never interrupted, and removes its
    progress file once the checkpoint is written."""
    import jax
    import numpy as np

    from experiments.cifar_robustness import study
    from experiments.cifar_robustness.config import StudyConfig
    from experiments.cifar_robustness.model_specs import ModelSpec

    spec = ModelSpec("m", "standard", 40, 3, "m")
    config = StudyConfig(
        profile="t", train_size=40, val_size=20, eval_size=10, batch_size=20, models=(spec,),
        surrogate=None,
    )  # fmt: skip
    data, splits = _synthetic_study_data()
    lines = []
    whole = study.train_phase(config, spec, data, splits, tmp_path / "whole", False, lines.append)
    save = study.save_fit_progress

    def save_then_interrupt(path, progress, *, tag):
        save(path, progress, tag=tag)
        if progress.epoch == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(study, "save_fit_progress", save_then_interrupt)
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        study.train_phase(config, spec, data, splits, cut, False, lines.append)
    assert study.progress_path(cut, "m").is_file()
    monkeypatch.setattr(study, "save_fit_progress", save)
    lines.clear()
    resumed = study.train_phase(config, spec, data, splits, cut, False, lines.append)
    assert any("resuming after epoch 2/3" in line for line in lines)
    assert not study.progress_path(cut, "m").exists()
    a, b = study.read_checkpoint(whole), study.read_checkpoint(resumed)
    jax.tree.map(np.testing.assert_array_equal, a["variables"], b["variables"])
    drop = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert drop(a["metadata"]["history"]) == drop(b["metadata"]["history"])
    assert (a["metadata"]["resumed_after_epoch"], b["metadata"]["resumed_after_epoch"]) == (None, 2)


def _synthetic_study_data():
    """Random CIFAR-shaped data (100 training, 20 test images) and its study splits (40 train,
    20 validation, 10 evaluation)."""
    import numpy as np

    from advjax.data import Cifar10
    from experiments.cifar_robustness import study

    rng = np.random.default_rng(0)
    data = Cifar10(
        rng.integers(0, 256, (100, 32, 32, 3), dtype=np.uint8),
        np.tile(np.arange(10, dtype=np.int32), 10),
        rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8),
        np.tile(np.arange(10, dtype=np.int32), 2),
        tuple(str(i) for i in range(10)),
        "synthetic",
    )
    splits = study.study_splits(
        data.train_labels, data.test_labels, train_size=40, val_size=20, eval_size=10, seed=0
    )
    return data, splits


def test_a_model_without_averaging_comes_from_its_averaged_twins_training(tmp_path):
    """Where the run holds the same model with and without weight averaging, one training
    writes both checkpoints, and the plain one holds the weights, epoch and history its own
    training gives; each twin is found only for an otherwise identical spec."""
    import dataclasses

    import jax
    import numpy as np

    from experiments.cifar_robustness import study
    from experiments.cifar_robustness.config import StudyConfig
    from experiments.cifar_robustness.model_specs import (
        PGD_SILU_SCRATCH,
        PGD_SILU_SCRATCH_EMA,
        PGD_SILU_SCRATCH_WIDE,
        ROBUST_CNN_MODELS,
        ModelSpec,
    )

    assert study.averaged_twin(PGD_SILU_SCRATCH, ROBUST_CNN_MODELS) == PGD_SILU_SCRATCH_EMA
    assert study.live_twins(PGD_SILU_SCRATCH_EMA, ROBUST_CNN_MODELS) == [PGD_SILU_SCRATCH]
    assert study.live_twins(PGD_SILU_SCRATCH_WIDE, ROBUST_CNN_MODELS) == []
    assert study.averaged_twin(PGD_SILU_SCRATCH_WIDE, ROBUST_CNN_MODELS) is None

    plain = ModelSpec("plain", "standard", 40, 2, "plain")
    averaged = dataclasses.replace(plain, name="averaged", label="averaged", ema_decay=0.9)
    other = dataclasses.replace(plain, name="other", label="other", epochs=3)
    config = StudyConfig(
        profile="t", train_size=40, val_size=20, eval_size=10, batch_size=20,
        models=(plain, averaged, other), surrogate=None,
    )  # fmt: skip
    assert study.averaged_twin(other, config.models) is None
    data, splits = _synthetic_study_data()
    lines = []
    both = tmp_path / "both"
    study.train_phase(config, plain, data, splits, both, False, lines.append)
    assert sum("epochs" in line and "[train]" in line for line in lines) == 1
    assert any("written from averaged's live weights" in line for line in lines)
    alone_config = dataclasses.replace(config, models=(plain,))
    alone = study.train_phase(alone_config, plain, data, splits, tmp_path / "alone", False, print)
    a = study.read_checkpoint(both / "checkpoints" / "plain.msgpack")
    b = study.read_checkpoint(alone)
    jax.tree.map(np.testing.assert_array_equal, a["variables"], b["variables"])
    drop = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert drop(a["metadata"]["history"]) == drop(b["metadata"]["history"])
    assert a["metadata"]["config_digest"] == b["metadata"]["config_digest"]
    assert a["metadata"]["trained_by"] == "averaged"
    lines.clear()
    study.train_phase(config, averaged, data, splits, both, False, lines.append)
    assert lines == [f"[train] averaged: reusing {both / 'checkpoints' / 'averaged.msgpack'}"]
