"""``Principal``: a verified identity (issuer, tenant, subject) recorded as the actor of every
decision a person makes. Tenants isolate: a principal never acts on another tenant's thread."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from threads.log.event_types import Actor
from threads.log.event_types import Principal as WirePrincipal


@dataclass(frozen=True, slots=True)
class Principal:
    issuer: str
    tenant: str
    subject: str

    def __post_init__(self) -> None:
        for name in ("issuer", "tenant", "subject"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"Principal.{name} must be a non-empty string")

    def to_wire(self) -> WirePrincipal:
        return {"issuer": self.issuer, "subject": self.subject, "tenant": self.tenant}

    def actor(self, kind: Literal["user", "approver", "host"] = "user") -> Actor:
        """The actor of an event this principal caused: a ``user`` by default."""
        return {"kind": kind, "principal": self.to_wire()}

    @classmethod
    def from_wire(cls, value: Mapping[str, object]) -> Principal:
        issuer, tenant, subject = value["issuer"], value["tenant"], value["subject"]
        if not (isinstance(issuer, str) and isinstance(tenant, str) and isinstance(subject, str)):
            raise ValueError("a principal's issuer, tenant and subject must be strings")
        return cls(issuer, tenant, subject)


LOCAL_OPERATOR = Principal(issuer="api", tenant="local", subject="operator")
