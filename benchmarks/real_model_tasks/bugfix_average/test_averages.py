from averages import average, average_of_positive


def test_average():
    assert average([1, 2, 3, 4]) == 2.5


def test_empty_is_none():
    assert average([]) is None


def test_average_of_positive():
    assert average_of_positive([-5, 2, 4]) == 3


def test_no_positive_is_none():
    assert average_of_positive([-1, 0]) is None
