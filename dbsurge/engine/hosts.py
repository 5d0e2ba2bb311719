"""Where each worker runs: its host name and address, and how the run's files name it.

Locust's worker id is ``hostname_<uuid>``: on hosts that share a name (containers started from one
image, network namespaces on one machine, cloud hosts named after their image) it says neither
which host nor where. So each worker tells the master, in its hello (`dbsurge.engine.wire.Hello`), its host name and
its own address on the way to the master (`outbound_address`: the source address the kernel picks
for the master's address, which is the address the master sees unless a NAT sits between them).
The master keeps them (`WorkerHosts`) and names the worker by them in events.jsonl (``host``,
``address``), workers.csv (``host``: ``name (address)``), run.json (``results.workers``) and the
summary (``ID on name (address)``).

    >>> hosts = WorkerHosts()
    >>> hosts.note("vm_0f7a", {"host": "load-1", "address": "10.0.1.7"})
    >>> hosts.label("vm_0f7a"), hosts.name("vm_0f7a")
    ('load-1 (10.0.1.7)', 'vm_0f7a on load-1 (10.0.1.7)')
    >>> hosts.label("other_9c1e")  # not heard from: what its id says
    'other'
"""

from __future__ import annotations

import socket

from dbsurge import __version__
from dbsurge.base.versions import build


def outbound_address(host: str, port: int) -> str | None:
    """This host's address on the way to ``host:port`` (no packet is sent), or None when there is no route."""
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(addr)  # a UDP connect only chooses the route and the source address
            return s.getsockname()[0]
    except OSError:
        return None


def hello_fields(master_host: str, master_port: int) -> dict[str, str | None]:
    """What a worker says about itself in its hello: where it runs, and which dbsurge (the master admits its
    own build only)."""
    return {"host": socket.gethostname(), "address": outbound_address(master_host, master_port),
            "version": __version__, "build": build()}


class WorkerHosts:
    """The master's record of each worker's host name and address, from its hello."""

    def __init__(self) -> None:
        self._known: dict[str, dict[str, str]] = {}

    def note(self, worker: str, hello) -> None:
        """Remember what a worker's hello (`dbsurge.engine.wire.Hello`) says of its host."""
        fields = {k: str(v) for k, v in (("host", hello.host), ("address", hello.address)) if v}
        if fields:
            self._known[worker] = fields

    def fields(self, worker: str) -> dict[str, str]:
        """``host`` (and ``address`` when known) for an event."""
        known = self._known.get(worker, {})
        host = known.get("host") or (worker.rsplit("_", 1)[0] if "_" in worker else None)
        out = {"host": host} if host else {}
        if known.get("address"):
            out["address"] = known["address"]
        return out

    def label(self, worker: str) -> str:
        """``name (address)``: the worker's host, for workers.csv."""
        f = self.fields(worker)
        host = f.get("host", "")
        return f"{host} ({f['address']})" if "address" in f else host

    def name(self, worker: str) -> str:
        """``ID on name (address)``: the worker in a sentence of the summary."""
        label = self.label(worker)
        return f"{worker} on {label}" if label else worker

    def describe(self) -> dict[str, dict[str, str]]:
        """Every worker heard from, for run.json."""
        return {w: self.fields(w) for w in sorted(self._known)}
