"""Where a process gets the target's password: never from the master.

The master sends each worker the target URI without its password (`strip_password`) and says whether
one is needed (`setup_fields`). Each worker then finds it itself (`resolve`), in this order:

1. its own environment: the target URI it was started with (``--target`` / ``DBSURGE_TARGET``) when
   that names the same hosts and user and has a password, else ``DBSURGE_TARGET_PASSWORD``;
2. AWS Secrets Manager: ``--target-secret ARN`` (``DBSURGE_TARGET_SECRET``; the worker's own, else
   the master's), read with boto3 on the worker. The secret is the RDS-managed JSON
   (``username``, ``password``, optionally ``host``, ``port``, ``dbname``, which fill in only what the
   URI lacks) or a plain string, the password. The region comes from the ARN; the endpoint from
   ``--target-secret-endpoint-url`` or ``AWS_ENDPOINT_URL``;
3. nothing for DSQL: every connection signs its own IAM token.

A worker that finds no password raises one `TargetError` line (`configure_worker` logs it and gives its
users a target whose every connect fails with it: ``connect`` failures in the ledger, not a crash).
The master and a local run use `for_master`: the URI's own password, else ``DBSURGE_TARGET_PASSWORD``,
else the secret. Everything found is registered with `dbsurge.base.redact.register_secret`.

The URI functions read the userinfo as the drivers do (libpq: up to the first ``@`` before the first
``/``; pymongo: before the first ``/`` or ``?``); the targets refuse a password with unescaped delimiters.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, unquote_plus

from dbsurge.base.errors import ConnectError, TargetError, UserError, clip
from dbsurge.base.redact import redact_text, register_secret

log = logging.getLogger("dbsurge")

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: Query parameters that carry a password (libpq's ``?password=``); removed before a URI goes to a worker.
PASSWORD_PARAMS = frozenset({"password"})
DEFAULT_PORTS = {"postgres": "5432", "mongo": "27017"}


# -- URIs -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Parts:
    prefix: str  # "scheme://"
    userinfo: str | None  # as written, None when the URI has none
    hosts: str  # as written, up to the path or query
    tail: str  # "/db?..." or "?..." or ""
    family: str  # postgres, mongo or the scheme


def _family(scheme: str) -> str:
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres", "dsql"):
        return "postgres"
    if scheme in ("mongodb", "mongodb+srv"):
        return "mongo"
    return scheme


def _split(uri: str) -> _Parts | None:
    m = _SCHEME.match(uri)
    if not m:
        return None
    family = _family(m.group(1))
    rest = uri[m.end():]
    stops = "/?" if family == "mongo" else "/"
    end = min((i for i in (rest.find(c) for c in stops) if i >= 0), default=len(rest))
    at = rest.find("@", 0, end)
    userinfo = rest[:at] if at >= 0 else None
    after = rest[at + 1:] if at >= 0 else rest
    host_end = min((i for i in (after.find(c) for c in "/?") if i >= 0), default=len(after))
    return _Parts(uri[: m.end()], userinfo, after[:host_end], after[host_end:], family)


def _join(p: _Parts, userinfo: str | None, tail: str | None = None) -> str:
    return f"{p.prefix}{userinfo + '@' if userinfo is not None else ''}{p.hosts}{p.tail if tail is None else tail}"


def _decode(p: _Parts, text: str) -> str:
    return unquote_plus(text) if p.family == "mongo" else unquote(text)


def _query_without_password(tail: str) -> tuple[str, str | None]:
    """`tail` without ``password=`` parameters, and the (decoded) password they held."""
    path, sep, query = tail.partition("?")
    if not sep:
        return tail, None
    keep, found = [], None
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if unquote(key).strip().lower() in PASSWORD_PARAMS:
            found = unquote(value) or found
        elif part:
            keep.append(part)
    return (f"{path}?{'&'.join(keep)}" if keep else path), found


def user_of(uri: str) -> str:
    """The (decoded) user name of `uri`'s userinfo, "" when there is none."""
    p = _split(uri)
    if p is None or p.userinfo is None:
        return ""
    return _decode(p, p.userinfo.partition(":")[0])


