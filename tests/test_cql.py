"""The CQL binding, unit-tested on scylla-driver's own objects: no CQL server installs on these machines.

What is checked is what the binding would send: the ``Cluster`` settings (token-aware routing over DC-aware
round robin, consistency, serial consistency, request timeout, authentication), the prepared statements'
text (YCSB's cassandra schema), statements bound from the driver's ``PreparedStatement`` (their consistency
and routing key, hence the token and the ScyllaDB shard the driver routes them to), UNLOGGED batches, and
the classification of the driver's exceptions. The full load and run against a server are in
tests/test_cql_contract.py, which runs when ``DBSURGE_TEST_CQL_URI`` names one.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from runs import dbsurge

cassandra = pytest.importorskip("cassandra", reason="scylla-driver is not installed (pip install 'dbsurge[cql]')")

from cassandra import ConsistencyLevel  # noqa: E402
from cassandra.auth import PlainTextAuthProvider  # noqa: E402
from cassandra.cluster import EXEC_PROFILE_DEFAULT, NoHostAvailable  # noqa: E402
from cassandra.connection import ConnectionShutdown  # noqa: E402
from cassandra.cqltypes import UTF8Type  # noqa: E402
from cassandra.metadata import Murmur3Token  # noqa: E402
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy  # noqa: E402
from cassandra.protocol import ColumnMetadata, OverloadedErrorMessage  # noqa: E402
from cassandra.query import BatchType, PreparedStatement, tuple_factory  # noqa: E402
from cassandra.shard_info import _ShardingInfo  # noqa: E402

from dbsurge.base.errors import TargetError, UserError  # noqa: E402
from dbsurge.targets import open_target  # noqa: E402
from dbsurge.workloads import get_workload  # noqa: E402
from dbsurge.workloads.ycsb_cql import CQL_KEY, insert_batch, statements  # noqa: E402


def _prepared(query: str, columns: list[str], keyspace: str = "ycsb") -> PreparedStatement:
    """A driver ``PreparedStatement`` as the server's PREPARE answer would give it (key column first)."""
    metadata = [ColumnMetadata(keyspace, "usertable", name, UTF8Type) for name in columns]
    key_index = [columns.index(CQL_KEY)] if CQL_KEY in columns else None
    return PreparedStatement(metadata, b"qid", key_index, query, keyspace, 4, [], None)


class RecordingSession:
    """What a `CqlSession` hands the workload, recording instead of sending: no server involved.

    `prepare` builds the driver's own PreparedStatement from the statement's placeholders (the columns a
    server would describe) and sets the target's consistency on it, as `CqlTarget.prepared` does.
    """

    def __init__(self, target) -> None:
        self.target = target
        self.retries = 0
        self.prepared: list[str] = []
        self.sent: list = []

    def prepare(self, cql: str) -> PreparedStatement:
        self.prepared.append(cql)
        columns = _bind_columns(cql)
        return self.target.configure(_prepared(cql, columns))

    def execute(self, statement, values=None):
        bound = statement.bind(values) if isinstance(statement, PreparedStatement) else statement
        self.sent.append(bound)
        return _Rows([("row",)])

    def close(self) -> None:
        pass


class _Rows(list):
    def one(self):
        return self[0] if self else None


def _bind_columns(cql: str) -> list[str]:
    """The column of each ``?`` in the ycsb statements (enough for them, not a CQL parser)."""
    if cql.startswith("INSERT"):
        return [c.strip() for c in cql.split("(", 1)[1].split(")", 1)[0].split(",")]
    if cql.startswith("UPDATE"):
        sets = cql.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
        return [s.split("=")[0].strip() for s in sets.split(",")] + [CQL_KEY]
    if "token(" in cql:
        return [CQL_KEY, "[limit]"]
    return [CQL_KEY]


# ---- the target: URI, options, the driver's Cluster settings -------------------------------------------


def test_uri_and_options_make_the_drivers_cluster_settings() -> None:
    target = open_target("scylla://app:s3cret@node1,node2:19042/ks1",
                         {"consistency": "quorum", "serial_consistency": "LOCAL_SERIAL", "local_dc": "dc1",
                          "op_timeout": "2s"})
    assert (target.kind, target.flavor, target.hosts, target.port, target.keyspace, target.user) == \
        ("cql", "scylla", ("node1", "node2"), 19042, "ks1", "app")
    kwargs = target.cluster_kwargs()
    assert kwargs["contact_points"] == ["node1", "node2"] and kwargs["port"] == 19042
    profile = kwargs["execution_profiles"][EXEC_PROFILE_DEFAULT]
    assert profile.consistency_level == ConsistencyLevel.QUORUM
    assert profile.serial_consistency_level == ConsistencyLevel.LOCAL_SERIAL
    assert profile.request_timeout == 2.0 == target.op_timeout_s
    assert profile.row_factory is tuple_factory  # not a namedtuple class built per result set
    policy = profile.load_balancing_policy
    assert isinstance(policy, TokenAwarePolicy) and isinstance(policy._child_policy, DCAwareRoundRobinPolicy)
    assert policy._child_policy.local_dc == "dc1"
    assert isinstance(kwargs["auth_provider"], PlainTextAuthProvider) and kwargs["auth_provider"].username == "app"
    described = json.dumps(target.describe())
    assert "s3cret" not in described and "s3cret" not in target.display
    assert '"consistency": "QUORUM"' in described


