#!/usr/bin/env python3
"""Splits a `perf script` dump of the agent (dwarf call graphs) into components, for
BENCHMARKS.md's "where the CPU goes" table. Each sample goes to one component:
allocation when its leaf frame is the allocator (whoever called it), else the first
component below whose pattern appears anywhere in its stack, else "other".

Usage: profile_components.py perf.script   (see profile_cpu.sh)
Prints a Markdown table of component -> share of samples, and the top leaf symbols of
"other" so nothing large hides there.
"""
import collections
import re
import sys

ALLOC_LEAF = re.compile(
    r"^(malloc|free|cfree|realloc|calloc|_int_malloc|_int_free\w*|__libc_(malloc|free|realloc|calloc)"
    r"|malloc_consolidate|tcache_\w+|unlink_chunk|__rust_(alloc|dealloc|realloc)|_rjem_\w+|sdallocx)\b"
)
# (component, pattern over the whole stack, or "comm:" + thread-name prefix). Order
# matters: the first match wins, so the narrower (nested) ones come first.
COMPONENTS = [
    ("history write (writer thread)", "comm:inferprobe-hist"),
    ("log line (format, redact, write)", r"log_outcome|tracing_subscriber|RedactingStderr|tracing_core::event"),
    ("metrics updates (Metrics::record)", r"Metrics::record|metrics::Metrics|prometheus_client"),
    ("history queue (RunRecord, channel)", r"store::history|HistoryWriter|RunRecord"),
    ("paging / latest (fan-out stores)", r"agent::paging|Paging::|store::latest|Latest::record"),
    ("connection setup and teardown (DNS, connect, close)", r"HttpClient::connect|lookup_host|TcpStream::connect|__sys_connect|tcp_v4_connect|inet_stream_connect|__x64_sys_socket|Connection as core::ops::drop::Drop|drop_in_place<inferprobe::net::probe_client::Connection|__x64_sys_close|tcp_close|handshake_h1|hyper::client::conn::http1::handshake"),
    ("request and response (hyper, read body)", r"hyper::|HttpClient::send|BodyStream|probe::endpoint|probe::http|http::header|tcp_sendmsg|tcp_recvmsg|sock_write|sock_read"),
    ("fan-out (other)", r"agent::fanout"),
    ("scheduler loop (run_loop, spawn per run)", r"schedule::run_loop|track_future|TaskTracker"),
    ("tokio timers", r"tokio::runtime::time|tokio::time|hrtimer|timerfd"),
    ("tokio I/O driver and wake-ups (epoll, futex)", r"tokio::runtime::io|epoll|futex|mio::|tokio::runtime::park|Unparker|wake_by"),
    ("tokio scheduler (other)", r"tokio::runtime"),
    ("HTTP server (/metrics, /readyz)", r"inferprobe::server"),
]


def samples(lines):
    comm, stack = None, []
    for line in lines:
        if not line.strip():
            if comm is not None:
                yield comm, stack
            comm, stack = None, []
        elif line[0] not in " \t":
            comm, stack = line.strip(), []
        else:
            parts = line.strip().split(None, 1)
            stack.append(parts[1] if len(parts) > 1 else parts[0])
    if comm is not None:
        yield comm, stack


def main():
    counts = collections.Counter()
    other_leaves = collections.Counter()
    total = 0
    compiled = [(n, None if p.startswith("comm:") else re.compile(p), p) for n, p in COMPONENTS]
    with open(sys.argv[1], errors="replace") as f:
        for comm, stack in samples(f):
            total += 1
            leaf = re.sub(r"\+0x[0-9a-f]+$", "", stack[0]) if stack else "?"
            if ALLOC_LEAF.match(leaf):
                counts["allocation (malloc/free, any caller)"] += 1
                continue
            joined = "\n".join(stack)
            for name, rx, pattern in compiled:
                if rx is None:
                    if comm.startswith(pattern[5:]):
                        break
                elif rx.search(joined):
                    break
            else:
                name = "other"
                other_leaves[leaf[:90]] += 1
            counts[name] += 1
    print(f"\n{total} samples\n")
    print("| component | share of the agent's CPU samples |")
    print("|---|---|")
    for name, n in counts.most_common():
        print(f"| {name} | {100.0 * n / total:.1f} % |")
    print("\ntop leaf symbols in 'other':")
    for leaf, n in other_leaves.most_common(15):
        print(f"  {100.0 * n / total:5.1f} %  {leaf}")


if __name__ == "__main__":
    main()