def password_of(uri: str) -> str | None:
    """The (decoded) password `uri` carries, in its userinfo or a ``password=`` parameter; None if none."""
    p = _split(uri)
    if p is None:
        return None
    if p.userinfo is not None:
        _user, colon, password = p.userinfo.partition(":")
        if colon and password:
            return _decode(p, password)
    return _query_without_password(p.tail)[1]


def has_password(uri: str) -> bool:
    return bool(password_of(uri))


def strip_password(uri: str) -> str:
    """`uri` without its password (userinfo keeps the user; ``password=`` parameters go): what a worker gets."""
    p = _split(uri)
    if p is None:
        return uri
    userinfo = p.userinfo.partition(":")[0] if p.userinfo is not None else None
    return _join(p, userinfo, _query_without_password(p.tail)[0])


def with_credentials(uri: str, password: str, user: str | None = None) -> str:
    """`uri` with `password` (percent-encoded) in its userinfo, and `user` when given."""
    p = _split(uri)
    if p is None:
        raise TargetError(f"bad target URI '{clip(strip_password(uri))}': expected scheme://host/...")
    old_user = p.userinfo.partition(":")[0] if p.userinfo is not None else ""
    name = quote(user, safe="") if user else old_user
    return _join(p, f"{name}:{quote(password, safe='')}", _query_without_password(p.tail)[0])


def identity(uri: str) -> tuple[str, tuple[str, ...], str] | None:
    """(family, hosts with ports, user): two URIs for the same login compare equal; None if not a URI."""
    p = _split(uri)
    if p is None:
        return None
    hosts = []
    for host in p.hosts.lower().split(","):
        bare = host.rsplit("]", 1)[-1] if host.startswith("[") else host
        if ":" not in bare and p.family in DEFAULT_PORTS and host:
            host = f"{host}:{DEFAULT_PORTS[p.family]}"
        hosts.append(host)
    return p.family, tuple(sorted(hosts)), user_of(uri)


def where(uri: str) -> str:
    """``user app on host h:5432``, for messages."""
    p = _split(uri)
    user = user_of(uri)
    host = p.hosts if p is not None and p.hosts else "the default host"
    return f"user {clip(user) if user else '(default)'} on host {clip(host, 80)}"


# -- AWS Secrets Manager -------------------------------------------------------------------------------


_ARN = re.compile(r"^arn:aws[a-z-]*:secretsmanager:(?P<region>[a-z0-9-]+):\d*:secret:.+$")
_cache: dict[tuple[str, str | None], dict] = {}


def region_of(arn: str) -> str | None:
    """The region in a Secrets Manager ARN (a bare secret name has none: boto3's default applies)."""
    m = _ARN.match(arn.strip())
    return m.group("region") if m else None


def parse_secret(value: str) -> dict[str, Any]:
    """The fields of a secret's string: RDS-managed JSON (``username``, ``password``, ...) or the password itself."""
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise TargetError("the target secret is not valid JSON (expected {\"username\": ..., \"password\": ...})"
                              ) from None
        if not isinstance(data, dict) or not isinstance(data.get("password"), str) or not data["password"]:
            raise TargetError("the target secret has no \"password\" field (expected the RDS secret format: "
                              "{\"username\": ..., \"password\": ...})")
        return data
    if not text:
        raise TargetError("the target secret is empty")
    return {"password": value}


def fetch_secret(arn: str, *, endpoint_url: str | None = None, client: Any = None) -> dict[str, Any]:
    """``get_secret_value(SecretId=arn)`` with boto3 (or `client`), parsed; one-line `TargetError` on failure.

    Cached per process (arn, endpoint) when no client is given; the password is registered as a secret.
    """
    endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
    key = (arn, endpoint_url)
    cache = client is None
    if cache and key in _cache:
        return _cache[key]
    try:
        if client is None:
            import boto3

            client = boto3.client("secretsmanager", region_name=region_of(arn), endpoint_url=endpoint_url)
        response = client.get_secret_value(SecretId=arn)
        raw = response.get("SecretString")
        if raw is None and response.get("SecretBinary") is not None:
            raw = bytes(response["SecretBinary"]).decode("utf-8", "replace")
    except Exception as exc:  # noqa: BLE001 - botocore's many errors, and a client's own: one line each
        raise TargetError(f"cannot read --target-secret {clip(arn, 120)}: {_explain_aws(exc)}") from None
    data = parse_secret(raw or "")
    register_secret(data["password"])
    if cache:
        _cache[key] = data
    return data


