"""Adversarial training of the word-level LSTM (Michel et al. 2019, Tables 5 and 6), on CPU.

    python -m experiments.seq2seq_robustness.adv_training [--text-dir DIR] [--out results/seq2seq] \\
        [--runs nll uncon-1.0 uncon-0.5 charswap-1.0 charswap-0.5] [--epochs 1] [--n-attack 500] \\
        [--from-scratch]

Starting from the trained clean model in <out>/models/, each run fine-tunes it for
`--epochs` epochs with one objective: "nll" (plain NLL, the baseline that sees the same
extra training) or "<attack>-<alpha>" ((1 - alpha) NLL(x) + alpha NLL(x_adv), x_adv drawn
on the fly among the top-3 first-order candidates, see `advjax_text.translate`).
Every model is then scored on clean test BLEU / chrF and attacked with the unconstrained
and CharSwap attacks (exact re-scoring of the top 5); results go to
<out>/adv_training/{results.json,tables.md,records.jsonl.gz,run.json}.

With `--from-scratch` (the paper's protocol) each adversarial objective instead trains a
fresh model with the clean model's full recipe (all pairs, its epochs and seed), and the
clean model itself is the NLL baseline; results go to <out>/adv_training_scratch/.
"""

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from statistics import median

import jax
import jax.numpy as jnp

from advjax import backend
from advjax.io import environment
from advjax.records import (
    atomic_write_json,
    atomic_write_lines,
    atomic_write_text,
    read_lines,
    record_file,
)
from advjax_text.data import load_parallel, resolve_multi30k_dir
from advjax_text.translate import fit, make_adv_train_step, word_mask
from experiments.cli import results_folder
from experiments.seq2seq_robustness.attacks import attack_model, summarize_records
from experiments.seq2seq_robustness.main import profile
from experiments.seq2seq_robustness.models import (
    evaluate_translation,
    train_or_load,
    units,
)

RUNS = ("nll", "uncon-1.0", "uncon-0.5", "charswap-1.0", "charswap-0.5")


def parse_run(name: str) -> tuple[str | None, float]:
    """'charswap-0.5' -> ('charswap', 0.5); 'nll' -> (None, 0.0)."""
    if name == "nll":
        return None, 0.0
    attack, alpha = name.rsplit("-", 1)
    attack = {"uncon": "unconstrained"}.get(attack, attack)
    if attack not in ("unconstrained", "charswap"):
        raise ValueError(f"run {name!r}: attack must be uncon or charswap")
    return attack, float(alpha)


PROTOCOL_KEYS = ("base_model", "fine_tune_epochs", "from_scratch_epochs", "n_attack", "train_size")
"""What a finished run's numbers depend on besides its own objective."""


def finished_runs(previous: dict | None, header: dict) -> dict:
    """The runs of an earlier invocation (its results.json) that this one keeps: all of
    them if the protocol (`PROTOCOL_KEYS`) is the same, else none. A run takes up to ~40 min
    on 2 cores, so one invocation may train some objectives and a later one the rest.
    """
    if not previous or any(previous.get(k) != header.get(k) for k in PROTOCOL_KEYS):
        return {}
    return dict(previous.get("runs", {}))


