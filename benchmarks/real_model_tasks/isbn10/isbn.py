def is_valid_isbn10(code: str) -> bool:
    """Whether `code` is a valid ISBN-10 (hyphens allowed)."""
    raise NotImplementedError


def to_isbn13(code: str) -> str:
    """The ISBN-13 of a valid ISBN-10."""
    raise NotImplementedError
