"""The examples at the end of every command's ``--help``: one place, so each command shows at least one.

Every example runs as written on this machine (the embedded targets), except where it needs a
cloud account or a finished run (``results/<run-id>``)::

    >>> epilog("report").splitlines()[0]
    'examples:'
"""

from __future__ import annotations

#: command (or ``scenario NAME``) -> example command lines
EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": (
        "dbsurge run --workload orders --target embedded-postgres --shape spike --baseline-tps 200 --stage-seconds 20",
        ("dbsurge run --workload ycsb --target embedded-mongo --shape constant --rate 500 --duration 30s "
         "--check 'p99<20ms'"),
        "dbsurge run --workload orders --target embedded-postgres --users 8 --duration 10s   # closed model",
    ),
    "load": ("dbsurge load --workload ycsb --target embedded-mongo --workload-option recordcount=100000",),
    "embedded": (
        "dbsurge embedded start postgres      # prints its URI; later runs on embedded-postgres reuse it",
        "dbsurge embedded start postgres --tls   # TLS only: its URI names the CA file, to try TLS settings on",
        "dbsurge embedded status",
        "dbsurge embedded stop all",
    ),
    "collect": ("dbsurge collect results/<run-id> --cloudwatch aurora:my-cluster --region us-east-1",),
    "report": ("dbsurge report results/<run-id>", "dbsurge report results/<a> results/<b>   # with a comparison"),
    "cost": (
        "dbsurge cost results/<run-id> --runner c6g.4xlarge:2",
        "dbsurge cost results/<run-id> --database scylla-cloud-i4i.2xlarge:3   # a 3-node cluster by the hour",
        "dbsurge cost results/<run-id> --actual --actual-tag dbsurge-run=<run-id>   # beside Cost Explorer's charges",
    ),
    "rerun": (
        "dbsurge rerun results/<run-id>                       # the same target (embedded-postgres again)",
        "dbsurge rerun results/<run-id> --target \"$OTHER_URI\" --run-id other",
    ),
    "compare": (
        "dbsurge compare results/<a> results/<b> --labels SMALL,BIG --html compare.html",
        "dbsurge compare results/<s> results/<m> results/<l> --sizes 3,6,9   # against the linear ideal",
    ),
    "runners": (
        ("dbsurge runners up --run-id r1 --instance-type c6g.large --count 2 --spot --master-host 10.0.1.20 "
         "--join-token-secret arn:aws:secretsmanager:...:dbsurge-join"),
        "dbsurge runners down --run-id r1 && dbsurge runners verify --run-id r1",
    ),
    "worker": ("dbsurge worker --master-host 10.0.1.20 --join-token-secret arn:aws:secretsmanager:...:dbsurge-join",),
    "scenario": (
        "dbsurge scenario spike --target embedded-postgres --quick",
        "dbsurge scenario ycsb-run --target embedded-mongo --quick --target-tps 400",
    ),
    "scenario spike": (
        "dbsurge scenario spike --target embedded-postgres --quick",
        "dbsurge scenario spike --target embedded-postgres --quick --repeat 3   # the spread across 3 runs",
    ),
    "scenario capacity": (
        "dbsurge scenario capacity --target embedded-postgres --quick",
        "dbsurge scenario capacity --target embedded-mongo --quick --workload ycsb --p99 10ms",
    ),
    "scenario idle": ("dbsurge scenario idle --target embedded-postgres --quick",),
    "scenario cache": ("dbsurge scenario cache --target embedded-mongo --quick",),
    "scenario rewarm": ("dbsurge scenario rewarm --target embedded-mongo --quick",),
    "scenario longscan": ("dbsurge scenario longscan --target embedded-mongo --quick",),
    "scenario ycsb-load": ("dbsurge scenario ycsb-load --target embedded-mongo --quick",),
    "scenario ycsb-run": (
        "dbsurge scenario ycsb-run --target embedded-mongo --quick",
        "dbsurge scenario ycsb-run --target embedded-mongo --quick --target-tps 400 --repeat 3",
    ),
    "scenario longrun": (
        "dbsurge scenario longrun --target embedded-mongo --quick",
        "dbsurge scenario longrun --target mongodb://db:27017 --rate 5000 --duration 12h --windows 1m,10m",
        "dbsurge scenario longrun --from results/<run-id>   # the tables again, during or after the run",
    ),
}


def epilog(command: str, before: str = "") -> str:
    """``examples:`` and the command's examples, indented (after ``before``, an epilog's own text)."""
    lines = [f"  {line}" for line in EXAMPLES.get(command, ())]
    text = "examples:\n" + "\n".join(lines) if lines else ""
    return f"{before}\n\n{text}" if before and text else before or text
