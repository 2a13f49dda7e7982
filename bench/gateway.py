"""Gateway fan-out latency: all sites vs one site, then with one site's service killed (kill -9).

Three real services (gunicorn serving the real app over one Redis), and the real gateway: the app with
a Gateway installed, asked over HTTP with ``?site=all`` and ``?site=east`` (the path a user takes);
the bare ``fan_out`` call is timed too, for comparison. The discovered services are given directly
(the registry is a fixed list), discovery itself is not timed. Sites are remote by definition,
so every site is reached through a delay line adding ``ONE_WAY_DELAY_MS`` each way (a separate process,
asyncio), as between data centres; the same run on bare loopback is printed too, where the three
services and the gateway compete for this machine's cores and the ratio measures CPU contention rather
than the fan-out. Also prints, for information, the extra latency of a hung site (SIGSTOP: the kernel
accepts connections that are never answered), bounded by that site's timeout.
Last line: ``gateway_vs_single=<x> dead_site_extra_ms=<ms>`` (delay-line figures, through the endpoint).
Targets (reported, never asserted): all-sites <= 1.3x single-site; a dead site adds <= timeout + 50 ms.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import urllib3

from service.sites.gateway import Gateway, SiteAccess, fan_out, parse_allowed_hosts
from service.sites.registry import RemoteService
from stack.kafka_cluster import free_port, wait_for_port
from stack.processes import ManagedProcess
from stack.redis_server import RedisServer

SITES = ("east", "west", "north")
ROUNDS = 100
TIMEOUT_S = 0.5
ONE_WAY_DELAY_MS = 10.0
PATH = "/v2/replications"
TARGET_RATIO = 1.3
BENCH_DIR = Path(__file__).resolve().parent


async def _delayed_copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    # A delay line, not a per-chunk sleep: each chunk leaves delay_s after it arrived.
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def pump() -> None:
        try:
            while chunk := await reader.read(65536):
                queue.put_nowait((time.monotonic() + delay_s, chunk))
        except OSError:
            pass  # the other side went away (a killed or timed-out site): end this direction
        queue.put_nowait((time.monotonic() + delay_s, b""))

    pumping = asyncio.ensure_future(pump())
    try:
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
    except OSError:
        pass
    finally:
        pumping.cancel()
        writer.close()


def run_delay_lines(routes: dict[int, int], delay_s: float) -> None:
    """Listen on each key port and forward to the value port with ``delay_s`` each way."""
    async def serve() -> None:
        async def handler(upstream_port: int, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
            except OSError:
                writer.close()  # the site is down: the caller sees the connection close
                return
            await asyncio.gather(_delayed_copy(reader, up_writer, delay_s),
                                 _delayed_copy(up_reader, writer, delay_s), return_exceptions=True)

        servers = [await asyncio.start_server(functools.partial(handler, upstream), "127.0.0.1", port)
                   for port, upstream in routes.items()]
        await asyncio.gather(*(server.serve_forever() for server in servers))

    asyncio.run(serve())


def start_site(site: str, redis_url: str, log_dir: Path) -> tuple[ManagedProcess, int]:
    port = free_port()
    settings = {"REDIS_URL": redis_url, "SERVICE_SITE": site, "SERVICE_PORT": port,
                "SERVICE_TARGET_CLUSTERS": (site,)}
    process = ManagedProcess(f"bench-service-{site}", [
        sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "4",
        f"service.app:create_app({settings!r})"], log_dir / f"service-{site}.log").start()
    wait_for_port(port, 60, process.process)
    return process, port


class FixedServices:
    """The gateway's registry for the bench: the three sites, always live."""

    def __init__(self, services: list[RemoteService]) -> None:
        self.live = services

    def services(self) -> list[RemoteService]:
        return list(self.live)

    def expired_services(self) -> list[RemoteService]:
        return []


def run_gateway_service(port: int, redis_url: str, services: list[RemoteService]) -> None:
    """The real app as a gateway (threaded werkzeug server), in its own process."""
    # A spawned process puts bench/ first on sys.path, where bench/aggregator.py would shadow the package.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
    from werkzeug.serving import make_server

    from service.app import create_app
    from service.sites.discovered_directory import GATEWAY_KEY, REGISTRY_KEY

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    app = create_app({"REDIS_URL": redis_url, "SERVICE_SITE": "bench-gateway"})
    app.extensions[GATEWAY_KEY] = Gateway("bench-gateway", parse_allowed_hosts(["127.0.0.1"]),
                                          lambda site: SiteAccess(TIMEOUT_S))
    app.extensions[REGISTRY_KEY] = FixedServices(services)
    make_server("127.0.0.1", port, app, threaded=True).serve_forever()


def remote(site: str, port: int) -> RemoteService:
    return RemoteService(f"{site}@{port}", site, f"http://127.0.0.1:{port}", "127.0.0.1", port, "http", "",
                         (site,), "bench", int(time.time() * 1000), 10.0)


