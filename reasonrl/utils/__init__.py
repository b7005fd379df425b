"""Small shared utilities: cache paths, atomic directory writes."""
