def last_n(items, n):
    """The last `n` items of `items`."""
    return items[-n - 1:]
