"""Loaded by every Python process the docs tests start (``PYTHONPATH`` points here): a
connection or name lookup for anything but loopback raises, so an example or a README block
can never reach a real network, nor can the processes it starts."""

import socket

_LOOPBACK = {"127.0.0.1", "::1", "localhost"}
_connect = socket.socket.connect
_getaddrinfo = socket.getaddrinfo


def _guarded_connect(self, address):  # type: ignore[no-untyped-def]
    if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in _LOOPBACK:
        raise OSError(f"blocked a real network connection to {address!r}")
    return _connect(self, address)


def _guarded_getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
    if host is not None and host not in _LOOPBACK:
        raise OSError(f"blocked a real name lookup of {host!r}")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.getaddrinfo = _guarded_getaddrinfo
