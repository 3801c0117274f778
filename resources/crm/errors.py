"""The one exception of the CRM resources: a one-line message saying what went wrong and what to set or do."""

from __future__ import annotations


class CrmError(RuntimeError):
    """A CRM read or write failed; str(error) is one line, never holds a secret, and names the setting to fix."""
