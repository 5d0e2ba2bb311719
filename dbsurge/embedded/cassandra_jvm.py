"""What `embedded-cassandra` needs outside Python: a Java 17 runtime, Apache Cassandra's jars, its JVM options and
a cassandra.yaml for one small node on 127.0.0.1 (or on another address of this host).

Cassandra is not a pip package, so dbsurge runs the real server from Maven Central's ``cassandra-all`` jar and its
dependencies, resolved once by Maven (`dbsurge/embedded/cassandra-pom.xml`) into a cache outside any repository:
``$XDG_CACHE_HOME/dbsurge/cassandra-<version>/lib`` (``~/.cache/...`` by default). The JVM is started directly,
not through Cassandra's shell scripts (which the jar does not ship): `jvm_command` carries over what
``conf/jvm-server.options``, ``conf/jvm17-server.options`` and ``bin/cassandra`` give a server on Java 17 (the jamm
agent that measures objects for memtable accounting, the module ``--add-exports``/``--add-opens`` the server
reflects through, G1), with a heap fixed at 512 MiB by default (DBSURGE_CASSANDRA_HEAP) and the start-up waits of a multi-node cluster cut
(gossip settling, ring delay, the superuser set-up delay). No JMX: Cassandra opens it only when a JMX port
property is given, and nothing here needs nodetool.

Java 17 is what Cassandra 5.0 runs on (it also runs on 11); Java 24 and newer refuse the security manager
Cassandra installs. A missing Java or Maven is one `UserError` line saying what to install.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

from dbsurge.base.errors import UserError
from dbsurge.targets.cql import load_driver

#: The Cassandra release embedded-cassandra runs (DBSURGE_CASSANDRA_VERSION picks another from Maven Central).
CASSANDRA_VERSION = "5.0.6"
DEFAULT_HEAP = "512M"
POM = Path(__file__).with_name("cassandra-pom.xml")
INSTALL_JAVA = "apt-get install openjdk-17-jre-headless"
INSTALL_MAVEN = "apt-get install maven"
RESOLVE_TIMEOUT_S = 900.0
#: Where Debian and most distributions install JDKs, looked at when the `java` on PATH is not a 17.
JVM_DIRS = (Path("/usr/lib/jvm"),)

#: From conf/jvm17-server.options: the JDK internals Cassandra reaches into on Java 17.
ADD_EXPORTS = (
    "java.base/jdk.internal.misc", "java.management.rmi/com.sun.jmx.remote.internal.rmi", "java.rmi/sun.rmi.registry",
    "java.rmi/sun.rmi.server", "java.sql/java.sql", "java.base/java.lang.ref", "jdk.unsupported/sun.misc",
    "jdk.compiler/com.sun.tools.javac.file", "jdk.attach/sun.tools.attach",
)
ADD_OPENS = (
    "java.base/java.lang.module", "java.base/jdk.internal.loader", "java.base/jdk.internal.ref",
    "java.base/jdk.internal.reflect", "java.base/jdk.internal.math", "java.base/jdk.internal.module",
    "java.base/jdk.internal.util.jar", "jdk.management/com.sun.management.internal", "java.base/sun.nio.ch",
    "java.base/java.io", "java.base/java.lang.reflect", "jdk.compiler/com.sun.tools.javac", "java.base/java.lang",
    "java.base/java.util",
)

LOGBACK = """<configuration>
  <!-- dbsurge's embedded-cassandra: INFO and above to standard output, which is the run's cassandra.log -->
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level [%thread] %logger{1} %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
"""


def cassandra_version() -> str:
    """The Cassandra version to run: DBSURGE_CASSANDRA_VERSION, else `CASSANDRA_VERSION`."""
    version = os.environ.get("DBSURGE_CASSANDRA_VERSION", "").strip() or CASSANDRA_VERSION
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise UserError(f"DBSURGE_CASSANDRA_VERSION={version!r}: expected a release such as {CASSANDRA_VERSION}")
    return version


def java_major(java: str) -> int | None:
    """The major version of the runtime at `java` (17 for "17.0.15", 8 for "1.8.0"), None if it does not run."""
    try:
        out = subprocess.run([java, "-version"], check=False, capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def find_java() -> str:
    """A Java 17 (or 11) runtime: $JAVA_HOME's, the one on PATH, or an installed JDK 17; else one `UserError` line.

    The one on PATH may be another release (a newer default, which Cassandra 5.0 refuses) while Debian's 17 sits
    beside it, so the usual install directories are looked at too.
    """
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    if shutil.which("java"):
        candidates.append(shutil.which("java") or "java")
    candidates += sorted(str(p) for root in JVM_DIRS for p in root.glob("*17*/bin/java"))
    seen = []
    for java in dict.fromkeys(candidates):
        major = java_major(java)
        if major in (11, 17):
            return java
        if major is not None:
            seen.append(f"{java} is Java {major}")
    found = f" ({'; '.join(seen)}; Cassandra 5.0 runs on 17 or 11)" if seen else ""
    raise UserError(f"embedded-cassandra needs Java 17{found}: {INSTALL_JAVA}")


def cache_dir(version: str) -> Path:
    """Where the jars of `version` are kept: $XDG_CACHE_HOME/dbsurge/cassandra-<version> (~/.cache by default)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    return base / "dbsurge" / f"cassandra-{version}"


