"""The demo's Perfetto files and manifest, read with Perfetto's published
schema (PyPI `perfetto`'s perfetto_trace_pb2): every packet parses, each
file pairs MONOTONIC with BOOTTIME and REALTIME, names its machine and boot,
and each device window is a slice on MONOTONIC with its bound and device
duration. Then, on the merged timeline (the manifest's clock), each
window's placed ends against the software driver's truth, which each
process states beside its file (process-<i>.json): within the window's
bound on one machine's BOOTTIME, within the file's own UTC interval (the
bound plus the host clock's stated error) on REALTIME across machines.
Argument: the demo's --out folder. Exits non-zero on any failure.
"""

import json
import os
import statistics
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

MONOTONIC, BOOTTIME, REALTIME = 3, 6, 1
WINDOWS = {"step", "load", "produce", "consume"}
# The file's clock snapshot, read as the tightest of a few brackets: how
# far MONOTONIC's pairing with BOOTTIME or REALTIME may be off, at most.
SNAPSHOT_NS = 1000


def fail(why):
    print(f"perfetto check: {why}", file=sys.stderr)
    sys.exit(1)


def check_file(path):
    """The file's identity, clock snapshots and windows, every packet
    parsed with Perfetto's schema."""
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    snapshots, windows, identity, open_slices = [], [], None, {}
    for packet in trace.packet:
        if packet.HasField("clock_snapshot"):
            clocks = {c.clock_id: c.timestamp for c in packet.clock_snapshot.clocks}
            if sorted(clocks) != sorted([MONOTONIC, BOOTTIME, REALTIME]):
                fail(f"{path}: a clock snapshot of {sorted(clocks)}")
            snapshots.append(clocks)
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
                window = {
                    "label": event.name,
                    "start": packet.timestamp,
                    "bound": args["bound_ns"].uint_value,
                }
                if "utc_earliest_ns" in args:
                    window["utc"] = (args["utc_earliest_ns"].int_value,
                                     args["utc_latest_ns"].int_value)
                windows.append(window)
                open_slices.setdefault(event.track_uuid, []).append(window)
            elif event.type == pb.TrackEvent.TYPE_SLICE_END:
                stack = open_slices.get(event.track_uuid)
                if stack:
                    stack.pop()["end"] = packet.timestamp
    if len(snapshots) < 2:
        fail(f"{path}: {len(snapshots)} clock snapshots, not the start's and the end's")
    if identity is None or not identity["boot_id"].string_value:
        fail(f"{path}: no machine and boot identity")
    if not windows or any("end" not in w for w in windows):
        fail(f"{path}: no device window, or one never ended")
    print(f"perfetto check: {os.path.basename(path)}: {len(trace.packet)} packets parse, "
          f"{len(snapshots)} clock snapshots, {len(windows)} windows with bound and duration")
    return {
        "boot": identity["boot_id"].string_value,
        "machine_id": identity["machine_id"].string_value,
        "snapshots": snapshots,
        "windows": windows,
    }


def on_clock(snapshots, monotonic, clock):
    """A MONOTONIC time on `clock`, by the file's nearest clock snapshot."""
    nearest = min(snapshots, key=lambda s: abs(s[MONOTONIC] - monotonic))
    return nearest[clock] + monotonic - nearest[MONOTONIC]


def placed_ends(file, window, clock):
    """The window's placed ends on the merged timeline, and how far each
    may be from the truth as the file states it."""
    if clock == "BOOTTIME":
        ends = [on_clock(file["snapshots"], window[k], BOOTTIME) for k in ("start", "end")]
        return ends, window["bound"] + SNAPSHOT_NS
    if "utc" not in window:
        fail(f"a window of a file merged on REALTIME without its UTC interval")
    earliest, latest = window["utc"]
    start = (earliest + latest) // 2
    # The interval's half-width already holds the snapshot's spread.
    return [start, start + window["end"] - window["start"]], (latest - earliest) // 2


def against_truth(out, entries, files, clock):
    """Every placed end of every file within its bound of the truth; the
    errors' median and worst, per machine."""
    key = "boottime_ns" if clock == "BOOTTIME" else "realtime_ns"
    by_machine = {}
    for entry in entries:
        statement_path = os.path.join(out, entry["path"].replace(".pftrace", ".json"))
        with open(statement_path) as f:
            truth = json.load(f).get("truth")
        if truth is None:
            fail(f"{statement_path}: no truth (not the software driver?)")
        file = files[entry["path"]]
        if len(truth["windows"]) != len(file["windows"]):
            fail(f"{entry['path']}: {len(file['windows'])} windows, "
                 f"{len(truth['windows'])} true ones")
        for window, true in zip(file["windows"], truth["windows"]):
            if window["label"] != true["label"] or "start" not in true:
                fail(f"{entry['path']}: window {window['label']} against {true}")
            ends, bound = placed_ends(file, window, clock)
            bound += truth["pairing_ns"]
            for placed, end in zip(ends, ("start", "end")):
                error = abs(placed - true[end][key])
                if error > bound:
                    fail(f"{entry['path']}: {window['label']}'s {end} {error / 1e3:.1f} µs "
                         f"from the truth on {clock}, bound {bound / 1e3:.1f} µs")
                by_machine.setdefault(entry["machine"]["name"], []).append((error, bound))
    for machine, errors in sorted(by_machine.items()):
        worst = max(errors)
        print(f"perfetto check: against the software driver's truth on the merged {clock} "
              f"timeline, {machine}: {len(errors)} window ends, error median "
              f"{statistics.median(e for e, _ in errors) / 1e3:.1f} µs, worst "
              f"{worst[0] / 1e3:.1f} µs (its bound {worst[1] / 1e3:.1f} µs); bound median "
              f"{statistics.median(b for _, b in errors) / 1e3:.1f} µs: every end within "
              f"its bound")


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "perfetto_manifest.json")) as f:
        manifest = json.load(f)["perfetto_manifest"]
    if manifest["version"] != 1:
        fail("manifest version")
    entries = manifest["files"]
    if len(entries) < 2:
        fail(f"the manifest merges {len(entries)} files")
    files = {entry["path"]: check_file(os.path.join(out, entry["path"])) for entry in entries}
    boots = {file["boot"] for file in files.values()}
    machines = {entry["machine"]["name"] for entry in entries}
    clock = manifest["trace_time"]["clock"]
    if len(machines) == 1 and (len(boots) != 1 or clock != "BOOTTIME"):
        fail("one machine's processes not lined up on its one boot's BOOTTIME")
    if len(machines) > 1:
        ids = {files[e["path"]]["machine_id"] for e in entries}
        if clock != "REALTIME" or len(ids) != len(machines):
            fail("machines not lined up on REALTIME, or two taken for one")
    print(f"perfetto check: the manifest merges {len(entries)} processes of {len(machines)} "
          f"machine(s) on {clock}")
    against_truth(out, entries, files, clock)


main()
