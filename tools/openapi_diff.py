"""Diffs the OpenAPI schema that drf-spectacular generates from this tree against the one of an earlier
commit: a refactoring that keeps every API path and body the same prints "identical" and exits 0.

    .venv/bin/python tools/openapi_diff.py e17482d

The earlier commit is checked out into a temporary git worktree (removed at the end); each schema is
generated with `manage.py spectacular` under the test settings, in a throwaway COHORT_VAR_DIR.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def schema_of(tree: Path, var_dir: Path) -> list[str]:
    out = var_dir / "schema.yaml"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings", COHORT_VAR_DIR=str(var_dir))
    env.pop("DATABASE_URL", None)
    subprocess.run([sys.executable, "manage.py", "spectacular", "--file", str(out)], cwd=tree, env=env, check=True,
                   capture_output=True)
    return out.read_text().splitlines(keepends=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ref", help="the earlier commit (or branch, tag)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        before_tree = scratch / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(before_tree), args.ref], cwd=ROOT, check=True)
        try:
            (scratch / "var-before").mkdir()
            (scratch / "var-after").mkdir()
            before = schema_of(before_tree, scratch / "var-before")
            after = schema_of(ROOT, scratch / "var-after")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=ROOT, check=True)
    if before == after:
        print(f"identical: {len(after):,} lines of OpenAPI schema at {args.ref} and in this tree")
        return
    sys.stdout.writelines(difflib.unified_diff(before, after, fromfile=args.ref, tofile="this tree"))
    sys.exit(1)


if __name__ == "__main__":
    main()
