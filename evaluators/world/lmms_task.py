"""The world's yes/no data as an lmms-eval task folder (docs/lmms-eval.md): what a team's own
task looks like to vlgate, and the task vlgate's runs are held to lmms-eval's own on
(``tests/test_lmms_eval.py``).

``export_world_task(world_data, out)`` writes ``out/world_yesno.yaml``, its ``utils.py``,
``out/world_yesno/test.parquet`` (the items in a POPE-like schema, images embedded as
Hugging Face's ``Image`` feature) and ``out/suite.yaml``, a suite whose one entry is the
task: ``python -m vlgate.evaluators.world.lmms_task DIR`` writes them from the shipped world,
then ``vlgate evaluate --model evaluators/world/shipped/checkpoints/vlm-steps10000 --suite
DIR/suite.yaml --out /tmp/lmms`` runs it (docs/lmms-eval.md). The prompt is the one the world's models were trained
on; the metric, ``exact_match``, is lmms-eval's built-in ``mean`` of per-doc 0/1 scores,
so the gate pairs it linearly; ``yes_ratio`` is a ratio the task's own function computes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vlgate.evaluators.prompts import YES_NO_INSTRUCTION

TASK = "world_yesno"

_YAML = """\
# The synthetic world's yes/no items as an lmms-eval task (vlgate's evaluators/world/lmms_task.py).
task: {task}
dataset_path: parquet
dataset_kwargs:
  data_files:
    test: {parquet}  # lmms-eval reads a local data file relative to the YAML's folder
test_split: test
output_type: generate_until
doc_to_visual: !function utils.doc_to_visual
doc_to_text: !function utils.doc_to_text
doc_to_target: answer
generation_kwargs:
  max_new_tokens: 8
  temperature: 0
  do_sample: false
process_results: !function utils.process_results
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
  - metric: yes_ratio
    aggregation: !function utils.yes_ratio
    higher_is_better: true
lmms_eval_specific_kwargs:
  default:
    post_prompt: " {instruction}"
metadata:
  version: 1
"""

_UTILS = '''\
"""The world's yes/no task: the question and the instruction the world's models were trained on."""


def doc_to_visual(doc):
    return [doc["image"].convert("RGB")]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    post_prompt = (lmms_eval_specific_kwargs or {}).get("post_prompt", "")
    return f"{doc['question']}{post_prompt}"


def process_results(doc, results):
    prediction = results[0].strip().lower().rstrip(".")
    return {"exact_match": float(prediction == doc["answer"]), "yes_ratio": {"id": doc["question_id"], "prediction": prediction}}


def yes_ratio(results):
    return sum(result["prediction"] == "yes" for result in results) / len(results)
'''


def export_world_task(world_data: Path, out: Path) -> Path:
    """The world's ``yesno/`` items as the lmms-eval task folder ``out`` (its YAML's path returned)."""
    import datasets

    rows = [json.loads(line) for line in (world_data / "yesno" / "items.jsonl").read_text().splitlines() if line.strip()]
    table = datasets.Dataset.from_dict(
        {
            "question_id": [row["id"] for row in rows],
            "question": [row["question"] for row in rows],
            "answer": [row["answer"] for row in rows],
            "category": [row["category"] for row in rows],
            # the bytes themselves, so the file holds its images as a released data set does
            "image": [{"bytes": (world_data / "yesno" / row["image"]).read_bytes(), "path": Path(row["image"]).name} for row in rows],
        }
    ).cast_column("image", datasets.Image())
    parquet = out / TASK / "test.parquet"
    parquet.parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(str(parquet))
    (out / "utils.py").write_text(_UTILS)
    config = out / f"{TASK}.yaml"
    config.write_text(_YAML.format(task=TASK, parquet=json.dumps(f"{TASK}/test.parquet"), instruction=YES_NO_INSTRUCTION))
    (out / "suite.yaml").write_text(f"name: world-lmms-eval\nevaluators:\n  {TASK}:\n    kind: lmms-eval\n    task: {TASK}\n    include_path: .\n")
    return config


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m vlgate.evaluators.world.lmms_task DIR")
    print(export_world_task(Path(__file__).parent / "shipped" / "data", Path(sys.argv[1]).resolve()))
