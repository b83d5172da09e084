"""How much CPU something other than the benchmark used while it measured: the noise flag of
bench/artifacts.py's figures on a machine shared with other jobs (a test run, another benchmark).

"Ours" is this process and its descendants (gunicorn, the Django helper), the PostgreSQL backends
of the benchmark's database, and PostgreSQL's own background processes (checkpointer, WAL writer);
everything else is foreign. Processes are sampled every half second, so one that starts and ends
between two samples is missed: the figure is a lower bound.
"""

import multiprocessing
import os
import time

import psutil


class ForeignCpu(multiprocessing.Process):
    """Runs as a child process so that its sampling never holds the benchmark's GIL mid-request."""

    def __init__(self, dbname: str) -> None:
        super().__init__(daemon=True)
        self.dbname, self.watched = dbname, os.getpid()
        self.total = multiprocessing.Value("d", 0.0)  # foreign CPU seconds since started

    def ours(self, process: psutil.Process, tree: set[int]) -> bool:
        if process.pid in tree:
            return True
        title = " ".join(process.cmdline())
        if not title.startswith("postgres:"):
            return False
        # A backend's title names its database and client; a background process has neither.
        return f" {self.dbname} " in title or not ("(" in title or "[local]" in title)

    def run(self) -> None:
        started, seen = time.time(), {}  # seen: pid -> CPU seconds at its last sample
        watched = psutil.Process(self.watched)
        while True:
            tree = {watched.pid, *(child.pid for child in watched.children(recursive=True))}
            for process in psutil.process_iter():
                try:
                    if process.pid == 0 or self.ours(process, tree):
                        continue
                    times = process.cpu_times()
                    spent, old = times.user + times.system, process.create_time() < started
                except psutil.Error:  # gone, or not ours to read
                    continue
                # First sighting: count it whole if it started while we watched; else from now on.
                self.total.value += max(0.0, spent - seen.get(process.pid, spent if old else 0.0))
                seen[process.pid] = spent
            time.sleep(0.5)

    def now(self) -> float:
        return round(self.total.value, 1)
