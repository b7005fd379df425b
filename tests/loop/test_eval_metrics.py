"""pass@k / avg@k against hand-computed values and the binomial definition; maj@k on hand-made votes."""

import itertools
import math

import pytest

from reasonrl.loop.eval_metrics import (
    answer_vote_key,
    avg_at_k,
    eval_scalars,
    maj_at_k,
    majority_vote,
    pass_at_k,
    summarize_eval,
    vote_keys,
)
from reasonrl.rewards import RewardResult


def binomial_pass_at_k(n, c, k):
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_pass_at_k_hand_computed():
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6


def test_pass_at_k_edges():
    assert pass_at_k(8, 0, 4) == 0.0
    assert pass_at_k(8, 8, 4) == 1.0
    assert pass_at_k(5, 4, 2) == 1.0  # n - c < k: every pair holds a correct one
    assert pass_at_k(3, 1, 3) == 1.0


def test_pass_at_1_is_the_accuracy():
    for n in range(1, 10):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == pytest.approx(c / n)


def test_pass_at_k_matches_binomials_and_enumeration():
    for n, c, k in itertools.product(range(1, 9), range(9), range(1, 9)):
        if c <= n and k <= n:
            assert pass_at_k(n, c, k) == pytest.approx(binomial_pass_at_k(n, c, k), abs=1e-12)
    # brute force over all k-subsets for one case
    n, c, k = 6, 2, 3
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_k_large_n_is_stable():
    value = pass_at_k(1000, 3, 100)
    assert value == pytest.approx(binomial_pass_at_k(1000, 3, 100), rel=1e-12)
    assert 0.0 < value < 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 4, 1), (3, -1, 1), (0, 0, 1), (3, 1, 0)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_pass_at_k_rejects_non_ints():
    with pytest.raises(TypeError):
        pass_at_k(4.0, 1, 1)


def test_avg_at_k():
    assert avg_at_k([[1, 0, 0, 0], [1, 1, 1, 1]]) == pytest.approx((0.25 + 1.0) / 2)
    assert avg_at_k([[True, False], [False, False, False, True]]) == pytest.approx((0.5 + 0.25) / 2)
    with pytest.raises(ValueError):
        avg_at_k([])
    with pytest.raises(ValueError):
        avg_at_k([[1.0], []])


def test_summarize_eval():
    correct = [[True, False, False, False], [False, False, False, False], [True, True, False, True]]
    out = summarize_eval(correct, k=2)
    assert set(out) == {"avg@2", "pass@2", "num_prompts"}
    assert out["num_prompts"] == 3
    assert out["avg@2"] == pytest.approx((0.25 + 0.0 + 0.75) / 3)
    expected_pass = (binomial_pass_at_k(4, 1, 2) + 0.0 + 1.0) / 3  # 0.5, 0, 1
    assert out["pass@2"] == pytest.approx(expected_pass)
    with pytest.raises(ValueError, match="prompt 1"):
        summarize_eval([[True, True], [True]], k=2)
    with pytest.raises(ValueError):
        summarize_eval([], k=1)


def test_eval_scalars_names():
    out = eval_scalars("math500", summarize_eval([[True, False]], k=2))
    assert out == {"eval/math500/avg@2": 0.5, "eval/math500/pass@2": 1.0, "eval/math500/num_prompts": 1.0}
    with pytest.raises(ValueError):
        eval_scalars("a/b", {})


def test_majority_vote_counts_and_breaks_ties_by_the_first_vote():
    assert majority_vote(["7", "8", "8"]) == 1  # "8" wins: its first sample
    assert majority_vote(["7", "8", "8", "7"]) == 0  # 2-2 tie: "7" voted first
    assert majority_vote(["8", "7", "7", "8"]) == 0  # 2-2 tie: "8" voted first
    assert majority_vote([None, "5", None, "6", "6"]) == 3  # None does not vote
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None


def test_maj_at_k_hand_computed():
    answers = [["3", "4", "4"], ["1", "2", "3"], [None, None, "9"], [None, None, None]]
    correct = [[True, False, False], [False, True, True], [False, False, True], [False, False, False]]
    # prompt 0: "4" wins (wrong) -> 0; prompt 1: 3-way tie, "1" voted first (wrong) -> 0;
    # prompt 2: only "9" votes (correct) -> 1; prompt 3: no answer at all -> 0
    assert maj_at_k(answers, correct, 3) == pytest.approx(1 / 4)
    assert maj_at_k([["4", "4", "3"]], [[True, True, False]], 3) == 1.0


def test_maj_at_k_with_more_samples_than_k_uses_disjoint_groups_in_order():
    answers = [["a", "a", "b", "b", "a"]]
    correct = [[True, True, False, False, True]]
    # groups of 2: [a, a] -> correct, [b, b] -> wrong; the 5th sample is left out -> 1/2
    assert maj_at_k(answers, correct, 2) == pytest.approx(0.5)
    assert maj_at_k(answers, correct, 1) == pytest.approx(3 / 5)  # maj@1 is the accuracy
    assert maj_at_k(answers, correct, 5) == 1.0  # a: 3 votes


def test_maj_at_k_rejects_bad_arguments():
    with pytest.raises(ValueError, match="fewer than k"):
        maj_at_k([["a"]], [[True]], 2)
    with pytest.raises(ValueError, match="answers"):
        maj_at_k([["a", "b"]], [[True]], 1)
    with pytest.raises(ValueError, match="no prompts"):
        maj_at_k([], [], 1)
    with pytest.raises(ValueError, match="k >= 1"):
        maj_at_k([["a"]], [[True]], 0)


def test_answer_vote_key_merges_equal_numbers_and_latex_spelling():
    assert answer_vote_key("0.5") == answer_vote_key("\\frac{1}{2}") == answer_vote_key("1/2") == "1/2"
    assert answer_vote_key("\\dfrac{1}{2}") == "1/2"
    assert answer_vote_key("1,000") == answer_vote_key("1000")
    assert answer_vote_key("x + 1") == answer_vote_key("x+1")
    assert answer_vote_key("\\text{Monday}") == "Monday"
    assert answer_vote_key(None) is None and answer_vote_key("  ") is None
    assert answer_vote_key("2") != answer_vote_key("3")


def test_vote_keys_of_scorer_results():
    math = [RewardResult(1.0, True, "correct", extracted="\\frac12"), RewardResult(0.0, False, "no_answer")]
    assert vote_keys(math) == ["1/2", None]
    user = [RewardResult(1.0, True, "user_fn"), RewardResult(0.0, False, "user_fn")]
    assert vote_keys(user) is None  # a user reward function extracts no answers: no maj@k


def test_summarize_eval_adds_maj_at_k_with_answers():
    correct = [[True, False], [False, False]]
    out = summarize_eval(correct, k=2, per_prompt_answers=[["1", "2"], [None, None]])
    assert out["maj@2"] == pytest.approx(0.5)  # prompt 0: tie -> "1" (correct); prompt 1: no votes
    assert set(out) == {"avg@2", "pass@2", "maj@2", "num_prompts"}
    assert "maj@2" not in summarize_eval(correct, k=2)
