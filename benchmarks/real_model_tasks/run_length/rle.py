def encode(text: str) -> str:
    """Each run of one character as its count and the character."""
    raise NotImplementedError


def decode(code: str) -> str:
    """The text `encode` made `code` from."""
    raise NotImplementedError
