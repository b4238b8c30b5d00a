"""The agent's stdout pipe rests after each read (`_PacedStdout`): what it does to the pipe,
with fake transports and a loop whose timers the test fires."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bridge.runtime.acp.process import STDOUT_BULK_BYTES, _PacedStdout


class Pipe(asyncio.ReadTransport):
    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.closing = False
        self.calls: list[str] = []

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.calls.append("pause")
        self.reading = False

    def resume_reading(self) -> None:
        self.calls.append("resume")
        self.reading = True

    def is_closing(self) -> bool:
        return self.closing


class Stdin(asyncio.WriteTransport):
    def is_closing(self) -> bool:
        return True


class Process(asyncio.SubprocessTransport):
    def __init__(self) -> None:
        super().__init__()
        self.pipes = {0: Stdin(), 1: Pipe(), 2: Pipe()}

    def get_pipe_transport(self, fd: int) -> Any:
        return self.pipes[fd]


class Timers:
    """A loop's `call_later`, fired by hand."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.due: list[tuple[float, Callable[..., None], tuple[Any, ...]]] = []

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        self.due.append((delay, callback, args))

    def fire(self) -> None:
        due, self.due = self.due, []
        for _, callback, args in due:
            callback(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loop, name)


async def made(pace: float = 0.01, limit: int = 1024) -> tuple[_PacedStdout, Process, Timers]:
    timers = Timers(asyncio.get_running_loop())
    protocol = _PacedStdout(limit, timers, pace)  # type: ignore[arg-type]
    process = Process()
    protocol.connection_made(process)
    return protocol, process, timers


async def test_a_read_rests_the_pipe_for_the_pace_then_it_reads_again() -> None:
    protocol, process, timers = await made(pace=0.01)
    stdout = process.pipes[1]
    protocol.pipe_data_received(1, b'{"a": 1}\n')
    assert stdout.calls == ["pause"]
    assert [delay for delay, _, _ in timers.due] == [0.01]
    timers.fire()
    assert stdout.calls == ["pause", "resume"]
    protocol.pipe_data_received(1, b'{"b": 2}\n')
    assert stdout.calls == ["pause", "resume", "pause"]
    assert protocol.stdout is not None
    assert await protocol.stdout.read(100) == b'{"a": 1}\n{"b": 2}\n'  # nothing held back


async def test_stderr_is_read_as_it_comes() -> None:
    protocol, process, timers = await made()
    protocol.pipe_data_received(2, b"warning\n")
    assert process.pipes[2].calls == []
    assert process.pipes[1].calls == []
    assert timers.due == []


async def test_a_pipe_the_reader_paused_is_left_to_the_reader() -> None:
    """The reader pauses the pipe itself when its buffer is full, and resumes it as it
    reads: a rest must neither pause it again nor end that pause."""
    protocol, process, timers = await made(pace=0.01)
    stdout = process.pipes[1]
    protocol.pipe_data_received(1, b"x" * 4096)  # over twice the limit: the reader pauses
    assert stdout.calls == ["pause"]
    assert timers.due == []
    protocol.pipe_data_received(1, b"\n")  # a read already in flight
    assert stdout.calls == ["pause"]
    assert timers.due == []


async def test_a_closed_pipe_is_not_resumed() -> None:
    protocol, process, timers = await made()
    stdout = process.pipes[1]
    protocol.pipe_data_received(1, b"last\n")
    stdout.closing = True
    timers.fire()
    assert stdout.calls == ["pause"]


async def test_no_pace_reads_as_asyncio_does() -> None:
    protocol, process, timers = await made(pace=0.0)
    protocol.pipe_data_received(1, b"line\n")
    assert process.pipes[1].calls == []
    assert timers.due == []


async def test_a_big_read_goes_on_at_once() -> None:
    """A long line or a burst comes at the pipe's pace, not 64 KiB every 10 ms."""
    protocol, process, timers = await made(limit=STDOUT_BULK_BYTES)  # the reader's: no pause
    stdout = process.pipes[1]
    protocol.pipe_data_received(1, b"x" * STDOUT_BULK_BYTES)
    assert stdout.calls == []
    assert timers.due == []
    protocol.pipe_data_received(1, b"x" * (STDOUT_BULK_BYTES - 1))
    assert stdout.calls == ["pause"]


async def test_an_exit_ends_the_rest_at_once_and_pacing_with_it() -> None:
    """What an agent wrote just before it crashed is read before its exit ends its turn:
    a line left resting in the pipe would be lost with the turn."""
    protocol, process, timers = await made(pace=0.01)
    stdout = process.pipes[1]
    protocol.pipe_data_received(1, b'{"a": 1}\n')
    assert stdout.calls == ["pause"]
    protocol.process_exited()
    assert stdout.calls == ["pause", "resume"]
    timers.fire()  # the rest's own end finds nothing left to do
    assert stdout.calls == ["pause", "resume"]
    protocol.pipe_data_received(1, b'{"last": 2}\n')
    assert stdout.calls == ["pause", "resume"]


async def test_an_exit_leaves_a_pipe_the_reader_paused_to_the_reader() -> None:
    protocol, process, _ = await made(pace=0.01)
    stdout = process.pipes[1]
    protocol.pipe_data_received(1, b"x" * 4096)  # the reader's pause
    protocol.process_exited()
    assert stdout.calls == ["pause"]
