"""Refusals: every deny, halt, rejection and validation failure of a run, counted, and each traced
back through its tool call and rule to what caused it and what came next."""
