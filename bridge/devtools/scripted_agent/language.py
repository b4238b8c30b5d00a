"""The command language of a prompt, the quirks, and the fixed answers the agent offers."""

from __future__ import annotations

SCENARIOS: dict[str, str] = {
    "say": "say TEXT — reply with TEXT",
    "link": "link PATH — an answer that links the file PATH (ACP resource_link)",
    "edit": "edit PATH OLD => NEW — a tool call reporting a diff of PATH (`\\n` line breaks)",
    "unpaired": "unpaired TEXT — reply `TEXT \\ud800 end`: a lone surrogate escape on the wire",
    "md": "md TEXT — reply with TEXT, each `\\n` in it a line break (Markdown answers)",
    "think": "think TEXT — a thought chunk",
    "stream": "stream N [DELAY_MS] — N message chunks `c0 c1 …`, DELAY_MS apart",
    "realistic": "realistic SEED SECONDS [LOG] [sizes=MIN-MAX] [code=P] [stream=S] — a coding"
    " agent's streaming turn: thoughts and tool calls, then a 2,000–6,000 character answer, or"
    " one of MIN–MAX characters, Markdown with long code blocks for a share P, streamed over S"
    " seconds (realistic.py)",
    "tool": "tool TITLE — a tool call: pending → in_progress → completed",
    "plan": "plan A | B | C — a plan; the first entry in progress",
    "permission": "permission TITLE — ask approval; allow → 'done', reject → 'not done'",
    "ask": "ask QUESTION? a|b — a question (elicitation, or qwen's form)",
    "hang": "hang — wait until cancelled",
    "sleep": "sleep MS — silence for MS, then go on (stall tests)",
    "crash": "crash [CODE] — exit the process at once (os._exit)",
    "crash-after": "crash-after MS [CODE] — exit MS from now, whatever runs then",
    "error": "error [MESSAGE] — answer the prompt with a JSON-RPC error",
    "stop": "stop REASON — end now with end_turn|max_tokens|max_turn_requests|refusal|cancelled",
    "silent": "silent — do nothing (a turn with no visible text)",
    "stderr": "stderr KB — write KB kilobytes to stderr",
    "huge": "huge KB — one message chunk of KB kilobytes (a single stdout line that size)",
    "unknown": "unknown [KIND] — send a session/update of an unknown kind",
    "idle": "idle [MS] — MS after the turn's result: mode, commands, title and a stray chunk",
    "history": "history — reply with how many prompts this session has seen",
    "mode": "mode — reply with the session's current mode (`mode: <id>`)",
    "model": "model — reply with the session's current model (`model: <value>`)",
    "cwd": "cwd — reply with the session's working folder and the process's",
    "whoami": "whoami — reply `NAME: resumed=N title=T` (its --name, session/resume calls, title)",
    "rename": "rename TEXT — retitle the session in its own store only (seen by session/list)",
    "echo": "echo TEXT — reply 'echo: TEXT'",
    "probe": 'probe {"read": [P], "write": [P], "run": [[ARGV]], "env": [PREFIX],'
    ' "grep": [P], "needles": [S]} — reply `probe: JSON`, what each route gave (sandbox'
    " tests); `grep` says whether a file holds any needle (`{ppid}` in P: the agent's parent)",
}

QUIRKS: dict[str, str] = {
    "cancel-tail": "after a cancelled prompt, every later prompt is answered by the result of"
    " the one before it (the first by an immediate empty end_turn); survives session/load on"
    " this process, not a new process (claude-agent-acp 0.23.1)",
    "cancel-end-turn": "a cancelled prompt is answered end_turn, not cancelled",
    "ignore-cancel": "session/cancel is ignored; the prompt runs on",
    "no-result": "the answer streams whole, then session/prompt is never answered",
    "late-updates": "20 ms after each result, one more message chunk",
    "load-fails": "offers loadSession, but session/load answers -32603 'No previous sessions"
    " found' (Gemini CLI, once restarted)",
}

STOP_REASONS = ("end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled")
PERMISSION_OPTIONS = [
    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject-always", "name": "Always reject", "kind": "reject_always"},
]

# Session modes offered (ACP `modes`): id, name.
MODES = (("default", "Default"), ("plan", "Plan"), ("yolo", "Bypass permissions"))
# The one session config option offered (ACP `configOptions`, category `model`): value, name.
MODELS = (("swift", "Swift (fast)"), ("deep", "Deep (careful)"))
