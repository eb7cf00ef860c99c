def celsius_to_fahrenheit(value):
    """Degrees Celsius in degrees Fahrenheit."""
    return value * 9 / 5 + 32


def fahrenheit_to_celsius(value):
    """Degrees Fahrenheit in degrees Celsius."""
    return (value - 32) * 5 / 9
