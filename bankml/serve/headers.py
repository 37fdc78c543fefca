"""Response header names written as llama-server writes them.

cpp-httplib sends each header name as llama-server sets it: ``Content-Type``, ``Access-Control-Allow-Origin``,
``Process-Start-Time-Unix``, ``Server``. Starlette lowercases the names it is given, and uvicorn sends them as
they are. HTTP names are case-insensitive, so a conforming client sees no difference; a client that copies the
headers into a plain dict does (llama-server's own test suite does: ``dict(response.headers)``, then
``"Process-Start-Time-Unix" in headers``). ``HeaderCaseMiddleware`` rewrites every response's header names
with each dash-separated word capitalized.
"""

__all__ = ["HeaderCaseMiddleware", "title_case"]


def title_case(name):
    """``b"access-control-allow-origin"`` -> ``b"Access-Control-Allow-Origin"`` (bytes, as ASGI gives them)."""
    return b"-".join(part[:1].upper() + part[1:].lower() for part in name.split(b"-"))


class HeaderCaseMiddleware:
    """ASGI middleware: every HTTP response's header names in llama-server's case (``title_case``)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_cased(message):
            if message["type"] == "http.response.start":
                headers = [(title_case(bytes(k)), v) for k, v in message.get("headers", ())]
                message = dict(message, headers=headers)
            await send(message)

        await self.app(scope, receive, send_cased)
