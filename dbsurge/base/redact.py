"""Keep secrets (passwords, IAM auth tokens, request signatures) out of logs, run.json and messages.

Three tools:

- `redact_uri(uri)`: a connection URI (however its password is spelled, `userinfo_span`) (or a presigned URL such as a DSQL auth token) with the password
  in its userinfo and every sensitive query parameter replaced by ``***``.
- `redact_text(text, secrets)`: any text with the given secret strings, and anything that looks like an
  AWS SigV4 signature, credential or session token, replaced by ``***``.
- `SecretFilter`: a `logging.Filter` that applies `redact_text` with the secrets registered through
  `register_secret`, and masks the request signatures botocore logs at DEBUG level (from a DSQL
  token's signature and its logged canonical request the token could be rebuilt).
  `install_log_redaction()` (called by the first `register_secret` and by the DSQL token signer)
  applies it to every log record of the process through the log-record factory, because a filter on a
  logger does not see its children's records and handlers are added later by Locust and pytest.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote, unquote_plus

MASK = "***"

# Query parameters whose value is a secret, compared in lower case. X-Amz-Credential holds the access key
# id, which is not a secret on its own but identifies the account's key: treated as one.
SENSITIVE_PARAMS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "sslpassword",
        "token",
        "auth_token",
        "access_token",
        "secret",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
    }
)

# Secrets shorter than this are not registered: masking every "pw" in every log line would make the logs
# unreadable and would not protect such a password anyway.
MIN_SECRET_LENGTH = 4

# Transient secrets (DSQL tokens, one per connection) are kept for the most recent ones only: old tokens
# have expired, and any token's signature and credential are masked by _SIGV4_PATTERN regardless.
MAX_TRANSIENT_SECRETS = 64

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# After a userinfo's "@": a host list (names, IPv4/IPv6 literals, ports, commas, percent-escapes), then the end of it.
_HOST_THEN_END = re.compile(r"[^/?#@&=\s]*(?:[/?#]|$)")
_QUERY_PARAM = re.compile(r"(?P<sep>^|[?&;])(?P<key>[^=&;#?]+)=(?P<value>[^&;#]*)")
# SigV4 presigned-URL parts, and MongoDB's authMechanismProperties=AWS_SESSION_TOKEN:<token>.
_SIGV4_PATTERN = re.compile(
    r"(?i)(?P<key>X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|AWS_SESSION_TOKEN)(?P<sep>=|%3D|:)"
    r"(?P<value>[^&\s,'\"]+)"
)

_secrets: dict[str, None] = {}  # passwords: kept for the life of the process
_transient: dict[str, None] = {}  # tokens: insertion-ordered, bounded
_forms: list[str] | None = None  # the masked forms of all registered secrets, longest first (a cache)


def userinfo_span(uri: str) -> tuple[int, int] | None:
    """Where the userinfo (``user[:password]``) of ``scheme://userinfo@host...`` is in `uri`, as (start, end).

    Written for redaction, whatever the spelling: the userinfo ends at the last ``@`` that is followed
    by something host-like (no ``/ ? # @ & =`` or white space) and then ``/``, ``?``, ``#`` or the end,
    so that unescaped ``@ / ? # :`` in a password are still inside it (``postgresql://app:pa?ss@h/db``,
    ``mongodb://u:p@ss@h/``). Without such an ``@``, the last ``@`` of all. An ``@`` in the last query
    value (``...?application_name=me@example.com``) makes it mask too much, never too little.
    None: no ``scheme://`` or no ``@``.
    """
    match = _SCHEME.match(uri)
    if not match:
        return None
    start = match.end()
    rest = uri[start:]
    ats = [i for i, c in enumerate(rest) if c == "@"]
    if not ats:
        return None
    for at in reversed(ats):
        if _HOST_THEN_END.match(rest, at + 1):
            return start, start + at
    return start, start + ats[-1]


def uri_password(uri: str) -> str | None:
    """The password of `uri`'s userinfo as written (not percent-decoded), by `userinfo_span`; None if none."""
    span = userinfo_span(uri)
    if span is None:
        return None
    _user, colon, password = uri[span[0] : span[1]].partition(":")
    return password if colon else None


def redact_uri(uri: str) -> str:
    """Return `uri` with the userinfo password and sensitive query parameter values replaced by ``***``.

    Works on any ``scheme://user:password@host/...?...`` URI however the password is spelled
    (unescaped ``@ / ? # :``, percent-encoded; see `userinfo_span`), on multi-host URIs and on a
    scheme-less presigned URL such as a DSQL token (``host/?Action=DbConnect&X-Amz-Signature=...``).
    """
    span = userinfo_span(uri)
    if span is not None:
        user, colon, _password = uri[span[0] : span[1]].partition(":")
        if colon:
            uri = f"{uri[: span[0]]}{user}:{MASK}{uri[span[1] :]}"
    query_at = uri.find("?")
    if query_at >= 0:
        uri = uri[:query_at] + _QUERY_PARAM.sub(_mask_param, uri[query_at:])
    return _SIGV4_PATTERN.sub(_mask_sigv4, uri)


def uri_secrets(uri: str) -> list[str]:
    """The secrets written in `uri`: the userinfo password and sensitive query values, as written and decoded."""
    found: list[str] = []
    password = uri_password(uri)
    if password:
        found.append(password)
    query_at = uri.find("?")
    if query_at >= 0:
        for m in _QUERY_PARAM.finditer(uri, query_at):
            if m.group("key").strip().lower() in SENSITIVE_PARAMS and m.group("value"):
                found.append(m.group("value"))
    out: dict[str, None] = {}
    for raw in found:
        for form in (raw, unquote(raw), unquote_plus(raw)):
            out[form] = None
    return list(out)


def register_uri_secrets(uri: str | None) -> None:
    """`register_secret` every secret written in `uri` (`uri_secrets`): call it before any message names `uri`."""
    if isinstance(uri, str) and ("@" in uri or "?" in uri):
        for secret in uri_secrets(uri):
            register_secret(secret)


def _mask_param(match: re.Match[str]) -> str:
    if match.group("key").strip().lower() in SENSITIVE_PARAMS:
        return f"{match.group('sep')}{match.group('key')}={MASK}"
    return match.group(0)


def _mask_sigv4(match: re.Match[str]) -> str:
    return f"{match.group('key')}{match.group('sep')}{MASK}"


def redact_text(text: str, secrets: Iterable[str] | None = None) -> str:
    """Return `text` with each of `secrets` (default: the registered ones) and any SigV4 signature masked.

    A secret is also masked in its percent-encoded forms, as it appears inside URIs.
    """
    global _forms
    if secrets is not None:
        forms = _masked_forms(secrets)
    elif _forms is not None:
        forms = _forms
    else:
        forms = _forms = _masked_forms([*_secrets, *_transient])
    for form in forms:
        if form in text:
            text = text.replace(form, MASK)
    if "mz-" in text or "MZ-" in text or "_TOKEN" in text:
        text = _SIGV4_PATTERN.sub(_mask_sigv4, text)
    return text


def _masked_forms(secrets: Iterable[str]) -> list[str]:
    """Each secret as is and percent-encoded, longest first so that a secret containing another is masked whole."""
    forms = {form for secret in secrets if secret for form in (secret, quote(secret, safe=""), quote_plus(secret))}
    return sorted(forms, key=len, reverse=True)


def register_secret(secret: str | None, *, transient: bool = False) -> None:
    """Remember `secret` so that `SecretFilter` masks it in every log record from now on.

    `transient` secrets (per-connection tokens) are kept for the last `MAX_TRANSIENT_SECRETS` only.
    """
    global _forms
    if not secret or len(secret) < MIN_SECRET_LENGTH or secret in _secrets or secret in _transient:
        return
    if transient:
        _transient[secret] = None
        while len(_transient) > MAX_TRANSIENT_SECRETS:
            del _transient[next(iter(_transient))]
    else:
        _secrets[secret] = None
    _forms = None
    install_log_redaction()


def registered_secrets() -> frozenset[str]:
    """The secrets currently registered (for tests)."""
    return frozenset(_secrets) | frozenset(_transient)


class SecretFilter(logging.Filter):
    """A logging filter that masks the registered secrets in a record's message, arguments and traceback.

    It never drops a record. Without registered secrets it costs a truthiness test and a string prefix
    test per record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


_SIGNING_LOGGER = "botocore.auth"


def _redact_record(record: logging.LogRecord) -> None:
    if record.name == _SIGNING_LOGGER and isinstance(record.msg, str) and record.msg.startswith("Signature:"):
        record.msg, record.args = f"Signature: {MASK}", None
        return
    if not _secrets and not _transient:
        return
    try:
        message = record.getMessage()
    except Exception:  # a malformed log call: let logging report it as usual
        return
    redacted = redact_text(message)
    if redacted != message:
        record.msg, record.args = redacted, None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact_text(record.exc_text)


_factory_installed = False


def install_log_redaction() -> None:
    """Apply `SecretFilter` to every log record when it is created, whichever logger and handler it goes to.

    Idempotent. Records that are never created (below the logger's level) cost nothing.
    """
    global _factory_installed
    if _factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def redacting_factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _redact_record(record)
        return record

    logging.setLogRecordFactory(redacting_factory)
    _factory_installed = True
