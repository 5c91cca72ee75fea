"""The guard around each request (live/faults.py): a server's fault is sent again or ends the
conversation unscored, a hung server stops the run, and the model's own answers pass untouched.

The exceptions are the OpenAI SDK's own, made as it makes them; the end-to-end cases (a fault
proxy in front of a loopback server, whole commands) are in test_faults_live.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx2
import openai
import pytest

from pytest_careful.live import faults
from pytest_careful.live.errors import NotRun, ServerError, ServerHung, ServerStopped
from pytest_careful.live.faults import Retry, ServerGuard

URL = "http://127.0.0.1:9/v1"
REQUEST = httpx2.Request("POST", f"{URL}/completions")


def status(code: int) -> openai.APIStatusError:
    response = httpx2.Response(code, request=REQUEST)
    kind = {500: openai.InternalServerError, 400: openai.BadRequestError, 429: openai.RateLimitError}
    return kind.get(code, openai.APIStatusError)("answered", response=response, body=None)


def sdk_json_error() -> json.JSONDecodeError:
    """What the SDK raises for a 200 whose JSON body is not JSON: a real request to a real server."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Garbled(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = b"<html>502 Bad Gateway</html>"
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Garbled)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", api_key="x", max_retries=0)
    try:
        client.completions.create(model="m", prompt="p", max_tokens=1)
    except json.JSONDecodeError as exc:
        return exc
    finally:
        server.shutdown()
        server.server_close()
    raise AssertionError("the SDK parsed a body that is not JSON")


def completion(text: str = "an answer") -> tuple[Any, float]:
    usage = SimpleNamespace(prompt_tokens=3, completion_tokens=2)
    return SimpleNamespace(choices=[SimpleNamespace(text=text)], usage=usage), 0.1


class Script:
    """A query that raises or returns what it is given, in order; counts its calls."""

    def __init__(self, *steps: BaseException | object) -> None:
        self.steps = list(steps)
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


def guard(alive: Callable[[str | None], bool] | None = None, attempts: int = 5) -> tuple[ServerGuard, list[float]]:
    slept: list[float] = []
    return ServerGuard(Retry(timeout=2.0, attempts=attempts), alive=alive, sleep=slept.append), slept


def send(g: ServerGuard, query: Script, before: Callable[[], None] | None = None) -> Any:
    return g.send(query, before or (lambda: None), None)


def test_a_5xx_a_reset_and_a_garbled_body_are_sent_again_with_backoff_then_the_answer_is_the_models() -> None:
    g, slept = guard(alive=lambda url: True)
    answer = completion()
    query = Script(status(500), openai.APIConnectionError(request=REQUEST), sdk_json_error(), ("not json",), answer)
    assert send(g, query) is answer
    assert query.calls == 5
    assert len(slept) == 4 and slept[0] < slept[-1] <= Retry().max_backoff * 1.25  # backoff grows


def test_a_server_that_keeps_failing_leaves_the_conversation_unscored_naming_the_server() -> None:
    g, _ = guard(alive=lambda url: True, attempts=3)
    query = Script(*(status(503) for _ in range(3)))
    with pytest.raises(ServerError) as raised:
        send(g, query)
    assert query.calls == 3
    assert f"the server at {URL} failed this request 3 times" in str(raised.value)
    assert "HTTP 503" in str(raised.value) and "not the model's answer" in str(raised.value)


@pytest.mark.parametrize(
    "answer",
    [
        ("<html>oops</html>", 0.1),  # a text/html body: the SDK hands back the text
        (SimpleNamespace(choices=None, usage=None), 0.1),  # `{}`
        (SimpleNamespace(choices=[], usage=SimpleNamespace()), 0.1),
        (SimpleNamespace(choices=[SimpleNamespace(text=None, message=None)], usage=SimpleNamespace()), 0.1),
        (SimpleNamespace(choices=[SimpleNamespace(text="x")], usage=None), 0.1),
    ],
    ids=["html", "empty-object", "no-choices", "empty-choice", "no-usage"],
)
def test_an_answer_that_is_no_completion_is_the_servers_fault(answer: tuple[Any, float]) -> None:
    g, _ = guard(attempts=2)
    with pytest.raises(ServerError):
        send(g, Script(answer, answer))


@pytest.mark.parametrize("text", ["", "I cannot help with that.", "<tool_call>\n{not json\n</tool_call>"])
def test_whatever_the_model_said_is_its_answer_even_empty_or_unparsable(text: str) -> None:
    g, slept = guard()
    answer = completion(text)
    assert send(g, Script(answer)) is answer and not slept


@pytest.mark.parametrize("code", [400, 401, 404, 422])
def test_a_4xx_about_the_request_is_raised_at_once_for_bfcl_to_score(code: int) -> None:
    """A prompt past the context length (400) is the model's inference error, as BFCL scores it."""
    g, slept = guard()
    query = Script(status(code))
    with pytest.raises(openai.APIStatusError):
        send(g, query)
    assert query.calls == 1 and not slept


