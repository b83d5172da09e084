"""footprint_site.postgresql: Django's health check of a reused connection, without `SELECT 1`.

A connection the server still holds is taken as it is, with no statement sent; one the server
has closed is found unusable, closed, and replaced before the request's first query."""

import select

import psycopg
import pytest
from django.db import connection

pytestmark = pytest.mark.django_db(transaction=True)  # the connection as a request finds it: no test transaction


def _another_connection() -> psycopg.Connection:
    params = {k: v for k, v in connection.get_connection_params().items() if k != "cursor_factory"}
    return psycopg.connect(**params, autocommit=True)


def _a_new_request_checks_the_connection() -> None:
    connection.health_check_done = False  # what Django's request_started does for a reused connection
    connection.close_if_health_check_failed()


def test_a_connection_the_server_holds_is_checked_without_a_round_trip() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'the last statement sent'")
    pid = connection.connection.info.backend_pid

    _a_new_request_checks_the_connection()

    assert connection.connection is not None, "a usable connection was closed"
    with _another_connection() as other:
        (last,) = other.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    assert last == "SELECT 'the last statement sent'"


def test_a_connection_the_server_closed_is_replaced_before_the_first_query() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    pid = connection.connection.info.backend_pid
    with _another_connection() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    poller = select.poll()
    poller.register(connection.connection.fileno(), select.POLLIN)
    assert poller.poll(5000), "the server's goodbye did not reach the socket"

    _a_new_request_checks_the_connection()

    assert connection.connection is None, "the connection the server closed was kept"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid
