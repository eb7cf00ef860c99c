def parse_config(text: str) -> dict[str, str]:
    """The `key = value` lines of a config text."""
    result: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"not a setting: {line!r}")
        result[key.strip()] = value.strip()
    return result
