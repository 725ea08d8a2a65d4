"""How the manual's code blocks are read: what makes a block run, be saved as a file, or be skipped
with its reason, and which pages are refused (tests/docs/blocks.py)."""

from __future__ import annotations

import pytest

from tests.docs.blocks import BlockError, page_blocks


def write(tmp_path, text: str):
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


def test_blocks_in_order_with_language_title_and_reason(tmp_path):
    page = write(tmp_path, "\n".join([
        "# A page", "", "```sh", "echo one", "```", "",
        '```toml title="run.toml"', "steps = 2", "```",
        "<!-- not-run: needs a GPU with 24 GB -->", "```python", "import vllm", "```",
        "```text", "step 1 reward 0.5", "```",
    ]))
    blocks = page_blocks(page)
    assert [(b.line, b.lang, b.title, b.not_run, b.runs) for b in blocks] == [
        (3, "sh", None, None, True), (7, "toml", "run.toml", None, True),
        (11, "python", None, "needs a GPU with 24 GB", False), (14, "text", None, None, False)]
    assert blocks[0].text == "echo one\n"


def test_a_block_inside_a_list_item_loses_its_indent(tmp_path):
    page = write(tmp_path, "1. Run it:\n\n    ```sh\n    echo a\n      echo b\n    ```\n")
    assert page_blocks(page)[0].text == "echo a\n  echo b\n"


def test_a_longer_fence_holds_a_shorter_one(tmp_path):
    page = write(tmp_path, "````text\n```sh\nnot a block\n```\n````\n")
    [block] = page_blocks(page)
    assert block.lang == "text" and "not a block" in block.text


@pytest.mark.parametrize("text, error", [
    ("```\necho\n```\n", "must name its language"),
    ("```yaml\na: 1\n```\n", "CI cannot run a `yaml` block"),
    ("<!-- not-run: -->\n```sh\necho\n```\n", "needs a reason"),
    ("<!-- not-run: later -->\n\n```sh\necho\n```\n", "just before a fence"),
    ("```sh\necho\n", "never closed"),
])
def test_refused_pages_name_the_line(tmp_path, text, error):
    with pytest.raises(BlockError, match=error) as raised:
        page_blocks(write(tmp_path, text))
    assert "page.md:1" in str(raised.value)


def test_a_language_ci_cannot_run_is_fine_with_a_reason(tmp_path):
    [block] = page_blocks(write(tmp_path, "<!-- not-run: a compose file -->\n```yaml\na: 1\n```\n"))
    assert not block.runs and block.not_run == "a compose file"
