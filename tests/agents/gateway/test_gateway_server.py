"""The gateway over real HTTP, driven by the official ``openai`` client (and raw ``httpx`` for bodies the client
would not send): answers, streaming, tools, 401 / 410 / 400 naming the field, a burst of concurrent requests.

The backend is scripted (``conftest.ScriptedBackend``): the engine side is tested with real engines by the rollout's
tests; here the subject is the server and the sessions behind it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import signal

import httpx
import openai
import pytest

from reasonrl.agents.gateway.backend import SamplingLimits
from reasonrl.agents.gateway.server import AgentGateway

LIMITS = SamplingLimits(temperature=1.0, top_p=1.0, max_tokens=300)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*34"}}\n</tool_call>'


def serve(tokenizer, backend, body, **kwargs):
    """Run ``body(gateway)`` against a started gateway in a fresh loop; the gateway is stopped afterwards."""

    async def main():
        gateway = AgentGateway(tokenizer, backend, LIMITS, model="policy", **kwargs)
        await gateway.start()
        try:
            return await body(gateway)
        finally:
            await gateway.stop()

    return asyncio.run(main())


def http() -> httpx.AsyncClient:
    """A plain-HTTP client without a certificate store (building the default one takes ~1 s on a busy machine)."""
    return httpx.AsyncClient(verify=False)


def client(endpoint, api_key=None, base_url=None, **kwargs) -> openai.AsyncOpenAI:
    kwargs.setdefault("http_client", http())
    return openai.AsyncOpenAI(
        base_url=base_url or endpoint.base_url, api_key=api_key or endpoint.api_key, max_retries=0, **kwargs
    )


def test_a_tool_loop_with_the_openai_client_and_its_trajectory(qwen25_tokenizer, scripted):
    backend = scripted(qwen25_tokenizer, ["Let me compute.\n" + CALL, "It is 408."])

    async def body(gateway):
        endpoint = gateway.open_session()
        assert endpoint.base_url == f"http://127.0.0.1:{gateway.port}/s/{endpoint.session_id}/v1"
        async with client(endpoint) as api:
            models = await api.models.list()
            assert [m.id for m in models.data] == ["policy"]
            messages = [{"role": "user", "content": "What is 12*34?"}]
            first = await api.chat.completions.create(model=endpoint.model, messages=messages, tools=TOOLS)
            choice = first.choices[0]
            assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me compute."
            (call,) = choice.message.tool_calls
            assert call.function.name == "calculator" and json.loads(call.function.arguments) == {"expression": "12*34"}
            messages += [
                choice.message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "408"},
            ]
            second = await api.chat.completions.create(model="any-name", messages=messages, tools=TOOLS)
            assert second.choices[0].message.content == "It is 408." and second.choices[0].finish_reason == "stop"
            assert second.usage.completion_tokens == len(backend.outputs[1].token_ids)
        pieces = gateway.close_session(endpoint.session_id, "stop")
        return pieces, gateway.stats()

    (piece,), stats = serve(qwen25_tokenizer, backend, body)
    trained = [t for t, m in zip(piece.response_ids, piece.loss_mask, strict=True) if m]
    assert trained == backend.outputs[0].token_ids + backend.outputs[1].token_ids
    assert stats["requests"] == 2 and stats["forks"] == 0 and stats["pieces"] == 1
    assert stats["model_tokens"] == len(trained) and stats["observation_tokens"] == piece.turns[1]["num_tokens"]
    assert stats["added_latency_ms_mean"] > 0


def test_streaming_gives_the_same_answer_in_openai_chunks(qwen25_tokenizer, scripted):
    backend = scripted(qwen25_tokenizer, ["Let me compute.\n" + CALL, "It is 408."])

    async def body(gateway):
        endpoint = gateway.open_session()
        async with client(endpoint) as api:
            messages = [{"role": "user", "content": "What is 12*34?"}]
            stream = await api.chat.completions.create(
                model=endpoint.model,
                messages=messages,
                tools=TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [chunk async for chunk in stream]
        async with http() as raw:  # the wire format itself ends with [DONE]
            response = await raw.post(
                f"{endpoint.base_url}/chat/completions",
                headers={"Authorization": f"Bearer {endpoint.api_key}"},
                json={
                    "messages": messages + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}],
                    "stream": True,
                },
            )
        return chunks, response

    chunks, response = serve(qwen25_tokenizer, backend, body)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert content == "Let me compute."
    assert [(tc.index, tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
        (0, "calculator", {"expression": "12*34"})
    ]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage.completion_tokens == len(backend.outputs[0].token_ids)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [line for line in response.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)


def test_wrong_key_unknown_session_and_closed_session(tiny_tokenizer, scripted):
    backend = scripted(tiny_tokenizer)

    async def body(gateway):
        endpoint = gateway.open_session()
        other = gateway.open_session()
        messages = [{"role": "user", "content": "hi"}]
        async with client(endpoint, api_key=other.api_key) as api:
            with pytest.raises(openai.AuthenticationError) as wrong_key:
                await api.chat.completions.create(model="m", messages=messages)
        unknown = endpoint.base_url.replace(endpoint.session_id, "feed-0000")
        async with client(endpoint, base_url=unknown) as api:
            with pytest.raises(openai.AuthenticationError):
                await api.chat.completions.create(model="m", messages=messages)
        async with http() as raw:
            no_key = await raw.get(f"{endpoint.base_url}/models")
        async with client(endpoint) as api:
            await api.chat.completions.create(model="m", messages=messages)
            assert len(gateway.close_session(endpoint.session_id, "stop")) == 1
            with pytest.raises(openai.APIStatusError) as gone:
                await api.chat.completions.create(model="m", messages=messages)
        return wrong_key.value, no_key, gone.value, gateway.stats()

    wrong_key, no_key, gone, stats = serve(tiny_tokenizer, backend, body)
    assert wrong_key.status_code == 401 and wrong_key.body["code"] == "invalid_api_key"
    assert no_key.status_code == 401
    assert gone.status_code == 410 and gone.body["code"] == "session_closed"
    assert stats["errors_401"] == 3 and stats["errors_410"] == 1 and len(backend.calls) == 1


def test_a_request_in_flight_when_its_session_closes_gets_410(tiny_tokenizer, scripted):
    entered, release = asyncio.Event(), asyncio.Event()
    backend = scripted(tiny_tokenizer)
    generate = backend.generate

    async def slow_generate(*args):
        entered.set()
        await release.wait()
        return await generate(*args)

    backend.generate = slow_generate

    async def body(gateway):
        endpoint = gateway.open_session()
        async with client(endpoint) as api:
            messages = [{"role": "user", "content": "hi"}]
            request = asyncio.create_task(api.chat.completions.create(model="m", messages=messages))
            await entered.wait()
            pieces = gateway.close_session(endpoint.session_id, "timeout")  # the agent timed out, say
            release.set()
            with pytest.raises(openai.APIStatusError) as gone:
                await request
        return pieces, gone.value

    pieces, gone = serve(tiny_tokenizer, backend, body)
    assert pieces == [] and gone.status_code == 410 and len(backend.calls) == 1


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
        ({"model": "m"}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "bogus", "content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": "user"}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, "temperature"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages.0.content.0.type",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}, "tool_choice"),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{bad"}}],
                    },
                ]
            },
            "messages.1.tool_calls.0.function.arguments",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ],
)
def test_a_malformed_request_is_a_400_naming_the_field(payload, param, tiny_tokenizer, scripted):
    backend = scripted(tiny_tokenizer)

    async def body(gateway):
        endpoint = gateway.open_session()
        async with http() as raw:
            return await raw.post(
                f"{endpoint.base_url}/chat/completions",
                headers={"Authorization": f"Bearer {endpoint.api_key}"},
                json=payload,
            )

    response = serve(tiny_tokenizer, backend, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["code"] is None
    assert param in error["message"] and not backend.calls


def test_a_body_that_is_not_json_is_a_400(tiny_tokenizer, scripted):
    async def body(gateway):
        endpoint = gateway.open_session()
        async with http() as raw:
            return await raw.post(
                f"{endpoint.base_url}/chat/completions",
                headers={"Authorization": f"Bearer {endpoint.api_key}"},
                content=b"{not json",
            )

    response = serve(tiny_tokenizer, scripted(tiny_tokenizer), body)
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_a_burst_of_requests_is_queued_and_all_answered(tiny_tokenizer, scripted):
    backend = scripted(tiny_tokenizer)
    generate = backend.generate
    in_flight = []

    async def slow_generate(*args):
        in_flight.append(1)
        await asyncio.sleep(0.02)
        out = await generate(*args)
        in_flight.pop()
        return out

    backend.generate = slow_generate

    async def body(gateway):
        endpoints = [gateway.open_session() for _ in range(20)]
        shared = endpoints[0]
        messages = [{"role": "user", "content": "hi"}]
        async with http() as pool:  # one connection pool for the 20 clients
            apis = [client(e, http_client=pool) for e in endpoints]
            across = [a.chat.completions.create(model="m", messages=messages) for a in apis]
            one = [apis[0].chat.completions.create(model="m", messages=messages) for _ in range(20)]
            answers = await asyncio.gather(*across, *one)
        return answers, gateway.stats(), gateway.session(shared.session_id).forks

    answers, stats, forks = serve(tiny_tokenizer, backend, body)
    assert len(answers) == 40 and all(a.choices[0].message.content == "ok" for a in answers)
    assert stats["requests"] == 40 and len(backend.calls) == 40 and not any(k.startswith("errors_") for k in stats)
    assert forks == 20  # one session, the same first request 21 times: each repeat is a new piece


def test_start_picks_a_free_port_and_leaves_the_signal_handlers_alone(tiny_tokenizer, scripted):
    async def main():
        before = signal.getsignal(signal.SIGINT)  # asyncio.run's own handler
        gateway = AgentGateway(tiny_tokenizer, scripted(tiny_tokenizer), LIMITS)
        await gateway.start()
        during = signal.getsignal(signal.SIGINT)
        port = gateway.port
        await gateway.stop()
        return before, during, port, signal.getsignal(signal.SIGINT)

    before, during, port, after = asyncio.run(main())
    assert port > 0 and during is before and after is before


def test_a_prompt_over_the_run_limit_is_a_400(tiny_tokenizer, scripted):
    limits = SamplingLimits(temperature=1.0, top_p=1.0, max_tokens=10, max_prompt_tokens=4)

    async def main():
        gateway = AgentGateway(tiny_tokenizer, scripted(tiny_tokenizer), limits)
        await gateway.start()
        endpoint = gateway.open_session()
        try:
            async with client(endpoint) as api:
                with pytest.raises(openai.BadRequestError) as err:
                    await api.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello " * 10}])
            return err.value
        finally:
            await gateway.stop()

    err = asyncio.run(main())
    assert err.body["code"] == "context_length_exceeded" and err.body["param"] == "messages"


def test_a_conversation_the_chat_template_refuses_is_a_400(tiny_tokenizer, scripted):
    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = (
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role here') }}{% endif %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )

    async def body(gateway):
        endpoint = gateway.open_session()
        async with client(endpoint) as api:
            with pytest.raises(openai.BadRequestError) as err:
                await api.chat.completions.create(model="m", messages=[{"role": "system", "content": "x"}])
        return err.value

    err = serve(tok, scripted(tok), body)
    assert err.body["param"] == "messages" and "no system role here" in err.body["message"]


def test_an_engine_failure_is_a_500_and_the_session_is_unchanged(tiny_tokenizer, scripted):
    backend = scripted(tiny_tokenizer, ["first", "second"])
    generate = backend.generate
    failures = ["raise", "bad logprobs"]

    async def flaky_generate(*args):
        out = await generate(*args)
        if failures:
            failure = failures.pop(0)
            backend.texts.insert(0, "second")  # the retry gets the same script
            if failure == "raise":
                raise RuntimeError("engine died")
            out.logprobs = out.logprobs[:-1]
        return out

    backend.generate = flaky_generate

    async def body(gateway):
        endpoint = gateway.open_session()
        async with client(endpoint) as api:
            messages = [{"role": "user", "content": "hi"}]
            errors = []
            for _ in range(2):
                with pytest.raises(openai.InternalServerError) as err:
                    await api.chat.completions.create(model="m", messages=messages)
                errors.append(err.value)
            answer = await api.chat.completions.create(model="m", messages=messages)
        return errors, answer, gateway.close_session(endpoint.session_id), gateway.stats()

    errors, answer, pieces, stats = serve(tiny_tokenizer, backend, body)
    assert [e.status_code for e in errors] == [500, 500] and errors[0].body["type"] == "server_error"
    assert answer.choices[0].message.content == "second" and stats["errors_500"] == 2 and stats["forks"] == 0
    (piece,) = pieces
    assert piece.response_ids == backend.outputs[-1].token_ids and all(piece.loss_mask)


def test_a_sync_agent_in_a_thread_with_its_own_tool_loop(qwen25_tokenizer, scripted):
    """A plain ``openai.OpenAI`` agent run in a thread (as sync agent functions are) against the gateway in the loop."""
    backend = scripted(qwen25_tokenizer, [CALL, "408"])

    def agent(endpoint) -> str:
        with openai.OpenAI(
            base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0, http_client=httpx.Client(verify=False)
        ) as api:
            messages = [{"role": "user", "content": "What is 12*34?"}]
            while True:
                message = (
                    api.chat.completions.create(model=endpoint.model, messages=messages, tools=TOOLS).choices[0].message
                )
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    return message.content
                for call in message.tool_calls:
                    expression = json.loads(call.function.arguments)["expression"]
                    result = {"12*34": "408"}.get(expression, "unknown")  # the test's own calculator
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})

    async def body(gateway):
        endpoint = gateway.open_session()
        answer = await asyncio.to_thread(agent, endpoint)
        return answer, gateway.close_session(endpoint.session_id), gateway.stats()

    answer, (piece,), stats = serve(qwen25_tokenizer, backend, body)
    assert answer == "408" and stats["requests"] == 2 and stats["forks"] == 0
    assert [t["role"] for t in piece.turns] == ["assistant", "tool", "assistant"] and "408" in piece.turns[1]["text"]