def _explain_aws(exc: BaseException) -> str:
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return ("no AWS credentials (set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "or run with an IAM role)")
    if name == "NoRegionError":
        return "no AWS region: pass the secret's full ARN, or set AWS_DEFAULT_REGION"
    error = getattr(exc, "response", {}).get("Error", {}) if hasattr(exc, "response") else {}
    if error.get("Code"):
        return redact_text(f"{error['Code']}: {' '.join(str(error.get('Message', '')).split())[:200]}")
    first = (str(exc).strip().splitlines() or [""])[0]
    return redact_text(f"{name}: {first[:200]}")


def apply_secret(uri: str, secret: Mapping[str, Any]) -> str:
    """`uri` with the secret's password, its user when the URI has none, and host/port/dbname only if missing."""
    p = _split(uri)
    if p is None:
        raise TargetError(f"bad target URI '{clip(strip_password(uri))}': expected scheme://host/...")
    secret_user = str(secret.get("username") or "")
    uri_user = user_of(uri)
    if uri_user and secret_user and uri_user != secret_user:
        raise TargetError(f"--target-secret is for user {clip(secret_user)} but the target URI names user "
                          f"{clip(uri_user)}: drop the user from the URI, or name the secret's")
    if not p.hosts and secret.get("host"):
        host = str(secret["host"]) + (f":{secret['port']}" if secret.get("port") else "")
        p = _Parts(p.prefix, p.userinfo, host, p.tail, p.family)
    dbname = secret.get("dbname")
    path, sep, query = p.tail.partition("?")
    if dbname and path in ("", "/"):
        p = _Parts(p.prefix, p.userinfo, p.hosts, f"/{quote(str(dbname), safe='')}{sep}{query}", p.family)
    return with_credentials(_join(p, p.userinfo), str(secret["password"]), None if uri_user else secret_user or None)


# -- master and workers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sources:
    """A process's own ways to the password, read when it starts (Locust later overwrites its options with
    the master's)."""

    target: str | None = None
    target_secret: str | None = None
    endpoint_url: str | None = None

    @classmethod
    def from_options(cls, options: Any) -> Sources:
        return cls(target=getattr(options, "target", None), target_secret=getattr(options, "target_secret", None),
                   endpoint_url=getattr(options, "target_secret_endpoint_url", None))


def for_master(uri: str, target_secret: str | None = None, endpoint_url: str | None = None,
               env: Mapping[str, str] | None = None, client: Any = None) -> str:
    """The URI the master (or a local run, or `dbsurge run`'s check) connects with.

    Its own password if it has one; else ``DBSURGE_TARGET_PASSWORD``; else ``--target-secret``; else as is
    (a server that needs no password, or DSQL).
    """
    env = os.environ if env is None else env
    if "://" not in uri or has_password(uri):
        return uri
    if env.get("DBSURGE_TARGET_PASSWORD"):
        register_secret(env["DBSURGE_TARGET_PASSWORD"])
        return with_credentials(uri, env["DBSURGE_TARGET_PASSWORD"])
    if target_secret:
        return apply_secret(uri, fetch_secret(target_secret, endpoint_url=endpoint_url, client=client))
    return uri


def setup_fields(uri: str, flavor: str | None, target_secret: str | None = None,
                 endpoint_url: str | None = None) -> dict[str, Any]:
    """What the master tells workers about credentials: whether a password is needed, and where a secret is."""
    return {"needs_password": has_password(uri) and flavor != "dsql", "target_secret": target_secret or None,
            "endpoint_url": endpoint_url or None}


