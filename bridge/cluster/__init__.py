"""Several bridge instances on one database: conversation leases kept alive
(`LeaseKeeper`) and wake-ups between instances (`Wake`). No engine imports: the engine
uses these blocks, not the other way round."""

from bridge.cluster.leases import LeaseKeeper, LeaseStore, LossReason
from bridge.cluster.wake import LocalWake, Wake, WakeKind

__all__ = ["LeaseKeeper", "LeaseStore", "LocalWake", "LossReason", "Wake", "WakeKind"]
