"""The reference pages of the built manual against the code they are generated from: every
`RunConfig` field with its anchor, type, default, bounds, condition and presets (and no field the
dataclass lacks), every group's section, every `COHORT_*` variable of the source, every command of the
command line, every endpoint of the OpenAPI schema, and the docstring pages' main names."""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainer.config import GROUP_TITLES, PRESETS, PROGRAM_OPTIMIZES_PROMPTS, RunConfig, literal_choices

FIELDS = dataclasses.fields(RunConfig)
# Where the product reads its environment (README's and the brief's list: the server, workers, trainer, SDK).
SOURCE_DIRS = ("webapp", "workers", "trainer", "cohort")


def article(site: Path, page: str) -> str:
    text = (site / page / "index.html").read_text()
    return text[text.index("<article"):text.index("</article>")]


def plain(fragment: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", fragment)))


def sections(body: str, prefix: str) -> dict[str, str]:
    """Each heading whose id starts with `prefix`, with the plain text up to the next h2 or h3."""
    heads = list(re.finditer(r'<h([23]) id="([^"]+)"', body))
    found = {}
    for i, head in enumerate(heads):
        if head[2].startswith(prefix):
            end = heads[i + 1].start() if i + 1 < len(heads) else len(body)
            found[head[2][len(prefix):]] = plain(body[head.start():end])
    return found


@pytest.fixture(scope="module")
def settings_page(docs_site) -> str:
    return article(docs_site, "reference/settings")


def test_every_group_has_its_section(settings_page):
    groups = {f.metadata["group"] for f in FIELDS}
    assert groups <= set(GROUP_TITLES)
    for key, title in GROUP_TITLES.items():
        assert f'<h2 id="group-{key}">' in settings_page, f"no section #group-{key}"
        assert title in plain(settings_page)


def test_every_field_and_no_other(settings_page):
    entries = sections(settings_page, "setting-")
    assert set(entries) == {f.name for f in FIELDS}, (
        f"missing: {sorted({f.name for f in FIELDS} - set(entries))}, "
        f"not in RunConfig: {sorted(set(entries) - {f.name for f in FIELDS})}")
    # In the dataclass's (the form's) group order: each field's entry sits in its group's section.
    order = [m[1] for m in re.finditer(r'<h[23] id="((?:group|setting)-[a-z_0-9]+)"', settings_page)]
    group = None
    for anchor in order:
        if anchor.startswith("group-"):
            group = anchor[len("group-"):]
        else:
            name = anchor[len("setting-"):]
            assert RunConfig.__dataclass_fields__[name].metadata["group"] == group, f"{name} outside #group-{group}"


@pytest.mark.parametrize("field", FIELDS, ids=[f.name for f in FIELDS])
def test_field_entry_says_what_the_dataclass_says(settings_page, field):
    text = sections(settings_page, "setting-")[field.name]
    default = RunConfig().to_dict()[field.name]
    expected = {
        "type": f"Type: {field.type}",
        "default": "Default: " + ("empty" if default is None else json.dumps(default)),
        "help": re.sub(r"\s+", " ", field.metadata["help"]),
    }
    choices = literal_choices(field.type)
    if choices:
        expected["bounds"] = "Bounds: one of " + ", ".join(json.dumps(c) for c in choices)
    elif "bounds" in field.metadata:
        expected["bounds"] = f"Bounds: {field.metadata['bounds']}"
    else:
        assert str(field.type) not in ("int", "float", "int | None", "float | None"), "a number field needs bounds"
    when = RunConfig.field_conditions().get(field.name)
    if not when:
        expected["condition"] = "Read: always"
    else:
        for key, values in when.items():
            if key == PROGRAM_OPTIMIZES_PROMPTS:
                expected[key] = "the program is a DSPy program"
            else:
                expected[key] = f"{key} is " + " or ".join(values)
    presets = [(name, values[field.name]) for name, values in PRESETS.items() if field.name in values]
    for name, value in presets:
        expected[f"preset {name}"] = f"{name}: {json.dumps(value)}"
    if not presets:
        expected["presets"] = "Presets: none"
    for what, fragment in expected.items():
        assert fragment in text, f"{field.name}: the page does not say its {what} ({fragment!r}):\n{text}"


def source_cohort_names() -> set[str]:
    names = set()
    for folder in SOURCE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            names |= set(re.findall(r"\bCOHORT_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")))
    return names


