"""A model behind an OpenAI-compatible chat completions server (``vllm serve``, and others).

- :meth:`OpenAIHttpBackend.choice_probs` asks for one token at temperature 0 with
  ``logprobs: true, top_logprobs: k`` and reads the first position's ``top_logprobs``
  (``choices[0].logprobs.content[0].top_logprobs``, a list of ``{token, logprob}``).
  Tokens are mapped to options by their text (:mod:`.options`); options outside the top
  k get probability 0, and a request whose top k holds no option at all is logged as a
  warning and scored uniform. The server applies the checkpoint's chat template; the user
  turn is the images first, then the text, as the transformers backend builds it.
- :meth:`OpenAIHttpBackend.generate` is a chat completion at temperature 0 with
  ``max_tokens``.
- Images travel as base64 PNG data URLs (lossless: the server sees the same pixels).
- Requests run concurrently (a bounded thread pool over one pooled ``httpx.Client``);
  results come back in request order. 408/429/5xx answers and connection errors are
  retried with exponential backoff (``Retry-After`` honoured); any other error answer is
  a :class:`BackendError` naming the request's index and quoting the server's body.
- ``shared_prefix`` is not used: vLLM's automatic prefix caching reuses a repeated
  prefix on the server side.

What the digest can and cannot say: a server does not prove which weights it serves.
:attr:`BackendInfo.digest` is ``served:MODEL`` plus, where ``GET /models`` reports one,
the ``root`` the server loaded the model from (``served:llava@/models/llava-1.5``).
Re-pointing a served name at other weights keeps the digest, so records cached under it
would be reused; serve each model version under its own name (``--served-model-name``).
"""

from __future__ import annotations

import base64
import functools
import io
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypedDict, TypeVar
from urllib.parse import urlsplit

import httpx
import numpy as np
from PIL import Image
from pydantic import JsonValue

from vlgate.evaluators.backends.base import IMAGE, BackendError, BackendInfo, ChoiceRequest, GenerateRequest, TurnPart, VisionLanguageBackend, renormalise
from vlgate.evaluators.backends.options import option_masses_from_logprobs

logger = logging.getLogger(__name__)

#: Answers worth another try: timeout, rate limit, and the server-side failures a restart or load spike gives.
RETRIABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_RETRY_SLEEP_S = 30.0
ERROR_BODY_CHARS = 1000
PNG_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16"})

Result = TypeVar("Result")
#: A JSON object: a request's payload, a ``/models`` entry.
JsonObject = dict[str, JsonValue]


class TopLogprob(TypedDict):
    token: str
    logprob: float


class TokenLogprob(TypedDict, total=False):
    token: str
    logprob: float
    top_logprobs: list[TopLogprob] | None


class ChoiceLogprobs(TypedDict, total=False):
    content: list[TokenLogprob] | None


class ChatMessage(TypedDict, total=False):
    content: str | None


class CompletionChoice(TypedDict, total=False):
    message: ChatMessage
    logprobs: ChoiceLogprobs | None


class ChatCompletion(TypedDict):
    """The parts of a chat completion's body vlgate reads (a body of another shape is a
    :class:`BackendError` where it is read)."""

    choices: list[CompletionChoice]


def api_root(base_url: str) -> str:
    """The API root the paths are appended to. As with the OpenAI client, ``base_url``
    includes the version (``http://host:8000/v1``); a bare ``http://host:8000`` gets ``/v1``."""
    url = base_url.rstrip("/")
    return url + "/v1" if urlsplit(url).path in ("", "/") else url


