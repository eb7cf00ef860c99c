import pytest

from min_stack import MinStack


def test_push_pop_peek():
    s = MinStack()
    s.push(3)
    s.push(7)
    assert len(s) == 2
    assert s.peek() == 7
    assert s.pop() == 7
    assert s.pop() == 3
    assert len(s) == 0


def test_minimum_follows_pops():
    s = MinStack()
    for value in [5, 3, 8, 1, 1, 9]:
        s.push(value)
    assert s.minimum() == 1
    s.pop()
    s.pop()
    assert s.minimum() == 1
    s.pop()
    assert s.minimum() == 3
    s.pop()
    s.pop()
    assert s.minimum() == 5


def test_negative_and_float_values():
    s = MinStack()
    s.push(2.5)
    s.push(-4)
    assert s.minimum() == -4


@pytest.mark.parametrize("method", ["pop", "peek", "minimum"])
def test_empty(method):
    s = MinStack()
    with pytest.raises(IndexError):
        getattr(s, method)()
    s.push(1)
    s.pop()
    with pytest.raises(IndexError):
        getattr(s, method)()