def test_rate_limits_are_not_faults_here() -> None:
    """429 and 529: the pause and the SDK's retries (pacing), then not run (classify)."""
    g, _ = guard()
    for code in (429, 529):
        with pytest.raises(openai.APIStatusError):
            send(g, Script(status(code)))
    assert isinstance(faults.classify(status(429), alive=lambda url: True), NotRun)


def test_a_timeout_is_sent_again_once_then_the_run_stops_naming_the_server() -> None:
    g, slept = guard()
    answer = completion()
    assert send(g, Script(faults.RequestTimedOut(REQUEST, 2.0), answer)) is answer
    query = Script(faults.RequestTimedOut(REQUEST, 2.0), faults.RequestTimedOut(REQUEST, 2.0), answer)
    with pytest.raises(ServerHung) as raised:
        send(g, query)
    assert query.calls == 2 and not slept
    assert isinstance(raised.value, ServerStopped)
    assert f"the server at {URL} did not answer within 2 s, twice (--careful-request-timeout)" in str(raised.value)


def test_a_connection_error_from_a_server_that_is_gone_is_left_to_the_backend() -> None:
    """Not retried here: vLLM fails over or stops the run (live.backends.vllm.client.classify_error); an API stops."""
    g, slept = guard(alive=lambda url: False)
    query = Script(openai.APIConnectionError(request=REQUEST))
    with pytest.raises(openai.APIConnectionError):
        send(g, query)
    assert query.calls == 1 and not slept
    assert isinstance(
        faults.classify(openai.APIConnectionError(request=REQUEST), alive=lambda url: False), ServerStopped
    )
    assert faults.classify(openai.APIConnectionError(request=REQUEST), alive=lambda url: True) is None


def test_nothing_more_is_sent_once_the_run_stopped_even_between_retries() -> None:
    g, _ = guard(alive=lambda url: True)
    stopped = {"now": False}

    def before() -> None:
        if stopped["now"]:
            raise NotRun("not run: the run stopped")
        stopped["now"] = True  # the run stops while the first attempt is out

    query = Script(status(500), completion())
    with pytest.raises(NotRun):
        send(g, query, before)
    assert query.calls == 1


def test_a_json_error_of_bfcls_own_code_is_not_taken_for_the_servers() -> None:
    """Only a JSONDecodeError raised while the SDK read a response is a garbled body."""
    assert faults.server_fault(sdk_json_error()) is not None
    try:
        json.loads("{")
    except json.JSONDecodeError as own:
        assert faults.server_fault(own) is None


def test_the_deadline_bounds_each_attempt_whatever_timeout_the_caller_passed() -> None:
    """BFCL passes timeout=72000; a server that takes the connection and never answers is cut at the bound."""
    import socket

    # Nobody accepts: the kernel completes each connection into the backlog, where it waits unanswered.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    handler = SimpleNamespace(
        client=openai.OpenAI(base_url=url, api_key="x"), careful_pause=_pause(), careful_request_timeout=1.0
    )
    from pytest_careful.live.pacing import share

    share(handler)
    held: list[socket.socket] = []
    try:
        with pytest.raises(faults.RequestTimedOut):  # with timeout=72000 kept, this would wait 20 hours
            handler.client.completions.create(model="m", prompt="p", max_tokens=1, timeout=72000)
        listener.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:  # every connection the client made, each one attempt
                held.append(listener.accept()[0])
    finally:
        listener.close()
        for conn in held:
            conn.close()
    # One attempt: the SDK's own retries would have connected three times.
    assert len(held) == 1


def _pause() -> Any:
    from pytest_careful.live.pacing import Pause

    return Pause()


def test_a_failure_to_set_up_a_conversation_is_ours_tried_again_once_never_the_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building the simulators happens before any request: a failure there (a race seen once in ~2,000
    conversations) is tried again once, then the conversation is unscored, not an inference error."""
    from pytest_careful.data import dataset
    from pytest_careful.evaluation import replay
    from pytest_careful.live import runner
    from pytest_careful.live.errors import SetupFailed

    conversation = dataset.get("multi_turn_base_0")
    handler = SimpleNamespace(model_name_underline_replaced="m")
    real = replay.state_template
    failures = {"left": 1}

    def flaky(conversation: Any) -> bytes:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("dictionary changed size during iteration")
        return real(conversation)

    monkeypatch.setattr(runner, "state_template", flaky)
    assert runner.simulators_for(handler, conversation) is not None  # the second try
    failures["left"] = 2
    with pytest.raises(SetupFailed, match="internal error, not the model's"):
        runner.simulators_for(handler, conversation)


def test_a_connection_error_is_judged_by_the_server_it_was_sent_to() -> None:
    """After a failover a conversation's request may still have gone to the server that died: that one
    is asked, not the process's current one (which answers), so it is not sent again there five times."""
    asked: list[str | None] = []

    def alive(url: str | None) -> bool:
        asked.append(url)
        return url != URL  # the process moved on; the server this request went to is gone

    g, slept = guard(alive=alive)
    with pytest.raises(openai.APIConnectionError):
        send(g, Script(openai.APIConnectionError(request=REQUEST)))
    assert asked == [URL] and not slept
