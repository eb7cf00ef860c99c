def last_n(items, n):
    """The last `n` items of `items`."""
    if n <= 0:
        return []
    return items[-n:]
