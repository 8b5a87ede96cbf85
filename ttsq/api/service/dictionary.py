"""The pronunciation dictionary: its entries (``/v1/admin/pronunciation``) and a submit's text rewritten by them
(docs/dictionary.md)."""

from __future__ import annotations

import asyncio

from ttsq.api.auth import Principal
from ttsq.api.schemas import SubmitRequest
from ttsq.api.service.common import Common, InvalidInput
from ttsq.domain.pronunciation import (
    DictionaryError,
    DictionaryTimeout,
    EntryKind,
    EntryLanguage,
    PronunciationEntry,
    caller_scopes,
    check_scope,
)
from ttsq.store.pronunciation import EntryConflict, PronunciationStore
from ttsq.store.rate_limit import RateDecision


class DictionaryService:
    """The dictionary's entries for its admin routes, and its rewrite of a submit's text."""

    def __init__(self, common: Common, pronunciation: PronunciationStore | None = None) -> None:
        self.pronunciation = pronunciation
        """The pronunciation dictionary (docs/dictionary.md); None: texts go to the model as sent."""
        self._pay = common.pay

    async def pronounced(
        self, body: SubmitRequest, caller: Principal, max_text_chars: int
    ) -> tuple[SubmitRequest, RateDecision | None]:
        """``body`` with its text rewritten by the caller's pronunciation dictionary, before the text is cleaned,
        normalised and split (so the job's text and its cache key are the rewritten text's); and the submit's token,
        when it was taken here (:meth:`pronounced_texts`)."""
        (text,), paid = await self.pronounced_texts([body.text], caller, max_text_chars)
        return (body if text == body.text else body.model_copy(update={"text": text})), paid

    async def pronounced_texts(
        self, texts: list[str], caller: Principal, max_text_chars: int, fields: list[str] | None = None
    ) -> tuple[list[str], RateDecision | None]:
        """``texts`` (a submit's text, a dialogue's lines) rewritten by the caller's pronunciation dictionary, and the
        submit's token, when it was taken here; ``fields`` names each text in a refusal (``text`` by default).

        A text already too long as sent is left to :func:`build_params` to refuse; one the dictionary made too long
        is refused here, saying so (``max_text_chars``: the route's limit). Regex entries may each run up to their
        time limit, so when the caller's entries include one, the submit's token is taken first (a caller with an
        empty bucket gets its 429 before any regex runs, and a submit refused by a regex's time limit has paid like
        any other) and the entries run in a thread, the ``regex`` module releasing the GIL, off the event loop. A
        regex entry past its time limit refuses the submit naming the entry.
        """
        names = fields or ["text"] * len(texts)
        if self.pronunciation is None:
            return texts, None
        dictionary = await self.pronunciation.dictionary()
        key = caller.key
        scopes = caller_scopes(key.id if key else None, key.tenant if key else None)
        paid = None
        rewritten = []
        for text, field in zip(texts, names, strict=True):
            if len(text) > max_text_chars:
                rewritten.append(text)
                continue
            try:
                if dictionary.runs_regexes(text, scopes):
                    paid = paid or await self._pay(caller)
                    changed = await asyncio.to_thread(dictionary.apply, text, scopes)
                else:
                    changed = dictionary.apply(text, scopes)
            except DictionaryTimeout as exc:
                raise InvalidInput(field, str(exc), text[:200]) from exc
            if len(changed) > max_text_chars:
                raise InvalidInput(
                    field,
                    f"text is {len(changed)} characters long once the pronunciation dictionary is applied; "
                    f"the limit is {max_text_chars}",
                    text[:200],
                )
            rewritten.append(changed)
        return rewritten, paid

    def _dictionary(self) -> PronunciationStore:
        if self.pronunciation is None:
            raise InvalidInput("scope", "the pronunciation dictionary is not configured on this service")
        return self.pronunciation

    async def pronunciation_entries(self, scope: str | None) -> list[PronunciationEntry]:
        """The dictionary's entries, oldest first (of one scope when given)."""
        if scope is not None:
            self._checked_scope(scope)
        return await self._dictionary().list(scope)

    async def add_pronunciation(
        self, *, kind: EntryKind, match: str, replacement: str, language: EntryLanguage, scope: str, case_sensitive: bool
    ) -> PronunciationEntry:
        """Store an entry: :class:`InvalidInput` naming the field when it cannot apply, :class:`EntryConflict` when
        its scope is full or already has it."""
        try:
            return await self._dictionary().create(
                kind=kind, match=match, replacement=replacement, language=language, scope=scope, case_sensitive=case_sensitive
            )
        except EntryConflict:
            raise
        except DictionaryError as exc:
            raise InvalidInput(exc.field, str(exc), None) from exc

    async def delete_pronunciation(self, entry_id: str) -> bool:
        return await self._dictionary().delete(entry_id)

    @staticmethod
    def _checked_scope(scope: str) -> str:
        try:
            return check_scope(scope)
        except DictionaryError as exc:
            raise InvalidInput("scope", str(exc), scope) from exc
