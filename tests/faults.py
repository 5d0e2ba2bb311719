"""Fault injection for the tests: hosts in network namespaces, packet black holes, small disks, slow links, signals.

Everything here targets 127.0.0.0/8 or test hosts that this module creates itself in network
namespaces named ``dbsf-XXXX``, on a private /30 out of 10.231.0.0/16 that exists only between the
namespace and its veth peer. Nothing here ever touches another address.

- `NetnsHost`: a namespace ``dbsf-XXXX`` joined to the root namespace by a veth pair on a /30
  (root side ``10.231.A.B+1``, namespace side ``+2``); `blackhole_port()` / `restore_port()`
  add and remove an iptables DROP rule *inside* the namespace, so packets vanish (no RST).
- `NetnsPostgres`: a fresh `EmbeddedPostgres` started inside a `NetnsHost`, listening on
  127.0.0.1 and the namespace address; `.uri` reaches it from the root namespace.
- `NetnsMongo`: the same for the MongoDB-wire `secantusdb` server.
- `NetnsCassandra`: the same for Apache Cassandra (`EmbeddedCassandra`, a JVM), on the namespace address only.
- `mount_tmpfs()` / `fill_disk()` / `disk_free_bytes()`: a tiny tmpfs for disk-full tests.
- `DelayProxy`: a TCP proxy in a child process (``python tests/faults.py proxy ...``) on 127.0.0.1
  that delays every chunk by D ms in each direction, in order; it can hold all bytes
  (`blackhole(True)`) or reset every connection (`reset()`).
- `start_run()` / `start_process()` / `signal_at()` / `kill_process_tree()` /
  `locust_processes()`: background runs, timed signals, and finding Locust's master and workers.
- `cleanup_stale()`: removes namespaces, veths and tmpfs mounts that a dead test session left.

Namespaces, veths and mounts record their owner (the creating process' pid and start time) in
``/run/dbsf/``, so that `cleanup_stale()` of one pytest session never removes what a concurrent
session still uses.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit, urlunsplit

import psutil

if TYPE_CHECKING:
    from dbsurge.embedded.servers import EmbeddedCassandra, EmbeddedMongo, EmbeddedPostgres

NS_PREFIX = "dbsf-"


def _ns_ephemeral() -> tuple[int, int]:
    """A namespace's ephemeral ports (its outgoing connections' local ports), apart from the root side's.

    free_port() picks from the root side's range (32768-60999 by default), so a port picked there is
    never a client socket in here: above that range when there is room, else just below it.
    """
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return (high + 1, 65535) if high <= 64535 else (max(1024, low - 16384), low - 1)


NS_EPHEMERAL = _ns_ephemeral()
DISK_PREFIX = "dbsf-disk-"
SUBNET = ipaddress.ip_network("10.231.0.0/16")  # carved into /30s, one per namespace
STATE_DIR = Path("/run/dbsf")  # owner records; /run is a tmpfs, so a reboot clears them with the namespaces
REPO = Path(__file__).resolve().parent.parent


class FaultSetupError(RuntimeError):
    """A fault fixture could not set itself up (missing tool, no privilege); tests skip on it."""


# --- small shell helpers -----------------------------------------------------------------------------------------

def _sh(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing text output; raise FaultSetupError with its stderr if `check` and it fails."""
    try:
        proc = subprocess.run(list(args), check=False, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise FaultSetupError(f"{' '.join(args)}: {err}") from None
    if check and proc.returncode != 0:
        raise FaultSetupError(f"{' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc


def netns_unavailable() -> str | None:
    """Why network-namespace tests cannot run here (None if they can): not root, or `ip`/`iptables` missing."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found (make test installs iptables and iproute2 when root)"
    return None


def tmpfs_unavailable() -> str | None:
    """Why tmpfs tests cannot run here (None if they can)."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "`mount`/`umount` not found"
    return None


def _proc_start_time(pid: int) -> float | None:
    """When `pid` started, in seconds since boot (None if it does not exist): see `process_start`."""
    from dbsurge.embedded.servers import process_start

    return process_start(pid)


def _owner_record() -> dict[str, float]:
    return {"pid": os.getpid(), "since_boot": _proc_start_time(os.getpid()) or 0.0}


def _owner_alive(record: dict[str, float]) -> bool:
    """True if the process that wrote the owner record still runs (same pid *and* start mark: pids get reused)."""
    from dbsurge.embedded.servers import same_process

    return bool(record.get("pid")) and same_process(int(record["pid"]), float(record.get("since_boot", -1.0)))


@contextlib.contextmanager
def _state_lock() -> Iterator[None]:
    """Serialise subnet choice and cleanup between concurrent pytest sessions on this host."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


# --- network namespaces ------------------------------------------------------------------------------------------

def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the root namespace has an address or a route for (a /30 must overlap none)."""
    nets: list[ipaddress.IPv4Network] = []
    for line in _sh("ip", "-4", "-o", "addr", "show").stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            nets.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    for line in _sh("ip", "-4", "-o", "route", "show", "table", "all").stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in ("local", "broadcast", "unicast", "anycast", "multicast", "blackhole",
                                  "unreachable", "prohibit", "throw"):
            parts = parts[1:]
        if parts and parts[0] != "default":
            with contextlib.suppress(ValueError):
                nets.append(ipaddress.ip_network(parts[0], strict=False))
    return nets


def _pick_subnet() -> ipaddress.IPv4Network:
    """A random /30 of 10.231.0.0/16 that nothing on this host uses yet."""
    used = _used_networks()
    candidates = SUBNET.num_addresses // 4
    for _ in range(200):
        net = ipaddress.ip_network((int(SUBNET.network_address) + 4 * random.randrange(candidates), 30))
        if not any(net.overlaps(u) for u in used):
            return net
    raise FaultSetupError("no free /30 left in 10.231.0.0/16")


class NetnsHost:
    """A network namespace ``dbsf-XXXX`` with a veth pair to the root namespace on a private /30.

    ``host_ip`` is the root side (``.1`` of the /30), ``ip`` the namespace side (``.2``); the
    namespace has no other route, so its processes can reach only the root side and themselves.
    Use as a context manager, or `create()` then `destroy()` (idempotent, also after a half-done create).
    """

    def __init__(self) -> None:
        suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(6))
        self.name = NS_PREFIX + suffix
        # Interface names are at most 15 characters: "dbsf-xxxxxx-r" is 13.
        self.veth_root = f"{self.name}-r"
        self.veth_ns = f"{self.name}-n"
        self.network: ipaddress.IPv4Network | None = None
        self.host_ip = ""
        self.ip = ""
        self._blackholed: set[int] = set()

    def __enter__(self) -> Self:
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def create(self) -> None:
        """Create the namespace, the veth pair and the addresses (raises FaultSetupError when it cannot)."""
        reason = netns_unavailable()
        if reason:
            raise FaultSetupError(reason)
        with _state_lock():
            self.network = _pick_subnet()
            hosts = list(self.network.hosts())
            self.host_ip, self.ip = str(hosts[0]), str(hosts[1])
            # The owner record goes first: a session that dies half-way still leaves something cleanup_stale() can read.
            record = {**_owner_record(), "veth_root": self.veth_root, "network": str(self.network)}
            (STATE_DIR / f"{self.name}.json").write_text(json.dumps(record))
            try:
                _sh("ip", "netns", "add", self.name)
                _sh("ip", "link", "add", self.veth_root, "type", "veth", "peer", "name", self.veth_ns,
                    "netns", self.name)
                _sh("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.veth_root)
                _sh("ip", "link", "set", self.veth_root, "up")
                self.run("ip", "addr", "add", f"{self.ip}/30", "dev", self.veth_ns)
                self.run("ip", "link", "set", self.veth_ns, "up")
                self.run("ip", "link", "set", "lo", "up")
                # A master a test binds in here on a free_port() must not meet a client socket (or one
                # in TIME_WAIT) of the namespace's own on the same port: CI saw "Address already in use".
                self.run("sh", "-c", "echo '%d %d' > /proc/sys/net/ipv4/ip_local_port_range" % NS_EPHEMERAL)
                # iptables must work in here, or blackhole() would fail only later, in the middle of a test.
                self.run("iptables", "-w", "-S", "INPUT")
            except BaseException:
                self.destroy()
                raise

    def cmd(self, *args: str) -> list[str]:
        """`args` as a command line that runs inside the namespace."""
        return ["ip", "netns", "exec", self.name, *args]

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a command inside the namespace (text output captured)."""
        return _sh(*self.cmd(*args), check=check, timeout=timeout)

    def pids(self) -> list[int]:
        """The processes that live in the namespace."""
        out = _sh("ip", "netns", "pids", self.name, check=False).stdout
        return [int(p) for p in out.split() if p.isdigit()]

    def _drop_rule(self, port: int) -> list[str]:
        # Only on the veth: 127.0.0.1 inside the namespace keeps working (the servers' own readiness checks).
        return ["INPUT", "-i", self.veth_ns, "-p", "tcp", "--dport", str(port), "-j", "DROP"]

    def blackhole_port(self, port: int) -> None:
        """Drop every TCP packet that arrives from outside for `port`: clients hang, none gets a RST."""
        if port not in self._blackholed:
            self.run("iptables", "-w", "-I", *self._drop_rule(port))
            self._blackholed.add(port)

    def restore_port(self, port: int) -> None:
        """Undo `blackhole_port()`; dropped segments arrive with the clients' next retransmission."""
        if port in self._blackholed:
            self.run("iptables", "-w", "-D", *self._drop_rule(port))
            self._blackholed.discard(port)

    def destroy(self) -> None:
        """Kill what still runs inside, delete the veth pair and the namespace (idempotent)."""
        _destroy_namespace(self.name, self.veth_root)

    def __repr__(self) -> str:
        return f"NetnsHost({self.name!r}, ip={self.ip!r}, host_ip={self.host_ip!r})"


def _destroy_namespace(name: str, veth_root: str | None) -> None:
    """Delete namespace `name` and its veth; whatever still runs in it is SIGKILLed first.

    A namespace lives on as long as a process is in it, and would keep its veth (and address) alive.
    """
    if name in list_namespaces():
        pids = [int(p) for p in _sh("ip", "netns", "pids", name, check=False).stdout.split() if p.isdigit()]
        kill_pids(pids, signal.SIGKILL)
    if veth_root:
        # Deleting one end deletes the pair; "Cannot find device" just means it is gone already.
        _sh("ip", "link", "del", veth_root, check=False)
    if name in list_namespaces():
        _sh("ip", "netns", "del", name, check=False)
    (STATE_DIR / f"{name}.json").unlink(missing_ok=True)


def list_namespaces(prefix: str = "") -> list[str]:
    """Names of the named network namespaces (``ip netns list``), optionally only those starting with `prefix`."""
    if shutil.which("ip") is None:
        return []
    out = _sh("ip", "netns", "list", check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix)]


_IN_NAMESPACE_START = """
import json, sys
from pathlib import Path
from dbsurge.embedded.servers import SERVER_CLASSES
kind, data_dir, port, extra = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
server = SERVER_CLASSES[kind](data_dir, port, **extra)
server.start()  # pg_ctl daemonises the postmaster; secantus and the JVM run in sessions of their own: all outlive this
print(server.port)
"""


_IN_NAMESPACE_STOP = """
import sys
from dbsurge.embedded.servers import EmbeddedMongo
EmbeddedMongo(sys.argv[1]).stop()
"""


def _child_env() -> dict[str, str]:
    """This environment, with the repository on PYTHONPATH (dbsurge importable whatever the cwd)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


class _NetnsServer:
    """An embedded server started inside a `NetnsHost`, handled from the root namespace.

    The server is started by a short Python script under ``ip netns exec``: `EmbeddedPostgres` and
    `EmbeddedMongo` check readiness on 127.0.0.1, which inside the namespace is the namespace's own
    loopback. The server process stays in the namespace after the script exits; the root side then
    handles it through an ordinary `EmbeddedPostgres` / `EmbeddedMongo` on the same data directory
    (the pid namespace is shared, so `pause()`, `resume()` and `stop()` work by signals as usual).
    """

    kind = ""
    start_timeout_s = 120.0  # the start script's, readiness included

    def __init__(self, netns: NetnsHost, data_dir: Path, port: int = 0) -> None:
        self.netns = netns
        self.data_dir = Path(data_dir)
        self.port = port or _free_port_in(netns)
        self.server: EmbeddedPostgres | EmbeddedMongo | None = None  # the root-side handle, once started

    def _extra(self) -> dict:
        return {}

    def start(self) -> None:
        """Start the server inside the namespace; return when it answers there."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.netns.cmd(sys.executable, "-c", _IN_NAMESPACE_START, self.kind, str(self.data_dir), str(self.port),
                             json.dumps(self._extra()))
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=self.start_timeout_s,
                              env=_child_env(), stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise FaultSetupError(f"embedded {self.kind} in {self.netns.name} did not start: {proc.stderr[-2000:]}")
        self.port = int(proc.stdout.split()[-1])
        self.server = self._handle()

    def _handle(self) -> EmbeddedPostgres | EmbeddedMongo:
        raise NotImplementedError

    @property
    def host(self) -> str:
        """The server's address as the root namespace sees it."""
        return self.netns.ip

    def blackhole(self) -> None:
        """Silently drop every packet from outside the namespace to the server port (clients hang)."""
        self.netns.blackhole_port(self.port)

    def restore(self) -> None:
        """Undo `blackhole()`."""
        self.netns.restore_port(self.port)

    def pause(self) -> None:
        """SIGSTOP every server process (the kernel still completes TCP handshakes into the backlog)."""
        self.server.pause()

    def resume(self) -> None:
        """Undo `pause()` with SIGCONT."""
        self.server.resume()

    def pids(self) -> list[int]:
        """The server's processes."""
        return self.server.pids() if self.server is not None else []

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        if self.server is not None:
            self.server.stop()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log."""
        return self.server.log_tail(lines) if self.server is not None else ""


def _free_port_in(netns: NetnsHost) -> int:
    """A TCP port nobody listens on inside the namespace (it is fresh, so anything above 1024 would do)."""
    out = netns.run(sys.executable, "-c", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
                    "print(s.getsockname()[1])").stdout
    return int(out.strip())


class NetnsPostgres(_NetnsServer):
    """A fresh embedded PostgreSQL inside a namespace, on 127.0.0.1 and `netns.ip`, trust auth.

    ``uri`` is ``postgresql://postgres@NS_IP:PORT/postgres``; `settings` are extra ``-c`` settings.
    """

    kind = "postgres"

    def __init__(self, netns: NetnsHost, data_dir: Path, port: int = 0, *,
                 settings: dict[str, str] | None = None, shared_buffers: str = "32MB") -> None:
        super().__init__(netns, data_dir, port)
        self.settings = dict(settings or {})
        self.shared_buffers = shared_buffers

    def _extra(self) -> dict:
        # initdb's pg_hba.conf trusts 127.0.0.1 and the Unix socket only; our own file (EmbeddedPostgres
        # makes data_dir, this file included, the server user's at start) adds the veth's /30, root side.
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n"
                       f"host all all {self.netns.network} trust\n")
        # `settings` come after EmbeddedPostgres' own options, so this listen_addresses wins over its 127.0.0.1.
        return {"shared_buffers": self.shared_buffers,
                "settings": {"listen_addresses": f"127.0.0.1,{self.netns.ip}", "hba_file": str(hba),
                             **self.settings}}

    def _handle(self) -> EmbeddedPostgres:
        from dbsurge.embedded.servers import EmbeddedPostgres

        return EmbeddedPostgres(self.data_dir, self.port)

    @property
    def uri(self) -> str:
        """``postgresql://postgres@NS_IP:PORT/postgres`` (no password: trust auth)."""
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"


