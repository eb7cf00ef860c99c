import pytest

from expenses import totals


def test_example():
    text = "name,amount\nana, 12.50\nbo,3\nana,0.25\n"
    assert totals(text) == pytest.approx({"ana": 12.75, "bo": 3.0})


def test_spaces_and_blank_lines():
    text = "name,amount\n\n  cy , 1.5 \n   \ncy,2\n"
    assert totals(text) == pytest.approx({"cy": 3.5})


def test_only_header_or_nothing():
    assert totals("name,amount\n") == {}
    assert totals("") == {}


def test_wrong_number_of_fields():
    with pytest.raises(ValueError, match="line 3"):
        totals("name,amount\nana,1\nbo,2,3\n")


def test_amount_not_a_number():
    with pytest.raises(ValueError, match="line 2"):
        totals("name,amount\nana,lots\n")


def test_line_numbers_count_blank_lines():
    with pytest.raises(ValueError, match="line 4"):
        totals("name,amount\n\nana,1\nbo\n")
