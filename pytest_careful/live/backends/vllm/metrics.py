"""What a vLLM server's ``/metrics`` says it is doing: requests it runs and queues, tokens it generated.

vLLM (0.32: ``vllm/v1/metrics/loggers.py``) exposes, in Prometheus' text format, the gauges
``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` and the counter
``vllm:generation_tokens`` (written ``vllm:generation_tokens_total``), each labelled by engine
(``engine="0"`` ... under data parallel) and model (``model_name``). The counter grows with every
engine step, so a request that is still generating shows before it is answered: what a
non-streamed request cannot tell its client. The fleet reads the queue (:mod:`.fleet`), the
progress line the generation (:class:`MetricsProbe`).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
GENERATED = "vllm:generation_tokens_total"

#: A progress line is redrawn every second: a server that takes longer to say is skipped this time.
PROBE_TIMEOUT = 0.5

_SAMPLE = re.compile(
    r"^(vllm:num_requests_running|vllm:num_requests_waiting|vllm:generation_tokens_total)(?:\{([^}]*)\})?\s+(\S+)"
)


def sums(metrics: str, model: str) -> dict[str, float]:
    """The three metrics of ``model`` in a server's Prometheus text, each summed over its engines
    (other models' left out); a metric the text does not have is absent."""
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        served = _label(labels or "", "model_name")
        if served is not None and served != model:
            continue
        try:
            found[name] = found.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return found


def _label(labels: str, name: str) -> str | None:
    for part in labels.split(","):
        key, _, value = part.partition("=")
        if key.strip() == name:
            return value.strip().strip('"')
    return None


@dataclass(frozen=True)
class ServerLoad:
    """What the servers say they are doing, all together (``progress.ServerWork``)."""

    running: int  # requests in the engines' batches
    waiting: int  # requests queued
    generated: float  # tokens generated since the servers started (a counter)


class MetricsProbe:
    """Reads the servers' ``/metrics`` when asked (the progress display asks once a second while
    requests are in flight): their load together, or None when one of them does not say now.

    A server that answers ``/metrics`` with a 4xx, or without vLLM's metrics of the model, is not
    asked again (not vLLM, or hidden): the probe then says nothing, and the line is what it was before.
    """

    def __init__(self, urls: Callable[[], Iterable[str]], model: str, timeout: float = PROBE_TIMEOUT) -> None:
        self._urls = urls  # the servers' /v1 URLs (a started server's is known once it runs)
        self.model = model
        self.timeout = timeout
        self._unmetered: set[str] = set()

    def __call__(self) -> ServerLoad | None:
        try:
            urls = [url.rstrip("/") for url in self._urls()]
        except Exception:  # no server (yet, or any more): nothing to say
            return None
        loads = [load for load in map(self._read, urls) if load is not None]
        if not urls or len(loads) < len(urls):  # a server that says nothing: the sum would be wrong
            return None
        return ServerLoad(
            sum(load.running for load in loads),
            sum(load.waiting for load in loads),
            sum(load.generated for load in loads),
        )

    def _read(self, url: str) -> ServerLoad | None:
        if url in self._unmetered:
            return None
        try:
            with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=self.timeout) as response:
                text = response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            if exc.code < 500:  # no /metrics here (not vLLM, or hidden); a 5xx may pass
                self._unmetered.add(url)
            return None
        except (urllib.error.URLError, OSError, ValueError):
            return None  # not answering now (a hung server may not): the line says what it knows
        found = sums(text, self.model)
        if not {RUNNING, WAITING, GENERATED} <= found.keys():
            self._unmetered.add(url)
            return None
        return ServerLoad(int(found[RUNNING]), int(found[WAITING]), found[GENERATED])
