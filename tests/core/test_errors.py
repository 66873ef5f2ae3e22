"""errors.brief: a peer's value quoted in an error message, bounded whatever its size."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from logport.errors import brief

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text() | st.integers(), inner) | st.tuples(inner, inner),
    max_leaves=50,
)


@given(values, st.integers(min_value=10, max_value=300))
def test_a_quote_is_bounded(value: Any, limit: int) -> None:
    assert len(brief(value, limit)) <= limit + len(" (999999999 characters)")


def test_small_values_are_quoted_whole() -> None:
    assert brief("abc") == "'abc'"
    assert brief([1, "x", b"y"]) == "[1, 'x', b'y']"


def test_long_strings_and_bytes_say_how_long_they_were() -> None:
    assert brief("a" * 70000) == "'" + "a" * 196 + "... (70000 characters)"
    assert brief(b"\x00" * 5000, 20).endswith("... (5000 bytes)")


def test_a_huge_map_is_not_rendered_whole() -> None:
    blob = b"x" * 100_000
    huge = {str(i): [i, blob] for i in range(200_000)}  # a full repr would be 80 GB of text
    text = brief(huge)
    assert text.startswith("{'0': [0, b'xxx") and len(text) <= 200
    assert brief([[[[["deep"]]]]]) == "[[[[...]]]]"
