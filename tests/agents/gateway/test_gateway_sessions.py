"""Token-faithful sessions: every trained token is one the engine sampled, with its log-prob; extends vs fork; budget.

Driven without HTTP: ``plan`` → the scripted backend → ``commit``, with agent-side messages built the way an OpenAI
client loop builds them (``content`` None for a tool-call-only reply, ``arguments`` a JSON string).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from reasonrl.agents.gateway.backend import SamplingLimits
from reasonrl.agents.gateway.framing import ChatFraming
from reasonrl.agents.gateway.messages import normalize_messages
from reasonrl.agents.gateway.sessions import ChatTurnRequest, PromptTooLong, Session, SessionClosed

LIMITS = SamplingLimits(temperature=1.0, top_p=1.0, max_tokens=400)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*34"}}\n</tool_call>'


def ask(session: Session, backend, messages: list[dict], tools=TOOLS, **sampling):
    """One agent request: returns the OpenAI-style assistant message the agent would append, and the answer."""
    request = ChatTurnRequest(normalize_messages(messages), tools, **sampling)
    plan = session.plan(request)
    output = (
        None
        if plan.sampling is None
        else asyncio.run(backend.generate(session.session_id, plan.turn, plan.context_ids, plan.sampling))
    )
    answer = session.commit(plan, output)
    reply = answer.reply
    message = {"role": "assistant", "content": reply.content or None}
    if reply.calls:
        message["tool_calls"] = reply.openai_tool_calls()
    return message, answer


def assert_faithful(piece, backend, outputs):
    """Every mask-True token is, in order, a token the backend returned with its log-prob; the ids are the prompt,
    then each model turn verbatim with the appended tokens between them."""
    trained = [t for t, m in zip(piece.response_ids, piece.loss_mask, strict=True) if m]
    trained_lp = [lp for lp, m in zip(piece.logprobs, piece.loss_mask, strict=True) if m]
    assert trained == [t for o in outputs for t in o.token_ids]
    assert trained_lp == [lp for o in outputs for lp in o.logprobs]
    assert all(lp == 0.0 for lp, m in zip(piece.logprobs, piece.loss_mask, strict=True) if not m)
    rebuilt = []
    for turn in piece.turns:
        if turn["role"] == "assistant":
            rebuilt += turn["token_ids"]
        else:
            rebuilt += backend.tokenizer(turn["text"], add_special_tokens=False).input_ids
    assert rebuilt == piece.response_ids


@pytest.mark.parametrize("template", ["qwen25_tokenizer", "qwen3_tokenizer", "smollm2_tokenizer", "tiny_tokenizer"])
def test_a_tool_loop_keeps_the_engine_tokens_verbatim(template, request, scripted):
    tok = request.getfixturevalue(template)
    backend = scripted(tok, ["Let me compute.\n" + CALL, "The answer is 408."])
    session = Session("s1", ChatFraming(tok), LIMITS)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 12*34?"}]
    reply, answer = ask(session, backend, messages)
    assert answer.finish_reason == "tool_calls" and reply["content"] == "Let me compute."
    (call,) = reply["tool_calls"]
    assert call["function"]["name"] == "calculator" and json.loads(call["function"]["arguments"]) == {
        "expression": "12*34"
    }
    messages += [reply, {"role": "tool", "tool_call_id": call["id"], "content": "408"}]
    reply, answer = ask(session, backend, messages)
    assert answer.finish_reason == "stop" and reply == {"role": "assistant", "content": "The answer is 408."}
    # the second call continued exactly the recorded ids, and only the tool message was appended
    assert backend.calls[1].prompt_ids[: len(backend.calls[0].prompt_ids)] == backend.calls[0].prompt_ids
    (piece,) = session.close("stop")
    assert session.forks == 0 and piece.finish_reason == "stop"
    assert piece.prompt_ids == ChatFraming(tok).prompt_ids(normalize_messages(messages[:2]), TOOLS)
    assert backend.calls[1].prompt_ids == piece.prompt_ids + piece.response_ids[: -len(backend.outputs[1].token_ids)]
    assert_faithful(piece, backend, backend.outputs)
    assert [t["role"] for t in piece.turns] == ["assistant", "tool", "assistant"]
    assert piece.token_versions == [0] * len(backend.outputs[0].token_ids) + [0] * piece.turns[1]["num_tokens"] + [
        1
    ] * len(backend.outputs[1].token_ids)


@pytest.mark.parametrize("template", ["qwen25_tokenizer", "smollm2_tokenizer"])
def test_with_canonical_model_tokens_the_trajectory_is_the_template_rendering(template, request, scripted):
    """When the model writes exactly what the template would write, prompt + response decode to the template's own
    rendering of the whole conversation: the appended pieces are the template's, separators included."""
    tok = request.getfixturevalue(template)
    content = "Let me compute." if template == "qwen25_tokenizer" else CALL
    backend = scripted(tok, ["Let me compute.\n" + CALL, "Done: 408."], char_level=False)
    session = Session("s1", ChatFraming(tok), LIMITS)
    messages = [{"role": "user", "content": "What is 12*34?"}]
    reply, _ = ask(session, backend, messages)
    messages += [reply, {"role": "tool", "tool_call_id": "x", "content": "408"}, {"role": "user", "content": "Sure?"}]
    reply, _ = ask(session, backend, messages)
    (piece,) = session.close()
    text = tok.decode(piece.prompt_ids + piece.response_ids, skip_special_tokens=False)
    history = normalize_messages(messages)
    if template == "qwen25_tokenizer":  # Qwen2.5 renders the call from tool_calls; it equals what the model wrote
        history[1] = {"role": "assistant", "content": content, "tool_calls": history[1]["tool_calls"]}
    else:  # a ChatML template without tool support: the assistant message is the model's text
        history[1] = {"role": "assistant", "content": "Let me compute.\n" + CALL}
    history.append({"role": "assistant", "content": "Done: 408."})
    rendered = tok.apply_chat_template(history, tools=TOOLS, tokenize=False)
    assert text == rendered.rstrip("\n")  # the model's turn ends with <|im_end|>, the template adds "\n"


