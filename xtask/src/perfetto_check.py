"""The demo's Perfetto files and manifest, read with Perfetto's published
schema (PyPI `perfetto`'s perfetto_trace_pb2): every packet parses, each
file pairs MONOTONIC with BOOTTIME and REALTIME, names its machine and boot,
and each device window is a slice on MONOTONIC with its bound and device
duration. Argument: the demo's --out folder. Exits non-zero on any failure.
"""

import json
import os
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

MONOTONIC, BOOTTIME, REALTIME = 3, 6, 1
WINDOWS = {"step", "load", "produce", "consume"}


def fail(why):
    print(f"perfetto check: {why}", file=sys.stderr)
    sys.exit(1)


def check_file(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    snapshots, windows, identity = 0, 0, None
    for packet in trace.packet:
        if packet.HasField("clock_snapshot"):
            ids = sorted(c.clock_id for c in packet.clock_snapshot.clocks)
            if ids != sorted([MONOTONIC, BOOTTIME, REALTIME]):
                fail(f"{path}: a clock snapshot of {ids}")
            snapshots += 1
        if packet.HasField("track_event"):
            event = packet.track_event
            args = {a.name: a for a in event.debug_annotations}
            if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN and event.name == "machine":
                identity = args
            if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN and event.name in WINDOWS:
                if packet.timestamp_clock_id != MONOTONIC:
                    fail(f"{path}: window {event.name} on clock {packet.timestamp_clock_id}")
                for key in ("bound_ns", "device_duration_ns"):
                    if key not in args:
                        fail(f"{path}: window {event.name} without {key}")
                if "utc_earliest_ns" not in args and "host_clock_synchronised" not in args:
                    fail(f"{path}: window {event.name} neither on UTC nor flagged")
                windows += 1
    if snapshots < 2:
        fail(f"{path}: {snapshots} clock snapshots, not the start's and the end's")
    if identity is None or not identity["boot_id"].string_value:
        fail(f"{path}: no machine and boot identity")
    if windows == 0:
        fail(f"{path}: no device window")
    print(f"perfetto check: {os.path.basename(path)}: {len(trace.packet)} packets parse, "
          f"{snapshots} clock snapshots, {windows} windows with bound and duration")
    return identity["boot_id"].string_value


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "perfetto_manifest.json")) as f:
        manifest = json.load(f)["perfetto_manifest"]
    if manifest["version"] != 1:
        fail("manifest version")
    files = manifest["files"]
    if len(files) < 2:
        fail(f"the manifest merges {len(files)} files")
    boots = {check_file(os.path.join(out, entry["path"])) for entry in files}
    machines = {entry["machine"]["name"] for entry in files}
    if len(machines) == 1 and (len(boots) != 1 or manifest["trace_time"]["clock"] != "BOOTTIME"):
        fail("one machine's processes not lined up on its one boot's BOOTTIME")
    print(f"perfetto check: the manifest merges {len(files)} processes of {len(machines)} "
          f"machine(s) on {manifest['trace_time']['clock']}")


main()