class NetnsMongo(_NetnsServer):
    """A fresh secantusdb (MongoDB wire) inside a namespace, on every address of the namespace.

    ``uri`` carries ``directConnection=true``: secantus advertises itself as a one-node replica set
    whose member is ``127.0.0.1:PORT``, which from the root namespace is not this server.
    """

    kind = "mongo"

    def _extra(self) -> dict:
        # 0.0.0.0 inside the namespace is its loopback and its veth address, nothing else.
        return {"cache_size": "64M", "host": "0.0.0.0"}

    def _handle(self) -> EmbeddedMongo:
        from dbsurge.embedded.servers import EmbeddedMongo

        return EmbeddedMongo(self.data_dir, self.port)

    def stop(self) -> None:
        """Stop the server from inside the namespace (idempotent).

        `EmbeddedMongo` stops secantus by knocking on 127.0.0.1:PORT until its accept thread has
        seen the shutdown; only inside the namespace is that address this server.
        """
        if self.server is None or not self.server.is_running():
            return
        proc = subprocess.run(self.netns.cmd(sys.executable, "-c", _IN_NAMESPACE_STOP, str(self.data_dir)),
                              check=False, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                              env=_child_env())
        if proc.returncode != 0 or self.server.is_running():
            self.server.stop()  # signals work from anywhere; only the knock would miss

    @property
    def uri(self) -> str:
        """``mongodb://NS_IP:PORT/?directConnection=true``."""
        return f"mongodb://{self.host}:{self.port}/?directConnection=true"


