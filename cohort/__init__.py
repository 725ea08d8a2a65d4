"""Cohort's Python client of the read API: `from cohort.client import Client`."""

from cohort.client import Client, CohortAPIError

__all__ = ["Client", "CohortAPIError"]
