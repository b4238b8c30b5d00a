"""Where each key of a TOML text is written: the line of every table header and `key =`,
for problems that name their line (`bridge.toml:12 apps.codex.default_project: …`).

tomllib, which reads the file, keeps no positions; tomlkit (not a dependency of the bridge)
keeps the text for round trips but gives no line numbers either. So this scans the text:
only for headers and keys, of a text tomllib has already accepted, so it need not report
errors, only step over strings, comments and values that span lines."""

from __future__ import annotations

Path = tuple[str | int, ...]  # ("apps", "codex", "app_id"), ("routes", 0, "chat")

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def key_lines(text: str) -> dict[Path, int]:
    """Path → 1-based line where it is first written. An element of an array of tables
    (`[[routes]]`) is its index, counted from 0; a table made by a dotted key or header
    (`[apps.codex]` makes `apps`) is at the line that first names it."""
    scan = _Scanner(text)
    lines: dict[Path, int] = {}
    arrays: dict[Path, int] = {}  # array of tables → how many elements so far
    table: Path = ()

    def record(path: Path, line: int) -> None:
        for end in range(1, len(path) + 1):
            lines.setdefault(path[:end], line)

    while scan.skip_blank():
        line = scan.line
        if scan.peek() == "[":
            is_array = scan.text.startswith("[[", scan.at)
            scan.at += 2 if is_array else 1
            keys = scan.keys()
            scan.at += 2 if is_array else 1
            table = _within_arrays(keys, arrays)
            if is_array:
                name = table
                arrays[name] = arrays.get(name, 0) + 1
                table = (*name, arrays[name] - 1)
            record(table, line)
        else:
            keys = scan.keys()
            scan.at += 1  # `=`
            record((*table, *keys), line)
            scan.skip_value()
    return lines


def line_of(lines: dict[Path, int], path: Path) -> int:
    """The line of `path`, else of its nearest ancestor written in the text (a key left out
    is reported at its table's header); 1 when nothing is."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 1


def _within_arrays(keys: tuple[str, ...], arrays: dict[Path, int]) -> Path:
    """`[routes.x]` after `[[routes]]` is in the last element of `routes`."""
    path: Path = ()
    for key in keys:
        path = (*path, key)
        if path in arrays and len(path) < len(keys):
            path = (*path, arrays[path] - 1)
    return path


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.line = 1

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def skip_blank(self) -> bool:
        """Past whitespace, newlines and comments; False at the end of the text."""
        while self.at < len(self.text):
            char = self.text[self.at]
            if char == "\n":
                self.line += 1
            elif char == "#":
                self.at = self._line_end()
                continue
            elif char not in " \t\r":
                return True
            self.at += 1
        return False

    def keys(self) -> tuple[str, ...]:
        """A dotted key (`a."b.c".d`), up to the `=` or `]` after it."""
        found: list[str] = []
        while True:
            self._spaces()
            char = self.peek()
            if char in ('"', "'"):
                found.append(self._string())
            else:
                start = self.at
                while self.peek() in _BARE and self.peek():
                    self.at += 1
                found.append(self.text[start : self.at])
            self._spaces()
            if self.peek() != ".":
                return tuple(found)
            self.at += 1

    def skip_value(self) -> None:
        """Past one value, however many lines its arrays and strings span."""
        depth = 0
        while self.at < len(self.text):
            char = self.text[self.at]
            if char in ('"', "'"):
                self._string()
                continue
            if char == "#":
                self.at = self._line_end()
                continue
            if char == "\n":
                if depth == 0:
                    return
                self.line += 1
            elif char in "[{":
                depth += 1
            elif char in "]}":
                depth -= 1
            self.at += 1

    def _spaces(self) -> None:
        while self.peek() in (" ", "\t"):
            self.at += 1

    def _line_end(self) -> int:
        end = self.text.find("\n", self.at)
        return len(self.text) if end < 0 else end

    def _string(self) -> str:
        """A basic or literal string, one line or several; its value (for keys)."""
        quote = self.text[self.at]
        multi = self.text.startswith(quote * 3, self.at)
        self.at += 3 if multi else 1
        value: list[str] = []
        while self.at < len(self.text):
            char = self.text[self.at]
            if multi and self.text.startswith(quote * 3, self.at):
                # Up to two quotes may close the content right before the delimiter.
                while self.text.startswith(quote * 4, self.at):
                    self.at += 1
                self.at += 3
                return "".join(value)
            if not multi and char == quote:
                self.at += 1
                return "".join(value)
            if char == "\\" and quote == '"':
                value.append(self._escape())
                continue
            if char == "\n":
                self.line += 1
            value.append(char)
            self.at += 1
        return "".join(value)

    def _escape(self) -> str:
        code = self.text[self.at + 1 : self.at + 2]
        if code in _ESCAPES:
            self.at += 2
            return _ESCAPES[code]
        if code in ("u", "U"):
            size = 4 if code == "u" else 8
            digits = self.text[self.at + 2 : self.at + 2 + size]
            self.at += 2 + size
            return chr(int(digits, 16))
        # A line-ending backslash in a multi-line string: the newline and the blanks after
        # it are no part of the value, but the lines still count.
        self.at += 1
        while self.peek() in (" ", "\t", "\r", "\n"):
            if self.peek() == "\n":
                self.line += 1
            self.at += 1
        return ""
