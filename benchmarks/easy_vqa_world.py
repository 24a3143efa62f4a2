"""The synthetic world's VLM family on a real third-party data set: easy-VQA's test split.

easy-VQA (PyPI ``easy-vqa``, MIT; loader format ``easy-vqa``, ``evaluators/loaders/easyvqa.py``)
is read from the installed package; every VLM version of a built world (default: the shipped
world, ``evaluators/world/shipped/``: each ``checkpoints.vlm`` entry of its manifest and the
language-prior version) is run through the project's own runner path, as ``vlgate evaluate``
runs a suite (``running/suite.py``: ``load_items`` → ``load_vlm`` → ``make_runner`` →
``Runner.run`` → ``finished_entry``, which validates and scores the records with the
registry's metric math), under the ``vlgate`` protocol the world's models are trained on.
Printed per version: VL-LCM (``lcm``), ``acc``, ``j_acc``, ``f1``, MC accuracy per question
type, and chance (the mean of 1/K over the items).

The items: with ``--items N`` (default 1000) a deterministic subset, every ``S``-th question of
the split from the first (``S = len(split) // N``; items 0, S, 2S, … up to N of them, so every
part of the split and most of its 1,000 images are asked about; the same idea as the suite's
shards, ``items[k::n]``); ``--items 0`` runs all 9,673. On this project's 2-core machine
(``OMP_NUM_THREADS=1``) a version takes about 5 ms an item once loaded, so the default run
takes about half a minute and the whole split a few minutes. Also printed: how many of the items'
question and option words the world VLM's word-level tokenizer does not know (they reach the
model as ``<unk>``). That is expected: the world's vocabulary is its own scenes' (no
"rectangle", "gray", "teal", "not", ...), and it is part of what this benchmark measures.

    python benchmarks/easy_vqa_world.py [--world DIR] [--items 1000] [--split test] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import vlgate.evaluators.world
from vlgate.evaluators.loaders.easyvqa import OPTIONS, package_split
from vlgate.evaluators.output import EvaluatorOutput
from vlgate.evaluators.runners.store import RecordStore
from vlgate.evaluators.running.items import load_items
from vlgate.evaluators.running.suite import Suite, finished_entry, load_vlm, make_runner

SHIPPED = Path(vlgate.evaluators.world.__file__).parent / "shipped"
METRICS = ("lcm", "acc", "j_acc", "f1")


def versions(world: Path) -> dict[str, Path]:
    """Every VLM version of a built world, by name ("steps N", "language prior")."""
    checkpoints = json.loads((world / "manifest.json").read_text())["checkpoints"]
    found = {f"steps {steps}": world / relative for steps, relative in checkpoints["vlm"].items()}
    if "vlm_language_prior" in checkpoints:
        found["language prior"] = world / checkpoints["vlm_language_prior"]
    return found


def subset(items: list[Any], n: int) -> tuple[list[Any], int]:
    """Every ``stride``-th item from the first, at most ``n`` of them (all for n = 0); and the stride."""
    if n <= 0 or n >= len(items):
        return list(items), 1
    stride = len(items) // n
    return items[::stride][:n], stride


def word_counts(tokenizer: Any, texts: Iterable[str]) -> tuple[Counter[str], Counter[str]]:
    """(every word's occurrences, the occurrences of the words ``tokenizer`` encodes with its
    unknown token), words as the tokenizer's own normalizer and pre-tokenizer split them."""
    backend = tokenizer.backend_tokenizer
    words: Counter[str] = Counter()
    for text in texts:
        normalized = backend.normalizer.normalize_str(text) if backend.normalizer is not None else text
        words.update(piece for piece, _ in backend.pre_tokenizer.pre_tokenize_str(normalized))
    unk = tokenizer.unk_token_id
    unknown = Counter({word: n for word, n in words.items() if unk is not None and unk in tokenizer(word, add_special_tokens=False)["input_ids"]})
    return words, unknown


def has_unknown(tokenizer: Any, text: str) -> bool:
    return bool(word_counts(tokenizer, [text])[1])


