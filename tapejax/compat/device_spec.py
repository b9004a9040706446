"""``tf.DeviceSpec``: TF's public device-name object (parsing is ``compat.device.parse``).

Unlike the scope's internal ``compat.device.DeviceSpec`` (a record whose ``to_string`` fills TF's
defaults for placement), this is TF's class as users see it: the five optional parts, a
``to_string`` that names only the parts given, ``from_string`` / ``parse_from_string``,
``make_merged_spec`` and ``replace`` (new objects: TF2's DeviceSpec is immutable), equality and
hashing by the string.
"""
from typing import Any, Optional

from .device import parse

__all__ = ["DeviceSpec"]


def _int_or_none(v: Any) -> Optional[int]:
    return None if v is None else int(v)


def _type_or_none(v: Any) -> Optional[str]:
    if v is None:
        return None
    s = str(v)
    return s.upper() if s.upper() in ("CPU", "GPU") else s


class DeviceSpec:
    """``tf.DeviceSpec(job, replica, task, device_type, device_index)`` (see the module docstring)."""

    __slots__ = ("_job", "_replica", "_task", "_device_type", "_device_index")

    def __init__(self, job=None, replica=None, task=None, device_type=None, device_index=None):
        self._job = None if job is None else str(job)
        self._replica = _int_or_none(replica)
        self._task = _int_or_none(task)
        self._device_type = _type_or_none(device_type)
        self._device_index = _int_or_none(device_index)

    job = property(lambda self: self._job)
    replica = property(lambda self: self._replica)
    task = property(lambda self: self._task)
    device_type = property(lambda self: self._device_type)
    device_index = property(lambda self: self._device_index)

    def to_string(self) -> str:
        """``/job:<name>/replica:<id>/task:<id>/device:<type>:<id>``, the parts given only (``*`` for a
        type without an index)."""
        out = []
        if self._job is not None:
            out.append(f"/job:{self._job}")
        if self._replica is not None:
            out.append(f"/replica:{self._replica}")
        if self._task is not None:
            out.append(f"/task:{self._task}")
        if self._device_type is not None:
            out.append(f"/device:{self._device_type}:{'*' if self._device_index is None else self._device_index}")
        return "".join(out)

    @classmethod
    def from_string(cls, spec: Optional[str]) -> "DeviceSpec":
        p = parse(spec or "")
        return cls(p.job, p.replica, p.task, p.device_type, p.device_index)

    def parse_from_string(self, spec: Optional[str]) -> "DeviceSpec":
        return self.from_string(spec)

    def make_merged_spec(self, dev: "DeviceSpec") -> "DeviceSpec":
        """A new spec: ``dev``'s parts where it names them, this one's elsewhere."""
        parts = [(a if a is not None else b) for a, b in zip(dev._parts(), self._parts())]
        return type(self)(*parts)

    def replace(self, **kwargs: Any) -> "DeviceSpec":
        fields: "dict[str, Any]" = dict(zip(("job", "replica", "task", "device_type", "device_index"), self._parts()))
        fields.update(kwargs)
        return type(self)(**fields)

    def _parts(self) -> "tuple[Any, ...]":
        return (self._job, self._replica, self._task, self._device_type, self._device_index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceSpec) and self.to_string() == other.to_string()

    def __hash__(self) -> int:
        return hash(self.to_string())

    def __repr__(self) -> str:
        return (f"<DeviceSpec(job={self._job}, replica={self._replica}, task={self._task}, "
                f"device_type={self._device_type}, device_index={self._device_index})>")
