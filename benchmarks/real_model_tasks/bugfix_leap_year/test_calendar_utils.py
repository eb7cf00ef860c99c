import pytest

from calendar_utils import days_in_month, days_in_year, is_leap_year


@pytest.mark.parametrize("year, leap", [
    (1996, True), (1997, False), (1900, False), (2000, True), (2100, False), (2400, True), (2024, True),
])
def test_is_leap_year(year, leap):
    assert is_leap_year(year) is leap


def test_february():
    assert days_in_month(1900, 2) == 28
    assert days_in_month(2000, 2) == 29
    assert days_in_month(2023, 2) == 28


def test_other_months():
    assert days_in_month(1900, 1) == 31
    assert days_in_month(2000, 4) == 30
    with pytest.raises(ValueError):
        days_in_month(2000, 13)


def test_days_in_year():
    assert days_in_year(1900) == 365
    assert days_in_year(2000) == 366
    assert days_in_year(2023) == 365
