"""Who may do what: projects, the agent keys that post into them, people's roles, and the record of
every admin change."""
