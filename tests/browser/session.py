"""Logging a browser in, shared by the browser tests."""

PASSWORD = "a-long-test-password"


def log_in(page, base_url: str, username: str, password: str = PASSWORD) -> None:
    """Logs `username` in through the login form and waits for the runs list."""
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


def off_playwright_thread(work) -> None:
    """Runs `work()` on a thread of its own, as a worker or the supervisor would, and re-raises what it
    raised. Playwright's event loop runs on the test's thread, where Django refuses async_to_sync (the
    websocket notices) and the ORM's async-safety check would object."""
    import threading

    from django.db import connection

    failures = []

    def run():
        try:
            work()
        except BaseException as exc:  # re-raised on the test's thread
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]
