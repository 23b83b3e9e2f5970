"""The Host check of editlens' local web servers (``editlens view``, ``editlens annotate``).

A web page on another site can rebind its DNS name to 127.0.0.1 and then talk
to a server on this machine as if it were its own; its requests still carry
its own name in ``Host``. A server that answers only requests naming its own
address (``127.0.0.1:PORT``, ``localhost:PORT``, ``[::1]:PORT`` or the
address it was bound to) gives such a page nothing.

>>> hosts = own_hosts("127.0.0.1", 8000)
>>> host_refusal("localhost:8000", hosts, "this report") is None
True
>>> host_refusal("evil.example:8000", hosts, "this report")
"Host 'evil.example:8000' refused: this report answers only to 127.0.0.1:8000 (a page on another site cannot reach it)"
"""

from __future__ import annotations

from collections.abc import Collection


def own_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` values a server bound to ``host:port`` answers to (an IPv6 address in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return frozenset(f"{h}:{port}" for h in {shown.lower(), "127.0.0.1", "localhost", "[::1]"})


def host_refusal(host: str | None, hosts: Collection[str], what: str) -> str | None:
    """Why a request with this ``Host`` header is refused (``None``: it names the server itself).
    ``what``: the server, as its refusal names it ("this report")."""
    if (host or "").lower() in hosts:
        return None
    return (f"Host {host!r} refused: {what} answers only to {sorted(hosts)[0]} "
            "(a page on another site cannot reach it)")
