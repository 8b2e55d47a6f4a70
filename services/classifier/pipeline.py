"""The classifier's pure core: sizes, class, SLO, pool and deadline of one request.

Input tokens are the client's count or the configured tokenizer's; the output length is
predicted; the class follows the scheme's thresholds (DynamoLLM Table IV or a FREESH
partition); the pool follows the plan's routing weights for that class; the deadline is
arrival + α_LLF · Lat with Lat = N̂ · TBT + TTFT of the pool's profile (FREESH Eq. 6).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from proto.messages import (
    MAX_TOKENS_LIMIT,
    ClassifiedRequest,
    Plan,
    PoolPlan,
    Request,
    client_request_id,
)
from shared.domain.classes import ClassScheme, ClassSLO, OutputLengthPredictor
from shared.errors import RequestRejectedError

__all__ = ["ClassifierCore", "RoutingTable"]


@dataclass(frozen=True, slots=True)
class RoutingTable:
    """Class → weighted pools, from a plan; a request id always maps to the same pool."""

    pools: dict[str, PoolPlan]
    routes: dict[str, list[tuple[str, float]]]

    @classmethod
    def from_plan(cls, plan: Plan) -> RoutingTable:
        """Keep only routes to pools that exist with instances and positive weight."""
        pools = {p.pool_id: p for p in plan.pools}
        routes: dict[str, list[tuple[str, float]]] = {}
        for cls_name, weights in plan.routes.items():
            usable = [(w.pool_id, w.weight) for w in weights if w.weight > 0 and w.pool_id in pools]
            if usable:
                routes[cls_name] = usable
        return cls(pools, routes)

    def serves(self, model: str) -> bool:
        """Whether some routed pool serves ``model`` (a pool of no model serves any)."""
        return any(
            _serves(self.pools[pool_id], model)
            for weights in self.routes.values()
            for pool_id, _ in weights
        )

    def _weighted(self, request_class: str, model: str) -> list[tuple[str, float]]:
        """The class's routes (else the default route) to pools of ``model``."""
        for key in (request_class, "*"):
            usable = [
                (pool_id, weight)
                for pool_id, weight in self.routes.get(key, ())
                if _serves(self.pools[pool_id], model)
            ]
            if usable:
                return usable
        return []

    def choose(self, request_class: str, request_id: str, model: str = "") -> PoolPlan:
        """Pick a pool of ``model`` by weight, deterministically by request id (so
        redelivery agrees); ``""`` takes any pool.

        Raises:
            RequestRejectedError: ``model_not_found`` when no routed pool serves the model,
                ``no_route`` when none of its pools is routed this class (nor by default).
        """
        weighted = self._weighted(request_class, model)
        if not weighted:
            if model and not self.serves(model):
                raise RequestRejectedError(
                    "model_not_found", f"the current plan serves no pool of model {model!r}"
                )
            raise RequestRejectedError(
                "no_route", f"the current plan serves no pool for class {request_class}"
            )
        total = sum(w for _, w in weighted)
        # crc32 of the id spreads requests over pools like a weighted random draw, but stably.
        point = (zlib.crc32(request_id.encode()) / 0xFFFFFFFF) * total
        for pool_id, weight in weighted:
            point -= weight
            if point <= 0:
                return self.pools[pool_id]
        return self.pools[weighted[-1][0]]


def _serves(pool: PoolPlan, model: str) -> bool:
    # A pool of no model comes from a planner that predates PoolPlan.model: it takes any.
    return not model or not pool.model or pool.model == model


