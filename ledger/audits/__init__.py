"""Audits: `agentfootprint.audit/1` bundles verified as the framework verifies them, stored chains
re-walked, and signed anchors of every chain head."""
