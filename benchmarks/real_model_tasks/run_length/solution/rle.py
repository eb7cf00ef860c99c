import itertools
import re


def encode(text: str) -> str:
    """Each run of one character as its count and the character."""
    return "".join(f"{len(list(run))}{char}" for char, run in itertools.groupby(text))


def decode(code: str) -> str:
    """The text `encode` made `code` from."""
    return "".join(char * int(count) for count, char in re.findall(r"(\d+)(\D)", code))
