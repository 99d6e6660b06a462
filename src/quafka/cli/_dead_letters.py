"""The dead-letter actions of `quafka share-groups` (KIP-1191), quafka's own: ``--dead-letters``
lists a share group's dead letters from its DLQ topic, ``--redrive`` produces them again, each
once (client/dead_letters.py does the work, through topics and groups only, so both serve Apache
Kafka 4.4 too). Both find the DLQ topic in the group's ``errors.deadletterqueue.topic.name``
unless ``--from-dlq`` names it. Before it sends anything, ``--redrive`` warns on stderr when the
workers were failing lately on the exception classes of the letters it redrives
(``still_failing``): a redrive into broken workers only makes the jobs die again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from quafka.client.dead_letters import DLQ_TOPIC_CONFIG, FAILING_WINDOW_MS

from ._common import Progress, ToolError, kafka_table

__all__ = ["list_letters", "one_line", "redrive"]

ERROR_WIDTH = 60  # the ERROR column of --dead-letters shows this many characters of the message
PROGRESS_ABOVE = 200  # a redrive of more dead letters than this shows a progress bar


def _dlq_topic(admin: Any, args: argparse.Namespace) -> str:
    """--from-dlq, else the group's errors.deadletterqueue.topic.name; an error when neither names one."""
    if args.from_dlq:
        return args.from_dlq
    name = (admin.describe_configs("group", args.group).get(DLQ_TOPIC_CONFIG) or "").strip()
    if not name:
        raise ToolError(f"Share group {args.group} has no {DLQ_TOPIC_CONFIG} (no dead-letter queue topic); "
                        f"pass --from-dlq TOPIC")
    return name


def _require_topic(admin: Any, topic: str) -> None:
    from quafka.client.errors import ErrorCode, KafkaException

    try:
        admin.describe_topics([topic])
    except KafkaException as exc:
        if exc.code == ErrorCode.unknown_topic_or_partition:
            raise ToolError(f"Topic '{topic}' does not exist.") from None
        raise


def list_letters(admin: Any, args: argparse.Namespace) -> None:
    """--dead-letters: the group's dead letters, by source topic, partition and offset."""
    dlq = _dlq_topic(admin, args)
    _require_topic(admin, dlq)
    letters = admin.list_dead_letters(args.group, dlq, args.topic[0] if args.topic else None)
    letters = sorted(letters, key=lambda x: (x.topic, x.partition, x.offset, x.dlq_partition, x.dlq_offset))
    if args.output == "json":
        print(json.dumps([x.to_json() for x in letters], indent=2))
        return
    if not letters:
        of_topic = f" of topic '{args.topic[0]}'" if args.topic else ""
        print(f"\nShare group '{args.group}' has no dead letters{of_topic} in topic '{dlq}'.")
        return
    kafka_table(["GROUP", "TOPIC", "PARTITION", "OFFSET", "DELIVERY-COUNT", "REASON", "DIED-AT", "DLQ-PARTITION",
                 "DLQ-OFFSET", "COPY", "ERROR-CLASS", "ERROR"],
                [[x.group, x.topic, x.partition, x.offset, x.delivery_count, x.reason, x.died_at, x.dlq_partition,
                  x.dlq_offset, "yes" if x.has_copy else "no", x.error_class, one_line(x.error_message, ERROR_WIDTH)]
                 for x in letters],
                [15, 15, 10, 10, 15, 22, 25, 14, 11, 5, 12, 0])


def one_line(text: str | None, width: int) -> str | None:
    """``text`` on one line (runs of whitespace, newlines included, as one space), cut to
    ``width`` characters with "..." at the end when longer; None stays None."""
    if text is None:
        return None
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 3].rstrip() + "..."


