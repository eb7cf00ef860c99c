_VALUES = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
           (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
_DIGITS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(number: int) -> str:
    """The Roman numeral of `number` (1..3999)."""
    if not 1 <= number <= 3999:
        raise ValueError("number out of range")
    out = []
    for value, letters in _VALUES:
        while number >= value:
            out.append(letters)
            number -= value
    return "".join(out)


def from_roman(numeral: str) -> int:
    """The integer a Roman numeral stands for."""
    numeral = numeral.upper()
    if not numeral or any(c not in _DIGITS for c in numeral):
        raise ValueError("not a Roman numeral")
    total = 0
    for i, c in enumerate(numeral):
        value = _DIGITS[c]
        if i + 1 < len(numeral) and _DIGITS[numeral[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