class NetnsCassandra(_NetnsServer):
    """A fresh Apache Cassandra (`EmbeddedCassandra`, its own JVM) inside a namespace, on `netns.ip` alone.

    Cassandra listens on one address, not 0.0.0.0, and tells clients that address (system.local's rpc_address),
    so the node is on the namespace side of the veth: its own readiness checks and every client, in the
    namespace or outside it, use ``NS_IP:PORT``. `stop()` kills the JVM (its data is the test's, thrown away).
    """

    kind = "cassandra"
    start_timeout_s = 300.0  # a cold JVM beside other work on two cores; EmbeddedCassandra itself waits 180 s

    def __init__(self, netns: NetnsHost, data_dir: Path, port: int = 0, *, heap: str = "512M") -> None:
        super().__init__(netns, data_dir, port)
        self.heap = heap

    def _extra(self) -> dict:
        return {"host": self.netns.ip, "heap": self.heap}

    def _handle(self) -> EmbeddedCassandra:
        from dbsurge.embedded.servers import EmbeddedCassandra

        return EmbeddedCassandra(self.data_dir, self.port, host=self.netns.ip, heap=self.heap, delete_on_stop=True)

    def stop(self) -> None:
        """Kill the JVM, also when the start script gave up before the root side had a handle (idempotent)."""
        if self.server is None:
            self.server = self._handle()  # the pid file, if the JVM got that far
        self.server.stop()

    @property
    def uri(self) -> str:
        """``cql://NS_IP:PORT``."""
        return f"cql://{self.host}:{self.port}"