class ClassifierCore:
    """Turns a validated Request into a ClassifiedRequest, or rejects it with a reason."""

    def __init__(
        self,
        *,
        scheme: ClassScheme,
        slos: dict[str, ClassSLO],
        predictor: OutputLengthPredictor,
        models: Iterable[str],
        max_context_tokens: int,
        alpha_llf: float,
        default_ttft_ms: float,
        default_tbt_ms: float,
        tokenize: Callable[[str], int] | None = None,
        model_contexts: Mapping[str, int] | None = None,
    ) -> None:
        """``model_contexts`` (model → tokens) holds a model to a smaller context than
        ``max_context_tokens`` (:func:`shared.model_context.context_limits`)."""
        self._scheme = scheme
        self._slos = slos
        self._predictor = predictor
        self._models = frozenset(models)
        self._max_context = max_context_tokens
        self._model_contexts = dict(model_contexts or {})
        self._alpha = alpha_llf
        self._default_ttft_ms = default_ttft_ms
        self._default_tbt_ms = default_tbt_ms
        self._tokenize = tokenize
        self._routing: RoutingTable | None = None

    @property
    def scheme(self) -> ClassScheme:
        """Thresholds in force."""
        return self._scheme

    @property
    def has_plan(self) -> bool:
        """Whether a plan has been followed (before it every request is ``no_plan``)."""
        return self._routing is not None

    def update_plan(self, plan: Plan, scheme: ClassScheme | None = None) -> None:
        """Follow a new plan (and its class scheme when it changes)."""
        self._routing = RoutingTable.from_plan(plan)
        if scheme is not None:
            self._scheme = scheme

    def observe(self, prompt_tokens: int, output_tokens: int) -> None:
        """Feed a completion back to the length predictor."""
        self._predictor.observe(prompt_tokens, output_tokens)

    def input_tokens(self, request: Request) -> int:
        """Exact input length: the client's count, else the tokenizer's.

        Raises:
            RequestRejectedError: no count and no way to count, or an absurd count.
        """
        if request.prompt_tokens is not None:
            return request.prompt_tokens
        if request.prompt is None:
            raise RequestRejectedError(
                "missing_prompt", "request has neither prompt nor prompt_tokens"
            )
        if self._tokenize is None:
            raise RequestRejectedError(
                "no_tokenizer",
                "prompt text given but no tokenizer is configured; send prompt_tokens",
            )
        count = self._tokenize(request.prompt)
        if count < 1 or count > MAX_TOKENS_LIMIT:
            raise RequestRejectedError("bad_prompt", f"prompt tokenises to {count} tokens")
        return count

    def classify(self, request: Request, *, arrival_s: float, now_wall: float) -> ClassifiedRequest:
        """Classify one request at model time ``arrival_s``.

        Raises:
            RequestRejectedError: unknown model, too long, no plan, no pool of the model
                (``model_not_found``) or no route.
        """
        if request.model not in self._models:
            raise RequestRejectedError(
                "unknown_model", f"model {request.model!r} is not served here"
            )
        n_in = self.input_tokens(request)
        context = min(self._max_context, self._model_contexts.get(request.model, self._max_context))
        if n_in + request.max_tokens > context:
            raise RequestRejectedError(
                "too_long",
                f"prompt {n_in} + max_tokens {request.max_tokens} exceeds the context of "
                f"{context} tokens of {request.model}",
            )
        if self._routing is None:
            raise RequestRejectedError("no_plan", "no plan has been published yet")
        true_out = request.max_tokens if request.ignore_eos else None
        predicted = self._predictor.predict(n_in, true_output_tokens=true_out, text=request.prompt)
        predicted = max(1, min(int(predicted), request.max_tokens))
        request_class = self._scheme.classify(n_in, predicted)
        # Split by the id the client chose, not the stack-wide scoped one: the route of a
        # request then does not depend on which client sent it, and the simulator, which
        # replays traces without client scoping, routes every request the same way.
        pool = self._routing.choose(
            request_class, client_request_id(request.request_id), request.model
        )
        slo = self._slos.get(request_class)
        ttft_ms = pool.ttft_ms or self._default_ttft_ms
        tbt_ms = pool.tbt_ms or self._default_tbt_ms
        lat_s = (predicted * tbt_ms + ttft_ms) / 1000.0
        return ClassifiedRequest(
            request=request,
            input_tokens=n_in,
            predicted_output_tokens=predicted,
            request_class=request_class,
            pool_id=pool.pool_id,
            region=pool.region,
            arrival_s=arrival_s,
            ttft_slo_ms=slo.ttft_ms if slo else ttft_ms,
            tbt_slo_ms=slo.tbt_ms if slo else tbt_ms,
            profile_ttft_ms=ttft_ms,
            profile_tbt_ms=tbt_ms,
            lat_s=lat_s,
            deadline_s=arrival_s + self._alpha * lat_s,
            classified_at=now_wall,
        )
