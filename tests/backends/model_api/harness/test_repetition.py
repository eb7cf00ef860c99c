"""A response that repeats itself until the output limit (repetition.py): found by its lines."""

from __future__ import annotations

from agenter.backends.model_api._harness.repetition import RepetitionWatch, repeating_tail

METHODS = "    def pop(self):\n        return self.stack.pop()\n\n    def peek(self):\n        return self.stack[-1]\n\n"


def test_a_group_of_lines_repeated_to_the_cut_is_found_and_one_round_kept() -> None:
    head = "Here is the class:\n```python\nclass MinStack:\n    def __init__(self):\n        self.stack = []\n\n"
    text = head + METHODS * 6 + "    def po"
    offset = repeating_tail(text)
    assert offset is not None and text[:offset] == head + METHODS


def test_a_numbered_list_that_says_the_same_again_is_a_repetition() -> None:
    text = "The changes:\n" + "".join(f"{n}. Added a check for spaces.\n{n + 1}. Added a check for hyphens.\n"
                                      for n in range(1, 30, 2)) + "31. Add"
    offset = repeating_tail(text)
    assert offset is not None and text[:offset].endswith("2. Added a check for hyphens.\n")


def test_an_ordinary_long_answer_is_not() -> None:
    distinct = "".join(f"def {name}(x):\n    return x\n\n\n" for name in ("add", "sub", "mul", "div", "neg", "pos"))
    assert repeating_tail(distinct + "def cut") is None
    # A few equal lines are ordinary code, and a short tail of a long answer is not a loop.
    assert repeating_tail("x = [\n" + "    0,\n" * 8 + "]\nend") is None
    assert repeating_tail("".join(f"line {c}\n" for c in "abcdefghijklmnopqrstuvwxyz" * 3) + "- a\n" * 13 + "-") is None


def test_the_watch_stops_a_stream_once_it_repeats_and_not_before() -> None:
    head = "Here is the class:\n```python\nclass MinStack:\n    def __init__(self):\n        self.stack = []\n\n"
    watch = RepetitionWatch()
    pieces = [head] + [METHODS] * 40
    stopped_at = next(i for i, piece in enumerate(pieces) if watch.feed(piece))
    assert 5 <= stopped_at < 40  # looked at every WATCH_EVERY characters, stricter than at the cut
    assert watch.text == "".join(pieces[:stopped_at + 1])
    # Distinct code of the same length is never stopped.
    distinct = RepetitionWatch()
    assert not any(distinct.feed(f"def f{name}(x):\n    return x + {len(name)}\n\n\n")
                   for name in [chr(97 + i) * (1 + i // 26) for i in range(300)])


def test_the_watch_lets_rows_of_numbers_stream() -> None:
    """Digits do not count, so rows of numbers look like one line repeated: data, not a loop."""
    watch = RepetitionWatch()
    assert not any(watch.feed(f"{n}, {n * n}, {n * 3}\n") for n in range(2000))
    assert repeating_tail("".join(f"{n}, {n * n}\n" for n in range(100)) + "1") is not None  # at a cut-off it is


def test_in_json_a_files_lines_are_its_escapes() -> None:
    loop = "".join(f"    # step {n}: check the sign\\n    # then return it\\n" for n in range(40))
    reply = '{"summary": "Fix.", "files": [{"path": "a.py", "content": "def f(x):\\n' + loop
    assert repeating_tail(reply) is None  # one line, as plain text
    cut = repeating_tail(reply, escaped=True)
    assert cut is not None and reply[:cut].count("check the sign") <= 2  # about one round kept
    watch = RepetitionWatch(escaped=True)
    assert any(watch.feed(reply[i:i + 100]) for i in range(0, len(reply), 100))