# --- small disks -------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def mount_tmpfs(size: str = "2m", parent: Path | None = None) -> Iterator[Path]:
    """A tmpfs of `size` (mount(8) syntax: "2m", "512k") on a new directory; unmounted and removed afterwards.

    The directory name carries the owner's pid (``dbsf-disk-PID-...``) so that `cleanup_stale()` of a
    later session can tell a leftover from a mount that a concurrent session uses. Mode 1777: the
    `embedded_postgres` user, or any other test user, may write there.
    """
    reason = tmpfs_unavailable()
    if reason:
        raise FaultSetupError(reason)
    path = Path(tempfile.mkdtemp(prefix=f"{DISK_PREFIX}{os.getpid()}-", dir=parent))
    try:
        _sh("mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(path))
    except BaseException:
        path.rmdir()
        raise
    try:
        yield path
    finally:
        _unmount(path)


def _unmount(path: Path) -> None:
    # A process with a file still open there (a run that did not stop) makes a plain umount fail: detach lazily.
    if _sh("umount", str(path), check=False).returncode != 0:
        _sh("umount", "-l", str(path), check=False)
    with contextlib.suppress(OSError):
        path.rmdir()


def disk_free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still write on the file system of `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_disk(path: Path, leave_kb: int = 0, name: str = ".dbsf-filler") -> Path:
    """Write a file in `path` so that only about `leave_kb` KiB stay free; returns the file (delete it to free space).

    Written in 64 KiB blocks and then to the exact page, so the free space ends within a page of `leave_kb`.
    Calling it again tops the same file up (or truncates it, which frees space).
    """
    filler = Path(path) / name
    current = filler.stat().st_size if filler.exists() else 0
    target = max(0, current + disk_free_bytes(path) - leave_kb * 1024)
    with open(filler, "ab") as f:
        f.truncate(min(current, target))
        f.seek(0, os.SEEK_END)
        block = b"\0" * 65536
        remaining = target - f.tell()
        with contextlib.suppress(OSError):  # ENOSPC on the last block: the disk is as full as it gets
            while remaining > 0:
                remaining -= f.write(block[:min(remaining, len(block))])
            f.flush()
            os.fsync(f.fileno())
    return filler


# --- a delaying TCP proxy ----------------------------------------------------------------------------------------

def _check_target(host: str) -> None:
    """Refuse any target but 127.0.0.0/8 and the test namespaces' 10.231.0.0/16 (the rule for load and fault tests)."""
    try:
        addr = ipaddress.ip_address(socket.gethostbyname(host))
    except (OSError, ValueError):
        raise ValueError(f"cannot resolve proxy target {host!r}") from None
    if not (addr.is_loopback or addr in SUBNET):
        raise ValueError(f"proxy target {host} ({addr}) is neither 127.0.0.0/8 nor a test namespace (10.231.0.0/16)")


class DelayProxy:
    """A TCP proxy on 127.0.0.1:`port` to `target_host:target_port`, in a child process.

    Every chunk read in either direction is forwarded `delay_ms` later, in order (so a request and
    its answer each take `delay_ms` more: a round trip 2 x `delay_ms`). Throughput is not limited.
    `blackhole(True)` holds every byte (connections stay open, nothing is lost: like a network
    partition that TCP rides out); `blackhole(False)` lets them through. `reset()` sends a RST on
    every open connection. A child process, not a thread: it keeps its timing under a busy or
    gevent-patched test process, and dies with the test process (it exits when its stdin closes).
    """

    def __init__(self, target_host: str, target_port: int, delay_ms: float = 0.0, listen_port: int = 0) -> None:
        _check_target(target_host)
        self.target_host, self.target_port = target_host, target_port
        self.delay_ms = delay_ms
        self.listen_port = listen_port
        self.port = 0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the proxy process and wait until it listens."""
        cmd = [sys.executable, str(Path(__file__).resolve()), "proxy", "--listen-port", str(self.listen_port),
               "--target", f"{self.target_host}:{self.target_port}", "--delay-ms", str(self.delay_ms)]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        line = self._proc.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise FaultSetupError(f"the delay proxy did not start: {line!r}")
        self.port = int(line.split()[1])

    def _command(self, *words: object) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError("the delay proxy is not running")
        self._proc.stdin.write(" ".join(map(str, words)) + "\n")
        self._proc.stdin.flush()
        reply = self._proc.stdout.readline().strip()
        if reply != "ok":
            raise RuntimeError(f"delay proxy: {' '.join(map(str, words))}: {reply!r}")

    def set_delay(self, ms: float) -> None:
        """Delay chunks read from now on by `ms` in each direction (those already held keep their time)."""
        self._command("delay", ms)
        self.delay_ms = ms

    def blackhole(self, on: bool = True) -> None:
        """Hold (True) or release (False) every byte in both directions; connections stay open."""
        self._command("blackhole", int(bool(on)))

    def reset(self) -> None:
        """Close every open connection with a RST, on both sides (new connections are still accepted)."""
        self._command("reset")

    @property
    def address(self) -> tuple[str, int]:
        """``("127.0.0.1", port)``."""
        return ("127.0.0.1", self.port)

    def rewrite(self, uri: str) -> str:
        """`uri` with its host and port replaced by the proxy's (user, path and query kept)."""
        parts = urlsplit(uri)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (f"{userinfo}@" if userinfo else "") + f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def stop(self) -> None:
        """Stop the proxy (idempotent); its connections close."""
        if self._proc is None:
            return
        with contextlib.suppress(OSError):
            self._proc.stdin.close()  # the proxy exits on EOF
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        with contextlib.suppress(OSError):
            self._proc.stdout.close()
        self._proc = None


class _ProxyState:
    """The proxy process' shared state: current delay, the black-hole switch, the open sockets."""

    def __init__(self, delay_ms: float) -> None:
        self.delay_s = delay_ms / 1000
        self.flowing = threading.Event()
        self.flowing.set()
        self.lock = threading.Lock()
        self.sockets: set[socket.socket] = set()


def _pipe(src: socket.socket, dst: socket.socket, state: _ProxyState) -> None:
    """Forward src -> dst with the delay: one thread reads and stamps, another waits and writes, in order."""
    queue: collections.deque[tuple[float, bytes]] = collections.deque()
    ready = threading.Condition()

    def reader() -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            with ready:
                queue.append((time.monotonic() + state.delay_s, data))
                ready.notify()
            if not data:
                return

    threading.Thread(target=reader, daemon=True).start()
    while True:
        with ready:
            while not queue:
                ready.wait()
            due, data = queue.popleft()
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        state.flowing.wait()
        try:
            if not data:
                dst.shutdown(socket.SHUT_WR)  # pass the half-close on, so EOF semantics survive the proxy
                return
            dst.sendall(data)
        except OSError:
            return


def _serve_connection(client: socket.socket, target: tuple[str, int], state: _ProxyState) -> None:
    try:
        upstream = socket.create_connection(target, timeout=10)
    except OSError:
        client.close()
        return
    upstream.settimeout(None)
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the delay must be ours alone, not Nagle's
    with state.lock:
        state.sockets.update((client, upstream))
    down = threading.Thread(target=_pipe, args=(upstream, client, state), daemon=True)
    down.start()
    _pipe(client, upstream, state)
    down.join()
    with state.lock:
        state.sockets.difference_update((client, upstream))
    client.close()
    upstream.close()


def _control(state: _ProxyState) -> None:
    """Commands on stdin, one a line, each answered "ok" (or an error) on stdout; EOF stops the proxy."""
    for line in sys.stdin:
        words = line.split()
        try:
            if words[0] == "delay":
                state.delay_s = float(words[1]) / 1000
            elif words[0] == "blackhole":
                (state.flowing.clear if words[1] == "1" else state.flowing.set)()
            elif words[0] == "reset":
                with state.lock:
                    for s in list(state.sockets):
                        with contextlib.suppress(OSError):
                            # linger 0: close() sends a RST instead of a FIN
                            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                            s.shutdown(socket.SHUT_RDWR)
                            s.close()
                    state.sockets.clear()
            else:
                raise ValueError(f"unknown command {words[0]!r}")
            print("ok", flush=True)
        except (IndexError, ValueError) as err:
            print(f"error {err}", flush=True)
    os._exit(0)


def _proxy_main(argv: Sequence[str]) -> None:
    p = argparse.ArgumentParser(prog="faults.py proxy")
    p.add_argument("--listen-port", type=int, default=0)
    p.add_argument("--target", required=True)
    p.add_argument("--delay-ms", type=float, default=0.0)
    args = p.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    state = _ProxyState(args.delay_ms)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.listen_port))
    listener.listen(128)
    threading.Thread(target=_control, args=(state,), daemon=True).start()
    print(f"port {listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve_connection, args=(client, (host, int(port)), state), daemon=True).start()


# --- background runs and signals ---------------------------------------------------------------------------------

class BackgroundRun(subprocess.Popen):
    """A `Popen` whose stdout and stderr go to files (``stdout_path``, ``stderr_path``), in its own session."""

    stdout_path: Path
    stderr_path: Path

    def output(self) -> tuple[str, str]:
        """What the process wrote so far to stdout and stderr."""
        return (self.stdout_path.read_text(errors="replace"), self.stderr_path.read_text(errors="replace"))

    def explain(self) -> str:
        """Exit code and the tails of both outputs, for an assertion message."""
        out, err = self.output()
        return f"exit {self.poll()}\n--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}"


def start_process(cmd: Sequence[str], cwd: Path, env: dict[str, str] | None = None, *,
                  name: str = "proc") -> BackgroundRun:
    """Start `cmd` in the background, output to ``cwd/NAME.stdout`` and ``cwd/NAME.stderr``.

    A new session: signals a test sends to the run's process group never reach pytest, and a
    terminal's Ctrl-C never reaches the run.
    """
    cwd = Path(cwd)
    cwd.mkdir(parents=True, exist_ok=True)
    out_path, err_path = cwd / f"{name}.stdout", cwd / f"{name}.stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = BackgroundRun(list(cmd), cwd=cwd, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                             stdout=out, stderr=err, start_new_session=True)
    proc.stdout_path, proc.stderr_path = out_path, err_path
    return proc


def start_run(args: Sequence[str], cwd: Path, env: dict[str, str] | None = None, *,
              name: str = "dbsurge") -> BackgroundRun:
    """``dbsurge ARGS`` in the background (see `start_process`); e.g. ``start_run(["run", "--workload", ...])``."""
    return start_process([sys.executable, "-m", "dbsurge.commands.cli", *args], cwd, env, name=name)


def _pid_of(target: object) -> int | None:
    if callable(target) and not isinstance(target, int):
        target = target()
    if target is None:
        return None
    return target if isinstance(target, int) else target.pid


def signal_at(target: object, sig: int, after_s: float) -> threading.Timer:
    """Send `sig` to `target` `after_s` seconds from now, from a timer thread; returns the (started) timer.

    `target` is a Popen, a psutil.Process, a pid, or a callable returning one of these at that moment
    (e.g. ``lambda: locust_processes(run).workers[0]``, for a worker that does not exist yet).
    A process that is gone by then is ignored. ``timer.cancel()`` calls it off.
    """
    def fire() -> None:
        with contextlib.suppress(ProcessLookupError, LookupError):
            pid = _pid_of(target)
            if pid is not None:
                os.kill(pid, sig)

    timer = threading.Timer(after_s, fire)
    timer.daemon = True
    timer.start()
    return timer


def kill_pids(pids: Sequence[int], sig: int = signal.SIGKILL, timeout: float = 5.0, *, wait: bool = True) -> None:
    """Send `sig` to each pid and, for SIGKILL with `wait`, wait up to `timeout` s until they are gone.

    Waiting reaps those that are our own children (their Popen, if any, then reads exit code 0).
    """
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)
    if sig == signal.SIGKILL and wait:
        psutil.wait_procs(procs, timeout=timeout)


def kill_process_tree(target: object, sig: int = signal.SIGKILL, timeout: float = 5.0) -> list[int]:
    """Send `sig` to a process and all its descendants; returns their pids.

    The tree is read before anything is signalled (a killed parent's children are re-parented and
    could not be found afterwards). With SIGKILL, waits until they are gone and reaps a Popen.
    """
    pid = _pid_of(target)
    if pid is None:
        return []
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    frozen = sig in (signal.SIGKILL, signal.SIGTERM)
    if frozen:
        # Freeze first, so that nobody forks a new child between our look and our kill.
        kill_pids([p.pid for p in tree], signal.SIGSTOP)
        with contextlib.suppress(psutil.Error):
            tree += [c for c in root.children(recursive=True) if c not in tree]
    kill_pids([p.pid for p in tree], sig, wait=False)
    if frozen and sig != signal.SIGKILL:
        kill_pids([p.pid for p in tree], signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
    if sig == signal.SIGKILL:
        if isinstance(target, subprocess.Popen):
            # Reap our child through its Popen first: had psutil reaped it, Popen would report exit code 0.
            with contextlib.suppress(subprocess.TimeoutExpired):
                target.wait(timeout)
        psutil.wait_procs([p for p in tree if p.pid != pid], timeout=timeout)
    return [p.pid for p in tree]


class LocustProcesses:
    """The Locust master of a run and its worker processes (psutil.Process objects)."""

    def __init__(self, master: object, workers: list) -> None:
        self.master = master
        self.workers = workers

    def __repr__(self) -> str:
        return f"LocustProcesses(master={self.master.pid}, workers={[w.pid for w in self.workers]})"


def locust_processes(run: object, workers: int = 0, timeout: float = 30.0) -> LocustProcesses:
    """Find the Locust master under a ``dbsurge run`` (or a ``locust``) process, and its workers.

    ``dbsurge run`` starts ``python -m locust`` as a child; with ``--processes N`` Locust forks N
    workers from that master, so they are its children with the same command line. Waits up to
    `timeout` s until `workers` of them exist (0: return as soon as the master does).
    Raises TimeoutError (with what it saw) otherwise.
    """
    pid = _pid_of(run)
    deadline = time.monotonic() + timeout
    seen = "nothing"
    while True:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
            master = next((p for p in tree if _is_locust(p) and not _is_locust_parent(p)), None)
            if master is not None:
                found = [c for c in master.children() if _is_locust(c) and c.status() != psutil.STATUS_ZOMBIE]
                seen = f"master {master.pid}, workers {[w.pid for w in found]}"
                if len(found) >= workers:
                    return LocustProcesses(master, found)
        except psutil.NoSuchProcess:
            raise TimeoutError(f"process {pid} is gone (saw {seen})") from None
        if time.monotonic() > deadline:
            raise TimeoutError(f"found no Locust master with {workers} workers under {pid} in {timeout} s ({seen})")
        time.sleep(0.1)


def _is_locust(proc: object) -> bool:
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return False
    return "locust" in cmd[1:3] or (len(cmd) > 2 and cmd[1] == "-m" and cmd[2] == "locust") or \
        any(Path(c).name == "locust" for c in cmd[:2])


def _is_locust_parent(proc: object) -> bool:
    try:
        parent = proc.parent()
    except psutil.Error:
        return False
    return parent is not None and _is_locust(parent)


# --- leftovers of dead sessions ----------------------------------------------------------------------------------

def cleanup_stale() -> list[str]:  # noqa: C901 - one kind of leftover per block
    """Remove ``dbsf-*`` namespaces, veths and tmpfs mounts whose owner process is dead; returns what went.

    One whose owner still runs (a concurrent pytest session) is left alone. A namespace without an
    owner record counts as stale only if no process lives in it (a session of an older version, or
    a record lost with /run).
    """
    removed: list[str] = []
    if os.geteuid() != 0:
        return removed
    with _state_lock():
        if shutil.which("ip") is not None:
            for name in list_namespaces(NS_PREFIX):
                record_path = STATE_DIR / f"{name}.json"
                try:
                    record = json.loads(record_path.read_text())
                except (OSError, ValueError):
                    record = None
                if record is not None and _owner_alive(record):
                    continue
                if record is None and _sh("ip", "netns", "pids", name, check=False).stdout.split():
                    continue
                _destroy_namespace(name, (record or {}).get("veth_root") or f"{name}-r")
                removed.append(f"netns {name}")
            # A veth whose namespace went without it (cannot happen via _destroy_namespace, but a crash can).
            live = set(list_namespaces(NS_PREFIX))
            for line in _sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
                parts = line.split(":")
                dev = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
                if dev.startswith(NS_PREFIX) and dev.rsplit("-", 1)[0] not in live:
                    _sh("ip", "link", "del", dev, check=False)
                    removed.append(f"veth {dev}")
        for record_path in STATE_DIR.glob(f"{NS_PREFIX}*.json"):
            if record_path.stem not in list_namespaces(NS_PREFIX):
                record_path.unlink(missing_ok=True)
    removed += _cleanup_stale_mounts()
    removed += _cleanup_stale_cpu_groups()
    return removed


def _cleanup_stale_mounts() -> list[str]:
    removed = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) < 3 or fields[2] != "tmpfs":
                continue
            mountpoint = Path(fields[1].replace("\\040", " "))
            if not mountpoint.name.startswith(DISK_PREFIX):
                continue
            owner = mountpoint.name[len(DISK_PREFIX):].split("-")[0]
            if owner.isdigit() and _proc_start_time(int(owner)) is None:
                _unmount(mountpoint)
                removed.append(f"tmpfs {mountpoint}")
    return removed


# --- a CPU-starved host ------------------------------------------------------------------------------------------

CPU_CGROUP_ROOT = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller
CPU_PREFIX = "dbsf-cpu-"


def cpu_starving_unavailable() -> str | None:
    """Why `cpu_starved` cannot run here (None if it can)."""
    if os.geteuid() != 0:
        return "not root"
    if not (CPU_CGROUP_ROOT / "cgroup.procs").exists():
        return f"no cgroup v1 cpu controller at {CPU_CGROUP_ROOT}"
    return None


@contextlib.contextmanager
def cpu_starved(pids: Sequence[int], *, share: float = 0.01, hogs: int = 2) -> Iterator[Path]:
    """Starve ``pids`` of CPU, as a host whose cores something else took: they and ``hogs`` busy loops go into a
    cgroup capped at ``share`` of one core (CFS quota), so the processes run, slowly, with nothing signalled.

    On exit the processes go back to the root group, the hogs are killed and the group is removed, also when
    the body raises. The group's name carries this process's pid (``dbsf-cpu-PID-...``), so `cleanup_stale`
    can remove a group whose owner died.
    """
    reason = cpu_starving_unavailable()
    if reason:
        raise FaultSetupError(reason)
    group = CPU_CGROUP_ROOT / f"{CPU_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
    group.mkdir()
    hog_procs: list[subprocess.Popen] = []
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(max(1000, int(100000 * share))))
        for _ in range(hogs):
            hog_procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        for pid in [*pids, *(h.pid for h in hog_procs)]:
            with contextlib.suppress(OSError):  # a process that already ended
                (group / "cgroup.procs").write_text(str(pid))
        yield group
    finally:
        for h in hog_procs:
            h.kill()
        for h in hog_procs:
            h.wait(timeout=10)
        _remove_cpu_group(group)


def _remove_cpu_group(group: Path) -> None:
    with contextlib.suppress(OSError):
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (CPU_CGROUP_ROOT / "cgroup.procs").write_text(pid)
    for _ in range(50):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)  # a moved process's last task is leaving


def _cleanup_stale_cpu_groups() -> list[str]:
    removed = []
    with contextlib.suppress(OSError):
        for group in CPU_CGROUP_ROOT.glob(f"{CPU_PREFIX}*"):
            owner = group.name[len(CPU_PREFIX):].split("-")[0]
            if owner.isdigit() and _proc_start_time(int(owner)) is None:
                _remove_cpu_group(group)
                removed.append(f"cgroup {group.name}")
    return removed


if __name__ == "__main__":
    if sys.argv[1:2] == ["proxy"]:
        _proxy_main(sys.argv[2:])
    else:
        sys.exit("usage: faults.py proxy --target HOST:PORT [--delay-ms MS] [--listen-port PORT]")
