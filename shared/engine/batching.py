"""Iteration-level continuous batching with a paged KV cache, as vLLM's v1 scheduler does it.

One call to :meth:`ContinuousBatcher.schedule` plans and runs one iteration:

1. Running sequences, oldest first, each get their remaining known tokens (one for a
   decode, the rest of a prompt chunk otherwise) within the token budget. A sequence that
   needs a new KV block when none is free evicts the newest running sequence (recompute
   preemption: its blocks are freed and it returns to the *front* of the waiting queue,
   to re-prefill its prompt and the tokens it already generated).
2. If nothing was preempted, waiting sequences are admitted FCFS while the token budget,
   ``max_num_seqs`` and free blocks allow; a long prompt is split into chunks.
3. A sequence whose known tokens are all computed samples one new token; a sequence
   that reached its output length finishes and frees its blocks.

Per iteration the work is O(running) with no per-token objects. This is the *reference*
scheduler; the engine runs :class:`~shared.engine.fast_batching.DecodeGroupBatcher`, which
makes the same decisions with O(1) work per decoding sequence group (tests prove them equal).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["BatchStep", "ContinuousBatcher", "Sequence"]


class Sequence:
    """Mutable per-request state (one object per request, never per token)."""

    __slots__ = (
        "arrival_s",
        "blocks",
        "computed",
        "generated",
        "join_order",
        "joined_tick",
        "output",
        "prompt",
        "request_id",
    )

    def __init__(self, request_id: str, prompt: int, output: int, arrival_s: float) -> None:
        """Create the state of a request that has not started."""
        self.request_id = request_id
        self.prompt = prompt
        self.output = output
        self.arrival_s = arrival_s
        self.computed = 0
        """Tokens whose keys and values are in the KV cache."""
        self.generated = 0
        """Output tokens emitted so far (each exactly once, preemption notwithstanding)."""
        self.blocks = 0
        self.joined_tick = -1
        """Decode tick at which :class:`~shared.engine.fast_batching.DecodeGroupBatcher` last
        wrote ``computed`` and ``generated``; -1 when they are current (not in its group)."""
        self.join_order = 0
        """Position in the decode group (running order), for ordering finished ids."""


@dataclass(frozen=True, slots=True)
class BatchStep:
    """What one scheduled iteration contains, for the cost model and the caller."""

    prefill_tokens: int
    decode_seqs: int
    attention_pairs: float
    kv_read_tokens: int
    emitted: tuple[str, ...]
    finished: tuple[str, ...]
    preempted: tuple[str, ...]


class ContinuousBatcher:
    """Waiting queue, running set and KV block pool of one engine instance."""

    __slots__ = (
        "_all_decoding",
        "_block_size",
        "_by_id",
        "_free_blocks",
        "_max_seqs",
        "_running",
        "_running_ids",
        "_token_budget",
        "_total_blocks",
        "_waiting",
    )

    def __init__(
        self, *, total_blocks: int, block_size: int, max_num_seqs: int, max_num_batched_tokens: int
    ) -> None:
        """Create an empty batcher over ``total_blocks`` KV blocks of ``block_size`` tokens."""
        self._total_blocks = total_blocks
        self._free_blocks = total_blocks
        self._block_size = block_size
        self._max_seqs = max_num_seqs
        self._token_budget = max_num_batched_tokens
        self._running: list[Sequence] = []
        self._waiting: deque[Sequence] = deque()
        self._by_id: dict[str, Sequence] = {}
        self._running_ids: tuple[str, ...] | None = None
        self._all_decoding = False

    @property
    def total_blocks(self) -> int:
        """KV blocks in the pool."""
        return self._total_blocks

    @property
    def used_blocks(self) -> int:
        """KV blocks held by running sequences."""
        return self._total_blocks - self._free_blocks

    @property
    def num_running(self) -> int:
        """Sequences holding KV blocks."""
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Sequences queued, preempted ones included."""
        return len(self._waiting)

    def running(self) -> tuple[Sequence, ...]:
        """Running sequences, oldest first (for inspection and tests)."""
        return tuple(self._running)

    def max_tokens_that_fit(self) -> int:
        """Largest KV footprint, in tokens, one sequence can ever hold."""
        return self._total_blocks * self._block_size

    def add(self, sequence: Sequence) -> None:
        """Queue ``sequence`` at the back of the waiting queue.

        Raises:
            ValueError: when the id is already known, or the sequence can never fit: its
                largest KV footprint (prompt + output − 1 tokens) exceeds the whole pool.
        """
        if sequence.request_id in self._by_id:
            raise ValueError(f"duplicate request id {sequence.request_id!r}")
        if sequence.prompt < 1 or sequence.output < 1:
            raise ValueError("prompt_tokens and output_tokens must be >= 1")
        peak = sequence.prompt + sequence.output - 1
        if peak > self.max_tokens_that_fit():
            raise ValueError(
                f"request {sequence.request_id!r} needs {peak} KV tokens; "
                f"the cache holds {self.max_tokens_that_fit()}"
            )
        self._by_id[sequence.request_id] = sequence
        self._waiting.append(sequence)

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is; returns whether it was known."""
        sequence = self._by_id.pop(request_id, None)
        if sequence is None:
            return False
        if sequence.blocks:
            self._running.remove(sequence)
            self._running_ids = None
            self._free_blocks += sequence.blocks
            sequence.blocks = 0
        else:
            self._waiting.remove(sequence)
        return True

    def _preempt_newest(self) -> Sequence:
        victim = self._running.pop()
        self._free_blocks += victim.blocks
        victim.blocks = 0
        victim.computed = 0
        self._waiting.appendleft(victim)
        return victim

    def schedule(self) -> BatchStep | None:
        """Plan and run one iteration; ``None`` when nothing can be scheduled."""
        running = self._running
        if (
            self._all_decoding
            and running
            and (not self._waiting or len(running) >= self._max_seqs)
            and len(running) <= self._token_budget
        ):
            step = self._decode_only()
            if step is not None:
                return step
        step = self._schedule_general()
        # A step leaves every survivor decoding unless a prompt chunk is still unfinished
        # (one prompt token left with nothing generated yet is still a prefill chunk).
        self._all_decoding = all(
            s.generated and s.computed == s.prompt + s.generated - 1 for s in self._running
        )
        return step

    def _decode_only(self) -> BatchStep | None:
        """Steady-state fast path: every running sequence decodes one token, no admission.

        Returns ``None`` (changing nothing) when the new blocks would not fit, so that the
        general path handles preemption.
        """
        bs = self._block_size
        running = self._running
        # A decode needs at most one new block per sequence, so the exact count is only
        # worth computing when the pool is nearly full.
        if len(running) > self._free_blocks:
            need = sum(1 for seq in running if seq.computed % bs == 0)
            if need > self._free_blocks:
                return None
        context = 0
        new_blocks = 0
        finished: list[Sequence] = []
        for seq in running:
            computed = seq.computed
            if computed % bs == 0:
                seq.blocks += 1
                new_blocks += 1
            computed += 1
            seq.computed = computed
            context += computed
            generated = seq.generated + 1
            seq.generated = generated
            if generated >= seq.output:
                finished.append(seq)
        self._free_blocks -= new_blocks
        emitted = self._running_ids
        if emitted is None or len(emitted) != len(running):
            emitted = self._running_ids = tuple(seq.request_id for seq in running)
        if finished:
            self._release(finished)
        return BatchStep(
            prefill_tokens=0,
            decode_seqs=len(emitted),
            attention_pairs=float(context),
            kv_read_tokens=context,
            emitted=emitted,
            finished=tuple(seq.request_id for seq in finished),
            preempted=(),
        )

    def _release(self, finished: list[Sequence]) -> None:
        done = {id(seq) for seq in finished}
        keep: list[Sequence] = []
        for seq in self._running:
            if id(seq) in done:
                self._free_blocks += seq.blocks
                seq.blocks = 0
                del self._by_id[seq.request_id]
            else:
                keep.append(seq)
        self._running[:] = keep
        self._running_ids = None

    def _schedule_general(self) -> BatchStep | None:
        self._running_ids = None
        budget = self._token_budget
        bs = self._block_size
        scheduled: list[tuple[Sequence, int]] = []
        preempted: list[str] = []
        running = self._running
        index = 0
        while index < len(running) and budget > 0:
            seq = running[index]
            n = seq.prompt + seq.generated - seq.computed
            if n > budget:
                n = budget
            need = -(-(seq.computed + n) // bs) - seq.blocks
            evicted_self = False
            while need > self._free_blocks:
                victim = self._preempt_newest()
                preempted.append(victim.request_id)
                if victim is seq:
                    evicted_self = True
                    break
            if evicted_self:
                break
            self._free_blocks -= need
            seq.blocks += need
            scheduled.append((seq, n))
            budget -= n
            index += 1
        if not preempted:
            waiting = self._waiting
            while waiting and budget > 0 and len(running) < self._max_seqs:
                seq = waiting[0]
                n = seq.prompt + seq.generated
                if n > budget:
                    n = budget
                need = -(-n // bs)
                if need > self._free_blocks:
                    break
                waiting.popleft()
                self._free_blocks -= need
                seq.blocks = need
                running.append(seq)
                scheduled.append((seq, n))
                budget -= n
        if not scheduled:
            return None
        return self._execute(scheduled, preempted)

    def _execute(self, scheduled: list[tuple[Sequence, int]], preempted: list[str]) -> BatchStep:
        prefill_tokens = 0
        decode_seqs = 0
        pairs = 0.0
        kv_read = 0
        emitted: list[str] = []
        finished: list[str] = []
        finished_seqs: list[Sequence] = []
        for seq, n in scheduled:
            offset = seq.computed
            if n == 1 and seq.generated and offset == seq.prompt + seq.generated - 1:
                decode_seqs += 1
                pairs += offset + 1
            else:
                prefill_tokens += n
                pairs += n * (offset + 0.5 * n)
            kv_read += offset + n
            seq.computed = offset + n
            if seq.computed == seq.prompt + seq.generated:
                seq.generated += 1
                emitted.append(seq.request_id)
                if seq.generated >= seq.output:
                    finished.append(seq.request_id)
                    finished_seqs.append(seq)
        if finished:
            self._release(finished_seqs)
        return BatchStep(
            prefill_tokens=prefill_tokens,
            decode_seqs=decode_seqs,
            attention_pairs=pairs,
            kv_read_tokens=kv_read,
            emitted=tuple(emitted),
            finished=tuple(finished),
            preempted=tuple(preempted),
        )
