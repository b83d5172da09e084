from celery import shared_task

from artifacts import services


@shared_task(acks_late=True, ignore_result=True)
def artifacts_sweep() -> int:
    """Beat: sweep expired artifacts. Safe to run twice or concurrently (see the service)."""
    return services.artifacts_sweep().metadata_rows
