"""Recorded history for the benchmarks that need an old session without running one."""

from __future__ import annotations

from actors.events import AssistantRecorded, RunFinished, RunStarted
from protocols import AssistantMessage, Usage
from protocols.codec import default_registry
from runtime import NewEvent


def recorded_run(run_id: str, i: int) -> list[NewEvent]:
    """The events of a finished run: question ``i``, one model round answering it."""
    encode = default_registry.encode
    events = (
        RunStarted(run_id=run_id, input=f"question {i}", max_rounds=10),
        AssistantRecorded(
            run_id=run_id,
            round=1,
            message=AssistantMessage(content=f"answer {i}"),
            usage=Usage(prompt_tokens=10, completion_tokens=2),
            model="m",
            finish_reason="stop",
            request_fingerprint="old",
        ),
        RunFinished(run_id=run_id, status="completed", text="", rounds=1, usage=Usage()),
    )
    return [NewEvent.from_encoded(encode(event)) for event in events]
