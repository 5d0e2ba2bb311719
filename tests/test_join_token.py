"""Who may join a master: loopback by default; beyond it, only workers that prove the join token.

The database and one worker host live in a network namespace made for the test; the master
listens on the namespace's veth address on the root side, so a worker inside the namespace is
"another host". A worker without the token gets no share and sends nothing; with it, it gets its
share. The ledger balances either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from ledger_checks import ledger
from runs import REPO, explain, locust, only_run_dir

from dbsurge.embedded.servers import free_port
from dbsurge.engine.membership import Membership, proof

FILES = f"{REPO}/locustfiles/orders.py,{REPO}/shapes/constant.py"


def test_membership_challenge_and_proof():
    m = Membership("s3cret-token")
    nonce = m.challenge("w1")
    assert m.members(["w1"]) == []
    assert not m.answer("w1", proof("wrong", nonce, "w1")) and "wrong join token" in m.refused["w1"]
    nonce = m.challenge("w1")
    assert m.answer("w1", proof("s3cret-token", nonce, "w1")) and m.members(["w1", "w2"]) == ["w1"]
    assert m.challenge("w1") is None  # proven stays proven across Locust's "ready again"
    open_door = Membership(None)  # no token: a worker is a member once its hello with our build is read
    assert open_door.members(["a", "b"]) == [] and open_door.challenge("a") is None
    assert open_door.greet("a") and open_door.members(["a", "b"]) == ["a"]
    open_door.refused["b"] = "another dbsurge build"
    assert not open_door.greet("b") and open_door.members(["a", "b"]) == ["a"]


def test_non_loopback_master_needs_a_token(tmp_path, pg_uri):
    proc = locust("-f", FILES, "--master", "--headless", "--master-bind-host", "0.0.0.0", "--master-bind-port",
                  str(free_port()), "--target", pg_uri, "--rate", "10", "-t", "2s", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, explain(proc)
    lines = [x for x in proc.stderr.splitlines() if x.startswith("dbsurge:")]
    assert len(lines) == 1 and "DBSURGE_JOIN_TOKEN" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()


def test_processes_master_binds_loopback():
    # in a child: importing Locust here would monkey-patch this test process (ssl, boto3) for the tests after
    code = ("from locust.argument_parser import get_parser\nfrom dbsurge.config.options import add_options\n"
            "p = get_parser(); add_options(p)\nprint(p.parse_args(['-f', 'x.py']).master_bind_host)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "127.0.0.1", out.stderr[-2000:]


@pytest.mark.parametrize("ns_worker_has_token", [False, True])
def test_worker_in_another_namespace(tmp_path, netns_db, ns_worker_has_token):
    token = "join-" + os.urandom(8).hex()
    port = str(free_port())
    common = ["--target", netns_db.uri, "--operation", "product_lookup", "--workload-option", "products=300",
              "--no-db-sampler"]
    env = {**os.environ, "DBSURGE_JOIN_TOKEN": token}
    master = subprocess.Popen(
        # a refused worker does not count toward --expect-workers (dbsurge.engine.admission): one member is all there is
        [sys.executable, "-m", "locust", "-f", FILES, "--master", "--headless", "--expect-workers",
         "2" if ns_worker_has_token else "1",
         "--master-bind-host", netns_db.netns.host_ip, "--master-bind-port", port, "--rate", "60", "-t", "6s",
         "--results-dir", str(tmp_path / "results"), *common],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    worker_cmd = [sys.executable, "-m", "locust", "-f", FILES, "--worker", "--master-host", netns_db.netns.host_ip,
                  "--master-port", port, *common]
    ns_env = {k: v for k, v in env.items() if k != "DBSURGE_JOIN_TOKEN" or ns_worker_has_token}
    remote = subprocess.Popen(netns_db.netns.cmd("env", *[f"{k}={v}" for k, v in ns_env.items()
                                                          if k in ("PATH", "DBSURGE_JOIN_TOKEN", "DBSURGE_HOME")],
                                                 *worker_cmd),
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if not ns_worker_has_token:
        time.sleep(4)  # refused before the member connects: it must not have counted as the one expected
    local = subprocess.Popen(worker_cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        out, _ = master.communicate(timeout=120)
    finally:
        _kill_left(master, local, remote)
    run, total, meta = _the_run(tmp_path / "results")
    assert total["planned"] == 360 and total["not_sent_unaccounted"] == 0, (total, out[-3000:])
    per_worker = meta["results"]["operations_per_worker"]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    if ns_worker_has_token:
        assert len([w for w, n in per_worker.items() if n > 0]) == 2, per_worker
        assert not meta["results"]["refused_workers"]
        assert master.returncode == 0, out[-3000:]
    else:
        refused = meta["results"]["refused_workers"]
        assert len(refused) == 1 and "no join token" in next(iter(refused.values())), meta["results"]
        assert any(e["kind"] == "worker_refused" for e in events)
        assert list(refused)[0] not in per_worker  # it reported nothing: it sent nothing
        assert total["ok"] == 360, total  # the member carried the whole plan
        assert "workers refused" in out


ROGUE_LOCUSTFILE = '''
from locust import User, constant, task


class RogueUser(User):
    wait_time = constant(1)

    @task
    def nothing(self):
        pass
'''


def test_processes_master_refuses_local_workers_without_its_token(tmp_path, pg_uri):
    """A loopback --processes master makes a token for the run that only its children have: a plain
    ``locust --worker`` of another locustfile, and one of ours without the token, are refused, named,
    told to quit, and take no share; the children carry the whole plan and the ledger balances."""
    import time

    (tmp_path / "rogue.py").write_text(ROGUE_LOCUSTFILE)
    port = str(free_port())
    common = ["--target", pg_uri, "--operation", "product_lookup", "--workload-option", "products=300",
              "--no-db-sampler"]
    env = {k: v for k, v in os.environ.items() if k != "DBSURGE_JOIN_TOKEN"}
    master = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", FILES, "--headless", "--processes", "2", "--master-bind-port", port,
         "--master-port", port, "--rate", "40", "-t", "12s", "--results-dir", str(tmp_path / "results"), *common],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    time.sleep(4)  # the children are in; the rogues join the running test
    rogues = [subprocess.Popen([sys.executable, "-m", "locust", "-f", str(tmp_path / "rogue.py"), "--worker",
                                "--master-port", port], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=env),
              subprocess.Popen([sys.executable, "-m", "locust", "-f", FILES, "--worker", "--master-port", port,
                                *common], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)]
    try:
        out, _ = master.communicate(timeout=120)
        rogue_out = [r.communicate(timeout=30)[0] for r in rogues]  # told to quit: they end on their own
    finally:
        _kill_left(master, *rogues)
    run, total, meta = _the_run(tmp_path / "results")
    assert total["planned"] == 480 and total["not_sent_unaccounted"] == 0, (total, out[-3000:])
    refused = meta["results"]["refused_workers"]
    assert len(refused) == 2, (refused, out[-3000:])
    assert any("did not answer the join challenge" in why for why in refused.values()), refused
    assert any("no join token" in why for why in refused.values()), refused
    assert not set(refused) & set(meta["results"]["operations_per_worker"])
    assert "KeyError" not in rogue_out[0] and "Traceback" not in rogue_out[0], rogue_out[0][-2000:]
    assert all(r.returncode is not None for r in rogues)
    assert "workers refused" in out
    assert "join_token" not in json.dumps(meta.get("options", {})).replace('"join_token": "***"', "").replace(
        '"join_token": null', "")


def test_a_tokenless_master_counts_a_worker_only_once_it_said_hello(tmp_path, pg_uri):
    """A loopback master without a token: a plain Locust worker that connects first never says hello, so it
    neither satisfies --expect-workers nor gets users or a share (before, it was counted the moment it
    connected, the test started with it alone, and its share went unsent); it is refused, named and told to
    quit, and the dbsurge worker that comes later carries the whole plan."""
    (tmp_path / "rogue.py").write_text(ROGUE_LOCUSTFILE)
    port = str(free_port())
    common = ["--target", pg_uri, "--operation", "product_lookup", "--workload-option", "products=300",
              "--no-db-sampler"]
    env = {k: v for k, v in os.environ.items() if k != "DBSURGE_JOIN_TOKEN"}
    master = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", FILES, "--master", "--headless", "--expect-workers", "1",
         "--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--rate", "40", "-t", "3s",
         "--results-dir", str(tmp_path / "results"), *common],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    rogue = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(tmp_path / "rogue.py"), "--worker",
                              "--master-port", port], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env)
    own = None
    try:
        time.sleep(3)  # the rogue is connected (and, before, counted) well before a dbsurge worker comes
        own = subprocess.Popen([sys.executable, "-m", "locust", "-f", FILES, "--worker", "--master-port", port,
                                *common], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        out, _ = master.communicate(timeout=120)
        rogue_out, _ = rogue.communicate(timeout=30)  # told to quit: it ends on its own
    finally:
        _kill_left(master, rogue, own)
    run, total, meta = _the_run(tmp_path / "results")
    assert total["planned"] == 120 and total["ok"] == 120, (total, out[-3000:])
    refused = meta["results"]["refused_workers"]
    assert len(refused) == 1 and "never said hello" in next(iter(refused.values())), (refused, out[-3000:])
    assert not set(refused) & set(meta["results"]["operations_per_worker"])
    assert len(meta["results"]["operations_per_worker"]) == 1
    assert "KeyError" not in rogue_out and "Traceback" not in rogue_out, rogue_out[-2000:]
    assert master.returncode == 0 and "workers refused" in out, out[-3000:]


def _the_run(results):
    """The one run directory under ``results``: (its path, its ledger's ALL row, its run.json)."""
    run = only_run_dir(results)
    return run, ledger(run), json.loads((run / "run.json").read_text())


def _kill_left(*procs) -> None:
    """Kill whichever of a test's processes (None: never started) is still running, and reap it."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def _another_build(root) -> dict[str, str]:
    """A copy of this dbsurge laid out as a wheel installs it, one comment added to the arrivals' module:
    another build of the same version. Returns the environment that runs it."""
    import shutil

    from install import ROOTS

    for source, installed in ROOTS.items():  # dbsurge/ first, then the folders that go inside it
        shutil.copytree(REPO / source, root / installed, ignore=shutil.ignore_patterns("__pycache__"))
    with open(root / "dbsurge" / "plan" / "arrivals.py", "a") as f:
        f.write("\n# a hotfix made on one host only\n")
    return {**os.environ, "PYTHONPATH": str(root)}


def test_a_worker_of_another_build_is_refused(tmp_path, pg_uri):
    """Exactly once rests on every host numbering the arrivals as the master does, and the version number does
    not change between builds: a worker of another build, token or not, is refused with one line that says
    what to install, takes no share and sends nothing; a worker of the master's build carries the plan."""
    token = "join-" + os.urandom(8).hex()
    env = {**os.environ, "DBSURGE_JOIN_TOKEN": token}
    other_env = {**_another_build(tmp_path / "other"), "DBSURGE_JOIN_TOKEN": token}
    check = subprocess.run([sys.executable, "-c", "import dbsurge.base.versions as v; print(v.__file__, v.build())"],
                           env=other_env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    from dbsurge.base.versions import build

    other_file, other_build = check.stdout.split()
    assert other_file.startswith(str(tmp_path)) and other_build != build(), check.stdout + check.stderr
    port = str(free_port())
    common = ["--target", pg_uri, "--operation", "product_lookup", "--workload-option", "products=300",
              "--no-db-sampler"]
    master = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", FILES, "--master", "--headless", "--expect-workers", "1",
         "--master-bind-port", port, "--rate", "40", "-t", "4s", "--results-dir", str(tmp_path / "results"), *common],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    worker_cmd = [sys.executable, "-m", "locust", "-f", FILES, "--worker", "--master-port", port, *common]
    other = subprocess.Popen(worker_cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=other_env)
    own = None
    try:
        other_out, _ = other.communicate(timeout=60)  # refused at its hello: it ends by itself, before any load
        own = subprocess.Popen(worker_cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env)
        out, _ = master.communicate(timeout=120)
    finally:
        _kill_left(master, other, own)
    lines = [x for x in other_out.splitlines() if x.startswith("dbsurge:")]
    assert other.returncode == 2 and len(lines) == 1, other_out[-3000:]
    assert f"another dbsurge build: the worker runs 0.1.0 build {other_build}" in lines[0], lines
    assert "install the master's dbsurge on this host" in lines[0] and "Traceback" not in other_out
    run, total, meta = _the_run(tmp_path / "results")
    assert total["planned"] == 160 and total["ok"] == 160, (total, out[-3000:])  # the master's build sent it all
    refused = meta["results"]["refused_workers"]
    assert len(refused) == 1 and "another dbsurge build" in next(iter(refused.values())), meta["results"]
    assert not set(refused) & set(meta["results"]["operations_per_worker"])
    assert meta["versions"]["dbsurge_build"] == build()
    assert master.returncode == 0 and "workers refused" in out, out[-3000:]
