from config import parse_config

DEFAULTS = {"host": "localhost", "port": "8000", "workers": "2", "debug": "false"}


def load_settings(text):
    """The server's settings: the config text over the defaults, with typed values."""
    settings = dict(DEFAULTS)
    settings.update(parse_config(text))
    settings["port"] = int(settings["port"])
    return settings
