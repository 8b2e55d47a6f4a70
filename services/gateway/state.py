"""What the gateway's handlers share: the state on the application, and the error answer.

:class:`GatewayState` is built once per gateway (:class:`services.gateway.service.Gateway`)
and put on the aiohttp application under :data:`STATE`; every route reads the bus, the
config, the cells and the reply router from it. :data:`STREAMING` marks a response whose
headers are sent, after which an error can only travel as an SSE event.
:func:`error_response` is how every route answers an :class:`~.errors.ApiError`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from aiohttp import web
from nats.aio.client import Client
from nats.js import JetStreamContext
from redis.asyncio import Redis

from proto.keys import Keys
from proto.subjects import Subjects
from services.gateway.admission import InFlightLimit, default_max_in_flight
from services.gateway.cells import CellPicker
from services.gateway.errors import ApiError
from services.gateway.replies import ReplyRouter
from services.gateway.served_models import ServedModels
from shared.config import GatewaySettings
from shared.counters import ERRORS
from shared.security.client_ids import instance_token

if TYPE_CHECKING:
    from services.gateway.auth import KeyRing

__all__ = ["API_ERROR", "NAME", "STATE", "STREAMING", "GatewayState", "error_response"]

NAME = "gateway"


@dataclass(slots=True)
class GatewayState:
    """What the handlers share: the bus, the config and the reply router."""

    nc: Client
    js: JetStreamContext
    subjects: Subjects
    config: GatewaySettings
    models: frozenset[str]
    """The models requests may name (``classifier.models``); whether one is served now is
    the plan's (the classifier answers ``model_not_found``) and ``served``'s to say."""
    client_id: str
    chars_per_token: float | None
    """Prompt-length estimate; ``None`` when the classifier tokenises the text itself."""
    context_tokens: int | None
    """The classifier's context; a default output limit is cut to fit it."""
    cells: CellPicker
    """The cells this gateway sends requests to (its own stack alone unless configured)."""
    router: ReplyRouter = field(default_factory=ReplyRouter)
    store: Redis | None = None
    """Where the forecaster keeps its latest forecasts (the carbon-aware query reads them)."""
    keys: Keys | None = None
    api_keys: KeyRing | None = None
    """The accepted API keys; ``None``: no key needed (``gateway.api_keys_file`` unset)."""
    model_contexts: dict[str, int] = field(default_factory=dict)
    """A smaller context of a model (:func:`shared.model_context.context_limits`)."""
    served: ServedModels = field(default_factory=lambda: ServedModels(3.0))
    """The models live workers announce (``GET /v1/models``)."""
    admission: InFlightLimit = field(init=False)
    """The ceiling on completion requests held at once (``gateway.max_in_flight``)."""
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _instance: str = field(default_factory=instance_token)
    """Gateway replicas share their identity's client id; this keeps their ids apart."""

    def __post_init__(self) -> None:
        limit = self.config.max_in_flight or default_max_in_flight()
        self.admission = InFlightLimit(limit, self.config.overload_retry_after_s)

    def new_request_id(self) -> str:
        """A request id unique to this gateway instance."""
        return f"{self.client_id[:64]}-{self._instance}-{next(self._ids)}"


STATE: web.AppKey[GatewayState] = web.AppKey("state", GatewayState)
STREAMING: web.RequestKey[bool] = web.RequestKey("streaming", bool)
"""Set once a response's headers are sent: from then on an error can only be an SSE event."""


API_ERROR: Final = web.ResponseKey("api_error", ApiError)
"""Key of the :class:`ApiError` an error answer carries (``response[API_ERROR]``)."""


def error_response(err: ApiError) -> web.Response:
    """The OpenAI-shaped error answer (status from :mod:`.errors`), counted by its code."""
    ERRORS.labels(NAME, err.code).inc()
    response = web.json_response(err.body(), status=err.status, headers=err.headers())
    response[API_ERROR] = err  # the middleware's span says why the request failed
    if err.status == 408:
        # Tell the client the connection ends (RFC 9110 asks it of a 408): the rest of its
        # body may still trickle in, and the route closes rather than read it.
        response.force_close()
    return response
