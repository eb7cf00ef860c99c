_PAIRS = {")": "(", "]": "[", "}": "{"}


def is_balanced(text: str) -> bool:
    """Whether every bracket in `text` is closed by its kind, in order."""
    return first_problem(text) is None


def first_problem(text: str) -> int | None:
    """The index of the first unmatched bracket, or None."""
    open_at: list[int] = []
    for index, char in enumerate(text):
        if char in "([{":
            open_at.append(index)
        elif char in _PAIRS:
            if not open_at or text[open_at[-1]] != _PAIRS[char]:
                return index
            open_at.pop()
    return open_at[0] if open_at else None
