"""Several bridge instances on one database: which conversations this instance runs and
how work reaches their owner (`Ownership`), conversation leases kept alive (`LeaseKeeper`)
and wake-ups between instances (`Wake`). No engine imports: `Ownership` drives the engine
through `LocalEngine`, a Protocol of its own that the composition root fills."""

from bridge.cluster.leases import LeaseKeeper, LeaseStore, LossReason
from bridge.cluster.wake import LocalWake, Wake, WakeKind

__all__ = ["LeaseKeeper", "LeaseStore", "LocalWake", "LossReason", "Wake", "WakeKind"]
