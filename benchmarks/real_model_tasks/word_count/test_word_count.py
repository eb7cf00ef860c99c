from word_count import count_words


def test_single_word():
    assert count_words("word") == {"word": 1}


def test_repeated_words_any_case():
    assert count_words("Go go GO stop") == {"go": 3, "stop": 1}


def test_punctuation_separates_words():
    assert count_words("one,two;three...one!") == {"one": 2, "two": 1, "three": 1}


def test_digits_are_part_of_words():
    assert count_words("route 66 and route66") == {"route": 1, "66": 1, "and": 1, "route66": 1}


def test_apostrophes():
    assert count_words("'Hello' don't say 'don't'") == {"hello": 1, "don't": 2, "say": 1}


def test_no_words():
    assert count_words("") == {}
    assert count_words(" ,.! ") == {}
