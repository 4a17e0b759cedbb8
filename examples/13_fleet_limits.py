"""A fleet under one limit toward its provider, with the spans and metrics it leaves.

Three agent trees share a model allowed 4 requests a minute. The fleet limiter (an actor
whose grants are events in its own stream) hands out grants round-robin across the trees,
so none of them waits behind another's backlog; a 429 from the provider closes the model
for its ``Retry-After``. The telemetry follows the log: spans with ids derived from the
session and run ids, and Prometheus counts, scraped here from the registry.

Virtual time (``trio.testing.MockClock``): the minutes pass at once.

    python examples/13_fleet_limits.py
"""

from __future__ import annotations

from collections import Counter

import trio
import trio.testing
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from actors import spawn_session
from actors.events import BackoffRecorded, GrantIssued
from actors.limits import Limit, LimiterPolicy, spawn_limiter
from actors.telemetry import FleetMetrics, Telemetry, telemetry_tracer_provider, trace_id_of
from protocols import LLMRequest, LLMResponse, Usage
from protocols.codec import decode_record
from protocols.errors import LLMRateLimitedError
from runtime import Clock, open_runtime
from runtime.testing import FunctionLLM, InMemoryEventStore

TREES = ("alpha", "beta", "gamma")
START = 1_800_000_000.0  # the wall clock's origin: a fixed instant, for a fixed output
calls = Counter[str]()
SHOWN = (
    "powertrio_runs_total",
    "powertrio_llm_tokens_total",
    "powertrio_limiter_grants_total",
    "powertrio_limiter_backoffs_total",
)


async def model(request: LLMRequest) -> LLMResponse:
    """A model that takes 2 s a call and answers 429 once (the provider's own limit)."""
    calls["all"] += 1
    if calls["all"] == 5:
        raise LLMRateLimitedError("slow down", status=429, provider="acme", retry_after=20.0)
    await trio.sleep(2)
    question = request.messages[-1].text
    return LLMResponse(
        content=f"noted: {question}", usage=Usage(prompt_tokens=40, completion_tokens=8)
    )


async def main() -> None:
    store = InMemoryEventStore()
    exporter = InMemorySpanExporter()
    tracer = telemetry_tracer_provider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    metrics = FleetMetrics(node="node-1")
    policy = LimiterPolicy(
        models={"acme/*": Limit(requests_per_minute=4, concurrent=2)},
        tree=Limit(tokens_per_minute=2_000),
    )
    async with open_runtime(store=store, clock=Clock(start=START), seed=1) as runtime:
        Telemetry(tracer_provider=tracer, metrics=metrics, provider="acme").install(runtime)
        limiter = await spawn_limiter(runtime, policy)
        sessions = {
            name: await spawn_session(
                runtime,
                llm=FunctionLLM(model),
                model="acme-small",
                session_id=name,
                agent_name=name,
                llm_hooks=[limiter.hook(provider="acme", tenant="demo")],
            )
            for name in TREES
        }
        results = {}

        async def work(index: int, name: str) -> None:
            await trio.sleep(index / 10)  # the trees arrive in order, a moment apart
            results[name] = [await sessions[name].send(f"{name} task {i}") for i in range(3)]

        async with trio.open_nursery() as nursery:
            for index, name in enumerate(TREES):
                nursery.start_soon(work, index, name)
        stats = await limiter.statistics()

    print("runs:")
    for name in TREES:
        print(f"  {name}: " + ", ".join(f"[{r.status}]" for r in results[name]))
    events = [decode_record(r) for r in await store.read("limiter/fleet")]
    grants = [e for e in events if isinstance(e, GrantIssued)]
    print(f"grants per minute and tree (the limit: 4 a minute; {len(grants)} grants):")
    per_minute = Counter((int((g.at - START) // 60), g.tree) for g in grants)
    for minute in sorted({m for m, _ in per_minute}):
        row = "  ".join(f"{t}={per_minute[minute, t]}" for t in TREES)
        print(f"  minute {minute}: {row}")
    for backoff in (e for e in events if isinstance(e, BackoffRecorded)):
        print(
            f"a 429 closed {backoff.provider}/{backoff.model} for {backoff.until - backoff.at:g} s"
        )
    print(
        f"limiter: issued {stats.issued}, settled {stats.settled}, tokens used {stats.tokens_used}"
    )

    first = results["alpha"][0].run_id
    trace = trace_id_of("alpha", first)
    print(f"spans of alpha's first run (trace {trace:032x}):")
    for span in sorted(exporter.get_finished_spans(), key=lambda s: (s.start_time, s.name)):
        if span.context.trace_id == trace:
            attrs = span.attributes or {}
            tokens_in = attrs.get("gen_ai.usage.input_tokens")
            tokens_out = attrs.get("gen_ai.usage.output_tokens")
            print(f"  {span.name:<22} {span.context.span_id:016x} tokens {tokens_in}/{tokens_out}")

    body, _ = metrics.render()
    print("metrics:")
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name in SHOWN:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                print(f"  {sample.name}{{{labels}}} {sample.value:g}")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
