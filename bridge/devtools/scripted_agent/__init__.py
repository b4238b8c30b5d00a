"""A scripted ACP agent: a real subprocess speaking real ACP over stdio, for the demo and tests.

Run it as ``python -m bridge.devtools.scripted_agent``. It is built on the same SDK as the
bridge (the low-level `Connection` and the agent router), so what a test sees is what a real
agent would send on the wire.

Command language
----------------
The prompt is a script when its first word is a command below; each line is one command
(delays in milliseconds). Any other prompt gets ``echo: <text>``; an unknown line inside a
script is echoed too. Example::

    think planning
    tool Read README.md
    stream 5 20
    permission Delete build/
    stop max_tokens

See `SCENARIOS` for every command. A permission answered allow → reply "done", reject →
"not done", cancelled → the turn ends with stop reason ``cancelled``. A question is an
``elicitation/create`` form when the client declared elicitation, else qwen's form (a
``session/request_permission`` with ``_meta.qwenInteractionKind = "user_question"``,
answered by a top-level ``answers`` map); an answer replies "answer: <value>", a declined
question replies "no answer", a cancelled one ends the turn ``cancelled``.

Environment
-----------
``SCRIPTED_AGENT_STATE_DIR``   folder for session histories (one JSON file per session), so
                               a restarted agent can ``session/load`` a session of the
                               previous process; without it sessions live in memory.
``SCRIPTED_AGENT_LOAD_SESSION`` ``0`` turns the ``loadSession`` capability off (on by default),
                               and ``session/resume`` with it.
``SCRIPTED_AGENT_SCENARIO``    path of a script file run for every prompt that is not a script.
``SCRIPTED_AGENT_EXIT_ON_START`` exit with this code at once (a broken agent install).

Quirks
------
``--quirk NAME`` (repeatable) plays a misbehaviour seen in real agents (docs/agents.md,
"Known agent quirks"); ``--no-load`` turns ``loadSession`` (and resume) off, ``--no-resume``
and ``--no-list`` the ``session/resume`` and ``session/list`` capabilities. See `QUIRKS`.
``--name`` and ``--version`` set the ``agentInfo`` it reports: a real agent's, to match a
row of the bridge's table of agents that leave a tail after a cancel.

After each prompt it tells a title (the first prompt's first line, ``session_info_update``)
and its context use (``usage_update``: characters as tokens of a 200k window, a cent a
prompt).
"""

from __future__ import annotations

from bridge.devtools.scripted_agent.agent import ScriptedAgent
from bridge.devtools.scripted_agent.language import QUIRKS, SCENARIOS
from bridge.devtools.scripted_agent.sessions import SessionStore

__all__ = ["QUIRKS", "SCENARIOS", "ScriptedAgent", "SessionStore"]
