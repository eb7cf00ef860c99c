def shift(text: str, key: int) -> str:
    """Each letter of `text` moved `key` places along the alphabet."""
    raise NotImplementedError


def unshift(text: str, key: int) -> str:
    """The text `shift(text, key)` came from."""
    raise NotImplementedError
