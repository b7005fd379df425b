"""``judge_url=``: the OpenAI-compatible chat-completions client (``reasonrl.rewards.judge_client``) against a small
stand-in server written here: what it sends, its key, retries on 5xx and on answers without text, a 4xx not retried,
a stall past the deadline, the concurrency cap; a request that fails for good becomes an unparsed, counted verdict
of the judge scorer (``reward/judge_failed``), never a silent zero. The verdicts of a real judge model are checked
on the real vLLM engine (tests/distributed/test_judge_engine.py)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from reasonrl.dataplane.completion import Completion
from reasonrl.rewards.judge import JudgeScorer, JudgeTemplate, JudgeWeights, judge_metrics, parse_rule
from reasonrl.rewards.judge_client import JudgeUrlClient, JudgeUrlSettings
from reasonrl.rewards.shaping import RewardConfig

KEY = "judge-key-0123"


class StandIn:
    """An OpenAI-compatible endpoint: ``behaviour(body, attempt) -> (status, body text)`` per request; keeps the
    requests (body, Authorization header) and the most requests it held at once."""

    def __init__(self, behaviour):
        self.behaviour, self.requests, self.attempts = behaviour, [], {}
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][0]["content"]
                with outer.lock:
                    outer.requests.append((self.path, body, self.headers.get("Authorization")))
                    outer.attempts[prompt] = attempt = outer.attempts.get(prompt, 0) + 1
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    status, text = outer.behaviour(body, attempt)
                finally:
                    with outer.lock:
                        outer.in_flight -= 1
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def answer(content) -> str:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})


def verdict_of(prompt: str) -> str:
    """The stand-in's judge: 'yes' when the prompt holds 42, else 'no'."""
    return "yes" if "42" in prompt else "no"


@pytest.fixture
def stand_in():
    servers = []

    def start(behaviour):
        servers.append(StandIn(behaviour))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def client(url: str, **kw) -> JudgeUrlClient:
    fields = {"url": url, "model": "judge-m", "secret": KEY, "backoff_s": 0.01, "timeout_s": 5.0} | kw
    return JudgeUrlClient(JudgeUrlSettings(**fields))


def test_requests_follow_the_chat_completions_protocol(stand_in):
    server = stand_in(lambda body, attempt: (200, answer(verdict_of(body["messages"][0]["content"]))))
    prompts = ["is 42 right?", "is 41 right?", "and 42?"]
    judge = client(server.url, max_tokens=17, temperature=0.5)
    assert judge(prompts) == [verdict_of(p) for p in prompts]
    for path, body, auth in server.requests:
        assert path == "/v1/chat/completions" and auth == f"Bearer {KEY}"
        assert body["model"] == "judge-m" and body["max_tokens"] == 17 and body["temperature"] == 0.5
    assert sorted(body["messages"][0]["content"] for _, body, _ in server.requests) == sorted(prompts)
    assert (judge.num_requests, judge.num_failed, judge.num_retries) == (3, 0, 0)
    assert judge([]) == []
    assert KEY not in repr(judge.settings)


def test_5xx_and_answers_without_text_are_retried(stand_in):
    def flaky(body, attempt):
        if attempt == 1:
            return 500, "overloaded"
        if attempt == 2:
            return 200, json.dumps({"choices": []})
        return 200, answer("yes")

    server = stand_in(flaky)
    judge = client(server.url, retries=2)
    assert judge(["a", "b"]) == ["yes", "yes"]
    assert judge.num_retries == 4 and judge.num_failed == 0 and len(server.requests) == 6


def test_a_4xx_is_not_retried_and_garbage_fails_after_the_retries(stand_in):
    def refusing(body, attempt):
        prompt = body["messages"][0]["content"]
        return (400, "bad model") if prompt == "refused" else (200, "not json")

    server = stand_in(refusing)
    judge = client(server.url, retries=2)
    assert judge(["refused", "garbage"]) == [None, None]
    assert server.attempts == {"refused": 1, "garbage": 3}
    assert judge.num_failed == 2


def test_a_stall_past_the_deadline_fails(stand_in):
    server = stand_in(lambda body, attempt: (time.sleep(1.0), (200, answer("yes")))[1])
    judge = client(server.url, timeout_s=0.2, retries=1)
    start = time.perf_counter()
    assert judge(["slow"]) == [None]
    assert time.perf_counter() - start < 1.5 and server.attempts["slow"] == 2


def test_the_concurrency_cap_holds(stand_in):
    server = stand_in(lambda body, attempt: (time.sleep(0.05), (200, answer("no")))[1])
    judge = client(server.url, concurrency=3)
    assert judge([f"p{i}" for i in range(12)]) == ["no"] * 12
    assert 1 <= server.max_in_flight <= 3


def test_failed_requests_score_the_unparsed_value_and_are_counted(stand_in):
    server = stand_in(
        lambda body, attempt: (503, "down") if "fail" in body["messages"][0]["content"] else (200, answer("yes"))
    )
    rc = RewardConfig(correct_reward=1.0, wrong_reward=0.0)
    scorer = JudgeScorer(
        None,
        client(server.url, retries=0),
        template=JudgeTemplate(),
        parse=parse_rule("yes_no"),
        weights=JudgeWeights(1.0),
        reward_config=rc,
        unparsed_reward=-1.0,
    )
    completions = [Completion(0, 0, [1], [2], text, "stop") for text in ("fine", "please fail")]
    results = scorer(completions, [{"question": "q", "answer": "a"}] * 2)
    assert [r.reward for r in results] == [1.0, -1.0]
    m = judge_metrics(results)
    assert m["reward/judge_failed"] == 1.0 and m["reward/judge_unparsed"] == 1.0 and m["reward/judge_judged"] == 2.0
