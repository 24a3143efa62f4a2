"""A checkpoint's chat template, rendered in a child process with limits.

A chat template is a Jinja program written by whoever published the checkpoint.
transformers renders it in Jinja's sandbox, which keeps it away from Python's internals
but not from looping, or from building a string of gigabytes: rendered in the evaluating
process, such a template hangs a worker thread that nothing can stop (a task's time limit
abandons the thread, it does not end it) or takes the machine's memory. So vlgate renders
it in a child process, where the limits are the operating system's:

* time: each render must finish within ``timeout_s``, else the child is killed;
* memory: the child's address space may grow by ``memory_mb`` past what it holds once it
  has imported its code (``RLIMIT_AS``), else the render fails with MemoryError;
* size: a rendered text over ``max_chars`` characters is refused.

Past a limit the render is a :class:`TemplateLimitError` (a :class:`BackendError`) naming
the model and the limit: the evaluator fails, and the version cannot be judged (the gate
fails closed). A template that raises (``raise_exception``, an unsupported message layout)
is a :class:`TemplateRenderError`, which a caller may answer by trying another layout.

The child renders with transformers' own ``render_jinja_template``, given what
``apply_chat_template`` gives it (the resolved template string, the conversation, and the
tokenizer's special tokens as variables), so the text is the same as in process;
``tests/test_chat_templates.py`` pins that on the world's checkpoints. The child imports
only transformers' chat-template module (far less than the whole library), starts on the first
render, and serves every template of the process (``RenderingChild``).

Protocol (JSON Lines on the child's stdin and stdout): first ``{"memory_mb"}``; then
``{"define": ID, "template", "variables", "max_chars"}`` and ``{"forget": ID}``, unanswered,
and ``{"render": ID, "conversation", "add_generation_prompt"}``, answered by ``{"text"}`` or
``{"error", "kind"}`` (kind ``template``, ``memory`` or ``size``).
"""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NotRequired, Required, TypedDict

from vlgate.evaluators.backends.base import IMAGE, BackendError, TurnPart
from vlgate.evaluators.backends.loading import LoadPolicy

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 512
DEFAULT_MAX_CHARS = 1_000_000


#: A template variable: a special token, or a list of them (``additional_special_tokens``).
TemplateVariable = str | list[str]


class ContentPart(TypedDict, total=False):
    """One part of a message's content: ``{"type": "image"}`` or ``{"type": "text", "text": ...}``."""

    type: Required[str]
    text: str


class ChatMessage(TypedDict):
    """One turn of a conversation, as chat templates read it: content a string or parts."""

    role: str
    content: str | list[ContentPart]


class RenderAnswer(TypedDict):
    """The child's answer to one render: the text, or the error and its kind."""

    text: NotRequired[str]
    error: NotRequired[str]
    kind: NotRequired[str]


class TemplateLimitError(BackendError):
    """A chat template went past a limit (time, memory or size): the checkpoint's fault."""


class TemplateRenderError(ValueError):
    """A chat template raised while rendering one conversation."""


def template_variables(tokenizer: PreTrainedTokenizerBase) -> dict[str, TemplateVariable]:
    """The variables ``apply_chat_template`` renders with besides the conversation: the
    tokenizer's special tokens (``bos_token``, ``eos_token``, ...), as plain strings."""
    return {name: str(value) if not isinstance(value, list) else [str(v) for v in value] for name, value in tokenizer.special_tokens_map.items()}


def chat_template_of(owner: object) -> str | None:
    """The template ``apply_chat_template`` would render for ``owner`` (a processor or a
    tokenizer): its own, or the one named "default" among several; None without one."""
    template = getattr(owner, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) else None


def renderer_for(model: str, owners: Sequence[object], tokenizer: PreTrainedTokenizerBase, policy: LoadPolicy) -> ChatTemplateRenderer | None:
    """A renderer of the first template among ``owners`` (processor, then tokenizer), with
    the tokenizer's special tokens and the load policy's limits; None when none has one."""
    template = next((found for found in map(chat_template_of, owners) if found is not None), None)
    if template is None:
        return None
    return ChatTemplateRenderer(
        model,
        template,
        template_variables(tokenizer),
        timeout_s=policy.chat_template_timeout_s,
        memory_mb=policy.chat_template_memory_mb,
        max_chars=policy.chat_template_max_chars,
    )


