"""Issue 4, item 1: option tokens → option probabilities, the OpenAI-compatible HTTP backend
(against a stub server started here), and the vLLM backend (its logic with stand-ins for
vLLM's classes; the real engine where vLLM is installed)."""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import socket
import sys
import threading
import time
import types
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from vlgate.evaluators.backends.base import BackendError, ChoiceRequest, GenerateRequest
from vlgate.evaluators.backends.loading import LoadPolicy, model_digest
from vlgate.evaluators.backends.openai_http import HttpRetries, OpenAIHttpBackend, api_root, image_data_url
from vlgate.evaluators.backends.options import (
    first_token_texts,
    option_masses_from_token_ids,
    option_of_token,
    option_spellings,
    option_token_ids,
    probabilities_from_logprobs,
)
from vlgate.evaluators.backends.vllm_offline import VllmBackend, accepts_field, engine_prompt

LETTERS = ("A", "B", "C", "D")
log = math.log


def solid(rgb, size=(8, 6)) -> Image.Image:
    return Image.new("RGB", size, rgb)


# -- options ---------------------------------------------------------------------------------


def test_spellings_are_the_case_variants_without_repeats():
    assert option_spellings("A") == ("A", "a")
    assert option_spellings("Yes") == ("Yes", "yes", "YES")
    assert option_spellings("true") == ("true", "TRUE", "True")
    assert first_token_texts("A") == ("A", " A", "a", " a")


YES_NO = ("Yes", "No")


@pytest.mark.parametrize(
    ("token", "options", "expected"),
    [
        ("A", LETTERS, "A"), (" A", LETTERS, "A"), ("▁A", LETTERS, "A"), ("ĠA", LETTERS, "A"), ("a", LETTERS, "A"),
        ("\nA ", LETTERS, "A"), ("Ġc", LETTERS, "C"), ("▁Yes", YES_NO, "Yes"), (" yes", YES_NO, "Yes"), ("YES", YES_NO, "Yes"),
        ("ĠNo", YES_NO, "No"),
        # not an option: punctuation, a case mix no tokenizer spells, ids as text, longer words, nothing
        ("A.", LETTERS, None), ("(A", LETTERS, None), ("A)", LETTERS, None), ("yES", YES_NO, None),
        ("token_id:32", LETTERS, None), ("Yesterday", YES_NO, None), ("", LETTERS, None),
    ],
)
def test_option_of_token(token, options, expected):
    assert option_of_token(token, options) == expected


def test_options_spelled_alike_cannot_be_scored_apart():
    with pytest.raises(BackendError, match="spelled the same"):
        option_of_token("yes", ("yes", "Yes"))


def test_probabilities_sum_every_token_of_an_option():
    # A: .5 + .1, B: .2, C: .1 (GPT-2 marked, lower case), D: absent -> [.6, .2, .1, 0] / .9
    logprobs = {"A": log(0.5), " A": log(0.1), "B": log(0.2), "Ġc": log(0.1), "The": log(0.05)}
    np.testing.assert_allclose(probabilities_from_logprobs(logprobs, LETTERS), [2 / 3, 2 / 9, 1 / 9, 0.0])


def test_pairs_keep_tokens_that_decode_alike():
    # a server can list "▁A" and "A" both as "A": pairs keep both, a dict would keep one
    pairs = [("A", log(0.2)), ("A", log(0.2)), ("B", log(0.4))]
    np.testing.assert_allclose(probabilities_from_logprobs(pairs, ("A", "B")), [0.5, 0.5])
    np.testing.assert_allclose(probabilities_from_logprobs(dict(pairs), ("A", "B")), [1 / 3, 2 / 3])


def test_no_option_present_gives_uniform_and_minus_infinity_counts_zero():
    np.testing.assert_allclose(probabilities_from_logprobs({"The": -0.1}, LETTERS), [0.25] * 4)
    np.testing.assert_allclose(probabilities_from_logprobs({"Yes": -math.inf, "no": log(0.3)}, ("Yes", "No")), [0.0, 1.0])


