import pytest

from duration import format_duration, parse_duration


@pytest.mark.parametrize("text, seconds", [
    ("2h", 7200), ("45s", 45), ("1h30m", 5400), ("1h0m5s", 3605), ("90m", 5400),
    ("  10m3s ", 603), ("0s", 0), ("1h1s", 3601),
])
def test_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "   ", "5", "3d", "1m2h", "1h2h", "-5s", "h", "1.5h", "1h 30m"])
def test_parse_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("seconds, text", [(5405, "1h30m5s"), (3600, "1h"), (61, "1m1s"), (0, "0s"), (7260, "2h1m")])
def test_format(seconds, text):
    assert format_duration(seconds) == text


def test_format_rejects_negative():
    with pytest.raises(ValueError):
        format_duration(-1)


def test_round_trip():
    for seconds in (1, 59, 60, 3599, 3601, 86399):
        assert parse_duration(format_duration(seconds)) == seconds
