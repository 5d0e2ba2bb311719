"""The control messages between the master and its workers: each one's name, payload, encoder and decoder.

Every message is a Locust custom message whose data is a plain dict (Locust packs it with msgpack).
Here each message is a frozen dataclass: its name once (``NAME``), its fields, `Message.encode` to
the dict and ``decode`` from it, beside the docstring that names who sends it and who handles it.
A sender calls `send`; a handler reads ``msg.data`` with the type's ``decode``.

A local run registers both ends of `Close` and `Final` on its `LocalRunner` (`dbsurge.engine.protocol.register_local`),
whose ``send_message`` calls the listener directly: one path serves a single process and a master with workers.

master -> worker                          worker -> master
`Challenge` (join nonce)                  `Hello` (ready, where it runs, its build)
`Clock` (t1)                              `Proof` (HMAC of the nonce)
`Setup` (plan, share, clock)              `Clock` (t1, t2, t3)
`Share` (reshare, join offer; ``lost``)   `ShareOk` (a join offer taken, in time or not)
`Rate` (live rate change)                 `Leave` (SIGTERM, Spot notice)
`LeaveOk` (hand-over point)               `Renew` (its send time)
`Lease` (the renewal)                     `Final` (last account; local run too)
`Refused` (join token, build)
`Close` (end of plan; local run too)

Decoding is as tolerant as the handlers always were: a field with a default may be missing (it
takes that default, and a missing ``data`` is an empty dict), a field without one may not (a
``KeyError``, or a ``TypeError`` for `Setup`'s unknown or missing keys), so a malformed message
fails in its handler instead of acting on made-up values.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

#: Every message type by name (`Message.__init_subclass__` refuses a name given twice).
MESSAGES: dict[str, type[Message]] = {}

#: What a refused worker is told to do when the master names nothing else (`Refused`).
TOKEN_HINT = "set DBSURGE_JOIN_TOKEN to the master's token"


@dataclass(frozen=True)
class Message:
    """A control message: subclasses set ``NAME`` (``dbsurge:...``) and their fields."""

    NAME: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.NAME in MESSAGES:
            raise ValueError(f"two control messages named {cls.NAME}: {MESSAGES[cls.NAME].__name__}, {cls.__name__}")
        MESSAGES[cls.NAME] = cls

    def encode(self) -> dict[str, Any]:
        """The message's data: each field under its own name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def send(runner, message: Message, client_id: str | None = None) -> None:
    """Send ``message`` (a master: to worker ``client_id``; a worker: to its master; a local run: to itself)."""
    runner.send_message(message.NAME, message.encode(), client_id=client_id)


def listen(runner, message_type: type[Message], handler, concurrent: bool = False) -> None:
    """Register ``handler(environment, msg, **kw)`` for ``message_type``; it decodes ``msg.data`` with the type."""
    runner.register_message(message_type.NAME, handler, concurrent=concurrent)


def _data(data: dict | None) -> dict:
    return data or {}


@dataclass(frozen=True)
class Setup(Message):
    """What the master tells each worker at test start (or inside a `Share` for a worker that joins later).

    Sent by the master (`dbsurge.engine.protocol.share_plan`); handled by the worker
    (`dbsurge.engine.protocol._on_setup_message`). A local run makes its own (`dbsurge.engine.protocol.setup_for`) and
    sends none. Every key is required but the last three (`decode` is ``Setup(**data)``).
    """

    NAME: ClassVar[str] = "dbsurge:setup"

    target_uri: str
    target_options: dict
    workload_options: dict
    operations: list
    plan: dict | None
    start_epoch_ns: int
    index: int
    count: int
    arrivals: str
    seed: int
    max_lag_s: float | None
    changes: list  # live rate changes so far: [at_s, rate_tps, scale]
    op_timeout_s: float = 30.0
    clock_offset_ns: int = 0  # this worker's clock minus the master's (dbsurge.engine.clocks)
    credentials: dict = field(default_factory=dict)  # no password: whether one is needed, where (dbsurge.config.credentials)

    @classmethod
    def decode(cls, data: dict) -> Setup:
        return cls(**data)


@dataclass(frozen=True)
class Hello(Message):
    """A worker is ready (its handlers are registered), where it runs, which dbsurge it is.

    Sent by the worker at init (`dbsurge.engine.protocol.register_worker`, fields from `dbsurge.engine.hosts.hello_fields`);
    handled by the master (`dbsurge.engine.protocol._on_hello_message`: its host, its build, the join challenge).
    Every field may be missing (None).
    """

    NAME: ClassVar[str] = "dbsurge:hello"

    host: str | None = None
    address: str | None = None
    version: str | None = None
    build: str | None = None

    @classmethod
    def decode(cls, data: dict | None) -> Hello:
        d = _data(data)
        return cls(host=d.get("host"), address=d.get("address"), version=d.get("version"), build=d.get("build"))


