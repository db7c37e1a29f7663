#!/usr/bin/env python3
"""Run one command and report its wall time and peak resident memory (its own, through wait4),
then the last lines of its output: the end-to-end benchmark's measuring stick.

usage: e2e.py LABEL -- COMMAND...
"""
import os, subprocess, sys, time

def main():
    if "--" not in sys.argv[2:3]:
        sys.exit(__doc__)
    label, cmd = sys.argv[1], sys.argv[3:]
    t = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t
    code = os.waitstatus_to_exitcode(status)
    tail = "\n".join("    " + l for l in out.strip().splitlines()[-6:])
    print(f"[{label}] exit {code}, wall {wall:.2f} s, peak RSS {ru.ru_maxrss // 1024} MiB\n{tail}", flush=True)

main()
