"""Logging a browser in, shared by the browser tests."""

PASSWORD = "a-long-test-password"


def log_in(page, base_url: str, username: str, password: str = PASSWORD) -> None:
    """Logs `username` in through the login form and waits for the runs list."""
    page.goto(f"{base_url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
