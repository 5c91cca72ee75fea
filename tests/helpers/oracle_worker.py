"""Runs bfcl-eval's own multi-turn evaluation (the oracle) in a child process.

bfcl-eval's checker and several decoders ``eval`` their input, so the tests run
it apart from the code under test, only on inputs the tests generated or on the
shared real run. Reads JSON lines ``{"id", "result", "decoder", "model_name"}``
from stdin; writes one JSON line per case: BFCL's verdict and what its decoder
produced. ``decoder`` is a registry key, or ``"passthrough"`` for test inputs
that are already call strings.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


class Passthrough:
    """Decoder for generated inputs: each step already is a list of call strings."""

    is_fc_model = True

    def decode_execute(self, result, has_tool_call_tag=False):
        if not isinstance(result, list):
            raise ValueError("not a list of calls")
        return result


def main() -> None:
    os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="oracle-"))
    # bfcl-eval's OpenAI handlers refuse to construct without a key, even to decode.
    os.environ.setdefault("OPENAI_API_KEY", "unused-by-the-oracle")
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    prompts, answers, handlers = {}, {}, {}
    for n, line in enumerate(sys.stdin):
        case = json.loads(line)
        category = case["id"].rsplit("_", 1)[0]
        if category not in prompts:
            entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
            prompts[category] = {e["id"]: e for e in entries}
            answers[category] = {e["id"]: a for e, a in zip(entries, load_ground_truth_entry(category))}
        key = case["decoder"]
        if key not in handlers:
            handlers[key] = Passthrough() if key == "passthrough" else eval_runner.get_handler(key)
        handler = handlers[key]
        decoded = None
        if isinstance(case["result"], list):
            decoded = []
            for turn in case["result"]:
                steps = []
                for item in turn:
                    try:
                        out = handler.decode_execute(item, has_tool_call_tag=False)
                    except Exception:
                        continue
                    if not multi_turn_utils.is_empty_execute_response(out):
                        steps.append(out)
                decoded.append(steps)
        # A unique model name per case: bfcl keeps instances in module globals
        # keyed by model and id, so a repeated name would reuse stale state.
        model_name = f"{case.get('model_name', 'oracle')}_{n}"
        verdict = eval_runner._evaluate_single_multi_turn_entry(
            handler,
            case["id"],
            case["result"],
            answers[category][case["id"]]["ground_truth"],
            json.loads(json.dumps(prompts[category][case["id"]])),
            model_name,
            category,
        )
        for name in [g for g in vars(multi_turn_utils) if g.startswith(model_name)]:
            delattr(multi_turn_utils, name)
        error = verdict.get("error", {})
        print(
            json.dumps(
                {
                    "id": case["id"],
                    "valid": verdict["valid"],
                    "error_type": error.get("error_type", "") if isinstance(error, dict) else "",
                    "decoded": decoded,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