def _ago(ms: int) -> str:
    """A duration for a person: '12 s', '5 min', '3 h', '2 d'."""
    seconds = max(0, ms) // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 120 * 60:
        return f"{seconds // 60} min"
    if seconds < 48 * 3600:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _warn_if_still_failing(admin: Any, args: argparse.Namespace, dlq: str) -> None:
    """Before a redrive sends anything: a warning on stderr for each exception class of the letters
    it would send on which the group's workers failed lately (client/dead_letters.still_failing).
    It reads the DLQ topic once more (the redrive reads it again), so it costs a second read."""
    from quafka.client.dead_letters import PartitionProgress, parse_redriven, pending_letters, progress_group, still_failing

    window_ms = FAILING_WINDOW_MS if args.failing_window_s is None else int(args.failing_window_s * 1000)
    if window_ms <= 0:
        return
    letters = admin.list_dead_letters(args.group, dlq)
    committed = admin.list_consumer_group_offsets(progress_group(args.group))
    progress = {p: PartitionProgress(offset, tuple(parse_redriven(metadata)))
                for (topic, p), (offset, metadata) in committed.items() if topic == dlq and offset >= 0}
    now_ms = int(time.time() * 1000)
    tail = "the workers are probably still failing on it — the redriven jobs may die again"
    for failing in still_failing(letters, pending_letters(letters, progress, args.offsets), now_ms, window_ms):
        lines = []
        if failing.died_again:
            lines.append(f"warning: {_plural(failing.died_again, 'job', 'jobs')} redriven earlier died again with "
                         f"{failing.error_class} (the newest {_ago(now_ms - failing.died_again_newest_ms)} ago)")
        if failing.recent:
            were = "was" if failing.recent == 1 else "were"
            lines.append(f"warning: {_plural(failing.recent, 'dead letter', 'dead letters')} of group {args.group} "
                         f"with {failing.error_class} {were} written in the last {_ago(window_ms)} (the newest "
                         f"{_ago(now_ms - failing.recent_newest_ms)} ago); {tail}")
        else:  # only letters being redriven now that died again longer ago: the workers may be fixed since
            lines[-1] += "; make sure the workers no longer fail on it before redriving them once more"
        print("\n".join(lines), file=sys.stderr)


def redrive(admin: Any, args: argparse.Namespace) -> None:
    """--redrive: a warning when the workers are still failing (before anything is sent), then a
    table of what is (or would be) sent and skipped, then a summary line."""
    dlq = _dlq_topic(admin, args)
    _require_topic(admin, dlq)
    if args.to_topic:
        _require_topic(admin, args.to_topic)
    _warn_if_still_failing(admin, args, dlq)
    count = [0]
    bar: list[Progress] = []

    def delivered(n: int) -> None:  # a bar once the run turns out long (called by the producer's thread)
        count[0] += n
        if not bar and count[0] > PROGRESS_ABOVE:
            bar.append(Progress(None, "Redriving dead letters"))
            n = count[0]
        if bar:
            bar[0].update(n)

    try:
        result = admin.redrive_dead_letters(args.group, dlq, to_topic=args.to_topic, offsets=args.offsets,
                                            dry_run=args.dry_run, progress=delivered if args.execute else None)
    finally:
        if bar:
            bar[0].close()
    status = {"send": "would-send"}
    if result.planned:
        kafka_table(["GROUP", "DLQ-PARTITION", "DLQ-OFFSET", "TOPIC", "PARTITION", "OFFSET", "TO-TOPIC", "PAYLOAD",
                     "STATUS"],
                    [[args.group, i.letter.dlq_partition, i.letter.dlq_offset, i.letter.topic, i.letter.partition,
                      i.letter.offset, i.target_topic, i.payload, status.get(i.status, i.status)]
                     for i in result.planned],
                    [15, 14, 11, 15, 10, 10, 15, 9, 0])
    count, already, missing = len(result.sent), len(result.skipped_already_redriven), len(result.skipped_missing)
    skipped = f"{already} already redriven and {missing} whose source record is no longer in the log"
    where = f"dead letter(s) of share group '{args.group}' from '{dlq}'"
    if args.dry_run:
        print(f"\nDry run: {count} {where} would be redriven; {skipped} would be skipped. Nothing was sent.")
    else:
        print(f"\nRedrove {count} {where}; skipped {skipped}.")
