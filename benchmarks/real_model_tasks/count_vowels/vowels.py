def count_vowels(text: str) -> int:
    """How many vowels `text` holds."""
    raise NotImplementedError