@dataclass(frozen=True)
class Challenge(Message):
    """The join challenge: a nonce the worker answers with its token's HMAC (`dbsurge.engine.membership`).

    Sent by the master (`dbsurge.engine.protocol._on_hello_message`); handled by the worker
    (`dbsurge.engine.protocol._on_challenge_message`). ``nonce`` is required.
    """

    NAME: ClassVar[str] = "dbsurge:challenge"

    nonce: str

    @classmethod
    def decode(cls, data: dict) -> Challenge:
        return cls(nonce=data["nonce"])


@dataclass(frozen=True)
class Proof(Message):
    """The worker's answer to a `Challenge` (None: it has no token).

    Sent by the worker (`dbsurge.engine.protocol._on_challenge_message`); handled by the master
    (`dbsurge.engine.protocol._on_proof_message`). ``proof`` may be missing (None).
    """

    NAME: ClassVar[str] = "dbsurge:proof"

    proof: str | None = None

    @classmethod
    def decode(cls, data: dict | None) -> Proof:
        return cls(proof=_data(data).get("proof"))


@dataclass(frozen=True)
class Clock(Message):
    """One NTP-style clock exchange (`dbsurge.engine.clocks`), both ways under one name.

    The master sends ``t1`` (its send time: `dbsurge.engine.protocol._measure_clocks`, ``membership_loop``,
    ``_on_hello_message``); the worker (`dbsurge.engine.protocol._on_clock_ping`) answers with ``t1`` echoed,
    ``t2`` (its receive time) and ``t3`` (its send time); the master (`dbsurge.engine.protocol._on_clock_answer`)
    adds its receive time. ``t1`` is required; ``t2`` and ``t3`` are None in the master's ping.
    """

    NAME: ClassVar[str] = "dbsurge:clock"

    t1: int
    t2: int | None = None
    t3: int | None = None

    @classmethod
    def decode(cls, data: dict) -> Clock:
        return cls(t1=data["t1"], t2=data.get("t2"), t3=data.get("t3"))


@dataclass(frozen=True)
class Refused(Message):
    """The master refused this worker (join token, build): the worker says why in one line and exits 2.

    Sent by the master (`dbsurge.engine.protocol._refuse`); handled by the worker
    (`dbsurge.engine.protocol._on_refused_message`). ``reason`` defaults to "refused", ``hint`` to `TOKEN_HINT`.
    """

    NAME: ClassVar[str] = "dbsurge:refused"

    reason: str = "refused"
    hint: str = TOKEN_HINT

    @classmethod
    def decode(cls, data: dict | None) -> Refused:
        d = _data(data)
        return cls(reason=d.get("reason", "refused"), hint=d.get("hint", TOKEN_HINT))


@dataclass(frozen=True)
class Share(Message):
    """A worker's share of the plan from arrival ``from_number`` on: ``index`` of ``count``.

    Sent by the master when the members change (`dbsurge.engine.protocol._commit_shares`) and as a join offer
    to a joining or rejoining worker (`dbsurge.engine.protocol._propose_join`: ``proposal`` numbered, ``lost``
    when it holds arrivals not its own, which it books as not sent below ``write_off_until``); handled by
    the worker (`dbsurge.engine.protocol._on_share_message`), which answers an offer with `ShareOk`.
    ``index``, ``count``, ``from_number`` and ``setup`` (what a worker with no plan yet starts from) are
    required; ``lost`` may be missing (False), ``write_off_until`` (``from_number``, also when None),
    ``proposal`` (None: not an offer).
    """

    NAME: ClassVar[str] = "dbsurge:share"

    index: int
    count: int
    from_number: int
    setup: Setup
    lost: bool = False
    write_off_until: int | None = None
    proposal: int | None = None

    def __post_init__(self) -> None:
        if self.write_off_until is None:
            object.__setattr__(self, "write_off_until", self.from_number)

    def encode(self) -> dict[str, Any]:
        d = super().encode()
        d["setup"] = self.setup.encode()
        return d

    @classmethod
    def decode(cls, data: dict) -> Share:
        return cls(index=data["index"], count=data["count"], from_number=data["from_number"],
                   setup=Setup.decode(data["setup"]), lost=data.get("lost", False),
                   write_off_until=data.get("write_off_until"), proposal=data.get("proposal"))


@dataclass(frozen=True)
class ShareOk(Message):
    """A joining worker took the `Share` offer ``proposal``; ``late``: it came too late to switch in time.

    Sent by the worker (`dbsurge.engine.protocol._on_share_message`); handled by the master
    (`dbsurge.engine.protocol._on_share_ok`). Both may be missing (None, False).
    """

    NAME: ClassVar[str] = "dbsurge:share_ok"

    proposal: int | None = None
    late: bool = False

    @classmethod
    def decode(cls, data: dict | None) -> ShareOk:
        d = _data(data)
        return cls(proposal=d.get("proposal"), late=d.get("late", False))


