def is_balanced(text: str) -> bool:
    """Whether every bracket in `text` is closed by its kind, in order."""
    raise NotImplementedError


def first_problem(text: str) -> int | None:
    """The index of the first unmatched bracket, or None."""
    raise NotImplementedError
