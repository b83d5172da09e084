"""The explorer: run lists and search, and a run's page and its tabs."""
