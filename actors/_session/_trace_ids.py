"""Trace and span ids derived from the log, and the W3C trace context a sub-agent carries.

Plain hashing, no OpenTelemetry: a session records the trace context of the tool call that
spawned it in its first event, so its spans join its parent's trace in whatever process or
fleet node runs it (or exports it from the log later), and importing ``actors`` still
loads no telemetry package.
"""

from __future__ import annotations

import hashlib


def _id(size: int, *parts: str) -> int:
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=size).digest()
    return int.from_bytes(digest, "big") or 1  # 0 is the invalid id


def trace_id_of(session_id: str, run_id: str) -> int:
    """The trace of a top-level run (128 bits)."""
    return _id(16, "trace", session_id, run_id)


def run_span_id(session_id: str, run_id: str) -> int:
    return _id(8, "run", session_id, run_id)


def llm_span_id(session_id: str, run_id: str, round_: int) -> int:
    return _id(8, "llm", session_id, run_id, str(round_))


def tool_span_id(session_id: str, run_id: str, call_id: str) -> int:
    return _id(8, "tool", session_id, run_id, call_id)


def format_traceparent(trace_id: int, span_id: int) -> str:
    """The W3C ``traceparent`` of a sampled span."""
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def parse_traceparent(value: str | None) -> tuple[int, int] | None:
    """(trace id, span id) of a W3C ``traceparent``; ``None`` when absent or malformed
    (a session then starts a trace of its own rather than failing)."""
    if not value:
        return None
    parts = value.split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    return (trace_id, span_id) if trace_id and span_id else None


def child_traceparent(
    parent_id: str, parent_traceparent: str | None, run_id: str, call_id: str
) -> str | None:
    """The trace context of a sub-agent spawned by tool call ``call_id`` of run ``run_id``
    of session ``parent_id`` (itself in the trace ``parent_traceparent`` names, for a
    sub-agent, or at the root of its run's own). ``None`` for a spawn outside a run."""
    if not run_id:
        return None
    inherited = parse_traceparent(parent_traceparent)
    trace_id = inherited[0] if inherited is not None else trace_id_of(parent_id, run_id)
    return format_traceparent(trace_id, tool_span_id(parent_id, run_id, call_id))
