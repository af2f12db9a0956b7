#!/usr/bin/env python3
"""A fast webhook receiver for tools/bench: answers every POST 204 at once (asyncio, HTTP/1.1 keep-alive) and
remembers, per message, when it arrived and the event's recorded_at, so the driver can compute deliveries/s and
the lag from append to delivery. Usage: receiver.py PORT_FILE OUT_FILE; writes its port to PORT_FILE, and on
SIGTERM writes {"count", "lags_ms": [...], "first", "last"} to OUT_FILE. Standard library only."""
import asyncio, json, re, signal, sys, time
from datetime import datetime

RECORDED = re.compile(rb'"recorded_at":"([^"]+)"')
arrivals = []  # (arrival unix time, recorded_at text)


def parse_time(text):
    t = text.decode()
    return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:].strip())
            body = await reader.readexactly(length) if length else b""
            now = time.time()
            m = RECORDED.search(body)
            arrivals.append((now, m.group(1) if m else None))
            writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.CancelledError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port_file, out_file):
    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    with open(port_file, "w") as f:
        f.write(str(server.sockets[0].getsockname()[1]))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    lags = [round((a - parse_time(r)) * 1000, 3) for a, r in arrivals if r]
    with open(out_file, "w") as f:
        json.dump({"count": len(arrivals), "lags_ms": lags, "arrivals": [a for a, _ in arrivals]}, f)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
