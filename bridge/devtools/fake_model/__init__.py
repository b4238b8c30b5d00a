"""A scripted model endpoint on loopback, for running real coding agents offline.

Real agents (Claude Code, Codex, Qwen Code, Gemini CLI, OpenCode) talk to a model over HTTP.
This package stands in for that model: one aiohttp server speaking the Anthropic Messages API, the
OpenAI Responses API, the OpenAI Chat Completions API and the Gemini API, streaming included.
What the model does in a turn is decided by the user's words (`script.py`), so a test says
what it wants in the chat:

    WRITE <absolute path> <content…>   call the agent's own file-write tool, then answer
    LONG <n>                           stream an answer of n numbered lines
    DRIP <n>                           the same, slowly (a piece every 50 ms)
    HANG                               start answering, then never finish (for /stop, kill)
    ECHO <word>                        answer `echo: <word>`
    anything else                      a short plain answer

`python -m bridge.devtools.fake_model -- <agent command>` runs the agent with the model
beside it (inside `unshare -rn`, with loopback brought up, so nothing can leave the machine).
"""
