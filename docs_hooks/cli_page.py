"""The command line reference (docs/reference/cli.md), from the real parsers: `python -m trainer`,
`cohort`, `python -m webapp.stack` (each `main()` is run until it would parse its arguments, and the
parser it built is printed with argparse's own help), the management commands of Cohort's apps
(`create_parser(...).format_help()`) and the Makefile's targets with the comment above each."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
WIDTH = "100"  # argparse wraps help to $COLUMNS: a fixed width makes the page the same on every machine

# Targets the Makefile gives no comment of their own (the one above `run:` speaks for both installs).
MAKE_PURPOSES = {
    "install-run": "Installs what `make run` needs, once (a stamp file in the venv, redone when pyproject.toml "
                   "changes): the virtualenv, CPU-or-CUDA torch, then Cohort with its `train` and `dspy` extras (the "
                   "`docs` extra is `make docs`' own install).",
    "install": "Installs everything `make test` needs on top of `install-run`: the `dev`, `client` and `docs` extras and "
               "the example plugin `examples/cohort-hotpot`.",
}


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


@contextmanager
def _columns() -> Iterator[None]:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def parser_of(main: Callable[[list[str]], int]) -> argparse.ArgumentParser:
    """The parser `main` builds: it runs until its first `parse_args`, which hands the parser over."""

    def capture(self, *args, **kwargs):
        raise _Parsed(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture):
        try:
            main([])
        except _Parsed as parsed:
            return parsed.parser
    raise RuntimeError(f"{main.__module__}.main() parsed no arguments")


def subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Each sub-command's name, help and parser, depth first (`models`, then `models build`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub
                for deeper, text, subsub in subcommands(sub):
                    yield f"{name} {deeper}", text, subsub


def help_block(parser: argparse.ArgumentParser) -> str:
    with _columns():
        text = parser.format_help()
    return "```text\n" + text.rstrip() + "\n```\n"


def argparse_section(title: str, intro: str, main: Callable[[list[str]], int]) -> list[str]:
    parser = parser_of(main)
    out = [f"## `{title}`", "", intro, "", help_block(parser)]
    for name, text, sub in subcommands(parser):
        out += [f"### `{title} {name}`", ""]
        if text:
            out += [text[:1].upper() + text[1:] + ".", ""]
        out.append(help_block(sub))
    return out


def management_commands() -> list[tuple[str, str]]:
    """(app module, command) of each of Cohort's apps' own management commands."""
    found = []
    for path in sorted(ROOT.glob("webapp/*/management/commands/*.py")):
        if not path.name.startswith("_"):
            found.append((f"webapp.{path.parts[-4]}", path.stem))
    return found


def management_section() -> list[str]:
    from django.core.management import load_command_class

    from docs_hooks._django import setup

    setup()
    out = ["## `manage.py` commands", "",
           "Cohort's own Django management commands (Django's and its other apps' are not listed). Each runs "
           "with the server's settings ([server settings](environment.md)): `DATABASE_URL` names the database "
           "it changes. The last seven options of each are Django's, common to every command.", ""]
    for app, name in management_commands():
        command = load_command_class(app, name)
        out += [f"### `manage.py {name}` {{#manage-{name.replace('_', '-')}}}", "",
                f"{command.help} (`{app.replace('.', '/')}/management/commands/{name}.py`)", "",
                help_block(command.create_parser("manage.py", name))]
    return out


def make_targets() -> list[tuple[str, list[str], str, list[str]]]:
    """(target, prerequisites, purpose, recipe) of each phony target, in the Makefile's order."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    phony = []
    for line in lines:
        if line.startswith(".PHONY:"):
            phony += line.split(":", 1)[1].split()
    rules = {}
    for index, line in enumerate(lines):
        match = re.match(r"^([a-z][a-z0-9-]*):(?!=)\s*(.*)$", line)
        if match and match[1] in phony:
            rules[match[1]] = (index, match[2].split())
    targets = []
    for name in sorted(phony, key=lambda n: rules.get(n, (len(lines),))[0]):
        index, prerequisites = rules[name]
        # The comment block above the rule; variable assignments between them belong to it.
        above, i = [], index - 1
        while i >= 0 and (lines[i].startswith("#") or re.match(r"^[A-Z_]+ *[:?]?=", lines[i])):
            if lines[i].startswith("#"):
                above.insert(0, lines[i].lstrip("#").strip())
            i -= 1
        recipe, j = [], index + 1
        while j < len(lines) and lines[j].startswith("\t"):
            recipe.append(lines[j].strip())
            j += 1
        purpose = MAKE_PURPOSES.get(name) or " ".join(above)
        targets.append((name, prerequisites, purpose, recipe))
    return targets


def make_variables() -> list[tuple[str, str]]:
    """The variables a `make` command line may set (`NAME ?= default`)."""
    text = (ROOT / "Makefile").read_text()
    return re.findall(r"^([A-Z_]+) \?= ?(.*)$", text, re.MULTILINE)


def make_section() -> list[str]:
    out = ["## `make` targets", "",
           "The Makefile's targets (`make run` and `make test` are the two quick-start commands). The text "
           "of each is the Makefile's own comment; the commands are its recipe.", ""]
    for name, prerequisites, purpose, recipe in make_targets():
        out += [f"### `make {name}` {{#make-{name}}}", ""]
        if purpose:
            out += [purpose.replace("*", r"\*"), ""]
        if prerequisites:
            out += ["Needs first: " + ", ".join(f"`{p}`" for p in prerequisites) + ".", ""]
        if recipe:
            out += ["```text", *recipe, "```", ""]
    variables = make_variables()
    if variables:
        out += ["Variables a command line may set (`make test ARGS=\"-k healthz\"`):", "",
                "| variable | default |", "| --- | --- |"]
        out += [f"| `{name}` | `{default}` |" for name, default in variables]
        out.append("")
    return out


def render() -> str:
    from cohort.__main__ import main as cohort_main
    from trainer.run.cli import main as trainer_main
    from webapp.stack import main as stack_main

    out = argparse_section(
        "python -m trainer",
        "Trains without Django: a run folder holds `events.jsonl`, `config.json` and `checkpoints/` "
        "(`trainer/run/cli.py`). `--resume` continues from the newest complete checkpoint as attempt n+1; "
        "creating the file `STOP` in the run folder stops the run at the next step boundary. `programs` and "
        "`rewards` list the built-ins and those of installed plugins, then the plugin entries that are "
        "unavailable, with their error.",
        trainer_main)
    out += argparse_section(
        "cohort",
        "The command `pip install` makes with the SDK (also `python -m cohort`; `cohort/__main__.py`): "
        "`cohort sync` uploads run folders written offline, or not fully uploaded; `cohort import` uploads "
        "W&B offline runs, TensorBoard logs and verl's files (`cohort/imports.py`); `cohort follow` watches a "
        "verl or TensorBoard run being written (`cohort/follow.py`).",
        cohort_main)
    out += argparse_section(
        "python -m webapp.stack",
        "The embedded stack behind `make run` and `make test` (`webapp/stack.py`). `test` hands every "
        "argument after it to pytest, options first included.",
        stack_main)
    out += management_section()
    out += make_section()
    return "\n".join(out)
