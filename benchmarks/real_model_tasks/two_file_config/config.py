def parse_config(text: str) -> dict[str, str]:
    """The `key = value` lines of a config text."""
    raise NotImplementedError
