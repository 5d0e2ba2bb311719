"""The wheel a runner installs: the master's own install, packed, and put where the runners can fetch it.

Runners must run exactly the code the master runs (the plan, the protocol and the cells cross
between them), and no registry serves an unreleased or locally changed dbsurge. So ``dbsurge
runners up`` takes the wheel of the running install:

- from a source tree (an editable install, or a checkout on the path): ``pip wheel`` of that tree;
- from an installed wheel: the installed files packed again into a wheel (their RECORD says which);
- or a wheel file the user names (``--wheel PATH``).

It uploads it as one S3 object per run, ``s3://BUCKET/dbsurge-runners/RUN_ID/NAME.whl``, tagged with
the run id, and hands the runners a presigned GET URL for that object alone, valid for
``--wheel-url-hours``: no credential goes into the user data, and the URL reads nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from dbsurge.base.errors import UserError, clip

PREFIX = "dbsurge-runners"


def source_tree() -> Path | None:
    """The source tree of the running dbsurge, if it runs from one (an editable install or a checkout)."""
    root = Path(__file__).resolve().parents[2]  # this file is dbsurge/cloud/wheel.py in the tree
    if (root / "pyproject.toml").is_file() and (root / "setup.py").is_file() and (root / "locustfiles").is_dir():
        return root
    return None


def build_from_tree(tree: Path, dest: Path) -> Path:
    """``pip wheel`` of the tree into `dest`; returns the wheel's path.

    The build works in the tree's own ``build/`` folder, so two builds of one tree at once (two
    ``dbsurge runners up`` from one checkout) would spoil each other's: they take turns on a lock.
    """
    dest.mkdir(parents=True, exist_ok=True)
    with _tree_lock(tree):
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), str(tree)],
                              capture_output=True, text=True, timeout=600)
    wheels = sorted(dest.glob("dbsurge-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise UserError(f"could not build the dbsurge wheel from {tree}: {clip(proc.stderr.strip(), 300)}")
    return wheels[-1]


@contextlib.contextmanager
def _tree_lock(tree: Path) -> Iterator[None]:
    """An exclusive lock for building one tree: a file in the temp folder named after the tree's path."""
    name = hashlib.sha256(str(tree.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"dbsurge-wheel-{name}.lock", "w") as f:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock (runners are built on Linux and macOS)
            yield
            return
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def repack_installed(dest: Path, dist: metadata.Distribution | None = None) -> Path:
    """The installed distribution's files packed again as a wheel (the files its RECORD lists).

    Files outside site-packages (the ``dbsurge`` script in bin/) are left out: pip makes them again
    from entry_points.txt. INSTALLER, REQUESTED and direct_url.json belong to this install, not to
    the wheel; RECORD is written anew with each file's hash.
    """
    dist = dist or metadata.distribution("dbsurge")
    files = [f for f in (dist.files or []) if not str(f).startswith("..") and "__pycache__" not in str(f)]
    info = f"{dist.metadata['Name']}-{dist.version}.dist-info"
    skip = {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{dist.metadata['Name']}-{dist.version}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(files, key=str):
            name = str(f).replace("\\", "/")
            if name in skip or name.split("/")[0] not in (info, "dbsurge"):
                continue
            data = Path(dist.locate_file(f)).read_bytes()
            z.writestr(name, data)
            records.append(_record_line(name, data))
        records.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return wheel


def wheel_of_running_install(dest: Path) -> Path:
    """The wheel of the dbsurge that is running now (see the module's docstring)."""
    tree = source_tree()  # this very module is in a source tree: the code running is the tree's
    if tree is not None:
        return build_from_tree(tree, dest)
    try:
        dist = metadata.distribution("dbsurge")
    except metadata.PackageNotFoundError:
        raise UserError("this dbsurge is not installed as a package: pass --wheel PATH (the wheel runners install)") \
            from None
    return repack_installed(dest, dist)


def upload_wheel(s3: Any, bucket: str, run_id: str, wheel: Path, *, expires_s: int) -> tuple[str, str]:
    """Put the wheel as the run's object and return ``(s3 URI, presigned GET URL)``."""
    import botocore.exceptions

    key = f"{PREFIX}/{run_id}/{wheel.name}"
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=wheel.read_bytes(), ContentType="application/zip",
                      Tagging=f"dbsurge%3Arun-id={run_id}")
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s)
    except botocore.exceptions.ClientError as err:
        raise UserError(f"uploading the runners' wheel to s3://{bucket}/{key} failed: {clip(str(err), 200)}") from None
    return f"s3://{bucket}/{key}", url


def delete_wheels(s3: Any, bucket: str, run_id: str) -> int:
    """Delete the run's wheel objects; returns how many."""
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/{run_id}/").get("Contents", [])
    for obj in listed:
        s3.delete_object(Bucket=bucket, Key=obj["Key"])
    return len(listed)
