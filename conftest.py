pytest_plugins = ("prereg.plugin",)
