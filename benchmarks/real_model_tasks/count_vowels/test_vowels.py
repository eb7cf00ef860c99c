from vowels import count_vowels


def test_lowercase():
    assert count_vowels("banana") == 3


def test_uppercase_counts():
    assert count_vowels("AEIOU") == 5


def test_y_and_others_do_not_count():
    assert count_vowels("rhythm, 42!") == 0


def test_empty():
    assert count_vowels("") == 0