def test_defaults_are_ycsbs_one_port_9042_no_auth() -> None:
    target = open_target("cql://127.0.0.1")
    kwargs = target.cluster_kwargs()
    assert kwargs["port"] == 9042 and "auth_provider" not in kwargs and "ssl_context" not in kwargs
    assert kwargs["execution_profiles"][EXEC_PROFILE_DEFAULT].consistency_level == ConsistencyLevel.ONE
    assert kwargs["connect_timeout"] == 10.0


@pytest.mark.parametrize(("uri", "options", "expected"), [
    ("cql://h", {"consistency": "MOST"}, "expected one of ANY, ONE"),
    ("cql://h", {"serial_consistency": "QUORUM"}, "expected one of SERIAL, LOCAL_SERIAL"),
    ("cql://h:notaport", None, "is not a number"),
    ("cql:///ks", None, "no host"),
    ("cql://h", {"reactor": "twisted"}, "expected one of auto, asyncore"),
    ("cql://h", {"consistancy": "ONE"}, "did you mean consistency"),
])
def test_bad_uris_and_options_fail_in_one_line(uri: str, options: dict | None, expected: str) -> None:
    with pytest.raises(TargetError) as err:
        open_target(uri, options)
    assert expected in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("uri", "options"), [
    ("cql://127.0.0.1/bad;DROP", None),
    ("cql://127.0.0.1/ks%3BDROP%20TABLE%20x", None),  # the same, percent-encoded
    ("cql://127.0.0.1/1ks", None),
    ("cql://127.0.0.1/_ks", None),
    ("cql://127.0.0.1/a/b", None),
    ("cql://127.0.0.1/" + "k" * 49, None),  # Cassandra's limit is 48 characters
    ("cql://127.0.0.1", {"keyspace": "x y"}),
])
def test_a_keyspace_that_is_not_a_cql_name_is_refused_at_parse_time(uri: str, options: dict | None) -> None:
    """The URI's keyspace reaches the server inside statements (CREATE KEYSPACE ...): only a CQL name passes."""
    with pytest.raises(TargetError) as err:
        open_target(uri, options)
    message = str(err.value)
    assert "is not a CQL name" in message and "\n" not in message, message


def test_the_uris_keyspace_is_the_one_the_workload_uses() -> None:
    """``cql://host/KS``: the schema, the load and every operation are in KS (case folded as the server folds it);
    the workload option keyspace applies when the URI names none, and the two naming different ones is refused."""
    target = open_target("cql://127.0.0.1:9042/NoSuchKs")
    assert target.keyspace == "nosuchks" and target.describe()["keyspace"] == "nosuchks"
    cql = statements(get_workload("ycsb", target, {"fieldcount": "1"}))
    assert cql.create_keyspace().startswith("CREATE KEYSPACE IF NOT EXISTS nosuchks WITH")
    assert cql.read() == "SELECT y_id, field0 FROM nosuchks.usertable WHERE y_id = ?"
    assert cql.insert().startswith("INSERT INTO nosuchks.usertable")
    assert statements(get_workload("ycsb", target, {"keyspace": "NOSUCHKS"})).keyspace == "nosuchks"
    assert statements(get_workload("ycsb", open_target("cql://127.0.0.1", {"keyspace": "ks2"}))).keyspace == "ks2"
    assert statements(get_workload("ycsb", open_target("cql://127.0.0.1/"))).keyspace == "ycsb"
    with pytest.raises(UserError) as err:
        get_workload("ycsb", target, {"keyspace": "other"})
    assert "names keyspace nosuchks and --workload-option keyspace=other" in str(err.value)
    with pytest.raises(TargetError, match="name it once"):
        open_target("cql://127.0.0.1/ks1", {"keyspace": "ks2"})


