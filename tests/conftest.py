pytest_plugins = ["agenter.testing.pytest_plugin"]
