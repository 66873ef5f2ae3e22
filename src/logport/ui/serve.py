"""`logport ui`: serve the web app over a lake (uvicorn), loopback unless a token guards it."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys

from logport.errors import LogportError

TOKEN_ENV = "LOGPORT_UI_TOKEN"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lake", default="pipeline-out", help="the pipeline's output directory (its --out)")
    p.add_argument("--server", action="append", default=[],
                   help="hubs for the live view, HOST:PORT of their segment listeners, repeated or comma-separated")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on; other than loopback only with a token")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (0: any free one, printed)")
    p.add_argument("--token", default=os.environ.get(TOKEN_ENV, ""),
                   help=f"a token every request must carry (bearer, basic auth password, or ?token= once); "
                        f"default: ${TOKEN_ENV}")
    p.add_argument("--segment-token", default="", help="the hubs' segment.token, for the live view")


def is_loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def main(args: argparse.Namespace) -> int:
    import uvicorn

    from logport.ui.app import create_app

    if not is_loopback(args.bind) and not args.token:
        raise LogportError(f"--bind {args.bind} is not loopback: give --token (or ${TOKEN_ENV}) so that only "
                           "who has it reads the lake")
    servers = [s.strip() for item in args.server for s in item.split(",") if s.strip()]
    app = create_app(args.lake, servers, args.token or None, args.segment_token)
    config = uvicorn.Config(app, host=args.bind, port=args.port, log_level="warning", access_log=False,
                            lifespan="on")
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.05)
        for sock in server.servers[0].sockets if server.servers else []:
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            print(f"logport ui: http://{shown}:{port}/ (lake {args.lake}"
                  f"{', live from ' + ', '.join(servers) if servers else ''})", file=sys.stderr, flush=True)

    import asyncio

    async def run() -> None:
        task = asyncio.create_task(announce())
        await server.serve()
        task.cancel()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    return 0
