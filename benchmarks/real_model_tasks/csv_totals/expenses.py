def totals(text: str) -> dict[str, float]:
    """The amount per name in a "name,amount" list with a header line."""
    raise NotImplementedError
