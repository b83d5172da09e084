"""gunicorn's threaded worker, with new connections going to the worker that holds the fewest.

gunicorn leaves the choice of worker to whichever process calls accept() first, and a threaded
worker accepts even while its threads are busy (benoitc/gunicorn#3433). Agents keep their
connection open, so two of them pinned to one process share its GIL for as long as they post,
while another process idles: their requests take up to twice as long. Here a worker that already
holds connections waits HOLD_PER_CONNECTION for each (at most MAX_HOLD) before it accepts, so one
with fewer takes the connection first; when every worker is as loaded, a new connection waits
that long once, when it is opened.
"""

import socket
import time

from gunicorn.workers.gthread import ThreadWorker

# Seconds. Long enough for an idle worker to be scheduled on a busy machine and accept; short
# beside the life of an agent's connection.
HOLD_PER_CONNECTION = 0.005
MAX_HOLD = 0.025


class BalancedThreadWorker(ThreadWorker):
    def init_process(self) -> None:
        self.hold_until = 0.0  # not listening before this (monotonic seconds); 0: no hold
        self.hold_served = False  # a hold just ended: what still waits is accepted without another
        super().init_process()

    def accept(self, listener: socket.socket) -> None:
        # A lone worker has nobody to leave the connection to.
        if self.nr_conns and not self.hold_served and self.cfg.workers > 1:
            self.hold_until = time.monotonic() + min(self.nr_conns * HOLD_PER_CONNECTION, MAX_HOLD)
            self.set_accept_enabled(False)
            return
        super().accept(listener)

    def set_accept_enabled(self, enabled: bool) -> None:
        if enabled and self.hold_until:
            if time.monotonic() < self.hold_until:
                return
            self.hold_until, self.hold_served = 0.0, True
        super().set_accept_enabled(enabled)

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        if self.hold_until:  # wake when the hold ends, so the loop listens again
            timeout = max(0.0, min(timeout, self.hold_until - time.monotonic()))
        elif self.hold_served:  # one look, without waiting, for a connection that outwaited the hold
            super().wait_for_and_dispatch_events(0.0)
            self.hold_served = False
        super().wait_for_and_dispatch_events(timeout)
