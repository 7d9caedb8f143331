"""service."""
