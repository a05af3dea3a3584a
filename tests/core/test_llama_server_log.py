"""Reading llama-cpp-python's verbose log, and the strict template (no server needed)."""

from __future__ import annotations

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from core.bench.fakes.llama_server import (
    STRICT_SYSTEM_ERROR,
    PromptEval,
    parse_prompt_evals,
    strict_template,
)

# Lines as llama-cpp-python 0.3.36 prints them (abridged; the timings vary).
LOG = """\
llama_context: n_ctx                 = 2048
INFO:     Uvicorn running on http://127.0.0.1:18080 (Press CTRL+C to quit)
llama_perf_context_print:        load time =     140.53 ms
llama_perf_context_print: prompt eval time =       0.07 ms /    28 tokens (    0.00 ms per token)
llama_perf_context_print:        eval time =     635.51 ms /    39 runs   (   16.30 ms per token)
llama_perf_context_print:       total time =     896.46 ms /    67 tokens
Llama.generate: 1039 prefix-match hit, remaining 19 prompt tokens to eval
llama_perf_context_print: prompt eval time =     122.10 ms /    19 tokens (    6.43 ms per token)
llama_perf_context_print:        eval time =     380.04 ms /    19 runs   (   20.00 ms per token)
Llama.generate: 5 prefix-match found but partial kv removal not supported, re-evaluating full prompt
llama_perf_context_print: prompt eval time =    6111.96 ms /  1015 tokens (    6.02 ms per token)
Llama.generate: 27 prefix-match hit, remaining 1 prompt tokens to eval
llama_perf_context_print: prompt eval time =       0.00 ms /     1 tokens (    0.00 ms per token)
"""

# SmolLM2-135M-Instruct's own template (the GGUF's tokenizer.chat_template).
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_each_completion_counts_its_cached_and_evaluated_prompt_tokens() -> None:
    assert parse_prompt_evals(LOG) == [
        PromptEval(cached=0, evaluated=28),  # the first request after start: nothing cached
        PromptEval(cached=1039, evaluated=19),
        PromptEval(cached=0, evaluated=1015),  # a prefix found but not reusable
        PromptEval(cached=27, evaluated=1),
    ]
    assert parse_prompt_evals(LOG)[1].prompt == 1058


def render(template: str, messages: list[dict[str, str]]) -> str:
    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment()
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


def test_the_strict_template_refuses_only_a_system_message_after_the_first() -> None:
    strict = strict_template(SMOLLM2_TEMPLATE)
    leading = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render(strict, leading) == render(SMOLLM2_TEMPLATE, leading)
    late = [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Be brief."}]
    assert "<|im_start|>system\nBe brief." in render(SMOLLM2_TEMPLATE, late)
    with pytest.raises(jinja2.exceptions.TemplateError, match=STRICT_SYSTEM_ERROR):
        render(strict, late)


def test_a_template_without_a_message_loop_is_not_silently_left_lenient() -> None:
    with pytest.raises(ValueError, match="loop"):
        strict_template("{{ messages[0]['content'] }}")
