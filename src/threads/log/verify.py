"""Export verification: every line admitted, then chained, in one streaming pass.

``ChainChecker`` holds the cross-line rules (segment structure and fork links, contiguous seq,
``prev_hash`` chaining, ids matching the segment header, epoch monotone, event_id unique along
the resolved chain) and feeds each event to an optional ``apply`` (the semantic rules in reduce).
``verify_export`` splits an export into lines, drops a torn (unterminated) final chunk, admits
and checks each line before reading the next, and checks the Head checkpoint.
Invariant: the first failing line decides the error, and a ``VerifiedExport`` is returned only
when every committed line passed every check in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from threads.errors import LogError
from threads.log.admission import admit_line
from threads.log.lines import Event, Head, Header
from threads.log.vocabulary import data_of

ApplyEvent = Callable[[Event], None]
ApplyHeader = Callable[[Header], None]


@dataclass(frozen=True, slots=True)
class Segment:
    """One branch's stored lines in a (resolved) chain: its header and its events."""

    header: Header
    events: list[Event] = field(default_factory=list)
    fork_at_seq: int | None = None  # None for the root segment


@dataclass(frozen=True, slots=True)
class TornTail:
    """The unterminated final chunk of an export, dropped: where it started and its bytes."""

    at_offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class VerifiedExport:
    segments: list[Segment]
    events: list[Event]  # the resolved chain, every segment in order
    head: Head | None
    head_verified: bool
    committed_bytes: int  # header and event lines incl. their newline; no head, no torn chunk
    torn: TornTail | None

    def torn_where(self) -> str | None:
        """Where and how the export is torn, in words (None when it is complete): an
        unterminated final chunk, or an end at a line boundary with no head line."""
        if self.torn is not None:
            return (
                f"it ends with {len(self.torn.data)} bytes at byte offset {self.torn.at_offset}"
                " that are not a complete line (no newline after them)"
            )
        if self.head is None:
            return f"it ends at byte offset {self.committed_bytes} without its head line"
        return None


class ChainChecker:
    """Cross-line checks, one line at a time. Feed headers and events in export order (each
    ancestor segment through its fork point, then the branch itself)."""

    def __init__(
        self, *, apply: ApplyEvent | None = None, on_header: ApplyHeader | None = None
    ) -> None:
        self._apply = apply
        self._on_header = on_header
        self.segments: list[Segment] = []
        self.events: list[Event] = []
        self._event_ids: set[str] = set()
        self._awaiting_fork = False
        self._last_hash = ""  # hash of the previous line in the current segment
        self._epoch = 0

    @property
    def next_seq(self) -> int:
        """The seq the next event must have (0 before any header: the header slot)."""
        if not self.segments:
            return 0
        return self.events[-1].seq + 1 if self.events else 1

    @property
    def last_hash(self) -> str:
        """Hash of the last line of the resolved chain (the Head hash)."""
        return self._last_hash

    def header(self, header: Header) -> None:
        # A header has no seq of its own: a child header's problems are reported at the seq
        # its segment's first event (the fork) would have, as upstream does.
        if self._awaiting_fork:
            raise LogError(
                "invalid_transition", "a child header must be followed by its fork event, "
                "not by another header", seq=self.next_seq,
            )
        if self.segments:
            root = self.segments[0].header
            if header.thread_id != root.thread_id:
                raise LogError(
                    "invalid_transition",
                    f"child header names thread {header.thread_id}, but the chain is thread "
                    f"{root.thread_id}", seq=self.next_seq,
                )
            self._awaiting_fork = True
        self.segments.append(Segment(header))
        self._last_hash = header.hash
        if self._on_header is not None:
            self._on_header(header)

    def event(self, event: Event) -> None:
        if not self.segments:
            raise LogError(
                "invalid_transition", "an event comes before any header; a segment must start "
                "with its header", seq=event.seq,
            )
        self._check_structure(event)
        if event.seq != self.next_seq:
            raise LogError(
                "seq_mismatch", f"seq is {event.seq}, expected {self.next_seq}", seq=event.seq
            )
        if event.prev_hash != self._last_hash:
            raise LogError(
                "prev_hash_mismatch", "prev_hash does not match the hash of the previous line "
                "in this segment", seq=event.seq,
            )
        if event.type == "fork":
            self._check_fork_link(event)
        self._check_ids(event)
        self._accept(event)

    def _check_structure(self, event: Event) -> None:
        if self._awaiting_fork and event.type != "fork":
            raise LogError(
                "invalid_transition",
                f"a child header must be followed by its fork event, not {event.type}",
                seq=event.seq,
            )
        if not self._awaiting_fork and event.type == "fork":
            raise LogError(
                "invalid_transition", "a fork event may only follow a child header",
                seq=event.seq,
            )

    def _check_fork_link(self, fork: Event) -> None:
        parent = self.segments[-2]
        parent_last = parent.events[-1] if parent.events else None
        at_hash = parent_last.hash if parent_last is not None else parent.header.hash
        link = data_of(fork, "fork")
        if link.get("at_hash") != at_hash:
            raise LogError(
                "prev_hash_mismatch", f"fork at_hash does not match the parent's line at seq "
                f"{fork.seq - 1}", seq=fork.seq,
            )
        if link.get("parent_branch_id") != parent.header.branch_id:
            raise LogError(
                "invalid_transition", "fork parent_branch_id is not the previous segment's "
                "branch", seq=fork.seq,
            )

    def _check_ids(self, event: Event) -> None:
        header = self.segments[-1].header
        if event.branch_id != header.branch_id or event.thread_id != header.thread_id:
            raise LogError(
                "invalid_transition", "event branch_id/thread_id differ from its segment "
                "header's", seq=event.seq,
            )
        if event.epoch < max(self._epoch, 1):
            raise LogError(
                "invalid_transition", f"epoch {event.epoch} is lower than the previous "
                f"event's ({self._epoch})", seq=event.seq,
            )
        if event.event_id in self._event_ids:
            raise LogError(
                "invalid_transition", f"event_id {event.event_id} is already used on this "
                "resolved chain", seq=event.seq,
            )

    def _accept(self, event: Event) -> None:
        if self._apply is not None:
            self._apply(event)
        segment = self.segments[-1]
        if self._awaiting_fork:
            self.segments[-1] = Segment(segment.header, segment.events, event.seq - 1)
            self._awaiting_fork = False
        self.segments[-1].events.append(event)
        self.events.append(event)
        self._event_ids.add(event.event_id)
        self._last_hash = event.hash
        self._epoch = event.epoch

    def check_head(self, head: Head) -> None:
        """The Head must name the last segment's branch and its last line's seq and hash."""
        if not self.segments or self._awaiting_fork:
            message = "head checkpoint with no complete segment"
            raise LogError("head_mismatch", message, seq=head.seq)
        branch = self.segments[-1].header.branch_id
        last_seq = self.events[-1].seq if self.events else 0
        if head.branch_id != branch or head.seq != last_seq or head.hash != self._last_hash:
            raise LogError(
                "head_mismatch", f"head checkpoint names seq {head.seq}, but the log ends at seq "
                f"{last_seq} (or its branch or hash differs)", seq=head.seq,
            )


