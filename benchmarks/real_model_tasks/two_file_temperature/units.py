def celsius_to_fahrenheit(value):
    """Degrees Celsius in degrees Fahrenheit."""
    return value * 9 / 5 + 32
