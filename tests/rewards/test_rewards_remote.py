"""``reward_url=``: the client (``RemoteScorer``) against the real ``reasonrl.reward_server`` in this process (real
math rows through the math-verify pool, a user function file, routing by ``data_source``), and against hostile
servers written here: one that stalls past the deadline, returns garbage, the wrong number of results, 500 then OK,
refuses with a 4xx, and a process that dies mid-batch. Failures are counted (``reward/remote_failed``) and scored
the documented value, never a silent zero."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from reasonrl.dataplane.completion import Completion
from reasonrl.loop.eval_metrics import vote_keys
from reasonrl.loop.rollout import rollout_metrics
from reasonrl.reward_server import RewardServer, RewardService, build_reward
from reasonrl.rewards.remote import FAILED_REASON, RemoteScorer, RemoteSettings, remote_metrics
from reasonrl.rewards.routing import RoutingScorer, routing_problems
from reasonrl.rewards.shaping import RewardConfig, RewardResult, score_responses
from reasonrl.utils.scalars import known_scalar

FIXTURE = Path(__file__).parents[1] / "fixtures" / "remote_rewards.py"
SECRET = "test-secret-0123"


def completion(text: str, finish: str = "stop", length: int = 3) -> Completion:
    return Completion(0, 0, [1], [5] * length, text, finish)


def client(url: str, **kw) -> RemoteScorer:
    return RemoteScorer(RemoteSettings(url=url, **({"secret": SECRET, "backoff_s": 0.01} | kw)))


@pytest.fixture(scope="module")
def math_server():
    scorer = build_reward("math", {"verify_workers": "1"})
    scorer.wait_ready()
    server = RewardServer(RewardService(scorer, kind="math", secret=SECRET), port=0).start()
    yield server
    server.stop()
    scorer.close()


@pytest.fixture(scope="module")
def fn_server():
    scorer = build_reward(f"{FIXTURE}:vowel_fraction")
    server = RewardServer(RewardService(scorer, kind="fn", secret=SECRET), port=0).start()
    yield server
    server.stop()


MATH = [  # (response, finish reason, gold)
    ("so <answer>\\boxed{12}</answer>", "stop", "12"),
    ("<answer>\\boxed{0.5}</answer>", "stop", "\\frac{1}{2}"),
    ("<answer>\\boxed{13}</answer>", "stop", "12"),
    ("no answer at all", "stop", "7"),
    ("<answer>\\boxed{x^2+2x+1}</answer>", "stop", "(x+1)^2"),
    ("<answer>\\boxed{12}</answer>", "length", "12"),  # right but cut: the ORZ rule withholds the reward
    ("The answer is \\boxed{3\\sqrt{2}}", "stop", "\\sqrt{18}"),
]


def test_math_rows_score_as_the_local_verifier_does(math_server, verifier):
    completions = [completion(text, finish) for text, finish, _ in MATH]
    rows = [{"id": f"m{i}", "question": "q", "answer": gold} for i, (_, _, gold) in enumerate(MATH)]
    scorer = client(math_server.url, batch_size=2, concurrency=2)  # 4 requests, 2 at a time, order kept
    remote = scorer(completions, rows)
    texts, finishes, golds = zip(*MATH, strict=True)
    local = score_responses(
        texts, golds, finishes, verifier=verifier, response_lengths=[3] * len(MATH), config=RewardConfig()
    )
    assert [(r.reward, r.correct, r.reason, r.extracted) for r in remote] == [
        (r.reward, r.correct, r.reason, r.extracted) for r in local
    ]
    assert [r.reward for r in remote] == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    assert remote[5].truncated and remote[5].correct  # correct, yet no reward: finish_reason travelled
    assert remote_metrics(remote) == {
        "reward/remote_failed": 0.0,
        "reward/remote_retries": 0.0,
        "reward/remote_seconds": pytest.approx(max(r.elapsed_s for r in remote)),
    }
    assert (scorer.num_samples, scorer.num_failed, scorer.num_retries) == (len(MATH), 0, 0)


def test_a_user_function_file_is_served(fn_server):
    texts = ["aeiou", "xyz", "banana", ""]
    results = client(fn_server.url, batch_size=3)([completion(t) for t in texts], [{"answer": "-"}] * 4)
    assert [r.reward for r in results] == [1.0, 0.0, 0.5, 0.0]
    assert [r.reason for r in results] == ["user_fn"] * 4
    assert [r.correct for r in results] == [True, False, False, False]  # reward >= 1


def test_routing_sends_default_and_remote_rows_to_the_service(fn_server, monkeypatch):
    from playground.tiny_ppo_cpu import TinyPPOCPUConfig

    monkeypatch.setenv("MY_REWARD_SECRET", SECRET)
    cfg = TinyPPOCPUConfig(reward_fn=None, reward_url=fn_server.url, reward_url_secret_env="MY_REWARD_SECRET")
    rows = [
        {"id": "a", "question": "q", "answer": "x"},  # no data_source: the default, the service
        {"id": "b", "question": "q", "answer": "yes", "data_source": "exact_match"},  # scored here
        {"id": "c", "question": "q", "answer": "x", "data_source": "remote"},
    ]
    assert routing_problems(cfg, {"train_data": rows}) == []
    scorer = RoutingScorer(cfg)
    try:
        assert scorer.routes(rows) == ["remote", "exact_match", "remote"]
        results = scorer([completion("aa"), completion("\\boxed{Yes}"), completion("ab")], rows)
    finally:
        scorer.close()
    assert [(r.reward, r.reason) for r in results] == [(1.0, "user_fn"), (1.0, "correct"), (0.5, "user_fn")]
    assert [r.remote is not None for r in results] == [True, False, True]
    metrics = rollout_metrics([completion("aa"), completion("x"), completion("ab")], results, generate_max_len=8)
    assert (metrics["reward/remote_failed"], metrics["reward/remote_retries"]) == (0.0, 0.0)  # the step's metrics
    assert all(known_scalar(name) for name in metrics if name.startswith("reward/remote_"))  # documented scalars


def test_a_remote_row_without_reward_url_is_refused_before_training():
    from playground.tiny_ppo_cpu import TinyPPOCPUConfig

    rows = [{"id": "ok", "question": "q", "answer": "1"}, {"id": "r", "answer": "1", "data_source": "remote"}]
    (problem,) = routing_problems(TinyPPOCPUConfig(reward_fn=None), {"train_data": rows})
    assert problem.startswith("train_data row 1 (id 'r'): data_source 'remote' needs a reward service"), problem
    assert "set reward_url" in problem


def test_wait_ready_probes_the_service_before_the_run(fn_server):
    client(fn_server.url).wait_ready()  # a request of no items, answered with no results
    with pytest.raises(
        RuntimeError, match=r"reward_url .*: the reward service does not answer.*HTTP 401 \(not retried\)"
    ):
        client(fn_server.url, secret="wrong").wait_ready()
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1/score"
    with pytest.raises(RuntimeError, match="ConnectError.*start it \\(python -m reasonrl.reward_server\\)"):
        client(dead, retries=1).wait_ready()


def test_a_caller_inside_an_event_loop_and_maj_at_k(fn_server):
    async def score_in_a_loop():  # e.g. a notebook cell: the scorer runs its own loop in a helper thread
        return client(fn_server.url)([completion("ai"), completion("b")], [{"answer": "-"}] * 2)

    results = asyncio.run(score_in_a_loop())
    assert [r.reward for r in results] == [1.0, 0.0]
    assert vote_keys(results) is None  # no info.extracted from this service: maj@k is not reported
    voted = [RewardResult(1.0, True, "correct", extracted="12", remote=results[0].remote)]
    assert vote_keys(voted) == ["12"]


# -- hostile servers ------------------------------------------------------------------------------------------------
class Hostile(BaseHTTPRequestHandler):
    """Answers by path: ``/stall`` sleeps past the client's deadline, ``/garbage`` is not JSON, ``/short`` has one
    result too few, ``/nan`` a reward that is not a number, ``/flaky`` is 500 on its first two requests then right,
    ``/refuse`` a 422 with a message, ``/slow`` right after 0.1 s (counting requests in flight)."""

    state = {"flaky": 0, "in_flight": 0, "most_in_flight": 0, "requests": 0}
    lock = threading.Lock()

    def log_message(self, *args):  # quiet
        pass

    def reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802 - http.server's name
        items = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["items"]
        good = json.dumps({"results": [{"reward": 1.0, "correct": True, "info": {}} for _ in items]}).encode()
        with self.lock:
            self.state["requests"] += 1
        if self.path == "/stall":
            time.sleep(1.0)
            self.reply(200, good)
        elif self.path == "/garbage":
            self.reply(200, b"<html>not json{")
        elif self.path == "/short":
            self.reply(200, json.dumps({"results": [{"reward": 1.0, "correct": True}] * (len(items) - 1)}).encode())
        elif self.path == "/nan":
            self.reply(200, json.dumps({"results": [{"reward": "NaN", "correct": True}] * len(items)}).encode())
        elif self.path == "/flaky":
            with self.lock:
                self.state["flaky"] += 1
                failing = self.state["flaky"] <= 2
            self.reply(500, b'{"error": {"message": "warming up"}}') if failing else self.reply(200, good)
        elif self.path == "/refuse":
            self.reply(422, b'{"error": {"message": "item 0 field \'row\': needs a rubric", "index": 0}}')
        elif self.path == "/slow":
            with self.lock:
                self.state["in_flight"] += 1
                self.state["most_in_flight"] = max(self.state["most_in_flight"], self.state["in_flight"])
            time.sleep(0.1)
            with self.lock:
                self.state["in_flight"] -= 1
            self.reply(200, good)


@pytest.fixture(scope="module")
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def reset_counts():
    Hostile.state.update(flaky=0, in_flight=0, most_in_flight=0, requests=0)


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/stall", "no answer within reward_url_timeout_s=0.3"),
        ("/garbage", "a body that is not JSON: '<html>not json{'"),
        ("/short", "breaks the protocol: 2 results for 3 items"),
        ("/nan", "item 0 field 'reward': must be a finite number, got 'NaN'"),
    ],
)
def test_bad_answers_are_retried_then_counted_with_the_failure_reward(hostile, path, error):
    reset_counts()
    scorer = client(hostile + path, batch_size=3, timeout_s=0.3, retries=1, failure_reward=-0.5)
    results = scorer([completion("a")] * 5, [{"answer": "1"}] * 5)  # requests of 3 and 2
    assert [(r.reward, r.correct, r.reason) for r in results] == [(-0.5, False, FAILED_REASON)] * 5
    assert error in results[0].remote.error, results[0].remote.error
    assert Hostile.state["requests"] == 4  # each request tried twice
    metrics = remote_metrics(results)
    assert (metrics["reward/remote_failed"], metrics["reward/remote_retries"]) == (5.0, 2.0)
    assert (scorer.num_failed, scorer.num_retries) == (5, 2)
    if path == "/stall":
        assert 0.6 <= metrics["reward/remote_seconds"] < 1.5  # two deadlines and a back-off, not the 1 s stall twice


def test_a_500_then_ok_is_retried_with_backoff(hostile):
    reset_counts()
    scorer = client(hostile + "/flaky", batch_size=10, retries=3, backoff_s=0.05)
    start = time.perf_counter()
    results = scorer([completion("a")] * 4, [{"answer": "1"}] * 4)
    assert [r.reward for r in results] == [1.0] * 4 and not any(r.remote.failed for r in results)
    assert results[0].remote.retries == 2 and Hostile.state["requests"] == 3
    assert time.perf_counter() - start >= 0.05 * 0.5 + 0.1 * 0.5  # two back-offs, jitter in [0.5, 1)
    assert remote_metrics(results)["reward/remote_retries"] == 2.0


def test_a_4xx_is_not_retried_and_names_the_message(hostile):
    reset_counts()
    results = client(hostile + "/refuse", retries=3)([completion("a")] * 2, [{"answer": "1"}] * 2)
    assert Hostile.state["requests"] == 1
    assert results[0].remote.error == "HTTP 422 (not retried): item 0 field 'row': needs a rubric"
    assert [r.reward for r in results] == [0.0, 0.0] and remote_metrics(results)["reward/remote_failed"] == 2.0


def test_at_most_concurrency_requests_are_in_flight(hostile):
    reset_counts()
    results = client(hostile + "/slow", batch_size=1, concurrency=2)([completion("a")] * 6, [{"answer": "1"}] * 6)
    assert [r.reward for r in results] == [1.0] * 6
    assert Hostile.state["requests"] == 6 and Hostile.state["most_in_flight"] == 2


DIES_ON_SECOND_REQUEST = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    served = 0

    def do_POST(self):
        items = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["items"]
        if Handler.served == 1:
            os._exit(1)  # the process dies with the request read and no answer sent
        Handler.served += 1
        body = json.dumps({"results": [{"reward": 0.25, "correct": False} for _ in items]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def test_a_server_that_dies_mid_batch(tmp_path):
    script = tmp_path / "dies.py"
    script.write_text(textwrap.dedent(DIES_ON_SECOND_REQUEST))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        scorer = client(f"http://127.0.0.1:{port}/v1/score", batch_size=2, concurrency=1, retries=2)
        results = scorer([completion("a")] * 5, [{"answer": "1"}] * 5)  # requests of 2, 2, 1
        assert proc.wait(timeout=5) == 1
    finally:
        proc.kill()
        proc.wait()
    assert [(r.reward, r.reason) for r in results[:2]] == [(0.25, "remote")] * 2  # answered before it died
    assert [(r.reward, r.reason) for r in results[2:]] == [(0.0, FAILED_REASON)] * 3  # the rest: counted, not lost
    assert remote_metrics(results)["reward/remote_failed"] == 3.0
    assert remote_metrics(results)["reward/remote_retries"] == 4.0  # two requests, two retries each
    assert scorer.num_failed == 3
