"""No secret within reach, whoever runs the bridge (issue 35).

`run` takes its secret settings out of its environment as it starts: out of `os.environ`
(so nothing it starts inherits them) and out of the block `/proc/<pid>/environ` shows,
which root reads whatever the process does. A real `feishu-bridge run`, started as root
without a sandbox (allowed on purpose), drives the scripted agent, which looks for the
secrets in the bridge's environ, its parent's and its own, and finds none. Without the
override, root without a sandbox is refused (exit 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.app import main
from bridge.config import checks as config_checks
from bridge.config.checks import UnsafeConfiguration
from bridge.demo import scripted_agent_command, start_demo
from bridge.devtools.emulator import FeishuEmulator
from bridge.devtools.emulator.records import ChatMessage
from tests.integration.stack import running_stack
from tests.integration.test_cluster import free_port, wait_healthy

REPO = Path(__file__).resolve().parents[2]
PROGRAM = Path(sys.executable).parent / "feishu-bridge"
ENCRYPT_KEY = "encrypt-key-5b2e91"
TOKEN = "verification-token-c41d07"
OPS_TOKEN = "ops-token-9e83f6"
DATABASE_URL = "postgresql://bridge:db-password-77a1@127.0.0.1:1/bridge"
SECRET_NAMES = (
    "FEISHU_APP_SECRET",
    "FEISHU_ENCRYPT_KEY",
    "FEISHU_VERIFICATION_TOKEN",
    "BRIDGE_OPS_TOKEN",
    "BRIDGE_DATABASE_URL",
)
AS_ROOT = os.geteuid() == 0


def without_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.upper().startswith(("FEISHU_", "BRIDGE_"))}


def environ_of(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


# --- take_secrets, in a process of its own ------------------------------------------------

# Takes the secrets, lets a child print its inherited environment, then waits to be read.
TAKER = """
import ctypes, json, subprocess, sys
from bridge.environ import take_secrets
taken = take_secrets()
child = subprocess.run(["cat", "/proc/self/environ"], capture_output=True, check=True).stdout
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
print(json.dumps({
    "values": taken.values, "wiped": taken.wiped, "left": taken.left,
    "child": child.decode(), "getenv": [bool(libc.getenv(n.encode())) for n in sys.argv[1:]],
}), flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_secrets_leave_os_environ_and_the_start_up_block_that_proc_environ_shows() -> None:
    secrets = {
        "FEISHU_APP_SECRET": "app-secret-4f1e",
        "feishu_encrypt_key": ENCRYPT_KEY,  # pydantic-settings reads any case
        "FEISHU_VERIFICATION_TOKEN": TOKEN,
        "BRIDGE_OPS_TOKEN": OPS_TOKEN,
        "BRIDGE_DATABASE_URL": DATABASE_URL,
    }
    env = {
        **without_settings(),
        **secrets,
        "FEISHU_APP_ID": "cli_not_a_secret",
        "PYTHONPATH": str(REPO),
    }
    names = [*secrets, "FEISHU_APP_ID"]
    argv = [sys.executable, "-c", TAKER, *names]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env) as taker:
        assert taker.stdout is not None
        assert taker.stdin is not None
        try:
            said = json.loads(taker.stdout.readline())
            seen_from_outside = environ_of(taker.pid)  # as /proc shows it to root or its user
        finally:
            taker.stdin.close()
        assert taker.wait(10) == 0
    assert said["values"] == {name.lower(): value for name, value in secrets.items()}
    assert said["wiped"] == sorted(name.upper() for name in secrets)
    assert said["left"] == []
    for where in (seen_from_outside, said["child"].encode()):
        assert [name for name, value in secrets.items() if value.encode() in where] == []
        assert b"FEISHU_APP_ID=cli_not_a_secret" in where  # the rest is untouched
    assert said["getenv"] == [False] * len(secrets) + [True]  # libc's copy too


# --- a real bridge, as root without a sandbox --------------------------------------------------


def bridge_env(emu: FeishuEmulator, folder: Path, **extra: str) -> dict[str, str]:
    (folder / "work").mkdir(exist_ok=True)
    return {
        **without_settings(),
        "FEISHU_APP_ID": emu.app_id,
        "FEISHU_APP_SECRET": emu.app_secret,
        "FEISHU_DOMAIN": emu.url,
        "FEISHU_EVENT_MODE": "webhook",
        "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "FEISHU_VERIFICATION_TOKEN": TOKEN,
        "BRIDGE_OPS_TOKEN": OPS_TOKEN,
        "BRIDGE_PORT": str(free_port()),
        "BRIDGE_OPS_PORT": str(free_port()),
        "BRIDGE_DATA_DIR": str(folder / "data"),
        "BRIDGE_WORKDIR": str(folder / "work"),
        "BRIDGE_AGENT_COMMAND": scripted_agent_command(),
        "BRIDGE_AGENT_SANDBOX": "none",
        "BRIDGE_ALLOW_ALL": "true",
        "BRIDGE_FINISH_GRACE_SECONDS": "0.05",
        "SCRIPTED_AGENT_STATE_DIR": str(folder / "agent-state"),
        **extra,
    }


@contextlib.contextmanager
def bridge(env: dict[str, str], folder: Path) -> Iterator[subprocess.Popen[bytes]]:
    with (
        open(folder / "bridge.log", "wb") as log,
        subprocess.Popen(
            [str(PROGRAM), "run"], env=env, cwd=folder, stdin=subprocess.DEVNULL, stderr=log
        ) as process,
    ):
        try:
            yield process
        finally:
            process.terminate()
            process.wait(10)


async def stopped(process: subprocess.Popen[bytes]) -> None:
    """Stop the bridge, waited off the loop: the emulator in it answers the bridge's last
    calls (the round's end reaction) while it stops."""
    process.terminate()
    await asyncio.to_thread(process.wait, 10)


