"""Who gets a share of the plan: only workers that prove the join token.

A master that listens beyond loopback (``--master-bind-host 0.0.0.0``, workers on other hosts)
must be started with a join token (``--join-token`` or, better, ``DBSURGE_JOIN_TOKEN``: an
environment variable does not show in ``ps``), or with ``--insecure-join``. Locust's own
protocol lets any process that reaches the port join, so dbsurge adds a challenge: when a worker
connects, the master sends it a fresh random nonce (`dbsurge.engine.wire.Challenge`) and the worker answers
``HMAC-SHA256(token, nonce || worker id)`` (`dbsurge.engine.wire.Proof`). The token itself never crosses the
wire, and a recorded answer is useless for the next nonce. A worker that answers wrong or not at
all gets no setup (`dbsurge.engine.wire.Setup`) (no plan, no target), so its users stay idle and send nothing; it is
named in ``events.jsonl`` (``worker_refused``), on the console and in the summary. Only admitted
workers count toward Locust's ``--expect-workers`` and receive users (`dbsurge.engine.admission`).

A master the user asks for (``--master``) listens where Locust's does, on every address, and so
needs the token; a ``--processes`` master listens on loopback and makes a token for the run
(`run_token`) that its forked children inherit in memory, never on a command line, so another
local process (a plain ``locust -f - --worker``) cannot take a share. The master says at start
where it listens and how to join it (`listening_line`); a worker that has not reached its master
after 10 s says where it is trying and what to check (`waiting_hint`); a refused worker is told
why (it prints one line and exits 2), is told to quit, and gets no users.

With or without a token, a worker is a member only once the master has read its hello and found
its build to be the master's (`dbsurge.engine.protocol.another_build`): without a token, the hello is the
whole of the admission (`Membership.greet`), so there is no moment in which a worker of another
build, or a plain Locust worker that never says hello, counts toward ``--expect-workers`` or takes
a share.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def proof(token: str, nonce_hex: str, worker_id: str) -> str:
    """The worker's answer to a challenge."""
    return hmac.new(token.encode(), bytes.fromhex(nonce_hex) + worker_id.encode(), hashlib.sha256).hexdigest()


def is_loopback(bind_host: str | None) -> bool:
    return (bind_host or "").strip().lower() in LOOPBACK_HOSTS or (bind_host or "").startswith("127.")


def _all_addresses(bind_host: str) -> bool:
    return bind_host.strip() in ("*", "0.0.0.0", "::", "")


def listening_line(bind_host: str, port: int, *, token: bool) -> str:
    """What a master says at start: where it listens, and the worker's command line that reaches it.

    >>> listening_line("127.0.0.1", 5557, token=False).split(":")[0:2]
    ['master listening on 127.0.0.1', '5557, this host only']
    """
    if is_loopback(bind_host):
        return (f"master listening on {bind_host}:{port}, this host only: workers on other hosts need "
                f"--master-bind-host * (or this host's address) and DBSURGE_JOIN_TOKEN")
    where = "every address" if _all_addresses(bind_host) else bind_host
    host = socket.gethostname() if _all_addresses(bind_host) else bind_host
    proof_hint = " with the same DBSURGE_JOIN_TOKEN" if token else " (--insecure-join: no token asked)"
    return (f"master listening on {where} port {port}; workers join with "
            f"`locust -f - --worker --master-host {host} --master-port {port}`{proof_hint}")


def waiting_hint(host: str, port: int) -> str:
    """What a worker says after 10 s without its master."""
    local = " (a loopback address: only a master on this host)" if is_loopback(host) else ""
    return (f"still waiting for the master at {host}:{port}{local} after 10 s: check that it runs, that it "
            f"listens beyond loopback (--master-bind-host *; a --processes master listens on 127.0.0.1 only), "
            f"that TCP port {port} is open from this host, and that DBSURGE_JOIN_TOKEN is the master's")


class Membership:
    """The master's record of challenges, proven workers and refused ones.

    With ``token=None`` (a loopback master, or ``--insecure-join``) a worker is a member once it says
    hello with the master's build (`greet`); with a token, once it also proves the token (`answer`).
    """

    def __init__(self, token: str | None):
        self.token = token or None
        self.nonces: dict[str, str] = {}
        self.proven: set[str] = set()
        self.refused: dict[str, str] = {}  # worker id -> why
        self.first_seen: dict[str, float] = {}  # worker id -> monotonic time the master first saw it undecided

    def greet(self, worker_id: str) -> bool:
        """A worker's hello was read and its build is the master's: True when that makes it a member (no token).

        Without a token there is nothing more to prove; with one, the challenge follows (`challenge`)."""
        if self.token is not None or worker_id in self.refused:
            return False
        self.proven.add(worker_id)
        return True

    def challenge(self, worker_id: str) -> str | None:
        """A new nonce for a worker that just connected (None when no token is required)."""
        if self.token is None or worker_id in self.proven:
            return None  # Locust says "ready" again after every stop: a proven worker stays proven
        nonce = secrets.token_hex(16)
        self.nonces[worker_id] = nonce
        self.proven.discard(worker_id)
        return nonce

    def answer(self, worker_id: str, answer: str | None) -> bool:
        """Check a worker's proof; True when it is now a member."""
        nonce = self.nonces.pop(worker_id, None)
        if self.token is None:
            return worker_id in self.proven  # no proof is asked: its hello decided (`greet`)
        if nonce is None:
            self.refused[worker_id] = "answered no challenge"
        elif not answer:
            self.refused[worker_id] = "no join token (set DBSURGE_JOIN_TOKEN on the worker)"
        elif not hmac.compare_digest(proof(self.token, nonce, worker_id), str(answer)):
            self.refused[worker_id] = "wrong join token"
        else:
            self.proven.add(worker_id)
            self.refused.pop(worker_id, None)
            return True
        return False

    def admitted(self, worker_id: str) -> bool:
        """True when the worker may count toward ``--expect-workers`` and take a share (`dbsurge.engine.admission`):
        its hello named the master's build and it proved the token (when one is required), and it was not refused."""
        return worker_id not in self.refused and worker_id in self.proven

    def pending(self, worker_ids: list[str]) -> list[str]:
        return [w for w in worker_ids if w in self.nonces]

    def members(self, worker_ids: list[str]) -> list[str]:
        return [w for w in worker_ids if self.admitted(w)]


def run_token() -> str:
    """A fresh join token for one ``--processes`` run (256 random bits)."""
    return secrets.token_hex(32)
