"""The reference scheduler's decisions at O(1) Python work per decoding sequence.

:class:`DecodeGroupBatcher` makes exactly the decisions of
:class:`~shared.engine.batching.ContinuousBatcher` (same order, same KV blocks, same emitted,
finished and preempted ids, same attention pairs), but it keeps the sequences that are
decoding as one *group* with batched integer counters instead of touching each of them
every iteration:

- Every group member decodes one token per iteration, so after ``t`` group iterations
  (the group *tick*) a member that joined at tick ``t0`` with ``computed = c`` holds
  ``c + t − t0`` KV tokens. Only ``base = c − t0`` is stored, once, at join time.
- The context summed over the group is ``Σ base + n·t`` (one running sum).
- A member needs a new KV block when its computed count is a multiple of the block size,
  i.e. when ``base ≡ −t (mod block_size)``: a histogram of ``base mod block_size`` gives the
  number of new blocks of an iteration with one lookup.
- A member finishes at tick ``t0 + output − generated``: members are bucketed by that tick,
  so an iteration looks up one bucket.

The group is always a prefix of the running order (sequences join it when their prefill
completes, in running order; at most a partially prefilled tail is handled one by one).
When an iteration would preempt, or the group exceeds the token budget, the group's
counters are written back into the sequences and the reference scheduler runs that
iteration (rare: only under KV pressure).
"""

from __future__ import annotations

from shared.engine.batching import BatchStep, ContinuousBatcher, Sequence
from shared.engine.costs import DecodePricing

__all__ = ["DecodeGroupBatcher"]


def _is_decoding(seq: Sequence) -> bool:
    return bool(seq.generated) and seq.computed == seq.prompt + seq.generated - 1


