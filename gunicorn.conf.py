"""Production web server settings (used by `make run`, docker-compose and the benchmark)."""

import gc
import os
from typing import Any

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
# `or`: docker compose's env_file sets a variable left empty in .env to "", not unset.
workers = int(os.environ.get("WEB_CONCURRENCY") or max(2, (os.cpu_count() or 1) * 2))
# Threads: an ask long-poll holds its request for up to 55 s, which would idle a sync worker.
threads = int(os.environ.get("WEB_THREADS") or 4)
# gthread, but new connections go to the worker holding the fewest (see footprint_site/gunicorn_worker.py).
worker_class = "footprint_site.gunicorn_worker.BalancedThreadWorker" if threads > 1 else "sync"
timeout = 75  # the ask long-poll holds a request up to 55 s
keepalive = 5
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
preload_app = True
# gunicorn's control socket (gunicornc) defaults to one path per user, $HOME/.gunicorn/gunicorn.ctl:
# a second server on the machine (the tests', the benchmark's, another `make run`) takes it over,
# and either one stopping deletes it. Off unless given a path of its own.
if os.environ.get("GUNICORN_CONTROL_SOCKET"):
    control_socket = os.environ["GUNICORN_CONTROL_SOCKET"]
else:
    control_socket_disable = True


def post_fork(server: object, worker: Any) -> None:
    # Ingestion allocates many short-lived containers; the default thresholds make the cyclic
    # collector run constantly. Freeze what the app imported and collect less often.
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    # An ask long-poll holds a thread for its whole wait: one thread of the worker stays free.
    from ledger.asks.waits import ask_wait_slots

    ask_wait_slots.limit = worker.cfg.threads - 1
