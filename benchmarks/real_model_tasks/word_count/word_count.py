def count_words(text: str) -> dict[str, int]:
    """Count each word of `text`, case-insensitively."""
    raise NotImplementedError
