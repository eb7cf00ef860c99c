from units import celsius_to_fahrenheit


def format_reading(value, unit):
    """A reading in both units, e.g. "21.5 °C / 70.7 °F"."""
    if unit != "C":
        raise ValueError(f"unknown unit: {unit}")
    celsius = value
    fahrenheit = celsius_to_fahrenheit(value)
    return f"{celsius:.1f} °C / {fahrenheit:.1f} °F"
