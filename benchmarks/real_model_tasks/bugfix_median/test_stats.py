import pytest

from stats import mean, median, mode


def test_mean_and_mode_still_work():
    assert mean([1, 2, 3, 4]) == 2.5
    assert mode([3, 1, 3, 1, 2]) == 1


def test_median_odd():
    assert median([5, 1, 3]) == 3
    assert median([7]) == 7


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5
    assert median([10, 20]) == 15
    assert median([1, 1, 2, 2]) == 1.5


def test_median_does_not_change_its_argument():
    values = [3, 1, 2]
    median(values)
    assert values == [3, 1, 2]


def test_median_empty():
    with pytest.raises(ValueError, match="no values"):
        median([])