def test_re_serialised_tool_call_json_and_none_content_do_not_fork(qwen25_tokenizer, scripted):
    backend = scripted(qwen25_tokenizer, [CALL, "408"])
    session = Session("s1", ChatFraming(qwen25_tokenizer), LIMITS)
    messages = [{"role": "user", "content": "12*34?"}]
    reply, _ = ask(session, backend, messages)
    assert reply["content"] is None
    (call,) = reply["tool_calls"]
    resent = {
        "role": "assistant",
        "content": "",  # "" for None
        "tool_calls": [
            {
                "id": "another-id",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{ "expression" :"12*34" }'},
            }
        ],
    }
    ask(session, backend, messages + [resent, {"role": "tool", "tool_call_id": call["id"], "content": "408"}])
    assert session.forks == 0
    (piece,) = session.close()
    assert_faithful(piece, backend, backend.outputs)


def _two_turns(tok, scripted, first: str):
    backend = scripted(tok, [first, "second", "third"])
    session = Session("s1", ChatFraming(tok), LIMITS)
    messages = [{"role": "user", "content": "q1"}]
    reply, _ = ask(session, backend, messages)
    messages += [reply, {"role": "user", "content": "q2"}]
    reply, _ = ask(session, backend, messages)
    messages += [reply, {"role": "user", "content": "q3"}]
    return backend, session, messages


@pytest.mark.parametrize(
    "rewrite",
    ["summarised", "dropped_turn", "edited_answer", "other_tools", "stripped_think"],
)
def test_a_rewritten_history_forks_and_keeps_both_pieces_faithful(rewrite, qwen3_tokenizer, scripted):
    first = "<think>\nadd them\n</think>\n\nfirst"
    backend, session, messages = _two_turns(qwen3_tokenizer, scripted, first)
    tools = TOOLS
    if rewrite == "summarised":
        messages = [{"role": "user", "content": "summary of q1, q2"}] + messages[3:]
    elif rewrite == "dropped_turn":
        messages = messages[:1] + messages[3:]
    elif rewrite == "edited_answer":
        messages[1] = {"role": "assistant", "content": "first (edited)"}
    elif rewrite == "other_tools":
        tools = None
    else:
        messages[1] = {"role": "assistant", "content": "first"}  # the agent dropped the reasoning itself
    ask(session, backend, messages, tools=tools)
    assert session.forks == 1
    first_piece, second_piece = session.close()
    assert first_piece.finish_reason == "fork" and second_piece.finish_reason == "stop"
    assert_faithful(first_piece, backend, backend.outputs[:2])
    assert_faithful(second_piece, backend, backend.outputs[2:])
    assert second_piece.prompt_ids == ChatFraming(qwen3_tokenizer).prompt_ids(normalize_messages(messages), tools)
    assert backend.calls[2].prompt_ids == second_piece.prompt_ids