def cassandra_jars(version: str | None = None) -> Path:
    """The folder of Cassandra's jars, resolved by Maven on first use (once per version, under a file lock)."""
    version = version or cassandra_version()
    home = cache_dir(version)
    lib = home / "lib"
    if (home / "complete").exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise UserError(f"embedded-cassandra needs Maven to fetch Cassandra {version}'s jars once: {INSTALL_MAVEN}")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs starting at once resolve once
        if (home / "complete").exists():
            return lib
        staging = home / "lib.partial"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copyfile(POM, home / "pom.xml")
        cmd = [mvn, "-q", "-B", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
               f"-Dcassandra.version={version}", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        try:
            done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, cwd=home)
        except subprocess.TimeoutExpired:
            raise UserError(f"Maven did not fetch Cassandra {version}'s jars in {RESOLVE_TIMEOUT_S:.0f} s") from None
        errors = [line.strip() for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line]
        if done.returncode != 0 or not (staging / f"cassandra-all-{version}.jar").exists():
            why = errors[0][:200] if errors else f"exit code {done.returncode}"
            raise UserError(f"Maven could not fetch org.apache.cassandra:cassandra-all:{version}: {why}")
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)
        (home / "complete").write_text(version + "\n")
    return lib


def jamm_jar(lib: Path) -> Path:
    """The jamm agent among the jars: Cassandra measures memtable objects through it and refuses to start without."""
    jars = sorted(lib.glob("jamm-*.jar"))
    if not jars:
        raise UserError(f"no jamm jar in {lib}: remove {lib.parent} and let Maven fetch the jars again")
    return jars[-1]


def default_heap() -> str:
    """The server's heap unless the caller gives one: DBSURGE_CASSANDRA_HEAP (``768M``, ``1G``), else 512 MiB."""
    return os.environ.get("DBSURGE_CASSANDRA_HEAP", "").strip() or DEFAULT_HEAP


def heap_mb(heap: str) -> int:
    """``512M`` / ``1G`` / ``768m`` in MiB; the server's heap must stay between 256 MiB and 1 GiB on these machines."""
    found = re.fullmatch(r"\s*(\d+)\s*([mMgG])\s*", heap)
    if not found:
        raise UserError(f"embedded-cassandra heap {heap!r} (DBSURGE_CASSANDRA_HEAP): expected a size such as 512M "
                        "or 1G")
    mb = int(found.group(1)) * (1024 if found.group(2) in "gG" else 1)
    if not 256 <= mb <= 4096:
        raise UserError(f"embedded-cassandra heap {heap!r} (DBSURGE_CASSANDRA_HEAP): expected 256M to 4G")
    return mb


def jvm_command(java: str, lib: Path, run_dir: Path, heap: str = DEFAULT_HEAP) -> list[str]:
    """The command line of the server JVM whose configuration `write_config` put in `run_dir`."""
    mb = heap_mb(heap)
    opts = [
        f"-Xms{mb}m", f"-Xmx{mb}m", "-Xss256k",
        "-XX:+UseG1GC", "-XX:+ParallelRefProcEnabled", "-XX:MaxTenuringThreshold=1", "-XX:MaxGCPauseMillis=300",
        "-XX:+UseThreadPriorities", "-XX:+PerfDisableSharedMem", "-XX:+ExitOnOutOfMemoryError",
        "-ea", "-da:net.openhft...", "-Djava.net.preferIPv4Stack=true", "-Djdk.attach.allowAttachSelf=true",
        f"-javaagent:{jamm_jar(lib)}",
        *[f"--add-exports={module}=ALL-UNNAMED" for module in ADD_EXPORTS],
        *[f"--add-opens={module}=ALL-UNNAMED" for module in ADD_OPENS],
        "-Dio.netty.tryReflectionSetAccessible=true", "-Dio.netty.allocator.useCacheForAllThreads=true",
        "-Dio.netty.allocator.maxOrder=11",
        f"-Dcassandra.config=file://{run_dir / 'cassandra.yaml'}",
        f"-Dlogback.configurationFile={run_dir / 'logback.xml'}",
        f"-Dcassandra.logdir={run_dir}", f"-Dcassandra.storagedir={run_dir}",
        "-Dcassandra-foreground=yes",
        # One node alone: nothing to gossip with, no ring to wait for, the default superuser made at once.
        "-Dcassandra.skip_wait_for_gossip_to_settle=0", "-Dcassandra.ring_delay_ms=100",
        "-Dcassandra.superuser_setup_delay_ms=0",
    ]
    return [java, *opts, "-cp", f"{run_dir}:{lib}/*", "org.apache.cassandra.service.CassandraDaemon"]


