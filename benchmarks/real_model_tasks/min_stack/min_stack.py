class MinStack:
    """A stack that knows its smallest element."""
