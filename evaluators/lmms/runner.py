"""An lmms-eval task on a model: each doc asked as the task's ``doc_to_messages`` lays it out,
answered greedily by the suite's backend, filtered by the task's own filter ensembles, and
scored by its own ``process_results``. One record a doc (docs/lmms-eval.md):

``{"id", "doc_id", "doc_sha256", "prompt", "response", "filtered": {FILTER: response}, "unparsed", "results": {METRIC: value}}``

where ``doc_sha256`` is the doc's digest (:func:`doc_digest`: the views show a doc's images
only while the task's doc is still the one asked), ``prompt`` is the text the doc was asked (its turn's text parts, for the views), ``unparsed`` says that an extraction filter of the scored ensemble found nothing it
reads (its fallback, lmms-eval's ``[invalid]``), and ``results`` holds ``process_results``'s values for the task's first filter ensemble
(lmms-eval's ``none`` where the task names none: the first response) as JSON, which the
task's aggregations read back.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image
from pydantic import JsonValue

from vlgate.evaluators.backends.base import IMAGE, GenerateRequest, TurnPart
from vlgate.evaluators.lmms.tasks import LmmsEvalSettings, LoadedTask, TaskError, load_task
from vlgate.evaluators.loaders.items import ItemError, ItemLoadError
from vlgate.evaluators.protocols import Protocol
from vlgate.evaluators.records import Record
from vlgate.evaluators.runners.base import Runner, RunnerContext


@dataclass(frozen=True)
class TaskDoc:
    """One doc of a task: its index in the task's eval docs (lmms-eval's ``doc_id``) and a
    digest of its content, images' pixels included (the record's fingerprint)."""

    id: str
    doc_id: int
    digest: str


def protocol_of(loaded: LoadedTask) -> Protocol[None]:
    """The protocol as run: lmms-eval's version and the task's digest, so the gate refuses
    to compare numbers of two different tasks."""
    return Protocol(name=f"lmms-eval-{loaded.version}", version=1, follows=f"lmms-eval {loaded.version} task {loaded.name}", prompts=None)


def load_docs(settings: LmmsEvalSettings, first: int | None = None) -> tuple[list[TaskDoc], list[ItemError]]:
    """The task's eval docs in its order, the first ``limit`` of them (lmms-eval's ``--limit``);
    ``first``: fewer still (the model check's few), so only those are read and hashed."""
    loaded = load_task(settings)
    count = min([len(loaded.docs), *(n for n in (settings.limit, first) if n is not None)])
    return [TaskDoc(str(doc_id), doc_id, doc_digest(loaded.doc(doc_id))) for doc_id in range(count)], []


def doc_digest(doc: Mapping[str, Any]) -> str:
    """sha256 of a doc: its fields as JSON, images as their mode, size and pixels."""
    digest = hashlib.sha256()

    def canonical(value: Any) -> Any:
        if isinstance(value, Image.Image):
            pixels = hashlib.sha256(value.tobytes()).hexdigest()
            return {"image": [value.mode, list(value.size), pixels]}
        if isinstance(value, Mapping):
            return {str(key): canonical(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [canonical(item) for item in value]
        if isinstance(value, bytes):
            return {"bytes": hashlib.sha256(value).hexdigest()}
        return value

    digest.update(json.dumps(canonical(dict(doc)), sort_keys=True, default=str).encode())
    return digest.hexdigest()


def request_of(loaded: LoadedTask, doc: TaskDoc) -> GenerateRequest:
    """The doc's ``doc_to_messages``, as one generation request: one user turn of texts and
    images in the task's order. A doc whose prompt needs a field it lacks is that doc's
    error; a layout vlgate's backends cannot send exactly (another role, a second turn, a
    video) is the task's."""
    try:
        with task_code(doc.digest):
            messages = loaded.task.doc_to_messages(loaded.doc(doc.doc_id))
    except KeyError as error:
        raise ItemLoadError(ItemError(f"lmms-eval task {loaded.name}", doc.id, str(error.args[0]) if error.args else None, "the doc lacks this field, which the task's prompt reads")) from None
    if not isinstance(messages, list) or len(messages) != 1 or not isinstance(messages[0], Mapping) or messages[0].get("role") != "user":
        raise TaskError(f"lmms-eval task {loaded.name!r}, doc {doc.id}: its messages are not one user turn; vlgate's backends send one user turn per request")
    images: list[Image.Image] = []
    turn: list[TurnPart] = []
    for part in messages[0].get("content") or []:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            turn.append(str(part.get("text", "")))
        elif kind == "image" and isinstance(part.get("url"), Image.Image):
            images.append(part["url"])
            turn.append(IMAGE)
        else:
            raise TaskError(f"lmms-eval task {loaded.name!r}, doc {doc.id}: a message part of type {kind!r}; vlgate sends texts and PIL images")
    prompt = "".join(part for part in turn if isinstance(part, str))
    return GenerateRequest(tuple(images), prompt, loaded.generation.max_new_tokens, tuple(turn))


def doc_images(loaded: LoadedTask, record: Record) -> list[Image.Image]:
    """The images a record's doc was asked with, rebuilt by the task's own ``doc_to_messages``;
    none where the task's doc is no longer the one the record answered (another digest) or
    cannot be rebuilt."""
    doc_id = record.get("doc_id")
    if not isinstance(doc_id, int) or not 0 <= doc_id < len(loaded.docs):
        return []
    source = loaded.doc(doc_id)
    digest = doc_digest(source)
    if record.get("doc_sha256") != digest:
        return []
    try:
        return list(request_of(loaded, TaskDoc(str(record.get("id")), doc_id, digest)).images)
    except (ItemLoadError, TaskError):
        return []


def score_doc(loaded: LoadedTask, doc: TaskDoc, response: str) -> Record:
    """One doc's record: the response through every filter ensemble of the task, then the
    first ensemble's result through the task's ``process_results``."""
    source = loaded.doc(doc.doc_id)
    filtered: dict[str, JsonValue] = {}
    unparsed = False
    for ensemble in getattr(loaded.task, "_filters", ()):
        responses: list[Any] = [[response]]
        for step in ensemble.filters:
            responses = list(step.apply(responses, [source]))
        filtered[ensemble.name] = _json(responses[0])
        if len(filtered) == 1:  # the scored ensemble: did an extraction filter give its fallback (lmms-eval's "[invalid]")?
            fallbacks = {step.fallback for step in ensemble.filters if isinstance(getattr(step, "fallback", None), str)}
            unparsed = filtered[ensemble.name] in fallbacks
    first = next(iter(filtered.values()), response)
    try:
        with task_code(doc.digest):
            results = loaded.task.process_results(source, [first])
    except KeyError as error:
        field = error.args[0] if error.args else "?"
        raise TaskError(f"lmms-eval task {loaded.name!r}, doc {doc.id}: the doc lacks the field {field!r}, which the task's process_results reads") from None
    return {"id": doc.id, "doc_id": doc.doc_id, "doc_sha256": doc.digest, "response": response, "filtered": filtered, "unparsed": unparsed, "results": {str(metric): _json(value) for metric, value in results.items()}}


@contextlib.contextmanager
def task_code(seed_text: str) -> Iterator[None]:
    """Around a call into a task's own code: what it prints kept off the terminal (MMMU's
    aggregation prints its table; text from a task never reaches a terminal raw), and
    Python's ``random`` seeded from ``seed_text`` and put back after, so that a task drawing
    at random (MMMU's answer to an unparsable response) draws the same for the same doc in
    every run, cached or not."""
    state = random.getstate()
    random.seed(hashlib.sha256(seed_text.encode()).hexdigest())
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        random.setstate(state)


def _json(value: Any) -> JsonValue:
    """A per-doc value as JSON (numpy numbers as Python's); refused when it is not data."""
    if isinstance(value, Mapping):
        return {str(key): _json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json(item) for item in value]
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int | float):
        return value if not isinstance(value, float) or math.isfinite(value) else None
    item = getattr(value, "item", None)  # a numpy scalar
    if callable(item):
        return _json(item())
    if isinstance(value, Image.Image):
        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        return {"image_sha256": hashlib.sha256(buffer.getvalue()).hexdigest()}
    raise TypeError(f"a per-doc value of type {type(value).__name__}, which is not JSON")


def build_runner(settings: LmmsEvalSettings, context: RunnerContext, evaluator: str) -> Runner[TaskDoc, GenerateRequest]:
    loaded = load_task(settings)

    def compute(batch: Sequence[tuple[TaskDoc, GenerateRequest]]) -> list[Record]:
        responses = context.vlm.generate([request for _, request in batch])
        return [{**score_doc(loaded, doc, response), "prompt": request.prompt} for (doc, request), response in zip(batch, responses)]

    return Runner(
        evaluator=evaluator,
        models={"vlm": context.vlm.info.digest},
        protocol=protocol_of(loaded).as_run(**settings.protocol_overrides()),
        prepare=lambda doc: request_of(loaded, doc),
        compute=compute,
        settings={"task": loaded.name, "task_digest": loaded.digest, "generation": loaded.generation.as_json()},
    )