def resolve(uri: str, wanted: Mapping[str, Any] | None, own: Sources | None = None,
            env: Mapping[str, str] | None = None, client: Any = None) -> str:
    """The worker's URI: the master's password-free `uri` with a password found on this worker.

    `wanted` is the master's `setup_fields`; `own` the worker's `Sources`. Raises one-line `TargetError`
    when a password is needed and none is found.
    """
    wanted = wanted or {}
    own = own or Sources()
    env = os.environ if env is None else env
    if not wanted.get("needs_password") or has_password(uri):
        return uri
    me = identity(uri)
    for candidate in (own.target, env.get("DBSURGE_TARGET")):
        if candidate and "://" in candidate and identity(candidate) == me:
            password = password_of(candidate)
            if password:
                register_secret(password)
                return with_credentials(uri, password)
    if env.get("DBSURGE_TARGET_PASSWORD"):
        register_secret(env["DBSURGE_TARGET_PASSWORD"])
        return with_credentials(uri, env["DBSURGE_TARGET_PASSWORD"])
    arn = own.target_secret or wanted.get("target_secret")
    if arn:
        endpoint = own.endpoint_url or wanted.get("endpoint_url")
        return apply_secret(uri, fetch_secret(arn, endpoint_url=endpoint, client=client))
    raise TargetError(f"no password for {where(uri)}: set DBSURGE_TARGET_PASSWORD or --target-secret on this worker")


class NoCredentialsTarget:
    """A worker's target when it found no password: every connect fails with the one-line reason."""

    def __init__(self, target: Any, message: str) -> None:
        self._target = target
        self._message = message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def connect(self) -> Any:
        raise ConnectError(self._message)

    def check(self) -> None:
        raise TargetError(self._message)


def configure_worker(run: Any, s: Any) -> None:
    """`run.configure_target` on a worker, with the password this worker finds (`resolve`).

    Without one, the error is logged once and the users get a `NoCredentialsTarget`: their every slot is a
    ``connect`` failure with that line, so the run's ledger says why.
    """
    sources = getattr(getattr(run, "config", None), "own_credentials", None) or Sources()
    try:
        uri = resolve(s.target_uri, getattr(s, "credentials", None), sources)
        problem = None
    except TargetError as exc:
        uri, problem = s.target_uri, str(exc)
    run.configure_target(uri, s.target_options, s.workload_options, s.operations, s.op_timeout_s)
    if problem is not None:
        log.error("%s", problem)
        run.target = NoCredentialsTarget(run.target, f"target {run.target.display}: {problem}")


#: A secret reference of ``dbsurge worker --join-token-secret``/``--secret-env`` and the runners' user data.
_SECRET_REF = re.compile(r"arn:aws[a-z-]*:(secretsmanager|ssm):([a-z0-9-]+):\d{12}:(secret:.+|parameter/.+)")


def parse_secret_ref(ref: str) -> tuple[str, str | None, str]:
    """``(service, region or None, id)`` of a secret reference; `UserError` for anything else.

        >>> parse_secret_ref("arn:aws:ssm:eu-west-1:123456789012:parameter/dbsurge/token")
        ('ssm', 'eu-west-1', '/dbsurge/token')
        >>> parse_secret_ref("secretsmanager:dbsurge-join")
        ('secretsmanager', None, 'dbsurge-join')
    """
    m = _SECRET_REF.fullmatch(ref.strip())
    if m:
        service, region, rest = m.groups()
        if service == "ssm":
            name = rest.removeprefix("parameter/")
            return "ssm", region, ("/" + name) if "/" in name else name
        return "secretsmanager", region, ref.strip()
    service, sep, ident = ref.strip().partition(":")
    if sep and service in ("ssm", "secretsmanager") and ident:
        return service, None, ident
    raise UserError(f"bad secret reference '{clip(ref)}': use a Secrets Manager or SSM parameter ARN, "
                    f"or secretsmanager:NAME / ssm:NAME")
