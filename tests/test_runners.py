"""``dbsurge runners`` end to end against moto's EC2 server on 127.0.0.1, and ``dbsurge worker``'s secrets.

Every client is pointed at the `moto_url` endpoint explicitly, and the credential chain is kept
off the instance-metadata address (AWS_EC2_METADATA_DISABLED): nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from install import clean_env

from dbsurge import __version__
from dbsurge.cloud.spot_hosts import TAG_OWNER, TAG_RUN, TAG_WHEEL, status_rows
from dbsurge.cloud.userdata import UserDataSpec, setup_part, user_data
from dbsurge.commands.cli import main
from dbsurge.commands.worker import fetch_secret, parse_secret_ref, worker_command

REGION = "us-east-1"
TOKEN_ARN = "arn:aws:ssm:us-east-1:123456789012:parameter/dbsurge/join-token"
BUCKET = "dbsurge-artifacts"
# distinct key id and secret, so that a test can tell the secret apart from the key id a presigned URL names
ACCESS_KEY, SECRET_KEY = "AKIDRUNNERSTEST00001", "runners-test-secret-key-do-not-leak-0123456789"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(scope="module")
def ec2(moto_url):
    # module-scoped, so made before `aws_env`: explicit keys keep botocore's chain off the metadata address
    return boto3.client("ec2", endpoint_url=moto_url, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY)


@pytest.fixture(scope="module")
def s3(moto_url):
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=moto_url, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY, config=Config(signature_version="s3v4"))
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture(scope="module")
def image(ec2) -> str:
    return ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _tagged(ec2, run_id: str) -> list[dict]:
    pages = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_RUN}", "Values": [run_id]}])["Reservations"]
    return [i for r in pages for i in r["Instances"]]


def test_up_status_down_verify(ec2, s3, image, moto_url, tmp_path, capsys):
    aws = ["--endpoint-url", moto_url, "--region", REGION]
    code, out, err = _cli(capsys, "runners", "up", "--run-id", "spot-e2e", *aws, "--count", "3", "--instance-type",
                          "c6g.4xlarge", "--spot", "--image", image, "--master-host", "10.0.1.20", "--owner", "ana",
                          "--join-token-secret", TOKEN_ARN, "--worker-env", "DBSURGE_OP_TIMEOUT=5s",
                          "--wheel-bucket", BUCKET)
    assert code == 0, err
    instances = _tagged(ec2, "spot-e2e")
    assert len(instances) == 3 and {i["State"]["Name"] for i in instances} == {"running"}
    assert {i["InstanceType"] for i in instances} == {"c6g.4xlarge"}
    assert {i.get("InstanceLifecycle") for i in instances} == {"spot"}
    tags = {t["Key"]: t["Value"] for t in instances[0]["Tags"]}
    assert tags[TAG_RUN] == "spot-e2e" and tags[TAG_OWNER] == "ana" and tags["Name"] == "dbsurge-spot-e2e-worker"
    assert "remove" in out and "10.0.1.20:5557" in out

    script = ec2.describe_instance_attribute(InstanceId=instances[0]["InstanceId"], Attribute="userData")
    script = base64.b64decode(script["UserData"]["Value"]).decode()
    wheel_key = f"dbsurge-runners/spot-e2e/dbsurge-{__version__}-py3-none-any.whl"
    assert f"s3://{BUCKET}/{wheel_key}" in out  # the master's own wheel, uploaded for the run
    obj = s3.get_object(Bucket=BUCKET, Key=wheel_key)["Body"].read()
    assert obj[:2] == b"PK" and len(obj) > 50_000
    assert s3.get_object_tagging(Bucket=BUCKET, Key=wheel_key)["TagSet"] == [{"Key": TAG_RUN, "Value": "spot-e2e"}]
    assert wheel_key in script and "X-Amz-Signature" in script and "--master-host 10.0.1.20" in script
    assert tags[TAG_WHEEL] == f"s3://{BUCKET}/{wheel_key}"
    for secret in (SECRET_KEY, "tok-", "PASSWORD"):  # no secret value in the user data, the tags or the object
        assert secret not in script and secret not in json.dumps(instances[0]["Tags"]), secret
    assert SECRET_KEY.encode() not in obj
    assert f"--join-token-secret {TOKEN_ARN}" in script and "DBSURGE_JOIN_TOKEN=" not in script
    assert "DBSURGE_SPOT_WATCH=1" in script and "DBSURGE_OP_TIMEOUT=5s" in script

    # the security group it made: tagged, no inbound rule
    groups = ec2.describe_security_groups(Filters=[{"Name": f"tag:{TAG_RUN}", "Values": ["spot-e2e"]}])
    (group,) = groups["SecurityGroups"]
    assert group["IpPermissions"] == []

    code, out, _ = _cli(capsys, "runners", "verify", "--run-id", "spot-e2e", *aws)
    assert code == 1 and "remaining_count=4" in out  # 3 instances + the group

    run_dir = tmp_path / "results" / "spot-e2e"
    run_dir.mkdir(parents=True)
    now = datetime.now(UTC)
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": "spot-e2e", "started_utc": (now - timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ended_utc": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "plan": {"stages": []}}))
    code, out, err = _cli(capsys, "runners", "status", "--run-id", "spot-e2e", *aws, "--run-dir", str(run_dir))
    assert code == 0, err
    assert all(i["InstanceId"] in out for i in instances) and "c6g.4xlarge" in out
    assert (run_dir / "metrics" / "runners.csv").is_file()
    from dbsurge.collectors.cost import estimate_cost

    items = {i.name: i for i in estimate_cost(run_dir, region=REGION).items}
    runner = items["runner c6g.4xlarge x3"]
    assert runner.unit_price_usd > 0 and runner.usage < 0.1 and "runners.csv" in runner.note  # real hours: seconds

    code, out, err = _cli(capsys, "runners", "down", "--run-id", "spot-e2e", *aws)
    assert code == 0, (out, err)
    assert "instances terminated: 3" in out and "security groups deleted: 1" in out and "remaining_count=0" in out
    assert "wheel objects deleted: 1" in out
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="dbsurge-runners/spot-e2e/").get("KeyCount") == 0
    assert {i["State"]["Name"] for i in _tagged(ec2, "spot-e2e")} == {"terminated"}
    code, out, _ = _cli(capsys, "runners", "verify", "--run-id", "spot-e2e", *aws)
    assert code == 0 and out.strip().endswith("remaining_count=0")


def test_verify_counts_an_open_spot_request_until_down(ec2, image, moto_url, capsys):
    tags = [{"Key": TAG_RUN, "Value": "spot-req"}, {"Key": TAG_OWNER, "Value": "ana"}]
    ec2.request_spot_instances(InstanceCount=1, LaunchSpecification={"ImageId": image, "InstanceType": "m7g.large"},
                               TagSpecifications=[{"ResourceType": "spot-instances-request", "Tags": tags}])
    aws = ["--run-id", "spot-req", "--endpoint-url", moto_url, "--region", REGION]
    code, out, _ = _cli(capsys, "runners", "verify", *aws)
    assert code == 1 and "spot-request" in out and "remaining_count=0" not in out
    code, out, _ = _cli(capsys, "runners", "down", *aws)
    assert code == 0 and "spot requests cancelled: 1" in out and "remaining_count=0" in out


@pytest.mark.parametrize(("change", "message"), [
    ({"--instance-type": "huge"}, "unknown instance type format 'huge'"),
    ({"--master-host": None}, "no master: pass --master-host"),
    ({"--master-host": "127.0.0.1"}, "loopback address"),
    ({"--join-token-secret": None}, "--join-token-secret ARN"),
    ({"--join-token-secret": "s3cret"}, "bad secret reference"),
    ({"--count": "0"}, "bad --count 0"),
    ({"--worker-env": "DBSURGE_TARGET_PASSWORD=x"}, "looks like a secret"),
    ({"--worker-env": "DBSURGE_TARGET=postgresql://app:hunter2@db.example.com/app"}, "looks like a secret"),
    ({"--worker-env": "DBSURGE_TARGET_OPTION=password=hunter2"}, "looks like a secret"),
    ({"--worker-env": "DBSURGE_NOTE=AKIAIOSFODNN7EXAMPLE"}, "looks like a secret"),
    ({"--wheel-bucket": None}, "pass --wheel-bucket BUCKET"),
    ({"--wheel-bucket": None, "--wheel-url": "https://example.com/dbsurge.tar.gz"}, "bad --wheel-url"),
    ({"--wheel": "/nonexistent/dbsurge-0.1.0-py3-none-any.whl"}, "no such wheel file"),
    ({"--wheel-url-hours": "nan"}, "bad --wheel-url-hours"),
])
def test_bad_input_is_one_line_before_any_call(ec2, moto_url, capsys, change, message):
    args = {"--run-id": "bad-input", "--endpoint-url": moto_url, "--count": "1", "--instance-type": "c6g.large",
            "--image": "ami-12345678", "--master-host": "10.0.0.9", "--join-token-secret": TOKEN_ARN,
            "--wheel-bucket": BUCKET, **change}
    argv = [x for k, v in args.items() if v is not None for x in (k, v)]
    code, _out, err = _cli(capsys, "runners", "up", *argv)
    assert code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert _tagged(ec2, "bad-input") == []


def test_no_credentials_is_one_line_before_any_call(ec2, moto_url, monkeypatch, capsys):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    code, _, err = _cli(capsys, "runners", "up", "--run-id", "no-creds", "--endpoint-url", moto_url, "--count", "1",
                        "--instance-type", "c6g.large", "--image", "ami-12345678", "--master-host", "10.0.0.9",
                        "--join-token-secret", TOKEN_ARN, "--wheel-bucket", BUCKET)
    assert code == 2 and err.startswith("dbsurge: no AWS credentials") and err.count("\n") == 1, err
    assert _tagged(ec2, "no-creds") == []


def test_status_hours_to_termination():
    launched = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    rows = status_rows([
        {"InstanceId": "i-1", "InstanceType": "c6g.large", "State": {"Name": "terminated"}, "LaunchTime": launched,
         "StateTransitionReason": "User initiated (2026-12-01 09:30:00 GMT)", "InstanceLifecycle": "spot",
         "SpotInstanceRequestId": "sir-1"},
        {"InstanceId": "i-2", "InstanceType": "c6g.large", "State": {"Name": "running"}, "LaunchTime": launched},
    ], now=launched + timedelta(hours=2))
    assert [r["hours"] for r in rows] == ["1.5000", "2.0000"]
    assert rows[0]["spot_request_id"] == "sir-1" and rows[1]["lifecycle"] == "on-demand"


def test_worker_reads_its_secrets_from_ssm_and_secrets_manager(moto_url, monkeypatch):
    session = boto3.Session(region_name=REGION)
    ssm = session.client("ssm", endpoint_url=moto_url)
    ssm.put_parameter(Name="/dbsurge/join-token", Value="tok-123", Type="SecureString")
    sm = session.client("secretsmanager", endpoint_url=moto_url)
    arn = sm.create_secret(Name="dbsurge-target", SecretString="postgresql://app:pw@db:5432/app")["ARN"]
    assert fetch_secret(TOKEN_ARN, endpoint_url=moto_url) == "tok-123"
    assert parse_secret_ref(arn)[0] == "secretsmanager"
    cmd, env = worker_command(["--master-host", "10.0.0.5", "--join-token-secret", TOKEN_ARN, "--secret-env",
                               f"DBSURGE_TARGET={arn}", "--endpoint-url", moto_url, "--loglevel", "WARNING"], {})
    private = Path(env.pop("TMPDIR"))  # the folder Locust downloads the locustfile to: this worker's alone
    assert private.is_dir() and private.name.startswith("dbsurge-worker-") and private.stat().st_mode & 0o077 == 0
    # named, with its owner (this process: exec keeps its id), for the worker to remove at its exit
    assert (env.pop("DBSURGE_WORKER_TMPDIR"), env.pop("DBSURGE_WORKER_TMPDIR_PID")) == (str(private), str(os.getpid()))
    again = Path(worker_command(["--master-host", "10.0.0.5"], {})[1]["TMPDIR"])
    assert again != private
    private.rmdir()
    again.rmdir()
    assert env == {"DBSURGE_JOIN_TOKEN": "tok-123", "DBSURGE_TARGET": "postgresql://app:pw@db:5432/app"}
    assert cmd[1:] == ["-m", "locust", "-f", "-", "--worker", "--master-host", "10.0.0.5", "--master-port", "5557",
                       "--loglevel", "WARNING"]
    assert "tok-123" not in " ".join(cmd)


def test_a_worker_removes_its_own_temporary_folder_at_exit_and_its_forks_leave_it(tmp_path):
    """A worker's private temporary folder (`dbsurge worker`, the image's entrypoint) goes when the worker exits.
    A process forked from it (Locust's ``--processes``) leaves it when it exits; a folder the worker was not
    given, or one whose name is not a worker's, is never removed."""
    script = textwrap.dedent("""
        import os, sys, time
        from dbsurge.commands.worker import remove_own_tmpdir_at_exit
        remove_own_tmpdir_at_exit()
        child = os.fork()
        if child == 0:
            sys.exit(0)  # a forked worker process exits normally: its atexit handlers run
        os.waitpid(child, 0)
        print(os.path.isdir(os.environ["TMPDIR"]), flush=True)  # still there after the fork's exit
    """)

    def worker(folder: Path, owner: str = "$$", given: Path | None = None) -> str:
        folder.mkdir()
        env = {**os.environ, "TMPDIR": str(folder), "DBSURGE_WORKER_TMPDIR": str(given or folder)}
        # the shell's $$ is the process id python runs with after exec, as in the entrypoint
        return subprocess.run(["sh", "-c", f'DBSURGE_WORKER_TMPDIR_PID={owner} exec "$0" -c "$1"', sys.executable,
                               script], env=env, capture_output=True, text=True, check=True, timeout=60).stdout

    own = tmp_path / "dbsurge-worker-abc123"
    assert worker(own) == "True\n" and not own.exists()
    other = tmp_path / "dbsurge-worker-other"
    assert worker(other, owner="1") == "True\n" and other.is_dir()  # not this process's folder
    not_given = tmp_path / "dbsurge-worker-x"
    assert worker(not_given, given=tmp_path / "elsewhere") == "True\n" and not_given.is_dir()
    plain = tmp_path / "results"
    assert worker(plain) == "True\n" and plain.is_dir()  # not a worker's folder by its name


def _user_data(ec2, run_id: str) -> str:
    (instance,) = _tagged(ec2, run_id)
    value = ec2.describe_instance_attribute(InstanceId=instance["InstanceId"], Attribute="userData")
    return base64.b64decode(value["UserData"]["Value"]).decode()


def test_the_user_data_installs_the_uploaded_wheel_for_real(ec2, s3, image, moto_url, tmp_path, capsys):
    """The set-up part of a runner's script, run here: the wheel from S3 (presigned URL), its dependencies, a check."""
    aws = ["--run-id", "install-e2e", "--endpoint-url", moto_url, "--region", REGION]
    code, _, err = _cli(capsys, "runners", "up", *aws, "--count", "1", "--instance-type", "c6g.large", "--image",
                        image, "--master-host", "10.0.1.20", "--join-token-secret", TOKEN_ARN, "--wheel-bucket", BUCKET)
    assert code == 0, err
    script = _user_data(ec2, "install-e2e")
    venv = tmp_path / "runner-venv"
    proc = subprocess.run(["bash", "-c", setup_part(script)], cwd=tmp_path, text=True, capture_output=True,
                          timeout=900, env=clean_env(None, DBSURGE_RUNNER_VENV=str(venv)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"dbsurge {__version__}" in proc.stdout  # the script's own check ran the installed command
    proc = subprocess.run([str(venv / "bin" / "dbsurge"), "worker", "--help"], cwd=tmp_path, text=True,
                          capture_output=True, timeout=60, env=clean_env(venv / "bin"))
    assert proc.returncode == 0 and "--join-token-secret" in proc.stdout, proc.stdout + proc.stderr
    assert _cli(capsys, "runners", "down", *aws)[0] == 0


def test_a_broken_wheel_fails_the_set_up_before_any_service(tmp_path):
    """A wheel that installs but lacks a module stops the script at its check, with one line, and no unit."""
    wheel = tmp_path / f"dbsurge-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:  # a wheel whose metadata is fine and whose package is empty
        info = f"dbsurge-{__version__}.dist-info"
        z.writestr("dbsurge/__init__.py", f"__version__ = {__version__!r}\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: dbsurge\nVersion: {__version__}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    script = user_data(UserDataSpec(master_host="10.0.1.20", version=__version__, run_id="broken",
                                    wheel_url=wheel.as_uri()))
    proc = subprocess.run(["bash", "-c", setup_part(script)], cwd=tmp_path, text=True, capture_output=True,
                          timeout=600, env=clean_env(None, DBSURGE_RUNNER_VENV=str(tmp_path / "v")))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("dbsurge runner: the installed dbsurge"), proc.stderr


def test_the_script_names_each_distributions_packages_and_bounds_restarts():
    """Amazon Linux 2023 (dnf: python3.11, python3.11-pip) and Ubuntu 24.04 (apt: python3.12-venv via $PY-venv)."""
    script = user_data(UserDataSpec(master_host="10.0.1.20", version=__version__, run_id="r",
                                    wheel_url="https://example.com/dbsurge-0.1.0-py3-none-any.whl"))
    setup = setup_part(script)
    assert "dnf install -y -q python3.11 python3.11-pip" in setup
    assert '"$(basename "$PY")-venv" python3-venv' in setup  # python3.12 exists on 24.04, its venv module does not
    assert 'sys.version_info < (3, 11)' in setup  # a shim for a missing version is not taken as a Python
    service = script[len(setup):]
    assert "StartLimitBurst=3" in service and "RestartPreventExitStatus=2" in service
    assert "systemctl" not in setup and "pip install" not in service
