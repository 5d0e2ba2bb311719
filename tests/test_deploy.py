"""docker-compose.yml and deploy/k8s/: schema-valid, the same options, and the compose commands run for real.

- The compose file against the compose-spec JSON schema that check-jsonschema ships
  (``--builtin-schema vendor.compose-spec``; nothing is fetched), and a broken copy fails it.
- The manifests with ``kubernetes-validate --strict`` (it ships the Kubernetes schemas).
- The master's and a worker's command lines and environments, taken from docker-compose.yml with
  Compose's ``${VAR:-default}`` interpolation, run through docker/entrypoint.sh against a
  non-editable install of exactly what docker/Dockerfile copies, against the embedded PostgreSQL on
  127.0.0.1 (container names and 0.0.0.0 become 127.0.0.1: a test never listens beyond loopback).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from install import built_once, clean_env, fresh_venv
from ledger_checks import ledger
from runs import REPO, only_run_dir

from dbsurge.commands.worker import TMPDIR_PREFIX
from dbsurge.embedded.servers import free_port

COMPOSE = REPO / "docker-compose.yml"
K8S = REPO / "deploy" / "k8s"
BIN = Path(sys.executable).parent
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}`` and ``${VAR:?message}`` (no nesting)."""
    def one(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        value = env.get(name)
        if op == ":-":
            return value if value else arg
        if op == "-":
            return arg if value is None else value
        if op in (":?", "?") and not value:
            raise AssertionError(f"{name}: {arg}")
        return value or ""
    return _VAR.sub(one, text.replace("$$", "\0")).replace("\0", "$")


def _interpolate_values(node, env: dict[str, str]):
    if isinstance(node, dict):
        return {k: _interpolate_values(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate_values(v, env) for v in node]
    return interpolate(node, env) if isinstance(node, str) else node


def compose(env: dict[str, str] | None = None) -> dict:
    """docker-compose.yml as Compose sees it: parsed, then each string value interpolated."""
    return _interpolate_values(yaml.safe_load(COMPOSE.read_text()), env or {})


def test_compose_matches_the_compose_spec(tmp_path):
    cmd = [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec"]
    proc = subprocess.run([*cmd, str(COMPOSE)], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("    profiles: [postgres]", "    profiles: postgres\n    wat: 1"))
    assert subprocess.run([*cmd, str(broken)], check=False, capture_output=True, timeout=60).returncode != 0


def test_compose_shapes_targets_and_the_master_port():
    spec = compose({"SHAPE": "stages", "STAGES": "30s@500tps", "RATE": "", "MASTER_PORT_PUBLISH": "0.0.0.0:5557"})
    services = spec["services"]
    assert services["postgres"]["profiles"] == ["postgres"] and services["mongo"]["profiles"] == ["mongo"]
    master, worker = services["master"], services["worker"]
    assert all(dep["required"] is False for dep in master["depends_on"].values())  # only the profile's target
    assert "0.0.0.0:5557:5557" in master["ports"] and "/src/shapes/stages.py" in master["command"]
    # the UI listens beyond the container's loopback for Docker to publish it (on the host's loopback): on purpose
    assert "--web-host 0.0.0.0 --web-insecure" in master["command"] and "127.0.0.1:8089:8089" in master["ports"]
    assert compose()["services"]["master"]["ports"][1] == "127.0.0.1:5557:5557"  # loopback unless asked
    env = master["environment"]
    assert env["DBSURGE_STAGES"] == "30s@500tps" and env["DBSURGE_RATE"] == "" and worker["environment"] == env
    assert env["DBSURGE_JOIN_TOKEN_FILE"] == "/run/secrets/join_token" and "DBSURGE_JOIN_TOKEN" not in env
    assert master["secrets"] == worker["secrets"] == ["join_token"]
    # Locust's parser in a child: importing locust here would monkey-patch a process that already imported ssl
    listing = ("from locust.argument_parser import get_parser; from dbsurge.config.options import add_options; "
               "p = get_parser(); add_options(p); "
               "print(*[a.env_var for a in p._actions if getattr(a, 'env_var', None)])")
    known = set(subprocess.run([sys.executable, "-c", listing], check=True, capture_output=True, text=True,
                               timeout=60).stdout.split())
    unknown = {k for k in env if k not in known and k != "DBSURGE_JOIN_TOKEN_FILE" and not k.startswith("LOCUST_")}
    assert unknown <= {"DBSURGE_SPOT_WATCH"}, unknown  # every other variable is an option's


def _k8s_docs(files) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for f in files for d in yaml.safe_load_all(f.read_text()) if d}


def _pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def test_the_entrypoint_gives_each_worker_a_temporary_folder_of_its_own(tmp_path):
    # Locust writes the locustfile a worker downloads (-f -) to $TMPDIR/<name> and imports it: two workers
    # on one temporary folder imported each other's half-written copy ("No User class found!", a compose
    # test with two workers on this host). `locust` here is a stand-in that says what it was given.
    bin_dir, shared = tmp_path / "bin", tmp_path / "tmp"
    bin_dir.mkdir()
    shared.mkdir()
    stand_in = bin_dir / "locust"
    stand_in.write_text('#!/bin/sh\necho "$TMPDIR"\n')
    stand_in.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TMPDIR": str(shared)}

    def tmpdir_of(*args: str) -> Path:
        done = subprocess.run([str(REPO / "docker" / "entrypoint.sh"), *args], env=env, capture_output=True,
                              text=True, check=True, timeout=30)
        return Path(done.stdout.strip())

    worker = ["-f", "-", "--worker", "--master-host", "master", "--master-port", "5557"]
    first, second = tmpdir_of(*worker), tmpdir_of(*worker)
    assert first != second and {first.parent, second.parent} == {shared}
    assert all(d.is_dir() and d.stat().st_mode & 0o077 == 0 for d in (first, second))
    # the shell writes the prefix by hand: it must be the one the worker checks before removing the folder
    assert all(d.name.startswith(TMPDIR_PREFIX) for d in (first, second))
    assert tmpdir_of("-f", "/src/locustfiles/orders.py", "--master") == shared  # the master keeps its own


def test_k8s_manifests_validate_and_match_compose():
    every = sorted(K8S.rglob("*.yaml"))
    proc = subprocess.run([str(BIN / "kubernetes-validate"), "--strict", *map(str, every)], check=False,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "passed" in proc.stdout, proc.stdout + proc.stderr
    applied = _k8s_docs(sorted(K8S.glob("*.yaml")))  # what `kubectl apply -f deploy/k8s/` applies (not recursive)
    headless = _k8s_docs(sorted((K8S / "headless").glob("*.yaml")))
    assert {("Service", "dbsurge-master"), ("Deployment", "dbsurge-master"), ("Deployment", "dbsurge-worker"),
            ("ConfigMap", "dbsurge-options")} <= set(applied)
    assert {("Job", "dbsurge-master"), ("Job", "dbsurge-worker")} <= set(headless)
    assert not [k for k in [*applied, *headless] if k[0] == "Secret"]  # applying never overwrites real secrets
    assert {k for k in _k8s_docs(sorted((K8S / "examples").glob("*.yaml"))) if k[0] == "Secret"} == {
        ("Secret", "dbsurge-join-token"), ("Secret", "dbsurge-target")}
    options = applied[("ConfigMap", "dbsurge-options")]["data"]
    assert not options.get("LOCUST_HEADLESS"), "a headless master Deployment restarts and runs the test again"
    compose_env = compose()["services"]["master"]["environment"]
    assert {k for k in options if k.startswith("DBSURGE_")} <= set(compose_env)
    workloads = [d for d in [*applied.values(), *headless.values()] if d["kind"] in ("Deployment", "Job")]
    for doc in workloads:
        (container,) = _pod_spec(doc)["containers"]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]}
        assert refs == {"DBSURGE_JOIN_TOKEN": "dbsurge-join-token", "DBSURGE_TARGET": "dbsurge-target"}
        resources = container["resources"]
        assert set(resources) == {"requests", "limits"} and set(resources["limits"]) == {"cpu", "memory"}, doc
    job = headless[("Job", "dbsurge-master")]
    assert job["spec"]["backoffLimit"] == 0 and _pod_spec(job)["restartPolicy"] == "Never"
    (master,) = _pod_spec(job)["containers"]
    assert "--headless" in master["args"]
    (web_master,) = _pod_spec(applied[("Deployment", "dbsurge-master")])["containers"]
    assert "--headless" not in web_master["args"]
    assert web_master["args"][web_master["args"].index("--web-host") + 1] == "127.0.0.1"  # port-forward reaches it
    for doc in (applied[("Deployment", "dbsurge-worker")], headless[("Job", "dbsurge-worker")]):
        (worker,) = _pod_spec(doc)["containers"]
        assert worker["args"][worker["args"].index("--master-host") + 1] == "dbsurge-master"


@pytest.fixture(scope="session")
def image_install(tmp_path_factory) -> Path:
    """What docker/Dockerfile copies to /src, ``pip install .``-ed (non-editable) into a venv of its own.

    The venv is made from the base interpreter and its commands run with a clean environment
    (tests/install.py): the repository's editable finder cannot serve a module the image lacks.
    """
    return built_once(tmp_path_factory, "image", _image_install)


def _image_install(root: Path) -> None:
    src = root / "src"
    src.mkdir()
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    copies = re.findall(r"^COPY ([^\n]+?) (\S+)$", dockerfile, re.MULTILINE)
    for sources, dest in copies:
        if not dest.startswith(("./", ".")):
            continue  # outside /src (the entrypoint): run from the repository below
        for item in sources.split():
            target = src / (item if dest in ("./", ".") else dest.removeprefix("./"))
            (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, target)
    (spec,) = re.findall(r"^RUN pip install --no-cache-dir '?(\.[^' ]*)'?", dockerfile, re.MULTILINE)
    assert "WORKDIR /src" in dockerfile and (src / "locustfiles" / "orders.py").is_file()
    fresh_venv(root / "venv", f"{src}{spec[1:]}")  # the image's extras too; root: src/, venv/


def _service_command(service: dict, root: Path, port: int) -> list[str]:
    text = service["command"].replace("/src/", f"{root / 'src'}/").replace("0.0.0.0", "127.0.0.1")
    text = text.replace("--master-host master", "--master-host 127.0.0.1")
    return [str(REPO / "docker" / "entrypoint.sh"), *shlex.split(text.replace("5557", str(port)))]


#: every SHAPE docker-compose.yml documents, with the variables that make it a few seconds long
SHAPES = {
    "spike": ({"BASELINE_TPS": "40", "STAGE_SECONDS": "1"}, 8 + 80 + 40 + 2),   # 20%, 200%, 100%, 5% of 40 TPS
    "stages": ({"STAGES": "2s@40tps,2s@80tps"}, 240),
    "constant": ({"RATE": "50", "LOCUST_RUN_TIME": "3s"}, 150),
}


def _image_env(services: dict, tmp_path: Path, token: Path, image: Path) -> dict[str, str]:
    """The master's compose environment, with the container paths mapped into `tmp_path`, on the image's venv."""
    env = {k: str(v).replace("/work/results", str(tmp_path / "results")).replace("/run/secrets/join_token",
                                                                                 str(token))
           for k, v in services["master"]["environment"].items()}
    # the container's /tmp too: each worker's own temporary folder (docker/entrypoint.sh) lands under tmp_path
    return clean_env(image / "venv" / "bin", **env, DBSURGE_HOME=os.environ["DBSURGE_HOME"], TMPDIR=str(tmp_path))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_compose_services_run_for_real(tmp_path, pg_uri, image_install, shape):
    """The master and `WORKERS` workers (``-f -``) of docker-compose.yml, on the image's install, for each SHAPE."""
    token = tmp_path / "join_token"
    token.write_text("compose-token\n")
    variables, planned = SHAPES[shape]
    workers = 2 if shape == "constant" else 1
    shell = {"TARGET": pg_uri, "SHAPE": shape, "WORKERS": str(workers), "LOCUST_HEADLESS": "true",
             "DBSURGE_OPERATION": "product_lookup", "DBSURGE_NO_DB_SAMPLER": "true",
             "DBSURGE_WORKLOAD_OPTION": "[products=2000]", **variables}
    services = compose(shell)["services"]
    assert services["worker"]["deploy"]["replicas"] == str(workers)  # WORKERS scales the workers and the wait
    port = free_port()
    env = _image_env(services, tmp_path, token, image_install)
    where = subprocess.run(["python", "-c", "import dbsurge; print(dbsurge.__file__)"], env=env, cwd=tmp_path,
                           check=True, capture_output=True, text=True).stdout
    assert where.startswith(str(image_install / "venv")), where  # the image's install, not the editable one
    master = subprocess.Popen(_service_command(services["master"], image_install, port), cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    logs = [tmp_path / f"worker-{i}.log" for i in range(workers)]
    outs = [log.open("w") for log in logs]
    procs = [subprocess.Popen(_service_command(services["worker"], image_install, port), cwd=tmp_path, env=env,
                              stdout=f, stderr=subprocess.STDOUT) for f in outs]
    try:
        try:
            out, _ = master.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # say what each side was waiting for (the workers' logs too)
            master.kill()
            out = master.communicate()[0]
        for p in procs:  # the master's quit ends them: let them exit as they would in their containers
            p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass  # a worker still running: killed below, and its exit code says so
    finally:
        for p in (master, *procs):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        for f in outs:
            f.close()
    workers_said = "".join(f"\n--- {log.name}:\n{log.read_text()[-3000:]}" for log in logs)
    assert master.returncode == 0, out[-6000:] + workers_said
    # each worker's own temporary folder (docker/entrypoint.sh) went with it
    assert [p.returncode for p in procs] == [0] * workers, workers_said
    assert not list(tmp_path.glob("dbsurge-worker-*")), sorted(tmp_path.iterdir())
    assert "Traceback" not in out, out[-4000:]
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == planned and total["not_sent_unaccounted"] == 0, total
    assert total["ok"] == planned, total
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    joined = {e["worker"] for e in events if e["kind"] == "worker_join"}
    assert len(joined) == workers, joined  # the master waited for every worker WORKERS named


def _k8s_command(container: dict, env: dict[str, str], root: Path, port: int) -> list[str]:
    """A container's args as the kubelet expands them (``$(VAR)`` from its environment), mapped onto this host."""
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"]]
    args = [a.replace("/src/", f"{root / 'src'}/").replace("0.0.0.0", "127.0.0.1").replace("5557", str(port))
            .replace("dbsurge-master", "127.0.0.1") for a in args]
    return [str(REPO / "docker" / "entrypoint.sh"), *args]


def test_k8s_headless_jobs_run_for_real(tmp_path, pg_uri, image_install):
    """The headless master Job and the workers' Job, with dbsurge-options' environment, on the image's install."""
    jobs = _k8s_docs(sorted((K8S / "headless").glob("*.yaml")))
    options = _k8s_docs([K8S / "options.yaml"])[("ConfigMap", "dbsurge-options")]["data"]
    env = {**options, "WORKERS": "1", "DBSURGE_BASELINE_TPS": "40", "DBSURGE_STAGE_SECONDS": "1",
           "DBSURGE_RESULTS_DIR": str(tmp_path / "results"), "DBSURGE_OPERATION": "product_lookup",
           "DBSURGE_NO_DB_SAMPLER": "true", "DBSURGE_WORKLOAD_OPTION": "[products=2000]",
           "DBSURGE_JOIN_TOKEN": "k8s-token", "DBSURGE_TARGET": pg_uri}
    env = clean_env(image_install / "venv" / "bin", **env, DBSURGE_HOME=os.environ["DBSURGE_HOME"],
                    TMPDIR=str(tmp_path))  # the container's /tmp: the worker's temporary folder lands here
    port = free_port()
    (master,) = _pod_spec(jobs[("Job", "dbsurge-master")])["containers"]
    (worker,) = _pod_spec(jobs[("Job", "dbsurge-worker")])["containers"]
    proc = subprocess.Popen(_k8s_command(master, env, image_install, port), cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wproc = subprocess.Popen(_k8s_command(worker, env, image_install, port), cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=120)
        wout, _ = wproc.communicate(timeout=30)  # the worker's Job completes with the run
    finally:
        for p in (proc, wproc):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
    assert proc.returncode == 0 and "Traceback" not in out, out[-4000:]
    assert wproc.returncode == 0, wout[-4000:]
    total = ledger(only_run_dir(tmp_path / "results"))
    assert total["planned"] == 8 + 80 + 40 + 2 and total["ok"] == total["planned"], total
