"""The commands on files and checkpoints: score records, correlate a table, build the
world, evaluate a suite, check a model's fast paths, print a checkpoint's vLLM layout, write
a model's starting configuration, and the two showcases (examples, demo). None of them
needs a tracking server but the demo, which brings its own."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from vlgate.cli.commands.base import EXIT_BAD_INPUT, EXIT_NOT_EXACT, Answer, Command, UserError
from vlgate.text import shell_command, visible


class Score(Command):
    name = "score"
    help = "metrics from per-sample records (docs/metrics.md), one JSON object on stdout"
    description = "Validate a JSONL file of per-sample records against the evaluator's schema and print its metrics as JSON."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from vlgate.evaluators import registry

        parser.add_argument("evaluator", choices=registry.names(), help="which record contract and metrics")
        parser.add_argument("file", help="JSON Lines file, one record per line")
        parser.add_argument("--features", metavar="F.npz", help="genception only: features t0..tT (N x D each) for fid@t and gc_fid@T")
        parser.add_argument("--by", metavar="FIELD", help="break the metrics down by this record field (default: category/concept when present)")
        parser.add_argument("--skip-invalid", action="store_true", help="score the valid records and report the invalid ones instead of failing")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.evaluators.records import InvalidRecordsError
        from vlgate.evaluators.scoring import score_file

        if not Path(args.file).is_file():
            raise UserError(f"{args.file}: no such file")
        try:
            metrics, valid = score_file(args.evaluator, args.file, by=args.by, features_path=args.features, skip_invalid=args.skip_invalid)
        except InvalidRecordsError as exc:
            lines = len({e.line for e in exc.errors})
            details = tuple(f"{args.file}: {error}" for error in exc.errors)
            raise UserError(f"{args.file}: {lines} invalid record(s); nothing scored (use --skip-invalid to score the rest)", details) from None
        except (ValueError, OSError) as exc:
            raise UserError(str(exc)) from None
        answer: dict[str, object] = dict(metrics)
        if valid.errors:
            for error in valid.errors:
                print(visible(f"{args.file}: skipped {error}"), file=sys.stderr)
            answer["skipped"] = [error.as_dict() for error in valid.errors]
        return Answer(answer)


def _read_csv_strictly(path: Path) -> tuple[list[list[str]], list[str]]:
    """(rows, header) of a CSV with a header line; anything pandas would guess about — no
    such file, a folder, not UTF-8 (a UTF-16 export), no header, a row with more or fewer
    fields than the header, an unterminated quote — is a UserError naming the file and line."""
    import csv

    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not a CSV file") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text (byte {error.start}); save the table as UTF-8 CSV") from None
    reader = csv.reader(text.splitlines(), skipinitialspace=True, strict=True)
    try:
        lines = [(reader.line_num, row) for row in reader if row]
    except csv.Error as error:
        raise UserError(f"{path}: line {reader.line_num}: {error}") from None
    if not lines:
        raise UserError(f"{path}: empty; expected a header line and one row per model")
    (_, header), rows = lines[0], lines[1:]
    for line, row in rows:
        if len(row) != len(header):
            raise UserError(f"{path}: line {line}: {len(row)} fields, the header has {len(header)}")
    return [row for _, row in rows], header


class Correlate(Command):
    name = "correlate"
    help = "Pearson/Spearman/Kendall between table columns across models (docs/metrics.md#correlations)"
    description = "Correlate column X with each column of Y in a CSV with one row per model; prints {y: {pearson, spearman, kendall, n}}."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("table", metavar="TABLE.csv")
        parser.add_argument("--x", required=True, metavar="COL", help="the label-free metric, e.g. lcm")
        parser.add_argument("--y", required=True, metavar="COL[,COL...]", help="the metrics to correlate with, e.g. acc,j_acc,f1")
        parser.add_argument("--ranks", action="store_true", help="cells are value/rank: values order the models, printed ranks break ties")

    def run(self, args: argparse.Namespace) -> Answer:
        import pandas as pd

        from vlgate.evaluators.metrics.correlation import correlate_table

        rows, header = _read_csv_strictly(Path(args.table))
        frame = pd.DataFrame(rows, columns=header)
        ys = [y.strip() for y in args.y.split(",") if y.strip()]
        if not ys:
            raise UserError("--y names no column")
        try:
            return Answer(correlate_table(frame, args.x, ys, ranks=args.ranks))
        except (KeyError, ValueError) as exc:
            raise UserError(f"{args.table}: {exc.args[0]}") from None


class MakeWorld(Command):
    name = "make-world"
    help = "build the synthetic world: data sets for every evaluator and tiny trained checkpoints"
    description = (
        "Put the offline synthetic world under --out: reused when already there, copied from the world that ships with "
        "vlgate (seed 0: the same weights on every machine; a medium world draws its larger data sets for the same models), or trained from code (--from-code, other seeds). "
        "Prints what is there; its manifest (every file with its hash) is WORLD/manifest.json, or --json."
    )
    json_help = "the world's folder and its whole manifest (every file with its hash) as one JSON object"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--size", choices=("small", "medium"), default="small", help="the evaluation data sets' size (small is the tests'; the models are the same)")
        parser.add_argument("--out", help="target folder (default: $VLGATE_HOME/world)")
        parser.add_argument("--seed", type=int, default=0, help="fixes every image, item and initial weight")
        parser.add_argument("--force", action="store_true", help="rebuild even if a matching world exists")
        parser.add_argument("--from-code", action="store_true", help="train every checkpoint here instead of copying the world that ships with vlgate (minutes)")
        parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr (each phase of a training, with its time)")
        parser.add_argument(
            "--architecture", choices=("llava", "idefics3"), default="llava",
            help="the VLM family's architecture (idefics3 is always trained here; both run on transformers and on vLLM)",
        )

    def run(self, args: argparse.Namespace) -> Answer:
        import contextlib
        import time

        from vlgate.cli.displays import duration
        from vlgate.cli.world_progress import WorldBuildProgress
        from vlgate.evaluators.world.build import TrainingRecipe, build_world
        from vlgate.home import vlgate_home

        out = Path(args.out) if args.out else vlgate_home() / "world"
        started = time.monotonic()
        phases = None if args.quiet else WorldBuildProgress(out)  # a line on stderr per phase and per checkpoint saved; stdout stays JSON
        with phases or contextlib.nullcontext():
            manifest = build_world(out, size=args.size, seed=args.seed, force=args.force, training=TrainingRecipe(architecture=args.architecture), from_code=args.from_code, on_phase=phases)
        if not args.quiet:
            how = "reused" if manifest.get("cached") else "copied from the world shipped with vlgate" if manifest.get("shipped") else "trained"
            print(f"make-world: {out} {how} in {duration(time.monotonic() - started)}", file=sys.stderr)
        return Answer({"world": str(out)} | manifest, text=lambda: print_world_summary(out, manifest))


def print_world_summary(out: Path, manifest: Mapping[str, object]) -> None:
    """A world in a few lines: where, what it holds, and where its manifest is."""

    def names(value: object) -> str:
        return ", ".join(str(key) for key in value) if isinstance(value, Mapping) else str(value)

    checkpoints = manifest.get("checkpoints")
    files = manifest.get("files")
    print(f"world: {out} ({manifest.get('size')} data sets, seed {manifest.get('seed')}, {manifest.get('architecture')})")
    print(f"  data sets: {names(manifest.get('data', {}))}")
    if isinstance(checkpoints, Mapping):
        for family, entry in checkpoints.items():
            print(f"  checkpoints {family}: {names(entry) if isinstance(entry, Mapping) else entry}")
    print(f"  {len(files) if isinstance(files, Mapping) else 0:,} files, each with its hash in {out / 'manifest.json'}")


class Evaluate(Command):
    name = "evaluate"
    help = "run a suite's evaluators on a model; write per-sample records and metrics"
    description = (
        "Run every evaluator of SUITE.yaml on model M (a local folder, an HF id, or an MLflow URI such as models:/NAME/1) "
        "and write DIR/EVALUATOR/{records.jsonl,metrics.json,errors.jsonl} and DIR/summary.json. Records are written as "
        "they complete and keyed by fingerprint, so an interrupted run resumes where it stopped."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--model", required=True, metavar="M")
        parser.add_argument("--suite", required=True, metavar="SUITE.yaml")
        parser.add_argument("--out", required=True, metavar="DIR")
        parser.add_argument("--quiet", action="store_true", help="no progress bars")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.evaluators.backends.base import BackendError
        from vlgate.evaluators.running.suite import RunOptions, Suite, run_suite
        from vlgate.flows.settings import ServiceConfig
        from vlgate.home import vlgate_home
        from vlgate.registry_hooks.record_cache import open_record_cache

        try:
            suite = Suite.from_file(args.suite)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        record_cache = open_record_cache(ServiceConfig.load().record_cache.settings())  # vlgate.yaml's record_cache (docs/record-cache.md)
        try:
            summary = run_suite(args.model, suite, Path(args.out), RunOptions(cache_dir=vlgate_home() / "model-cache", record_cache=record_cache, progress=not args.quiet))
        except BackendError as exc:
            raise UserError(str(exc)) from None
        failed = {name: entry["error"] for name, entry in summary["evaluators"].items() if "error" in entry}
        for name, entry in summary["evaluators"].items():
            for error in entry.get("item_errors", []):
                print(visible(f"{name}: skipped {error}"), file=sys.stderr)
        for name, message in failed.items():
            print(visible(f"vlgate evaluate: {name} failed: {message} (records computed so far are kept; rerun to resume)"), file=sys.stderr)
        for name, entry in summary["evaluators"].items():
            if entry.get("from_cache"):
                print(visible(f"{name}: {entry['from_cache']} of {entry.get('n_items', 0)} records from the record cache, {entry.get('computed', 0)} computed"), file=sys.stderr)
        metrics = {name: entry.get("metrics", {"error": entry.get("error")}) for name, entry in summary["evaluators"].items()}
        # a task that cannot run as written (docs/lmms-eval.md) is bad input, as a bad suite is
        bad_input = bool(failed) and all(summary["evaluators"][name].get("bad_input") for name in failed)
        return Answer(metrics, status=EXIT_BAD_INPUT if bad_input else 1 if failed else 0)


class CheckModel(Command):
    name = "check-model"
    help = "compare every fast path vlgate would use on a model with the plain forward pass"
    description = (
        "Run a few of the suite's lcm-mc and lcm-nb items (default: the shipped examples) through each fast path vlgate "
        "would use on model M (batched scoring, shared prefixes, batched generation, vLLM's engine when the suite runs on it) and through "
        "the plain path (each request alone, the whole prompt), in float32; print per path the largest difference and "
        f"whether vlgate uses it. Exit status: 0 every path used is exact, {EXIT_NOT_EXACT} one is not, 2 bad input."
    )
    json_help = "the result as one JSON object"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from vlgate.evaluators.backends import kinds as backends

        parser.add_argument("model", metavar="M", help="a checkpoint folder, an MLflow URI (models:/NAME/1) or a Hugging Face id")
        parser.add_argument("--suite", metavar="SUITE.yaml", help="whose lcm-mc/lcm-nb items and batch size to use (default: the shipped examples)")
        parser.add_argument("--items", type=int, default=4, metavar="N", help="items per evaluator (default 4)")
        local_backends = [name for name in backends.names() if backends.get(name).local]
        parser.add_argument(
            "--backend", choices=local_backends,
            help="the engine to check (default: the suite's); another engine than transformers (vllm) is also compared with the transformers plain path",
        )
        parser.add_argument("--device", help="torch device for the check (default: CUDA when present)")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.evaluators.backends import kinds as backends
        from vlgate.evaluators.backends.base import BackendError
        from vlgate.evaluators.running.model_check import EXAMPLES_SUITE, check_model
        from vlgate.evaluators.running.suite import Suite
        from vlgate.home import vlgate_home

        try:
            suite = Suite.from_file(args.suite or EXAMPLES_SUITE)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        backend = args.backend or suite.backend
        if not backends.get(backend).local:
            local = " or ".join(name for name in backends.names() if backends.get(name).local)
            raise UserError(f"suite {suite.name}: its model is served over HTTP (backend: {backend}); check-model runs the checkpoint itself (--backend {local})")
        try:
            result = check_model(args.model, suite, items=args.items, backend=backend, device=args.device, cache_dir=vlgate_home() / "model-cache")
        except (BackendError, ValueError) as exc:
            raise UserError(str(exc)) from None
        for path in result.untrusted():
            print(
                f"vlgate check-model: {path.path} is used on this model but differs from the plain forward pass by {path.largest_difference:.3g} (tolerance {path.tolerance:g})",
                file=sys.stderr,
            )

        def table() -> None:
            from vlgate.cli.terminal import terminal_console
            from vlgate.flows.model_check import check_table

            terminal_console().print(check_table(result))

        return Answer(result.to_dict(), status=0 if result.trusted else EXIT_NOT_EXACT, text=table)


class VllmLayout(Command):
    name = "vllm-layout"
    help = "print the folder to give `vllm serve` for a checkpoint (its weight names as vLLM reads them)"
    description = (
        "transformers 5 saves CLIP and SigLIP vision towers (LLaVA, LLaVA-NeXT, LLaVA-OneVision, PaliGemma, Gemma3, Aya Vision) "
        "without the 'vision_model' level vLLM reads. Print the checkpoint's folder when vLLM reads it as it is, otherwise make "
        "(once, in the model cache, keyed by the checkpoint's digest) a copy with the released names and print that: the same "
        "tensors byte for byte. vlgate's own vLLM backend does this by itself."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", metavar="M", help="a checkpoint folder, an MLflow URI (models:/NAME/1) or a Hugging Face id")
        parser.add_argument("--cache", metavar="DIR", help="where the copy goes (default: $VLGATE_HOME/model-cache)")

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.evaluators.backends.base import BackendError
        from vlgate.evaluators.backends.loading import LoadPolicy, check_checkpoint, model_digest, resolve_model
        from vlgate.evaluators.backends.weight_layout import vllm_layout
        from vlgate.home import vlgate_home

        cache = Path(args.cache) if args.cache else vlgate_home() / "model-cache"
        try:
            path = resolve_model(args.model, cache)
            check_checkpoint(path, LoadPolicy())
            folder = vllm_layout(path, model_digest(path), cache)
        except BackendError as exc:
            raise UserError(str(exc)) from None
        return Answer(str(folder), text=lambda: print(folder))


class Init(Command):
    name = "init"
    help = "write a commented suite, gate policy and vlgate.yaml entry for one registered model"
    description = (
        "Writes NAME/suite.yaml (every evaluator, its data format in a comment), NAME/gate.yaml (floors and "
        "non-inferiority on logical consistency and accuracy) and adds NAME to vlgate.yaml, under $VLGATE_HOME "
        "or --dir. Existing suite and policy files are kept unless --force."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--dir", metavar="DIR", help="where (default: $VLGATE_HOME)")
        parser.add_argument("--force", action="store_true", help="overwrite the model's suite and policy")

    def run(self, args: argparse.Namespace) -> Answer:
        """A commented suite, policy and vlgate.yaml entry for one model, checked as validate checks them."""
        from vlgate.cli.scaffold import ScaffoldError, write_starting_config
        from vlgate.flows.settings import ServiceConfig, model_problem
        from vlgate.home import vlgate_home

        home = Path(args.dir) if args.dir else vlgate_home()
        try:
            written = write_starting_config(home, args.name, force=args.force)
        except ScaffoldError as error:
            raise UserError(str(error)) from None
        problem = model_problem(home, args.name, ServiceConfig.load(home))
        if problem:  # the templates load and agree with each other; this would be vlgate's own bug
            raise RuntimeError(f"vlgate init wrote a configuration it cannot load: {problem}")
        following = (
            f"put your data where {home / args.name / 'suite.yaml'} says (or edit it), register a checkpoint with "
            f"`{shell_command('vlgate', 'register', args.name)} CHECKPOINT_DIR`, and run `{shell_command('vlgate', 'validate', args.name, 1)}` (or `vlgate serve`)"
        )

        def lines() -> None:
            for path in written:
                print(f"wrote {path}")
            print(f"next: {following}")

        return Answer({"written": [str(path) for path in written], "next": following}, text=lines)


class Examples(Command):
    name = "examples"
    help = "score the shipped example records and reproduce the VL-LCM paper's Table 1 correlations (no models, seconds)"
    description = "Score the shipped example records of every evaluator and reproduce the VL-LCM paper's Table 1 correlations."

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.cli.examples import run_examples

        return Answer(None, status=run_examples())  # it prints its own tables


class Check(Command):
    name = "check"
    help = "every registered evaluator (plugins included) checked on its example records, as vlgate serve checks them at start-up"
    description = (
        "Each evaluator's definition is run on its own example records: per_sample's columns are the declared ones, "
        "aggregate's metrics the declared metrics, resampled equals aggregate on the records weighted once and takes leave-one-out weights. "
        "Exit status 0; 2 naming the evaluator and every disagreement."
    )
    json_help = "the evaluators checked, as one JSON object"

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.cli.service import checked_evaluators

        checked = checked_evaluators()
        return Answer({"checked": checked}, text=lambda: print("\n".join(f"ok  {name}" for name in checked)))


class Demo(Command):
    name = "demo"
    help = "the README's main job: the whole register → validate → gate → drift loop on the embedded default"
    description = (
        "Build the synthetic world, register its VLM versions in the embedded MLflow registry ($VLGATE_HOME), let the "
        "poller start one validation flow per version (evaluators, Great Expectations, correlations, gate), run the drift "
        "check on a clean and a shifted unlabelled batch, and print every version's metrics and decision. A second run "
        "reuses everything and only prints the result."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--size", choices=("medium", "small"), default="medium",
            help="the world's data sets, for the same shipped versions: medium (90-400 items an evaluator: where the gate's early looks stop every failing version) or small (48, the tests' size); one size a VLGATE_HOME",
        )

    def run(self, args: argparse.Namespace) -> Answer:
        from vlgate.cli.demo import DemoError, run_demo

        try:
            return Answer(None, status=run_demo(size=args.size))  # it prints its own progress and tables
        except DemoError as error:
            raise UserError(str(error)) from None
