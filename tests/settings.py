"""The settings the tests run with: the project's own, with a fast password hasher.

Django's advice for test speed ("Speeding up the tests"): every user a test makes hashes a password, and
PBKDF2 with Django's 1,000,000 iterations costs 0.8-1.6 s a hash on CI's cores, which was about a
third of the web tests' time. Nothing a test asserts depends on the hash's strength; the servers and
workers a test starts get these settings too (tests/conftest.py, `service_env`), so a password the
test sets is one they can check.
"""

from webapp.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The tests post to the logging API far faster than a trainer does (hundreds of requests a second, one
# token, in the role matrix and the fuzzing): the per-token rate would answer them 429. The rate
# itself is tested with a rate of its own (tests/webapp/api/test_budget.py).
COHORT_LOGGING_RATE = "100000/s"
