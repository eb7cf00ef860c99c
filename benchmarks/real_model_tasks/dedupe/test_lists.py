from lists import dedupe


def test_keeps_first_occurrences_in_order():
    assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]


def test_strings():
    assert dedupe(["b", "a", "b"]) == ["b", "a"]


def test_empty():
    assert dedupe([]) == []


def test_input_unchanged():
    items = [1, 1, 2]
    dedupe(items)
    assert items == [1, 1, 2]
