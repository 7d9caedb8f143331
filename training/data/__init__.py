"""training/data."""
