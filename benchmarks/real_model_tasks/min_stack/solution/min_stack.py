class MinStack:
    """A stack that knows its smallest element."""

    def __init__(self):
        self._items = []
        self._minimums = []

    def push(self, value):
        self._items.append(value)
        self._minimums.append(value if not self._minimums else min(value, self._minimums[-1]))

    def pop(self):
        if not self._items:
            raise IndexError("pop from an empty stack")
        self._minimums.pop()
        return self._items.pop()

    def peek(self):
        if not self._items:
            raise IndexError("peek at an empty stack")
        return self._items[-1]

    def minimum(self):
        if not self._minimums:
            raise IndexError("minimum of an empty stack")
        return self._minimums[-1]

    def __len__(self):
        return len(self._items)
