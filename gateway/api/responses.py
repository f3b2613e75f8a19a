"""JSON responses rendered with orjson: faster than the stdlib encoder and strict about what it
accepts (no NaN, no lone surrogates), so a response body is always valid JSON."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


class JSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
