"""The user data of a Spot runner: a shell script that installs dbsurge and starts one worker service.

The script holds no secret. It has two parts, split at `SERVICE_MARKER`:

1. **Set-up**: find a Python 3.11+ that can make a venv (installing one, or its venv module, on
   Amazon Linux 2023 with dnf and on Ubuntu 24.04 with apt), make the venv, fetch the master's own
   wheel (``wheel_url``: the presigned URL of the S3 object ``dbsurge runners up`` uploaded, or a
   URL the user gave) and install it with its dependencies, then check that the install imports
   and runs. A broken install stops here, with one line in the cloud-init log, before any service.
2. **Service**: a systemd unit that runs ``dbsurge worker``, which reads the join token on the host
   from AWS Secrets Manager or SSM Parameter Store (``--join-token-secret ARN``, with the instance
   profile's credentials) and hands it to ``locust -f - --worker`` in the environment; the token is
   never in the user data, which anyone with ``ec2:DescribeInstanceAttribute`` can read. systemd
   sends the worker SIGTERM when the host shuts down (a Spot interruption ends that way). A worker
   that crashes is restarted, but at most `START_LIMIT_BURST` times in `START_LIMIT_S` seconds, and
   never after exit 2 (a mistake in its configuration, which a restart cannot fix).

    >>> script = user_data(UserDataSpec(master_host="10.0.0.5", version="0.1.0", run_id="r1",
    ...                                 wheel_url="https://example.com/dbsurge-0.1.0-py3-none-any.whl"))
    >>> "dbsurge-0.1.0-py3-none-any.whl" in script and "--master-host 10.0.0.5" in script
    True

``DBSURGE_RUNNER_VENV`` moves the venv (default `VENV`): the tests run the set-up part on this
machine into a temporary directory.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from urllib.parse import urlsplit

#: Where the runner keeps its virtual environment and its worker's environment file.
VENV = "/opt/dbsurge"
ENV_FILE = "/etc/dbsurge/worker.env"
#: The line between the set-up part and the service part of the script.
SERVICE_MARKER = "# ---- the worker service (systemd) ----"
START_LIMIT_BURST = 3
START_LIMIT_S = 300


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


def wheel_file_name(url: str) -> str:
    """The wheel's file name from its URL (the path's last part, without a presigned URL's query)."""
    return urlsplit(url).path.rsplit("/", 1)[-1]


def _install_lines(spec: UserDataSpec) -> str:
    if not spec.wheel_url:
        return f'"$VENV/bin/pip" install -q {shlex.quote(f"dbsurge=={spec.version}")}'
    wheel = f"/tmp/dbsurge-wheel/{wheel_file_name(spec.wheel_url)}"
    return "\n".join([
        "mkdir -p /tmp/dbsurge-wheel",
        f"curl -fsS --retry 5 --retry-delay 2 -o {shlex.quote(wheel)} {shlex.quote(spec.wheel_url)} \\",
        '  || fail "cannot fetch the dbsurge wheel (is the URL expired, or the bucket unreachable from this subnet?)"',
        f'"$VENV/bin/pip" install -q {shlex.quote(wheel)} || fail "pip could not install the dbsurge wheel"',
    ])


def _worker_command(spec: UserDataSpec) -> str:
    args = [f"{VENV}/bin/dbsurge", "worker", "--master-host", spec.master_host, "--master-port", str(spec.master_port)]
    if spec.join_token_secret:
        args += ["--join-token-secret", spec.join_token_secret]
    for name, arn in sorted(spec.secret_env.items()):
        args += ["--secret-env", f"{name}={arn}"]
    if spec.processes:
        args += ["--processes", str(spec.processes)]
    return " ".join(shlex.quote(a) for a in args)


_SETUP = r"""
fail() { echo "dbsurge runner: $*" >&2; exit 1; }
# A Python 3.11+ that really runs (a name on PATH may be a shim for a version that is not installed).
PY=""
for p in python3.13 python3.12 python3.11 python3; do
  if "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then PY="$p"; break; fi
done
if [ -z "$PY" ]; then
  if command -v dnf >/dev/null 2>&1; then  # Amazon Linux 2023: python3 is 3.9, python3.11 is a package
    dnf install -y -q python3.11 python3.11-pip && PY=python3.11
  elif command -v apt-get >/dev/null 2>&1; then  # Ubuntu 24.04 ships 3.12 as python3
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv && PY=python3
  fi
fi
[ -n "$PY" ] || fail "no Python 3.11+ on this image and none could be installed"
# Debian and Ubuntu keep venv's pip in a separate package (python3.12-venv): install it when missing.
if ! "$PY" -m venv "$VENV" >/dev/null 2>&1; then
  rm -rf "$VENV"
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$(basename "$PY")-venv" python3-venv
  elif command -v dnf >/dev/null 2>&1; then
    dnf install -y -q "$(basename "$PY")-pip"
  fi
  "$PY" -m venv "$VENV" || fail "$PY cannot make a venv"
fi
"$VENV/bin/pip" install -q --upgrade pip || fail "cannot upgrade pip in $VENV"
"""

_CHECK = r"""
"$VENV/bin/dbsurge" --version || fail "the installed dbsurge does not run"
"$VENV/bin/python" -c 'import dbsurge.engine.run_state, dbsurge.commands.worker, dbsurge.locustfiles' \
  || fail "the installed dbsurge is incomplete"
"""


def setup_part(script: str) -> str:
    """The set-up part of a runner script (everything before `SERVICE_MARKER`)."""
    head, sep, _ = script.partition(SERVICE_MARKER)
    assert sep, "not a runner script"
    return head


def user_data(spec: UserDataSpec) -> str:
    """The runner's cloud-init script (``#!/bin/bash``): install, check, write the unit, start the worker."""
    env = {"DBSURGE_RUN_ID": spec.run_id, **spec.worker_env}
    if spec.spot_watch:
        env.setdefault("DBSURGE_SPOT_WATCH", "1")
    env_lines = "\n".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return f"""#!/bin/bash
# dbsurge runner for run {spec.run_id}: joins the master at {spec.master_host}:{spec.master_port}.
# No secret in this script: the worker fetches its join token itself (dbsurge worker --join-token-secret).
set -euo pipefail
VENV="${{DBSURGE_RUNNER_VENV:-{VENV}}}"
{_SETUP.strip()}
{_install_lines(spec)}
{_CHECK.strip()}
{SERVICE_MARKER}
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
# A worker that keeps crashing at start is left failed, not restarted forever (journalctl -u dbsurge-worker).
StartLimitIntervalSec={START_LIMIT_S}
StartLimitBurst={START_LIMIT_BURST}

[Service]
EnvironmentFile={ENV_FILE}
ExecStart={_worker_command(spec)}
Restart=on-failure
RestartSec=5
# exit 2 is a mistake in the worker's configuration (dbsurge's one-line errors): a restart cannot fix it
RestartPreventExitStatus=2
KillSignal=SIGTERM
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
DBSURGE_UNIT
systemctl daemon-reload
systemctl enable --now dbsurge-worker.service
"""
