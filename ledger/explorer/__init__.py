"""The explorer: run lists and search, a run's page and its tabs, and refusals traced to their cause."""
