def count_vowels(text: str) -> int:
    """How many vowels `text` holds."""
    return sum(1 for ch in text.lower() if ch in "aeiou")
