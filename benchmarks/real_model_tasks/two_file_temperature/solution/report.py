from units import celsius_to_fahrenheit, fahrenheit_to_celsius


def format_reading(value, unit):
    """A reading in both units, e.g. "21.5 °C / 70.7 °F"."""
    if unit == "C":
        celsius, fahrenheit = value, celsius_to_fahrenheit(value)
    elif unit == "F":
        celsius, fahrenheit = fahrenheit_to_celsius(value), value
    else:
        raise ValueError(f"unknown unit: {unit}")
    return f"{celsius:.1f} °C / {fahrenheit:.1f} °F"
