"""``python -m reasonrl.reward_server``'s rules (those of the agent gateway): it binds loopback unless told, needs a
shared secret (401 without it), names the item index and field of a malformed item (400), caps a request's items
(413), answers its health check while a slow batch is scored, and serves the code sandbox; started in this process
on a free port, plus the command line itself in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from reasonrl.dataplane.completion import Completion
from reasonrl.reward_server import RewardServer, RewardService, ServerRefused, build_reward, check_start
from reasonrl.rewards.remote import RemoteScorer, RemoteSettings

FIXTURE = Path(__file__).parent / "fixtures" / "remote_rewards.py"
SECRET = "server-secret-42"
AUTH = {"Authorization": f"Bearer {SECRET}"}


def completion(text: str) -> Completion:
    return Completion(0, 0, [1], [7] * 2, text, "stop")


ITEM = {"response": "abc", "answer": "1", "data_source": None, "finish_reason": "stop", "response_length": 3, "row": {}}


@pytest.fixture(scope="module")
def server():
    service = RewardService(build_reward(f"{FIXTURE}:vowel_fraction"), kind="fn", secret=SECRET, max_items=4)
    srv = RewardServer(service, port=0).start()
    yield srv
    srv.stop()


def post(server, body, headers=AUTH, **kw):
    return httpx.post(server.url, json=body, headers=headers, timeout=10, **kw)


def test_a_good_request_is_answered_in_order(server):
    items = [ITEM | {"response": "ae"}, ITEM | {"response": "zz"}]
    answer = post(server, {"version": 1, "items": items})
    assert answer.status_code == 200
    assert answer.json() == {
        "version": 1,
        "results": [
            {"reward": 1.0, "correct": True, "info": {"reason": "user_fn"}},
            {"reward": 0.0, "correct": False, "info": {"reason": "user_fn"}},
        ],
    }


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": SECRET}])
def test_a_missing_or_wrong_secret_is_401(server, headers):
    answer = post(server, {"items": [ITEM]}, headers=headers)
    assert answer.status_code == 401
    assert "missing or wrong secret" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("items", "index", "field", "words"),
    [
        ([ITEM, ITEM | {"response_length": "3"}], 1, "response_length", "must be an integer >= 0, got str"),
        ([ITEM, ITEM, ITEM | {"response": None}], 2, "response", "must be a string, got NoneType"),
        ([{k: v for k, v in ITEM.items() if k != "finish_reason"}], 0, "finish_reason", "is missing"),
        ([ITEM | {"row": [1]}], 0, "row", "must be an object, got list"),
        ([ITEM | {"reward": 1}], 0, None, "unknown field(s) ['reward']"),
        (["text"], 0, None, "is a JSON str, not an object"),
    ],
)
def test_a_malformed_item_is_400_naming_index_and_field(server, items, index, field, words):
    answer = post(server, {"items": items})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["index"], error["field"]) == (index, field)
    assert error["message"].startswith(f"item {index}") and words in error["message"], error


def test_a_body_that_is_not_the_protocol_is_400(server):
    assert post(server, None, content=b"{not json").status_code == 400
    answer = post(server, {"version": 2, "items": [ITEM]})
    assert answer.status_code == 400 and "protocol version 2" in answer.json()["error"]["message"]
    assert post(server, {"items": {"a": 1}}).json()["error"]["field"] == "items"


def test_too_many_items_is_413(server):
    answer = post(server, {"items": [ITEM] * 5})
    assert answer.status_code == 413
    assert answer.json()["error"]["message"].startswith("5 items in one request; this server takes at most 4")
    # the client cuts its batches to fit: reward_url_batch_size
    results = RemoteScorer(RemoteSettings(server.url, batch_size=4, secret=SECRET))(
        [completion("a")] * 9, [{"answer": "1"}] * 9
    )
    assert [r.reward for r in results] == [1.0] * 9


def test_health_answers_while_a_slow_batch_is_scored(server):
    slow = threading.Thread(target=post, args=(server, {"items": [ITEM | {"response": "slow:1.0"}]}))
    slow.start()
    time.sleep(0.2)
    start = time.perf_counter()
    health = httpx.get(server.url.replace("/v1/score", "/health"), timeout=5)
    took = time.perf_counter() - start
    assert slow.is_alive() and health.json() == {"status": "ok", "reward": "fn", "version": 1}
    assert took < 0.5, took
    slow.join()


def test_start_refusals():
    env = {"REASONRL_REWARD_SECRET": "x"}
    with pytest.raises(ServerRefused, match="listens beyond this machine.*--allow-remote"):
        check_start("0.0.0.0", allow_remote=False, no_auth=False, secret_env="REASONRL_REWARD_SECRET", environ=env)
    with pytest.raises(ServerRefused, match="--no-auth is for loopback addresses only"):
        check_start("0.0.0.0", allow_remote=True, no_auth=True, secret_env="REASONRL_REWARD_SECRET", environ=env)
    with pytest.raises(ServerRefused, match="no secret: export MY_KEY="):
        check_start("127.0.0.1", allow_remote=False, no_auth=False, secret_env="MY_KEY", environ=env)
    assert check_start("0.0.0.0", allow_remote=True, no_auth=False, secret_env="REASONRL_REWARD_SECRET", environ=env)
    assert check_start("::1", allow_remote=False, no_auth=True, secret_env="NOPE", environ={}) is None
    with pytest.raises(ServerRefused, match="--reward 'mathh': use one of math, exact_match, code"):
        build_reward("mathh")


def test_the_code_sandbox_is_served():
    scorer = build_reward("code", {"code_workers": "1", "code_test_timeout_s": "2"})
    service = RewardService(scorer, kind="code", secret=SECRET)
    srv = RewardServer(service, port=0).start()
    try:
        tests = {"fn_name": "add", "inputs": [[1, 2], [5, 7]], "outputs": [3, 12]}
        good = "```python\ndef add(a, b):\n    return a + b\n```"
        items = [
            ITEM | {"response": good, "row": {"tests": tests}},
            ITEM | {"response": "none", "row": {"tests": tests}},
        ]
        answer = post(srv, {"items": items}).json()["results"]
        assert (answer[0]["reward"], answer[0]["correct"]) == (1.0, True)
        info = answer[0]["info"]
        assert (info["reason"], info["code_status"], info["tests_passed"], info["tests_total"]) == (
            "correct",
            "passed",
            2,
            2,
        )
        assert "return a + b" in info["extracted"]  # the program the sandbox ran
        assert (answer[1]["reward"], answer[1]["correct"], answer[1]["info"]["tests_passed"]) == (0.0, False, 0)
        missing = post(srv, {"items": [ITEM, ITEM | {"row": {"id": 3}}]})
        assert missing.status_code == 400 and missing.json()["error"]["field"] == "row.tests"
        assert missing.json()["error"]["message"].startswith("item 0 field 'row.tests': is missing")
    finally:
        srv.stop()
        service.close()


def test_the_command_line_serves_and_refuses(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "REASONRL_REWARD_SECRET"}
    command = [sys.executable, "-m", "reasonrl.reward_server", "--reward", "exact_match", "--port", "0"]
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "reward_server: no secret: export REASONRL_REWARD_SECRET=" in refused.stderr
    served = env | {"REASONRL_REWARD_SECRET": SECRET}
    proc = subprocess.Popen([*command, "extract_mode=boxed"], env=served, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("reward_server: exact_match at http://127.0.0.1:"), line
        url = line.split(" at ")[1].split()[0]
        results = RemoteScorer(RemoteSettings(url, secret=SECRET))(
            [completion("\\boxed{Yes}"), completion("<answer>yes</answer>")], [{"answer": "yes"}] * 2
        )
        assert [r.reward for r in results] == [1.0, 0.0]  # extract_mode=boxed reached the served reward
    finally:
        proc.terminate()
        proc.wait(timeout=10)
