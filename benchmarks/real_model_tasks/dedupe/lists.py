def dedupe(items: list) -> list:
    """The items of `items`, each only once, in the order they first appear."""
    raise NotImplementedError
