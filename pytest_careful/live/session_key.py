"""One session key per conversation and repeat, on every request to an OpenAI-compatible server.

Past one machine, users put a router in front of their vLLM servers (vllm-router's
``consistent_hash`` policy, the production stack's ``session`` routing, Ray Serve's
``ConsistentHashRouter``, llm-d's ``session-id-producer``). Such a router keeps a conversation
where its prefix cache is only if every request of the conversation carries the same key, in a
header it is told the name of (``--careful-session-header``, ``x-session-id`` by default).

The key is ``<run>:<condition>:<conversation id>:<repeat>``, where ``<run>`` is the first 12 hex
digits of the sha256 of the output folder's absolute path and the model's result folder name
(:func:`run_digest`): a rerun of the same command (a resume) sends each conversation the key it
had, and runs into other folders, or of other models, send other keys. It names no path.

Each conversation's copy of the handler gets its own view of the OpenAI client
(:meth:`SessionKeys.tag`: ``with_options(default_headers=...)``, which keeps the client's
connection pool, its rate-limit pause and each attempt's deadline, ``pacing.share``), so the
conversations in flight on a process's threads never touch a shared client's headers. Every
attempt of a request sends the key: the SDK's own retries (the same request options), the fault
guard's (``faults.ServerGuard``, the same client), and a fleet's failover, which runs the
conversation again from its start on another server, its new copy tagged with the same key.

Requests made with another SDK carry none: Claude's (the Anthropic SDK), and an API handler's
whose client is not the OpenAI SDK's; a scripted model sends no request at all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import openai

from .handler import Handler
from .pacing import cap_max_tokens
from .provenance import SessionProvenance

#: How a key is made, in the provenance's words.
MADE_OF = (
    "<run>:<condition>:<conversation id>:<repeat>; <run>: the first 12 hex digits of the sha256 "
    "of the output folder's absolute path and the model's result folder name"
)


def run_digest(output: Path, result_name: str) -> str:
    """The ``<run>`` part of every key: the same for every process and every rerun of one command."""
    made = f"{Path(output).resolve()}\0{result_name}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(made).hexdigest()[:12]


def speaks_openai(handler: Handler) -> bool:
    """Whether the handler's requests go through the OpenAI SDK (vLLM's, OpenAI-compatible handlers')."""
    return isinstance(getattr(handler, "client", None), openai.OpenAI)


@dataclass(frozen=True)
class SessionKeys:
    """The run's session keys: ``header`` names the header, ``run`` is :func:`run_digest`'s."""

    header: str
    run: str

    def key(self, condition: str, conversation_id: str, repeat: int = 1) -> str:
        """The key every request of one conversation (of one repeat) sends."""
        return f"{self.run}:{condition}:{conversation_id}:{repeat}"

    def tag(self, handler: Handler, key: str) -> None:
        """Point the conversation's copy of the handler at a view of its client that sends ``key``;
        a handler whose client is not the OpenAI SDK's is left as it is."""
        client = getattr(handler, "client", None)
        if not isinstance(client, openai.OpenAI):
            return
        tagged = client.with_options(default_headers={self.header: key})
        cap: int | None = getattr(handler, "careful_max_tokens", None)
        if cap is not None:  # the cap sits on the client's own resources, which the view builds anew
            cap_max_tokens(tagged, cap)
        handler.client = tagged

    def provenance(self, condition: str, keys: Iterable[tuple[str, int]]) -> SessionProvenance:
        """What the scorecard of ``condition`` records; ``keys``: its (conversation id, repeat)s."""
        named = {
            cid if repeat == 1 else f"{cid}@repeat-{repeat}": self.key(condition, cid, repeat) for cid, repeat in keys
        }
        return {"header": self.header, "made_of": MADE_OF, "run": self.run, "keys": dict(sorted(named.items()))}
