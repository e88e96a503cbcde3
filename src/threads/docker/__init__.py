"""The Docker sandbox, in one place: ``docker(image, ...)`` gives a sandbox provider whose
sandboxes are Docker containers (``sandbox``), driven through the Engine API over the daemon's
unix socket by a small fenced client (``engine``). Needs only the core dependencies and a
running daemon (the ``docker`` extra adds nothing)."""

from threads.docker.sandbox import DockerSandbox, container_name, docker

__all__ = ["DockerSandbox", "container_name", "docker"]
