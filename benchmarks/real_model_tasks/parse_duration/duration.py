def parse_duration(text: str) -> int:
    """Seconds in a duration such as "1h30m"."""
    raise NotImplementedError


def format_duration(seconds: int) -> str:
    """A number of seconds written like "1h30m5s"."""
    raise NotImplementedError
