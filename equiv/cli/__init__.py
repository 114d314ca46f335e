"""The command line: thin commands over the run, verdicts and report."""