def median_ms(action: Callable[[], object], rounds: int = ROUNDS) -> float:
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        action()
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def asking(gateway: Gateway, services: list[RemoteService], selector: str, expect_ok: int) -> Callable:
    def ask() -> dict:
        answer = fan_out(gateway, services, PATH, selector=selector).to_json()
        ok = sum(site["status"] == "ok" for site in answer["sites"])
        if ok != expect_ok:
            raise RuntimeError(f"expected {expect_ok} sites ok, got {answer['sites']}")
        return answer
    return ask


def asking_endpoint(http: urllib3.PoolManager, base: str, selector: str, expect_ok: int) -> Callable:
    def ask() -> dict:
        response = http.request("GET", f"{base}{PATH}", fields={"site": selector}, retries=False)
        answer = response.json()
        ok = sum(site["status"] == "ok" for site in answer["sites"])
        if response.status != 200 or ok != expect_ok:
            raise RuntimeError(f"expected {expect_ok} sites ok, got {response.status} {answer}")
        return answer
    return ask


def all_vs_single(gateway: Gateway, services: list[RemoteService], label: str) -> tuple[float, float]:
    return compare(asking(gateway, services, "all", 3), asking(gateway, services, "east", 1), label)


def compare(all_sites: Callable, single: Callable, label: str) -> tuple[float, float]:
    median_ms(all_sites, 10)  # warm connections and workers
    median_ms(single, 10)
    # Interleaved, so the load other processes put on the machine drifts alike for both.
    singles, alls = [], []
    for _ in range(ROUNDS):
        singles.append(median_ms(single, 1))
        alls.append(median_ms(all_sites, 1))
    single_ms, all_ms = statistics.median(singles), statistics.median(alls)
    print(f"{label}: single-site median {single_ms:.2f} ms, all sites median {all_ms:.2f} ms, "
          f"ratio {all_ms / single_ms:.2f} ({ROUNDS} rounds, GET {PATH})")
    return single_ms, all_ms


def main() -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="srm-bench-gateway-"))
    redis = RedisServer().start()
    processes: dict[str, ManagedProcess] = {}
    delay_line = gateway_service = None
    http = urllib3.PoolManager(maxsize=4)
    gateway = Gateway("bench-gateway", parse_allowed_hosts(["127.0.0.1"]), lambda site: SiteAccess(TIMEOUT_S))
    try:
        ports = {}
        for site in SITES:
            processes[site], ports[site] = start_site(site, redis.url, log_dir)
        delayed = {site: free_port() for site in SITES}
        delay_line = multiprocessing.get_context("spawn").Process(
            target=run_delay_lines, args=({delayed[s]: ports[s] for s in SITES}, ONE_WAY_DELAY_MS / 1000),
            daemon=True)
        delay_line.start()
        for port in delayed.values():
            wait_for_port(port, 30)
        all_vs_single(gateway, [remote(s, ports[s]) for s in SITES], "fan_out, bare loopback")
        services = [remote(s, delayed[s]) for s in SITES]
        all_vs_single(gateway, services, f"fan_out, {ONE_WAY_DELAY_MS:.0f} ms each way")
        gateway_port = free_port()
        gateway_service = multiprocessing.get_context("spawn").Process(
            target=run_gateway_service, args=(gateway_port, redis.url, services), daemon=True)
        gateway_service.start()
        wait_for_port(gateway_port, 60)  # a spawned process: its failure shows in the output above
        base = f"http://127.0.0.1:{gateway_port}"
        # site=all asks the three sites and the gateway's own (local) part
        single_ms, all_ms = compare(asking_endpoint(http, base, "all", 4),
                                    asking_endpoint(http, base, "east", 1),
                                    f"gateway endpoint, {ONE_WAY_DELAY_MS:.0f} ms each way")

        processes["west"].kill()
        dead_ms = median_ms(asking_endpoint(http, base, "all", 3))
        print(f"all sites with west killed: median {dead_ms:.2f} ms (extra {dead_ms - all_ms:.1f} ms)")

        north = processes["north"].process
        assert north is not None  # started above
        os.killpg(north.pid, signal.SIGSTOP)
        hung_ms = median_ms(asking_endpoint(http, base, "all", 2), 10)
        os.killpg(north.pid, signal.SIGCONT)
        print(f"all sites with west killed and north hung: median {hung_ms:.2f} ms (the hung site adds "
              f"{hung_ms - dead_ms:.1f} ms; its timeout is {TIMEOUT_S * 1000:.0f} ms)")
        ratio, bound_ms = all_ms / single_ms, TIMEOUT_S * 1000 + 50
        verdicts = ["met" if ratio <= TARGET_RATIO else "missed",
                    "met" if dead_ms - all_ms <= bound_ms else "missed"]
        print(f"targets: gateway_vs_single <= {TARGET_RATIO}: {verdicts[0]}; "
              f"dead site extra <= {bound_ms:.0f} ms: {verdicts[1]}")
        print(f"gateway_vs_single={ratio:.2f} dead_site_extra_ms={max(0.0, dead_ms - all_ms):.1f}")
    finally:
        gateway.close()
        if gateway_service is not None:
            gateway_service.terminate()
            gateway_service.join(10)
        if delay_line is not None:
            delay_line.terminate()
            delay_line.join(10)
        for process in processes.values():
            if process.process is not None and process.running:
                os.killpg(process.process.pid, signal.SIGCONT)
            process.stop()
        redis.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
