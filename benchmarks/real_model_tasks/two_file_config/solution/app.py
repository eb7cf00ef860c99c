from config import parse_config

DEFAULTS = {"host": "localhost", "port": "8000", "workers": "2", "debug": "false"}


def load_settings(text):
    """The server's settings: the config text over the defaults, with typed values."""
    settings = dict(DEFAULTS)
    settings.update(parse_config(text))
    settings["port"] = int(settings["port"])
    settings["workers"] = int(settings["workers"])
    debug = settings["debug"].lower()
    if debug not in ("true", "false"):
        raise ValueError(f"debug must be true or false, not {settings['debug']!r}")
    settings["debug"] = debug == "true"
    return settings
