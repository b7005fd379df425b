"""pass@k / avg@k against hand-computed values and the binomial definition."""

import itertools
import math

import pytest

from reasonrl.eval_metrics import avg_at_k, eval_scalars, pass_at_k, summarize_eval


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
