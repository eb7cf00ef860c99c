import pytest

from roman import from_roman, to_roman


@pytest.mark.parametrize("number, numeral", [
    (1, "I"), (3, "III"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (90, "XC"),
    (400, "CD"), (944, "CMXLIV"), (1994, "MCMXCIV"), (2024, "MMXXIV"), (3999, "MMMCMXCIX"),
])
def test_both_ways(number, numeral):
    assert to_roman(number) == numeral
    assert from_roman(numeral) == number


def test_lower_case():
    assert from_roman("xlii") == 42


@pytest.mark.parametrize("number", [0, -5, 4000])
def test_out_of_range(number):
    with pytest.raises(ValueError):
        to_roman(number)


@pytest.mark.parametrize("numeral", ["", "ABC", "X1"])
def test_not_a_numeral(numeral):
    with pytest.raises(ValueError):
        from_roman(numeral)
