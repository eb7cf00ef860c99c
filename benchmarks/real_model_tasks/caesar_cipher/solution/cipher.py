import string


def shift(text: str, key: int) -> str:
    """Each letter of `text` moved `key` places along the alphabet."""
    out = []
    for char in text:
        for alphabet in (string.ascii_lowercase, string.ascii_uppercase):
            if char in alphabet:
                char = alphabet[(alphabet.index(char) + key) % 26]
                break
        out.append(char)
    return "".join(out)


def unshift(text: str, key: int) -> str:
    """The text `shift(text, key)` came from."""
    return shift(text, -key)
