"""Project tools: one-off checks and maintenance commands of the repository itself (not part of
the library, not studies)."""