def user_turn(renderer: ChatTemplateRenderer | None, prompt: str, n_images: int, model: str, has_vision: bool, turn: Sequence[TurnPart] | None = None) -> str:
    """One request's text as every local backend sends it: the user turn (images first, then
    the text, unless ``turn`` lays out texts and image slots otherwise) through the
    checkpoint's chat template. A text-only model's turn is a plain
    string, as its card sends it (Llama 3's and Gemma 2's templates would print a list of
    parts as its Python repr, Qwen3's would drop it); a template written for parts only,
    whose rendering of a string lacks the prompt or raises, gets the parts. A text-only
    model without a template gets the bare prompt. Both backends build it here, so they
    send the same text."""
    laid_out = turn if turn is not None else (*(IMAGE for _ in range(n_images)), prompt)
    content = [ContentPart(type="image") if part is IMAGE else ContentPart(type="text", text=str(part)) for part in laid_out]
    parts: list[ChatMessage] = [{"role": "user", "content": content}]
    if renderer is None:
        if has_vision:
            raise BackendError(f"model {model}: its processor has no chat template")
        return prompt
    if has_vision or renderer.text_content == "parts":
        return renderer.render(parts)
    as_string: list[ChatMessage] = [{"role": "user", "content": prompt}]
    if renderer.text_content == "string":
        return renderer.render(as_string)
    # the first text-only turn decides for the template, once
    try:
        rendered = renderer.render(as_string)
    except TemplateRenderError:
        rendered = None
    renderer.text_content = "string" if rendered is not None and prompt.strip() in rendered else "parts"
    return rendered if renderer.text_content == "string" and rendered is not None else renderer.render(parts)


def adds_special_tokens(text: str, bos_token: str | None, has_vision: bool, templated: bool) -> bool:
    """Whether tokenising one rendered ``text`` adds the tokenizer's special tokens, as the
    model card's path (``apply_chat_template(tokenize=True)``) does: a VLM's text gets them
    unless the template already wrote BOS (LLaVA-1.5's template writes none and its
    tokenizer adds ``<s>``; Idefics3's and Gemma3's write it); a text-only LLM's templated
    text never gets them, its bare prompt does. Both local backends tokenise by this rule."""
    if not has_vision:
        return not templated
    return not (bool(bos_token) and text.startswith(str(bos_token)))


class ChatTemplateRenderer:
    """Renders conversations through one template in a limited child process. Thread-safe.

    The child is shared by every renderer of this process with the same memory limit
    (:class:`RenderingChild`): started on the first render of any of them and kept, so that
    its start (a Python process importing transformers' template module, seconds on a busy
    machine) is paid once per process, not once per model loaded. Each render still gets
    its own time limit, and a child stopped at one is started again for the next render."""

    def __init__(
        self,
        model: str,
        template: str,
        variables: Mapping[str, TemplateVariable],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_mb: int = DEFAULT_MEMORY_MB,
        max_chars: int = DEFAULT_MAX_CHARS,
    ):
        self.model, self.template, self.variables = model, template, variables
        self.timeout_s, self.memory_mb, self.max_chars = timeout_s, memory_mb, max_chars
        #: how this template takes a text-only user turn ("string" or "parts"), once known (``user_turn``)
        self.text_content: str | None = None
        self.template_id = next(_template_ids)

    def render(self, conversation: Sequence[ChatMessage], add_generation_prompt: bool = True) -> str:
        request = {"render": self.template_id, "conversation": conversation, "add_generation_prompt": add_generation_prompt}
        answer = RenderingChild.for_limit(self.memory_mb).render(self, request)
        if "text" in answer:
            return str(answer["text"])
        if answer.get("kind") == "template":
            raise TemplateRenderError(f"model {self.model}: its chat template raised: {answer['error']}")
        raise TemplateLimitError(f"model {self.model}: its chat template {answer['error']}")

    def definition(self) -> dict[str, object]:
        """What the child needs to render this template (sent before its first render there)."""
        return {"define": self.template_id, "template": self.template, "variables": self.variables, "max_chars": self.max_chars}

    def close(self) -> None:
        """Let the child drop this template (the child itself serves others, and stays)."""
        RenderingChild.forget_everywhere(self.template_id)


_template_ids = itertools.count()