def test_reasoning_kept_in_history_extends_and_earlier_think_tokens_stay(qwen3_tokenizer, scripted):
    """Qwen3's template drops <think> from earlier turns when it renders history; the session never re-renders, so
    the first turn's reasoning tokens stay in the trajectory exactly as sampled."""
    first = "<think>\nadd them\n</think>\n\nfirst"
    backend, session, messages = _two_turns(qwen3_tokenizer, scripted, first)
    assert messages[1]["content"] == first  # the gateway returns the reasoning in the content
    rerendered = qwen3_tokenizer.apply_chat_template(normalize_messages(messages), tokenize=False)
    assert "add them" not in rerendered  # what a re-rendering trainer would have trained on instead
    ask(session, backend, messages)
    assert session.forks == 0
    (piece,) = session.close()
    assert_faithful(piece, backend, backend.outputs)
    assert "add them" in qwen3_tokenizer.decode(piece.response_ids)


def test_budget_caps_each_turn_then_answers_length_without_the_backend(tiny_tokenizer, scripted):
    backend = scripted(tiny_tokenizer, ["a" * 10, "b" * 10, "c" * 100])
    session = Session("s1", ChatFraming(tiny_tokenizer), LIMITS, budget=40)
    messages = [{"role": "user", "content": "go"}]
    reply, answer = ask(session, backend, messages, max_tokens=1000)
    assert backend.calls[0].sampling.max_tokens == 40 and answer.finish_reason == "stop"
    messages += [reply, {"role": "user", "content": "more"}]
    reply, answer = ask(session, backend, messages, max_tokens=5)  # the request's lower max_tokens wins
    assert backend.calls[1].sampling.max_tokens == 5 and answer.finish_reason == "length"
    messages += [reply, {"role": "user", "content": "more"}]
    reply, answer = ask(session, backend, messages)
    used = len(backend.calls[2].prompt_ids) - len(backend.calls[0].prompt_ids)
    assert backend.calls[2].sampling.max_tokens == 40 - used and answer.finish_reason == "length"
    assert session.ended_by_budget
    messages += [reply, {"role": "user", "content": "more"}]
    reply, answer = ask(session, backend, messages)
    assert len(backend.calls) == 3 and answer.finish_reason == "length" and reply["content"] is None
    (piece,) = session.close("stop")
    assert piece.finish_reason == "length" and len(piece.response_ids) == 40
    assert_faithful(piece, backend, backend.outputs)


def test_messages_that_do_not_fit_the_budget_are_not_appended(tiny_tokenizer, scripted):
    backend = scripted(tiny_tokenizer, ["x" * 10])
    session = Session("s1", ChatFraming(tiny_tokenizer), LIMITS, budget=20)
    messages = [{"role": "user", "content": "go"}]
    reply, _ = ask(session, backend, messages)
    reply2, answer = ask(session, backend, messages + [reply, {"role": "tool", "content": "y" * 50}])
    assert answer.finish_reason == "length" and len(backend.calls) == 1 and session.ended_by_budget
    (piece,) = session.close()
    assert piece.response_ids == backend.outputs[0].token_ids and piece.finish_reason == "length"


