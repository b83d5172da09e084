"""Django's PostgreSQL backend with a health check that costs no round trip (settings: ENGINE).

With CONN_HEALTH_CHECKS, Django asks a connection it reuses whether it still works before a
request's first query, with `SELECT 1`: a round trip to PostgreSQL on every request, ingestion's
included. A connection the server has closed (a restart, `pg_terminate_backend`, an idle
timeout) has something to read, the server's last message or the end of the stream, while one
it holds idle has nothing. So a connection with nothing to read is taken as it is, and one with
anything to read gets Django's `SELECT 1`, which then decides.
"""

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        if self.connection is None or self.connection.closed:
            return False
        poller = select.poll()  # not select(): it refuses a descriptor numbered past 1023
        poller.register(self.connection.fileno(), select.POLLIN)
        return not poller.poll(0) or super().is_usable()
