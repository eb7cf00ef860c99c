import pytest

from matrix import identity, multiply, transpose


def test_transpose():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]
    assert transpose([[7]]) == [[7]]


def test_multiply():
    a = [[1, 2], [3, 4], [5, 6]]
    b = [[1, 0, 2], [0, 1, 3]]
    assert multiply(a, b) == [[1, 2, 8], [3, 4, 18], [5, 6, 28]]


def test_multiply_by_identity():
    a = [[2, -1], [0.5, 3]]
    assert multiply(a, identity(2)) == a
    assert multiply(identity(2), a) == a


def test_identity():
    assert identity(1) == [[1]]
    assert identity(3) == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_shape_mismatch():
    with pytest.raises(ValueError):
        multiply([[1, 2]], [[1, 2]])


@pytest.mark.parametrize("bad", [[], [[]], [[1, 2], [3]]])
def test_not_a_matrix(bad):
    with pytest.raises(ValueError):
        transpose(bad)
    with pytest.raises(ValueError):
        multiply(bad, [[1]])


def test_arguments_unchanged():
    a = [[1, 2], [3, 4]]
    transpose(a)
    multiply(a, a)
    assert a == [[1, 2], [3, 4]]