def shown(message: ChatMessage) -> str:
    """A reply as the user reads it: its text, or a rich answer's markdown."""
    if message.msg_type != "interactive":
        return message.text or ""
    elements = (message.data or {}).get("body", {}).get("elements", [])
    return "".join(str(e.get("content", "")) for e in elements)


async def test_an_agent_run_as_root_without_a_sandbox_finds_no_secret_in_any_environ(
    tmp_path: Path,
) -> None:
    """As root the agent reads every process's environ (non-dumpable stops only other
    users); what it finds there holds none of the bridge's secrets."""
    async with FeishuEmulator(
        encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, time_scale=0.001
    ) as emu:
        env = bridge_env(emu, tmp_path, BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX="true")
        with bridge(env, tmp_path) as process:
            await wait_healthy(int(env["BRIDGE_PORT"]), process)
            emu.webhook_url = f"http://127.0.0.1:{env['BRIDGE_PORT']}/feishu/events"
            bridges = f"/proc/{process.pid}/environ"
            routes = {
                "grep": [bridges, "/proc/{ppid}/environ", "/proc/self/environ"],
                "needles": [f"{name}=" for name in SECRET_NAMES],
                "env": ["FEISHU_", "BRIDGE_"],
            }
            asked = await emu.send_user_message(f"probe {json.dumps(routes)}")

            def answer() -> str | None:
                said = [shown(m) for m in emu.bot_messages() if m.parent_id == asked.message_id]
                return next((s for s in said if s.startswith("probe: ")), None)

            report = json.loads((await emu.wait_for(answer, timeout=30)).removeprefix("probe: "))
            # Root reads the bridge's environ itself: no secret's value is there either.
            seen = environ_of(process.pid) if AS_ROOT else b""
            await stopped(process)
    # (Named, never shown: a failure must not print the environment of the machine.)
    values = {"app secret": emu.app_secret, "encrypt key": ENCRYPT_KEY, "token": TOKEN}
    values["ops token"] = OPS_TOKEN
    assert [name for name, value in values.items() if value.encode() in seen] == []
    # As root every route opens and holds nothing; as another user the bridge's is shut.
    parents = {"absent"} if AS_ROOT else {"absent", "PermissionError"}
    assert report["grep"][bridges] in parents, report
    assert report["grep"]["/proc/{ppid}/environ"] in parents, report
    assert report["grep"]["/proc/self/environ"] == "absent", report
    assert report["env"] == []


@pytest.mark.skipif(not AS_ROOT, reason="the refusal is for root (CI runs as root)")
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_as_root_without_a_sandbox_the_real_commands_refuse_with_exit_2(
    tmp_path: Path, command: str
) -> None:
    env = {
        **without_settings(),
        "FEISHU_APP_ID": "cli_x",
        "FEISHU_APP_SECRET": "app-secret-x",
        "BRIDGE_WORKDIR": str(tmp_path),
        "BRIDGE_DATA_DIR": str(tmp_path / "data"),
        "BRIDGE_AGENT_COMMAND": scripted_agent_command(),
        "BRIDGE_ALLOW_ALL": "true",
        "BRIDGE_LOCALE": "en_US",
    }
    done = subprocess.run(
        [str(PROGRAM), command], env=env, cwd="/", capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 2
    err = done.stderr.decode()
    assert "BRIDGE_AGENT_SANDBOX: the bridge runs as root" in err
    assert "BRIDGE_AGENT_SANDBOX=bwrap (see docs/sandbox.md)" in err


# --- the service and the demo, as root (the uid given) -----------------------------------------


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_checks, "effective_uid", lambda: 0)


@pytest.mark.usefixtures("as_root")
async def test_the_service_refuses_to_start_agents_as_root_without_a_sandbox_unless_said_so(
    tmp_path: Path,
) -> None:
    said_no = {"bridge_allow_root_without_sandbox": False}
    with pytest.raises(UnsafeConfiguration) as refused:
        async with running_stack(
            tmp_path / "a", settings=said_no, agent_command=scripted_agent_command()
        ):
            pass
    assert [(p.variable, p.code) for p in refused.value.problems] == [
        ("BRIDGE_AGENT_SANDBOX", "root_without_sandbox")
    ]
    async with running_stack(tmp_path / "b", agent_command=scripted_agent_command()) as stack:
        await stack.say("hello")  # the stack says it on purpose (tests/integration/stack.py)
        assert await stack.wait_text(lambda text: text.startswith("echo: "))


@pytest.mark.usefixtures("as_root")
async def test_the_demo_runs_its_own_scripted_agent_as_root_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    demo = await start_demo(data_dir=tmp_path)
    await demo.close()
    said = [r.getMessage() for r in caplog.records]
    implied = "BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX is implied for it, not for --agent"
    assert [line for line in said if line.startswith("demo: ")] == [
        "demo: the scripted agent (the bridge's own code) runs as root without a sandbox: "
        + implied
    ]
    assert any(line.startswith("agents run as root without a sandbox") for line in said)


@pytest.mark.usefixtures("as_root")
def test_the_demo_refuses_an_agent_of_the_users_as_root_without_a_sandbox(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("bridge.demo.configure_logging", lambda *args: None)  # pytest's logs
    monkeypatch.setenv("BRIDGE_LOCALE", "en_US")
    assert main(["demo", "--port", "0", "--agent", scripted_agent_command()]) == 2
    err = capsys.readouterr().err
    assert "BRIDGE_AGENT_SANDBOX: the bridge runs as root and BRIDGE_AGENT_SANDBOX=none" in err
    assert "set BRIDGE_ALLOW_ROOT_WITHOUT_SANDBOX=true" in err
