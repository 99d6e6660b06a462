"""What the consumer-group and share-group image trackers share: the image of each group last
written to `__consumer_offsets`, the image a pending append would make it, and `written`, which
takes that append as done (after a successful append; a failed one leaves the last image as it
was). Subclasses compute the records (`records`) from the group's own keys and the keys of the
members in `group.touched`, or from the whole group when `touched` is None.

Images are plain dicts {(record type, key): value}; a key absent from the image is absent from
the log (deleted or never written)."""

from __future__ import annotations

from typing import Any


class GroupImageTracker:
    def __init__(self) -> None:
        self._images: dict[str, dict] = {}
        # group id -> (the group, the image or part of it just rendered, its keys; None: the whole image)
        self._pending: dict[str, tuple[Any, dict, tuple | None]] = {}

    def get(self, group_id: str) -> dict | None:
        return self._images.get(group_id)

    def set(self, group_id: str, image: dict) -> None:
        """What the log says of the group (start-up replay)."""
        self._images[group_id] = image
        self._pending.pop(group_id, None)

    def _pend(self, group_id: str, group: Any, new: dict, keys: tuple | None) -> dict:
        """Remember what `written` will take; the part of the last image to diff against."""
        self._pending[group_id] = (group, new, keys)
        old = self._images.get(group_id, {})
        return old if keys is None else {k: old[k] for k in keys if k in old}

    def written(self, group_id: str) -> None:
        group, new, keys = self._pending.pop(group_id)
        if keys is None:
            if new:
                self._images[group_id] = new
            else:
                self._images.pop(group_id, None)
        else:
            image = self._images.setdefault(group_id, {})
            for key in keys:
                value = new.get(key)
                if value is None:
                    image.pop(key, None)
                else:
                    image[key] = value
        if group is not None:
            group.touched = set()
