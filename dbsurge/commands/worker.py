"""``dbsurge worker``: a Locust worker that takes its secrets from AWS, not from its command line.

    dbsurge worker --master-host 10.0.0.5 --join-token-secret arn:aws:secretsmanager:us-east-1:1234:secret:dbsurge-join
    dbsurge worker --master-host master --secret-env DBSURGE_TARGET=arn:aws:ssm:us-east-1:1234:parameter/dbsurge/target

It reads each secret (AWS Secrets Manager's ``SecretString``, or an SSM parameter, decrypted) with
the host's own credentials (an instance profile on EC2), puts it in the environment, and replaces
itself with ``locust -f - --worker --master-host H --master-port P`` plus any other arguments. The
locustfile and the plan come from the master; the token never appears in ``ps``, in user data or
on disk. This is what a Spot runner's systemd unit starts (`dbsurge.cloud.userdata`).

A secret reference is a Secrets Manager ARN (``arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME``),
an SSM parameter ARN (``arn:aws:ssm:REGION:ACCOUNT:parameter/NAME``), or ``secretsmanager:NAME`` /
``ssm:NAME`` in the default region.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from typing import Any

from dbsurge.base.errors import UserError, clip
from dbsurge.config.credentials import parse_secret_ref
from dbsurge.config.help_examples import epilog
from dbsurge.config.option_names import OneLineParser
from dbsurge.config.option_types import ascii_int

_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def fetch_secret(ref: str, *, session: Any = None, endpoint_url: str | None = None) -> str:
    """The secret's text, read from Secrets Manager or SSM Parameter Store (with decryption)."""
    import boto3
    import botocore.exceptions

    service, region, ident = parse_secret_ref(ref)
    session = session or boto3.Session()
    kwargs = {"region_name": region} if region else {}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    try:
        client = session.client(service, **kwargs)
        if service == "ssm":
            return client.get_parameter(Name=ident, WithDecryption=True)["Parameter"]["Value"]
        return client.get_secret_value(SecretId=ident)["SecretString"]
    except botocore.exceptions.NoCredentialsError:
        raise UserError(f"cannot read {clip(ref)}: no AWS credentials (an instance profile, or AWS_PROFILE)") from None
    except botocore.exceptions.NoRegionError:
        raise UserError(f"cannot read {clip(ref)}: no region (use an ARN, or set AWS_DEFAULT_REGION)") from None
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError, KeyError) as err:
        raise UserError(f"cannot read {clip(ref)}: {clip(str(err), 160)}") from None


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="dbsurge worker", description="A Locust worker that joins a dbsurge master.",
                                epilog=epilog("worker", "Other arguments pass through to `locust --worker`."),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--master-host", default=os.environ.get("DBSURGE_MASTER_HOST"),
                   help="the master's address (or DBSURGE_MASTER_HOST)")
    p.add_argument("--master-port", type=ascii_int, default=os.environ.get("DBSURGE_MASTER_PORT") or 5557)
    p.add_argument("--join-token-secret", default=os.environ.get("DBSURGE_JOIN_TOKEN_SECRET"), metavar="ARN",
                   help="read DBSURGE_JOIN_TOKEN from this Secrets Manager secret or SSM parameter")
    p.add_argument("--secret-env", action="append", default=[], metavar="NAME=ARN",
                   help="set the environment variable NAME from a secret, e.g. DBSURGE_TARGET=arn:... (repeatable)")
    p.add_argument("--processes", type=ascii_int, default=None,
                   help="worker processes on this host (Locust --processes)")
    p.add_argument("--endpoint-url", default=None, help=argparse.SUPPRESS)  # tests: a local AWS endpoint
    return p


def worker_command(argv: list[str], environ: dict[str, str] | None = None, *, session: Any = None
                   ) -> tuple[list[str], dict[str, str]]:
    """The ``locust --worker`` command line and environment that ``dbsurge worker ARGS`` runs."""
    args, rest = _parser().parse_known_args(argv)
    if not args.master_host:
        raise UserError("no master: pass --master-host ADDRESS (or set DBSURGE_MASTER_HOST)")
    if not 0 < args.master_port < 65536:
        raise UserError(f"bad --master-port {args.master_port}: a TCP port, 1 to 65535")
    secrets: dict[str, str] = {}
    for item in args.secret_env:
        name, sep, ref = item.partition("=")
        if not sep or not _ENV_NAME.fullmatch(name):
            raise UserError(f"bad --secret-env '{clip(item)}': expected NAME=ARN with an upper-case variable name")
        secrets[name] = ref
    if args.join_token_secret:
        secrets["DBSURGE_JOIN_TOKEN"] = args.join_token_secret
    for ref in secrets.values():
        parse_secret_ref(ref)  # every reference is well formed before any is read
    env = dict(os.environ if environ is None else environ)
    for name, ref in secrets.items():
        env[name] = fetch_secret(ref, session=session, endpoint_url=args.endpoint_url)
    # Locust writes the locustfile it downloads from the master (-f -) to $TMPDIR/<its name> and imports
    # it from there: workers sharing a temporary folder (several on one host) could import each other's
    # half-written copy ("No User class found!"). Each gets a folder of its own (0700, under TMPDIR).
    env["TMPDIR"] = tempfile.mkdtemp(prefix=TMPDIR_PREFIX, dir=env.get("TMPDIR") or None)
    # removed when the worker exits (`remove_own_tmpdir`): exec keeps this process's id
    env[TMPDIR_ENV], env[TMPDIR_PID_ENV] = env["TMPDIR"], str(os.getpid())
    cmd = [sys.executable, "-m", "locust", "-f", "-", "--worker", "--master-host", args.master_host,
           "--master-port", str(args.master_port)]
    if args.processes:
        cmd += ["--processes", str(args.processes)]
    return cmd + rest, env


def worker_main(argv: list[str]) -> int:
    """``dbsurge worker``: fetch the secrets, then become the Locust worker (exec: SIGTERM reaches Locust)."""
    cmd, env = worker_command(argv)
    sys.stdout.flush()
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached


#: The private temporary folder a worker was given (`worker_command`, docker/entrypoint.sh), and the id of the
#: process that owns it: the worker that removes it when it exits (`remove_own_tmpdir`).
TMPDIR_ENV, TMPDIR_PID_ENV = "DBSURGE_WORKER_TMPDIR", "DBSURGE_WORKER_TMPDIR_PID"
#: How a worker's folder is named (docker/entrypoint.sh names its folders the same way): the only name removed.
TMPDIR_PREFIX = "dbsurge-worker-"


def remove_own_tmpdir_at_exit() -> None:
    """In a worker: remove the temporary folder `worker_command` or the image's entrypoint made for it, at exit.

    Each worker start made one (the locustfile it downloads lands there), and nothing removed it: one
    folder per start on a Spot host. Only the process the folder was made for removes it, and only at
    its exit: the workers `--processes` forks from it inherit the handler, and must leave the folder
    to their parent. A worker killed outright (SIGKILL) leaves it behind.
    """
    import atexit

    folder, owner = os.environ.get(TMPDIR_ENV), os.environ.get(TMPDIR_PID_ENV)
    if folder and owner and os.environ.get("TMPDIR") == folder:
        atexit.register(remove_own_tmpdir, folder, owner)


def remove_own_tmpdir(folder: str, owner: str) -> None:
    """Remove ``folder`` when this is the process it was made for and the name is a worker's folder."""
    import shutil

    name = os.path.basename(os.path.normpath(folder))
    if str(os.getpid()) == owner and name.startswith(TMPDIR_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)
