"""Chat templates rendered in a limited child process: the same text as transformers
renders in process, and a template that loops, eats memory or writes too much is stopped
with an error naming the model, instead of hanging or exhausting the evaluating process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from transformers import AutoProcessor, AutoTokenizer

from vlgate.evaluators.backends.chat_templates import ChatTemplateRenderer, RenderingChild, TemplateLimitError, TemplateRenderError, template_variables

REPO = Path(__file__).parents[1]
CHECKPOINTS = REPO / "evaluators" / "world" / "shipped" / "checkpoints"

#: Templates in the styles checkpoints ship (special tokens, namespaces, loop variables,
#: filters, raise_exception), to compare with transformers' own rendering.
TEMPLATES = {
    "llama-3 style": (
        "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
        "{% if message['content'] is string %}{{ message['content'] | trim }}{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}<|image|>{% else %}{{ part['text'] | trim }}{% endif %}{% endfor %}{% endif %}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    ),
    "qwen2-vl style": (
        "{% set image_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
        "{% for content in message['content'] %}{% if content['type'] == 'image' %}{% set image_count.value = image_count.value + 1 %}"
        "Picture {{ image_count.value }}: <|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
        "{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "strict roles": (
        "{% for message in messages %}{% if message['role'] not in ['user', 'assistant'] %}{{ raise_exception('bad role') }}{% endif %}"
        "{{ message['content'] | tojson }}{{ eos_token }}{% endfor %}"
    ),
}

PROMPTS = ["What colour is the circle?\nA. red\nB. blue\nAnswer with the option's letter.", "  spaced   and\ttabbed  ", 'quotes "and" <tags> & {{ braces }}']


def conversation(prompt: str, images: int) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image"} for _ in range(images)] + [{"type": "text", "text": prompt}]}]


@pytest.fixture(scope="module")
def processor():
    return AutoProcessor.from_pretrained(CHECKPOINTS / "vlm-steps10000")


@pytest.mark.parametrize("style", [None, *TEMPLATES])
def test_the_child_renders_what_transformers_renders(processor, style):
    template = processor.chat_template if style is None else TEMPLATES[style]
    renderer = ChatTemplateRenderer("world-vlm", template, template_variables(processor.tokenizer))
    try:
        for prompt in PROMPTS:
            for images in (0, 1, 2):
                messages = conversation(prompt, images)
                expected = processor.apply_chat_template(messages, chat_template=template, add_generation_prompt=True, tokenize=False)
                assert renderer.render(messages) == expected
    finally:
        renderer.close()


def test_a_text_only_tokenizers_template_is_rendered_as_transformers_does():
    tokenizer = AutoTokenizer.from_pretrained(CHECKPOINTS / "llm-agent")
    renderer = ChatTemplateRenderer("llm-agent", tokenizer.chat_template, template_variables(tokenizer))
    try:
        for prompt in PROMPTS:
            messages = [{"role": "user", "content": prompt}]
            assert renderer.render(messages) == tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    finally:
        renderer.close()


def test_a_template_that_raises_is_a_render_error_and_the_renderer_goes_on():
    renderer = ChatTemplateRenderer("m", TEMPLATES["strict roles"], {"eos_token": "</s>"})
    try:
        with pytest.raises(TemplateRenderError, match="bad role"):
            renderer.render([{"role": "system", "content": "x"}])
        assert renderer.render([{"role": "user", "content": "x"}]) == '"x"</s>'
    finally:
        renderer.close()


#: Loops (three nested ranges: 10^15 steps) only when the text asks for it, so the same
#: renderer shows both the stop and the recovery.
LOOPING = (
    "{% for message in messages %}{% if 'loop' in message['content'] %}{% for a in range(100000) %}{% for b in range(100000) %}"
    "{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}{% endif %}{{ message['content'] }}{% endfor %}"
)


def test_a_template_that_loops_is_stopped_at_its_time_limit_and_the_next_render_works():
    renderer = ChatTemplateRenderer("looping-vlm", LOOPING, {}, timeout_s=1.0)
    try:
        assert renderer.render([{"role": "user", "content": "warm"}]) == "warm"  # the child is up
        started = time.monotonic()
        with pytest.raises(TemplateLimitError, match=r"looping-vlm: its chat template did not finish within 1 s"):
            renderer.render([{"role": "user", "content": "please loop"}])
        assert time.monotonic() - started < 5
        assert renderer.render([{"role": "user", "content": "fine"}]) == "fine"  # a new child
    finally:
        renderer.close()


def test_every_template_of_the_process_is_rendered_by_one_child_which_outlives_a_closed_one_and_a_stopped_render():
    """One child per memory limit, started once: each template in it renders what it
    renders alone; a closed renderer's template is dropped; a render stopped at its time
    limit takes the child down, and the next render of another template starts one and
    defines its template there again."""
    llama, strict = (ChatTemplateRenderer(name, TEMPLATES[style], {"bos_token": "<s>", "eos_token": "</s>"}, memory_mb=200) for name, style in (("a", "llama-3 style"), ("b", "strict roles")))
    looping = ChatTemplateRenderer("looping-vlm", LOOPING, {}, timeout_s=1.0, memory_mb=200)
    child = RenderingChild.for_limit(200)
    messages = conversation(PROMPTS[0], 1)
    try:
        expected = {renderer.model: renderer.render(messages) for renderer in (llama, strict)}
        first = child.pid
        assert first is not None and expected["a"].startswith("<s><|start_header_id|>user") and expected["b"].endswith("</s>")
        assert looping.render([{"role": "user", "content": "warm"}]) == "warm" and child.pid == first  # the same process
        strict.close()
        assert child.pid == first and llama.render(messages) == expected["a"]
        assert child.defined == {llama.template_id, looping.template_id}
        with pytest.raises(TemplateLimitError, match="did not finish within 1 s"):
            looping.render([{"role": "user", "content": "please loop"}])
        assert child.pid is None
        assert llama.render(messages) == expected["a"] and child.pid not in (None, first)  # started again, the template defined again
        assert child.defined == {llama.template_id}
    finally:
        for renderer in (llama, strict, looping):
            renderer.close()
        child.stop()


def test_a_template_that_builds_a_huge_string_is_stopped_at_its_memory_limit():
    renderer = ChatTemplateRenderer("greedy-vlm", "{{ 'x' * 4000000000 }}", {}, memory_mb=64)
    try:
        with pytest.raises(TemplateLimitError, match="greedy-vlm: its chat template needed more than 64 MB"):
            renderer.render([{"role": "user", "content": "x"}])
    finally:
        renderer.close()


def test_a_rendered_text_over_the_size_limit_is_refused():
    renderer = ChatTemplateRenderer("verbose-vlm", "{% for i in range(20000) %}{{ 'x' * 100 }}{% endfor %}", {}, max_chars=1_000_000)
    try:
        with pytest.raises(TemplateLimitError, match="verbose-vlm: its chat template rendered 2,000,000 characters"):
            renderer.render([{"role": "user", "content": "x"}])
    finally:
        renderer.close()


@pytest.mark.world
def test_vlgate_evaluate_on_a_checkpoint_whose_template_loops_reports_it_and_stops(tmp_path):
    """As an attacker would publish it: the world's VLM with a looping chat template. The
    evaluation ends within the suite's limit with the template named, instead of hanging."""
    checkpoint = tmp_path / "vlm-looping"
    shutil.copytree(CHECKPOINTS / "vlm-steps10000", checkpoint)
    (checkpoint / "chat_template.jinja").write_text(LOOPING.replace("'loop' in message['content']", "true"))
    suite = tmp_path / "suite.yaml"
    mc = REPO / "evaluators" / "examples" / "data" / "mc"
    suite.write_text(yaml.safe_dump({"name": "looping", "policy": {"chat_template_timeout_s": 2}, "evaluators": {"lcm-mc": {"data": str(mc), "protocol": "vlgate"}}}))
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "vlgate.cli.main", "evaluate", "--model", str(checkpoint), "--suite", str(suite), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    # the 2 s limit counts from the rendering process's start, not before it (its imports may take up to a minute)
    assert time.monotonic() - started < 60
    assert run.returncode != 0
    assert "did not finish within 2 s" in run.stderr + run.stdout
    summary = tmp_path / "out" / "summary.json"
    if summary.is_file():
        assert "did not finish within 2 s" in json.dumps(json.loads(summary.read_text()))
