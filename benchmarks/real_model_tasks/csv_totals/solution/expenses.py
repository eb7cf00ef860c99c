def totals(text: str) -> dict[str, float]:
    """The amount per name in a "name,amount" list with a header line."""
    result: dict[str, float] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if number == 1 or not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 2:
            raise ValueError(f"line {number}: expected 2 fields, got {len(fields)}")
        try:
            amount = float(fields[1])
        except ValueError:
            raise ValueError(f"line {number}: {fields[1]!r} is not a number") from None
        result[fields[0]] = result.get(fields[0], 0.0) + amount
    return result
