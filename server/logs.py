"""One log format for the server, uvicorn and the store, configured once.

``LOG_FORMAT=text`` (the default) writes readable lines, ``LOG_FORMAT=json`` one JSON
object a line. A request's fields (``request_id``, ``operation``, ``viewer_did``,
``status``, ``outcome``, ``duration_ms``) are the record's extras. Every line passes
``redact``: a password in a URL (``scheme://user:secret@host``) and a bearer or basic
credential never reach the output, whoever logged them.
"""

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

FIELDS = ("request_id", "operation", "viewer_did", "method", "path", "status", "outcome")
FIELDS_WITH_DURATION = (*FIELDS, "duration_ms")
URL_PASSWORD = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@\s]*@")
CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
QUIET_LIBRARIES = ("aiosqlite", "databases", "asyncpg", "sqlalchemy")
"""Libraries' loggers kept at WARNING or above whatever ``LOG_LEVEL`` says (SQLAlchemy's own
default)."""
SECRET_PAIR = re.compile(r"(?i)\b(password|passwd|token|secret|authorization)=([^\s&;,]+)")


SUSPECT = re.compile(r"://|bearer|basic|passw|token|secret|authorization")
"""What any of the three patterns below needs in a text, lowercased (``suspect``): most lines
(every request's) hold none. Searched in the lowercased text, as literals: a search with
Python's case-insensitive flag took twenty times as long as the three substitutions."""


def suspect(text: str) -> bool:
    """Whether ``text`` may hold what ``redact`` replaces."""
    return SUSPECT.search(text.lower()) is not None


def redact(text: str) -> str:
    """``text`` with URL passwords, bearer/basic credentials and ``password=…`` values
    replaced by ``***``."""
    if not suspect(text):
        return text
    text = URL_PASSWORD.sub(r"\g<scheme>\g<user>:***@", text)
    text = CREDENTIAL.sub(r"\1 ***", text)
    return SECRET_PAIR.sub(r"\1=***", text)


def redacted(value: Any) -> Any:
    """``value`` passed through ``redact`` when it is text (before any encoding, so a
    redaction can never cut into the quoting of the line)."""
    return redact(value) if isinstance(value, str) else value


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the request's fields and,
    for an exception, its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS_WITH_DURATION:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps({name: redacted(value) for name, value in entry.items()}, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message`` then the request's fields as ``key=value``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = redact(super().format(record))
        fields = [(name, getattr(record, name)) for name in FIELDS if hasattr(record, name)]
        if not fields:
            return line
        texts = "\n".join(value for _, value in fields if type(value) is str)
        if suspect(texts):
            fields = [(name, redacted(value)) for name, value in fields]
        return line + " " + " ".join(f"{name}={quoted(value)}" for name, value in fields)


PLAIN = re.compile(r"[ !#-\[\]-~]*")
"""Printable ASCII but the quote and the backslash: text JSON writes as it is, quoted."""


def quoted(value: Any) -> str:
    """``value`` as JSON (``json.dumps``, ``str`` for what JSON has not), written directly for
    what needs no escape: None, an integer, printable ASCII text without a quote or a
    backslash (a request line's every field, as a rule)."""
    kind = type(value)
    if kind is str:
        return f'"{value}"' if PLAIN.fullmatch(value) else json.dumps(value)
    if value is None:
        return "null"
    if kind is int:
        return str(value)
    return json.dumps(value, default=str)


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure_logging(level: str = "info", log_format: str = "text") -> None:
    """Send every logger (ours, uvicorn's, the store's, libraries') through one handler on
    standard error in ``log_format``; uvicorn's own handlers are dropped so they propagate."""
    numeric = logging.DEBUG if level in ("debug", "trace") else getattr(logging, level.upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    # No record of ours names its thread or process: not looked up for each one (the
    # logging module's documented switches).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET_LIBRARIES:
        # At debug they log every statement with its values: PKCE verifiers, lease tokens.
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