def main(argv: list[str] | None = None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--text-dir", default=None)
    p.add_argument("--out", default="results/seq2seq")
    p.add_argument("--src-lang", default="fr", choices=["fr", "de", "cs"])
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=RUNS)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--n-attack", type=int, default=500)
    p.add_argument(
        "--train-size", type=int, default=None, help="fine-tune on the first N training pairs"
    )
    p.add_argument("--cost-only", action="store_true", help="only time the steps (step_cost.json)")
    p.add_argument(
        "--from-scratch",
        action="store_true",
        help="train each objective from a fresh initialisation for the clean model's epochs "
        "(the paper's protocol; the clean model is the NLL run) into <out>/adv_training_scratch",
    )
    p.add_argument(
        "--force", action="store_true", help="redo runs already in <folder>/results.json"
    )
    args = p.parse_args(argv)
    text_dir = resolve_multi30k_dir(args.text_dir)
    out = Path(args.out)
    config = profile("default")
    spec = dataclasses.replace(config.model, src_lang=args.src_lang)
    base = train_or_load(spec, text_dir, out / "models")
    train = load_parallel(text_dir, "train", spec.src_lang, spec.tgt_lang)
    val = load_parallel(text_dir, "val", spec.src_lang, spec.tgt_lang)
    test = load_parallel(text_dir, config.test_split, spec.src_lang, spec.tgt_lang)
    enc = lambda vocab, sents: [vocab.ids(s) for s in sents]  # noqa: E731
    n = args.train_size or len(train.src)
    train_ids = (
        enc(base.src_vocab, units(spec, train.src[:n], None)),
        enc(base.tgt_vocab, train.tgt[:n]),
    )
    val_ids = (enc(base.src_vocab, val.src), enc(base.tgt_vocab, val.tgt))
    if args.from_scratch:
        tune, folder = spec.train, out / "adv_training_scratch"
        runs = [r for r in args.runs if r != "nll"]  # the clean model is that run
    else:
        tune = dataclasses.replace(spec.train, epochs=args.epochs, seed=spec.train.seed + 1)
        folder, runs = out / "adv_training", args.runs
    mask = jnp.asarray(word_mask(base.src_vocab))
    if args.cost_only:
        cost = step_cost(base, tune, train_ids, mask)
        atomic_write_json(
            folder / "step_cost.json",
            {"step_cost": cost, "environment": environment(extra_packages=("sacrebleu",))},
        )
        print(cost)
        return cost
    results = {"base_model": spec.name, "fine_tune_epochs": None if args.from_scratch else args.epochs,
               "from_scratch_epochs": tune.epochs if args.from_scratch else None, "n_attack": args.n_attack,
               "train_size": n, "step_cost": step_cost(base, tune, train_ids, mask), "runs": {}}  # fmt: skip
    print(f"step cost (adversarial / NLL step): {results['step_cost']}", flush=True)
    previous_path, records_path = folder / "results.json", record_file(folder)
    previous = None
    if not args.force and previous_path.exists() and records_path.exists():
        previous = json.loads(previous_path.read_text())
    results["runs"] = finished_runs(previous, results)
    kept = {f"{spec.name}/{run}" for run in results["runs"]}
    records = []
    if kept:
        records = [r for r in map(json.loads, read_lines(records_path)) if r.get("model") in kept]
        print(f"kept from {previous_path}: {sorted(results['runs'])}", flush=True)
    for run in [r for r in ["base", *runs] if r not in results["runs"]]:
        start = time.perf_counter()
        if run == "base":
            params, history = base.params, base.history if args.from_scratch else []
        else:
            attack, alpha = parse_run(run)
            step = (
                None
                if attack is None
                else make_adv_train_step(setting=attack, alpha=alpha, word_mask=mask, top_k=3)
            )
            init = None if args.from_scratch else base.params
            state, history = fit(base.config, tune, train_ids, val_ids, step_fn=step, init_params=init,
                                 log=lambda e, r=run: print(f"{r}: {e}", flush=True))  # fmt: skip
            params = state.params
        model = base._replace(params=params, history=history)
        clean = evaluate_translation(model, test)
        recs, _ = attack_model(
            model, test.src[: args.n_attack], test.tgt[: args.n_attack],
            settings=("unconstrained", "charswap"), top_k=config.top_k, batch_size=config.attack_batch,
            max_len=spec.train.max_len, log=lambda _: None,
        )  # fmt: skip
        for r in recs:
            r["model"] = f"{spec.name}/{run}"
        records += recs
        results["runs"][run] = {
            "clean_bleu": clean["bleu"], "clean_chrf": clean["chrf"], "history": history,
            "train_seconds_per_epoch": [h["seconds"] for h in history],
            "attacks": {s: summarize_records([r for r in recs if r["attack"] == s]) for s in ("unconstrained", "charswap")},
            "seconds": time.perf_counter() - start,
        }  # fmt: skip
        r = results["runs"][run]
        print(f"{run}: BLEU {clean['bleu']:.2f} chrF {clean['chrf']:.2f} d_tgt uncon "
              f"{r['attacks']['unconstrained']['d_tgt']:.2f} charswap {r['attacks']['charswap']['d_tgt']:.2f}", flush=True)  # fmt: skip
        atomic_write_lines(  # after every run, records first: an interrupted run loses only itself
            folder / "records.jsonl.gz", (json.dumps(r, ensure_ascii=False) for r in records)
        )
        (folder / "records.jsonl").unlink(missing_ok=True)  # a plain file of an earlier run
        results["folder"] = results_folder(folder)
        atomic_write_json(previous_path, results)
    atomic_write_text(folder / "tables.md", table(results))
    atomic_write_json(folder / "run.json", {
        "command": "python -m experiments.seq2seq_robustness.adv_training " + " ".join(sys.argv[1:] if argv is None else argv),
        "args": vars(args), "environment": environment(extra_packages=("sacrebleu",)), "jax_devices": [str(d) for d in jax.devices()],
    })  # fmt: skip
    print(table(results))
    return results


