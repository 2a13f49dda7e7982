"""Topic metrics: one metric of one replicated topic over a time range."""
