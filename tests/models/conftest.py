"""Fixtures of the model-helper tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matmuls: one thread is as fast, and immune to oversubscribed CPUs (OpenMP spin-waits)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
