"""The production web server spreads agents' kept-alive connections over its worker processes."""

import http.client
import time
from pathlib import Path

import psutil
import pytest

from tests.servers import Gunicorn

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = 3


def _connections_held(server: Gunicorn) -> list[int]:
    """How many open client connections each worker process holds."""
    assert server.process is not None
    workers = psutil.Process(server.process.pid).children()
    assert len(workers) == WORKERS
    return sorted(
        sum(1 for c in worker.net_connections("tcp") if c.laddr.port == server.port and c.status == "ESTABLISHED")
        for worker in workers
    )


def _agent_connected(server: Gunicorn) -> http.client.HTTPConnection:
    agent = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    agent.request("GET", "/healthz")  # HTTP/1.1: the connection stays open
    answer = agent.getresponse()
    answer.read()
    assert answer.status == 200
    return agent


def test_each_new_connection_goes_to_a_worker_holding_none(tmp_path: Path) -> None:
    # Plain gunicorn lets any worker accept, so a second agent often lands on the first one's
    # process and the two share its GIL while the others idle (benoitc/gunicorn#3433).
    server = Gunicorn(tmp_path / "gunicorn.log", workers=WORKERS)
    agents: list[http.client.HTTPConnection] = []
    try:
        server.start()
        for _ in range(WORKERS):
            agents.append(_agent_connected(server))
        assert _connections_held(server) == [1] * WORKERS
        # Every worker holds one: the next connection waits out a short hold, then is served.
        agents.append(_agent_connected(server))
        assert _connections_held(server) == [1] * (WORKERS - 1) + [2]
    finally:
        for agent in agents:
            agent.close()
        server.stop()


def test_servers_on_one_machine_share_no_control_socket(tmp_path: Path) -> None:
    # gunicorn's control socket defaults to one path per user: a second server took it over and
    # either one stopping deleted it. Off unless GUNICORN_CONTROL_SOCKET gives a path of its own.
    home = tmp_path / "home"
    home.mkdir()
    own = tmp_path / "own.ctl"
    quiet = Gunicorn(tmp_path / "quiet.log", env={"HOME": str(home), "XDG_RUNTIME_DIR": ""})
    named = Gunicorn(tmp_path / "named.log", env={"HOME": str(home), "GUNICORN_CONTROL_SOCKET": str(own)})
    try:
        quiet.start()
        named.start()
        assert list(home.iterdir()) == []
        assert "Control socket" not in (tmp_path / "quiet.log").read_text()
        # The arbiter opens it beside serving, so /healthz may answer first (seen under load).
        deadline = time.monotonic() + 10
        while not own.is_socket() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert own.is_socket()
    finally:
        quiet.stop()
        named.stop()
