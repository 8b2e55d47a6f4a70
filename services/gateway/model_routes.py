"""``GET /v1/models`` and ``GET /v1/models/{model}``: the served models as OpenAI lists them.

The models are those live workers announce now (:mod:`.served_models`), each as OpenAI's
``model`` object; another id is 404 ``model_not_found``, as the ``openai`` client's
``models.retrieve`` expects.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from services.gateway.errors import ApiError
from services.gateway.state import STATE, error_response

__all__ = ["list_models", "retrieve_model"]


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "greenserve"}


async def list_models(request: web.Request) -> web.Response:
    """OpenAI's ``GET /v1/models`` (the client's ``models.list``)."""
    models = request.app[STATE].served.models()
    return web.json_response({"object": "list", "data": [_model(m) for m in models]})


async def retrieve_model(request: web.Request) -> web.Response:
    """OpenAI's ``GET /v1/models/{model}`` (the client's ``models.retrieve``)."""
    model_id = request.match_info["model"]
    if not request.app[STATE].served.serves(model_id):
        err = ApiError(
            "model_not_found", f"the model {model_id!r} is not served here", param="model"
        )
        return error_response(err)
    return web.json_response(_model(model_id))
