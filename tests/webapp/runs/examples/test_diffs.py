"""Word-level diffs: exactly the changed words are marked, whitespace alone is no change, the new
text's layout is kept, and the HTML escapes what the answers hold."""

import pytest

from webapp.runs.examples.diffs import Piece, changed_words, diff_html, word_diff


@pytest.mark.parametrize("old, new, inserted, deleted, html", [
    ("a b c", "a x c", ["x"], ["b"], "a <del>b</del> <ins>x</ins> c"),
    ("b c", "c", [], ["b"], "<del>b</del> c"),
    ("a b", "a b c", ["c"], [], "a b <ins>c</ins>"),
    ("", "x y", ["x", "y"], [], "<ins>x y</ins>"),
    ("x y", None, [], ["x", "y"], "<del>x y</del>"),
    ("The answer is 4", "The answer is\n 5 because", ["5", "because"], ["4"],
     "The answer is\n <del>4</del> <ins>5 because</ins>"),
    ("the the the cat", "the the the dog", ["dog"], ["cat"], "the the the <del>cat</del> <ins>dog</ins>"),
])
def test_exactly_the_changed_words_are_marked(old, new, inserted, deleted, html):
    pieces = word_diff(old, new)
    assert changed_words(pieces) == (inserted, deleted)
    assert str(diff_html(pieces)) == html


def test_whitespace_alone_is_no_change_and_the_new_layout_is_kept():
    pieces = word_diff("a  b\tc", "a\nb c")
    assert pieces == [Piece("same", "a\nb c")]


def test_a_common_word_in_a_long_text_is_still_matched():
    # difflib's autojunk would call "x" junk in a text this long and mark every one as changed.
    old = " ".join(["x"] * 300 + ["end"])
    new = " ".join(["x"] * 300 + ["stop"])
    assert changed_words(word_diff(old, new)) == (["stop"], ["end"])


def test_answers_are_escaped():
    html = str(diff_html(word_diff("<b>ok</b>", "<script>alert(1)</script> ok")))
    assert "<script>" not in html and "&lt;script&gt;" in html and html.count("<ins>") == 1
