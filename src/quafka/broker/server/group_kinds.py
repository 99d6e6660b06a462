"""Which kind of group a group id names. Kafka keeps every group type in one namespace
(GroupMetadataManager.groups): an id is a share group, a classic group, a consumer group of
KIP-848, a *simple* group (a classic group that exists only through offsets committed with
generation -1, by consumers using `assign()`), or nothing. The handlers of every group API ask
here rather than each coordinator in turn."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .classic_groups import ClassicGroupService
    from .consumer_groups import ConsumerGroupService
    from .consumer_offsets import ConsumerOffsetsService
    from .share_groups import ShareGroupService

__all__ = ["GroupKindOf", "group_kind"]


class GroupKindOf(Enum):
    SHARE = "share"
    CLASSIC = "classic"
    CONSUMER = "consumer"
    SIMPLE = "simple"  # ListGroups shows it as type classic, state Empty, protocol type ""


class GroupCoordinators(Protocol):
    """The broker as `group_kind` sees it: its group coordinators."""

    share_groups: ShareGroupService | None
    consumer_groups: ConsumerGroupService | None
    classic_groups: ClassicGroupService | None
    consumer_offsets: ConsumerOffsetsService | None


def group_kind(server: "GroupCoordinators", group_id: str) -> GroupKindOf | None:
    if server.share_groups is not None and server.share_groups.coordinator.group(group_id) is not None:
        return GroupKindOf.SHARE
    if server.classic_groups is not None and server.classic_groups.has_group(group_id):
        return GroupKindOf.CLASSIC
    if server.consumer_groups is not None and server.consumer_groups.has_group(group_id):
        return GroupKindOf.CONSUMER
    if server.consumer_offsets is not None and server.consumer_offsets.offsets.has_offsets(group_id):
        return GroupKindOf.SIMPLE
    return None
