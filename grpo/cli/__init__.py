"""The front door: the preflight, the settings rules, the output check, compare."""