@dataclass(frozen=True)
class Rate(Message):
    """A live rate override from plan time ``at_s`` (a new rate, or a scale of the plan's: `dbsurge.plan.segments`).

    Sent by the master (`dbsurge.engine.protocol.change_rate`); handled by the worker
    (`dbsurge.engine.protocol._on_rate_message`). ``at_s`` is required; ``rate_tps`` and ``scale`` may be missing (None).
    """

    NAME: ClassVar[str] = "dbsurge:rate"

    at_s: float
    rate_tps: float | None = None
    scale: float | None = None

    @classmethod
    def decode(cls, data: dict) -> Rate:
        return cls(at_s=data["at_s"], rate_tps=data.get("rate_tps"), scale=data.get("scale"))


@dataclass(frozen=True)
class Leave(Message):
    """A worker leaves gracefully (``why``: SIGTERM, a Spot notice): move its share at once.

    Sent by the worker (`dbsurge.engine.stopping.leave`); handled by the master (`dbsurge.engine.protocol._on_leave_message`),
    which answers `LeaveOk`. ``why`` may be missing (None).
    """

    NAME: ClassVar[str] = "dbsurge:leave"

    why: str | None = None

    @classmethod
    def decode(cls, data: dict | None) -> Leave:
        return cls(why=_data(data).get("why"))


@dataclass(frozen=True)
class LeaveOk(Message):
    """The arrival from which the others take a leaving worker's share (None: it held none; stop now).

    Sent by the master (`dbsurge.engine.protocol._on_leave_message`); handled by the worker
    (`dbsurge.engine.protocol._on_leave_ok`, awaited by `dbsurge.engine.stopping.leave`). ``until_number`` may be missing (None).
    """

    NAME: ClassVar[str] = "dbsurge:leave_ok"

    until_number: int | None = None

    @classmethod
    def decode(cls, data: dict | None) -> LeaveOk:
        return cls(until_number=_data(data).get("until_number"))


@dataclass(frozen=True)
class Renew(Message):
    """A worker asks for its lease to be renewed, stamped with its own monotonic clock (`dbsurge.engine.lease`).

    Sent by the worker (`dbsurge.engine.lease.renew_now`); handled by the master (`dbsurge.engine.lease.on_renew`),
    which answers `Lease` while the worker holds a share. ``sent_ns`` may be missing (None).
    """

    NAME: ClassVar[str] = "dbsurge:renew"

    sent_ns: int | None = None

    @classmethod
    def decode(cls, data: dict | None) -> Renew:
        return cls(sent_ns=_data(data).get("sent_ns"))


@dataclass(frozen=True)
class Lease(Message):
    """The master's renewal: the worker's lease holds until ``sent_ns`` (its `Renew`'s) + `lease.LEASE_S`.

    Sent by the master (`dbsurge.engine.lease.on_renew`); handled by the worker (`dbsurge.engine.lease.on_lease`), which
    ignores a ``sent_ns`` that is missing (None) or not an integer.
    """

    NAME: ClassVar[str] = "dbsurge:lease"

    sent_ns: int | None = None

    @classmethod
    def decode(cls, data: dict | None) -> Lease:
        return cls(sent_ns=_data(data).get("sent_ns"))


@dataclass(frozen=True)
class Close(Message):
    """Stop the plan: close the pacer for ``reason``, drain up to ``drain_s``, write off the rest, send `Final`.

    Sent by the master to each worker, or by a local run to itself (`dbsurge.engine.stopping.close_run`);
    handled by the worker or the local run (`dbsurge.engine.stopping.on_close_message`). ``until_position``
    (where an open-ended plan is cut) and ``stop_s`` (the plan time at which the master stopped the plan
    before its end: no stage's window reaches past it) may be missing (None); the other fields are required.
    """

    NAME: ClassVar[str] = "dbsurge:close"

    reason: str
    drain_s: float
    in_flight_reason: str
    until_position: float | None = None
    stop_s: float | None = None

    @classmethod
    def decode(cls, data: dict) -> Close:
        return cls(reason=data["reason"], drain_s=data["drain_s"], in_flight_reason=data["in_flight_reason"],
                   until_position=data.get("until_position"), stop_s=data.get("stop_s"))


@dataclass(frozen=True)
class Final(Message):
    """A worker's (or the local run's) final account: its last payloads and what was still in flight.

    Sent by the worker or the local run (`dbsurge.engine.stopping.final_account`); handled by the master or the
    local run (`dbsurge.engine.stopping.on_final_message`). ``payload`` is required; ``in_flight`` may be missing
    (0), ``oldest_s`` (0.0), ``reason`` (None).
    """

    NAME: ClassVar[str] = "dbsurge:final"

    payload: list | dict
    in_flight: int = 0
    oldest_s: float = 0.0
    reason: str | None = None

    @classmethod
    def decode(cls, data: dict) -> Final:
        return cls(payload=data["payload"], in_flight=data.get("in_flight", 0), oldest_s=data.get("oldest_s", 0.0),
                   reason=data.get("reason"))
