"""The world's yes/no data as lmms-eval task folders (docs/lmms-eval.md): what a team's own
task looks like to vlgate, a real task of the installed package on the world's images, and
the tasks vlgate's runs are held to lmms-eval's own on (``tests/test_lmms_eval.py``).

``export_world_task(world_data, out)`` writes into ``out``:

- ``world_yesno.yaml``, its ``utils.py`` and ``world_yesno/test.parquet``: the world's own
  task (the items in a POPE-like schema, images embedded as Hugging Face's ``Image``
  feature). The prompt is the one the world's models were trained on; ``exact_match`` is
  lmms-eval's built-in ``mean`` of per-doc 0/1 scores, so the gate pairs it linearly;
  ``yes_ratio``, the share of answers "yes", is one too and needs no label (docs without
  answers give no ``exact_match``);
- ``pope_world.yaml`` and ``pope_world/test.parquet``: POPE of the installed lmms-eval,
  its YAML included unchanged but for where its docs are, on the same items written in
  POPE's schema (``question_id``, ``question``, ``answer``, ``image_source``, ``category``,
  ``image``);
- ``suite.yaml``: a suite whose one entry is the world's task;
- the recipe (docs/lmms-eval.md, "Recipe"): ``recipe-suite.yaml`` (VL-LCM's multiple-choice
  evaluator on the world's data beside POPE, asked with the instruction the world's models
  were trained on), ``recipe-gate.yaml`` (one policy on both) and ``vlgate.yaml`` (the model
  ``world-vlm`` configured with them), so that ``VLGATE_HOME=DIR`` is a service home.

- two drift batches of the world's task without answers, ``world_yesno_unlabelled`` (every
  item) and ``world_yesno_absent`` (the items whose object is not in the image), and their
  drift suites (``drift-reference.yaml``, ``drift-batch.yaml``, ``drift_metric: yes_ratio``),
  which ``vlgate.yaml`` names as ``world-vlm``'s drift check.

``python -m vlgate.evaluators.world.lmms_task DIR`` writes them from the shipped world.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vlgate.evaluators.prompts import YES_NO_INSTRUCTION

TASK = "world_yesno"
#: POPE of the installed lmms-eval on the world's items
POPE_TASK = "pope_world"
#: the registered model the recipe's ``vlgate.yaml`` configures
RECIPE_MODEL = "world-vlm"

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
doc_to_target: !function utils.doc_to_target
generation_kwargs:
  max_new_tokens: 8
  temperature: 0
  do_sample: false
process_results: !function utils.process_results
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
  - metric: yes_ratio  # needs no label: the drift checks' metric
    aggregation: mean
    higher_is_better: true
lmms_eval_specific_kwargs:
  default:
    post_prompt: " {instruction}"
metadata:
  version: 1
"""

_UTILS = '''\
"""The world's yes/no task: the question and the instruction the world's models were trained
on. Its docs may come without answers (a drift batch): exact_match is then undefined (None),
and yes_ratio, the share of answers "yes", needs no label."""


def doc_to_visual(doc):
    return [doc["image"].convert("RGB")]


def doc_to_text(doc, lmms_eval_specific_kwargs=None):
    post_prompt = (lmms_eval_specific_kwargs or {}).get("post_prompt", "")
    return f"{doc['question']}{post_prompt}"


def doc_to_target(doc):
    return doc.get("answer") or ""


def process_results(doc, results):
    prediction = results[0].strip().lower().rstrip(".")
    answer = doc.get("answer")
    return {"exact_match": float(prediction == answer) if answer else None, "yes_ratio": float(prediction == "yes")}
'''


_BATCH_YAML = """\
# The world's task on another batch of its items, without their answers (vlgate's
# evaluators/world/lmms_task.py): {what}.
include: {world}.yaml
task: {task}
dataset_kwargs:
  data_files:
    test: {parquet}
"""

#: the drift batches: the world's items unlabelled, and the items whose object is absent
#: (a batch of questions about what is not in view: its share of "yes" falls)
REFERENCE_BATCH, ABSENT_BATCH = "world_yesno_unlabelled", "world_yesno_absent"

_DRIFT_SUITE = """\
# A drift batch of the world's task (docs/lmms-eval.md, "Recipe"): yes_ratio, which needs no
# label, compared between the reference batch and a new one (a fall of its mean is drift).
name: world-drift-{role}
evaluators:
  {world}: {{kind: lmms-eval, task: {task}, include_path: ., drift_metric: yes_ratio}}
"""

_POPE_YAML = """\
# POPE of the installed lmms-eval ({pope}), unchanged but for where its docs are: the
# synthetic world's yes/no items in POPE's schema (vlgate's evaluators/world/lmms_task.py).
include: {pope}
task: {task}
dataset_path: parquet
dataset_kwargs:
  data_files:
    test: {parquet}
"""