def write_config(run_dir: Path, native_port: int, storage_port: int, *, password_auth: bool = False,
                 address: str = "127.0.0.1", keystore: tuple[Path, str] | None = None) -> None:
    """cassandra.yaml and logback.xml for one node on `address` (127.0.0.1 by default) with its data under `run_dir`.

    `address` is where both ports listen and what the node tells clients it is (system.local's rpc_address): the
    tests run a node in a network namespace on the namespace's own address, reached from outside it.

    Sized for two cores and a 512 MiB heap: few request threads, one compactor, small memtables and caches.
    One token at 0: a single node owns the ring, and the start does not spend time allocating 16 of them.
    No automatic snapshots (a dropped or truncated table would be copied first), no hints (there is no other node).
    `keystore` (a PKCS12 file and its password) turns on client-to-node encryption with ``optional: false``: the
    native port takes TLS only, as the clouds' nodes do; no client certificate is asked for.
    """
    auth = ("authenticator: PasswordAuthenticator\nauthorizer: CassandraAuthorizer\nrole_manager: CassandraRoleManager\n"
            if password_auth else "authenticator: AllowAllAuthenticator\nauthorizer: AllowAllAuthorizer\n")
    dirs = {name: run_dir / name for name in ("data", "commitlog", "saved_caches", "hints", "cdc_raw")}
    yaml = f"""# written by dbsurge (embedded-cassandra); rewritten at each start
cluster_name: dbsurge-embedded
num_tokens: 1
initial_token: 0
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{address}:{storage_port}"
listen_address: {address}
rpc_address: {address}
storage_port: {storage_port}
native_transport_port: {native_port}
start_native_transport: true
data_file_directories:
  - {dirs['data']}
commitlog_directory: {dirs['commitlog']}
saved_caches_directory: {dirs['saved_caches']}
hints_directory: {dirs['hints']}
cdc_raw_directory: {dirs['cdc_raw']}
commitlog_sync: periodic
commitlog_sync_period: 10000ms
{auth}auto_snapshot: false
hinted_handoff_enabled: false
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 2
concurrent_compactors: 1
native_transport_max_threads: 32
memtable_heap_space: 128MiB
key_cache_size: 16MiB
prepared_statements_cache_size: 8MiB
"""
    if keystore is not None:
        yaml += f"""client_encryption_options:
  enabled: true
  optional: false
  keystore: {keystore[0]}
  keystore_password: "{keystore[1]}"
  store_type: PKCS12
  require_client_auth: false
  accepted_protocols: [TLSv1.2, TLSv1.3]
"""
    (run_dir / "cassandra.yaml").write_text(yaml)
    (run_dir / "logback.xml").write_text(LOGBACK)


def ping(port: int, timeout: float = 2.0, *, user: str | None = None, password: str | None = None,
         host: str = "127.0.0.1", tls: bool = False) -> bool:
    """True if the server on `host`:`port` answers ``SELECT release_version FROM system.local`` via the driver.

    ``tls``: over TLS without verifying the certificate (readiness is not verification: the certificate may be
    one a test made to be refused)."""
    import ssl

    load_driver()
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster

    kwargs: dict = {"auth_provider": PlainTextAuthProvider(user, password or "")} if user else {}
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        kwargs["ssl_context"] = context
    cluster = Cluster([host], port=port, connect_timeout=timeout, control_connection_timeout=timeout,
                      **kwargs)
    try:
        with contextlib.suppress(Exception):
            session = cluster.connect()
            return session.execute("SELECT release_version FROM system.local", timeout=timeout).one() is not None
        return False
    finally:
        cluster.shutdown()