def test_a_bad_keyspace_on_the_command_line_is_one_line_and_exit_2(tmp_path) -> None:
    """``dbsurge run --target 'cql://.../bad;DROP'``: one line, exit 2, before any connection (port 1 listens to
    nothing: a connection attempt would say so instead)."""
    proc = dbsurge("run", "--workload", "ycsb", "--target", "cql://127.0.0.1:1/bad;DROP", "--shape", "constant",
                   "--rate", "10", "--duration", "2s", "--results-dir", str(tmp_path / "results"), cwd=tmp_path,
                   timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "keyspace 'bad;DROP' is not a CQL name" in lines[0], proc.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_under_gevent_the_asyncore_reactor_is_chosen() -> None:
    # the driver's gevent reactor is gone (scylla-driver >= 3.29.12); under monkey patching asyncore is cooperative
    code = ("from gevent import monkey; monkey.patch_all()\n"
            "from dbsurge.targets import open_target\n"
            "print(open_target('cql://127.0.0.1').cluster_kwargs()['connection_class'].__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "AsyncoreConnection", out.stderr[-2000:]


# ---- what the ycsb workload prepares and sends ------------------------------------------------------------


def test_schema_is_ycsbs_cassandra_usertable_with_keyspace_options() -> None:
    target = open_target("cql://127.0.0.1")
    workload = get_workload("ycsb", target, {"keyspace": "study002", "replicationfactor": "3",
                                             "replicationstrategy": "NetworkTopologyStrategy", "fieldcount": "3"})
    cql = statements(workload)
    assert cql.create_keyspace() == ("CREATE KEYSPACE IF NOT EXISTS study002 WITH replication = "
                                     "{'class': 'NetworkTopologyStrategy', 'replication_factor': 3}")
    assert cql.create_table() == ("CREATE TABLE IF NOT EXISTS study002.usertable (y_id varchar PRIMARY KEY, "
                                  "field0 varchar, field1 varchar, field2 varchar)")
    assert cql.read() == "SELECT y_id, field0, field1, field2 FROM study002.usertable WHERE y_id = ?"
    assert cql.update(["field1"]) == "UPDATE study002.usertable SET field1 = ? WHERE y_id = ?"
    assert cql.scan() == ("SELECT y_id, field0, field1, field2 FROM study002.usertable "
                          "WHERE token(y_id) >= token(?) LIMIT ?")


def test_operations_are_prepared_bound_at_the_consistency_and_routed_by_token() -> None:
    target = open_target("cql://127.0.0.1", {"consistency": "LOCAL_QUORUM"})
    workload = get_workload("ycsb", target, {"recordcount": "1000"})
    session = RecordingSession(target)
    ops = workload.new_client(session, seed=3)
    # everything is prepared once, up front: no statement text is sent per operation
    prepared = len(session.prepared)
    assert prepared == 1 + 10 + 1 + 10 + 1 + 1 + 10
    ops["read"]()
    ops["update"]()
    ops["insert"]()
    assert len(session.prepared) == prepared
    read, update, insert = session.sent
    for bound in (read, update, insert):
        assert bound.consistency_level == ConsistencyLevel.LOCAL_QUORUM
        assert bound.routing_key.decode().startswith("user")  # the partition key: token-aware routing
    assert read.prepared_statement.query_string.startswith("SELECT y_id, field0")
    assert update.prepared_statement.query_string.startswith("UPDATE ycsb.usertable SET field")
    assert len(update.values) == 2 and len(insert.values) == 11
    # the shard of the token, as scylla-driver computes it for shard-aware routing
    sharding = _ShardingInfo(0, 8, "org.apache.cassandra.dht.Murmur3Partitioner", "biased-token-round-robin", 12,
                             19042, None)
    shard = sharding.shard_id_from_token(Murmur3Token.from_key(read.routing_key).value)
    assert 0 <= shard < 8


def test_batched_load_is_one_unlogged_batch_at_the_consistency() -> None:
    target = open_target("cql://127.0.0.1", {"consistency": "QUORUM"})
    workload = get_workload("ycsb", target, {"recordcount": "100", "batchsize": "20", "fieldcount": "2"})
    insert = _prepared(statements(workload).insert(), [CQL_KEY, "field0", "field1"])
    batch = insert_batch(target, insert, [(workload.key_for(i), "a", "b") for i in range(20)])
    assert batch.batch_type == BatchType.UNLOGGED and batch.consistency_level == ConsistencyLevel.QUORUM
    assert len(batch._statements_and_parameters) == 20
    # the load through the recording session: unbatched, one INSERT per record; batched, UNLOGGED batches
    from dbsurge.workloads.base import LoadProgress
    from dbsurge.workloads.ycsb_cql import load

    for size, calls in ((1, 100), (20, 5)):
        session = RecordingSession(target)
        make = lambda rng, first, last: [(workload.key_for(i), *workload.record(rng)) for i in range(first, last)]  # noqa: E731
        session.execute = _no_rows_then(session.execute)
        assert load(workload, session, make=make, start=0, stop=100, batch_size=size,
                    progress=LoadProgress("ycsb", 100, enabled=False)) == 100
        sent = [s for s in session.sent if s is not None]
        assert len(sent) == calls
        if size > 1:
            assert all(s.batch_type == BatchType.UNLOGGED for s in sent)


def _no_rows_then(execute):
    """The load first asks whether the table has rows; answer "no" to that, record the rest."""
    def run(statement, values=None):
        if isinstance(statement, str) and "LIMIT 1" in statement:
            return _Rows()
        return execute(statement, values)
    return run


# ---- classify ---------------------------------------------------------------------------------------------


def test_classify_the_drivers_errors() -> None:
    target = open_target("cql://127.0.0.1")
    assert target.classify(cassandra.OperationTimedOut("timed out", "127.0.0.1")) == "timeout"
    assert target.classify(cassandra.ReadTimeout("coordinator timeout", consistency=1, required_responses=2,
                                                 received_responses=1)) == "server:ReadTimeout"
    assert target.classify(cassandra.WriteTimeout("coordinator timeout", write_type=0)) == "server:WriteTimeout"
    assert target.classify(cassandra.Unavailable("not enough replicas", consistency=4, required_replicas=2,
                                                 alive_replicas=1)) == "server:Unavailable"
    assert target.classify(cassandra.ReadFailure("replica failed", failures=1)) == "server:ReadFailure"
    assert target.classify(cassandra.WriteFailure("replica failed", write_type=0)) == "server:WriteFailure"
    assert target.classify(OverloadedErrorMessage(4097, "overloaded", None)) == "server:Overloaded"
    assert target.classify(cassandra.InvalidRequest("unconfigured table")) == "server:InvalidRequest"
    assert target.classify(cassandra.RateLimitReached(cassandra.OperationType.Read, False)) == "throttled"
    assert target.classify(NoHostAvailable("none", {"127.0.0.1:9042": ConnectionRefusedError()})) == "connect"
    # the default retry policy's "next host" after an Unavailable, on one node: the server's answer, not a connect
    unavailable = cassandra.Unavailable("not enough replicas", consistency=4, required_replicas=2, alive_replicas=1)
    assert target.classify(NoHostAvailable("all failed", {"127.0.0.1:9042": unavailable})) == "server:Unavailable"
    assert target.classify(NoHostAvailable("all failed", {"h1:9042": unavailable,
                                                          "h2:9042": ConnectionRefusedError()})) == "connect"
    assert target.classify(cassandra.AuthenticationFailed("bad credentials")) == "connect"
    assert target.classify(ConnectionShutdown("closed")) == "disconnect"
    assert target.classify(LookupError("ycsb read: no record user1")) == "other"


def test_check_against_nothing_listening_is_one_line() -> None:
    import socket

    with socket.socket() as s:  # a port on 127.0.0.1 that nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = open_target(f"cql://127.0.0.1:{port}", {"connect_timeout": "2s"})
    with pytest.raises(TargetError) as err:
        target.check()
    assert "no host reachable at 127.0.0.1 port" in str(err.value) and "\n" not in str(err.value)


def test_consistency_levels_for_ycsb_run() -> None:
    from dbsurge.base.errors import UserError
    from dbsurge.scenarios.ycsb_consistency import consistency_rows, parse_levels, target_option

    assert parse_levels("one, quorum", "scylla://node1/ycsb") == ["ONE", "QUORUM"]
    assert target_option("cql", "QUORUM") == "consistency=QUORUM"
    assert target_option("dynamodb", "STRONG") == "consistent_read=true"
    for text, target in (("ONE", "cql://h"), ("ONE,ONE", "cql://h"), ("ONE,MOST", "cql://h"),
                         ("ONE,QUORUM", "mongodb://h/")):
        with pytest.raises(UserError):
            parse_levels(text, target)
    numbers = {"ONE": {"throughput_ops_s": 100.0, "read_p99_ms": 2.0, "update_p99_ms": 4.0, "operations": 10,
                       "failures": 0},
               "QUORUM": {"throughput_ops_s": 80.0, "read_p99_ms": 5.0, "update_p99_ms": 6.0, "operations": 10,
                          "failures": 1}}
    rows = consistency_rows(list(numbers.items()))
    assert rows[1]["throughput_vs_first"] == 0.8 and rows[1]["read_p99_vs_first"] == 2.5
    assert rows[0]["update_p99_vs_first"] == 1.0
