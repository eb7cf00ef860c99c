def initials(name: str) -> str:
    """The initials of `name`, each followed by a dot."""
    raise NotImplementedError
