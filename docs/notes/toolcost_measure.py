"""What tool schemas cost on llama-cpp-python's chatml-function-calling, as Mnemo learns it.

Run from the repository (needs the `real` extra and a request captured from Mnemo, a JSON
file with `messages` and `tools`, e.g. from the fake server's `requests`):

    PYTHONPATH=$PWD .venv/bin/python docs/notes/toolcost_measure.py request.json

Each step grows a history, offers 1, 3 or all tools in turn (two system messages at steps
5 and 9), prints the server's `usage.prompt_tokens` beside Mnemo's estimate before learning
from it, and main's (no preamble, no repetition); then calibrates on the answer.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from core.bench.fakes.llama_server import llama_server, smollm2_gguf
from core.model.calibration import calibrate_request, estimator_for
from core.model.profile import load_profile
from core.model.tokens import TokenEstimator, ToolCost
from tests.conftest import make_config
from tests.core.support import light_runtime

FILLER = "Tell me about the weather in the mountains and what to pack for a long walk. "
MAIN = TokenEstimator(4.0, ToolCost(fixed=0.0))


def prompt_tokens(base_url: str, messages: list[dict[str, Any]], tools: list[Any]) -> int:
    choice = {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
    body = {"model": "smollm2", "messages": messages, "max_tokens": 4, "tools": tools}
    response = httpx.post(
        f"{base_url}/chat/completions", json=body | {"tool_choice": choice}, timeout=900
    )
    response.raise_for_status()
    return int(response.json()["usage"]["prompt_tokens"])


def main(request_path: str) -> None:
    request = json.loads(Path(request_path).read_text())
    tools = request["tools"]
    subsets = [tools[:1], tools[:3], tools]
    work = Path(tempfile.mkdtemp())
    with llama_server(
        smollm2_gguf(), work / "logs", n_ctx=4096, chat_format="chatml-function-calling"
    ) as server:
        config = make_config(work / "data", server.base_url)
        config.llm.model = "smollm2"
        runtime = light_runtime(config)
        history: list[dict[str, Any]] = []
        print("step tools systems real estimate err% main main-err%")
        for step in range(12):
            history += [
                {"role": "user", "content": FILLER * (1 + step % 3)},
                {"role": "assistant", "content": "Pack layers. " * (2 + step)},
            ]
            late = [{"role": "system", "content": "Context: the user likes hiking."}]
            extra = late if step in (5, 9) else []
            messages = [request["messages"][0], *history, *extra, request["messages"][1]]
            offered = subsets[step % 3]
            estimate = estimator_for(runtime.store, config, "smollm2").request(messages, offered)
            real = prompt_tokens(server.base_url, messages, offered)
            old = MAIN.request(messages, offered)
            systems = 2 if extra else 1
            print(step, len(offered), systems, real, estimate,
                  round(100 * (estimate - real) / real, 1), old,
                  round(100 * (old - real) / real, 1), flush=True)  # fmt: skip
            calibrate_request(runtime.store, config, "smollm2", messages, offered, real)
        print("learned", load_profile(runtime.store, "smollm2").facts())
        runtime.close()


if __name__ == "__main__":
    main(sys.argv[1])
