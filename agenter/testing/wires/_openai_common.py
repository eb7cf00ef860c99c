"""Pieces both OpenAI wires share: error shape, model list, route for GET /v1/models."""

from __future__ import annotations

from typing import Any

from ..script import HttpError, new_id

ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}

MODEL_IDS = ("gpt-5", "gpt-5-codex", "gpt-4.1", "gpt-4o-mini")


def render_error(error: HttpError) -> tuple[dict[str, str], dict[str, Any]]:
    error_type, code = ERRORS.get(
        error.status, ("server_error" if error.status >= 500 else "invalid_request_error", None)
    )
    body = {"error": {"message": error.message, "type": error.error_type or error_type, "param": None, "code": code}}
    return {"x-request-id": new_id("req_"), **dict(error.headers)}, body


def models_list() -> dict[str, Any]:
    data = [{"id": model, "object": "model", "created": 1735689600, "owned_by": "scripted"} for model in MODEL_IDS]
    # "models": Codex's model-list shape; unknown to other clients, which ignore it.
    return {"object": "list", "data": data, "models": []}
