"""The fault-injecting proxy (tests/helpers/fault_proxy.py): each fault must reach a client as the
real one does (the openai SDK's own reaction is what the tests of retries and failure counting rely
on), other requests must pass untouched, and the choice of faulted requests must be exact and
repeatable."""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from fault_proxy import FAULT_KINDS, FaultProxy
from loopback_vllm import LoopbackVLLM

BODY = json.dumps({"model": "m", "prompt": "hi"}).encode()


@pytest.fixture(scope="module")
def upstream() -> Iterator[LoopbackVLLM]:
    with LoopbackVLLM(latency=0.0, models=["m"], lifetime=120.0) as server:
        yield server


@pytest.fixture
def proxy(upstream: LoopbackVLLM) -> Iterator[FaultProxy]:
    """A proxy with no faults yet (tests set the knobs), stopped after each test."""
    with FaultProxy(upstream.url, lifetime=60.0) as running:
        yield running


def _client(proxy: FaultProxy, timeout: float = 5.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url, api_key="unused", max_retries=0, timeout=timeout)


def _complete(client: openai.OpenAI) -> Any:
    return client.completions.create(model="m", prompt="hi")


def _post(port: int, path: str = "/v1/completions") -> tuple[int, bytes]:
    """One raw model request, its own connection (a fault may close it): status and body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", path, BODY, {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


# ---------------------------------------------------------------- passing through


def test_without_faults_answers_are_the_upstreams(proxy: FaultProxy, upstream: LoopbackVLLM) -> None:
    direct = openai.OpenAI(base_url=upstream.url, api_key="unused", max_retries=0)
    via = _client(proxy)
    assert proxy.url == f"http://127.0.0.1:{proxy.port}/v1"
    assert _complete(via).choices[0].text == _complete(direct).choices[0].text
    chat = via.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.role == "assistant"
    assert via.responses.create(model="m", input="hi").output
    assert proxy.stats() == {
        "model_requests": 3,
        "forwarded": 3,
        "faults": {},
        "other_requests": 0,
        "hanging_now": 0,
    }
    assert [(r.number, r.path, r.fault, r.status, r.forwarded) for r in proxy.records] == [
        (1, "/v1/completions", None, 200, True),
        (2, "/v1/chat/completions", None, 200, True),
        (3, "/v1/responses", None, 200, True),
    ]


def test_other_requests_pass_while_every_model_request_fails(proxy: FaultProxy) -> None:
    proxy.faults = {"status": 1.0}
    client = _client(proxy)
    assert [model.id for model in client.models.list()] == ["m"]  # the client's health check
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.port}/version", timeout=5) as response:
        assert "loopback" in json.loads(response.read())["version"]
    with pytest.raises(urllib.error.HTTPError) as missing:  # the upstream's 404, passed on
        urllib.request.urlopen(f"{proxy.url}/nowhere", timeout=5)
    missing.value.close()  # it holds the response's socket open until collected otherwise
    assert missing.value.code == 404
    for create in (
        lambda: _complete(client),
        lambda: client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]),
        lambda: client.responses.create(model="m", input="hi"),
    ):
        with pytest.raises(openai.InternalServerError):
            create()
    stats = proxy.stats()
    assert stats["other_requests"] == 3 and stats["model_requests"] == 3 and stats["faults"] == {"status": 3}


# ---------------------------------------------------------------- what the client sees of each fault


def test_status_is_an_internal_server_error_with_the_error_body(proxy: FaultProxy) -> None:
    proxy.faults = {"status": 1.0}
    with pytest.raises(openai.InternalServerError) as caught:
        _complete(_client(proxy))
    assert caught.value.status_code == 500 and caught.value.body == {
        "message": "injected fault: HTTP 500",
        "type": "server_error",
    }
    proxy.status = 503
    status, body = _post(proxy.port)
    assert status == 503 and json.loads(body)["error"]["type"] == "server_error"


def test_not_json_fails_to_decode_in_the_sdk(proxy: FaultProxy) -> None:
    proxy.faults = {"not_json": 1.0}
    with pytest.raises(json.JSONDecodeError):  # not an openai.APIError: the SDK lets it through
        _complete(_client(proxy))


def test_html_comes_back_from_the_sdk_as_text(proxy: FaultProxy) -> None:
    proxy.faults = {"html": 1.0}
    answer = _complete(_client(proxy))
    assert isinstance(answer, str) and "502 Bad Gateway" in answer  # no exception at all


def test_empty_json_is_a_completion_without_choices(proxy: FaultProxy) -> None:
    proxy.faults = {"empty_json": 1.0}
    answer = _complete(_client(proxy))
    assert isinstance(answer, openai.types.Completion) and answer.choices is None  # not validated


def test_truncated_is_a_connection_error(proxy: FaultProxy) -> None:
    proxy.faults = {"truncated": 1.0}
    with pytest.raises(openai.APIConnectionError):
        _complete(_client(proxy))
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    conn.request("POST", "/v1/completions", BODY, {"content-type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200  # the status line and headers arrive whole
    with pytest.raises(http.client.IncompleteRead) as caught:
        response.read()
    conn.close()
    declared = int(response.getheader("content-length") or 0)
    assert len(caught.value.partial) == declared // 2 and declared > 0
    assert [r.status for r in proxy.records] == [200, 200] and proxy.stats()["forwarded"] == 0


def test_reset_is_a_connection_error_and_a_reset_on_the_wire(proxy: FaultProxy) -> None:
    proxy.faults = {"reset": 1.0}
    with pytest.raises(openai.APIConnectionError):
        _complete(_client(proxy))
    with pytest.raises(ConnectionResetError):  # RST, not FIN (which would be RemoteDisconnected)
        _post(proxy.port)
    raw = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    with raw, pytest.raises(ConnectionResetError):
        raw.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
        raw.recv(1024)
    assert [r.status for r in proxy.records] == [None, None, None]


def test_hang_times_out_and_a_released_request_is_answered(proxy: FaultProxy) -> None:
    proxy.faults = {"hang": 1.0}
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        _complete(_client(proxy, timeout=1.0))
    # The client's timeout is kept: never early (a loaded machine answers late; only a hang takes 60 s).
    assert 1.0 <= time.monotonic() - started < 60.0
    assert proxy.stats()["hanging_now"] == 1  # the proxy still holds it: the client left, unseen
    answers: list[Any] = []
    threading.Thread(target=lambda: answers.append(_complete(_client(proxy))), daemon=True).start()
    assert _wait_for(lambda: proxy.stats()["hanging_now"] == 2)
    proxy.release()
    assert _wait_for(lambda: bool(answers)) and answers[0].choices[0].text
    assert _wait_for(lambda: all(r.answered is not None for r in proxy.records))
    first, second = proxy.records
    assert proxy.stats()["hanging_now"] == 0 and proxy.stats()["faults"] == {"hang": 2}
    assert second.status == 200 and second.forwarded
    # The first one's client had gone: whether its answer still went out depends on when its RST came.
    assert first.status in (200, None)


def _collecting(errors: list[BaseException]) -> Callable[[openai.OpenAI], None]:
    """A request that keeps the API error it meets in ``errors`` (run on a thread)."""

    def request(client: openai.OpenAI) -> None:
        try:
            _complete(client)
        except openai.APIError as error:
            errors.append(error)

    return request


def test_the_hang_knob_holds_every_new_request_and_stop_closes_them(upstream: LoopbackVLLM) -> None:
    errors: list[BaseException] = []
    request = _collecting(errors)

    with FaultProxy(upstream.url, lifetime=60.0) as proxy:
        proxy.hang = True
        client = _client(proxy)
        threads = [threading.Thread(target=request, args=(client,), daemon=True) for _ in range(3)]
        for thread in threads:
            thread.start()
        assert _wait_for(lambda: proxy.stats()["hanging_now"] == 3)
        started = time.monotonic()
    # stop() does not wait for them: they would be held until the proxy's lifetime, 60 s, ran out.
    assert time.monotonic() - started < 30.0
    for thread in threads:
        thread.join(timeout=5)
    assert len(errors) == 3 and all(isinstance(e, openai.APIConnectionError) for e in errors)
    assert all(r.fault == "hang" and r.status is None and not r.forwarded for r in proxy.records)


def test_after_a_release_new_requests_hang_again(proxy: FaultProxy) -> None:
    proxy.hang = True
    proxy.release()  # nothing held yet: it covers nothing later
    client = _client(proxy, timeout=0.5)
    with pytest.raises(openai.APITimeoutError):
        _complete(client)
    proxy.hang = False
    assert _complete(client).choices[0].text
    assert [r.fault for r in proxy.records] == ["hang", None]


# ---------------------------------------------------------------- which requests get faults


def _fault_sequence(upstream: LoopbackVLLM, seed: int, count: int) -> tuple[list[str | None], list[int]]:
    faults = {"status": 0.2, "empty_json": 0.1}
    with FaultProxy(upstream.url, faults=faults, seed=seed, lifetime=60.0) as proxy:
        statuses = [_post(proxy.port)[0] for _ in range(count)]
        records = proxy.records
    return [r.fault for r in records], statuses


def test_a_seeded_rate_repeats_and_keeps_its_proportions(upstream: LoopbackVLLM) -> None:
    first, statuses = _fault_sequence(upstream, seed=7, count=200)
    again, _ = _fault_sequence(upstream, seed=7, count=200)
    other, _ = _fault_sequence(upstream, seed=8, count=200)
    assert first == again and first != other
    rng = random.Random(7)  # the documented rule: first kind whose cumulative probability exceeds the draw
    assert first == [
        "status" if draw < 0.2 else "empty_json" if draw < 0.3 else None for draw in (rng.random() for _ in range(200))
    ]
    assert 40 - 23 <= first.count("status") <= 40 + 23  # 200 x 0.2, within 4 standard deviations
    assert 20 - 17 <= first.count("empty_json") <= 20 + 17
    assert statuses.count(500) == first.count("status") and statuses.count(200) == 200 - first.count("status")


def test_only_faults_exactly_those_requests(proxy: FaultProxy) -> None:
    proxy.faults = {"status": 0.0}  # probabilities are ignored once `only` is set
    proxy.only = [2, 4]
    assert [_post(proxy.port)[0] for _ in range(5)] == [200, 500, 200, 500, 200]
    proxy.faults, proxy.only = {"empty_json": 1.0, "status": 0.0}, {6}
    assert [_post(proxy.port)[1] == b"{}" for _ in range(2)] == [True, False]
    proxy.only = None  # back to the rate: every request
    assert _post(proxy.port)[1] == b"{}"
    assert proxy.stats() == {
        "model_requests": 8,
        "forwarded": 4,
        "faults": {"status": 2, "empty_json": 2},
        "other_requests": 0,
        "hanging_now": 0,
    }


def test_stats_count_each_kind(proxy: FaultProxy) -> None:
    kinds = ["status", "not_json", "html", "empty_json", "truncated", "reset"]
    for number, kind in enumerate(kinds, start=1):
        proxy.faults, proxy.only = {kind: 1.0}, {number}
        try:
            _post(proxy.port)
        except (ConnectionError, http.client.HTTPException):  # reset, truncated
            pass
    proxy.only = None
    proxy.faults = {}
    _post(proxy.port)
    with urllib.request.urlopen(f"{proxy.url}/models", timeout=5):
        pass
    assert proxy.stats() == {
        "model_requests": 7,
        "forwarded": 1,
        "faults": dict.fromkeys(kinds, 1),
        "other_requests": 1,
        "hanging_now": 0,
    }
    records = proxy.records
    assert [r.fault for r in records] == [*kinds, None]
    assert [r.status for r in records] == [500, 200, 200, 200, 200, None, 200]
    assert all(r.answered is not None and r.answered >= r.received for r in records)


# ---------------------------------------------------------------- the proxy itself


def test_bad_knobs_are_refused(upstream: LoopbackVLLM) -> None:
    with pytest.raises(ValueError, match="unknown fault"):
        FaultProxy(upstream.url, faults={"slow": 0.5})
    with pytest.raises(ValueError, match="add up"):
        FaultProxy(upstream.url, faults={"status": 0.6, "reset": 0.6})
    with pytest.raises(ValueError, match="http"):
        FaultProxy("127.0.0.1:8000")
    assert set(FAULT_KINDS) == {"status", "not_json", "html", "empty_json", "truncated", "reset", "hang"}


def test_an_unreachable_upstream_is_a_bad_gateway() -> None:
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with FaultProxy(f"http://127.0.0.1:{port}/v1", lifetime=60.0) as proxy:
        with pytest.raises(openai.APIStatusError) as caught:
            _complete(_client(proxy))
    assert caught.value.status_code == 502 and proxy.stats()["forwarded"] == 0


def test_the_lifetime_bounds_the_proxy(upstream: LoopbackVLLM) -> None:
    proxy = FaultProxy(upstream.url, lifetime=0.2).start()
    assert _post(proxy.port)[0] == 200
    time.sleep(0.5)
    with pytest.raises(ConnectionRefusedError):
        _post(proxy.port)


def test_a_chunked_request_body_is_read_whole_and_forwarded(proxy: FaultProxy) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    # An iterable body without a length goes out chunked (http.client's encode_chunked).
    conn.request("POST", "/v1/completions", iter([BODY[:7], BODY[7:]]), {"content-type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    assert response.status == 200 and answer["model"] == "m" and answer["choices"][0]["text"]


def test_stop_cuts_an_exchange_with_a_hung_upstream() -> None:
    errors: list[BaseException] = []
    request = _collecting(errors)

    with LoopbackVLLM(latency=0.0, models=["m"], hang_from=1, lifetime=60.0) as hung:
        with FaultProxy(hung.url, lifetime=60.0) as proxy:
            thread = threading.Thread(target=request, args=(_client(proxy, timeout=10.0),), daemon=True)
            thread.start()
            assert _wait_for(lambda: hung.stats()["in_flight_now"] == 1)
        thread.join(timeout=3)  # well before the client's own 10 s timeout
        hung.release()
    assert not thread.is_alive() and len(errors) == 1 and isinstance(errors[0], openai.APIConnectionError)
    assert proxy.records[0].status is None  # the upstream's answer never came
