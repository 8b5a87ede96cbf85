"""SSML on the native submit: a document read safely, checked against what ttsq supports, and flattened into spans.

A caller may send ``{"ssml": "<speak>…</speak>"}`` in place of ``text``. What ChatTTS can do with markup is narrow:
it speaks one text in one voice at one speed per request, and has no word timings. So a document is read here into
a flat list of :class:`Span` — each a run of text in one voice, at one speed and gain, with the exact silence before
it and the marks at its ends — which the API turns into a job's segments: a break is exact silence, a rate is
ChatTTS's speed, a volume a gain on the samples, a voice the API resolves for the caller.

**What is supported** is data (:mod:`ttsq.domain.ssml_conformance`): every element and attribute is checked against
it as it arrives, and anything else is refused with the element or attribute named, where it is (line and column,
both from 1), and the supported list.

**Reading it safely.** The document's length is checked first (``MAX_SSML_CHARS``); it is then parsed by
``defusedxml``'s expat SAX reader with no DTD, no entity declaration and no external reference allowed (so a
billion-laughs or external-entity document is refused at its ``<!DOCTYPE``, before anything is expanded or
fetched), and the reader stops at the first element past ``MAX_SSML_DEPTH`` deep or ``MAX_SSML_ELEMENTS`` in all. A
hostile document costs at most one pass over the characters the length limit lets in, and no tree of it is built.

**Spans.** A new span begins where the voice, speed or gain changes, after a break or a paragraph, and after a mark
followed by more text: ChatTTS cannot change voice or speed inside a request, and a mark's place in the audio is
known exactly only where a run of speech begins or ends. So every mark is at the start of its span's text (where
the speech after it begins) or at its end (when a break, a paragraph or the document's end comes before more text:
where the speech before it ends), and stays there whatever rewriting the text gets later (:meth:`Span.retexted`).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Literal
from xml.sax import SAXParseException
from xml.sax.expatreader import ExpatLocator
from xml.sax.handler import ContentHandler
from xml.sax.xmlreader import AttributesImpl, Locator

from defusedxml import DefusedXmlException, DTDForbidden, EntitiesForbidden, ExternalReferenceForbidden
from defusedxml.expatreader import DefusedExpatParser

from ttsq.domain.say_as import DATE_FORMATS, INTERPRETATIONS, SayAsError, spoken
from ttsq.domain.ssml_conformance import (
    ELEMENTS,
    MAX_ATTRIBUTE_CHARS,
    MAX_MARK_NAME_CHARS,
    MAX_PAUSE_SAMPLES,
    REFUSED_ATTRIBUTES,
    REFUSED_ELEMENTS,
    ElementRule,
    ValueRefused,
    break_samples,
    document_language,
    listed,
    paragraph_samples,
    quoted,
    rate_speed,
    volume_gain,
)
from ttsq.domain.text import CLOSERS, clean_text, detect_language

__all__ = ["Position", "Span", "SpanMark", "SsmlDocument", "SsmlError", "SsmlLimits", "read_ssml"]

Language = Literal["en", "zh"]

_SENTENCE_MARKS = "。！？；…!?;."
"""What ends a sentence already (``<s>`` and ``<p>`` add a full stop to a sentence without one)."""


# ---- what reading gives ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    """Where in the document something is: line and column, both counted from 1."""

    line: int
    column: int

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}"


class SsmlError(ValueError):
    """A document ttsq will not speak, said so a person can fix it: what, where (:attr:`position`), and what is
    supported. ``str()`` starts with the position when there is one."""

    def __init__(self, message: str, position: Position | None = None) -> None:
        super().__init__(f"{position}: {message}" if position is not None else message)
        self.message = message
        self.position = position


@dataclass(frozen=True)
class SsmlLimits:
    """How much document a request may send (the caller's settings: the library reads none of its own)."""

    max_chars: int
    """The document as sent (``MAX_SSML_CHARS``), checked before it is parsed."""
    max_depth: int
    """Elements inside elements, ``<speak>`` counting 1 (``MAX_SSML_DEPTH``)."""
    max_elements: int
    """Elements in all (``MAX_SSML_ELEMENTS``)."""


@dataclass(frozen=True)
class SpanMark:
    """A ``<mark>``: its name, and where it stands in its span's text: 0 (before it) or the text's length (after it)."""

    name: str
    offset: int


@dataclass(frozen=True)
class Span:
    """A run of the document's text in one voice, speed and gain, with the exact silence before it and its marks."""

    text: str
    """What it says, clean (whitespace collapsed, invisible characters removed); empty for a silence alone."""
    voice: str | None = None
    """The innermost ``<voice name>``, as written (the API resolves it); None: the request's voice."""
    speed: int | None = None
    """ChatTTS speed from ``<prosody rate>``; None: the request's."""
    gain_db: float | None = None
    """From ``<prosody volume>``; None: no gain."""
    pause_samples: int | None = None
    """Exactly this many zero samples before it (24 kHz); None: the usual pause after earlier speech."""
    marks: tuple[SpanMark, ...] = ()

    def retexted(self, text: str) -> Span:
        """This span saying ``text`` instead (its text cleaned or rewritten by the API): marks at its end move to the
        new end, marks at its start stay."""
        end = len(self.text)
        marks = tuple(SpanMark(mark.name, len(text) if end and mark.offset == end else 0) for mark in self.marks)
        return replace(self, text=text, marks=marks)


@dataclass(frozen=True)
class SsmlDocument:
    """A document as ttsq will speak it."""

    spans: tuple[Span, ...]
    language: Language
    """The language its ``say-as`` was written in (``xml:lang``, else its text's)."""
    voices: dict[str, Position] = field(default_factory=dict)
    """Each voice it names, and where it is first named (for the API's refusal of a voice the caller cannot use)."""

    @property
    def text(self) -> str:
        """All it says, spans apart by a space (what a status or a dead letter shows)."""
        return " ".join(span.text for span in self.spans if span.text)


# ---- reading ----------------------------------------------------------------------------------------


def read_ssml(source: str, limits: SsmlLimits, speed: int) -> SsmlDocument:
    """``source`` read as ttsq speaks it, or :class:`SsmlError` with what is wrong and where.

    ``speed`` is the request's own (``rate`` percentages are relative to it at the top level).
    """
    if len(source) > limits.max_chars:
        raise SsmlError(f"ssml is {len(source)} characters long; the limit is {limits.max_chars} (MAX_SSML_CHARS)")
    reader = _Reader(limits, speed)
    parser = DefusedExpatParser(forbid_dtd=True, forbid_entities=True, forbid_external=True)
    parser.setContentHandler(reader)
    reader.setDocumentLocator(ExpatLocator(parser))  # parse() would; feed() does not
    try:
        parser.feed(source)
        parser.close()
    except SAXParseException as exc:
        where = Position(exc.getLineNumber() or 1, (exc.getColumnNumber() or 0) + 1)
        raise SsmlError(f"ssml is not well-formed XML: {exc.getMessage()}", where) from None
    except DefusedXmlException as exc:
        raise SsmlError(_forbidden(exc), reader.position()) from None
    if reader.root_seen is False:
        raise SsmlError("ssml has no <speak> element")
    language = reader.language or detect_language(reader.all_text())
    spans = _Builder(language).spans(reader.events)
    if not any(char.isalnum() for span in spans for char in span.text):
        raise SsmlError("ssml has nothing to speak (no letter, digit or ideograph outside its markup)")
    return SsmlDocument(tuple(spans), language, reader.voices)


def _forbidden(exc: DefusedXmlException) -> str:
    if isinstance(exc, DTDForbidden):
        return "ssml must not have a document type (<!DOCTYPE …>): no DTD, entity or external reference is read"
    if isinstance(exc, EntitiesForbidden):
        return "ssml must not declare entities"
    if isinstance(exc, ExternalReferenceForbidden):
        return "ssml must not refer to anything outside it"
    return f"ssml is refused: {exc}"


@dataclass(frozen=True)
class _Context:
    """What an element's text is spoken with: the enclosing ``<voice>`` and ``<prosody>``."""

    voice: str | None = None
    speed: int | None = None
    gain_db: float | None = None


@dataclass(frozen=True)
class _Text:
    text: str
    context: _Context


@dataclass(frozen=True)
class _SayAs:
    interpret_as: str
    date_format: str | None
    content: str
    context: _Context
    position: Position


@dataclass(frozen=True)
class _Break:
    samples: int
    position: Position


@dataclass(frozen=True)
class _Mark:
    name: str


@dataclass(frozen=True)
class _SentenceEnd:
    paragraph: bool


_Event = _Text | _SayAs | _Break | _Mark | _SentenceEnd


@dataclass
class _Frame:
    name: str
    context: _Context
    position: Position
    attributes: dict[str, str]
    content: list[str] = field(default_factory=list)


class _Reader(ContentHandler):
    """The SAX side: every element and attribute checked as it arrives, turned into a flat list of events."""

    def __init__(self, limits: SsmlLimits, speed: int) -> None:
        super().__init__()
        self.limits = limits
        self.request_speed = speed
        self.stack: list[_Frame] = []
        self.open_sentences = {"p": 0, "s": 0}
        """How many ``<p>`` and ``<s>`` are open: counted, so that checking where one may go costs the same at any
        depth (a set of the stack's names built per element made a deep document quadratic)."""
        self.events: list[_Event] = []
        self.elements = 0
        self.root_seen = False
        self.language: Language | None = None
        self.voices: dict[str, Position] = {}
        self._locator: Locator | None = None

    def setDocumentLocator(self, locator: Locator) -> None:
        self._locator = locator

    def position(self) -> Position:
        """Where the parser is: the start of the tag being read (the parser sets its locator before the first)."""
        if self._locator is None:
            return Position(1, 1)
        return Position(self._locator.getLineNumber() or 1, (self._locator.getColumnNumber() or 0) + 1)

    def fail(self, message: str) -> SsmlError:
        return SsmlError(message, self.position())

    def startElement(self, name: str, attrs: AttributesImpl) -> None:
        self.elements += 1
        if self.elements > self.limits.max_elements:
            raise self.fail(f"ssml has more than {self.limits.max_elements} elements (MAX_SSML_ELEMENTS)")
        if len(self.stack) >= self.limits.max_depth:
            raise self.fail(f"ssml nests elements more than {self.limits.max_depth} deep (MAX_SSML_DEPTH)")
        rule = self._rule(name)
        parent = self.stack[-1] if self.stack else None
        self._check_place(name, parent)
        attributes = self._attributes(name, rule, attrs)
        context = parent.context if parent is not None else _Context()
        frame = _Frame(name, self._context(name, context, attributes), self.position(), attributes)
        self.stack.append(frame)
        if name in self.open_sentences:
            self.open_sentences[name] += 1
        self._started(frame)

    def _rule(self, name: str) -> ElementRule:
        rule = ELEMENTS.get(name)
        if rule is not None:
            return rule
        why = REFUSED_ELEMENTS.get(name, "it is not an SSML element ttsq knows")
        raise self.fail(f"<{name}> is not supported ({why}); supported elements: {listed(ELEMENTS)} (docs/ssml.md)")

    def _check_place(self, name: str, parent: _Frame | None) -> None:
        if parent is None:
            if name != "speak":
                raise self.fail(f"the root element must be <speak>, not <{name}>")
            self.root_seen = True
            return
        if name == "speak":
            raise self.fail("<speak> is the root element only")
        if ELEMENTS[parent.name].content != "mixed":
            holds = "text only" if ELEMENTS[parent.name].content == "text" else "nothing"
            raise self.fail(f"<{parent.name}> holds {holds}, not <{name}>")
        inside = self.open_sentences
        if name == "p" and (inside["p"] or inside["s"]):
            raise self.fail(f"<p> cannot be inside <{'s' if inside['s'] else 'p'}>")
        if name == "s" and inside["s"]:
            raise self.fail("<s> cannot be inside <s>")

    def _attributes(self, element: str, rule: ElementRule, attrs: AttributesImpl) -> dict[str, str]:
        given: dict[str, str] = {}
        for name in attrs.getNames():
            value = attrs.getValue(name)
            key = "xmlns:*" if name.startswith("xmlns:") else name
            if key not in rule.attributes:
                why = REFUSED_ATTRIBUTES.get(element, {}).get(name)
                supported = f"supported attributes of <{element}>: {listed(rule.attributes) or 'none'}"
                refused = f" ({why})" if why else ""
                raise self.fail(f"<{element}> attribute {quoted(name)} is not supported{refused}; {supported}")
            if len(value) > MAX_ATTRIBUTE_CHARS:
                raise self.fail(
                    f"<{element}> attribute {name!r} is {len(value)} characters long; the longest this attribute may be "
                    f"is {MAX_ATTRIBUTE_CHARS}"
                )
            given[name] = value
        for name, attribute in rule.attributes.items():
            if attribute.required and name not in given:
                raise self.fail(f"<{element}> needs its {name!r} attribute")
        return given

    def _context(self, element: str, context: _Context, attributes: dict[str, str]) -> _Context:
        """The context an element's content is spoken in: its ``<voice>`` or ``<prosody>`` within the enclosing one."""
        try:
            if element == "voice":
                name = attributes["name"].strip()
                if not name:
                    raise ValueRefused("<voice> attribute 'name' is empty")
                self.voices.setdefault(name, self.position())
                return replace(context, voice=name)
            if element == "prosody" and "rate" in attributes:
                context = replace(context, speed=rate_speed(attributes["rate"], context.speed, self.request_speed))
            if element == "prosody" and "volume" in attributes:
                context = replace(context, gain_db=volume_gain(attributes["volume"], context.gain_db))
            return context
        except ValueRefused as exc:
            raise self.fail(str(exc)) from None

    def _started(self, frame: _Frame) -> None:
        """What an element says where it begins (:meth:`characters` and :meth:`endElement` say the rest)."""
        attributes = frame.attributes
        try:
            if frame.name == "speak":
                self.language = document_language(attributes)
            elif frame.name == "break":
                self.events.append(_Break(break_samples(attributes), frame.position))
            elif frame.name == "mark":
                self.events.append(_Mark(self._mark_name(attributes["name"])))
            elif frame.name == "p":
                self.events.append(_SentenceEnd(paragraph=True))
            elif frame.name == "say-as":
                self._check_say_as(attributes)
            elif frame.name == "sub":
                self.events.append(_Text(attributes["alias"], frame.context))
        except ValueRefused as exc:
            raise self.fail(str(exc)) from None

    @staticmethod
    def _mark_name(name: str) -> str:
        if not name.strip() or len(name) > MAX_MARK_NAME_CHARS:
            raise ValueRefused(f"<mark> name must be 1 to {MAX_MARK_NAME_CHARS} characters, not {len(name)}")
        return name

    @staticmethod
    def _check_say_as(attributes: dict[str, str]) -> None:
        kind = attributes["interpret-as"]
        if kind not in INTERPRETATIONS:
            raise ValueRefused(f"<say-as> interpret-as {quoted(kind)} is not supported; supported: {listed(INTERPRETATIONS)}")
        date_format = attributes.get("format")
        if date_format is not None and (kind != "date" or date_format not in DATE_FORMATS):
            raise ValueRefused(
                f"<say-as> format {quoted(date_format)} is not supported with interpret-as {kind!r}; "
                f'format is for interpret-as="date": {", ".join(DATE_FORMATS)}'
            )

    def characters(self, content: str) -> None:
        if not self.stack:
            return
        frame = self.stack[-1]
        rule = ELEMENTS[frame.name]
        if rule.content == "empty":
            if content.strip():
                raise self.fail(f"<{frame.name}> holds nothing, not text")
        elif rule.content == "text":
            frame.content.append(content)
        else:
            self.events.append(_Text(content, frame.context))

    def endElement(self, name: str) -> None:
        frame = self.stack.pop()
        if name in self.open_sentences:
            self.open_sentences[name] -= 1
        if name == "say-as":
            content = " ".join("".join(frame.content).split())
            if not content:
                raise self.fail("<say-as> is empty")
            self.events.append(
                _SayAs(frame.attributes["interpret-as"], frame.attributes.get("format"), content, frame.context, frame.position)
            )
        elif name in ("s", "p"):
            self.events.append(_SentenceEnd(paragraph=name == "p"))

    def all_text(self) -> str:
        """Everything the document says before ``say-as`` is read (its language is told from it)."""
        return " ".join(event.text if isinstance(event, _Text) else event.content for event in self._texts())

    def _texts(self) -> Iterator[_Text | _SayAs]:
        return (event for event in self.events if isinstance(event, _Text | _SayAs))


# ---- spans ------------------------------------------------------------------------------------------


@dataclass
class _OpenSpan:
    context: _Context
    pause: int | None = None
    pieces: list[str] = field(default_factory=list)
    marks_at_start: list[str] = field(default_factory=list)
    marks_at_end: list[str] = field(default_factory=list)
    has_text: bool = False


class _Builder:
    """The events in order, as spans (the rules are the module docstring's)."""

    def __init__(self, language: Language) -> None:
        self.language: Language = language
        self.done: list[Span] = []
        self.open = _OpenSpan(_Context())
        self.pending: list[str] = []
        """Marks after the open span's text, waiting to see whether more text (they start the next span) or a
        silence (they end this one) comes first."""
        self.paragraph_due = False
        self.spoken = False

    def spans(self, events: list[_Event]) -> list[Span]:
        for event in events:
            self._take(event)
        self._end_speech()
        self._close()
        return self.done

    def _take(self, event: _Event) -> None:
        if isinstance(event, _Text):
            self._text(event.text, event.context)
        elif isinstance(event, _SayAs):
            try:
                said = spoken(event.interpret_as, event.content, self.language, event.date_format)
            except SayAsError as exc:
                what = f"<say-as interpret-as={event.interpret_as!r}> {quoted(event.content)}"
                raise SsmlError(f"{what} {exc}", event.position) from None
            self._text(said, event.context)
        elif isinstance(event, _Break):
            self._break(event)
        elif isinstance(event, _Mark):
            (self.pending if self.open.has_text else self.open.marks_at_start).append(event.name)
        else:
            self._sentence_end()
            if event.paragraph:
                self._end_speech()
                self.paragraph_due = self.spoken

    def _text(self, text: str, context: _Context) -> None:
        if not text.strip():
            if self.open.has_text:
                self.open.pieces.append(text)
            return
        if self.open.has_text and (context != self.open.context or self.pending or self.paragraph_due):
            pause = self._paragraph_pause()
            self._close()
            self.open = _OpenSpan(context, pause, marks_at_start=self.pending)
            self.pending = []
        elif not self.open.has_text:
            self.open.context = context
            if self.open.pause is None:
                self.open.pause = self._paragraph_pause()
        self.paragraph_due = False
        self.open.pieces.append(text)
        self.open.has_text = self.spoken = True

    def _paragraph_pause(self) -> int | None:
        return paragraph_samples() if self.paragraph_due else None

    def _break(self, event: _Break) -> None:
        self.paragraph_due = False  # a break between paragraphs is their silence
        if self.open.has_text or self.open.marks_at_start:
            self._end_speech()
            self._close()
            self.open = _OpenSpan(self.open.context, event.samples)
            return
        pause = (self.open.pause or 0) + event.samples
        if pause > MAX_PAUSE_SAMPLES:
            raise SsmlError("breaks in a row add up to more than a minute of silence", event.position)
        self.open.pause = pause

    def _end_speech(self) -> None:
        """A silence or the end follows: marks waiting after the open span's text end it."""
        self.open.marks_at_end += self.pending
        self.pending = []

    def _sentence_end(self) -> None:
        if not self.open.has_text:
            return
        said = "".join(self.open.pieces).rstrip()
        if said.rstrip(CLOSERS)[-1:] not in _SENTENCE_MARKS:
            self.open.pieces = [said, "。" if self.language == "zh" else "."]
        self.open.pieces.append(" ")

    def _close(self) -> None:
        span = self.open
        text = clean_text("".join(span.pieces)) if span.has_text else ""
        if not text and span.pause is None and not span.marks_at_start and not span.marks_at_end:
            return
        marks = tuple(SpanMark(name, 0) for name in span.marks_at_start) + tuple(
            SpanMark(name, len(text)) for name in span.marks_at_end
        )
        context = span.context
        self.done.append(Span(text, context.voice, context.speed, context.gain_db, span.pause, marks))