def step_cost(base, tune, train_ids, mask, *, steps: int = 10) -> dict:
    """Seconds per step of the NLL step and of each adversarial step on the same batches,
    measured interleaved after compilation (robust to the machine's other load)."""
    from advjax_text.translate import batches, create_train_state, train_step

    state = create_train_state(jax.random.key(0), base.config, tune).replace(params=base.params)
    data = [b for b in batches(*train_ids, batch_size=tune.batch_size, max_len=tune.max_len)
            if b[0].shape[1] == 16 and b[1].shape[1] == 16][:steps]  # fmt: skip
    fns = {"nll": train_step}
    for attack in ("unconstrained", "charswap"):
        for alpha in (1.0, 0.5):
            fns[f"{attack}-{alpha}"] = make_adv_train_step(
                setting=attack, alpha=alpha, word_mask=mask, top_k=3
            )
    totals = dict.fromkeys(fns, 0.0)
    for name, fn in fns.items():  # compile
        jax.block_until_ready(fn(state, *data[0], jax.random.key(0)))
    for i, batch in enumerate(data):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(state, *batch, jax.random.key(i)))
            totals[name] += time.perf_counter() - start
    return {**{f"{k}_s_per_step": v / len(data) for k, v in totals.items()},
            **{f"{k}_ratio": totals[k] / totals["nll"] for k in fns if k != "nll"}}  # fmt: skip


def table(results: dict) -> str:
    """Markdown: clean BLEU/chrF and d_tgt / success under each attack, per training run."""
    scratch = results.get("from_scratch_epochs")
    baseline = "base" if scratch else "nll"
    nll = results["runs"].get(baseline, {}).get("train_seconds_per_epoch") or [float("nan")]
    cost = results["step_cost"]
    how = (
        f"trained from scratch for {scratch} epochs on {results['train_size']} training pairs; "
        "base is the clean model, trained the same way with NLL"
        if scratch
        else f"fine-tuned {results['fine_tune_epochs']} epoch(s) on {results['train_size']} "
        "training pairs from the clean model"
    )
    lines = [
        f"# Adversarial training of {results['base_model']} ({how}; attacks on {results['n_attack']} test sentences)", "",
        "Step cost relative to an NLL step (interleaved timing, same batches): "
        + ", ".join(f"{k[:-6]} {v:.2f}x" for k, v in cost.items() if k.endswith("_ratio")) + ". "
        "s / epoch: the median epoch's wall time when each model trained (a model trained in "
        "another run ran under other load); the step cost is the like-for-like comparison.", "",
        f"| training | clean BLEU | clean chrF | d_tgt uncon. | success uncon. | d_tgt CharSwap | success CharSwap | s / epoch (x {baseline}) |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for run, r in results["runs"].items():
        secs = r["train_seconds_per_epoch"]
        cost = f"{median(secs):.0f} ({median(secs) / median(nll):.2f}x)" if secs else "-"
        a, c = r["attacks"]["unconstrained"], r["attacks"]["charswap"]
        lines.append(
            f"| {run} | {r['clean_bleu']:.2f} | {r['clean_chrf']:.2f} | {a['d_tgt']:.2f} | "
            f"{100 * a['success']['value']:.1f} % | {c['d_tgt']:.2f} | {100 * c['success']['value']:.1f} % | {cost} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
