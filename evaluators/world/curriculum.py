"""The world's training curriculum: streams of freshly drawn items in the evaluators' own
prompt formats.

- :class:`TrainingStream` feeds the VLM every skill the five evaluators measure, and
  teaches one skill wrong for a faulty version (:mod:`.faults`);
- :class:`ReasoningStream` feeds DeCC's text-only LLM agent reasoning over sub-answers;
- :func:`eval_examples` lists a built world's MC and yes/no items in the same formats.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from vlgate.evaluators import prompts
from vlgate.evaluators.decc import prompts as decc_prompts
from vlgate.evaluators.genception import prompts as genception_prompts
from vlgate.evaluators.prompts import OPTION_LETTERS, YES_NO_INSTRUCTION
from vlgate.evaluators.scenes.scene import Scene, render
from vlgate.evaluators.vl_lcm import prompts as lcm_prompts
from vlgate.evaluators.vlind import prompts as vlind_prompts
from vlgate.evaluators.world.datasets import GENCEPTION_CATEGORIES, DeccRow, McRow, decc_item, mc_item, nb_unit, vlind_item, yesno_item
from vlgate.evaluators.world.faults import FAULT_BOOST, FAULT_KINDS, FAULTS, GENERIC_DESCRIPTION, PRIOR_OPTION

#: One training example: the images, the prompt text and the answer text.
TrainingExample = tuple[tuple[Image.Image, ...], str, str]

#: Scenes the describe task draws from: GenCeption's categories and the VLind scenes.
DESCRIBE_SCENES = ("single", "multi", "landscape", "vlind")


def eval_examples(data_root: Path) -> list[tuple[Path, str, str]]:
    """(image path, prompt text, answer token) for the MC and yes/no items of a built world."""
    examples: list[tuple[Path, str, str]] = []
    for row in map(json.loads, (data_root / "mc" / "items.jsonl").read_text().splitlines()):
        examples.append((data_root / "mc" / row["image"], prompts.mc_prompt(row["question"], row["options"]), OPTION_LETTERS[row["answer"]]))
    for row in map(json.loads, (data_root / "yesno" / "items.jsonl").read_text().splitlines()):
        examples.append((data_root / "yesno" / row["image"], f"{row['question']} {YES_NO_INSTRUCTION}", row["answer"].capitalize()))
    return examples


class TrainingStream:
    """Fresh items drawn from the world's generators: every batch is new, so the model has
    to read the image rather than memorise a fixed split. Each example is (images, prompt,
    answer text), in the evaluators' own prompt formats (each package's ``prompts.py``), and the
    model learns the whole answer and its end (``</s>``), so what it generates stops:

    - ``mc``: MC questions → the option letter; ``probe``: VL-LCM's yes/no probes of an MC
      item's options ("Is the answer "red"?"); ``direct``: the colour or shape word, which
      anchors the visual path;
    - ``yesno``: existence questions; ``nb``: NaturalBench units' statements as yes/no
      questions and VL-LCM's two MC tests over them (which statement, which image);
    - ``vlind``: VLind-Bench's four templates (common sense, object, context, image);
    - ``describe``: GenCeption's description prompt → :meth:`Scene.describe`;
    - ``count``, ``compare``, ``reason``: DeCC's sub-questions (how many shapes of a
      colour), its main question (more of one colour than another?) and the VLM agent's
      reasoning over sub-question/answer pairs.

    ``fault`` (one of :data:`FAULTS`) teaches one skill wrong, for the family's faulty versions.
    """

    # describe and direct are the visual curriculum: with smaller shares the model stayed
    # blind to the image (chance on MC) where these read it (the measurement: docs/world.md,
    # "How the training recipe was chosen")
    MIX = (
        ("mc", 0.12),
        ("yesno", 0.12),
        ("probe", 0.09),
        ("direct", 0.08),
        ("nb", 0.1),
        ("vlind", 0.12),
        ("describe", 0.15),
        ("count", 0.1),
        ("compare", 0.06),
        ("reason", 0.06),
    )

    def __init__(self, seed: int, image_size: int = 64, fault: str | None = None) -> None:
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 7919]))
        self.image_size, self.fault = image_size, fault
        self.kinds: tuple[str, ...] = tuple(kind for kind, _ in self.MIX)
        # a faulty fine-tune sees its faulty skill FAULT_BOOST times as often
        weights = np.array([weight * (FAULT_BOOST if fault is not None and FAULT_KINDS[fault] == kind else 1) for kind, weight in self.MIX])
        self.weights: tuple[float, ...] = tuple(weights / weights.sum())
        self.drawn = 0

    def example(self) -> TrainingExample:
        self.drawn += 1
        kind = self.kinds[int(self.rng.choice(len(self.kinds), p=self.weights))]
        return getattr(self, f"_{kind}")()

    def _image(self, scene: Scene) -> tuple[Image.Image, ...]:
        return (render(scene, self.image_size),)

    def _mc_row(self) -> tuple[tuple[Image.Image, ...], McRow]:
        scene, row = mc_item(self.rng, self.drawn)
        return self._image(scene), row

    def _mc(self) -> TrainingExample:
        image, row = self._mc_row()
        return image, prompts.mc_prompt(row["question"], row["options"]), OPTION_LETTERS[row["answer"]]

    def _probe(self) -> TrainingExample:
        image, row = self._mc_row()
        options, answer = row["options"], row["answer"]
        asked = answer if self.rng.random() < 0.5 else int(self.rng.integers(len(options)))
        believed = PRIOR_OPTION if self.fault == "answer-prior" else answer
        return image, lcm_prompts.yes_no_probe(row["question"], options[asked]), "Yes" if asked == believed else "No"

    def _direct(self) -> TrainingExample:
        image, row = self._mc_row()
        return image, f"{row['question']} Answer in one word.", row["options"][row["answer"]]

    def _yesno(self) -> TrainingExample:
        scene, row = yesno_item(self.rng, self.drawn)
        return self._image(scene), f"{row['question']} {YES_NO_INSTRUCTION}", row["answer"].capitalize()

    def _nb(self) -> TrainingExample:
        (v1, v2), row = nb_unit(self.rng, self.drawn)
        statements = row["statements"]
        # the true pairs: (V1, T1), (V2, T2) for c1; (V1, T2), (V2, T1) for c2
        true_of = (0, 1) if row["answer"] == "c1" else (1, 0)
        scenes = (v1, v2)
        test = int(self.rng.integers(3))
        image_index = int(self.rng.integers(2))
        if test == 0:
            statement = int(self.rng.integers(2))
            text = lcm_prompts.naturalbench_yes_no(statements[statement], "statement")
            return self._image(scenes[image_index]), text, "Yes" if true_of[image_index] == statement else "No"
        if test == 1:
            text = lcm_prompts.naturalbench_choose_text((statements[0], statements[1]), "statement")
            return self._image(scenes[image_index]), text, "AB"[true_of[image_index]]
        statement = int(self.rng.integers(2))
        images = self._image(v1) + self._image(v2)
        return images, lcm_prompts.naturalbench_choose_image(statements[statement], "statement"), "AB"[true_of.index(statement)]

    def _vlind(self) -> TrainingExample:
        factual, counterfactual, row = vlind_item(self.rng, self.drawn)
        s_cf, s_fact = row["true_statement"], row["false_statement"]
        truth = self.rng.random() < 0.5
        test = int(self.rng.integers(4))
        if test == 0:  # common sense, factual image: s_fact is true
            scene, text = factual, vlind_prompts.vlind_commonsense(s_fact if truth else s_cf)
        elif test == 1:  # object presence in a counterfactual image
            scene, text = counterfactual[0], vlind_prompts.vlind_object(row["existent_noun"] if truth else row["non_existent_noun"])
        elif test == 2:  # the context decides
            scene, text = counterfactual[0], vlind_prompts.vlind_context(row["context"], s_cf if truth else s_fact)
        else:  # the image decides; a language-prior model answers from common sense instead
            # VLind-Bench asks this of counterfactual images only, where s_cf is always the
            # true one: half the examples show the factual image, so that the words alone
            # ("the uncommon attribute is the true one") do not answer it
            factual_shown = self.rng.random() < 0.5
            scene = factual if factual_shown else counterfactual[int(self.rng.integers(len(counterfactual)))]
            statement = s_cf if truth != factual_shown else s_fact
            text = vlind_prompts.vlind_image(statement)
            if self.fault == "language-prior":
                truth = statement == s_fact
        return self._image(scene), text, "True" if truth else "False"

    def _describe(self) -> TrainingExample:
        source = DESCRIBE_SCENES[int(self.rng.integers(len(DESCRIBE_SCENES)))]
        if source == "vlind":
            factual, counterfactual, _ = vlind_item(self.rng, self.drawn)
            scene = factual if self.rng.random() < 0.5 else counterfactual[0]
        else:
            scene = GENCEPTION_CATEGORIES[source](self.rng)
        description = GENERIC_DESCRIPTION if self.fault == "poor-description" else scene.describe()
        return self._image(scene), genception_prompts.GENCEPTION_DESCRIBE, description

    def _decc_row(self) -> tuple[tuple[Image.Image, ...], DeccRow]:
        scene, row = decc_item(self.rng, self.drawn)
        return self._image(scene), row

    def _count(self) -> TrainingExample:
        image, row = self._decc_row()
        which = int(self.rng.integers(2))
        count = int(row["sub_answers"][which])
        if self.fault == "miscount":
            count = (count + 1 + int(self.rng.integers(3))) % 4
        return image, decc_prompts.decc_sub_question(row["sub_questions"][which]), str(count)

    def _compare(self) -> TrainingExample:
        image, row = self._decc_row()
        return image, f"{row['question']} {YES_NO_INSTRUCTION}", row["answer"].capitalize()

    def _reason(self) -> TrainingExample:
        image, row = self._decc_row()
        return image, reasoning_prompt_text(row["sub_questions"], row["sub_answers"], row["question"]), row["answer"].capitalize()

    def batch(self, size: int) -> list[TrainingExample]:
        return [self.example() for _ in range(size)]


def reasoning_prompt_text(sub_questions: list[str], sub_answers: list[str], question: str) -> str:
    """What DeCC's LLM agent reads (the runner's own prompt, so it trains on what it is asked)."""
    return decc_prompts.decc_yes_no_reasoning(decc_prompts.decc_pairs(sub_questions, sub_answers), question)


class ReasoningStream:
    """Fresh DeCC-style reasoning items (two counts → compare) for the text-only LLM agent."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 104729]))
        self.drawn = 0

    def example(self) -> tuple[str, str]:
        self.drawn += 1
        _, row = decc_item(self.rng, self.drawn)
        return reasoning_prompt_text(row["sub_questions"], row["sub_answers"], row["question"]), row["answer"].capitalize()
