"""A decoder for input that already is decoded: each step a list of call strings.

Used for reference trajectories, generated trajectories and scripted models.
"""

from __future__ import annotations


class PassthroughHandler:
    is_fc_model = True

    def decode_execute(self, result: object, has_tool_call_tag: bool = False) -> list[str]:
        if not isinstance(result, list) or not all(isinstance(c, str) for c in result):
            raise ValueError("a step must be a list of call strings")
        return list(result)
