"""What a vLLM server's ``/metrics`` says (``live/backends/vllm/metrics.py``), read from the loopback stand-in.

The stand-in writes vLLM 0.32's names and labels (tests/helpers/loopback_vllm.py); that they are
vLLM's own is checked against the installed engine in tests/live/test_vllm_cpu.py.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request

from loopback_vllm import LoopbackVLLM

from pytest_careful.live.backends.vllm import metrics as vllm_metrics


def _metrics(server: LoopbackVLLM) -> str:
    with urllib.request.urlopen(server.url.removesuffix("/v1") + "/metrics", timeout=5) as response:
        return str(response.read().decode())


def _send(server: LoopbackVLLM) -> threading.Thread:
    body = json.dumps({"model": "m", "prompt": "<|im_start|>user\nhi<|im_end|>\n", "max_tokens": 8}).encode()
    request = urllib.request.Request(f"{server.url}/completions", body, {"content-type": "application/json"})

    def send() -> None:
        with contextlib.suppress(OSError):  # cut short when the server stops (503, a reset)
            urllib.request.urlopen(request, timeout=30).read()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def _wait_running(probe: vllm_metrics.MetricsProbe, requests: int) -> vllm_metrics.ServerLoad:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        load = probe()
        if load is not None and load.running == requests:
            return load
        time.sleep(0.02)
    raise AssertionError(f"never {requests} running")


def test_the_sums_are_the_models_over_its_engines_and_the_counter_is_read_by_its_exposed_name() -> None:
    text = (
        'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 2.0\n'
        'vllm:num_requests_running{engine="0",model_name="other"} 40.0\n'
        'vllm:generation_tokens_total{engine="0",model_name="m"} 300.0\n'
        'vllm:generation_tokens_total{engine="1",model_name="m"} 12.0\n'
        'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e+09\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 9.0\n'
    )
    assert vllm_metrics.sums(text, "m") == {vllm_metrics.RUNNING: 3.0, vllm_metrics.GENERATED: 312.0}


def test_the_probe_reads_a_generating_request_and_its_tokens_before_it_is_answered() -> None:
    with LoopbackVLLM(models=["m"], latency=3.0, token_rate=100.0) as server:
        probe = vllm_metrics.MetricsProbe(lambda: [server.url], "m")
        idle = probe()
        assert idle is not None and (idle.running, idle.waiting, idle.generated) == (0, 0, 0.0)
        request = _send(server)
        first = _wait_running(probe, 1)
        time.sleep(0.3)
        later = probe()
        assert later is not None and later.running == 1 and later.generated > first.generated
        request.join(timeout=10)  # answered after its latency
        done = probe()
    assert done is not None and done.running == 0 and done.generated >= later.generated


def test_two_servers_are_added_up_and_one_that_does_not_say_makes_the_probe_say_nothing() -> None:
    with LoopbackVLLM(models=["m"], latency=3.0) as one, LoopbackVLLM(models=["m"], latency=3.0) as two:
        probe = vllm_metrics.MetricsProbe(lambda: [one.url, two.url], "m")
        requests = [_send(one), _send(two), _send(two)]
        load = _wait_running(probe, 3)
        assert load.running == 3
        with LoopbackVLLM(models=["m"], metrics=False) as hidden:
            partial = vllm_metrics.MetricsProbe(lambda: [one.url, hidden.url], "m")
            assert partial() is None  # 404: not vLLM's metrics, or hidden
            assert 'model_name="m"' in _metrics(one)
        one.stop()
        two.stop()
        for request in requests:
            request.join(timeout=10)


def test_a_server_without_vllms_metrics_is_not_asked_again_and_one_not_answering_is() -> None:
    with LoopbackVLLM(models=["m"], metrics=False) as hidden:
        probe = vllm_metrics.MetricsProbe(lambda: [hidden.url], "m")
        assert probe() is None
        hidden.metrics = True  # it would answer now, but a 404 said it is not vLLM's
        assert probe() is None
    with LoopbackVLLM(models=["other"]) as elsewhere:  # another model's metrics only
        assert vllm_metrics.MetricsProbe(lambda: [elsewhere.url], "m")() is None
    down = vllm_metrics.MetricsProbe(lambda: ["http://127.0.0.1:9/v1"], "m", timeout=0.2)
    assert down() is None and down() is None
    assert vllm_metrics.MetricsProbe(lambda: [], "m")() is None

    def no_server() -> list[str]:
        raise RuntimeError("no vLLM server was started for this session")

    assert vllm_metrics.MetricsProbe(no_server, "m")() is None
