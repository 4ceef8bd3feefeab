"""One HTTP(S) request as a LAN client makes it, run inside a network namespace by tests/e2e/test_lan_stage.py
(`ip netns exec NS python -m tests.e2e.lan_client ...`); prints one JSON line: the status, the first chunk's
and the last byte's time, the body's start, or the error's type and text. Stdlib only."""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import ssl
import sys
import time


def request(args: argparse.Namespace) -> dict:
    headers = {"Content-Type": "application/json"}
    if args.key is not None:
        headers["Authorization"] = f"{args.scheme} {args.key}"
    source = (args.source, 0) if args.source else None
    if args.https:
        context = ssl.create_default_context(cafile=args.cafile) if args.cafile else ssl.create_default_context()
        # With --server-hostname the certificate is checked for that name while the address dialled is --host.
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            args.server_hostname or args.host, args.port, timeout=args.timeout, context=context, source_address=source
        )
        if args.server_hostname:
            conn._create_connection = _dial(args.host, args.timeout, source)  # type: ignore[attr-defined]
    else:
        conn = http.client.HTTPConnection(args.host, args.port, timeout=args.timeout, source_address=source)
    body = args.body.encode() if args.body else None
    if args.body_file:
        with open(args.body_file, "rb") as fh:
            body = fh.read()
    t0 = time.monotonic()
    try:
        if args.declare_length:  # headers only: does the proxy refuse the size before any body is sent?
            conn.putrequest(args.method, args.path)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.putheader("Content-Length", str(args.declare_length))
            conn.endheaders()
        else:
            conn.request(args.method, args.path, body=body, headers=headers)
        resp = conn.getresponse()
        first = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        t_first = time.monotonic() - t0
        rest = resp.read()
        data = first + rest
        return {
            "status": resp.status,
            "first_s": round(t_first, 3),
            "total_s": round(time.monotonic() - t0, 3),
            "body": data[:300].decode(errors="replace"),
            "bytes": len(data),
        }
    except (OSError, http.client.HTTPException) as err:
        return {"error": type(err).__name__, "detail": str(err)[:300]}
    finally:
        conn.close()


def _dial(address: str, timeout: float, source: tuple[str, int] | None):
    def connect(target: tuple[str, int], *_args: object, **_kw: object) -> socket.socket:
        return socket.create_connection((address, target[1]), timeout, source)

    return connect


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", default="/")
    p.add_argument("--method", default="GET")
    p.add_argument("--https", action="store_true")
    p.add_argument("--cafile")
    p.add_argument("--server-hostname")
    p.add_argument("--key")
    p.add_argument("--scheme", default="Bearer")
    p.add_argument("--source")
    p.add_argument("--body")
    p.add_argument("--body-file")
    p.add_argument("--declare-length", type=int)
    p.add_argument("--timeout", type=float, default=30)
    print(json.dumps(request(p.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
