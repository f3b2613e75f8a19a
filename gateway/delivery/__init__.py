"""Webhook delivery: Standard Webhooks signing, the SSRF guard, retry timing and the HTTP transport.

Import the submodules directly (`gateway.delivery.signing`, `.ssrf`, `.retry`, `.sender`): this
package imports nothing itself, so `gateway verify` can use the signing code without loading aiohttp.
"""
