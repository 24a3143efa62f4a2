"""``vlgate init NAME``: a commented starting configuration for one registered model.

Writes, under the home (``$VLGATE_HOME``, or ``--dir``):

* ``NAME/suite.yaml``: which evaluators run on which data, with the backend; every
  evaluator's data format is named where it is configured (``evaluators/loaders/``);
* ``NAME/gate.yaml``: the promotion policy (``gate/``), lenient floors and
  non-inferiority on logical consistency and accuracy, the stricter rules commented out;
* ``vlgate.yaml``: created with the model's entry, or the entry added under an existing
  ``models:`` block, the rest of the file (and its comments) left as it was.

Nothing is overwritten without ``force``; the files written load and check against each
other (``settings.config_problem``), so ``vlgate validate NAME VERSION`` only waits for data.
"""

from __future__ import annotations

import re
from pathlib import Path

from vlgate.flows.settings import CONFIG_FILE

SUITE = """\
# What every registered version of {name} is evaluated on (vlgate init; format:
# evaluators/running/suite.py). Paths are relative to this file. Leave out an evaluator
# you have no data for, and remove it from gate.yaml's `required` too. Each evaluator runs
# under its benchmark's released evaluation protocol (prompts, generation limits); another
# is one setting away, e.g. `protocol: lmms-eval` (the names: README "Protocols").
name: {name}
batch_size: 8
backend: transformers          # transformers (the checkpoint in-process), vllm (vLLM's engine), openai (an OpenAI-compatible server)
policy: {{trust_remote_code: false, allow_pickle: false}}   # what an untrusted checkpoint may run: nothing
# (its chat template is rendered apart, with limits: chat_template_timeout_s 10, chat_template_memory_mb 512)
champion_items: evaluate       # items the champion has no records of (the suite grew): evaluate it on them (or: shared)
evaluators:
  # VL-LCM on multiple-choice VQA: one JSON object per line in data/mc/items.jsonl,
  #   {{"id", "image", "question", "options": [K >= 2], "answer"?: 0-based int, "category"?}}
  #   (or MMMU's release, JSON or the Hub's parquet, one split: data: MMMU/*/validation-*.parquet)
  lcm-mc: {{data: data/mc}}
  # VL-LCM on NaturalBench units: data/nb/units.jsonl,
  #   {{"id", "images": [V1, V2], "statements": [T1, T2], "answer"?: "c1"|"c2", "category"?}}
  #   (or NaturalBench's release, BaiqiL/NaturalBench parquet: yes/no and multiple-choice units)
  lcm-nb: {{data: data/nb}}
  # VLind-Bench: data/vlind/items.jsonl, {{"id", "concept", "context", "true_statement",
  #   "false_statement", "existent_noun", "non_existent_noun", "factual_image", "counterfactual_images"}}
  #   (or VLind-Bench's release: format: vlind-bench, with vote_threshold, style, answer_max_new_tokens)
  vlind: {{data: data/vlind}}
  # GenCeption: seed images in category folders, data/genception/CATEGORY/*.png; an image
  #   generator (a diffusers folder or HF id) and an image encoder (CLIP/ViT) close the loop
  #   (or lmms-lab/MME's parquet, or one flat folder of images)
  genception: {{data: data/genception, iterations: 3, generator: stabilityai/sdxl-turbo, encoder: openai/clip-vit-large-patch14, encoder_kind: clip}}
  # DeCC: data/decc/items.jsonl, {{"id", "image", "question", "options"?, "answer"?, "sub_questions"?}};
  #   an LLM agent judges the answers (or A-OKVQA: format: aokvqa, coco_dir: COCO's own folder)
  decc: {{data: data/decc, llm: Qwen/Qwen2.5-1.5B-Instruct}}
"""

