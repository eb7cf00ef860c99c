def mean(values):
    """The arithmetic mean."""
    if not values:
        raise ValueError("no values")
    return sum(values) / len(values)


def median(values):
    """The middle value once sorted."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle]


def mode(values):
    """The most common value (the smallest one on a tie)."""
    if not values:
        raise ValueError("no values")
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return min(counts, key=lambda value: (-counts[value], value))
