"""The demo server's routes declared as data: each path, its methods, the handler that answers it and
what it answers, in one line.

The server is built from these tables (:func:`routed`) and the documentation's HTTP reference is
written from the same tables, so a route cannot be served without being described, nor described
without being served.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from caffetool.errors import CaffetoolError

Handler = Callable[[Request], Awaitable[Response]]


class RouteTableError(CaffetoolError, ValueError):
    """A route table and the handlers given for it disagree: a fault in the server's own code."""


@dataclass(frozen=True)
class Endpoint:
    path: str
    handler: str  # the key of its handler in what :func:`routed` is given
    answers: str  # one line: what a request gets, for the reference page
    methods: tuple[str, ...] = ("GET",)


def routed(table: tuple[Endpoint, ...], handlers: Mapping[str, Handler]) -> list[Route]:
    """Starlette routes for ``table``, in its order (the first matching path wins); every handler is
    named by a row and every row names a handler."""
    named = {endpoint.handler for endpoint in table}
    if named != set(handlers):
        raise RouteTableError(f"route table and handlers differ: rows without a handler "
                              f"{sorted(named - set(handlers))}, handlers without a row {sorted(set(handlers) - named)}")
    return [Route(e.path, handlers[e.handler], methods=list(e.methods)) for e in table]
