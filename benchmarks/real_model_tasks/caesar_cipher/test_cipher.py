from cipher import shift, unshift


def test_example():
    assert shift("Hello, World!", 3) == "Khoor, Zruog!"


def test_wraps_around():
    assert shift("xyz XYZ", 3) == "abc ABC"


def test_negative_and_large_keys():
    assert shift("abc", -1) == "zab"
    assert shift("abc", 27) == "bcd"
    assert shift("abc", 26) == "abc"


def test_other_characters_unchanged():
    assert shift("123 ?! é", 5) == "123 ?! é"


def test_unshift():
    for key in (0, 1, 13, 25, -7, 40):
        assert unshift(shift("The quick brown fox, 42.", key), key) == "The quick brown fox, 42."
