"""``dbsurge runners``: EC2 (Spot) hosts for Locust workers, launched, listed, torn down and verified by run id.

    dbsurge runners up --count 3 --instance-type c6g.4xlarge --spot --subnet subnet-0abc --master-host 10.0.1.20 \\
        --run-id spike-01 --join-token-secret arn:aws:secretsmanager:us-east-1:123456789012:secret:dbsurge-join \\
        --wheel-bucket my-artifacts-bucket
    dbsurge runners status --run-id spike-01 [--run-dir results/spike-01]   # writes metrics/runners.csv for `cost`
    dbsurge runners down --run-id spike-01
    dbsurge runners verify --run-id spike-01                                # remaining_count=0, exit 0

Everything ``up`` makes carries the tags ``dbsurge:run-id`` and ``dbsurge:owner`` (instances, their
volumes, Spot requests and the security group it creates when none is given); ``status``, ``down``
and ``verify`` find it by the run-id tag alone, so a crashed shell or another machine can tear a
run down. ``verify`` counts what is left (instances not terminated, open or active Spot requests,
security groups ``up`` created) and exits 1 when anything is.

The security group ``up`` creates has no inbound rule: workers connect out to the master (and to
the database); only the master needs its port (5557) open to the runners. Each runner installs
this dbsurge's own wheel (`dbsurge.cloud.wheel`: uploaded to S3 for the run, fetched through a
presigned URL) and starts ``dbsurge worker`` (`dbsurge.cloud.userdata`), which reads the
join token from Secrets Manager or SSM on the host: give the instances a profile that may read it
(``--iam-instance-profile``). Every function takes its boto3 EC2 client as an argument.
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dbsurge import __version__
from dbsurge.base.errors import UserError, clip
from dbsurge.cloud.userdata import UserDataSpec, user_data
from dbsurge.cloud.wheel import delete_wheels, upload_wheel, wheel_of_running_install
from dbsurge.config.credentials import parse_secret_ref
from dbsurge.config.help_examples import epilog
from dbsurge.config.option_names import OneLineParser
from dbsurge.config.options import parse_key_values
from dbsurge.measure.tables import render
from dbsurge.rundir.schema import RUNNERS, in_metrics
from dbsurge.rundir.writer import metrics_path, write_csv

TAG_RUN = "dbsurge:run-id"
TAG_OWNER = "dbsurge:owner"
TAG_CREATED = "dbsurge:created-by"  # only on what `up` created itself (the security group)
_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*[0-9][a-z0-9-]*\.[a-z0-9]+")
_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
_SECRET_NAME = re.compile(r"TOKEN|PASSWORD|SECRET|PASSWD")
# A value that carries a credential whatever its name: a URI with a password, key=value forms of one,
# an AWS access key id, a PEM block. User data and tags are readable by anyone with ec2:Describe*.
_SECRET_VALUE = re.compile(r"://[^/@\s:]*:[^/@\s]+@|(?:password|passwd|pwd|secret|token|api[_-]?key)\s*[=:]"
                           r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|-----BEGIN", re.IGNORECASE)
TAG_WHEEL = "dbsurge:wheel"  # the S3 object of the wheel `up` uploaded for the run (`down` deletes it)
LEFT_SPOT_STATES = ("open", "active", "disabled")
CSV_COLUMNS = ["instance_id", "instance_type", "lifecycle", "state", "spot_request_id", "private_ip",
               "launch_time_utc", "end_time_utc", "hours"]


@dataclass(frozen=True)
class RunnerSpec:
    """What ``runners up`` launches. `validate` checks it all before any AWS call."""

    count: int
    instance_type: str
    master_host: str
    run_id: str
    image: str | None = None
    spot: bool = False
    subnet: str | None = None
    security_groups: tuple[str, ...] = ()
    key_name: str | None = None
    owner: str = ""
    master_port: int = 5557
    join_token_secret: str | None = None
    insecure_join: bool = False
    iam_instance_profile: str | None = None
    wheel_url: str | None = None
    wheel_bucket: str | None = None
    wheel_path: str | None = None
    wheel_url_hours: float = 12.0
    wheel_object: str | None = None  # set by `up` after the upload: s3://BUCKET/KEY
    max_price: str | None = None
    processes: int | None = None
    spot_watch: bool = True
    worker_env: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:  # noqa: C901 - one check per option, flat
        """One-line `UserError` for each mistake a user can make."""
        validate_run_id(self.run_id)
        if not 1 <= self.count <= 1000:
            raise UserError(f"bad --count {self.count}: launch 1 to 1000 runners")
        if not _INSTANCE_TYPE.fullmatch(self.instance_type or ""):
            raise UserError(f"unknown instance type format '{clip(self.instance_type)}': expected FAMILY.SIZE, "
                            f"e.g. c6g.4xlarge or m7g.4xlarge")
        if not (self.master_host or "").strip():
            raise UserError("no master: pass --master-host ADDRESS (the master's address as the runners reach it)")
        if any(c.isspace() for c in self.master_host) or "/" in self.master_host:
            raise UserError(f"bad --master-host '{clip(self.master_host)}': an address or host name")
        if _is_loopback(self.master_host):
            raise UserError(f"--master-host {clip(self.master_host)} is a loopback address: runners on other hosts "
                            f"cannot reach it; give the master's private address")
        if not 0 < self.master_port < 65536:
            raise UserError(f"bad --master-port {self.master_port}: a TCP port, 1 to 65535")
        if not self.join_token_secret and not self.insecure_join:
            raise UserError("runners need the join token: pass --join-token-secret ARN (Secrets Manager or SSM), "
                            "or --insecure-join for a master started with --insecure-join")
        for ref in [self.join_token_secret or "", *self.secret_env.values()]:
            if ref:
                parse_secret_ref(ref)
        for name, value in self.worker_env.items():
            if _SECRET_NAME.search(name.upper()) or _SECRET_VALUE.search(value):
                raise UserError(f"--worker-env {clip(name)} looks like a secret: user data is readable, "
                                f"use --secret-env {clip(name)}=ARN")
        if _SECRET_VALUE.search(self.owner or ""):
            raise UserError("--owner looks like a secret: tags are readable by anyone who can list instances")
        self._validate_wheel()
        if self.max_price is not None and not re.fullmatch(r"[0-9]+(\.[0-9]+)?", self.max_price):
            raise UserError(f"bad --max-price '{clip(self.max_price)}': USD per hour, e.g. 0.25")


    def _validate_wheel(self) -> None:
        if not self.wheel_url and not self.wheel_bucket:
            raise UserError("runners install this dbsurge's own wheel: pass --wheel-bucket BUCKET (it is uploaded "
                            "there, fetched through a presigned URL) or --wheel-url URL of a dbsurge wheel")
        if self.wheel_url and self.wheel_bucket:
            raise UserError("--wheel-url and --wheel-bucket both given: the runners install one wheel")
        if self.wheel_url:
            parts = urlsplit(self.wheel_url)
            if parts.scheme not in ("https", "http", "file") or not parts.path.endswith(".whl"):
                raise UserError(f"bad --wheel-url '{clip(self.wheel_url)}': an https:// URL of a .whl file")
        if self.wheel_path and not (Path(self.wheel_path).is_file() and self.wheel_path.endswith(".whl")):
            raise UserError(f"--wheel {clip(self.wheel_path)}: no such wheel file")
        if not (math.isfinite(self.wheel_url_hours) and 0 < self.wheel_url_hours <= 168):
            raise UserError(f"bad --wheel-url-hours {self.wheel_url_hours}: 0 to 168 (S3's longest presigned URL)")


def validate_run_id(run_id: str | None) -> None:
    if not run_id or not _RUN_ID.fullmatch(run_id):
        raise UserError(f"bad --run-id '{clip(run_id or '')}': letters, digits, '.', '_' and '-' (at most 100)")


def _is_loopback(host: str) -> bool:
    if host.strip().lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip()).is_loopback
    except ValueError:
        return False


# -- AWS clients -------------------------------------------------------------------------------------------------


def ec2_client(region: str | None = None, endpoint_url: str | None = None, *, session: Any = None,
               service: str = "ec2") -> Any:
    """A boto3 EC2 (or `service`) client, after checking there are credentials and a region (no API call)."""
    import boto3

    session = session or boto3.Session()
    if session.get_credentials() is None:
        raise UserError("no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                        "or run where an instance profile is available")
    region = region or session.region_name
    if not region:
        raise UserError("no AWS region: pass --region or set AWS_DEFAULT_REGION")
    if service == "s3":  # presigned URLs with SigV4 (valid up to 7 days; SigV2 is deprecated)
        from botocore.config import Config

        return session.client("s3", region_name=region, endpoint_url=endpoint_url,
                              config=Config(signature_version="s3v4"))
    return session.client(service, region_name=region, endpoint_url=endpoint_url)


def _aws_error(action: str, err: Exception) -> UserError:
    return UserError(f"{action} failed: {clip(str(err), 200)}")


# -- up --------------------------------------------------------------------------------------------------------


def _tags(spec: RunnerSpec, name: str, **extra: str) -> list[dict[str, str]]:
    tags = {TAG_RUN: spec.run_id, TAG_OWNER: spec.owner, "Name": name, **extra}
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _vpc_of(ec2: Any, subnet: str | None) -> str:
    if subnet:
        subnets = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"]
        return subnets[0]["VpcId"]
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise UserError("no default VPC in this region: pass --subnet (and --security-group)")
    return vpcs[0]["VpcId"]


def create_security_group(ec2: Any, spec: RunnerSpec) -> str:
    """A security group for the runners: no inbound rule (workers only connect out), tagged as ours."""
    name = f"dbsurge-{spec.run_id}"
    group = ec2.create_security_group(
        GroupName=name, VpcId=_vpc_of(ec2, spec.subnet),
        Description=f"dbsurge runners of run {spec.run_id}: outbound only",
        TagSpecifications=[{"ResourceType": "security-group",
                            "Tags": _tags(spec, name, **{TAG_CREATED: "dbsurge runners up"})}])
    return group["GroupId"]


def launch_request(spec: RunnerSpec, security_groups: list[str]) -> dict[str, Any]:
    """The ``run_instances`` arguments for a spec. Pure."""
    name = f"dbsurge-{spec.run_id}-worker"
    script = user_data(UserDataSpec(
        master_host=spec.master_host, master_port=spec.master_port, version=__version__, run_id=spec.run_id,
        wheel_url=spec.wheel_url, join_token_secret=spec.join_token_secret, secret_env=dict(spec.secret_env),
        worker_env=dict(spec.worker_env), processes=spec.processes, spot_watch=spec.spot and spec.spot_watch))
    extra = {TAG_WHEEL: spec.wheel_object} if spec.wheel_object else {}
    tag_specs = [{"ResourceType": kind, "Tags": _tags(spec, name, **extra)} for kind in ("instance", "volume")]
    req: dict[str, Any] = {
        "ImageId": spec.image, "InstanceType": spec.instance_type, "MinCount": spec.count, "MaxCount": spec.count,
        "UserData": script, "TagSpecifications": tag_specs,
        # IMDSv2 only: the Spot watcher asks for a token first, and nothing on the host needs v1
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 2},
    }
    if spec.spot:
        options: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
        if spec.max_price:
            options["MaxPrice"] = spec.max_price
        req["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
        tag_specs.append({"ResourceType": "spot-instances-request", "Tags": _tags(spec, name)})
    if spec.subnet:
        req["SubnetId"] = spec.subnet
    if security_groups:
        req["SecurityGroupIds"] = list(security_groups)
    if spec.key_name:
        req["KeyName"] = spec.key_name
    if spec.iam_instance_profile:
        key = "Arn" if spec.iam_instance_profile.startswith("arn:") else "Name"
        req["IamInstanceProfile"] = {key: spec.iam_instance_profile}
    return req


def up(ec2: Any, spec: RunnerSpec, *, wait_s: float = 300.0, poll_s: float = 5.0,
       sleep: Callable[[float], None] = time.sleep) -> list[dict]:
    """Launch the runners; returns their ``describe_instances`` records once running (or at `wait_s`).

    All or nothing (``MinCount = MaxCount = count``): a partial fleet could not carry the plan the
    master was sized for, so EC2's "insufficient capacity" is an error, not a smaller run. A
    security group is created only when none is given; if the launch fails, it is deleted again.
    """
    import botocore.exceptions

    spec.validate()
    if not spec.image:
        raise UserError("no image: pass --image AMI-ID (an Amazon Linux 2023 or Ubuntu 24.04 AMI for the "
                        "instance type's architecture)")
    created: str | None = None
    try:
        groups = list(spec.security_groups)
        if not groups:
            created = create_security_group(ec2, spec)
            groups = [created]
        reply = ec2.run_instances(**launch_request(spec, groups))
    except botocore.exceptions.ClientError as err:
        if created:
            _delete_groups(ec2, [created], deadline=time.monotonic(), sleep=sleep)
        raise _aws_error("launching runners", err) from None
    except botocore.exceptions.NoCredentialsError:
        raise UserError("no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY") from None
    ids = [i["InstanceId"] for i in reply["Instances"]]
    deadline = time.monotonic() + wait_s
    while True:
        instances = _describe_instances(ec2, [{"Name": "instance-id", "Values": ids}])
        if all(i["State"]["Name"] != "pending" for i in instances) or time.monotonic() >= deadline:
            return instances
        sleep(poll_s)


# -- what a run has ----------------------------------------------------------------------------------------------


def _describe_instances(ec2: Any, filters: list[dict]) -> list[dict]:
    out = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            out.extend(reservation["Instances"])
    return out


@dataclass
class Inventory:
    """Everything tagged with a run id: instances, Spot requests, and the security groups ``up`` created."""

    instances: list[dict]
    spot_requests: list[dict]
    security_groups: list[dict]

    def left(self) -> list[tuple[str, str, str]]:
        """``(kind, id, state)`` of each thing still there: what ``verify`` counts."""
        out = [("instance", i["InstanceId"], i["State"]["Name"]) for i in self.instances
               if i["State"]["Name"] != "terminated"]
        out += [("spot-request", r["SpotInstanceRequestId"], r["State"]) for r in self.spot_requests
                if r["State"] in LEFT_SPOT_STATES]
        out += [("security-group", g["GroupId"], "exists") for g in self.security_groups]
        return out


def inventory(ec2: Any, run_id: str) -> Inventory:
    """What AWS holds for a run, found by the ``dbsurge:run-id`` tag (and Spot requests by their instances)."""
    tag = [{"Name": f"tag:{TAG_RUN}", "Values": [run_id]}]
    instances = _describe_instances(ec2, tag)
    requests = {r["SpotInstanceRequestId"]: r for r in ec2.describe_spot_instance_requests(Filters=tag)
                ["SpotInstanceRequests"]}
    linked = [i["SpotInstanceRequestId"] for i in instances
              if i.get("SpotInstanceRequestId") and i["SpotInstanceRequestId"] not in requests]
    if linked:
        for r in ec2.describe_spot_instance_requests(SpotInstanceRequestIds=linked)["SpotInstanceRequests"]:
            requests[r["SpotInstanceRequestId"]] = r
    groups = ec2.describe_security_groups(Filters=[*tag, {"Name": "tag-key", "Values": [TAG_CREATED]}])
    return Inventory(instances, list(requests.values()), groups["SecurityGroups"])


# -- down --------------------------------------------------------------------------------------------------------


def down(ec2: Any, run_id: str, *, wait_s: float = 600.0, poll_s: float = 5.0,
         sleep: Callable[[float], None] = time.sleep) -> dict[str, int]:
    """Cancel the Spot requests, terminate the instances, wait for them, delete the groups ``up`` created.

    Requests go first, so that nothing relaunches an instance; groups last, because AWS refuses to
    delete a group that a not-yet-terminated instance uses. Returns how many of each it acted on.
    """
    validate_run_id(run_id)
    inv = inventory(ec2, run_id)
    open_requests = [r["SpotInstanceRequestId"] for r in inv.spot_requests if r["State"] in LEFT_SPOT_STATES]
    if open_requests:
        ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=open_requests)
    live = [i["InstanceId"] for i in inv.instances if i["State"]["Name"] != "terminated"]
    if live:
        ec2.terminate_instances(InstanceIds=live)
    deadline = time.monotonic() + wait_s
    while live and time.monotonic() < deadline:
        states = _describe_instances(ec2, [{"Name": "instance-id", "Values": live}])
        live = [i["InstanceId"] for i in states if i["State"]["Name"] != "terminated"]
        if live:
            sleep(poll_s)
    deleted = _delete_groups(ec2, [g["GroupId"] for g in inv.security_groups], deadline=deadline, sleep=sleep,
                             poll_s=poll_s)
    return {"spot_requests_cancelled": len(open_requests), "instances_terminated": len(inv.instances) - len(live),
            "security_groups_deleted": deleted}


def _delete_groups(ec2: Any, group_ids: list[str], *, deadline: float, sleep: Callable[[float], None],
                   poll_s: float = 5.0) -> int:
    import botocore.exceptions

    deleted = 0
    for group_id in group_ids:
        while True:
            try:
                ec2.delete_security_group(GroupId=group_id)
                deleted += 1
                break
            except botocore.exceptions.ClientError as err:
                code = err.response.get("Error", {}).get("Code", "")
                if code == "InvalidGroup.NotFound":
                    break
                if code != "DependencyViolation" or time.monotonic() >= deadline:
                    sys.stderr.write(f"dbsurge: could not delete {group_id}: {clip(str(err), 160)}\n")
                    break
                sleep(poll_s)  # an instance that uses it is still shutting down
    return deleted


# -- status ------------------------------------------------------------------------------------------------------

_ENDED = re.compile(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:GMT|UTC)\)")


def status_rows(instances: list[dict], now: datetime | None = None) -> list[dict]:
    """One row per instance (`CSV_COLUMNS`); ``hours`` from launch to now, or to termination when AWS says when."""
    now = now or datetime.now(UTC)
    rows = []
    for i in sorted(instances, key=lambda x: (x["LaunchTime"], x["InstanceId"])):
        launched = i["LaunchTime"] if i["LaunchTime"].tzinfo else i["LaunchTime"].replace(tzinfo=UTC)
        state = i["State"]["Name"]
        ended = None
        if state in ("terminated", "shutting-down", "stopped"):
            m = _ENDED.search(i.get("StateTransitionReason") or "")
            ended = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC) if m else None
        hours = None if state == "terminated" and ended is None else max(0.0, ((ended or now) - launched)
                                                                           .total_seconds() / 3600.0)
        rows.append({
            "instance_id": i["InstanceId"], "instance_type": i["InstanceType"],
            "lifecycle": i.get("InstanceLifecycle") or "on-demand", "state": state,
            "spot_request_id": i.get("SpotInstanceRequestId") or "", "private_ip": i.get("PrivateIpAddress") or "",
            "launch_time_utc": launched.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "end_time_utc": ended.strftime("%Y-%m-%dT%H:%M:%SZ") if ended else "",
            "hours": "" if hours is None else f"{hours:.4f}",
        })
    return rows


def write_runners_csv(run_dir: str | Path, rows: list[dict]) -> Path:
    """``RUN_DIR/metrics/runners.csv`` (atomically): what ``dbsurge cost`` prices as runner hours."""
    return write_csv(metrics_path(run_dir, RUNNERS), CSV_COLUMNS, rows)


# -- the command ---------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="dbsurge runners", description="EC2 (Spot) hosts for Locust workers.",
                                epilog=epilog("runners"), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    common = OneLineParser(add_help=False)
    common.add_argument("--run-id", required=True, help="the run the runners belong to (their dbsurge:run-id tag)")
    common.add_argument("--region", default=None, help="AWS region (default: AWS_DEFAULT_REGION / the profile's)")
    common.add_argument("--endpoint-url", default=None, help="EC2 endpoint (default: AWS_ENDPOINT_URL or AWS's)")
    u = sub.add_parser("up", parents=[common], help="launch runners that join the master")
    u.add_argument("--count", type=int, required=True)
    u.add_argument("--instance-type", required=True, help="e.g. c6g.4xlarge")
    u.add_argument("--spot", action="store_true", help="Spot instances (one-time requests, terminate on interruption)")
    u.add_argument("--max-price", default=None, help="Spot: most USD per hour (default: the on-demand price)")
    u.add_argument("--image", default=None, help="AMI id (Amazon Linux 2023 or Ubuntu 24.04)")
    u.add_argument("--subnet", default=None)
    u.add_argument("--security-group", action="append", default=[], help="(repeatable; default: create one)")
    u.add_argument("--key-name", default=None)
    u.add_argument("--iam-instance-profile", default=None, help="a profile that may read the join-token secret")
    u.add_argument("--master-host", default=None, help="the master's address as the runners reach it")
    u.add_argument("--master-port", type=int, default=5557)
    u.add_argument("--join-token-secret", default=None, metavar="ARN",
                   help="Secrets Manager secret or SSM parameter holding DBSURGE_JOIN_TOKEN (read on each host)")
    u.add_argument("--insecure-join", action="store_true", help="no token (the master runs with --insecure-join)")
    u.add_argument("--owner", default=None, help="the dbsurge:owner tag (default: your user name)")
    u.add_argument("--wheel-bucket", default=None, metavar="BUCKET",
                   help="upload this dbsurge's own wheel to s3://BUCKET/dbsurge-runners/RUN_ID/ for the runners "
                        "(fetched through a presigned URL; `runners down` deletes it)")
    u.add_argument("--wheel", default=None, metavar="PATH", dest="wheel_path",
                   help="with --wheel-bucket: upload this wheel (default: the running install, packed)")
    u.add_argument("--wheel-url-hours", type=float, default=12.0,
                   help="how long the presigned URL stays valid, for runners that start late (default 12)")
    u.add_argument("--wheel-url", default=None, help="instead of --wheel-bucket: an https:// URL of a dbsurge wheel")
    u.add_argument("--processes", type=int, default=None, help="worker processes per runner (default: one)")
    u.add_argument("--no-spot-watch", action="store_true", help="do not watch for Spot interruption notices")
    u.add_argument("--worker-env", action="append", default=[], metavar="KEY=VALUE",
                   help="a plain setting for the workers, e.g. DBSURGE_OP_TIMEOUT=5s (repeatable)")
    u.add_argument("--secret-env", action="append", default=[], metavar="NAME=ARN",
                   help="an environment variable each worker reads from a secret, e.g. DBSURGE_TARGET=arn:...")
    u.add_argument("--no-wait", action="store_true", help="return without waiting for the instances to run")
    st = sub.add_parser("status", parents=[common], help="list the run's instances")
    st.add_argument("--run-dir", default=None, help=f"also write RUN_DIR/{in_metrics(RUNNERS)} (for dbsurge cost)")
    sub.add_parser("down", parents=[common], help="terminate, cancel and delete everything the run has")
    sub.add_parser("verify", parents=[common], help="print remaining_count; exit 1 when anything is left")
    return p


def spec_from_args(args: argparse.Namespace) -> RunnerSpec:
    return RunnerSpec(
        count=args.count, instance_type=args.instance_type, master_host=args.master_host or "", run_id=args.run_id,
        image=args.image, spot=args.spot, subnet=args.subnet, security_groups=tuple(args.security_group),
        key_name=args.key_name, owner=args.owner or os.environ.get("USER") or getpass.getuser(),
        master_port=args.master_port, join_token_secret=args.join_token_secret, insecure_join=args.insecure_join,
        iam_instance_profile=args.iam_instance_profile, wheel_url=args.wheel_url, wheel_bucket=args.wheel_bucket,
        wheel_path=args.wheel_path, wheel_url_hours=args.wheel_url_hours, max_price=args.max_price,
        processes=args.processes, spot_watch=not args.no_spot_watch,
        worker_env=parse_key_values(args.worker_env, "--worker-env"),
        secret_env=parse_key_values(args.secret_env, "--secret-env"))


def runners_main(argv: list[str], *, ec2: Any = None, s3: Any = None) -> int:
    """``dbsurge runners up|status|down|verify``; `ec2` and `s3` are injected clients (tests)."""
    import botocore.exceptions

    args = _parser().parse_args(argv)
    validate_run_id(args.run_id)
    spec = spec_from_args(args) if args.action == "up" else None
    if spec is not None:
        spec.validate()  # before credentials, before any call
    ec2 = ec2 or ec2_client(args.region, args.endpoint_url)
    args.s3 = s3 or (lambda: ec2_client(args.region, args.endpoint_url, service="s3"))
    try:
        return _ACTIONS[args.action](ec2, args, spec)
    except botocore.exceptions.NoCredentialsError:
        raise UserError("no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY") from None
    except botocore.exceptions.ClientError as err:
        raise _aws_error(f"runners {args.action}", err) from None


def _s3(args: argparse.Namespace) -> Any:
    return args.s3() if callable(args.s3) else args.s3


def ship_wheel(s3: Any, spec: RunnerSpec) -> RunnerSpec:
    """Upload the wheel the runners install (`runner_wheel`); returns the spec with its URL and object."""
    with tempfile.TemporaryDirectory(prefix="dbsurge-wheel-") as tmp:
        wheel = Path(spec.wheel_path) if spec.wheel_path else wheel_of_running_install(Path(tmp))
        uri, url = upload_wheel(s3, spec.wheel_bucket or "", spec.run_id, wheel,
                                expires_s=int(spec.wheel_url_hours * 3600))
    print(f"runners install {wheel.name} from {uri} (a presigned URL valid {spec.wheel_url_hours:g} h)")
    return replace(spec, wheel_url=url, wheel_object=uri, wheel_bucket=None, wheel_path=None)


def _up(ec2: Any, args: argparse.Namespace, spec: RunnerSpec | None) -> int:
    assert spec is not None
    if spec.wheel_bucket:
        spec = ship_wheel(_s3(args), spec)
    instances = up(ec2, spec, wait_s=0.0 if args.no_wait else 300.0)
    _print_rows(status_rows(instances))
    print(f"run {spec.run_id}: {len(instances)} runner(s) joining {spec.master_host}:{spec.master_port}; "
          f"`dbsurge runners down --run-id {spec.run_id}` removes them")
    return 0


def _status(ec2: Any, args: argparse.Namespace, _spec: Any) -> int:
    rows = status_rows(inventory(ec2, args.run_id).instances)
    _print_rows(rows)
    if args.run_dir:
        print(f"wrote {write_runners_csv(args.run_dir, rows)}")
    return 0


def _down(ec2: Any, args: argparse.Namespace, _spec: Any) -> int:
    wheels = {t["Value"] for i in inventory(ec2, args.run_id).instances for t in i.get("Tags", [])
              if t["Key"] == TAG_WHEEL}
    done = down(ec2, args.run_id)
    if wheels:
        buckets = {urlsplit(uri).netloc for uri in wheels}
        done["wheel_objects_deleted"] = sum(delete_wheels(_s3(args), b, args.run_id) for b in buckets)
    print(", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in done.items()))
    return _verify(ec2, args, None)


def _verify(ec2: Any, args: argparse.Namespace, _spec: Any) -> int:
    left = inventory(ec2, args.run_id).left()
    if left:
        print(render(["kind", "id", "state"], [list(x) for x in left]))
    print(f"remaining_count={len(left)}")
    return 1 if left else 0


def _print_rows(rows: list[dict]) -> None:
    headers = ["instance id", "type", "state", "spot request", "private ip", "launched (UTC)", "hours"]
    keys = ["instance_id", "instance_type", "state", "spot_request_id", "private_ip", "launch_time_utc", "hours"]
    print(render(headers, [[r[k] for k in keys] for r in rows]) if rows else "no runners")


_ACTIONS = {"up": _up, "status": _status, "down": _down, "verify": _verify}
