"""A minimal ZMTP 3.0 DEALER over a Unix socket (NULL mechanism), enough to
send the controller raw messages of any size from a test without pyzmq."""
import socket
import struct


class Dealer:
    def __init__(self, path, timeout=30):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        greeting = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0")
        greeting += b"\0" + b"\0" * 31
        self.s.sendall(greeting)
        self._exact(64)  # the peer's greeting
        body = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
        self.s.sendall(b"\x04" + bytes([len(body)]) + body)
        flags, _ = self._frame()  # the peer's READY
        assert flags & 0x04, "expected a command"

    def _exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return out

    def _frame(self):
        flags = self._exact(1)[0]
        size = struct.unpack(">Q", self._exact(8))[0] if flags & 0x02 else self._exact(1)[0]
        return flags, self._exact(size)

    def send(self, body):
        """[""][body] as a DEALER sends them."""
        head = b"\x01\x00"  # empty delimiter, MORE
        if len(body) > 255:
            head += b"\x02" + struct.pack(">Q", len(body))
        else:
            head += b"\x00" + bytes([len(body)])
        self.s.sendall(head + body)

    def recv(self):
        parts = []
        while True:
            flags, data = self._frame()
            if flags & 0x04:
                continue  # a command (heartbeat)
            parts.append(data)
            if not flags & 0x01:
                return parts[-1]

    def close(self):
        self.s.close()
