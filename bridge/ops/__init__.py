"""Operator surfaces: health, status, versioned runtime-state snapshots, SSE, metrics."""