class DecodeGroupBatcher(ContinuousBatcher):
    """:class:`ContinuousBatcher` with the decoding sequences advanced as one group."""

    __slots__ = ("_base_sum", "_finish_at", "_group", "_group_ids", "_joins", "_residues",
                 "_tail", "_tick")  # fmt: skip

    def __init__(
        self, *, total_blocks: int, block_size: int, max_num_seqs: int, max_num_batched_tokens: int
    ) -> None:
        """Create an empty batcher over ``total_blocks`` KV blocks of ``block_size`` tokens."""
        super().__init__(
            total_blocks=total_blocks,
            block_size=block_size,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
        )
        self._group: dict[str, Sequence] = {}
        """Decoding sequences in running order (a prefix of the running set)."""
        self._group_ids: tuple[str, ...] | None = None
        self._tail: list[Sequence] = []
        """Running sequences after the group (a prompt still being prefilled)."""
        self._tick = 0
        self._base_sum = 0
        self._residues = [0] * block_size
        self._finish_at: dict[int, list[Sequence]] = {}
        self._joins = 0

    @property
    def num_running(self) -> int:
        """Sequences holding KV blocks."""
        return len(self._group) + len(self._tail)

    def running(self) -> tuple[Sequence, ...]:
        """Running sequences, oldest first, with their counters brought up to date."""
        self._materialise()
        sequences = tuple(self._running)
        self._regroup()
        return sequences

    def abort(self, request_id: str) -> bool:
        """Drop a request wherever it is; returns whether it was known."""
        seq = self._by_id.pop(request_id, None)
        if seq is None:
            return False
        if request_id in self._group:
            self._finish_at[seq.joined_tick + seq.output - seq.generated].remove(seq)
            self._leave(seq)
        elif seq.blocks:
            self._tail.remove(seq)
            self._free_blocks += seq.blocks
            seq.blocks = 0
        else:
            self._waiting.remove(seq)
        return True

    def _join(self, seq: Sequence) -> None:
        tick = self._tick
        seq.joined_tick = tick
        seq.join_order = self._joins
        self._joins += 1
        base = seq.computed - tick
        self._residues[base % self._block_size] += 1
        self._base_sum += base
        finish = tick + seq.output - seq.generated
        bucket = self._finish_at.get(finish)
        if bucket is None:
            self._finish_at[finish] = [seq]
        else:
            bucket.append(seq)
        self._group[seq.request_id] = seq
        self._group_ids = None

    def _leave(self, seq: Sequence) -> None:
        """Take ``seq`` out of the group and free its blocks (finish or abort)."""
        base = seq.computed - seq.joined_tick
        bs = self._block_size
        self._residues[base % bs] -= 1
        self._base_sum -= base
        del self._group[seq.request_id]
        self._group_ids = None
        delta = self._tick - seq.joined_tick
        seq.computed += delta
        seq.generated += delta
        seq.joined_tick = -1
        self._free_blocks += -(-seq.computed // bs)
        seq.blocks = 0

    def _materialise(self) -> None:
        """Write the group's counters back; ``_running`` becomes the whole running set."""
        tick = self._tick
        bs = self._block_size
        running = list(self._group.values())
        for seq in running:
            delta = tick - seq.joined_tick
            seq.computed += delta
            seq.generated += delta
            seq.blocks = -(-seq.computed // bs)
            seq.joined_tick = -1
        running.extend(self._tail)
        self._running = running
        self._group = {}
        self._group_ids = None
        self._tail = []
        self._base_sum = 0
        self._residues = [0] * bs
        self._finish_at = {}

    def _regroup(self) -> None:
        """Rebuild the group from ``_running``: its longest prefix of decoding sequences."""
        running = self._running
        index = 0
        while index < len(running) and _is_decoding(running[index]):
            self._join(running[index])
            index += 1
        self._tail = running[index:]
        self._running = []

    def _finish_members(self, members: list[Sequence]) -> tuple[str, ...]:
        if len(members) > 1:
            members.sort(key=lambda seq: seq.join_order)
        for seq in members:
            self._leave(seq)
            del self._by_id[seq.request_id]
        return tuple(seq.request_id for seq in members)

    def decode_step(self) -> BatchStep | None:
        """Run the iteration if the reference would only decode the group; else ``None``.

        ``None`` changes nothing: there is a tail to prefill, a waiting request would be
        admitted, a block is missing (preemption) or the group exceeds the token budget.
        """
        n = len(self._group)
        if not n or self._tail or n > self._token_budget:
            return None
        bs = self._block_size
        tick = self._tick
        free = self._free_blocks - self._residues[-tick % bs]
        if free < 0:
            return None
        waiting = self._waiting
        if waiting and n < self._max_seqs and n < self._token_budget:
            first = waiting[0]
            tokens = min(first.prompt + first.generated, self._token_budget - n)
            if -(-tokens // bs) <= free:
                return None
        self._free_blocks = free
        tick += 1
        self._tick = tick
        context = self._base_sum + n * tick
        emitted = self._group_ids
        if emitted is None:
            emitted = self._group_ids = tuple(self._group)
        members = self._finish_at.pop(tick, None)
        finished = self._finish_members(members) if members else ()
        return BatchStep(0, n, float(context), context, emitted, finished, ())

    def fast_forward(
        self,
        pricing: DecodePricing,
        gpus: int,
        max_steps: int,
        now_s: float,
        until_s: float,
        energy_j: float,
        out: tuple[list[float], list[float], list[float], list[int]],
    ) -> tuple[float, float, tuple[str, ...]]:
        """Run up to ``max_steps`` more pure-decode iterations of the current group, priced.

        Does exactly what repeated :meth:`decode_step` calls priced by ``cost_of`` would do
        (same float operations in the same order), with the bookkeeping and the cost model
        fused in one loop. Stops before an iteration that is not a pure decode, after one
        that finishes a request, after ``max_steps``, or once ``now_s >= until_s``. Appends
        each iteration's duration, energy, power (all ``gpus``) and KV blocks in use to
        ``out`` and returns the new engine time, energy counter and the finished ids.
        """
        n = len(self._group)
        if not n or self._tail or n > self._token_budget:
            return now_s, energy_j, ()
        bs = self._block_size
        # Admission needs that many free blocks; free blocks only fall during a pure-decode
        # run, so checking against this fixed threshold is the reference's admission test.
        admit_at = self._total_blocks + 1
        waiting = self._waiting
        if waiting and n < self._max_seqs and n < self._token_budget:
            first = waiting[0]
            admit_at = -(-min(first.prompt + first.generated, self._token_budget - n) // bs)
        durations, energies, powers, kv_used = out
        residues, finish_at, base_sum = self._residues, self._finish_at, self._base_sum
        (linear, attention, flop_rate, s, weights, kv_bytes, mem_rate, slowdown, p, kernels,
         token_time, token_kernel_time, host, allreduce, idle_w, active_w, dyn, busy_w,
         compute_w, memory_w, mem_share, tdp_w) = (
            pricing.linear_flops, pricing.attention_flops_per_pair, pricing.flop_rate,
            pricing.s, pricing.weight_bytes, pricing.kv_bytes_per_token, pricing.mem_rate,
            pricing.slowdown, pricing.sharpness, pricing.kernel_layers_at_s,
            pricing.token_time, pricing.token_kernel_time, pricing.host_fixed_s,
            pricing.allreduce_s, pricing.idle_w, pricing.active_w, pricing.dyn,
            pricing.busy_w, pricing.compute_w, pricing.memory_w, pricing.mem_power_share,
            pricing.tdp_w)  # fmt: skip
        tick = self._tick
        free = self._free_blocks
        total = self._total_blocks
        finished: tuple[str, ...] = ()
        for _ in range(max_steps):
            left = free - residues[-tick % bs]
            if left < 0 or left >= admit_at:
                break
            free = left
            tick += 1
            context = base_sum + n * tick
            members = finish_at.pop(tick, None)
            if members:
                self._free_blocks, self._tick = free, tick
                finished = self._finish_members(members)
                free = self._free_blocks
            # CostModel.cost_of(0, n, float(context), context, n, clock), operation for operation.
            compute_s = (linear + attention * float(context)) / flop_rate / s
            memory_full = (weights + kv_bytes * context) / mem_rate
            memory_s = memory_full * slowdown
            kernels_s = (compute_s**p + memory_s**p) ** (1.0 / p) + kernels
            duration = kernels_s + token_time + host
            kernels_s += token_kernel_time
            if allreduce:
                duration += allreduce
                kernels_s += allreduce
            power = (idle_w + active_w * (kernels_s / duration)
                     + dyn * (busy_w + compute_w * (compute_s / duration))
                     + memory_w * (memory_full / duration) * mem_share)  # fmt: skip
            power = min(power, tdp_w) * gpus
            energy = power * duration
            now_s += duration
            energy_j += energy
            durations.append(duration)
            energies.append(energy)
            powers.append(power)
            kv_used.append(total - free)
            if finished or now_s >= until_s:
                break
        self._free_blocks, self._tick = free, tick
        return now_s, energy_j, finished

    def schedule(self) -> BatchStep | None:
        """Plan and run one iteration; ``None`` when nothing can be scheduled."""
        step = self.decode_step()
        if step is not None:
            return step
        return self.schedule_mixed()

    def schedule_mixed(self) -> BatchStep | None:
        """Plan and run one iteration, given that :meth:`decode_step` just declined it."""
        n = len(self._group)
        budget = self._token_budget - n
        if budget < 0:
            return self._reference_step()
        bs = self._block_size
        free = self._free_blocks - (self._residues[-self._tick % bs] if n else 0)
        if free < 0:
            return self._reference_step()
        plan: list[tuple[Sequence, int, int]] = []
        tail = self._tail
        for seq in tail:
            if budget <= 0:
                break
            tokens = min(seq.prompt + seq.generated - seq.computed, budget)
            new_blocks = -(-(seq.computed + tokens) // bs) - seq.blocks
            if new_blocks > free:
                return self._reference_step()  # the reference preempts here
            free -= new_blocks
            plan.append((seq, tokens, new_blocks))
            budget -= tokens
        waiting = self._waiting
        count = n + len(tail)
        while waiting and budget > 0 and count < self._max_seqs:
            seq = waiting[0]
            tokens = min(seq.prompt + seq.generated, budget)
            new_blocks = -(-tokens // bs)
            if new_blocks > free:
                break
            waiting.popleft()
            free -= new_blocks
            tail.append(seq)
            plan.append((seq, tokens, new_blocks))
            budget -= tokens
            count += 1
        if not n and not plan:
            return None
        return self._execute_plan(plan, free)

    def _execute_plan(self, plan: list[tuple[Sequence, int, int]], free: int) -> BatchStep:
        self._free_blocks = free
        n = len(self._group)
        pairs = 0.0
        kv_read = 0
        emitted: tuple[str, ...] = ()
        finished: tuple[str, ...] = ()
        if n:
            tick = self._tick = self._tick + 1
            kv_read = self._base_sum + n * tick
            pairs = float(kv_read)
            emitted = self._group_ids or tuple(self._group)
            self._group_ids = emitted
            members = self._finish_at.pop(tick, None)
            finished = self._finish_members(members) if members else ()
        prefill_tokens = 0
        decode_seqs = n
        tail_emitted: list[str] = []
        tail_finished: list[Sequence] = []
        for seq, tokens, new_blocks in plan:
            seq.blocks += new_blocks
            offset = seq.computed
            # Same arithmetic, in the same order, as ContinuousBatcher._execute.
            if tokens == 1 and seq.generated and offset == seq.prompt + seq.generated - 1:
                decode_seqs += 1
                pairs += offset + 1
            else:
                prefill_tokens += tokens
                pairs += tokens * (offset + 0.5 * tokens)
            kv_read += offset + tokens
            seq.computed = offset + tokens
            if seq.computed == seq.prompt + seq.generated:
                seq.generated += 1
                tail_emitted.append(seq.request_id)
                if seq.generated >= seq.output:
                    tail_finished.append(seq)
        if tail_emitted:
            emitted = emitted + tuple(tail_emitted)
        if tail_finished:
            finished = finished + tuple(seq.request_id for seq in tail_finished)
            for seq in tail_finished:
                self._tail.remove(seq)
                self._free_blocks += seq.blocks
                seq.blocks = 0
                del self._by_id[seq.request_id]
        tail = self._tail
        while tail and _is_decoding(tail[0]):
            self._join(tail.pop(0))
        return BatchStep(prefill_tokens, decode_seqs, pairs, kv_read, emitted, finished, ())

    def _reference_step(self) -> BatchStep | None:
        """Run one iteration with the reference scheduler (it may preempt), then regroup."""
        self._materialise()
        step = self._schedule_general()
        self._regroup()
        return step
