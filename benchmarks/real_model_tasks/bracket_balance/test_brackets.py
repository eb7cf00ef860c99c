import pytest

from brackets import first_problem, is_balanced


@pytest.mark.parametrize("text", ["", "abc", "()", "f(a[1], {b: 2})", "{[()()]}"])
def test_balanced(text):
    assert is_balanced(text) is True
    assert first_problem(text) is None


@pytest.mark.parametrize("text, index", [
    ("(]", 1), (")", 0), ("a)b(", 1), ("(()", 0), ("x[(])", 3), ("{}[", 2), ("([{", 0), ("(a]b)", 2),
])
def test_unbalanced(text, index):
    assert is_balanced(text) is False
    assert first_problem(text) == index
