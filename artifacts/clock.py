"""The store's clock: the framework states artifact times in unix milliseconds of the store's
own clock, which a test can set ahead (`clock_offset_ms`) to make artifacts expire; an artifact
is live at that time while it has not expired and was not deleted (LIVE_ROWS, shared by the
reads and the writes).
"""

import time

from artifacts.models import ArtifactStore


def store_now_ms(store: ArtifactStore) -> int:
    return int(time.time() * 1000) + store.clock_offset_ms


# Fragments of SQL kept as constants; no value is ever formatted into a query.
LIVE_ROWS = "(expires_at IS NULL OR expires_at > %(now)s) AND deleted_at IS NULL"
