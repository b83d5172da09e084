"""Asks: a paused run waiting for a person, the one decision it gets, and the hand-off that wakes
the waiting agent (waits.py) and tells its host (webhooks.py)."""
