"""``greenserve bench fuzz``: hypothesis-generated bad input at every decoder and ingress.

Four targets, one count each:

* **decoders**: every ``proto.codec`` decoder (``decode(data, kind)`` for each message type
  and ``decode_any``) gets random bytes, random MessagePack, field-shaped maps with wrong
  types and out-of-range values, and byte-mutated encodings. A *crash* is any exception
  other than ``DecodeError``.
* **ingress**: the same kinds of ``Request`` payloads published on the JetStream ingress of
  an embedded stack (own nats-server and redis-server), each with ``Nats-Msg-Id`` and a
  ``Gs-Reply`` header. *Unanswered*: no ``ErrorReply``/``Completion`` on the header's
  subject nor the decoded request's reply subject within the timeout.
* **cancel**: ``CancelRequest`` payloads of the same kinds (plus absurd but in-schema ids,
  reasons and times) published on ``cancel.client.<token>`` of that stack, the token the
  case's own client id or a hostile one NATS still delivers (wildcards, punctuation,
  non-ASCII, NUL, 129 characters). Cancels are fire and forget, so no reply exists to
  wait for; a case counts as answered when its documented treatment is seen: a malformed
  one (``shared.cancels.cancelled_id`` gives None) moves the scheduler's
  ``greenserve_errors_total{code="malformed"}`` by one, a well-formed one (a request
  nobody holds: a no-op) leaves the scheduler's ``cancelled(<client>.<id>)`` mark in
  Redis. *Unanswered*: the malformed cases the counter did not count (or counted beyond
  them), the well-formed ones without a mark, and one ordinary request sent afterwards
  that does not complete. Every worker hears the same cancels and counts a malformed one
  in its own ``greenserve_errors_total{service="worker", code="malformed"}``: the bench
  expects that counter to move by the malformed cases × the workers (they share this
  process's registry), and a case some worker did not count is unanswered too.
* **http**: malformed JSON, wrong types, negative and absurd token counts, huge prompts and
  unknown models posted to the gateway's ``/v1/completions`` and ``/v1/chat/completions``,
  and hostile query strings (unknown or huge locations, absurd windows, malformed times,
  random keys) to its carbon-aware ``GET /emissions/forecasts/current``.
  *Unanswered*: no complete HTTP response in time; a *crash*: a 500 that is not our JSON
  error (an exception escaped a handler).

A service task of the embedded stack that died is a crash too, whatever the cases say.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from greenserve.bench.fuzz.cancel import fuzz_cancels
from greenserve.bench.fuzz.cases import (
    cancel_cases,
    collect,
    fill,
    forecast_query_cases,
    http_cases,
    ingress_cases,
    payloads,
)
from greenserve.bench.fuzz.options import HELP, NAME, add_arguments
from proto import messages
from proto.codec import DecodeError, decode, decode_any
from shared.config import Settings
from shared.loops import wait_event

__all__ = ["HELP", "NAME", "add_arguments", "fuzz_decoders", "run"]

FORECAST_ROUTE = "/emissions/forecasts/current"

KINDS: tuple[type[msgspec.Struct], ...] = tuple(
    k
    for k in (getattr(messages, n) for n in messages.__all__)
    if isinstance(k, type) and issubclass(k, msgspec.Struct)
)

# --- (a) decoders ---------------------------------------------------------------------------


def fuzz_decoders(cases_per_kind: int, seed: int) -> dict[str, Any]:
    """Feed every decoder; return cases, crashes and the first few crash examples."""
    cases = 0
    crashes: list[str] = []

    def check(kind: type[msgspec.Struct]) -> Callable[[bytes], None]:
        def one(data: bytes) -> None:
            nonlocal cases
            for target, call in ((kind.__name__, decode), ("decode_any", None)):
                cases += 1
                try:
                    decode(data, kind) if call is not None else decode_any(data)
                except DecodeError:
                    pass
                except Exception as exc:  # the finding itself: anything but DecodeError
                    crashes.append(f"{target}: {type(exc).__name__}: {exc} on {data[:64]!r}")

        return one

    for i, kind in enumerate(KINDS):
        collect(payloads(kind), cases_per_kind, seed + i, check(kind))
    return {"cases": cases, "crashes": len(crashes), "examples": crashes[:5]}


# --- (b) live ingress and gateway ----------------------------------------------------------


async def _fuzz_ingress(nc: Any, prefix: str, cases: list[Any], timeout_s: float) -> dict[str, Any]:
    from proto.messages import Completion, ErrorReply, Request
    from proto.subjects import Subjects

    subjects = Subjects(prefix)
    endings: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    progress = asyncio.Event()
    done_prefix = subjects.request_done_wildcard.removesuffix(">")

    async def on_message(msg: Any) -> None:
        if msg.subject.startswith(done_prefix):  # bookkeeping copies, not the client's
            return
        with contextlib.suppress(DecodeError):
            message = decode_any(msg.data)
            if isinstance(message, ErrorReply | Completion):
                endings[msg.subject] += 1
                codes[message.code if isinstance(message, ErrorReply) else "completed"] += 1
                progress.set()

    # Everything on this private server: a decoded request may name any reply subject.
    sub = await nc.subscribe(">", cb=on_message)
    js = nc.jetstream()
    expected: list[tuple[set[str], bytes]] = []
    refused_by_bus = 0
    for i, case in enumerate(cases):
        header = subjects.client_reply("fz", f"c{i}")
        payload = fill(case, f"c{i}", header)
        wanted = {header}
        with contextlib.suppress(DecodeError):
            wanted.add(decode(payload, Request).reply_subject)
        try:
            await js.publish(
                subjects.ingress_request,
                payload,
                headers={"Nats-Msg-Id": f"fz-{i}", "Gs-Reply": header},
            )
        except Exception:  # too big for the bus: the client hears it at once
            refused_by_bus += 1
            continue
        expected.append((wanted, payload))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(any(endings[s] for s in wanted) for wanted, _ in expected):
            break
        progress.clear()
        await wait_event(progress, 0.5)
    await sub.unsubscribe()
    missing = [
        (wanted, payload) for wanted, payload in expected if not any(endings[s] for s in wanted)
    ]
    return {
        "cases": len(cases),
        "unanswered": len(missing),
        "refused_by_bus": refused_by_bus,
        "examples": [repr(payload[:160]) for _, payload in missing[:5]],
        "endings": dict(codes.most_common()),
    }


async def _fuzz_http(
    url: str, cases: list[tuple[str, bytes]], queries: list[str], timeout_s: float
) -> dict[str, Any]:
    import aiohttp

    statuses: Counter[int] = Counter()
    crashes: list[str] = []
    unanswered = 0
    limit = asyncio.Semaphore(32)

    async def send(
        session: aiohttp.ClientSession, method: str, target: str, body: bytes, what: str
    ) -> None:
        """One request; a 5xx that is not our JSON error is a crash, a cut SSE stream or
        no response in time is unanswered."""
        nonlocal unanswered
        async with limit:
            try:
                post = method == "POST"
                headers = {"Content-Type": "application/json"} if post else {}
                async with session.request(
                    method, url + target, data=body if post else None, headers=headers
                ) as response:
                    text = await response.read()
                    statuses[response.status] += 1
            except (TimeoutError, aiohttp.ClientError):
                unanswered += 1
                return
        if response.status >= 500 and not text.startswith(b'{"error"'):
            crashes.append(f"{response.status} {text[:120]!r} for {what}")
        streamed = response.content_type == "text/event-stream"
        if streamed and not text.rstrip().endswith(b"data: [DONE]"):
            unanswered += 1

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(
            *(send(session, "POST", path, body, repr(body[:80])) for path, body in cases),
            *(
                send(session, "GET", f"{FORECAST_ROUTE}?{text}", b"", f"?{text[:80]}")
                for text in queries
            ),
        )
    return {
        "cases": len(cases) + len(queries),
        "forecast_query_cases": len(queries),
        "unanswered": unanswered,
        "crashes": len(crashes),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "examples": crashes[:5],
    }


async def _live(
    args: argparse.Namespace,
    ingress: list[Any],
    cancels: list[tuple[str, bytes]],
    http: list[tuple[str, bytes]],
    queries: list[str],
) -> dict[str, Any]:
    from greenserve.runner import run_in_process
    from greenserve.stack import StackSpec, stack_launches
    from services.gateway.service import open_gateway
    from shared.bus import connect_nats
    from shared.config import GatewaySettings, NatsSettings
    from shared.servers import start_nats, start_redis

    result: dict[str, Any] = {}
    died: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gs-fuzz-") as folder:
        nats_server = start_nats(Path(folder) / "nats")
        redis_server = start_redis(Path(folder) / "redis")
        spec = StackSpec(
            namespace="fuzz",
            nats_url=nats_server.url,
            redis_url=redis_server.url,
            workers=2,
            regions=("PJM",),
            speedup=args.speedup,
            origin_wall_s=time.time(),
            extra={"shutdown_timeout_s": 1.0, "telemetry": {"log_level": "ERROR"}},
        )
        launches = stack_launches(spec)
        config = GatewaySettings(
            port=0, max_body_bytes=256 * 1024, request_timeout_s=args.reply_timeout_s
        )
        try:
            async with run_in_process(launches) as running:
                async with open_gateway(launches[0].settings, config) as gateway:
                    nc = await connect_nats(NatsSettings(url=nats_server.url), "fuzz-client")
                    try:
                        print(f"fuzz: {len(ingress)} ingress cases", file=sys.stderr)
                        result["ingress"] = await _fuzz_ingress(
                            nc, spec.namespace, ingress, args.reply_timeout_s
                        )
                        print(f"fuzz: {len(cancels)} cancel cases", file=sys.stderr)
                        result["cancel"] = await fuzz_cancels(
                            nc,
                            redis_server.url,
                            spec.namespace,
                            cancels,
                            next(iter(launches[0].settings.classifier.models)),
                            args.reply_timeout_s,
                            spec.workers,
                        )
                    finally:
                        await nc.close()
                    print(
                        f"fuzz: {len(http)} http cases, {len(queries)} forecast queries",
                        file=sys.stderr,
                    )
                    result["http"] = await _fuzz_http(
                        gateway.url, http, queries, args.reply_timeout_s
                    )
                died = [
                    f"{name}: {service.task.exception()!r}"
                    for name, service in running.items()
                    if service.task.done() and not service.task.cancelled()
                ]
        except Exception as exc:  # the runner re-raises what a crashed service raised
            died.append(f"at stop: {exc!r}")
        finally:
            nats_server.stop()
            redis_server.stop()
    result["services_died"] = died
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Generate the cases, fuzz the decoders, then the live ingress and gateway."""
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # thousands of rejections are the point
    started = time.monotonic()
    print(f"fuzz: decoders, {args.decoder_cases} cases x {len(KINDS)} types", file=sys.stderr)
    decoders = fuzz_decoders(args.decoder_cases, args.seed)
    models = list(Settings().classifier.models)
    ingress = ingress_cases(messages.Request, models, args.ingress_cases, args.seed)
    cancels = cancel_cases(messages.CancelRequest, args.cancel_cases, args.seed)
    http = http_cases(models, args.http_cases, args.seed)
    queries = forecast_query_cases(args.forecast_query_cases, args.seed)
    live = asyncio.run(_live(args, ingress, cancels, http, queries))
    crashes = decoders["crashes"] + len(live["services_died"])
    unanswered = 0
    cases = decoders["cases"]
    for part in ("ingress", "cancel", "http"):
        if part in live:
            cases += live[part]["cases"]
            unanswered += live[part]["unanswered"]
            crashes += live[part].get("crashes", 0)
    return {
        "cases": cases,
        "crashes": crashes,
        "unanswered": unanswered,
        "decoders": decoders,
        **live,
        "seconds": round(time.monotonic() - started, 1),
    }
