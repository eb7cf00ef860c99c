def initials(name: str) -> str:
    """The initials of `name`, each followed by a dot."""
    return "".join(word[0].upper() + "." for word in name.split())
