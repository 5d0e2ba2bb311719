"""The control messages (`dbsurge.engine.wire`): each round-trips, names are unique, missing keys take their defaults."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from dbsurge.engine import wire

SETUP = wire.Setup(
    target_uri="postgresql://u@h/db", target_options={"pool": 4}, workload_options={"customers": 10},
    operations=[["order_create", 1.0]], plan={"stages": []}, start_epoch_ns=1_700_000_000_000_000_000, index=1,
    count=3, arrivals="poisson", seed=7, max_lag_s=0.5, changes=[[1.0, 200.0, None]], op_timeout_s=5.0,
    clock_offset_ns=-1234, credentials={"needs_password": True})

#: One message of every type, every field set away from its default.
EXAMPLES = [
    SETUP,
    wire.Hello(host="h1", address="10.0.0.1", version="1.2.3", build="abc"),
    wire.Challenge(nonce="n0nce"),
    wire.Proof(proof="deadbeef"),
    wire.Clock(t1=1, t2=2, t3=3),
    wire.Refused(reason="wrong token", hint="do this"),
    wire.Share(index=2, count=4, from_number=1000, setup=SETUP, lost=True, write_off_until=900, proposal=3),
    wire.ShareOk(proposal=3, late=True),
    wire.Rate(at_s=12.5, rate_tps=300.0, scale=None),
    wire.Leave(why="SIGTERM"),
    wire.LeaveOk(until_number=4321),
    wire.Renew(sent_ns=99),
    wire.Lease(sent_ns=99),
    wire.Close(reason="interrupted", drain_s=2.0, in_flight_reason="interrupted", until_position=10.5, stop_s=10.25),
    wire.Final(payload=[{"ops": ["a"]}], in_flight=2, oldest_s=0.25, reason="in_flight"),
]


def test_every_message_has_an_example():
    assert {type(m) for m in EXAMPLES} == set(wire.MESSAGES.values())


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_a_message_round_trips(message):
    data = message.encode()
    assert type(message).decode(data) == message
    # what Locust carries is plain data: through JSON (as through msgpack) it decodes the same
    assert type(message).decode(json.loads(json.dumps(data))) == message


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_a_message_names_its_two_ends(message):
    doc = type(message).__doc__
    assert "Sent by" in doc or "sends" in doc
    assert "handled by" in doc or "handles" in doc or "answers" in doc


def test_names_are_unique_and_are_dbsurge_messages():
    names = [t.NAME for t in wire.MESSAGES.values()]
    assert len(names) == len(set(names)) == 15
    assert all(re.fullmatch(r"dbsurge:[a-z_]+", n) for n in names)


def test_a_second_type_of_the_same_name_is_refused():
    with pytest.raises(ValueError, match="two control messages named dbsurge:lease"):
        @dataclasses.dataclass(frozen=True)
        class Again(wire.Message):
            NAME = "dbsurge:lease"


def test_send_hands_the_name_and_the_encoded_data_to_the_runner():
    sent = []

    class Runner:
        def send_message(self, msg_type, data=None, client_id=None):
            sent.append((msg_type, data, client_id))

    wire.send(Runner(), wire.LeaveOk(until_number=5), client_id="w1")
    wire.send(Runner(), wire.Leave(why="spot"))
    assert sent == [("dbsurge:leave_ok", {"until_number": 5}, "w1"), ("dbsurge:leave", {"why": "spot"}, None)]


def test_missing_keys_take_the_documented_defaults():
    assert wire.Hello.decode(None) == wire.Hello(host=None, address=None, version=None, build=None)
    assert wire.Proof.decode({}).proof is None
    assert wire.Clock.decode({"t1": 5}) == wire.Clock(t1=5, t2=None, t3=None)
    assert wire.Refused.decode(None) == wire.Refused(reason="refused", hint=wire.TOKEN_HINT)
    share = wire.Share.decode({"index": 0, "count": 2, "from_number": 50, "setup": SETUP.encode()})
    assert (share.lost, share.write_off_until, share.proposal) == (False, 50, None)
    assert wire.Share.decode({**share.encode(), "write_off_until": None}).write_off_until == 50
    assert wire.ShareOk.decode(None) == wire.ShareOk(proposal=None, late=False)
    assert wire.Rate.decode({"at_s": 1.0}) == wire.Rate(at_s=1.0, rate_tps=None, scale=None)
    assert wire.Leave.decode(None).why is None
    assert wire.LeaveOk.decode({}).until_number is None
    assert wire.Renew.decode(None).sent_ns is None
    assert wire.Lease.decode({}).sent_ns is None
    close = wire.Close.decode({"reason": "users_exhausted", "drain_s": 0.0, "in_flight_reason": "in_flight"})
    assert close.until_position is None
    final = wire.Final.decode({"payload": []})
    assert (final.in_flight, final.oldest_s, final.reason) == (0, 0.0, None)
    defaults = {k: v for k, v in SETUP.encode().items() if k not in ("op_timeout_s", "clock_offset_ns", "credentials")}
    setup = wire.Setup.decode(defaults)
    assert (setup.op_timeout_s, setup.clock_offset_ns, setup.credentials) == (30.0, 0, {})


@pytest.mark.parametrize(("message_type", "data", "error"), [
    (wire.Challenge, {}, KeyError),
    (wire.Clock, {"t2": 1}, KeyError),
    (wire.Rate, {"rate_tps": 5.0}, KeyError),
    (wire.Share, {"index": 0, "count": 1, "setup": SETUP.encode()}, KeyError),
    (wire.Share, {"index": 0, "count": 1, "from_number": 0}, KeyError),
    (wire.Close, {"reason": "x", "drain_s": 0.0}, KeyError),
    (wire.Final, {"in_flight": 1}, KeyError),
    (wire.Setup, {**SETUP.encode(), "surprise": 1}, TypeError),
    (wire.Setup, {"target_uri": "x"}, TypeError),
])
def test_a_required_field_that_is_missing_is_refused(message_type, data, error):
    with pytest.raises(error):
        message_type.decode(data)


def test_no_message_name_is_spelled_outside_the_wire_module():
    """...nor sent or registered but through `wire.send` and `wire.listen`."""
    root = Path(__file__).resolve().parent.parent
    names = {t.NAME for t in wire.MESSAGES.values()}
    offenders = []
    for folder in ("dbsurge", "collectors", "locustfiles", "shapes"):
        for path in (root / folder).rglob("*.py"):
            if path.name == "wire.py" and path.parent.name == "engine":
                continue
            text = path.read_text()
            offenders += [f"{path.relative_to(root)}: {n}" for n in names if f'"{n}"' in text or f"'{n}'" in text]
            if re.search(r"\.(send|register)_message\(", text):  # every message goes through `wire.send`/`listen`
                offenders.append(f"{path.relative_to(root)}: a message sent or registered by name")
    assert offenders == []
