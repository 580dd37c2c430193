"""Adversarial perturbations of translation models (Michel et al., NAACL 2019) on Multi30k.

    python -m experiments.seq2seq_robustness [--profile default|quick] [--text-dir DIR] [--out DIR]
        [--set archs=lstm,transformer] [--set src_langs=fr,de,cs] [--set units=word,bpe]
        [--set n_attack=N] [--models-dir DIR] [--reuse DIR ...]

Trains (or reloads) a model for each architecture, language pair -> en and unit
(LSTM with attention by default, `--set archs=transformer` the Transformer of `Config.transformer`;
word-level by default, `--set units=bpe` selects the subword model, attacked by
`experiments.seq2seq_robustness.bpe_attacks`), reports clean BLEU / chrF on test_2016_flickr,
attacks the first `n_attack` test sentences with the unconstrained, kNN and CharSwap
one-word substitutions, and writes into the output folder (default results/seq2seq/,
quick: a temporary folder; models go to `--models-dir`, default OUT/models):
records.jsonl.gz (one record per case and setting), results.json (clean scores, attack
tables, timings), tables.md, figures/*.png and run.json (command, config, versions, git
revision). Every table number is computed from the records.

`--reuse DIR ...` names earlier run folders: a model that one of them attacked, the same trained
model (same training history and time) under the same protocol, is not attacked again. Its
records stay where they are and results.json names that file (`records`), except when the folder
is the output folder itself (a resumed run), whose records are kept in the new records.jsonl.gz
(a folder's plain records.jsonl is read where no records.jsonl.gz is there).
One run writes a folder at a time: a second one is refused at once.
"""

import argparse
import tempfile
from pathlib import Path

from advjax import backend
from advjax_text.data import resolve_multi30k_dir
from experiments.cli import hold_output_folder, run_command
from experiments.overrides import add_set_flag, apply_overrides
from experiments.seq2seq_robustness.config import profile
from experiments.seq2seq_robustness.study import run, write_tables


def main(argv: list[str] | None = None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--profile", default="default", choices=["default", "quick"])
    p.add_argument(
        "--text-dir",
        default=None,
        help="folder laid out like ../shared/data/text (else $ADVJAX_TEXT_DIR)",
    )
    p.add_argument(
        "--out", default=None, help="output folder (default results/seq2seq, quick: a temp folder)"
    )
    add_set_flag(p, "archs=lstm,transformer, src_langs=fr,de,cs, units=word,bpe, n_attack=200")
    p.add_argument("--models-dir", default=None, help="model folder (default OUT/models)")
    p.add_argument(
        "--reuse",
        nargs="+",
        default=(),
        metavar="DIR",
        help="earlier run folders whose records of the same models under the same protocol "
        "are reused (referenced, or kept when DIR is the output folder)",
    )
    args = p.parse_args(argv)
    config = apply_overrides(profile(args.profile), args.overrides)
    out = Path(args.out) if args.out else (
        Path(tempfile.mkdtemp(prefix="seq2seq_quick_")) if config.profile == "quick" else Path("results/seq2seq"))  # fmt: skip
    return hold_output_folder(out, lambda: study(config, args, out))


def study(config, args: argparse.Namespace, out: Path) -> dict:
    """Train (or reload) and attack every model into `out` (the lock is held); the results."""
    text_dir = resolve_multi30k_dir(args.text_dir)
    results = run(config, text_dir, out, models_dir=args.models_dir, reuse=args.reuse)
    print(write_tables(results))
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    run_command(main, "experiments.seq2seq_robustness")
