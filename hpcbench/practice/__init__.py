"""The guide's best practices as code: the gate before scaling out (C12) and what builds on it."""
