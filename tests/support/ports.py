"""A TCP port nothing listens on, at the moment it is asked for."""

import socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]
