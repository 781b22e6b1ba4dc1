"""Every table, worked example and figure of the seed texts as a checked claim.

`trustrl reproduce` runs them (registry.py, report.py); the claims live in claims_*.py.
"""
