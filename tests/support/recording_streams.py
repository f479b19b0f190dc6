"""A stand-in for CUDA streams and events on a CPU: the offloader's asynchronous control flow runs
(copies are done at once, so values stay right) and every stream operation is logged, so a test
can check NOTE [ Offload ordering ] (ckptlib/streams.py) against what really happened.

Log entries, in order:
  ("record", stream, event)     an event recorded on a stream
  ("wait", stream, event)       a stream made to wait on an event
  ("to_host", stream, source, host)       storage ids of a device-to-host copy
  ("to_device", stream, host, destination) storage ids of a host-to-device copy
  ("free", storage)             the last reference to a copied source storage died
  ("use", storage)              the offloader handed a reloaded tensor to autograd (see `watch_unpack`)
  ("use_on", stream, storage)   a tensor marked as used on a stream (record_stream)
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import weakref

from ckptlib.memory import storage_id


class RecordingStreams:
    asynchronous = True

    def __init__(self, log: list):
        self.log = log
        self._events = itertools.count()
        self._current = ["compute"]

    def compute(self):
        return "compute"

    def copy_stream(self):
        return "copy"

    def prefetch_stream(self):
        return "prefetch"

    def use_on(self, tensor, stream) -> None:
        self.log.append(("use_on", stream, storage_id(tensor)))

    def record(self, stream):
        event = next(self._events)
        self.log.append(("record", stream, event))
        return event

    def wait(self, stream, event) -> None:
        self.log.append(("wait", stream, event))

    @contextlib.contextmanager
    def on(self, stream):
        self._current.append(stream)
        try:
            yield
        finally:
            self._current.pop()

    def to_host(self, host, source) -> None:
        sid = storage_id(source)
        self.log.append(("to_host", self._current[-1], sid, storage_id(host)))
        weakref.finalize(source.untyped_storage(), self.log.append, ("free", sid))
        host.copy_(source)

    def to_device(self, destination, host) -> None:
        self.log.append(("to_device", self._current[-1], storage_id(host), storage_id(destination)))
        destination.copy_(host)


def install(monkeypatch) -> list:
    """Every offloader created from now on uses recording streams; returns their shared log."""
    log: list = []
    monkeypatch.setattr("ckptlib.streams.streams_for", lambda device: RecordingStreams(log))
    return log


def watch_unpack(monkeypatch, log: list) -> None:
    """Log when a reloaded tensor is handed back to autograd."""
    from ckptlib.offload import Offloader

    unpack = Offloader.unpack

    def logged(self, parked):
        out = unpack(self, parked)
        if out is not parked:
            log.append(("use", storage_id(out)))
        return out

    monkeypatch.setattr(Offloader, "unpack", logged)


def ordering_violations(log: list) -> list[str]:
    """Every place the log breaks NOTE [ Offload ordering ]; [] when it holds."""
    problems, recorded_on, waited = [], {}, collections.defaultdict(set)
    copies_to_host, last_reload_of = {}, {}  # source storage -> index of its copy; host -> index of its reload
    last_copy_into = {}  # host -> index of the device-to-host copy that filled it
    reloaded = {}  # destination storage -> (stream, index) of the copy that filled it
    since_last_copy = set()  # compute events the copy stream waited on since its last copy
    for i, entry in enumerate(log):
        kind = entry[0]
        if kind == "record":
            recorded_on[entry[2]] = (entry[1], i)
        elif kind == "wait":
            waited[entry[1]].add(entry[2])
            if entry[1] == "copy" and recorded_on.get(entry[2], ("",))[0] == "compute":
                since_last_copy.add(entry[2])
        elif kind == "to_host":
            _, stream, source, host = entry
            if stream != "copy":
                problems.append(f"{i}: device-to-host copy on the {stream} stream, not the copy stream")
            if not since_last_copy:
                problems.append(f"{i}: device-to-host copy without waiting on the compute stream (ordering 1)")
            if host in last_reload_of:
                reload_at = last_reload_of.pop(host)
                if not any(recorded_on.get(e, ("", -1))[1] > reload_at for e in waited["copy"]):
                    problems.append(f"{i}: host buffer overwritten before its reload was known done (ordering 3)")
            since_last_copy = set()
            copies_to_host[source] = i
            last_copy_into[host] = i
        elif kind == "to_device":
            _, stream, host, destination = entry
            filled_at = last_copy_into.get(host, -1)
            if not any(
                recorded_on.get(e, ("", -1))[0] == "copy" and recorded_on[e][1] > filled_at for e in waited[stream]
            ):
                problems.append(
                    f"{i}: a reload on the {stream} stream read its buffer before the copy into it was done (ordering 4)"
                )
            last_reload_of[host] = i
            reloaded[destination] = (stream, i)
        elif kind == "use" and entry[1] in reloaded:
            stream, filled_at = reloaded.pop(entry[1])
            arrived = stream == "compute" or any(
                recorded_on.get(e, ("", -1))[0] == stream and recorded_on[e][1] > filled_at for e in waited["compute"]
            )
            if not arrived:
                problems.append(f"{i}: a reloaded tensor used before the compute stream waited on its copy")
        elif kind == "free" and entry[1] in copies_to_host:
            copied_at = copies_to_host.pop(entry[1])
            done = [
                e
                for e in waited["compute"]
                if recorded_on.get(e, ("", -1))[0] == "copy" and recorded_on[e][1] > copied_at
            ]
            if not done:
                problems.append(
                    f"{i}: device memory released before the compute stream waited on its copy (ordering 2)"
                )
    return problems


def max_in_flight(log: list) -> int:
    """The most device-to-host copies at once that the compute stream had not yet waited on."""
    copy_events, open_copies, most = set(), 0, 0
    for entry in log:
        if entry[0] == "to_host":
            open_copies += 1
            most = max(most, open_copies)
        elif entry[0] == "record" and entry[1] == "copy":
            copy_events.add(entry[2])
        elif entry[0] == "wait" and entry[1] == "compute" and entry[2] in copy_events:
            copy_events.discard(entry[2])
            open_copies -= 1
    return most
