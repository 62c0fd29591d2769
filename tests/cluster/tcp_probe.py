"""A bulk TCP transfer between emulated hosts (tests/cluster/cluster.sh).

  tcp_probe.py serve ADDRESS PORT TIMEOUT_S
      accepts one connection, reads it to its end, prints the bytes read;
      exits 1 when nothing connects within TIMEOUT_S seconds.
  tcp_probe.py send ADDRESS PORT BYTES TIMEOUT_S
      connects (retrying until the listener is up), sends BYTES bytes, waits
      for the receiver to close, and prints "BYTES SECONDS MBIT_PER_S";
      exits 1 when that does not finish within TIMEOUT_S seconds.
"""

import socket
import sys
import time


def serve(address: str, port: int, timeout_s: float) -> None:
    with socket.create_server((address, port)) as listener:
        listener.settimeout(timeout_s)
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(timeout_s)
            total = 0
            while chunk := conn.recv(1 << 20):
                total += len(chunk)
    print(total)


def send(address: str, port: int, size: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=timeout_s)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    block = bytes(1 << 20)
    with conn:
        start = time.monotonic()
        left = size
        while left > 0:
            n = min(left, len(block))
            conn.sendall(block[:n])
            left -= n
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)  # the receiver's close: everything arrived
        seconds = time.monotonic() - start
    print(size, f"{seconds:.3f}", f"{size * 8 / seconds / 1e6:.0f}")


def main() -> int:
    args = sys.argv[1:]
    try:
        if len(args) == 4 and args[0] == "serve":
            serve(args[1], int(args[2]), float(args[3]))
            return 0
        if len(args) == 5 and args[0] == "send":
            send(args[1], int(args[2]), int(args[3]), float(args[4]))
            return 0
    except (OSError, ValueError) as e:
        print(f"tcp_probe.py {' '.join(args)}: {e}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
