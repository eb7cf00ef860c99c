def is_valid_isbn10(code: str) -> bool:
    """Whether `code` is a valid ISBN-10 (hyphens allowed)."""
    chars = code.replace("-", "")
    if len(chars) != 10 or not chars[:9].isdigit() or not (chars[9].isdigit() or chars[9] == "X"):
        return False
    values = [int(c) for c in chars[:9]] + [10 if chars[9] == "X" else int(chars[9])]
    return sum(v * w for v, w in zip(values, range(10, 0, -1))) % 11 == 0


def to_isbn13(code: str) -> str:
    """The ISBN-13 of a valid ISBN-10."""
    if not is_valid_isbn10(code):
        raise ValueError(f"not an ISBN-10: {code!r}")
    digits = "978" + code.replace("-", "")[:9]
    total = sum(int(d) * (1 if i % 2 == 0 else 3) for i, d in enumerate(digits))
    return digits + str((10 - total % 10) % 10)