def image_data_url(image: Image.Image) -> str:
    """The image as a base64 PNG data URL (lossless; modes PNG cannot hold become RGB)."""
    buffer = io.BytesIO()
    (image if image.mode in PNG_MODES else image.convert("RGB")).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _snippet(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class HttpRetries:
    """How a request that got a retriable answer (:data:`RETRIABLE_STATUSES`) or no answer
    is tried again: at most ``max_attempts`` tries in all, the waits doubling from
    ``backoff_s`` (or the server's ``Retry-After``; at most :data:`MAX_RETRY_SLEEP_S`)."""

    max_attempts: int = 4  # three waits, 0.5 + 1 + 2 s: a server restarting gets a few seconds, a dead one fails fast
    backoff_s: float = 0.5


class OpenAIHttpBackend(VisionLanguageBackend):
    """One model on an OpenAI-compatible server. Connecting checks that the server serves ``model``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_concurrency: int = 8,
        top_logprobs: int = 20,
        retries: HttpRetries = HttpRetries(),
    ):
        if max_concurrency < 1 or top_logprobs < 1 or retries.max_attempts < 1:
            raise ValueError("max_concurrency, top_logprobs and max_attempts must be at least 1")
        self.base_url, self.model = api_root(base_url), model
        self.max_concurrency, self.top_logprobs = max_concurrency, top_logprobs
        self.max_attempts, self.retry_backoff_s = retries.max_attempts, retries.backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )
        try:
            served = self._served_model()
        except BackendError:
            self.client.close()
            raise
        root = served.get("root") if served else None
        digest = f"served:{model}" + (f"@{root}" if root and root != model else "")
        extra = {"base_url": self.base_url, "top_logprobs": str(top_logprobs)}
        if root:
            extra["root"] = str(root)
        if served and served.get("max_model_len"):
            extra["max_model_len"] = str(served["max_model_len"])
        self.info = BackendInfo(name="openai-http", model=model, digest=digest, device="remote", extra=extra)

    # -- transport -------------------------------------------------------------------------

    def _request(self, method: str, path: str, payload: JsonObject | None, what: str) -> httpx.Response:
        """The server's answer (status 200, or a non-retriable error status for the caller to
        report); retriable statuses and connection errors are retried, then raised."""
        url = f"{self.base_url}{path}"
        problem = ""
        for attempt in range(1, self.max_attempts + 1):
            delay = self.retry_backoff_s * 2 ** (attempt - 1)
            try:
                response = self.client.request(method, url, json=payload)
            except httpx.TransportError as error:  # refused, reset, timed out
                problem = f"{type(error).__name__}: {error}"
            else:
                if response.status_code not in RETRIABLE_STATUSES:
                    return response
                problem = f"HTTP {response.status_code}: {response.text[:ERROR_BODY_CHARS]}"
                retry_after = response.headers.get("Retry-After", "")
                if retry_after.strip().isdigit():
                    delay = float(retry_after)
            if attempt < self.max_attempts:
                logger.info("%s: %s; retrying (attempt %d of %d)", what, problem, attempt + 1, self.max_attempts)
                time.sleep(min(delay, MAX_RETRY_SLEEP_S))
        raise BackendError(f"{self.model} at {self.base_url}: {what} failed after {self.max_attempts} attempts; last: {problem}")

    def _served_model(self) -> JsonObject | None:
        """The server's ``/models`` entry for our model; None when the server has no such
        listing. A listing without our model is an error (a typo would otherwise only
        show up as failed requests)."""
        response = self._request("GET", "/models", None, "listing the served models")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise BackendError(f"{self.model} at {self.base_url}: GET /models answered HTTP {response.status_code}: {response.text[:ERROR_BODY_CHARS]}")
        try:
            entries = response.json().get("data") or []
        except (ValueError, AttributeError):
            return None
        for entry in entries:
            if isinstance(entry, dict) and entry.get("id") == self.model:
                return entry
        ids = [entry.get("id") for entry in entries if isinstance(entry, dict)]
        raise BackendError(f"{self.base_url} does not serve model {self.model!r}; it serves {ids}")

    def _complete(self, index: int, request_prompt: str, payload: JsonObject) -> ChatCompletion:
        what = f"request {index} ({_snippet(request_prompt)!r})"
        response = self._request("POST", "/chat/completions", payload, what)
        if response.status_code != 200:
            raise BackendError(f"{self.model} at {self.base_url}: {what} answered HTTP {response.status_code}: {response.text[:ERROR_BODY_CHARS]}")
        try:
            return response.json()
        except ValueError as error:
            raise BackendError(f"{self.model} at {self.base_url}: {what} answered a body that is not JSON: {response.text[:200]!r}") from error

    def _run_all(self, jobs: list[Callable[[], Result]]) -> list[Result]:
        """Run the jobs at most ``max_concurrency`` at a time; results in job order. The
        first failure (lowest index) is raised, and jobs not yet started are cancelled."""
        if len(jobs) <= 1 or self.max_concurrency == 1:
            return [job() for job in jobs]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(jobs)), thread_name_prefix="vlgate-http") as pool:
            futures = [pool.submit(job) for job in jobs]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    # -- messages --------------------------------------------------------------------------

    def _messages(self, images: Sequence[Image.Image], prompt: str, urls: dict[int, str], turn: Sequence[TurnPart] | None = None) -> list[JsonValue]:
        """The user turn: images first, then the text (unless ``turn`` lays out texts and
        image slots otherwise); plain string content when there is no image (text-only chat
        templates expect it)."""
        if not images:
            return [{"role": "user", "content": prompt if turn is None else "".join(str(part) for part in turn)}]
        content: list[JsonValue] = []
        remaining = iter(images)
        for part in turn if turn is not None else (*(IMAGE for _ in images), prompt):
            if part is not IMAGE:
                content.append({"type": "text", "text": str(part)})
                continue
            image = next(remaining)
            if id(image) not in urls:  # VL-LCM sends one image with K probes: encode it once
                urls[id(image)] = image_data_url(image)
            content.append({"type": "image_url", "image_url": {"url": urls[id(image)]}})
        return [{"role": "user", "content": content}]

    # -- the interface ---------------------------------------------------------------------

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[np.ndarray]:
        urls: dict[int, str] = {}
        payloads: list[JsonObject] = [
            {
                "model": self.model,
                "messages": self._messages(r.images, r.prompt, urls),
                "max_tokens": 1,
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": self.top_logprobs,
            }
            for r in requests
        ]

        def score(index: int) -> np.ndarray:
            request = requests[index]
            pairs = self._first_token_logprobs(self._complete(index, request.prompt, payloads[index]), index)
            masses = option_masses_from_logprobs(pairs, request.options)
            if not masses.sum() > 0:
                logger.warning(
                    "%s: request %d: none of the options %s is among the top %d tokens %s; scoring it uniform",
                    self.model, index, list(request.options), self.top_logprobs, [token for token, _ in pairs],
                )
            return renormalise(masses)

        return self._run_all([functools.partial(score, i) for i in range(len(requests))])

    def _first_token_logprobs(self, body: ChatCompletion, index: int) -> list[tuple[str, float]]:
        """(token text, logprob) of the first position's top tokens, and of the chosen
        token where the top list leaves it out."""
        try:
            content = (body["choices"][0].get("logprobs") or {}).get("content") or []
            if not content:
                raise BackendError(
                    f"{self.model} at {self.base_url}: request {index}: the response carries no logprobs; "
                    "the server must support logprobs/top_logprobs on chat completions"
                )
            first = content[0]
            pairs = [(str(entry["token"]), float(entry["logprob"])) for entry in first.get("top_logprobs") or []]
            if "token" in first and "logprob" in first and first["token"] not in {token for token, _ in pairs}:
                pairs.append((str(first["token"]), float(first["logprob"])))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
            raise BackendError(f"{self.model} at {self.base_url}: request {index}: unexpected response shape ({error!r}): {str(body)[:300]}") from error
        return pairs

    def generate(self, requests: Sequence[GenerateRequest]) -> list[str]:
        urls: dict[int, str] = {}
        payloads: list[JsonObject] = [
            {"model": self.model, "messages": self._messages(r.images, r.prompt, urls, r.turn), "max_tokens": r.max_new_tokens, "temperature": 0}
            for r in requests
        ]

        def complete(index: int) -> str:
            body = self._complete(index, requests[index].prompt, payloads[index])
            try:
                text = body["choices"][0]["message"].get("content")
            except (KeyError, IndexError, TypeError, AttributeError) as error:
                raise BackendError(f"{self.model} at {self.base_url}: request {index}: unexpected response shape ({error!r}): {str(body)[:300]}") from error
            return (text or "").strip()

        return self._run_all([functools.partial(complete, i) for i in range(len(requests))])

    def close(self) -> None:
        self.client.close()
