"""The one backoff policy (`dbsurge.base.backoff`): full jitter, capped, doubling, seeded; and every retry loop uses it.

- The wait before retry n is uniform in [0, min(cap, base * 2**n)] (AWS's "full jitter").
- A seeded generator gives the same waits every time; the policy never overflows.
- No module but the policy computes a wait as ``base * 2**n`` or draws one with ``uniform``: the six loops that
  each had a formula of their own (four formulas in all) now ask the policy.
- A DynamoDB-API session's throttling retries wait what the policy says, each counted once in ``retries``.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
from botocore import exceptions as bce

from dbsurge.base.backoff import Backoff
from dbsurge.targets import open_target
from dbsurge.targets.dynamodb import THROTTLE_BACKOFF_CAP_S, DynamoSession, ThrottledError

REPO = Path(__file__).resolve().parent.parent


def test_the_wait_is_full_jitter_under_a_doubling_capped_ceiling():
    policy = Backoff(0.025, 1.0, random.Random(1))
    assert [policy.ceiling(n) for n in range(8)] == [0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for n in range(8):
        waits = [policy.delay(n) for _ in range(2000)]
        assert all(0.0 <= w <= policy.ceiling(n) for w in waits)
        # full jitter: the waits fill the whole range, from near 0 to near the ceiling (not [ceiling/2, ceiling])
        assert min(waits) < 0.05 * policy.ceiling(n) and max(waits) > 0.95 * policy.ceiling(n)
    assert policy.ceiling(5000) == 1.0 and 0.0 <= policy.delay(5000) <= 1.0  # no float overflow at 2**5000
    assert Backoff(0.0, 1.0).delay(3) == 0.0
    with pytest.raises(ValueError):
        Backoff(-1.0, 1.0)
    with pytest.raises(ValueError):
        Backoff(float("nan"), 1.0)


def test_a_seeded_policy_waits_the_same_every_time():
    def waits(seed: int) -> list[float]:
        policy = Backoff(0.1, 1.0, random.Random(seed))
        return [policy.delay(n) for n in range(10)]

    assert waits(7) == waits(7)
    assert waits(7) != waits(8)


def _project_files() -> list[Path]:
    return [p for root in ("dbsurge", "collectors", "locustfiles", "shapes") for p in (REPO / root).rglob("*.py")]


def test_every_retry_loop_waits_through_the_one_policy():
    """A wait that doubles (``x * 2**attempt``) or a jittered draw (``uniform``) outside the
    policy is a backoff formula of its own: there were four, in six loops."""
    own = REPO / "dbsurge" / "base" / "backoff.py"
    found = []
    for path in _project_files():
        if path == own:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            doubling = (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow)
                        and isinstance(node.left, ast.Constant) and node.left.value == 2
                        and not isinstance(node.right, ast.Constant))
            jitter = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "uniform"
            if doubling or jitter:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def _throttling(*_args, **_kwargs):
    raise bce.ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "GetItem")


def test_a_dynamodb_session_waits_the_policy_s_waits_and_counts_each_retry():
    target = open_target("dynamodb://127.0.0.1:9?region=us-east-1",
                         {"throttle_retries": "6", "throttle_backoff": "10ms", "op_timeout": "60s"})
    waits: list[float] = []
    session = DynamoSession(object(), target, sleep=waits.append, rng=random.Random(42))
    with pytest.raises(ThrottledError) as caught:
        session.call(_throttling)
    assert caught.value.attempts == 7 and session.retries == 6 == len(waits)  # retries counted, apart from the failure
    replay = Backoff(0.010, THROTTLE_BACKOFF_CAP_S, random.Random(42))
    assert waits == [replay.delay(n) for n in range(6)]
    assert target.classify(caught.value) == "throttled"
