"""The bf16 probe rule (issue 39 item 3) on hand-made vectors: a correct sync passes even when the HF-vs-vLLM
disagreement moves between syncs (it may: a step flips bf16 roundings on either side), a skipped update fails.

Shapes mirror SmolLM2 on a 64-token probe: a disagreement of up to ~0.3 nats per token on identical weights, one
AdamW step at lr 1e-6 moving the probe by a few 1e-3.
"""

from __future__ import annotations

import random

import pytest

from reasonrl.distributed.sync_checks import DifferentialProbe, WeightSyncError

N = 63


def _vec(rng: random.Random, scale: float) -> list[float]:
    return [rng.uniform(-scale, scale) for _ in range(N)]


def _plus(*vectors):
    return [sum(values) for values in zip(*vectors, strict=True)]


def _calibrated(rng: random.Random, disagreement: float = 0.3):
    trainer = [-rng.uniform(0.1, 6.0) for _ in range(N)]
    noise = _vec(rng, disagreement)
    probe = DifferentialProbe(tol=0.1, exact=False)
    engine = _plus(trainer, noise)
    probe.check([engine], trainer, engine_repeat=[engine])
    return probe, trainer, noise


def test_tolerances_come_from_the_first_syncs_disagreement():
    probe, _, noise = _calibrated(random.Random(0))
    assert probe.disagreement == pytest.approx(max(abs(n) for n in noise))
    assert probe.token_tol == pytest.approx(4 * probe.disagreement)
    assert probe.rms_tol == pytest.approx(4 * (sum(n * n for n in noise) / N) ** 0.5)
    # no disagreement at all (same kernels): the configured tolerances are the floor
    exact_twins = DifferentialProbe(tol=0.1, exact=False)
    exact_twins.check([[-1.0, -2.0]], [-1.0, -2.0])
    assert exact_twins.token_tol == 0.1 and exact_twins.rms_tol == pytest.approx(0.01)


def test_correct_syncs_pass_while_the_disagreement_moves_where_the_old_rule_fails():
    """Ten syncs; each redraws the disagreement on every token (as unlucky as the GPU can be: it keeps only its
    size), and the trainer moves by one small step. The old rule (max per-token change difference <= 0.1) fails."""
    rng = random.Random(1)
    probe, trainer, noise = _calibrated(rng)
    old_rule_failures = 0
    for _ in range(10):
        trainer = _plus(trainer, _vec(rng, 0.004))
        new_noise = _vec(rng, 0.3)
        engine = _plus(trainer, new_noise)
        worst = probe.check([engine], trainer)
        assert worst == pytest.approx(max(abs(a - b) for a, b in zip(new_noise, noise, strict=True)))
        old_rule_failures += worst > 0.1
        noise = new_noise
    assert old_rule_failures == 10


def test_a_skipped_update_fails():
    rng = random.Random(2)
    probe, trainer, noise = _calibrated(rng)
    engine = _plus(trainer, noise)
    with pytest.raises(WeightSyncError, match="engine 0 did not change"):
        probe.check([engine], _plus(trainer, _vec(rng, 0.004)))


def test_a_skipped_bucket_fails_once_its_share_exceeds_the_noise():
    """The engine loads all but one bucket: its change lacks that bucket's share, on every token that bucket
    touches. Small disagreement (the tiny model's 0.004), the update several times larger: caught by the RMS."""
    rng = random.Random(3)
    probe, trainer, noise = _calibrated(rng, disagreement=0.004)
    rest, bucket = _vec(rng, 0.01), [rng.uniform(0.02, 0.05) if k % 2 else 0.0 for k in range(N)]
    trainer_1 = _plus(trainer, rest, bucket)
    engine_1 = _plus(trainer, rest, noise)  # the bucket's share never arrived
    assert max(abs(b) for b in bucket) < probe.token_tol  # no single token shows it ...
    with pytest.raises(WeightSyncError, match="engine 0 did not follow the trainer.*bucket not loaded"):
        probe.check([engine_1], trainer_1)  # ... the statistic over the tokens does


def test_a_wrong_load_beyond_the_drift_fails_per_token():
    rng = random.Random(4)
    probe, trainer, noise = _calibrated(rng, disagreement=0.15)  # 4 x 0.15 + the step stays under the 1-nat bound
    trainer_1 = _plus(trainer, _vec(rng, 0.004))
    engine_1 = _plus(trainer_1, noise)
    engine_1[5] += probe.token_tol + 0.05 if noise[5] < 0 else -(probe.token_tol + 0.05)
    assert abs(engine_1[5] - trainer_1[5]) <= 1.0  # under the absolute sanity bound: the per-token rule judges
    with pytest.raises(WeightSyncError, match="changed differently.*first sync's disagreement"):
        probe.check([engine_1], trainer_1)


def test_nan_fails():
    rng = random.Random(5)
    probe, trainer, _ = _calibrated(rng)
    with pytest.raises(WeightSyncError):
        probe.check([[float("nan")] * N], _plus(trainer, _vec(rng, 0.004)))
