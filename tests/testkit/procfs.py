"""Figures of running processes read from /proc by PID: start time, children,
memory and CPU time; and moving their threads between CPUs.

Every function tolerates a process that ended meanwhile unless it says otherwise.
"""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str]:
    """Fields 3.. of /proc/PID/stat (raises OSError when the process is gone)."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    # comm (field 2) is in parentheses and may hold spaces: split after it.
    return text[text.rindex(")") + 2:].split()


def start_time(pid: int) -> str:
    """Field 22 of /proc/PID/stat: with the PID, names one process even after PID reuse."""
    try:
        return stat_fields(pid)[19]
    except OSError:
        return "0"


def running(pid: int) -> bool:
    """True while the process exists and is not a zombie (ended, not yet reaped)."""
    try:
        return stat_fields(pid)[0] != "Z"
    except (OSError, IndexError):
        return False


def descendants(pid: int) -> list[int]:
    """Children, grandchildren, ... of a process (nginx: its workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(stat_fields(int(entry))[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB (VmRSS of /proc/PID/status); raises
    ValueError when there is none and OSError when the process is gone."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise ValueError(f"no VmRSS for pid {pid}")


def peak_rss_kib(pids: list[int]) -> int:
    """Sum of VmHWM (peak resident set) of the processes."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes (all their threads), in seconds."""
    ticks = 0
    for pid in pids:
        try:
            fields = stat_fields(pid)
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # fields 14 and 15
    return ticks / CLK_TCK


def set_affinity(pids: list[int], cpus: set[int]):
    """Moves every thread of the processes to `cpus` (like taskset -a -p)."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:
                pass
