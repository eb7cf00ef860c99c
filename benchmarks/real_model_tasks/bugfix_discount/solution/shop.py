def apply_discount(price, percent):
    """`price` with `percent` percent taken off."""
    if not 0 <= percent <= 100:
        raise ValueError("percent must be between 0 and 100")
    return round(price * (1 - percent / 100), 2)
