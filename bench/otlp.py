"""bench/otlp.py: spans/s ingested over OTLP/HTTP protobuf (batches of 512 spans) beside the
native events endpoint, both served as `make run` serves them, in the same run.

Each batch is one trace: an invoke_agent span and 511 execute_tool / chat children carrying
GenAI attributes (every span maps onto two agentfootprint events). The native phase posts the
same number of events (1,024 per request, ~400-byte payloads) to POST /api/v1/events. Figures
are printed as rates and as the ratio of events stored per second through each door, and as the
CPU (web workers and PostgreSQL backends) each door spends per stored event: steadier than rates
on a shared machine.
"""

import http.client
import json
import os
import secrets
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("BENCH_PORT", "8768")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/footprint_bench_otlp")

import common
import orjson
import psutil
from ingest import run_events
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

BATCHES = int(os.environ.get("BENCH_OTLP_BATCHES", "100"))
SPANS_PER_BATCH = 512
CLIENTS = 4
ARGS = json.dumps({"orderId": "A-7781", "note": "Order shipped with DHL; at the Leipzig hub. " * 4})


def _attr(key: str, value: str | int) -> KeyValue:
    any_value = AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
    return KeyValue(key=key, value=any_value)


def trace_body(trace_no: int) -> bytes:
    """One ExportTraceServiceRequest: a trace of SPANS_PER_BATCH spans, as the SDK's exporter sends it."""
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    trace_id = secrets.token_bytes(16)
    start = time.time_ns()
    root = spans.add(trace_id=trace_id, span_id=secrets.token_bytes(8), name="invoke_agent bench",
                     start_time_unix_nano=start, end_time_unix_nano=start + 10**9)  # fmt: skip
    root.attributes.append(_attr("gen_ai.operation.name", "invoke_agent"))
    for i in range(1, SPANS_PER_BATCH):
        span = spans.add(trace_id=trace_id, span_id=secrets.token_bytes(8), parent_span_id=root.span_id,
                         start_time_unix_nano=start + i * 1000, end_time_unix_nano=start + i * 1000 + 500)  # fmt: skip
        if i % 2:
            span.name = "execute_tool lookup_order"
            for key, value in (
                ("gen_ai.operation.name", "execute_tool"),
                ("gen_ai.tool.name", "lookup_order"),
                ("gen_ai.tool.call.id", f"t{trace_no}-{i}"),
                ("gen_ai.tool.call.arguments", ARGS),
            ):
                span.attributes.append(_attr(key, value))
        else:
            span.name = "chat mock-small"
            for key, value in (
                ("gen_ai.operation.name", "chat"),
                ("gen_ai.request.model", "mock-small"),
                ("gen_ai.usage.input_tokens", 120),
                ("gen_ai.usage.output_tokens", 30),
            ):
                span.attributes.append(_attr(key, value))
    return request.SerializeToString()