def test_every_cohort_variable_of_the_source_is_documented(docs_site):
    text = plain(article(docs_site, "reference/environment"))
    names = source_cohort_names()
    assert len(names) > 30  # the grep found the source
    documented = set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", text))
    missing = sorted(names - documented)
    assert not missing, f"COHORT_* names of the source missing from reference/environment: {missing}"


def test_every_variable_the_settings_read_is_documented(docs_site):
    text = plain(article(docs_site, "reference/environment"))
    settings = "".join((ROOT / "webapp" / name).read_text() for name in ("settings.py", "settings_celery.py"))
    read = set(re.findall(r"env(?:\.[a-z_]+)?\(\s*\"([A-Z][A-Z0-9_]+)\"", settings)) | {"DATABASE_URL", "REDIS_URL",
                                                                                     "COHORT_VAR_DIR"}
    documented = set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", text))
    assert not sorted(read - documented), f"settings read but not documented: {sorted(read - documented)}"


def test_every_command_is_on_the_cli_page(docs_site):
    from cohort.__main__ import main as cohort_main
    from docs_hooks.cli_page import parser_of, subcommands
    from trainer.run.cli import main as trainer_main

    text = plain(article(docs_site, "reference/cli"))
    expected = [f"python -m trainer {name}" for name, _, _ in subcommands(parser_of(trainer_main))]
    assert "python -m trainer train" in expected and "python -m trainer models build" in expected
    expected += [f"cohort {name}" for name, _, _ in subcommands(parser_of(cohort_main))]
    assert "cohort sync" in expected
    commands = sorted(p.stem for p in ROOT.glob("webapp/*/management/commands/*.py") if not p.name.startswith("_"))
    assert "launch_run" in commands
    expected += [f"manage.py {name}" for name in commands]
    phony = re.findall(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    targets = [t for line in phony for t in line.split()]
    assert "run" in targets and "test" in targets
    expected += [f"make {t}" for t in targets]
    missing = [command for command in expected if command not in text]
    assert not missing, f"commands missing from reference/cli: {missing}"
    # The parsers' own help is on the page, options and all.
    for option in ("--run-dir", "--resume", "--wheel", "--token", "--set", "--sweep"):
        assert option in text, option


def test_every_endpoint_of_the_schema_is_on_the_rest_api_page(docs_site):
    from drf_spectacular.generators import SchemaGenerator

    text = plain(article(docs_site, "reference/rest-api"))
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method in ("get", "post", "put", "patch", "delete"):
                assert f"{method.upper()} {path}" in text, f"{method.upper()} {path}"
                for parameter in operation.get("parameters", []):
                    assert parameter["name"] in text
                for status in operation.get("responses", {}):
                    assert status in text
    assert "/api/docs/" in text


@pytest.mark.parametrize(("page", "names"), [
    ("reference/sdk", ["init", "Run", "log_rollouts", "finish"]),
    ("reference/client", ["Client", "metrics", "rollouts", "download_adapter"]),
    ("reference/trl", ["CohortCallback", "cohort_metrics"]),
    ("reference/plugins", ["AgentProgram", "StepResult", "Reward", "get_reward", "PluginGroup", "cohort.programs",
                           "cohort.rewards", "cohort-hotpot"]),
])
def test_docstring_pages_document_their_names(docs_site, page, names):
    text = plain(article(docs_site, page))
    assert "STUB" not in text
    for name in names:
        assert name in text, f"{page}: {name}"