POLICY = """\
# When a version of {name} becomes the champion (vlgate init; format: gate/policy.py).
# Metric names are EVALUATOR/METRIC as `vlgate score` prints them; a mistake here is
# refused when the policy is loaded, before anything is evaluated.
required: [lcm-mc, lcm-nb, vlind, genception, decc]
floors:                          # the candidate's value must be at least this
  lcm-mc/lcm: 0.3
  lcm-mc/acc: 0.5
ceilings: {{}}                     # lower-is-better metrics, e.g. genception/gc_fid@3: 50
regressions:                     # non-inferior to the champion on the shared samples (paired bootstrap)
  lcm-mc/lcm: {{max_drop: 0.02}}
  lcm-mc/acc: {{max_drop: 0.02}}
  lcm-nb/lcm: {{max_drop: 0.02}}
# superiority:                   # require an improvement over the champion
#   lcm-mc/lcm: {{min_gain: 0.0}}
# categories:                    # the same rules per category of the records
#   lcm-mc/acc: {{floor: 0.4, min_samples: 20}}
correction: holm                 # across the comparisons with the champion: holm, bonferroni or none
# waivers:                       # a failing check let through, on record, until a day
#   - {{check: "lcm-mc/acc floor", by: you@example.com, reason: "why", until: 2026-12-31}}
confidence: 0.95
resamples: 2000
sequential:                      # judge after each quarter of the items; stop where a rule fails decisively
  looks: [0.25, 0.5, 0.75, 1.0]  # (docs/sequential.md; `vlgate plan {name}` says what each rule can decide)
  promote_early: false           # true: also promote at a look where every rule holds decisively
  spending: obrien-fleming       # pocock: clear failures stop sooner, for a few points of power
"""

SERVICE = """\
# vlgate's service configuration (format: flows/settings.py). Paths are relative to this file.
# MLflow: MLFLOW_TRACKING_URI (default: an embedded store under this folder).
models:
{entry}
poll_interval_s: 30
workers: 1
"""


class ScaffoldError(ValueError):
    """A file ``vlgate init`` would overwrite, or a config it cannot add the model to."""


def model_entry(name: str) -> str:
    return f"  {name}: {{suite: {name}/suite.yaml, policy: {name}/gate.yaml}}"


def write_starting_config(home: Path, name: str, force: bool = False) -> list[Path]:
    """The model's suite and policy, and its entry in ``vlgate.yaml``; the paths written."""
    if not re.fullmatch(r"[\w.-]+", name):
        raise ScaffoldError(f"{name!r}: a model name for vlgate init is letters, digits, '_', '-' and '.' (it names a folder)")
    folder = home / name
    files = {folder / "suite.yaml": SUITE.format(name=name), folder / "gate.yaml": POLICY.format(name=name)}
    existing = [path for path in files if path.exists()]
    if existing and not force:
        raise ScaffoldError(f"{', '.join(map(str, existing))} exists: --force overwrites")
    config = home / CONFIG_FILE
    service = _service_config_with(config, name)
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    written = list(files)
    if service is not None:
        config.write_text(service, encoding="utf-8")
        written.append(config)
    return written


def _service_config_with(config: Path, name: str) -> str | None:
    """``vlgate.yaml``'s text with the model's entry, or None when it has one already."""
    from vlgate.config import parse_yaml

    if not config.is_file():
        return SERVICE.format(entry=model_entry(name))
    text = config.read_text(encoding="utf-8")
    models = (parse_yaml(text) or {}).get("models") or {}
    if name in models:
        return None
    block = re.search(r"^models:[ \t]*(#.*)?$", text, flags=re.M)
    if block is None:
        if re.search(r"^models:", text, flags=re.M):  # an inline mapping: not edited by text
            raise ScaffoldError(f"{config}: add `{name}: {{suite: {name}/suite.yaml, policy: {name}/gate.yaml}}` under models: by hand")
        return text.rstrip("\n") + f"\nmodels:\n{model_entry(name)}\n"
    updated = text[: block.end()] + "\n" + model_entry(name) + text[block.end() :]
    before, after = models, (parse_yaml(updated) or {}).get("models") or {}
    if set(after) != {*before, name} or any(after[key] != value for key, value in before.items()):  # indented otherwise
        raise ScaffoldError(f"{config}: add `{name}: {{suite: {name}/suite.yaml, policy: {name}/gate.yaml}}` under models: by hand")
    return updated