def post_all(path: str, content_type: str, key: str, bodies: list[bytes]) -> tuple[float, list[float]]:
    """CLIENTS threads share the queue of pre-built bodies; every answer must be 200."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": content_type}
    queue, lock, latencies = iter(bodies), threading.Lock(), []

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", common.PORT, timeout=120)
        while True:
            with lock:
                body = next(queue, None)
            if body is None:
                return conn.close()
            started = time.perf_counter()
            conn.request("POST", path, body, headers)
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise RuntimeError(f"{path} answered {response.status}: {data[:300]!r}")
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        for future in [pool.submit(client) for _ in range(CLIENTS)]:
            future.result()
    return time.perf_counter() - started, latencies


def cpu_us_per_event(cpu: dict[str, float], events: int) -> dict[str, float]:
    return {name: round(seconds / events * 1e6, 1) for name, seconds in cpu.items()}


def main() -> None:
    common.RESULTS.mkdir(parents=True, exist_ok=True)
    print(f"Preparing {BATCHES} OTLP batches of {SPANS_PER_BATCH} spans and the native equivalent…", flush=True)
    otlp_bodies = [trace_body(n) for n in range(BATCHES + 4)]
    events_per_request = 2 * SPANS_PER_BATCH  # what each OTLP batch becomes
    tag = f"bench-native-{int(time.time())}"
    # Native requests carry two whole runs (1,000 events), the nearest to one OTLP batch's 1,024.
    native_bodies = [
        orjson.dumps({"events": run_events(f"{tag}-{n}a", "s") + run_events(f"{tag}-{n}b", "s")})
        for n in range(BATCHES + 4)
    ]
    env = common.reset_database()
    key = common.manage(env, "create_agent_key", "--project", "bench", "--scopes", "ingest", "read").split()[-1]
    server = common.start_gunicorn(env)
    try:
        post_all("/v1/traces", "application/x-protobuf", key, otlp_bodies[:4])  # warm-up, not measured
        post_all("/api/v1/events", "application/json", key, native_bodies[:4])
        web = [server.pid, *(child.pid for child in psutil.Process(server.pid).children())]
        common.checkpoint()
        print("Posting OTLP batches…", flush=True)
        with common.CpuMeter(web=web, postgres=common.database_backends) as otlp_cpu:
            otlp_s, otlp_lat = post_all("/v1/traces", "application/x-protobuf", key, otlp_bodies[4:])
        common.checkpoint()
        print("Posting native batches…", flush=True)
        with common.CpuMeter(web=web, postgres=common.database_backends) as native_cpu:
            native_s, native_lat = post_all("/api/v1/events", "application/json", key, native_bodies[4:])
    finally:
        common.stop(server)

    spans = BATCHES * SPANS_PER_BATCH
    events, native_events = BATCHES * events_per_request, BATCHES * 1000

    def p(latencies: list[float], q: int) -> float:
        return round(statistics.quantiles([x * 1000 for x in latencies], n=100, method="inclusive")[q - 1], 1)

    otlp_us, native_us = cpu_us_per_event(otlp_cpu.seconds, events), cpu_us_per_event(native_cpu.seconds, native_events)
    otlp_server_us, native_server_us = otlp_us["web"] + otlp_us["postgres"], native_us["web"] + native_us["postgres"]
    figures = {
        "spans": spans, "spans_per_batch": SPANS_PER_BATCH, "clients": CLIENTS,
        "otlp_spans_per_s": round(spans / otlp_s), "otlp_events_per_s": round(events / otlp_s),
        "native_events_per_s": round(native_events / native_s),
        "ratio_events": round((events / otlp_s) / (native_events / native_s), 3),
        "otlp_p50_ms": p(otlp_lat, 50), "otlp_p99_ms": p(otlp_lat, 99),
        "native_p50_ms": p(native_lat, 50), "native_p99_ms": p(native_lat, 99),
        "otlp_cpu_us_per_event": otlp_us, "native_cpu_us_per_event": native_us,
        "otlp_cpu_us_per_span": round(2 * otlp_server_us, 1),
        # Native CPU per event over OTLP's: like ratio_events, 1.0 is as cheap as the native door.
        "ratio_cpu": round(native_server_us / otlp_server_us, 3), "machine": common.machine(),
    }  # fmt: skip
    (common.RESULTS / "otlp.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(
        f"\n  OTLP protobuf   {figures['otlp_spans_per_s']:>8,} spans/s  = {figures['otlp_events_per_s']:,} events/s"
        f"  (p50 {figures['otlp_p50_ms']} ms, p99 {figures['otlp_p99_ms']} ms per {SPANS_PER_BATCH}-span request)"
        f"\n  native events   {figures['native_events_per_s']:>8,} events/s"
        f"  (p50 {figures['native_p50_ms']} ms, p99 {figures['native_p99_ms']} ms per 1,000-event request)"
        f"\n  ratio           {figures['ratio_events']:>8.2f}  (events stored per second, OTLP / native; aim >= 0.60)"
        f"\n  CPU µs/event    OTLP: web {otlp_us['web']} + postgres {otlp_us['postgres']}"
        f" ({figures['otlp_cpu_us_per_span']} per span);"
        f" native: web {native_us['web']} + postgres {native_us['postgres']}"
        f"\n  CPU ratio       {figures['ratio_cpu']:>8.2f}  (server CPU per stored event, native / OTLP)"
        f"\n  other CPU       {otlp_us['other']} µs/event during OTLP, {native_us['other']} during native"
        " (other jobs on the machine; high values mean noisy figures)"
        f"\n  machine         {figures['machine']}\n  written to      {common.RESULTS / 'otlp.json'}"
    )


if __name__ == "__main__":
    main()
