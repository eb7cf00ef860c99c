from rle import decode, encode


def test_encode():
    assert encode("aaabcc") == "3a1b2c"
    assert encode("abc") == "1a1b1c"
    assert encode("") == ""


def test_long_runs_and_spaces():
    assert encode("x" * 12 + "  y") == "12x2 1y"


def test_decode():
    assert decode("3a1b2c") == "aaabcc"
    assert decode("12x2 1y") == "x" * 12 + "  y"
    assert decode("") == ""


def test_round_trip():
    text = "WWWWWWWWWWWWBWWWWWWWWWWWWBBBWWWWWWWWWWWWWWWWWWWWWWWWB"
    assert decode(encode(text)) == text
