"""``dbsurge runners`` end to end against moto's EC2 server on 127.0.0.1, and ``dbsurge worker``'s secrets.

Every client is pointed at the `moto_url` endpoint explicitly, and the credential chain is kept
off the instance-metadata address (AWS_EC2_METADATA_DISABLED): nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from dbsurge import __version__
from dbsurge.cli import main
from dbsurge.runners import TAG_OWNER, TAG_RUN, status_rows
from dbsurge.worker import fetch_secret, parse_secret_ref, worker_command

REGION = "us-east-1"
TOKEN_ARN = "arn:aws:ssm:us-east-1:123456789012:parameter/dbsurge/join-token"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(scope="module")
def ec2(moto_url):
    # module-scoped, so made before `aws_env`: explicit keys keep botocore's chain off the metadata address
    return boto3.client("ec2", endpoint_url=moto_url, region_name=REGION, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


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


def test_up_status_down_verify(ec2, image, moto_url, tmp_path, capsys):
    aws = ["--endpoint-url", moto_url, "--region", REGION]
    code, out, err = _cli(capsys, "runners", "up", "--run-id", "spot-e2e", *aws, "--count", "3", "--instance-type",
                          "c6g.4xlarge", "--spot", "--image", image, "--master-host", "10.0.1.20", "--owner", "ana",
                          "--join-token-secret", TOKEN_ARN, "--worker-env", "DBSURGE_OP_TIMEOUT=5s")
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
    assert f"dbsurge=={__version__}" in script and "--master-host 10.0.1.20" in script
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
])
def test_bad_input_is_one_line_before_any_call(ec2, moto_url, capsys, change, message):
    args = {"--run-id": "bad-input", "--endpoint-url": moto_url, "--count": "1", "--instance-type": "c6g.large",
            "--image": "ami-12345678", "--master-host": "10.0.0.9", "--join-token-secret": TOKEN_ARN, **change}
    argv = [x for k, v in args.items() if v is not None for x in (k, v)]
    code, _out, err = _cli(capsys, "runners", "up", *argv)
    assert code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert _tagged(ec2, "bad-input") == []


def test_no_credentials_is_one_line_before_any_call(ec2, moto_url, monkeypatch, capsys):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    code, _, err = _cli(capsys, "runners", "up", "--run-id", "no-creds", "--endpoint-url", moto_url, "--count", "1",
                        "--instance-type", "c6g.large", "--image", "ami-12345678", "--master-host", "10.0.0.9",
                        "--join-token-secret", TOKEN_ARN)
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
    assert env == {"DBSURGE_JOIN_TOKEN": "tok-123", "DBSURGE_TARGET": "postgresql://app:pw@db:5432/app"}
    assert cmd[1:] == ["-m", "locust", "-f", "-", "--worker", "--master-host", "10.0.0.5", "--master-port", "5557",
                       "--loglevel", "WARNING"]
    assert "tok-123" not in " ".join(cmd)
