"""End-to-end: the quick profile of experiments.seq2seq_robustness trains a tiny fr->en
LSTM on real Multi30k, attacks it with the three settings and writes records, tables,
figure and provenance in under 60 s; every record keeps its setting's constraint."""

import json
import os

import pytest

from advjax.records import read_lines
from advjax_text.data import TEXT_DIR_ENV
from advjax_text.translate import changed_positions


@pytest.mark.slow
def test_quick_profile_end_to_end(tmp_path):
    if not os.environ.get(TEXT_DIR_ENV):
        pytest.skip(f"{TEXT_DIR_ENV} is not set: the end-to-end run needs the Multi30k files")
    from experiments.seq2seq_robustness.main import main

    results = main(["--profile", "quick", "--out", str(tmp_path)])
    for name in (
        "records.jsonl.gz",
        "results.json",
        "tables.md",
        "run.json",
        "figures/src_vs_tgt.png",
    ):
        assert (tmp_path / name).exists(), name
    records = [json.loads(line) for line in read_lines(tmp_path / "records.jsonl.gz")]
    assert {r["attack"] for r in records} == {"unconstrained", "knn", "charswap"}
    for r in records:
        assert r["status"] in ("success", "failed", "no_candidate"), r  # never "invalid"
        if r["status"] != "no_candidate":
            assert len(changed_positions(r["src"].split(), r["adv_src"].split())) == 1
        assert r["status"] != "success" or r["chrf"]["s_src"] + r["chrf"]["d_tgt"] > 1
    run = json.loads((tmp_path / "run.json").read_text())
    assert "git_revision" in run["environment"] and run["config"]["profile"] == "quick"
    table = (tmp_path / "tables.md").read_text()
    assert "| charswap |" in table and "BLEU" in table
    (model,) = results["models"].values()
    assert model["attacks"]["knn"]["chrf"]["n"] == 10


def test_lstm_specs_keep_their_pre_transformer_names_and_stored_keys():
    """Old LSTM model folders stay reusable: same name, same stored-spec keys; a Transformer
    spec gets its own name and stores its own sizes (and not the LSTM-only hidden_dim)."""
    from advjax_text.translate import TransformerConfig
    from experiments.seq2seq_robustness.models import ModelSpec, model_config, stored_spec

    lstm = ModelSpec()
    assert lstm.name == "lstm_word_fr-en"
    assert set(stored_spec(lstm)) == {
        "src_lang", "tgt_lang", "unit", "min_count", "bpe_merges", "train_size",
        "embed_dim", "hidden_dim", "dropout_rate", "train",
    }  # fmt: skip
    tr = ModelSpec(arch="transformer", src_lang="de", dropout_rate=0.1)
    assert tr.name == "transformer_word_de-en"
    assert stored_spec(tr)["arch"] == "transformer" and "hidden_dim" not in stored_spec(tr)
    config = model_config(tr, 100, 90)
    assert isinstance(config, TransformerConfig) and config.num_decoder_layers == 3
    with pytest.raises(ValueError, match="arch='gru'"):
        ModelSpec(arch="gru")


def test_paper_tables_put_each_model_of_a_language_pair_in_its_own_column():
    from experiments.seq2seq_robustness.study import paper_tables

    def model(arch, unit, lang, chrf, success):
        attack = {"chrf": {"s_src": 90.0, "d_tgt": 10.0 * success, "success": {"value": success}}}
        return {
            "arch": arch, "unit": unit, "src_lang": lang,
            "clean": {"chrf": chrf, "bleu": chrf - 20},
            "attacks": {"unconstrained": attack, "knn": attack, "charswap": attack},
        }  # fmt: skip

    results = {"models": {
        "lstm_word_fr-en": model("lstm", "word", "fr", 60.0, 0.5),
        "transformer_bpe_fr-en": model("transformer", "bpe", "fr", 61.0, 0.25),
        "lstm_word_de-en": model("lstm", "word", "de", 50.0, 0.75),
    }}  # fmt: skip
    lines = paper_tables(results)
    fr = lines[lines.index("### fr-en") : lines.index("### de-en")]
    assert fr[2] == "| | LSTM word | Transformer BPE |"
    assert "| clean chrF (BLEU) | 60.00 (40.00) | 61.00 (41.00) |" in fr
    assert "| knn: s_src / d_tgt / success | 90.0 / 5.0 / 50.0 % | 90.0 / 2.5 / 25.0 % |" in fr
    de = lines[lines.index("### de-en") :]
    assert de[2] == "| | LSTM word |" and "75.0 %" in de[-2]


