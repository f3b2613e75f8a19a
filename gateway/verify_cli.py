"""`gateway verify`: check a received webhook's Standard Webhooks signature from the shell.

    gateway verify --secret whsec_... --id msg_... --timestamp 1700000000 \
        --signature 'v1,...' < body.json

The body is read from standard input byte for byte (a trailing newline is part of what was signed,
or not, so nothing is stripped). Prints `valid` and exits 0, or `invalid: <reason>` and exits 1;
a usage error (no key, malformed key) exits 2. The secret may come from `GATEWAY_WEBHOOK_SECRET`
instead of the command line, to keep it out of shell history.
"""

from __future__ import annotations

import argparse
import os
import sys

from gateway.delivery.signing import DEFAULT_TOLERANCE_SECONDS, WebhookVerificationError, verify

SECRET_ENV = "GATEWAY_WEBHOOK_SECRET"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--secret", help=f"the job's whsec_ secret (default: ${SECRET_ENV})")
    parser.add_argument("--public-key", help="a whpk_ public key, to check v1a (ed25519) signatures")
    parser.add_argument("--id", required=True, dest="msg_id", help="the webhook-id header")
    parser.add_argument("--timestamp", required=True, help="the webhook-timestamp header")
    parser.add_argument("--signature", required=True, help="the webhook-signature header")
    parser.add_argument(
        "--tolerance",
        type=int,
        default=DEFAULT_TOLERANCE_SECONDS,
        metavar="SECONDS",
        help="how far the timestamp may be from now (default %(default)s)",
    )
    parser.add_argument(
        "--no-tolerance",
        action="store_true",
        help="skip the timestamp check (for replaying a stored webhook by hand)",
    )


def run(args: argparse.Namespace) -> int:
    secret: str | None = args.secret or os.environ.get(SECRET_ENV) or None
    public_key: str | None = args.public_key or None
    if secret is None and public_key is None:
        print(f"error: give --secret (or set {SECRET_ENV}) or --public-key", file=sys.stderr)
        return 2
    body = sys.stdin.buffer.read()
    headers = {
        "webhook-id": args.msg_id,
        "webhook-timestamp": args.timestamp,
        "webhook-signature": args.signature,
    }
    tolerance = None if args.no_tolerance else args.tolerance
    try:
        verify(body, headers, secret=secret, public_key=public_key, tolerance_seconds=tolerance)
    except WebhookVerificationError as exc:
        print(f"invalid: {exc}")
        return 1
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("valid")
    return 0