def test_sampling_is_narrowed_never_widened(tiny_tokenizer, scripted):
    backend = scripted(tiny_tokenizer)
    session = Session("s1", ChatFraming(tiny_tokenizer), SamplingLimits(temperature=0.8, top_p=0.9, max_tokens=30))
    messages = [{"role": "user", "content": "go"}]
    reply, _ = ask(session, backend, messages, temperature=2.0, top_p=1.0, max_tokens=10_000, stop=("END",))
    s = backend.calls[0].sampling
    assert (s.temperature, s.top_p, s.max_tokens, s.stop) == (0.8, 0.9, 30, ("END",))
    ask(session, backend, messages + [reply, {"role": "user", "content": "again"}], temperature=0.2, top_p=0.5)
    s = backend.calls[1].sampling
    assert (s.temperature, s.top_p) == (0.2, 0.5)


def test_a_turn_cut_short_gets_the_whole_turn_close(tiny_tokenizer, scripted):
    """A turn that did not end with EOS (max_tokens of the request, a stop string) is closed by the template's whole
    close, EOS included, before the next message."""
    backend = scripted(tiny_tokenizer, ["long answer here", "ok"])
    session = Session("s1", ChatFraming(tiny_tokenizer), LIMITS)
    messages = [{"role": "user", "content": "go"}]
    reply, answer = ask(session, backend, messages, max_tokens=3)
    assert answer.finish_reason == "length" and not session.ended_by_budget
    ask(session, backend, messages + [reply, {"role": "user", "content": "next"}])
    (piece,) = session.close()
    assert piece.turns[1]["text"].startswith("<|im_end|>\n<|im_start|>user\nnext")
    assert_faithful(piece, backend, backend.outputs)


def test_closed_sessions_refuse_and_in_flight_turns_are_dropped(tiny_tokenizer, scripted):
    backend = scripted(tiny_tokenizer)
    session = Session("s1", ChatFraming(tiny_tokenizer), LIMITS)
    request = ChatTurnRequest([{"role": "user", "content": "go"}])
    plan = session.plan(request)
    output = asyncio.run(backend.generate("s1", plan.turn, plan.context_ids, plan.sampling))
    assert session.close() == []  # nothing was committed: no piece
    with pytest.raises(SessionClosed):
        session.commit(plan, output)
    with pytest.raises(SessionClosed):
        session.plan(request)
    assert session.close() == []


def test_a_prompt_longer_than_the_run_allows_is_refused(tiny_tokenizer):
    limits = SamplingLimits(temperature=1.0, top_p=1.0, max_tokens=10, max_prompt_tokens=5)
    session = Session("s1", ChatFraming(tiny_tokenizer), limits)
    with pytest.raises(PromptTooLong, match="prompt_max_len"):
        session.plan(ChatTurnRequest([{"role": "user", "content": "a long question " * 5}]))


def test_two_calls_and_two_tool_results_render_as_qwen25_writes_them(qwen25_tokenizer, scripted):
    """Qwen2.5 merges consecutive tool messages into one user block; the appended tokens follow the template."""
    call2 = CALL.replace("12*34", "5*6")
    backend = scripted(qwen25_tokenizer, [CALL + "\n" + call2, "408 and 30."], char_level=False)
    session = Session("s1", ChatFraming(qwen25_tokenizer), LIMITS)
    messages = [{"role": "user", "content": "12*34 and 5*6?"}]
    reply, answer = ask(session, backend, messages)
    assert answer.finish_reason == "tool_calls" and len(reply["tool_calls"]) == 2
    results = [
        {"role": "tool", "tool_call_id": c["id"], "content": r}
        for c, r in zip(reply["tool_calls"], ["408", "30"], strict=True)
    ]
    messages += [reply, *results]
    reply, _ = ask(session, backend, messages)
    (piece,) = session.close()
    assert (
        piece.turns[1]["text"].count("<tool_response>") == 2 and piece.turns[1]["text"].count("<|im_start|>user") == 1
    )
    history = normalize_messages(messages) + [{"role": "assistant", "content": "408 and 30."}]
    rendered = qwen25_tokenizer.apply_chat_template(history, tools=TOOLS, tokenize=False)
    text = qwen25_tokenizer.decode(piece.prompt_ids + piece.response_ids, skip_special_tokens=False)
    assert text == rendered.rstrip("\n")
    assert_faithful(piece, backend, backend.outputs)
