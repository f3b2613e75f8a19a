"""LLM webhook gateway: filter each exchange, sign it, deliver it, lose nothing."""

from __future__ import annotations

__version__ = "0.1.0"
