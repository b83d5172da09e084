"""Retention that stays verifiable: runs archived as audit bundles, removed, and tombstoned."""