class WordTokenizer:
    """A stand-in tokenizer: known strings are one token, anything else one token per character."""

    unk_token_id = 0

    def __init__(self, vocabulary, bos_token=None):
        self.ids = {text: i for i, text in enumerate(vocabulary, start=1)}
        self.bos_token = bos_token

    def decode(self, ids, skip_special_tokens=False):
        texts = {i: text for text, i in self.ids.items()}
        return " ".join(texts[i] for i in ids)

    def encode(self, text, add_special_tokens=False):
        if text in self.ids:
            return [self.ids[text]]
        return [self.ids.get(character, self.unk_token_id) for character in text]


def test_option_token_ids_collect_every_single_token_spelling():
    tokenizer = WordTokenizer(["A", " A", "a", "B", " b", "Y", "e", "s", "No", " no"])
    assert option_token_ids(tokenizer, ("A", "B")) == [[1, 2, 3], [4, 5]]
    # "Yes" is no single token: the first token of its encoding stands for it
    assert option_token_ids(tokenizer, ("Yes", "No")) == [[6], [9, 10]]
    with pytest.raises(BackendError, match="share their first token"):
        option_token_ids(tokenizer, ("Yes", "Y"))


def test_option_masses_from_token_ids_count_absent_ids_as_zero():
    masses = option_masses_from_token_ids({1: log(0.3), 2: log(0.1), 9: log(0.5)}, [[1, 2], [3]])
    np.testing.assert_allclose(masses, [0.4, 0.0])


# -- the HTTP backend against a stub OpenAI-compatible server -----------------------------------


def prompt_of(body: dict) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else next(part["text"] for part in content if part["type"] == "text")


