"""Temperature 0: the two paths compared, the drift bound, the rule, the divergence rate."""
