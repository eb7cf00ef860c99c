def average(numbers):
    """The arithmetic mean of `numbers`."""
    return sum(numbers) / len(numbers)


def average_of_positive(numbers):
    """The mean of the numbers above zero."""
    return average([n for n in numbers if n > 0])
