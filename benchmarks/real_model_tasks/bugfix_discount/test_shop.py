import pytest

from shop import apply_discount


def test_fifteen_percent():
    assert apply_discount(200, 15) == 170.0


def test_no_discount():
    assert apply_discount(9.99, 0) == 9.99


def test_rounded():
    assert apply_discount(10, 33) == 6.7


@pytest.mark.parametrize("percent", [-1, 101])
def test_out_of_range(percent):
    with pytest.raises(ValueError):
        apply_discount(50, percent)
