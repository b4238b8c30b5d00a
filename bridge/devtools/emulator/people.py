"""Who a person is to each app: Feishu gives every app its own open_id for the same person
(and for another app's bot), while union_id (one developer's apps) and user_id (one tenant)
stay the same.

A person is named by their open_id in the emulator's first app, the one every single-app
test knows (`default_user_open_id`, or any `ou_…` a test makes up); another app sees them
as `ou_<6 hex of the app_id>_<the rest>`, derived, so a test can compute it, and mapped
back when that app names them (a send to an open_id, an urgent notification).
"""

from __future__ import annotations

import hashlib


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class People:
    def __init__(self, first_app_id: str) -> None:
        self._first = first_app_id
        self._own: dict[tuple[str, str], str] = {}  # (person, app_id) -> that app's open_id
        self._person: dict[str, str] = {}  # an open_id of any app -> the person

    def open_id(self, person: str, app_id: str) -> str:
        """The open_id `app_id` knows `person` by."""
        if app_id == self._first:
            return person
        known = self._own.get((person, app_id))
        if known is None:
            known = f"ou_{_digest(app_id)[:6]}_{person.removeprefix('ou_')}"
            self._own[(person, app_id)] = known
            self._person[known] = person
        return known

    def register(self, person: str, app_id: str, open_id: str) -> None:
        """`app_id` knows `person` by `open_id` (a bot's own open_id in its own app)."""
        if app_id == self._first and open_id != person:
            raise ValueError("the first app knows a person by the person's own id")
        self._own[(person, app_id)] = open_id
        self._person[open_id] = person

    def person(self, open_id: str) -> str:
        """The person an open_id of any app names; an id no app was given names a person of
        its own (as the first app sees them)."""
        return self._person.get(open_id, open_id)

    def translate(self, open_id: str, app_id: str) -> str:
        """An open_id of any app, as `app_id` knows the same person."""
        return self.open_id(self.person(open_id), app_id)

    @staticmethod
    def union_id(person: str) -> str:
        return "on_" + _digest(person)[:32]

    @staticmethod
    def user_id(person: str) -> str:
        return _digest(person)[:8]
