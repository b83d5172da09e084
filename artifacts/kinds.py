"""Artifact kinds, and the one vocabulary the framework mints under itself: a tool's result kind.

A kind is the consumer's vocabulary: the store and `wants` compare it by exact string equality and
hold it to no character rules (only non-blank, and no U+0000, which PostgreSQL text cannot keep).
A tool result placed in the store is minted under the tool's declared `Tool.resultKind` (9.70), or
by default `tool-result/<toolName>`; a declared kind follows the same rules as any kind.
"""

RESULT_KIND_PREFIX = "tool-result/"


def default_result_tool(kind: str) -> str | None:
    """The tool whose default result kind `kind` is (`tool-result/<toolName>`), or None."""
    if kind.startswith(RESULT_KIND_PREFIX) and len(kind) > len(RESULT_KIND_PREFIX):
        return kind[len(RESULT_KIND_PREFIX) :]
    return None
