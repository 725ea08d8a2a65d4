"""Fixtures for the dataset tests: staging under the test's tmp dir, small file builders."""

import json

import pytest

from tests.conftest import SHARED_DATA

# Rows per file of ../shared/data, as its README states them.
README_COUNTS = {
    "banking77/train.jsonl": 10_003, "banking77/test.jsonl": 3_080,
    "gsm8k/test.jsonl": 1_319, "gsm8k/train.jsonl": 1_000,
    "hotpotqa/train.jsonl": 300, "hotpotqa/dev.jsonl": 150, "hotpotqa/corpus.jsonl": 4_429,
    "hover/dev.jsonl": 600,
    "toolrl/test.jsonl": 80, "toolrl/sft.jsonl": 399,
    "pupa/tnb.jsonl": 237, "pupa/new.jsonl": 300,
}
KIND_OF_DIR = {"banking77": "classification", "gsm8k": "math", "hotpotqa": "qa", "hover": "claim",
               "toolrl": "toolcall", "pupa": "privacy"}


def kind_of(relative: str) -> str:
    return "corpus" if relative.endswith("corpus.jsonl") else KIND_OF_DIR[relative.split("/")[0]]


@pytest.fixture(autouse=True)
def upload_dir(settings, tmp_path):
    settings.COHORT_DATASET_UPLOAD_DIR = tmp_path / "uploads"
    return settings.COHORT_DATASET_UPLOAD_DIR


@pytest.fixture
def write_jsonl(tmp_path):
    def write(rows, name="data.jsonl"):
        path = tmp_path / name
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        return path

    return write


@pytest.fixture
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared data folder is missing: {SHARED_DATA}")
    return SHARED_DATA
