"""What a target's check connection negotiated: the record run.json keeps under ``negotiated``.

Every binding's `check` builds one with `record` on the connection it opened anyway, and `Target.negotiated`
returns it. Its keys, the same for every kind:

- ``kind``, ``flavor``, ``endpoint`` (the host and port reached), ``driver`` (the driver and its version);
- ``server_version``: what the server says it is (PostgreSQL's ``server_version``, MongoDB's ``buildInfo``,
  Cassandra's ``release_version``, a DynamoDB endpoint's ``Server`` header), ``protocol`` (the wire protocol);
- ``tls``: ``in_use``, ``version`` and ``cipher`` (as the driver saw them, or a probe handshake where the driver
  does not expose its socket: ``source`` says which), ``verified`` (the server's certificate was checked
  against a CA), ``host_name_checked``, ``ca_file`` (a path, never the contents; ``system trust store``
  when the default bundle was used), ``setting`` (the option that decided, e.g. ``sslmode=verify-full``);
- ``auth``: the authentication mechanism (``SCRAM-SHA-256``, ``IAM token (fresh per connection)``, ``SigV4``...);
- ``warnings``: one line each, said in the console and the report: TLS without certificate verification, or
  without the host name checked;
- ``line``: the record in one sentence, for summary.md, the report and the console.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

#: What ``tls.version``/``tls.cipher`` say when neither the driver nor a probe could tell.
NOT_EXPOSED = "not exposed by the driver"


def tls_facts(*, in_use: bool, verified: bool, host_name_checked: bool, ca_file: str | None, setting: str,
              version: str | None = None, cipher: str | None = None, source: str = "driver") -> dict[str, Any]:
    """The ``tls`` part of a record; version and cipher only when TLS is in use."""
    facts: dict[str, Any] = {"in_use": bool(in_use), "setting": setting}
    if in_use:
        facts.update(version=version or NOT_EXPOSED, cipher=cipher or NOT_EXPOSED, source=source,
                     verified=bool(verified), host_name_checked=bool(verified and host_name_checked),
                     ca_file=ca_file if verified else None)
    else:
        facts.update(verified=False, host_name_checked=False, ca_file=None)
    return facts


def tls_warnings(tls: dict[str, Any], host: str, display: str, fix: str) -> list[str]:
    """A warning for TLS without certificate verification, or without the host name checked; ``fix`` says how this
    binding turns verification on. No TLS at all is no warning: the record's line says "without TLS", and a private
    network (compose, a namespace, a VPC peering) is the user's choice; a TLS session that verifies nothing
    looks secure and is not."""
    if tls.get("in_use") and not tls.get("verified"):
        return [(f"TLS to {display} does not verify the server's certificate ({tls.get('setting')}): anyone on the "
                 f"path can pose as the server; {fix}")]
    if tls.get("in_use") and not tls.get("host_name_checked"):
        return [(f"TLS to {display} verifies the certificate but not that it names {host} ({tls.get('setting')}): "
                 f"any certificate the CA signed is taken; {fix}")]
    return []


def record(*, kind: str, flavor: str, endpoint: str, driver: str, server_version: str | None, protocol: str | None,
           tls: dict[str, Any], auth: str, host: str, display: str, fix: str, **extra: Any) -> dict[str, Any]:
    """The negotiated record (see the module doc), with its warnings (``fix``: how to verify) and its one line."""
    out: dict[str, Any] = {"kind": kind, "flavor": flavor, "endpoint": endpoint, "driver": driver,
                           "server_version": server_version, "protocol": protocol, "tls": tls, "auth": auth, **extra}
    out["warnings"] = tls_warnings(tls, host, display, fix)
    out["line"] = line(out)
    return out


def line(rec: dict[str, Any]) -> str:
    """One sentence: server and version, TLS (version, cipher, what was verified against what), auth, driver."""
    tls = rec.get("tls") or {}
    server = f"{rec.get('kind')} {rec.get('server_version') or '(version not reported)'} at {rec.get('endpoint')}"
    if tls.get("in_use"):
        if tls.get("verified"):
            what = "certificate and host name" if tls.get("host_name_checked") else "certificate (not the host name)"
            checked = f"{what} verified against {tls.get('ca_file')}"
        else:
            checked = "certificate NOT verified"
        source = str(tls.get("source") or "")
        if tls.get("version") == NOT_EXPOSED:
            how = "version and cipher not known" + ("" if source in ("", "driver", "libpq") else f": {source}")
        else:
            how = f"{tls.get('version')}, {tls.get('cipher')}"
            how += ", from a probe handshake" if source.startswith("a probe") else ""
        secured = f"over TLS ({how}; {checked}; {tls.get('setting')})"
    else:
        secured = f"without TLS ({tls.get('setting')})"
    return f"{server} {secured}; auth {rec.get('auth')}; {rec.get('driver')}"


def probe_tls(host: str, port: int, *, ca_file: str | None, verify: bool, check_host_name: bool,
              timeout_s: float = 5.0, preamble: bytes = b"", accept: bytes = b"") -> tuple[str | None, str | None, str | None]:
    """One TLS handshake with the driver's trust settings: (version, cipher, None) or (None, None, why not).

    For drivers that do not expose the socket they negotiated on (pymongo, botocore, the CQL driver): the
    same CA file and host name check against the same server give the version and cipher that server agrees
    with a client so configured. The probe sends nothing after the handshake. ``preamble`` is sent first and
    ``accept`` awaited in answer (PostgreSQL's SSLRequest and its ``S``). A failed verification says why in
    OpenSSL's words (``certificate has expired``, ``unable to get local issuer certificate``...).
    """
    context = ssl.create_default_context(cafile=ca_file) if verify else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.check_hostname = check_host_name
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            if preamble:
                raw.sendall(preamble)
                answer = raw.recv(len(accept))
                if answer != accept:
                    return None, None, f"the server answered {answer!r} to the TLS request, not {accept!r}"
            with context.wrap_socket(raw, server_hostname=host) as tls:
                cipher = tls.cipher()
                return tls.version(), cipher[0] if cipher else None, None
    except ssl.SSLCertVerificationError as exc:
        return None, None, str(exc.verify_message or exc.reason or exc)
    except (OSError, ssl.SSLError, ValueError) as exc:
        return None, None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
