"""The health rules: a replication's state, its lag verdicts and the overview built from them."""