def test_adv_training_table_names_the_protocol_and_its_baseline():
    """The adversarial-training table says whether models were fine-tuned or trained from
    scratch, and relates each run's epoch time to the matching NLL baseline."""
    from experiments.seq2seq_robustness.adv_training import table

    attacks = {s: {"d_tgt": 20.0, "success": {"value": 0.5}} for s in ("unconstrained", "charswap")}

    def run(seconds):
        return {"clean_bleu": 40.0, "clean_chrf": 60.0, "train_seconds_per_epoch": seconds,
                "attacks": attacks}  # fmt: skip

    common = {"base_model": "lstm_word_fr-en", "n_attack": 10, "train_size": 100,
              "step_cost": {"charswap-0.5_ratio": 1.9}}  # fmt: skip
    scratch = table({**common, "from_scratch_epochs": 5,
                     "runs": {"base": run([100.0]), "charswap-0.5": run([190.0])}})  # fmt: skip
    assert "trained from scratch for 5 epochs" in scratch
    assert (
        "| charswap-0.5 | 40.00 | 60.00 | 20.00 | 50.0 % | 20.00 | 50.0 % | 190 (1.90x) |"
        in scratch
    )
    tuned = table({**common, "fine_tune_epochs": 1,
                   "runs": {"base": run([]), "nll": run([100.0]), "charswap-0.5": run([150.0])}})  # fmt: skip
    assert "fine-tuned 1 epoch(s)" in tuned and "| base |" in tuned and "150 (1.50x)" in tuned


def test_adv_training_keeps_finished_runs_only_under_the_same_protocol():
    """A later invocation keeps an earlier one's runs when every protocol field agrees, and
    none when any differs (e.g. another attack sample size)."""
    from experiments.seq2seq_robustness.adv_training import PROTOCOL_KEYS, finished_runs

    header = {k: 1 for k in PROTOCOL_KEYS} | {"step_cost": {"x": 1.0}}
    previous = header | {"step_cost": {"x": 2.0}, "runs": {"base": {}, "uncon-1.0": {"a": 1}}}
    assert finished_runs(previous, header) == previous["runs"]
    assert finished_runs(None, header) == {}
    assert finished_runs(previous | {"n_attack": 2}, header) == {}


def test_case_record_status_and_key_order():
    """A case with no position is "no_candidate" whatever its scores, a constraint reason
    makes it "invalid", otherwise chrF success decides; word and BPE records keep their
    key order, the kind's own fields right after new_word (records are compared as JSON)."""
    from advjax_text.translate import score_pair
    from experiments.seq2seq_robustness.attacks import case_record

    src, ref = "le chat dort", "the cat sleeps"
    win = dict(adv_src="le caht dort", out="the cat sleeps", adv_out="a dog runs")
    lose = dict(adv_src="le caht dort", out="the cat sleeps", adv_out="the cat sleeps")
    assert score_pair(src, ref=ref, **win).success
    assert not score_pair(src, ref=ref, **lose).success

    def record(texts, position, reason=None, extra=None):
        return case_record(
            model="m", attack="charswap", case_id=3, src=src, ref=ref, **texts,
            position=position, reason=reason, original_word="chat", new_word="caht",
            first_order=1.0, adv_loss=2.0, clean_loss=0.5, extra=extra,
        )  # fmt: skip

    for texts in (win, lose):
        for reason in (None, "2 words changed"):
            r = record(texts, -1, reason)
            assert (r["status"], r["reason"]) == ("no_candidate", "no word this setting may change")
        assert record(texts, 1, "2 words changed")["status"] == "invalid"
    assert record(win, 1)["status"] == "success" and record(win, 1)["reason"] is None
    assert record(lose, 1)["status"] == "failed"
    assert record(win, 1)["chrf"] == {
        "s_src": (s := score_pair(src, ref=ref, **win)).s_src, "s_tgt": s.s_tgt,
        "s_tgt_adv": s.s_tgt_adv, "d_tgt": s.d_tgt, "success": s.success,
    }  # fmt: skip
    assert record(win, 1)["bleu"]["s_tgt"] == score_pair(src, ref=ref, **win, metric="bleu").s_tgt

    head = ["model", "attack", "case_id", "status", "reason", "src", "adv_src", "ref", "out",
            "adv_out", "position", "original_word", "new_word"]  # fmt: skip
    tail = ["first_order", "adv_loss", "clean_loss", "chrf", "bleu"]
    word = record(win, 1, extra={"new_word_id": 7})
    assert list(word) == head + ["new_word_id"] + tail
    bpe = record(win, 1, extra={"original_pieces": ["chat"], "new_pieces": ["ca@@", "ht"]})
    assert list(bpe) == head + ["original_pieces", "new_pieces"] + tail
    with pytest.raises(ValueError, match="status"):
        record(win, 1, extra={"status": "success"})


