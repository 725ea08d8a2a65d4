"""Cohort's database backends: Django's own, with what a lab's load needs (webapp/db/sqlite3)."""