def verify_lines(
    lines: Iterable[bytes], *, apply: ApplyEvent | None = None, on_header: ApplyHeader | None = None
) -> ChainChecker:
    """Admit and chain stored lines (no newlines, no Head), e.g. what a store holds for a branch
    and its ancestors through their fork points. Returns the checker holding the segments."""
    checker = ChainChecker(apply=apply, on_header=on_header)
    for raw in lines:
        _feed(checker, admit_line(raw, position_seq=checker.next_seq))
    return checker


def _feed(checker: ChainChecker, line: Header | Event | Head) -> None:
    if isinstance(line, Header):
        checker.header(line)
    elif isinstance(line, Event):
        checker.event(line)
    else:
        raise LogError(
            "invalid_transition", "a head checkpoint may only be the last line of an export",
            seq=line.seq,
        )


def split_torn(data: bytes) -> tuple[bytes, TornTail | None]:
    """Newline is the commit marker: an unterminated final chunk is torn, whatever it holds."""
    cut = data.rfind(b"\n") + 1
    if cut == len(data):
        return data, None
    return data[:cut], TornTail(cut, data[cut:])


def verify_export(
    data: bytes, *, apply: ApplyEvent | None = None, on_header: ApplyHeader | None = None
) -> VerifiedExport:
    """Verify a JSONL export (lines + ``\n`` each, then the Head line). A torn final chunk is
    dropped and reported; the prefix is then served with ``head_verified`` False. A missing
    Head (an export truncated at a line boundary) is not an error either: it is unverified."""
    committed, torn = split_torn(data)
    checker = ChainChecker(apply=apply, on_header=on_header)
    head: Head | None = None
    committed_bytes = 0
    for raw in committed.split(b"\n")[:-1]:
        position = head.seq + 1 if head is not None else checker.next_seq
        line = admit_line(raw, position_seq=position)
        if head is not None:
            raise LogError(
                "invalid_transition", "a line follows the head checkpoint; the head must be "
                "the last line of an export", seq=position,
            )
        if isinstance(line, Head):
            checker.check_head(line)
            head = line
            continue
        _feed(checker, line)
        committed_bytes += len(raw) + 1
    return VerifiedExport(
        segments=checker.segments,
        events=checker.events,
        head=head,
        head_verified=head is not None and torn is None,
        committed_bytes=committed_bytes,
        torn=torn,
    )
