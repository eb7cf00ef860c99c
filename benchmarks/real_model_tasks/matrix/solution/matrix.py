def _check(m):
    if not m or not m[0] or any(len(row) != len(m[0]) for row in m):
        raise ValueError("not a matrix")


def transpose(m):
    """The rows of the result are the columns of `m`."""
    _check(m)
    return [list(column) for column in zip(*m)]


def multiply(a, b):
    """The matrix product a × b."""
    _check(a)
    _check(b)
    if len(a[0]) != len(b):
        raise ValueError("shapes do not match")
    columns = transpose(b)
    return [[sum(x * y for x, y in zip(row, column)) for column in columns] for row in a]


def identity(n):
    """The n × n identity matrix."""
    if n < 1:
        raise ValueError("n must be at least 1")
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]
