"""The Users page (`/users/`): site staff create accounts (a password typed, or generated and shown once)
and put people in projects with a role, without the Django admin. No models of its own: an account is
Django's user (with the personal project webapp/projects gives every user), a place in a project is
webapp/projects' Membership, added through its services so the same rules hold (no member in a
personal project). Every page here is staff-only: anyone else gets the 403 page saying whom to ask."""