def test_reused_models_are_referenced_not_attacked_or_copied(tmp_path, monkeypatch):
    """With --reuse, a model an earlier run attacked (same training history and time, same
    protocol) is neither trained nor attacked: results.json names the earlier records file,
    the new records.jsonl.gz leaves them out, and the tables equal the earlier run's. A resumed
    run (its own folder in --reuse) keeps its records, read from a plain records.jsonl and
    written as records.jsonl.gz, which the next run then names; another protocol or another
    training run of the model is not reused."""
    import dataclasses

    from experiments.seq2seq_robustness import study as s2s
    from experiments.seq2seq_robustness.attacks import case_record
    from experiments.seq2seq_robustness.models import stored_spec

    config = dataclasses.replace(s2s.profile("quick"), n_attack=2)
    spec = config.spec("lstm", "fr", "word")
    models = tmp_path / "models" / spec.name
    models.mkdir(parents=True)
    history = [{"epoch": 1, "train_nll": 3.5, "val_nll": 3.25, "seconds": 1.0}]
    (models / "config.json").write_text(
        json.dumps({"spec": stored_spec(spec), "train_seconds": 7.5})
    )
    (models / "history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    win = dict(adv_src="le caht dort", out="the cat sleeps", adv_out="a dog runs")
    lose = dict(adv_src="le caht dort", out="the cat sleeps", adv_out="the cat sleeps")
    records = [
        case_record(
            model=spec.name,
            attack=setting,
            case_id=i,
            src="le chat dort",
            ref="the cat sleeps",
            **(win if i else lose),
            position=1,
            reason=None,
            original_word="chat",
            new_word="caht",
            first_order=1.0,
            adv_loss=2.0,
            clean_loss=0.5,
        )  # fmt: skip
        for setting in config.settings
        for i in range(2)
    ]
    clean = {"bleu": 30.0, "chrf": 50.0, "n": 50, "mean_sentence_chrf": 49.0}
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    entry = s2s._model_results(
        "lstm", "fr", "word", clean, history, {"train_seconds": 7.5}, {"all": 3.0}, records, config
    )
    earlier_results = {"config": dataclasses.asdict(config), "models": {spec.name: entry}}
    (earlier / "results.json").write_text(json.dumps(earlier_results))
    (earlier / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def no_attack(*args, **kwargs):
        raise AssertionError("a reusable model was trained or attacked")

    monkeypatch.setattr(s2s, "train_or_load", no_attack)
    out = tmp_path / "out"
    results = s2s.run(
        config, None, out, models_dir=tmp_path / "models", reuse=[earlier], log=lambda _: None
    )
    assert results["models"][spec.name].pop("records") == "../earlier/records.jsonl"
    assert results["models"][spec.name] == json.loads(json.dumps(entry))
    assert read_lines(out / "records.jsonl.gz") == []
    assert s2s.write_tables(results) == s2s.write_tables(
        earlier_results | {"config": results["config"]}
    )

    resumed = s2s.run(config, None, earlier, models_dir=tmp_path / "models", reuse=[earlier])
    assert "records" not in resumed["models"][spec.name]
    assert [json.loads(x) for x in read_lines(earlier / "records.jsonl.gz")] == records
    assert not (earlier / "records.jsonl").exists()
    again = s2s.run(
        config, None, tmp_path / "again", models_dir=tmp_path / "models", reuse=[earlier]
    )
    assert again["models"][spec.name]["records"] == "../earlier/records.jsonl.gz"

    for changed in (
        {"config": dataclasses.asdict(dataclasses.replace(config, top_k=4))},
        {"models": {spec.name: entry | {"train_seconds": 8.0}}},
    ):
        (earlier / "results.json").write_text(json.dumps(earlier_results | changed))
        with pytest.raises(AssertionError, match="reusable"):
            s2s.run(config, None, out, models_dir=tmp_path / "models", reuse=[earlier])
