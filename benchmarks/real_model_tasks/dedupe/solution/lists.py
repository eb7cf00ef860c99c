def dedupe(items: list) -> list:
    """The items of `items`, each only once, in the order they first appear."""
    seen = set()
    result = []
    for item in items:
        if item not in seen:
            seen.add(item)
            result.append(item)
    return result
