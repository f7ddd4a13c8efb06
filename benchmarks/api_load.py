"""Load benchmark: GET /config against one uvicorn process, driven from a second process on loopback.

    python benchmarks/api_load.py [--seconds 10] [--connections 16] [--json]

It tunes one small softmax problem on this machine (a real result, through the interpreter when there is no
GPU) into a fresh SQLite file, starts `autotuner serve` on it, and then a separate client process keeps
`--connections` HTTP/1.1 keep-alive connections busy with lookups (an exact hit, a nearest answer and a default
answer, in turn) for `--seconds` after a warm-up. Every response is checked (status 200, a config in the body).
Prints requests per second and latency percentiles. Target (issue 5): >= 2000 req/s with p99 < 10 ms on a
2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

QUERIES = (
    "/config?op=softmax&shape=64x200&dtype=float16",  # exact
    "/config?op=softmax&shape=128x200&dtype=float16",  # nearest
    "/config?op=layernorm&shape=64x200&dtype=float16",  # default
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _connection(host: str, port: int, stop_at: float, latencies: list[float], errors: list[str]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    requests = [f"GET {q} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode() for q in QUERIES]
    i = 0
    while time.perf_counter() < stop_at:
        t0 = time.perf_counter()
        writer.write(requests[i % len(requests)])
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await reader.readexactly(length)
        latencies.append(time.perf_counter() - t0)
        if not head.startswith(b"HTTP/1.1 200") or b'"config"' not in body:
            errors.append(head.split(b"\r\n", 1)[0].decode() + " " + body[:200].decode(errors="replace"))
        i += 1
    writer.close()


async def _drive(host: str, port: int, connections: int, seconds: float) -> tuple[list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    stop_at = time.perf_counter() + seconds
    await asyncio.gather(*(_connection(host, port, stop_at, latencies, errors) for _ in range(connections)))
    return latencies, errors


def client(port: int, connections: int, seconds: float, warmup: float) -> dict[str, float | int | list[str]]:
    """Runs in its own process: warm up, then measure."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_drive("127.0.0.1", port, connections, warmup))
    t0 = time.perf_counter()
    lat, errors = asyncio.run(_drive("127.0.0.1", port, connections, seconds))
    elapsed = time.perf_counter() - t0
    q = statistics.quantiles(lat, n=1000)
    return {"requests": len(lat), "seconds": round(elapsed, 2), "req_per_s": round(len(lat) / elapsed),
            "p50_ms": round(q[499] * 1e3, 3), "p90_ms": round(q[899] * 1e3, 3), "p99_ms": round(q[989] * 1e3, 3),
            "max_ms": round(max(lat) * 1e3, 3), "errors": len(errors), "first_errors": errors[:3],
            "connections": connections}


def wait_healthy(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the service at {url} did not become healthy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--cache-s", type=float, default=None,
                    help="the server's AUTOTUNER_CONFIG_CACHE_S (0: every request reads the database)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--client-port", type=int, help=argparse.SUPPRESS)  # internal: run as the client process
    args = ap.parse_args()
    if args.client_port:
        print(json.dumps(client(args.client_port, args.connections, args.seconds, args.warmup)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AUTOTUNER_DB_URL": f"sqlite:///{Path(tmp) / 'bench.db'}"}
        env.pop("AUTOTUNER_URL", None)
        if args.cache_s is not None:
            env["AUTOTUNER_CONFIG_CACHE_S"] = str(args.cache_s)
        subprocess.run([sys.executable, "-m", "autotuner", "tune", "softmax", "--shape", "64x200", "--trials", "2",
                        "--json"], env=env, check=True, capture_output=True)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "autotuner", "serve", "--port", str(port)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_healthy(f"http://127.0.0.1:{port}")
            out = subprocess.run([sys.executable, __file__, "--client-port", str(port), "--seconds", str(args.seconds),
                                  "--warmup", str(args.warmup), "--connections", str(args.connections)],
                                 check=True, capture_output=True, text=True)
            result = json.loads(out.stdout)
        finally:
            server.terminate()
            server.wait(10)
    result["cpus"] = os.cpu_count() or 0
    if args.json:
        print(json.dumps(result))
        return
    cache = "default" if args.cache_s is None else f"{args.cache_s:g} s"
    print(f"GET /config on loopback, one uvicorn process, {result['connections']} keep-alive connections, "
          f"{result['seconds']} s, {result['cpus']} CPUs, answer cache {cache}")
    print("| req/s | p50 ms | p90 ms | p99 ms | max ms | requests | errors |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {result['req_per_s']} | {result['p50_ms']} | {result['p90_ms']} | {result['p99_ms']} | "
          f"{result['max_ms']} | {result['requests']} | {result['errors']} |")
    if result["errors"]:
        print("first errors:", *result["first_errors"], sep="\n  ")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