class StubServer:
    """A test double of ``vllm serve``: canned ``top_logprobs`` per prompt, scripted failures,
    and a record of every request it got."""

    def __init__(self):
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.failures: list[int] = []  # statuses for the next chat completions, in order
        self.models_status = 200
        self.models = [{"id": "tiny-vlm", "object": "model", "root": "/models/tiny-vlm", "max_model_len": 512}]
        self.top_logprobs: dict[str, list[tuple[str, float]]] = {}
        self.delays: dict[str, float] = {}
        self.omit_logprobs = False
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def reply(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                stub.record("GET", self.path, dict(self.headers), None)
                if self.path == "/v1/models" and stub.models_status == 200:
                    self.reply(200, {"object": "list", "data": stub.models})
                else:
                    self.reply(stub.models_status if self.path == "/v1/models" else 404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.record("POST", self.path, dict(self.headers), body)
                status, payload = stub.answer(self.path, body)
                self.reply(status, payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def record(self, method, path, headers, body):
        with self.lock:
            self.requests.append({"method": method, "path": path, "headers": headers, "body": body})

    def chat_bodies(self) -> list[dict]:
        return [r["body"] for r in self.requests if r["method"] == "POST"]

    def answer(self, path, body):
        if path != "/v1/chat/completions":
            return 404, {"detail": "Not Found"}
        with self.lock:
            failure = self.failures.pop(0) if self.failures else None
        if failure:
            return failure, {"object": "error", "message": "server overloaded", "code": failure}
        prompt = prompt_of(body)
        time.sleep(self.delays.get(prompt, 0))
        if "bad" in prompt:
            return 400, {"object": "error", "message": "top_logprobs exceeds max_logprobs", "type": "BadRequestError", "code": 400}
        if body.get("logprobs"):
            top = self.top_logprobs[prompt][: body["top_logprobs"]]
            chosen = {"token": top[0][0], "logprob": top[0][1], "bytes": list(top[0][0].encode())}
            logprobs = None if self.omit_logprobs else {
                "content": [chosen | {"top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top]}]
            }
            message, finish = {"role": "assistant", "content": top[0][0]}, "length"
        else:
            logprobs, message, finish = None, {"role": "assistant", "content": f"  echo: {prompt}\n"}, "stop"
        return 200, {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    server = StubServer()
    yield server
    server.close()


def connect(stub, **settings) -> OpenAIHttpBackend:
    settings = {"api_key": "sk-test", "max_concurrency": 4, "top_logprobs": 5, "retries": HttpRetries(backoff_s=0.01), "timeout": 5.0} | settings
    return OpenAIHttpBackend(stub.url, "tiny-vlm", **settings)


def test_api_root_adds_v1_only_to_a_bare_host():
    assert api_root("http://h:8000") == "http://h:8000/v1"
    assert api_root("http://h:8000/") == "http://h:8000/v1"
    assert api_root("http://h:8000/v1/") == "http://h:8000/v1"
    assert api_root("https://gateway/openai/v1") == "https://gateway/openai/v1"


def test_http_choice_probs_read_top_logprobs(stub):
    stub.top_logprobs["Which shape?"] = [("A", log(0.5)), ("ĠA", log(0.1)), ("B", log(0.2)), (" c", log(0.1)), ("The", log(0.05))]
    stub.top_logprobs["Is it red?"] = [("Yes", log(0.6)), ("▁no", log(0.3)), ("yes", log(0.05))]
    backend = connect(stub)
    image = solid((200, 30, 30))
    probs = backend.choice_probs(
        [ChoiceRequest((image,), "Which shape?", LETTERS), ChoiceRequest((image,), "Is it red?", ("Yes", "No"))]
    )
    np.testing.assert_allclose(probs[0], [2 / 3, 2 / 9, 1 / 9, 0.0])
    np.testing.assert_allclose(probs[1], [0.65 / 0.95, 0.3 / 0.95])
    for body in stub.chat_bodies():
        assert body["model"] == "tiny-vlm"
        assert body["logprobs"] is True and body["top_logprobs"] == 5
        assert body["max_tokens"] == 1 and body["temperature"] == 0
    assert all(r["headers"].get("Authorization") == "Bearer sk-test" for r in stub.requests)
    backend.close()


def test_http_images_arrive_as_png_data_urls_before_the_text(stub):
    stub.top_logprobs["Which image?"] = stub.top_logprobs["No image here"] = [("A", log(0.9))]
    first, second = solid((10, 120, 250), (9, 7)), Image.new("L", (5, 4), 77)
    backend = connect(stub)
    backend.choice_probs([ChoiceRequest((first, second), "Which image?", ("A", "B")), ChoiceRequest((), "No image here", ("A", "B"))])
    with_images, text_only = sorted(stub.chat_bodies(), key=lambda body: isinstance(body["messages"][0]["content"], str))
    parts = with_images["messages"][0]["content"]
    assert [part["type"] for part in parts] == ["image_url", "image_url", "text"]
    for part, sent in zip(parts, (first, second)):
        url = part["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        received = Image.open(io.BytesIO(base64.b64decode(url.removeprefix("data:image/png;base64,"))))
        assert received.mode == sent.mode and np.array_equal(np.asarray(received), np.asarray(sent))
    assert text_only["messages"] == [{"role": "user", "content": "No image here"}]


def test_image_data_url_converts_modes_png_cannot_hold():
    cmyk = Image.new("CMYK", (3, 3), (0, 255, 255, 0))
    decoded = Image.open(io.BytesIO(base64.b64decode(image_data_url(cmyk).split(",", 1)[1])))
    assert decoded.mode == "RGB"


def test_http_results_keep_request_order_under_concurrency(stub):
    prompts = [f"question {i}" for i in range(6)]
    for i, prompt in enumerate(prompts):
        stub.top_logprobs[prompt] = [("A", log(0.1 * (i + 1))), ("B", log(0.05))]
        stub.delays[prompt] = 0.03 * (5 - i)  # later requests finish first
    probs = connect(stub).choice_probs([ChoiceRequest((), prompt, ("A", "B")) for prompt in prompts])
    for i, p in enumerate(probs):
        a = 0.1 * (i + 1)
        np.testing.assert_allclose(p, [a / (a + 0.05), 0.05 / (a + 0.05)])


def test_http_retries_a_503_and_succeeds(stub):
    stub.top_logprobs["Is it red?"] = [("Yes", log(0.8)), ("No", log(0.2))]
    stub.failures = [503]
    probs = connect(stub).choice_probs([ChoiceRequest((), "Is it red?", ("Yes", "No"))])
    np.testing.assert_allclose(probs[0], [0.8, 0.2])
    assert len(stub.chat_bodies()) == 2


def test_http_gives_up_after_max_attempts(stub):
    stub.failures = [503] * 10
    with pytest.raises(BackendError, match=r"request 0 .*after 3 attempts.*HTTP 503.*server overloaded"):
        connect(stub, retries=HttpRetries(max_attempts=3, backoff_s=0.01)).generate([GenerateRequest((), "Describe it.")])
    assert len(stub.chat_bodies()) == 3


def test_http_client_error_names_the_request_and_quotes_the_server(stub):
    stub.top_logprobs["fine"] = [("A", log(0.9))]
    backend = connect(stub)
    with pytest.raises(BackendError, match=r"request 1 \('a bad one'\) answered HTTP 400: .*top_logprobs exceeds max_logprobs"):
        backend.choice_probs([ChoiceRequest((), "fine", ("A", "B")), ChoiceRequest((), "a bad one", ("A", "B"))])
    assert sum(prompt_of(body) == "a bad one" for body in stub.chat_bodies()) == 1  # a 400 is not retried


def test_http_generate_returns_the_text_stripped(stub):
    backend = connect(stub)
    texts = backend.generate([GenerateRequest((solid((0, 0, 0)),), "Describe it.", max_new_tokens=12), GenerateRequest((), "Say hi.")])
    assert texts == ["echo: Describe it.", "echo: Say hi."]
    bodies = sorted(stub.chat_bodies(), key=prompt_of)
    assert [body["max_tokens"] for body in bodies] == [12, 32]
    assert all(body["temperature"] == 0 and "logprobs" not in body for body in bodies)


def test_http_digest_names_the_served_model_and_its_root(stub):
    backend = connect(stub)
    assert backend.info.name == "openai-http" and backend.info.model == "tiny-vlm"
    assert backend.info.digest == "served:tiny-vlm@/models/tiny-vlm"
    assert backend.info.extra["root"] == "/models/tiny-vlm" and backend.info.extra["max_model_len"] == "512"
    assert "sk-test" not in json.dumps(backend.info.extra)
    stub.models_status = 404  # a server without a model listing
    assert connect(stub).info.digest == "served:tiny-vlm"


def test_http_refuses_a_model_the_server_does_not_serve(stub):
    with pytest.raises(BackendError, match=r"does not serve model 'other'; it serves \['tiny-vlm'\]"):
        OpenAIHttpBackend(stub.url, "other", retries=HttpRetries(backoff_s=0.01))


def test_http_unreachable_server_is_a_backend_error():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(BackendError, match=r"failed after 2 attempts; last: ConnectError"):
        OpenAIHttpBackend(f"http://127.0.0.1:{port}", "tiny-vlm", retries=HttpRetries(max_attempts=2, backoff_s=0.01), timeout=2.0)


def test_http_no_option_in_the_top_tokens_warns_and_scores_uniform(stub, caplog):
    stub.top_logprobs["Which?"] = [("The", log(0.7)), ("It", log(0.2))]
    with caplog.at_level(logging.WARNING, logger="vlgate.evaluators.backends.openai_http"):
        probs = connect(stub).choice_probs([ChoiceRequest((), "Which?", LETTERS)])
    np.testing.assert_allclose(probs[0], [0.25] * 4)
    assert "request 0: none of the options ['A', 'B', 'C', 'D']" in caplog.text


def test_http_server_that_ignores_logprobs_is_a_backend_error(stub):
    stub.top_logprobs["Which?"] = [("A", log(0.7))]
    stub.omit_logprobs = True
    with pytest.raises(BackendError, match="request 0: the response carries no logprobs"):
        connect(stub).choice_probs([ChoiceRequest((), "Which?", LETTERS)])


# -- the vLLM backend's logic, with stand-ins for vLLM's classes ------------------------------------


@dataclass
class ParamsWithTokenIds:
    """Newer vLLM's SamplingParams: can ask for exact token ids."""

    max_tokens: int = 16
    temperature: float = 1.0
    logprobs: int | None = None
    logprob_token_ids: list[int] | None = None


@dataclass
class ParamsTopKOnly:
    """Older vLLM's SamplingParams: top-k logprobs only."""

    max_tokens: int = 16
    temperature: float = 1.0
    logprobs: int | None = None


class FakeLLM:
    """``LLM.generate`` over a fixed next-token distribution (token id → probability), returning
    what vLLM returns: the requested ids (or the top k) and the sampled token."""

    def __init__(self, distribution: dict[int, float], tokenizer):
        self.distribution, self.tokenizer, self.calls = distribution, tokenizer, []

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, sampling_params, use_tqdm=True, tokenization_kwargs=None):
        self.calls.append((prompts, sampling_params, tokenization_kwargs))
        outputs = []
        for params in sampling_params:
            ranked = sorted(self.distribution, key=self.distribution.get, reverse=True)
            if getattr(params, "logprob_token_ids", None) is not None:
                ids = list(params.logprob_token_ids) + ranked[:1]
            elif params.logprobs is not None:
                ids = ranked[: params.logprobs]
            else:
                ids = None
            logprobs = None if ids is None else [{i: SimpleNamespace(logprob=log(self.distribution[i]) if self.distribution.get(i) else -math.inf) for i in ids}]
            # vLLM's own text of the ids [7, 8] ("The", "Yes") would hold back a partial character
            outputs.append(SimpleNamespace(outputs=[SimpleNamespace(text=" The Ye", token_ids=[7, 8], logprobs=logprobs)]))
        return outputs


TOKENS = WordTokenizer(["A", " A", "B", " B", "C", "D", "The", "Yes", "No"])  # ids 1..9


def fake_backend(params_class, distribution, top_logprobs=3):
    from vlgate.evaluators.backends.base import BackendInfo

    llm = FakeLLM(distribution, TOKENS)
    return VllmBackend(llm, params_class, BackendInfo("vllm", "fake", "sha256:0"), top_logprobs=top_logprobs), llm


def test_accepts_field_reads_dataclasses_and_msgspec_structs():
    assert accepts_field(ParamsWithTokenIds, "logprob_token_ids") and not accepts_field(ParamsTopKOnly, "logprob_token_ids")
    assert accepts_field(SimpleNamespace(__struct_fields__=("logprobs", "logprob_token_ids")), "logprob_token_ids")


def test_vllm_asks_for_exactly_the_option_tokens_when_it_can():
    # A: .3 (id 1) + .1 (id 2), B: .05 (id 3), C: 0, D: .01; "The" (id 7) is the top token
    backend, llm = fake_backend(ParamsWithTokenIds, {1: 0.3, 2: 0.1, 3: 0.05, 6: 0.01, 7: 0.54})
    probs = backend.choice_probs([ChoiceRequest((solid((1, 2, 3)),), "Which?", LETTERS)])
    np.testing.assert_allclose(probs[0], np.array([0.4, 0.05, 0.0, 0.01]) / 0.46)
    (params,) = llm.calls[0][1]
    assert params.logprob_token_ids == [1, 2, 3, 4, 5, 6] and params.logprobs is None
    assert params.max_tokens == 1 and params.temperature == 0.0


def test_vllm_falls_back_to_top_k_and_counts_absent_options_as_zero():
    backend, llm = fake_backend(ParamsTopKOnly, {7: 0.5, 1: 0.3, 3: 0.1, 6: 0.05, 5: 0.05}, top_logprobs=3)
    probs = backend.choice_probs([ChoiceRequest((), "Which?", LETTERS)])
    np.testing.assert_allclose(probs[0], [0.75, 0.25, 0.0, 0.0])  # top 3: The, A, B; D is outside
    (params,) = llm.calls[0][1]
    assert params.logprobs == 3 and params.max_tokens == 1 and params.temperature == 0.0


def test_vllm_warns_when_no_option_is_in_the_top_k(caplog):
    backend, _ = fake_backend(ParamsTopKOnly, {7: 0.9, 8: 0.05, 1: 0.05}, top_logprobs=1)
    with caplog.at_level(logging.WARNING, logger="vlgate.evaluators.backends.vllm_offline"):
        probs = backend.choice_probs([ChoiceRequest((), "Which?", ("A", "B"))])
    np.testing.assert_allclose(probs[0], [0.5, 0.5])
    assert "request 0: no token of the options ['A', 'B']" in caplog.text


@pytest.mark.parametrize(
    ("bos", "template_start", "adds"),
    [(None, "", True), ("<s>", "", True), ("<s>", "<s>", False)],
    ids=["no BOS", "BOS the tokenizer adds", "BOS the template writes"],
)
def test_vllm_gets_the_text_vlgate_rendered_with_its_images_and_generate_is_greedy(bos, template_start, adds):
    """vLLM is handed the chat template's rendering (vlgate's, in its limited child process),
    the images as multi-modal data, and special tokens added as the model card's path adds
    them: by the tokenizer unless the template already wrote BOS. Generated text is the
    tokenizer's decoding of the generated ids, as on transformers."""
    from vlgate.evaluators.backends.base import BackendInfo
    from vlgate.evaluators.backends.chat_templates import ChatTemplateRenderer

    image = solid((9, 9, 9))
    assert engine_prompt("USER: <image>Describe it.", (image,)) == {"prompt": "USER: <image>Describe it.", "multi_modal_data": {"image": [image]}}
    assert engine_prompt("Hi.", ()) == {"prompt": "Hi."}
    template = template_start + "{% for m in messages %}USER: {% for p in m['content'] %}{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}{% endif %}{% endfor %}{% endfor %} ASSISTANT:"
    llm = FakeLLM({1: 1.0}, WordTokenizer(["A", " A", "B", " B", "C", "D", "The", "Yes", "No"], bos_token=bos))
    backend = VllmBackend(llm, ParamsWithTokenIds, BackendInfo("vllm", "fake", "sha256:0"), template=ChatTemplateRenderer("fake", template, {}), has_vision=True)
    try:
        assert backend.generate([GenerateRequest((image, image), "Describe it.", max_new_tokens=7)]) == ["The Yes"]
    finally:
        backend.close()
    (prompts, (params,), tokenization) = llm.calls[0]
    assert prompts == [{"prompt": template_start + "USER: <image><image>Describe it. ASSISTANT:", "multi_modal_data": {"image": [image, image]}}]
    assert tokenization == {"add_special_tokens": adds}
    assert params.max_tokens == 7 and params.temperature == 0.0 and params.logprobs is None


def test_vllm_missing_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail, installed or not
    with pytest.raises(BackendError, match=r"pip install 'vlgate\[vllm\]'"):
        VllmBackend.load(tmp_path)


def tiny_checkpoint(folder: Path, **config) -> Path:
    """A text-only checkpoint folder a stand-in engine "loads": a config, weights' bytes, and a
    real word-level tokenizer (the backend reads the chat template with transformers)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"} | config))
    (folder / "model.safetensors").write_bytes(b"weights")
    words = Tokenizer(models.WordLevel({"<unk>": 0, "hi": 1}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>").save_pretrained(folder)
    return folder


@pytest.fixture
def fake_vllm(monkeypatch):
    """A stand-in ``vllm`` module that records how the engine was built."""
    module = types.ModuleType("vllm")
    module.__version__ = "0.0-test"
    module.SamplingParams = ParamsWithTokenIds
    module.built = []

    class LLM(FakeLLM):
        def __init__(self, **kwargs):
            module.built.append(kwargs)
            super().__init__({1: 1.0}, TOKENS)

    module.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.platforms", None)
    return module


def test_vllm_load_passes_the_policy_and_records_the_weights(fake_vllm, tmp_path):
    path = tiny_checkpoint(tmp_path / "ckpt")
    backend = VllmBackend.load(path, dtype="float32")
    (kwargs,) = fake_vllm.built
    assert kwargs == {
        "model": str(path), "trust_remote_code": False, "load_format": "safetensors",
        "enable_prefix_caching": True, "max_logprobs": 20, "dtype": "float32",
    }
    assert backend.info.name == "vllm" and backend.info.digest == model_digest(path)
    assert backend.info.extra["option_logprobs"] == "exact (logprob_token_ids)" and backend.info.extra["dtype"] == "float32"
    backend.close()
    assert backend.llm is None


def test_vllm_load_refuses_what_the_policy_forbids(fake_vllm, tmp_path):
    remote = tiny_checkpoint(tmp_path / "remote", auto_map={"AutoModel": "modeling.Custom"})
    with pytest.raises(BackendError, match="needs remote code"):
        VllmBackend.load(remote)
    with pytest.raises(BackendError, match="comes from the reference and the load policy"):
        VllmBackend.load(tiny_checkpoint(tmp_path / "plain"), trust_remote_code=True)
    with pytest.raises(BackendError, match="may unpickle weights"):
        VllmBackend.load(tmp_path / "plain", load_format="pt")
    assert fake_vllm.built == []
    VllmBackend.load(remote, policy=LoadPolicy(trust_remote_code=True))
    assert fake_vllm.built[-1]["trust_remote_code"] is True




def test_vllm_refuses_an_architecture_its_registry_cannot_load_before_starting_an_engine(fake_vllm, tmp_path):
    """vLLM lists LLaVA, but its module needs torchvision, which the CPU build cannot load:
    one line naming the model and the reason, and no engine started."""

    class Importable:
        def load_model_cls(self):
            return object

    class NeedsTorchvision:
        def load_model_cls(self):
            raise ModuleNotFoundError("No module named 'torchvision'")

    fake_vllm.ModelRegistry = types.SimpleNamespace(models={"Idefics3ForConditionalGeneration": Importable(), "LlavaForConditionalGeneration": NeedsTorchvision()})
    llava = tiny_checkpoint(tmp_path / "llava", architectures=["LlavaForConditionalGeneration"])
    with pytest.raises(BackendError, match=r"model .*llava: vLLM 0.0-test cannot run its architecture LlavaForConditionalGeneration here: .*No module named 'torchvision'"):
        VllmBackend.load(llava)
    assert fake_vllm.built == []
    VllmBackend.load(tiny_checkpoint(tmp_path / "idefics3", architectures=["Idefics3ForConditionalGeneration"]))
    VllmBackend.load(tiny_checkpoint(tmp_path / "unlisted", architectures=["SomethingNew"]))  # left to vLLM's transformers fallback
    assert len(fake_vllm.built) == 2


def test_vllm_loads_of_one_model_share_one_engine_until_the_last_closes(fake_vllm, tmp_path, monkeypatch):
    from vlgate.evaluators.backends import vllm_offline

    shutdowns = []
    monkeypatch.setattr(vllm_offline, "shutdown_engine", shutdowns.append)
    path = tiny_checkpoint(tmp_path / "ckpt")
    first, second = VllmBackend.load(path, dtype="float32"), VllmBackend.load(path, dtype="float32")
    other_settings = VllmBackend.load(path, dtype="bfloat16")
    assert len(fake_vllm.built) == 2 and first.llm is second.llm is not other_settings.llm
    first.close()
    first.close()  # twice: still one user fewer, not two
    assert shutdowns == [] and second.choice_probs([ChoiceRequest((), "Is it red?", ("Yes", "No"))])[0].sum() == pytest.approx(1.0)
    with pytest.raises(BackendError, match="closed"):
        first.generate([GenerateRequest((), "Describe.", 3)])
    engine = second.llm
    second.close()
    assert shutdowns == [engine]
    later = VllmBackend.load(path, dtype="float32")  # a later load starts a new engine
    assert later.llm is not engine and len(fake_vllm.built) == 3
    later.close()
    other_settings.close()
    assert len(shutdowns) == 3
