"""The user data of a Spot runner: a shell script that installs dbsurge and starts one worker service.

The script holds no secret. It installs dbsurge at the master's version (``pip install
dbsurge==VERSION``, or a wheel URL), writes a systemd unit that runs ``dbsurge worker``, and starts
it. ``dbsurge worker`` reads the join token on the host from AWS Secrets Manager or SSM Parameter
Store (``--join-token-secret ARN``, with the instance profile's credentials) and hands it to
``locust -f - --worker`` in the environment; the token is never in the user data, which anyone
with ``ec2:DescribeInstanceAttribute`` can read. systemd sends the worker SIGTERM when the host
shuts down (a Spot interruption ends that way), and restarts it if it dies.

    >>> script = user_data(UserDataSpec(master_host="10.0.0.5", version="0.1.0", run_id="r1"))
    >>> "pip install" in script and "dbsurge==0.1.0" in script and "--master-host 10.0.0.5" in script
    True
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

#: Where the runner keeps its virtual environment and its worker's environment file.
VENV = "/opt/dbsurge"
ENV_FILE = "/etc/dbsurge/worker.env"


@dataclass(frozen=True)
class UserDataSpec:
    """What the runner's script needs: the master to join and what to install."""

    master_host: str
    version: str
    run_id: str
    master_port: int = 5557
    wheel_url: str | None = None
    join_token_secret: str | None = None
    secret_env: dict[str, str] = field(default_factory=dict)  # NAME -> secret ARN, fetched on the host
    worker_env: dict[str, str] = field(default_factory=dict)  # plain DBSURGE_* settings for the worker
    processes: int | None = None
    spot_watch: bool = True


def _install_line(spec: UserDataSpec) -> str:
    package = spec.wheel_url or f"dbsurge=={spec.version}"
    return f"$VENV/bin/pip install -q {shlex.quote(package)}"


def _worker_command(spec: UserDataSpec) -> str:
    args = [f"{VENV}/bin/dbsurge", "worker", "--master-host", spec.master_host, "--master-port", str(spec.master_port)]
    if spec.join_token_secret:
        args += ["--join-token-secret", spec.join_token_secret]
    for name, arn in sorted(spec.secret_env.items()):
        args += ["--secret-env", f"{name}={arn}"]
    if spec.processes:
        args += ["--processes", str(spec.processes)]
    return " ".join(shlex.quote(a) for a in args)


def user_data(spec: UserDataSpec) -> str:
    """The runner's cloud-init script (``#!/bin/bash``): install, write the unit, start the worker."""
    env = {"DBSURGE_RUN_ID": spec.run_id, **spec.worker_env}
    if spec.spot_watch:
        env.setdefault("DBSURGE_SPOT_WATCH", "1")
    env_lines = "\n".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return f"""#!/bin/bash
# dbsurge runner for run {spec.run_id}: joins the master at {spec.master_host}:{spec.master_port}.
# No secret in this script: the worker fetches its join token itself (dbsurge worker --join-token-secret).
set -euo pipefail
VENV={VENV}
PY=""
for p in python3.13 python3.12 python3.11; do command -v "$p" >/dev/null 2>&1 && PY="$p" && break; done
if [ -z "$PY" ]; then
  if command -v dnf >/dev/null 2>&1; then dnf install -y -q python3.11 python3.11-pip && PY=python3.11
  elif command -v apt-get >/dev/null 2>&1; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv && PY=python3
  fi
fi
[ -n "$PY" ] || {{ echo "dbsurge runner: no Python 3.11+ on this image" >&2; exit 1; }}
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
{_install_line(spec)}
mkdir -p /etc/dbsurge
cat > {ENV_FILE} <<'DBSURGE_ENV'
{env_lines}
DBSURGE_ENV
chmod 600 {ENV_FILE}
cat > /etc/systemd/system/dbsurge-worker.service <<'DBSURGE_UNIT'
[Unit]
Description=dbsurge worker (run {spec.run_id})
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile={ENV_FILE}
ExecStart={_worker_command(spec)}
Restart=on-failure
RestartSec=2
KillSignal=SIGTERM
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
DBSURGE_UNIT
systemctl daemon-reload
systemctl enable --now dbsurge-worker.service
"""