_RECIPE_SUITE = """\
# VL-LCM and POPE in one decision (docs/lmms-eval.md, "Recipe"). POPE is asked with the
# instruction the world's models were trained on, through the task's own post_prompt.
name: world-lcm-and-pope
batch_size: 8
evaluators:
  lcm-mc: {{data: {mc}, protocol: vlgate}}
  {pope}:
    kind: lmms-eval
    task: {pope}
    include_path: .
    lmms_eval_specific_kwargs: {{post_prompt: " {instruction}"}}
"""

_RECIPE_GATE = """\
# One policy on VL-LCM and POPE: a version must be logically consistent and accurate on
# POPE, and must not fall behind the champion on either.
required: [lcm-mc, {pope}]
floors:
  lcm-mc/lcm: 0.75
  {pope}/pope_accuracy: 0.8
regressions:
  lcm-mc/lcm: {{max_drop: 0.05}}
  {pope}/pope_accuracy: {{max_drop: 0.05}}
resamples: 500
"""


def _write_parquet(rows: list[dict[str, object]], images: list[Path], parquet: Path) -> None:
    """``rows`` with their ``image`` column the bytes of ``images`` (as a released data set holds them)."""
    import datasets

    datasets.disable_progress_bars()
    table = datasets.Dataset.from_dict({**{column: [row[column] for row in rows] for column in rows[0]}, "image": [{"bytes": image.read_bytes(), "path": image.name} for image in images]}).cast_column(
        "image", datasets.Image()
    )
    parquet.parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(str(parquet))


def export_world_task(world_data: Path, out: Path) -> Path:
    """The world's ``yesno/`` items as the lmms-eval task folder ``out`` with the recipe
    beside it (module docstring); the world's task's YAML path returned."""
    import lmms_eval

    rows = [json.loads(line) for line in (world_data / "yesno" / "items.jsonl").read_text().splitlines() if line.strip()]
    images = [world_data / "yesno" / row["image"] for row in rows]
    _write_parquet([{"question_id": row["id"], "question": row["question"], "answer": row["answer"], "category": row["category"]} for row in rows], images, out / TASK / "test.parquet")
    (out / "utils.py").write_text(_UTILS)
    config = out / f"{TASK}.yaml"
    config.write_text(_YAML.format(task=TASK, parquet=json.dumps(f"{TASK}/test.parquet"), instruction=YES_NO_INSTRUCTION))
    pope_rows = [{"question_id": row["id"], "question": row["question"], "answer": row["answer"], "image_source": Path(row["image"]).stem, "category": "adversarial"} for row in rows]
    _write_parquet(pope_rows, images, out / POPE_TASK / "test.parquet")
    pope = Path(lmms_eval.__file__).parent / "tasks" / "pope" / "pope.yaml"
    (out / f"{POPE_TASK}.yaml").write_text(_POPE_YAML.format(pope=json.dumps(str(pope)), task=POPE_TASK, parquet=json.dumps(f"{POPE_TASK}/test.parquet")))
    (out / "suite.yaml").write_text(f"name: world-lmms-eval\nevaluators:\n  {TASK}:\n    kind: lmms-eval\n    task: {TASK}\n    include_path: .\n")
    (out / "recipe-suite.yaml").write_text(_RECIPE_SUITE.format(mc=json.dumps(str((world_data / "mc").resolve())), pope=POPE_TASK, instruction=YES_NO_INSTRUCTION))
    (out / "recipe-gate.yaml").write_text(_RECIPE_GATE.format(pope=POPE_TASK))
    unlabelled = [{"question_id": row["id"], "question": row["question"], "category": row["category"]} for row in rows]
    absent = [index for index, row in enumerate(rows) if row["answer"] == "no"]
    for task, kept, what in ((REFERENCE_BATCH, list(range(len(rows))), "every item"), (ABSENT_BATCH, absent, "the items whose object is not in the image")):
        _write_parquet([unlabelled[index] for index in kept], [images[index] for index in kept], out / task / "test.parquet")
        (out / f"{task}.yaml").write_text(_BATCH_YAML.format(what=what, world=TASK, task=task, parquet=json.dumps(f"{task}/test.parquet")))
    for role, task in (("reference", REFERENCE_BATCH), ("batch", ABSENT_BATCH)):
        (out / f"drift-{role}.yaml").write_text(_DRIFT_SUITE.format(role=role, world=TASK, task=task))
    (out / "vlgate.yaml").write_text(f"models:\n  {RECIPE_MODEL}:\n    suite: recipe-suite.yaml\n    policy: recipe-gate.yaml\n    drift: {{reference: drift-reference.yaml, batch: drift-batch.yaml}}\n")
    return config


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m vlgate.evaluators.world.lmms_task DIR")
    print(export_world_task(Path(__file__).parent / "shipped" / "data", Path(sys.argv[1]).resolve()))
