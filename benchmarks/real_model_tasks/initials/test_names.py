from names import initials


def test_two_words():
    assert initials("Ada Lovelace") == "A.L."


def test_lowercase_is_upper_cased():
    assert initials("grace brewster hopper") == "G.B.H."


def test_extra_whitespace():
    assert initials("  alan   turing ") == "A.T."


def test_no_words():
    assert initials("") == ""
    assert initials("   ") == ""
