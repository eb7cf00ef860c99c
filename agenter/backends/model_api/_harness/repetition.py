"""A response that repeats itself until the output limit cuts it (a small model's loop).

Measured on the real-model benchmark (Qwen2.5-Coder-1.5B, temperature 0, min stack): the model
wrote the class's methods over and over inside one code block until max_tokens cut it. Asked to
continue where it stopped, with the repetition in its context, it went on repeating: three
cut-off responses of 2,048 tokens, a compaction, then the same again, until the 600 s budget ran
out (11,245 generated tokens, nothing written). Aider stops at such a cut-off.

`repeating_tail(text)` finds it without guessing at meaning: the reply's last lines (the final,
possibly cut, line left out) are one group of lines written at least REPEATS times in a row,
spanning at least MIN_LINES lines and more than a quarter of the reply's lines.
"""

from __future__ import annotations

import re

__all__ = ["MIN_LINES", "REPEATS", "repeating_tail"]

#: How many times in a row a group of lines must appear at the end of the reply.
REPEATS = 3
#: The least number of lines the repetition spans (a few equal lines are ordinary code).
MIN_LINES = 12
#: The longest group of lines looked for.
_MAX_PERIOD = 80
#: Numbers do not count: a numbered list that says the same things again is a repetition too
#: (measured: "54. Added a check ...", "55. Added a check ...", to the output limit).
_DIGITS = re.compile(r"\d+")


def repeating_tail(text: str) -> int | None:
    """Where the repetition at the end of `text` begins after its first round: the offset of
    the line that starts the second of REPEATS or more rounds of one group of lines at the end
    of `text` (its last line left out: the cut may be in it), so `text[:offset]` keeps what came
    before and one round. None when there is no such tail, or it spans fewer than MIN_LINES
    lines or no more than a quarter of the reply's lines. Blank lines, trailing spaces and the
    digits of numbers do not count."""
    lines: list[tuple[str, int]] = []  # (the line as compared, where it starts)
    offset = 0
    for raw in text.splitlines(keepends=True)[:-1]:
        line = _DIGITS.sub("0", raw.rstrip())
        if line:
            lines.append((line, offset))
        offset += len(raw)
    shapes = [line for line, _ in lines]
    count = len(shapes)
    for period in range(1, min(_MAX_PERIOD, count // REPEATS) + 1):
        unit = shapes[count - period:]
        repeats = 1
        while (first := count - (repeats + 1) * period) >= 0 and shapes[first:first + period] == unit:
            repeats += 1
        span = repeats * period
        if repeats >= REPEATS and span >= MIN_LINES and 4 * span > count:
            return lines[count - (repeats - 1) * period][1]
    return None
