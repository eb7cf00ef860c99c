import pytest

from report import format_reading
from units import celsius_to_fahrenheit, fahrenheit_to_celsius


def test_conversions():
    assert fahrenheit_to_celsius(212) == pytest.approx(100)
    assert fahrenheit_to_celsius(-40) == pytest.approx(-40)
    assert fahrenheit_to_celsius(celsius_to_fahrenheit(21.5)) == pytest.approx(21.5)


def test_celsius_reading():
    assert format_reading(21.5, "C") == "21.5 °C / 70.7 °F"


def test_fahrenheit_reading():
    assert format_reading(70.7, "F") == "21.5 °C / 70.7 °F"
    assert format_reading(32, "F") == "0.0 °C / 32.0 °F"


def test_unknown_unit():
    with pytest.raises(ValueError):
        format_reading(300, "K")
