"""Per-call failure injection: "the next N calls matching METHOD + path glob fail like this".

Faults are consumed in the order they were armed; each matching call uses one. They apply to
every `/open-apis` path, the token endpoint included, before authentication, as Feishu's
gateway rate-limits and fails before it looks at the token. A fault for one app hits only
the calls made with that app's token (or asking for its token).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from enum import StrEnum


class FaultKind(StrEnum):
    RATE_LIMIT = "rate_limit"  # HTTP 429, code 99991400, `x-ogw-ratelimit-reset` header
    SERVER_ERROR = "server_error"  # HTTP 500 with the gateway's error body
    BUSINESS_ERROR = "business_error"  # HTTP 400 (or given) with a given code/msg
    TIMEOUT = "timeout"  # the call is processed, but the answer is held for `hold_seconds`


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    method: str  # "POST", … or "*"
    path_pattern: str  # fnmatch glob on the path, e.g. "/open-apis/im/v1/messages/*/reply"
    code: int | None = None
    msg: str | None = None
    http_status: int | None = None
    reset_seconds: int = 1
    hold_seconds: float = 5.0
    # A held call has already happened (a message really posted) — the nasty case a client
    # retry with the same uuid must survive. Set False to drop the call instead.
    apply: bool = True
    app_id: str | None = None  # None: any app's calls

    def matches(self, method: str, path: str, app_id: str | None = None) -> bool:
        return (
            (self.method == "*" or self.method.upper() == method.upper())
            and fnmatch.fnmatchcase(path, self.path_pattern)
            and (self.app_id is None or self.app_id == app_id)
        )


@dataclass
class _Armed:
    fault: Fault
    remaining: int


class FaultPlan:
    def __init__(self) -> None:
        self._armed: list[_Armed] = []

    def arm(self, fault: Fault, times: int) -> None:
        if times < 1:
            raise ValueError("times must be >= 1")
        self._armed.append(_Armed(fault, times))

    def take(self, method: str, path: str, app_id: str | None = None) -> Fault | None:
        for entry in self._armed:
            if entry.fault.matches(method, path, app_id):
                entry.remaining -= 1
                if entry.remaining == 0:
                    self._armed.remove(entry)
                return entry.fault
        return None

    def clear(self) -> None:
        self._armed.clear()

    @property
    def pending(self) -> int:
        return sum(entry.remaining for entry in self._armed)