def report_unknown(tokenizer: Any, items: list[Any], everything: list[Any]) -> None:
    groups = [("these items", items)] if len(items) < len(everything) else []
    for label, chosen in [*groups, (f"the whole split ({len(everything)})", everything)]:
        q_words, q_unknown = word_counts(tokenizer, (item.question for item in chosen))
        o_words, o_unknown = word_counts(tokenizer, (option for item in chosen for option in item.options))
        hit = sum(1 for item in chosen if has_unknown(tokenizer, item.question))
        print(
            f"  {label}: question words unknown {sum(q_unknown.values())}/{sum(q_words.values())} occurrences"
            f" ({len(q_unknown)}/{len(q_words)} distinct), questions with an unknown word {hit}/{len(chosen)};"
            f" option words unknown {sum(o_unknown.values())}/{sum(o_words.values())} ({len(o_unknown)}/{len(o_words)} distinct)"
        )
    _, q_unknown = word_counts(tokenizer, (item.question for item in everything))
    _, o_unknown = word_counts(tokenizer, (option for item in everything for option in item.options))
    print(f"  unknown words: {', '.join(sorted(q_unknown | o_unknown))}")
    per_type = {kind: [option for option in options if has_unknown(tokenizer, option)] for kind, options in OPTIONS.items()}
    print("  unknown options per type: " + "; ".join(f"{kind} {', '.join(found) or '-'} of {len(OPTIONS[kind])}" for kind, found in per_type.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=Path, default=SHIPPED, help="a built world's folder (default: the shipped world)")
    parser.add_argument("--items", type=int, default=1000, help="how many questions (a strided subset; 0: all)")
    parser.add_argument("--split", default="test", choices=("test", "train"))
    parser.add_argument("--out", type=Path, default=None, help="where records go (default: a temporary folder); a rerun with the same --out reuses them")
    args = parser.parse_args()

    data = package_split(args.split)
    out = args.out or Path(tempfile.mkdtemp(prefix="easy-vqa-world-"))
    suite = Suite.model_validate({"name": "easy-vqa", "evaluators": {"lcm-mc": {"data": data, "format": "easy-vqa", "protocol": "vlgate"}}})
    spec = suite.evaluators["lcm-mc"]
    everything, load_errors = load_items("lcm-mc", spec, out)
    items, stride = subset(everything, args.items)
    types = Counter(item.category for item in items)
    chance = {kind: sum(1 / len(item.options) for item in items if item.category == kind) / n for kind, n in types.items()}
    overall_chance = sum(1 / len(item.options) for item in items) / len(items)
    print(f"easy-VQA {args.split} ({data}): {len(everything)} questions, {len(load_errors)} load errors; running {len(items)} (stride {stride} from the first)")
    print(f"  types: {', '.join(f'{kind} {n}' for kind, n in sorted(types.items()))}; chance acc {overall_chance:.3f} (" + ", ".join(f"{kind} {p:.3f}" for kind, p in sorted(chance.items())) + ")")
    print(f"world {args.world}; records in {out}")

    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # "Loading weights" once per version
    kinds = sorted(types)
    unknown_question: set[str] | None = None
    main_rows, split_rows = [], []
    for name, checkpoint in versions(args.world).items():
        started = time.perf_counter()
        version_out = out / name.replace(" ", "-")
        vlm = load_vlm(str(checkpoint), suite)
        try:
            if unknown_question is None and getattr(vlm, "tokenizer", None) is not None:
                print(f"words the world VLM's tokenizer does not know ({checkpoint.name}'s; every version shares the world's vocabulary):")
                report_unknown(vlm.tokenizer, items, everything)
                unknown_question = {item.id for item in items if has_unknown(vlm.tokenizer, item.question)}
            runner = make_runner("lcm-mc", spec, vlm, version_out, suite)
            try:
                result = runner.run(items, RecordStore(version_out / "lcm-mc" / "records.jsonl"), suite.batch_size, progress=False)
            finally:
                runner.close()
        finally:
            vlm.close()
        result.errors = load_errors + result.errors
        entry = finished_entry(result, version_out, len(items), len(load_errors), runner.models, runner.protocol)
        seconds = time.perf_counter() - started
        metrics = entry.metrics or {}
        by_type = metrics.get("by_category", {})
        cells = [f"{metrics[m]:6.3f}" if metrics.get(m) is not None else f"{'-':>6}" for m in METRICS]
        cells += [f"{by_type[kind]['acc']:10.3f}" if kind in by_type else f"{'-':>10}" for kind in kinds]
        main_rows.append(f"  {name:>15} | " + " | ".join(cells) + f" | {seconds:7.1f}" + (f"  ({len(result.errors)} item errors)" if result.errors else ""))
        if unknown_question is not None:
            # per type, accuracy on the questions the tokenizer reads whole and on those with an
            # unknown word: the mean of the registry's per-sample "correct" (lcm_mc.per_sample) in each group
            samples = EvaluatorOutput.from_folder("lcm-mc", version_out / "lcm-mc").samples
            assert samples is not None
            kind_of = {item.id: item.category for item in items}
            unknown = samples["id"].astype(str).isin(unknown_question)
            cells = []
            for kind in kinds:
                of_kind = samples["id"].astype(str).map(kind_of) == kind
                for mask in (of_kind & ~unknown, of_kind & unknown):
                    cells.append(f"{samples.loc[mask, 'correct'].mean():.3f} ({int(mask.sum()):>3})".rjust(15) if mask.any() else f"{'-':>15}")
            split_rows.append(f"  {name:>15} | " + " | ".join(cells))
    print(f"  {'version':>15} | " + " | ".join(f"{m:>6}" for m in METRICS) + " | " + " | ".join(f"acc {kind:>6}" for kind in kinds) + " | seconds")
    print(f"  {'chance':>15} | {'':>6} | {overall_chance:6.3f} | {'':>6} | {'':>6} | " + " | ".join(f"{chance[kind]:10.3f}" for kind in kinds) + " |")
    print("\n".join(main_rows))
    if split_rows:
        print("accuracy (n) by question type, on questions whose words the tokenizer knows (known) or not (unk):")
        print(f"  {'version':>15} | " + " | ".join(f"{kind + ' ' + group:>15}" for kind in kinds for group in ("known", "unk")))
        print("\n".join(split_rows))


if __name__ == "__main__":
    main()
