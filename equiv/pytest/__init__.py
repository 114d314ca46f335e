"""The pytest plugin and the session of checks it runs."""