class RenderingChild:
    """The child process rendering the templates of this process under one memory limit.

    Requests are serialised; a template is defined in a child before its first render
    there, again after the child was started again. A render past its time limit, or a
    child that ended, stops the child: the next render of any template starts a new one.
    A process forked from this one starts children of its own (it must not write into
    its parent's pipes)."""

    _lock = threading.Lock()
    _children: dict[tuple[int, int], RenderingChild] = {}

    def __init__(self, memory_mb: int):
        self.memory_mb = memory_mb
        self._process: subprocess.Popen[bytes] | None = None
        self._defined: set[int] = set()
        self._pending = b""
        self._lock = threading.Lock()

    @classmethod
    def for_limit(cls, memory_mb: int) -> RenderingChild:
        with cls._lock:
            key = (os.getpid(), memory_mb)
            if key not in cls._children:
                cls._children[key] = cls(memory_mb)
            return cls._children[key]

    @classmethod
    def forget_everywhere(cls, template_id: int) -> None:
        with cls._lock:
            children = [child for (pid, _), child in cls._children.items() if pid == os.getpid()]
        for child in children:
            child.forget(template_id)

    @property
    def defined(self) -> frozenset[int]:
        """The templates the running child holds."""
        return frozenset(self._defined)

    @property
    def pid(self) -> int | None:
        """The running child's process id (None: none running)."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def render(self, renderer: ChatTemplateRenderer, request: Mapping[str, object]) -> RenderAnswer:
        with self._lock:
            child = self._start()
            lines = [] if renderer.template_id in self._defined else [renderer.definition()]
            self._defined.add(renderer.template_id)
            self._write(child, [*lines, request])
            return self._read_line(child, renderer)

    def forget(self, template_id: int) -> None:
        with self._lock:
            if template_id in self._defined and self._process is not None and self._process.poll() is None:
                self._write(self._process, [{"forget": template_id}])
            self._defined.discard(template_id)

    def stop(self) -> None:
        with self._lock:
            self._stop()

    def _write(self, child: subprocess.Popen[bytes], messages: Sequence[Mapping[str, object]]) -> None:
        assert child.stdin is not None
        try:
            child.stdin.write(b"".join(json.dumps(message).encode() + b"\n" for message in messages))
            child.stdin.flush()
        except BrokenPipeError:
            pass  # the child died; reading says how

    def _start(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}
        child = subprocess.Popen(
            [sys.executable, "-m", "vlgate.evaluators.backends.chat_templates"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self._write(child, [{"memory_mb": self.memory_mb}])
        self._process, self._pending, self._defined = child, b"", set()
        # a render's time limit counts from a child that has imported its code, so that a
        # template that loops is stopped after its own limit, not the start's as well
        self._next_line(child, STARTUP_S, f"the process rendering chat templates did not start within {STARTUP_S:g} s")
        return child

    def _stop(self) -> None:
        child, self._process, self._defined = self._process, None, set()
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()

    def _read_line(self, child: subprocess.Popen[bytes], renderer: ChatTemplateRenderer) -> RenderAnswer:
        """The child's answer to a render, within the template's time limit."""
        late = f"model {renderer.model}: its chat template did not finish within {renderer.timeout_s:g} s and was stopped"
        answer: RenderAnswer = json.loads(self._next_line(child, renderer.timeout_s, late, f"model {renderer.model}: "))
        return answer

    def _next_line(self, child: subprocess.Popen[bytes], timeout_s: float, late: str, whose: str = "") -> bytes:
        """The child's next line within ``timeout_s``; the child is stopped and ``late`` raised
        when none comes, and a child that ended is said (prefixed with ``whose``)."""
        assert child.stdout is not None
        deadline = time.monotonic() + timeout_s
        descriptor = child.stdout.fileno()
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            ready = select.select([descriptor], [], [], max(remaining, 0.0))[0] if remaining > 0 else []
            if not ready:
                self._stop()
                raise TemplateLimitError(late)
            chunk = os.read(descriptor, 1 << 16)
            if not chunk:
                code = child.wait()
                self._stop()
                raise TemplateLimitError(f"{whose}the process rendering its chat template ended (exit {code}) before answering")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line


#: What a child may take to import its code and say it is ready (a busy small machine
#: imports slowly); a render's own limit counts from then.
STARTUP_S = 60.0


def _serve() -> None:
    """The child: read its memory limit, cap the address space, then take definitions,
    forgets and renders until stdin closes (one answer per render)."""
    import resource

    from transformers.utils.chat_template_utils import render_jinja_template

    setup = json.loads(sys.stdin.buffer.readline())
    with open("/proc/self/statm") as statm:
        held = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = held + int(setup["memory_mb"]) * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    templates: dict[int, dict[str, Any]] = {}
    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')  # imported and limited: renders are timed from here
    out.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "define" in request:
            templates[request["define"]] = request
            continue
        if "forget" in request:
            templates.pop(request["forget"], None)
            continue
        try:
            template = templates[request["render"]]
            # (rendered texts, generation indices); transformers annotates it as str
            rendered = render_jinja_template(
                conversations=[request["conversation"]],
                chat_template=template["template"],
                add_generation_prompt=request["add_generation_prompt"],
                **template["variables"],
            )
            text = rendered[0][0]
            if len(text) > template["max_chars"]:
                answer: RenderAnswer = {"error": f"rendered {len(text):,} characters (limit {template['max_chars']:,})", "kind": "size"}
            else:
                answer = {"text": text}
        except MemoryError:
            answer = {"error": f"needed more than {setup['memory_mb']} MB to render", "kind": "memory"}
        except Exception as error:  # a template's own failure: the caller decides
            answer = {"error": f"{type(error).__name__}: {error}", "kind": "template"}
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve()
