def to_roman(number: int) -> str:
    """The Roman numeral of `number` (1..3999)."""
    raise NotImplementedError


def from_roman(numeral: str) -> int:
    """The integer a Roman numeral stands for."""
    raise NotImplementedError
