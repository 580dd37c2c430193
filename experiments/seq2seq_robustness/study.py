"""The translation-attack study's phases: train or reload, evaluate, attack, tables, figure."""

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from advjax.io import environment
from advjax.records import (
    atomic_write_json,
    atomic_write_lines,
    atomic_write_text,
    read_lines,
    record_file,
)
from advjax_text.data import load_parallel
from advjax_text.translate import SETTINGS
from experiments.cli import results_folder
from experiments.seq2seq_robustness.attacks import attack_model, summarize_records
from experiments.seq2seq_robustness.bpe_attacks import attack_bpe_model, training_word_vocab
from experiments.seq2seq_robustness.config import Config, profile  # noqa: F401
from experiments.seq2seq_robustness.models import (
    evaluate_translation,
    train_or_load,
    training_run,
)


def _table(rows: dict) -> str:
    lines = [
        "| attack | s_src chrF | d_tgt chrF | success chrF | s_src BLEU | d_tgt BLEU | success BLEU | invalid | no candidate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for setting, r in rows.items():
        c, b = r["chrf"], r["bleu"]
        lines.append(
            f"| {setting} | {c['s_src']:.2f} | {c['d_tgt']:.2f} | {100 * c['success']['value']:.1f} % "
            f"({c['success']['count']}/{c['success']['total']}) | {b['s_src']:.2f} | {b['d_tgt']:.2f} | "
            f"{100 * b['success']['value']:.1f} % | {c['statuses']['invalid']} | {c['statuses']['no_candidate']} |"
        )
    return "\n".join(lines)


_UNIT_LABEL = {"word": "word", "bpe": "BPE"}
_ARCH_LABEL = {"lstm": "LSTM", "transformer": "Transformer"}


def paper_tables(results: dict) -> list[str]:
    """One table per language pair in the layout of Michel et al.'s Table 3: a column per
    model (architecture x unit), rows clean chrF and, per attack, s_src / d_tgt / success
    (chrF)."""
    by_lang: dict[str, list[tuple[str, dict]]] = {}
    for m in results["models"].values():
        label = f"{_ARCH_LABEL[m['arch']]} {_UNIT_LABEL[m['unit']]}"
        by_lang.setdefault(m["src_lang"], []).append((label, m))
    out = []
    for lang, models in by_lang.items():
        out += [f"### {lang}-en", "",
                "| | " + " | ".join(label for label, _ in models) + " |",
                "|---|" + "---|" * len(models),
                "| clean chrF (BLEU) | " + " | ".join(
                    f"{m['clean']['chrf']:.2f} ({m['clean']['bleu']:.2f})" for _, m in models) + " |"]  # fmt: skip
        settings = [s for s in SETTINGS if all(s in m["attacks"] for _, m in models)]
        for setting in settings:
            cells = []
            for _, m in models:
                c = m["attacks"][setting]["chrf"]
                cells.append(
                    f"{c['s_src']:.1f} / {c['d_tgt']:.1f} / {100 * c['success']['value']:.1f} %"
                )
            out.append(f"| {setting}: s_src / d_tgt / success | " + " | ".join(cells) + " |")
        out.append("")
    return out


def write_tables(results: dict) -> str:
    """tables.md text: clean scores and one attack table per model, built from results.json,
    then the per-language-pair summary of `paper_tables` when there is more than one model."""
    out = ["# Seq2seq robustness (Michel et al. 2019 framework) on Multi30k", "",
           f"Profile `{results['config']['profile']}`; test split `{results['config']['test_split']}`; "
           "scores on lowercased, tokenised text; s_src and d_tgt in percent; success = s_src + d_tgt > 1.", ""]  # fmt: skip
    for name, m in results["models"].items():
        clean = m["clean"]
        out += [f"## {name}", "",
                f"Clean test ({clean['n']} sentences): BLEU {clean['bleu']:.2f}, chrF {clean['chrf']:.2f}; "
                f"training {m['train_seconds']:.0f} s ({len(m['history'])} epochs).", "",
                _table(m["attacks"]), ""]  # fmt: skip
    if len(results["models"]) > 1:
        out += ["## Summary per language pair (chrF; s_src / d_tgt in percent, as in Michel et al.'s "
                "Table 3)", ""] + paper_tables(results)  # fmt: skip
    return "\n".join(out) + "\n"


def write_figure(records: list[dict], path: Path) -> None:
    """Scatter of s_src against d_tgt (chrF) per attack setting, with the success line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({r["model"] for r in records})
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, name in zip(axes[0], models):
        for setting in SETTINGS:
            rs = [r for r in records if r["model"] == name and r["attack"] == setting]
            if rs:
                ax.scatter(
                    [r["chrf"]["s_src"] for r in rs],
                    [r["chrf"]["d_tgt"] for r in rs],
                    s=6,
                    alpha=0.4,
                    label=setting,
                )
        ax.plot([0, 1], [1, 0], "k--", lw=1, label="s_src + d_tgt = 1")
        ax.set(
            xlabel="s_src (chrF)",
            ylabel="d_tgt (chrF)",
            title=name,
            xlim=(0, 1.02),
            ylim=(-0.02, 1.02),
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path.with_suffix(".tmp.png"), dpi=110)
    plt.close(fig)
    path.with_suffix(".tmp.png").replace(path)


PROTOCOL_FIELDS = ("test_split", "n_attack", "n_clean", "top_k", "knn_k", "attack_batch")
"""Config fields that must match for an earlier run's records of a model to be reused."""


def find_reusable(
    name: str, history: list, train_seconds: float, config: Config, folders
) -> tuple[Path, dict] | None:
    """The first run folder of `folders` whose results.json holds model `name` trained by the
    same run (same history and training time) and attacked under `config`'s protocol with
    every setting of `config`; returns (the records file, its results entry), else None.
    The file is the folder's own record file, or the one the entry names (`records`): its
    `.jsonl.gz`, or a plain `.jsonl` where only that exists."""
    for folder in map(Path, folders):
        path = folder / "results.json"
        if not path.is_file():
            continue
        earlier = json.loads(path.read_text())
        entry = earlier["models"].get(name)
        if (
            entry is None
            or any(earlier["config"].get(f) != getattr(config, f) for f in PROTOCOL_FIELDS)
            or not set(config.settings) <= set(entry["attacks"])
            or entry["history"] != history
            or entry["train_seconds"] != train_seconds
        ):
            continue
        named = folder / entry.get("records", "records.jsonl.gz")
        stem = named.name.removesuffix(".gz").removesuffix(".jsonl")
        return record_file(named.parent, stem).resolve(), entry
    return None


def read_model_records(path: Path, name: str, config: Config) -> list[dict]:
    """Model `name`'s records of `config.settings` in the records file `path`, checked to be
    complete: one per attacked sentence and setting."""
    rows = map(json.loads, read_lines(path))
    records = [r for r in rows if r["model"] == name and r["attack"] in config.settings]
    expected = config.n_attack * len(config.settings)
    if len(records) != expected:
        raise ValueError(f"{path} holds {len(records)} records of {name}, expected {expected}")
    return records


def run(
    config: Config,
    text_dir,
    out: Path,
    *,
    models_dir: Path | None = None,
    reuse=(),
    log=print,
) -> dict:
    """Train, evaluate and attack every model of `config`; write everything into `out`
    (models into `models_dir`, default out/models). A model attacked by a run in `reuse`
    (see `find_reusable`) keeps that run's records and clean scores."""
    start = time.perf_counter()
    out = Path(out)
    models_dir = out / "models" if models_dir is None else Path(models_dir)
    results = {"config": json.loads(json.dumps(dataclasses.asdict(config))), "models": {}}
    all_records, own_records = [], []
    cases = [(a, lang, u) for a in config.archs for lang in config.src_langs for u in config.units]
    for arch, lang, unit in cases:
        spec = config.spec(arch, lang, unit)
        trained = training_run(spec, models_dir) if reuse else None
        found = trained and find_reusable(
            spec.name, trained[0], trained[1]["train_seconds"], config, reuse
        )
        if found:
            path, entry = found
            log(f"{spec.name}: reusing its attack records in {path}")
            records = read_model_records(path, spec.name, config)
            all_records += records
            results["models"][spec.name] = _model_results(
                arch, lang, unit, entry["clean"], trained[0], trained[1], entry["attack_seconds"],
                records, config,
            )  # fmt: skip
            if path.parent == out.resolve():  # the output folder's own record file
                own_records += records
            else:
                results["models"][spec.name]["records"] = os.path.relpath(path, out.resolve())
            continue
        model = train_or_load(spec, text_dir, models_dir, log=log)
        meta = json.loads((models_dir / spec.name / "config.json").read_text())
        test = load_parallel(text_dir, config.test_split, lang, spec.tgt_lang)
        clean = evaluate_translation(model, test, limit=config.n_clean)
        log(f"{spec.name}: clean BLEU {clean['bleu']:.2f} chrF {clean['chrf']:.2f}")
        src, ref = test.src[: config.n_attack], test.tgt[: config.n_attack]
        shared = dict(
            settings=config.settings, top_k=config.top_k, knn_k=config.knn_k,
            batch_size=config.attack_batch, max_len=spec.train.max_len, log=log,
        )  # fmt: skip
        if unit == "bpe":
            word_vocab = training_word_vocab(spec, text_dir)
            records, seconds = attack_bpe_model(model, word_vocab, src, ref, **shared)
        else:
            records, seconds = attack_model(model, src, ref, **shared)
        all_records += records
        own_records += records
        results["models"][spec.name] = _model_results(
            arch, lang, unit, clean, model.history, meta, seconds, records, config
        )
    atomic_write_lines(
        out / "records.jsonl.gz", (json.dumps(r, ensure_ascii=False) for r in own_records)
    )
    (out / "records.jsonl").unlink(missing_ok=True)  # a plain file of an earlier run
    results["seconds"] = time.perf_counter() - start
    results["folder"] = results_folder(out)
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "tables.md", write_tables(results))
    write_figure(all_records, out / "figures" / "src_vs_tgt.png")
    atomic_write_json(out / "run.json", {
        "command": "python -m experiments.seq2seq_robustness " + " ".join(sys.argv[1:]),
        "config": results["config"], "environment": environment(extra_packages=("sacrebleu",)), "seconds": results["seconds"],
    })  # fmt: skip
    return results


def _model_results(arch, lang, unit, clean, history, meta, seconds, records, config) -> dict:
    """One model's results.json entry; the attack tables are computed from `records`."""
    return {
        "arch": arch, "src_lang": lang, "unit": unit,
        "clean": {k: clean[k] for k in ("bleu", "chrf", "n", "mean_sentence_chrf")},
        "history": history,
        "train_seconds": meta["train_seconds"],
        "attack_seconds": seconds,
        "attacks": {
            s: {m: summarize_records([r for r in records if r["attack"] == s], m) for m in ("chrf", "bleu")}
            for s in config.settings
        },
    }  # fmt: skip
