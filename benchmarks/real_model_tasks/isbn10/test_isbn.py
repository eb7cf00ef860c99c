import pytest

from isbn import is_valid_isbn10, to_isbn13


@pytest.mark.parametrize("code", ["3-598-21508-8", "3598215088", "3-598-21507-X", "0-306-40615-2", "0306406152"])
def test_valid(code):
    assert is_valid_isbn10(code) is True


@pytest.mark.parametrize("code", [
    "3-598-21508-9", "3-598-21507-A", "3-598-2X507-9", "3-598-21507", "3598215088-1", "", "X-598-21507-0",
    "3 598 21508 8",
])
def test_invalid(code):
    assert is_valid_isbn10(code) is False


def test_to_isbn13():
    assert to_isbn13("0-306-40615-2") == "9780306406157"
    assert to_isbn13("3-598-21508-8") == "9783598215087"
    assert to_isbn13("3-598-21507-X") == "9783598215070"


def test_to_isbn13_rejects_invalid():
    with pytest.raises(ValueError):
        to_isbn13("3-598-21508-9")
