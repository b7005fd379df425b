"""``reasonrl.loop.forward_stream``: chunk boundaries that depend only on the samples, chunks launched as they fill
(streaming) or all at the end, outputs assembled in sample order. ``run_chunk`` is a fake here (a unit test of the
logic around the workers); tests/loop/test_trainer_split_placement.py and test_trainer_features.py run it on real
DeepSpeed workers."""

from __future__ import annotations

import asyncio

import pytest
import torch

from reasonrl.dataplane.completion import Completion
from reasonrl.loop.forward_stream import ChunkLaunch, ForwardChunks, concat_padded, covered_seconds, sample_tokens


def completion(i: int, prompt_len: int = 3, response_len: int = 2) -> Completion:
    return Completion(
        prompt_index=i,
        sample_index=0,
        prompt_token_ids=[1] * prompt_len,
        token_ids=list(range(10 * i, 10 * i + response_len)),
        text="",
        finish_reason="stop",
    )


def cut(token_counts: list[int], chunk_tokens: int | None) -> list[list[int]]:
    """The chunks (sample indices) ForwardChunks cuts samples of these token counts into."""
    run_chunk = RecordingChunks()
    samples = [completion(i, prompt_len=n - 1, response_len=1) for i, n in enumerate(token_counts)]
    asyncio.run(ForwardChunks(run_chunk, chunk_tokens, ChunkLaunch.CONCURRENT).finish(samples))
    return run_chunk.chunks


def test_chunks_hold_at_most_the_budget():
    assert cut([5, 5, 5, 5, 5], 10) == [[0, 1], [2, 3], [4]]  # exactly full: closed at once
    assert cut([4, 5, 6, 4, 5, 6], 10) == [[0, 1], [2, 3], [4], [5]]  # closed before overflowing
    assert cut([3, 12, 1, 9, 1], 10) == [[0], [1], [2, 3], [4]]  # an oversized sample: alone
    assert cut([5, 5], None) == [[0, 1]] == cut([5, 5], 0)
    assert cut([], 10) == []
    assert sample_tokens(completion(0, prompt_len=7, response_len=4)) == 11


def test_concat_padded_and_covered_seconds():
    out = concat_padded([torch.ones(2, 3), 2 * torch.ones(1, 1)], width=4)
    assert out.tolist() == [[1, 1, 1, 0], [1, 1, 1, 0], [2, 0, 0, 0]]
    # the union of (0, 2), (1, 3), (5, 6) clipped at 5.5: 3 + 0.5
    assert covered_seconds([(1.0, 3.0), (0.0, 2.0), (5.0, 6.0)], until=5.5) == pytest.approx(3.5)
    assert covered_seconds([(4.0, 6.0)], until=3.0) == 0.0


class RecordingChunks:
    """run_chunk: per role, each sample's response token ids as floats (so rows are checkable), padded to the
    chunk's longest response; records which samples each chunk held and when it ran."""

    def __init__(self):
        self.chunks: list[list[int]] = []
        self.running = 0
        self.most_at_once = 0

    async def __call__(self, samples):
        self.chunks.append([c.prompt_index for c in samples])
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        await asyncio.sleep(0.01)
        self.running -= 1
        width = max(len(c.token_ids) for c in samples)
        rows = [torch.tensor(c.token_ids + [0] * (width - len(c.token_ids)), dtype=torch.float32) for c in samples]
        out = torch.stack(rows)
        return {"policy": out, "ref": -out, "critic": None}


def test_streamed_chunks_start_as_they_fill_and_assemble_in_sample_order():
    samples = [completion(i, response_len=1 + i % 3) for i in range(7)]  # 4-6 tokens each

    async def run():
        run_chunk = RecordingChunks()
        chunks = ForwardChunks(run_chunk, chunk_tokens=10, launch=ChunkLaunch.STREAMED)
        chunks.add(samples[:2])  # 4 + 5 tokens: not full
        await asyncio.sleep(0)
        assert run_chunk.chunks == []
        chunks.add(samples[2:3])  # 6 more would overflow: chunk [0, 1] launched before the rollout ends
        await asyncio.sleep(0)
        assert run_chunk.chunks == [[0, 1]]
        chunks.add(samples[3:5])  # 6 + 4 = 10: [2, 3] exactly full
        out = await chunks.finish(samples)  # samples 5, 6 added now
        return run_chunk, chunks, out

    run_chunk, chunks, out = asyncio.run(run())
    assert run_chunk.chunks == [[0, 1], [2, 3], [4], [5, 6]]  # 5 + 6 would overflow, 6 + 4 is exactly full
    assert cut([sample_tokens(c) for c in samples], 10) == run_chunk.chunks  # the same cut as unstreamed
    assert chunks.num_chunks == 4 and len(chunks.spans) == 4 and chunks.launched_early == 2  # [5, 6] at finish
    logged = chunks.metrics(generated_at=float("inf"))
    assert logged["perf/forward_chunks"] == 4.0 and logged["perf/forward_chunks_early"] == 2.0
    assert logged["time/forward_overlapped"] == pytest.approx(covered_seconds(chunks.spans, until=float("inf")))
    width = max(len(c.token_ids) for c in samples)
    expected = concat_padded([torch.tensor([c.token_ids], dtype=torch.float32) for c in samples], width)
    assert torch.equal(out["policy"], expected) and torch.equal(out["ref"], -expected)
    assert out["critic"] is None
    # the same cut without streaming: chunk boundaries never depend on timing
    unstreamed = RecordingChunks()
    same = asyncio.run(ForwardChunks(unstreamed, 10, ChunkLaunch.CONCURRENT).finish(samples))
    assert unstreamed.chunks == run_chunk.chunks and torch.equal(same["policy"], out["policy"])


def test_sequential_chunks_run_one_at_a_time_concurrent_ones_together():
    run_chunk = RecordingChunks()
    samples = [completion(i) for i in range(6)]
    asyncio.run(ForwardChunks(run_chunk, 5, ChunkLaunch.SEQUENTIAL).finish(samples))
    assert len(run_chunk.chunks) == 6 and run_chunk.most_at_once == 1
    concurrent = RecordingChunks()
    asyncio.run(ForwardChunks(concurrent, 5, ChunkLaunch.CONCURRENT).finish(samples))
    assert concurrent.most_at_once > 1


def test_samples_streamed_must_be_the_steps_first_samples():
    samples = [completion(i) for i in range(3)]

    async def run():
        chunks = ForwardChunks(RecordingChunks(), 100, ChunkLaunch.STREAMED)
        chunks.add([samples[1]])
        try:
            await chunks.finish(samples)
        finally:
            await chunks.close()

    with pytest.raises(RuntimeError, match="not the first"):
        asyncio.run(run())


def test_close_waits_for_launched_chunks_and_swallows_their_errors():
    finished = []

    async def failing(samples):
        await asyncio.sleep(0.01)
        finished.append(len(samples))
        raise RuntimeError("worker died")

    async def run():
        chunks = ForwardChunks(failing, 1, ChunkLaunch.STREAMED)
        chunks.add([completion(0), completion(1)])
        await chunks.close()  # the step was abandoned: wait for what is queued, drop its errors

    asyncio.run(run())
    assert finished == [1, 1]
