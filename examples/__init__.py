"""Runnable examples: a Starlette webhook receiver and an LLM backend using GatewayClient."""
