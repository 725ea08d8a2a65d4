"""The shared ASGI server's teardown sees the queries a test left running (tests/conftest.py): the
database is emptied only once they end, since a TRUNCATE beside a write deadlocks on PostgreSQL."""

from __future__ import annotations

import http.cookiejar
import re
import threading
import urllib.parse
import urllib.request

import psycopg
import pytest
from django.db import connection

from tests.conftest import shared_server_queries, wait_for

PASSWORD = "pw-for-tests-1"


def log_in(url: str, username: str) -> int:
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = opener.open(f"{url}/login/", timeout=60).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    body = urllib.parse.urlencode({"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token})
    return opener.open(f"{url}/login/", data=body.encode(), timeout=60).status


@pytest.mark.postgresql_only(reason="it watches PostgreSQL's view of the server's connections (pg_stat_activity)")
def test_a_request_still_writing_is_seen_until_it_ends(asgi_server, make_user):
    user = make_user("alice", password=PASSWORD)
    dsn = connection.get_connection_params()
    # Another connection holds alice's row, so the server's login (which stores her last login) waits.
    with psycopg.connect(**{k: v for k, v in dsn.items() if k not in ("cursor_factory", "context")}) as holder:
        holder.execute("SELECT 1 FROM auth_user WHERE id = %s FOR UPDATE", [user.pk])
        statuses = []
        request = threading.Thread(target=lambda: statuses.append(log_in(asgi_server, "alice")))
        request.start()
        running = wait_for(shared_server_queries, 60, "the server's login to wait on alice's row")
        assert any("auth_user" in query for query in running), running
        holder.commit()
    request.join(60)
    assert statuses == [200]
    wait_for(lambda: not shared_server_queries(), 60, "the server's queries to end")
