"""One verification pool for the whole test session (worker start-up is paid once)."""

from __future__ import annotations

import pytest

from reasonrl.rewards import RewardVerifier


@pytest.fixture(scope="session")
def verifier():
    with RewardVerifier(num_workers=2, timeout_s=5.0) as v:
        yield v
