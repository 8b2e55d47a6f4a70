"""One valid, realistic instance of every protocol message, shared by the proto tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import msgspec

from proto import messages
from proto.messages import (
    Assignment,
    CancelRequest,
    ClassifiedRequest,
    ClockCommand,
    ClockOverride,
    ClockReply,
    Completion,
    CompletionBatch,
    DispatchBatch,
    DispatchBatchReply,
    DispatchReply,
    DvfsReport,
    ErrorReply,
    Forecast,
    GpuReport,
    InstanceState,
    Plan,
    PoolPlan,
    PullReply,
    PullRequest,
    Request,
    RequestProgress,
    RequeueRequest,
    ResendRequest,
    RouteWeight,
    Sampling,
    SubmitBatch,
    SubmitBatchReply,
    SubmitReply,
    TokenChunk,
    WorkerStats,
)

__all__ = ["KINDS", "SAMPLES", "load_tool", "sample_of"]

_T0 = 1_763_000_000.0
_SAMPLING = Sampling(temperature=0.7, top_p=0.9, stop=["\n\nUser:", "###"], seed=42)
_REQUEST = Request(
    request_id="conv-42",
    model="llama-3-8b",
    reply_subject="gs.v1.client.lg-1.conv-42",
    sent_at=_T0,
    max_tokens=129,
    prompt_tokens=1020,
    client_id="lg-1",
    sampling=_SAMPLING,
)
_COMPLETION = Completion(
    request_id="conv-42",
    worker_id="worker-0",
    pool_id="pjm-a100",
    region="PJM",
    request_class="ML",
    input_tokens=1020,
    output_tokens=129,
    sent_at=_T0,
    accepted_at=_T0 + 0.01,
    first_token_at=_T0 + 0.2,
    finished_at=_T0 + 3.1,
    energy_j=412.7,
    preemptions=1,
    predicted_output_tokens=129,
    lat_s=3.018,
)

_CLASSIFIED = ClassifiedRequest(
    request=_REQUEST,
    input_tokens=1020,
    predicted_output_tokens=129,
    request_class="ML",
    pool_id="pjm-a100",
    region="PJM",
    arrival_s=1_656_633_612.5,
    ttft_slo_ms=500.0,
    tbt_slo_ms=100.0,
    profile_ttft_ms=180.0,
    profile_tbt_ms=22.0,
    lat_s=3.018,
    deadline_s=1_656_633_616.73,
    classified_at=_T0 + 0.002,
)
_POOL = PoolPlan(
    pool_id="pjm-a100",
    region="PJM",
    gpu="A100-80GB",
    tp=1,
    instances=2,
    clock_mhz=1410.0,
    classes=["SS", "ML"],
    ttft_ms=180.0,
    tbt_ms=22.0,
)
_GPU = GpuReport(worker_id="worker-0", clock_mhz=1410.0, power_w=312.5, energy_j=9.1e5)
_PROGRESS = RequestProgress(
    request_id="conv-42",
    prompt_tokens=1020,
    generated_tokens=17,
    predicted_output_tokens=129,
    max_tokens=129,
    deadline_s=1_656_633_640.0,
)

SAMPLES: tuple[msgspec.Struct, ...] = (
    Assignment(request=_CLASSIFIED, worker_id="worker-0", dispatched_at=_T0 + 0.01),
    _CLASSIFIED,
    ClockCommand(worker_id="worker-0", clock_mhz=1200.0, issued_by="dvfs", reason="fixed"),
    ClockReply(worker_id="worker-0", applied_mhz=1200.0, accepted=True),
    ClockOverride(pool_id="pjm-a100", hold_s=10.0, issued_by="scheduler", reason="emergency"),
    _COMPLETION,
    CompletionBatch(completions=[_COMPLETION]),
    DispatchReply(
        request_id="conv-42", worker_id="worker-0", accepted=False, accepted_at=_T0, reason="full"
    ),
    DispatchBatch(requests=[_CLASSIFIED]),
    DispatchBatchReply(
        replies=[
            DispatchReply(
                request_id="conv-42", worker_id="worker-0", accepted=True, accepted_at=_T0
            )
        ]
    ),
    DvfsReport(node_id="node-0", at=_T0, mode="fixed", gpus=[_GPU]),
    ErrorReply(code="too_long", reason="9000 tokens", service="classifier", request_id="conv-42"),
    Forecast(
        region="PJM",
        issued_at=_T0,
        start_s=1_656_633_600.0,
        step_s=3600,
        values=[341.4, 343.6],
        p10=[320.0, 322.1],
        p90=[360.2, 362.9],
    ),
    _GPU,
    InstanceState(
        worker_id="worker-0",
        node_id="node-0",
        pool_id="pjm-a100",
        now_s=1_656_633_620.0,
        at=_T0 + 8.0,
        clock_mhz=1050.0,
        running=1,
        waiting=0,
        kv_blocks_used=72,
        kv_blocks_total=28086,
        requests=[_PROGRESS],
    ),
    Plan(
        epoch=920_352,
        issued_at=_T0,
        valid_until=_T0 + 1800.0,
        scheme="dynamollm9",
        pools=[_POOL],
        routes={"*": [RouteWeight(pool_id="pjm-a100", weight=2.0)]},
    ),
    _POOL,
    PullReply(requests=[_CLASSIFIED], queued=3),
    PullRequest(pool_id="pjm-a100", slots=4, router_id="router-0"),
    _REQUEST,
    _PROGRESS,
    RequeueRequest(requests=[_CLASSIFIED]),
    RouteWeight(pool_id="pjm-a100", weight=0.5),
    _SAMPLING,
    SubmitBatch(requests=[_CLASSIFIED]),
    SubmitBatchReply(accepted=["conv-42"], duplicates=["conv-41"], cancelled=["gw.conv-40"]),
    CancelRequest(request_id="conv-42", reason="client disconnected", at=_T0 + 0.3),
    ResendRequest(request_ids=["conv-42", "conv-43"], at=_T0 + 0.4),
    SubmitReply(request_id="conv-42", accepted=True),
    TokenChunk(
        request_id="conv-42",
        worker_id="worker-0",
        first_index=1,
        token_times=[_T0 + 0.22, _T0 + 0.24],
        text="Hello",
    ),
    WorkerStats(
        worker_id="worker-0",
        pool_id="pjm-a100",
        region="PJM",
        node_id="node-0",
        gpu="A100-80GB",
        model="llama-3-8b",
        tp=1,
        running=12,
        waiting=3,
        max_num_seqs=64,
        free_slots=49,
        kv_blocks_used=4000,
        kv_blocks_total=20000,
        clock_mhz=1410.0,
        power_w=300.0,
        energy_j=1.2e6,
        tokens_out=88_000,
        at=_T0,
    ),
)
"""One instance per message type, in ``proto.messages.__all__`` order."""


def sample_of(kind: type[msgspec.Struct]) -> msgspec.Struct:
    """The sample of one message type.

    Raises:
        KeyError: no sample exists for ``kind``.
    """
    for sample in SAMPLES:
        if type(sample) is kind:
            return sample
    raise KeyError(kind.__name__)


KINDS: tuple[type[msgspec.Struct], ...] = tuple(
    obj
    for obj in (getattr(messages, name) for name in messages.__all__)
    if isinstance(obj, type) and issubclass(obj, msgspec.Struct)
)
"""Every message type of ``proto.messages``, in ``__all__`` order."""

TOOLS_DIR = Path(__file__).resolve().parents[3] / "tools"


def load_tool(name: str) -> ModuleType:
    """Import ``tools/<name>.py`` by path (tools/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(
        f"_greenserve_tool_{name}", TOOLS_DIR / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
