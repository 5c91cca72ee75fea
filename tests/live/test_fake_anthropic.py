"""The fake Anthropic server, exercised through the real ``anthropic`` SDK.

Nothing in the SDK is mocked: each test builds ``anthropic.Anthropic`` with
``base_url`` pointing at a loopback ``FakeAnthropic`` so the SDK's own
request building, retry loop and response parsing run for real.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import TextBlock, ToolUseBlock
from fake_anthropic import (
    CREDIT_EXHAUSTED_MESSAGE,
    FakeAnthropic,
    text_block,
    tool_use_block,
)

MODEL = "claude-fake-1"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def ask(client: anthropic.Anthropic, **kwargs: Any) -> anthropic.types.Message:
    """One non-streaming call with small defaults the tests can override."""
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": USER,
        **kwargs,
    }
    message: anthropic.types.Message = client.messages.create(**params)
    return message


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(lambda body: [text_block("Sunny, 21 °C.")]) as fake:
        yield fake


def client_for(server: FakeAnthropic, max_retries: int = 2) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=max_retries)


# ----------------------------------------------------------------- replies


def test_text_reply_is_parsed_and_request_recorded(server: FakeAnthropic) -> None:
    message = ask(client_for(server))

    assert message.type == "message" and message.role == "assistant"
    assert message.model == MODEL
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert isinstance(message.content[0], TextBlock)
    assert message.content[0].text == "Sunny, 21 °C."
    assert message.usage.output_tokens > 0
    assert message.usage.cache_read_input_tokens == 0

    (request,) = server.requests
    assert request.path == "/v1/messages"
    assert request.api_key == "test"
    assert request.anthropic_version  # the SDK always pins an API version
    assert request.anthropic_beta is None
    assert request.body is not None and request.body["messages"] == USER
    assert not request.has_temperature
    assert (server.requests_served, server.requests_failed) == (1, 0)


def test_tool_use_reply_becomes_sdk_tool_use_block() -> None:
    def responder(body: dict[str, Any]) -> list[dict[str, Any]]:
        assert body["tools"][0]["name"] == "get_weather"
        return [
            text_block("Checking."),
            tool_use_block("get_weather", {"city": "Paris"}),
        ]

    with FakeAnthropic(responder) as server:
        message = ask(client_for(server), tools=[WEATHER_TOOL])

    assert message.stop_reason == "tool_use"
    tool_use = message.content[1]
    assert isinstance(tool_use, ToolUseBlock)
    assert tool_use.name == "get_weather"
    assert tool_use.input == {"city": "Paris"}
    assert tool_use.id.startswith("toolu_")


def test_temperature_and_beta_header_are_recorded(server: FakeAnthropic) -> None:
    ask(
        client_for(server),
        extra_body={"temperature": 0.0},
        extra_headers={"anthropic-beta": "x-2025"},
    )

    (request,) = server.requests
    assert request.has_temperature
    assert request.anthropic_beta == "x-2025"


def test_missing_required_field_is_a_400() -> None:
    with FakeAnthropic() as server:
        response = httpx.post(
            f"{server.url}/v1/messages",
            json={"model": MODEL, "messages": USER},
            headers={"x-api-key": "test"},
        )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }


# ------------------------------------------------------------ token counting


def cached_prompt(question: str) -> dict[str, Any]:
    """Tools and a long system prompt marked for caching, then a question."""
    system = [
        {
            "type": "text",
            "text": "You are a weather bot. " * 50,
            "cache_control": {"type": "ephemeral"},
        }
    ]
    return {
        "tools": [WEATHER_TOOL],
        "system": system,
        "messages": [{"role": "user", "content": question}],
    }


def total_tokens(client: anthropic.Anthropic, prompt: dict[str, Any]) -> int:
    return client.messages.count_tokens(model=MODEL, **prompt).input_tokens


def usage_sum(message: anthropic.types.Message) -> int:
    usage = message.usage
    return usage.input_tokens + (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)


def test_prompt_cache_written_then_read(server: FakeAnthropic) -> None:
    client = client_for(server)
    first_prompt, second_prompt = (
        cached_prompt("Paris?"),
        cached_prompt("And in Lyon, tomorrow?"),
    )

    first, second = ask(client, **first_prompt), ask(client, **second_prompt)

    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens and first.usage.cache_creation_input_tokens > 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert usage_sum(first) == total_tokens(client, first_prompt)
    assert usage_sum(second) == total_tokens(client, second_prompt)


def test_moving_the_breakpoint_forward_still_reads_the_earlier_prefix(
    server: FakeAnthropic,
) -> None:
    """The multi-turn pattern: the marker moves to the newest message each turn."""
    client = client_for(server)
    marked = {"type": "ephemeral"}
    turn1 = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi " * 40, "cache_control": marked}],
        }
    ]
    turn2 = [
        {"role": "user", "content": [{"type": "text", "text": "Hi " * 40}]},
        {"role": "assistant", "content": "Hello."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Weather?", "cache_control": marked}],
        },
    ]

    first = ask(client, messages=turn1)
    second = ask(client, messages=turn2)

    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens and second.usage.cache_creation_input_tokens > 0
    assert second.usage.input_tokens == 0
    assert usage_sum(second) == total_tokens(client, {"messages": turn2})


def test_without_markers_everything_is_input(server: FakeAnthropic) -> None:
    client = client_for(server)
    first, second = ask(client), ask(client)
    assert second.usage.input_tokens == first.usage.input_tokens == total_tokens(client, {"messages": USER})
    assert second.usage.cache_read_input_tokens == second.usage.cache_creation_input_tokens == 0


def test_more_than_four_breakpoints_rejected(server: FakeAnthropic) -> None:
    block = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4 blocks"):
        ask(client_for(server), messages=[{"role": "user", "content": [block] * 5}])


# ----------------------------------------------------------- faults, retries


def test_429_then_success_is_retried(server: FakeAnthropic) -> None:
    server.fail_next(status=429, headers={"retry-after": "0"})

    message = ask(client_for(server, max_retries=2))

    assert message.content[0].type == "text"
    assert len(server.requests) == 2
    assert (server.requests_served, server.requests_failed) == (1, 1)


def test_500_twice_then_success(server: FakeAnthropic) -> None:
    server.fail_next(status=500, times=2)

    message = ask(client_for(server, max_retries=2))

    assert message.stop_reason == "end_turn"
    assert len(server.requests) == 3
    assert (server.requests_served, server.requests_failed) == (1, 2)


def test_529_overloaded_exhausts_retries(server: FakeAnthropic) -> None:
    server.fail_next(status=529, times=3)

    with pytest.raises(anthropic.APIStatusError) as caught:
        ask(client_for(server, max_retries=2))

    assert caught.value.status_code == 529
    assert "overloaded_error" in str(caught.value)
    assert len(server.requests) == 3


def test_credit_exhaustion_is_not_retried(server: FakeAnthropic) -> None:
    server.fail_next_credit_exhausted()

    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(client_for(server, max_retries=2))

    assert "credit balance is too low" in str(caught.value)
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": CREDIT_EXHAUSTED_MESSAGE},
    }
    assert len(server.requests) == 1
    assert server.pending_faults == 0


def test_permanent_credit_exhaustion(server: FakeAnthropic) -> None:
    client = client_for(server)
    ask(client)
    server.exhaust_credit()

    for _ in range(2):
        with pytest.raises(anthropic.BadRequestError, match="credit balance is too low"):
            ask(client)
    with pytest.raises(anthropic.BadRequestError, match="credit balance is too low"):
        client.messages.count_tokens(model=MODEL, messages=USER)  # type: ignore[arg-type]

    assert (server.requests_served, server.requests_failed) == (1, 3)


def test_responder_error_is_surfaced_not_retried() -> None:
    def broken(body: dict[str, Any]) -> list[dict[str, Any]]:
        raise ValueError("bug in responder")

    with (
        FakeAnthropic(broken) as server,
        pytest.raises(anthropic.InternalServerError, match="bug in responder"),
    ):
        ask(client_for(server, max_retries=2))
    assert len(server.requests) == 1
    assert isinstance(server.responder_errors[0], ValueError)


# ------------------------------------------------------- late and lost answers


def test_a_late_answer_times_the_client_out_after_the_request_was_served(server: FakeAnthropic) -> None:
    server.delay_next(2.0)
    client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0, timeout=0.3)

    with pytest.raises(anthropic.APITimeoutError):
        ask(client)

    assert len(server.requests) == 1 and server.requests_served == 1  # handled (billed) all the same
    assert ask(client).content[0].type == "text"  # the next request is answered at once


def test_a_dropped_answer_is_a_connection_error_after_the_request_was_served(server: FakeAnthropic) -> None:
    server.drop_next()

    with pytest.raises(anthropic.APIConnectionError) as caught:
        ask(client_for(server, max_retries=0))

    assert not isinstance(caught.value, anthropic.APITimeoutError)
    assert (len(server.requests), server.requests_served, server.undelivered) == (1, 1, 1)
    assert ask(client_for(server, max_retries=0)).content[0].type == "text"
