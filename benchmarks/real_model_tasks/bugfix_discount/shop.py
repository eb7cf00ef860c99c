def apply_discount(price, percent):
    """`price` with `percent` percent taken off."""
    return round(price * (1 - percent), 2)
