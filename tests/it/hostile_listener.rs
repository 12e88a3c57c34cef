//! Hostile clients of the agent's own port (issue 12): idle connections, slowloris and a
//! connection flood under `ulimit -n 256` must not cost a healthy probe a single run, and
//! the agent closes what it does not serve by itself.
//!
//! The real binary runs under `bash -c 'ulimit -n 256; exec inferprobe run ...'` (soft
//! and hard limit: raising it at start cannot help; only the connection cap can).

use std::time::{Duration, Instant};

use inferprobe::simulate::Script;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Daemon, heavy, metric_sum, simulator, temp_dir};

/// Idle connections opened at once: well above what 256 descriptors allow.
const IDLE: usize = 400;
/// How long they are held.
const HOLD: Duration = Duration::from_secs(40);

/// Opens a connection and waits for the agent to close it (EOF or reset), up to `within`;
/// returns how long that took, or `None` if the connection is still open.
async fn held_until_closed(addr: String, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut s = TcpStream::connect(&addr).await.ok()?;
    let mut buf = [0u8; 64];
    match tokio::time::timeout(within, s.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => Some(start.elapsed()),
        // The agent answered something without a request: also not holding it idle.
        Ok(Ok(_)) => Some(start.elapsed()),
        Err(_) => None,
    }
}

/// How long an idle connection may stay open: the 10 s header timeout, and slack for a
/// machine whose 2 cores are shared with builds (the old agent never closed one).
const CLOSED_WITHIN: Duration = Duration::from_secs(30);

/// What one attacker's slot saw.
#[derive(Debug, Default)]
struct Slot {
    /// Connections established.
    opened: usize,
    /// Of those, closed by the agent within `CLOSED_WITHIN`.
    closed: usize,
    /// The longest the agent took to close one.
    slowest: Duration,
}

/// One attacker's slot: for `HOLD`, keeps an idle connection open, opening another (after
/// a pause) whenever the agent closes one; the last is held past `HOLD` until closed.
/// A connect the kernel's full backlog delays is retried, not counted.
async fn idle_slot(addr: String, index: usize) -> Slot {
    // Staggered, so that 400 slots do not connect in one burst every 2 s.
    let pause = Duration::from_millis(1500 + 10 * (index as u64 % 100));
    tokio::time::sleep(Duration::from_millis(5 * index as u64)).await;
    let start = Instant::now();
    let mut slot = Slot::default();
    while start.elapsed() < HOLD {
        let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&addr)).await
        else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        slot.opened += 1;
        let mut buf = [0u8; 64];
        let connected = Instant::now();
        if tokio::time::timeout(CLOSED_WITHIN, s.read(&mut buf))
            .await
            .is_ok()
        {
            slot.closed += 1;
            slot.slowest = slot.slowest.max(connected.elapsed());
        }
        tokio::time::sleep(pause).await;
    }
    slot
}

/// Sends a request head one byte every 500 ms (never finishing in 40 s); returns how
/// long until the agent closed the connection, or `None`.
async fn slowloris(addr: String, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut s = TcpStream::connect(&addr).await.ok()?;
    let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    for b in head.iter().cycle() {
        if start.elapsed() > within {
            return None;
        }
        if s.write_all(&[*b]).await.is_err() {
            return Some(start.elapsed());
        }
        let mut buf = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await {
            return Some(start.elapsed());
        }
    }
    None
}

/// `/metrics`, or `None` while the port refuses (full, or out of descriptors).
fn try_metrics(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_owned())
}

fn raise_own_limit() {
    // The test holds 400+ sockets itself.
    if let Ok((soft, hard)) = rlimit::Resource::NOFILE.get()
        && soft < hard
    {
        let _ = rlimit::Resource::NOFILE.set(hard, hard);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slowloris_connections_under_ulimit_256_cost_no_probe_run() {
    // Heavy: it loads the machine and bounds what it sees in time; see support::heavy.
    let _alone = heavy();
    raise_own_limit();
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("hostile");
    let probes = dir.join("probes.yaml");
    // Fresh connections every run: each probe needs descriptors of its own.
    let mut yaml = String::from("agent: {location: hostile}\nprobes:\n");
    for i in 0..3 {
        yaml += &format!(
            "  - name: healthy-{i}\n    kind: openai_chat\n    url: http://{}/v1/chat/completions?ttft=5ms&tokens=4\n    model: sim-model\n    interval: 1s\n",
            sim.addr
        );
    }
    std::fs::write(&probes, yaml).unwrap();
    let mut agent = Daemon::start_with_nofile(256, &probes, &[]);
    agent.wait_for_log("\"probe\":\"healthy-2\"", Duration::from_secs(15));
    let before = agent.metrics();

    let attack_start = Instant::now();
    let idle: Vec<_> = (0..IDLE)
        .map(|i| tokio::spawn(idle_slot(agent.addr.clone(), i)))
        .collect();
    let slow: Vec<_> = (0..20)
        .map(|_| tokio::spawn(slowloris(agent.addr.clone(), HOLD)))
        .collect();
    let mut idle_closed = Vec::new();
    for t in idle {
        idle_closed.push(t.await.unwrap());
    }
    let mut slow_closed = Vec::new();
    for t in slow {
        slow_closed.push(t.await.unwrap());
    }
    let attack = attack_start.elapsed();
    // Let the runs of the last seconds finish and be counted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = agent.metrics();

    let failed = metric_sum(&after, "inferprobe_runs_total", &["result=\"failure\""]);
    let agent_errors = metric_sum(&after, "inferprobe_agent_errors_total", &[]);
    let ok = metric_sum(&after, "inferprobe_runs_total", &["result=\"success\""])
        - metric_sum(&before, "inferprobe_runs_total", &["result=\"success\""]);
    let logs = agent.all_logs.lock().unwrap().clone();
    let failures: Vec<_> = logs
        .iter()
        .filter(|l| l.contains("\"success\":false") || l.contains("Too many open files"))
        .collect();
    let failures = (failures.len(), failures.into_iter().take(3).collect::<Vec<_>>());
    assert_eq!(
        failed, 0.0,
        "healthy probes failed during the attack (failed lines, first ones): {failures:#?}"
    );
    assert_eq!(
        agent_errors, 0.0,
        "the agent ran out of descriptors: {failures:#?}"
    );
    let opened: usize = idle_closed.iter().map(|s| s.opened).sum();
    let closed: usize = idle_closed.iter().map(|s| s.closed).sum();
    let idle_slots = idle_closed.iter().filter(|s| s.opened > 0).count();
    assert_eq!(
        idle_slots,
        IDLE,
        "slots that never connected: {:?}",
        IDLE - idle_slots
    );
    assert_eq!(
        closed,
        opened,
        "{} of {opened} idle connections were still open {CLOSED_WITHIN:?} after they connected",
        opened - closed
    );
    let slowest = idle_closed.iter().map(|s| s.slowest).max().unwrap_or_default();
    eprintln!(
        "{opened} idle connections in {attack:?}, each closed by the agent; the slowest after {slowest:?}"
    );
    let slow_open = slow_closed.iter().filter(|c| c.is_none()).count();
    assert_eq!(
        slow_open, 0,
        "{slow_open} of 20 slowloris connections were still open after {HOLD:?}"
    );

    // Three probes at 1 s for the ~40 s of the attack: the probes kept running.
    assert!(
        ok >= attack.as_secs_f64(),
        "only {ok} successful runs in {attack:?} of attack"
    );
    // The excess was refused at once and counted; the rest timed out.
    assert!(
        metric_sum(&after, "inferprobe_listener_connections_rejected_total", &[]) > 0.0,
        "{after}"
    );
    assert!(
        metric_sum(
            &after,
            "inferprobe_listener_connections_timed_out_total",
            &["phase=\"header\""]
        ) > 0.0
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_is_refused_at_the_cap_and_the_port_still_answers() {
    // Heavy: it loads the machine and bounds what it sees in time; see support::heavy.
    let _alone = heavy();
    raise_own_limit();
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("flood");
    let probes = dir.join("probes.yaml");
    std::fs::write(
        &probes,
        format!(
            "agent: {{location: flood}}\nprobes:\n  - name: healthy\n    kind: openai_chat\n    url: http://{}/v1/chat/completions?ttft=5ms&tokens=4\n    model: sim-model\n    interval: 1s\n",
            sim.addr
        ),
    )
    .unwrap();
    let mut agent = Daemon::start_with_nofile(256, &probes, &["--web.max-connections", "16"]);
    agent.wait_for_log("\"probe\":\"healthy\"", Duration::from_secs(15));
    // 16 held connections fill the cap; the next are closed at once, not queued.
    let mut held = Vec::new();
    for _ in 0..16 {
        held.push(TcpStream::connect(&agent.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    let closed = held_until_closed(agent.addr.clone(), Duration::from_secs(5)).await;
    assert!(closed.is_some(), "a connection over the cap was kept open");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "refused late: {:?}",
        start.elapsed()
    );
    drop(held);
    // Freed slots serve again (the first tries may still meet a full port).
    crate::support::wait_until("the port answers", Duration::from_secs(10), || {
        try_metrics(&agent.addr)
            .is_some_and(|m| metric_sum(&m, "inferprobe_listener_connections_rejected_total", &[]) >= 1.0)
    });
    std::fs::remove_dir_all(&dir).ok();
}

/// CPU seconds (user + system) the process has used, from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").unwrap().1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_descriptors_is_the_agents_error_and_the_accept_loop_does_not_spin() {
    // Heavy: it loads the machine and bounds what it sees in time; see support::heavy.
    let _alone = heavy();
    raise_own_limit();
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("exhausted");
    let probes = dir.join("probes.yaml");
    std::fs::write(
        &probes,
        format!(
            // By name too: a resolver out of descriptors must not read as `dns`.
            "agent: {{location: exhausted}}\nprobes:\n  - name: healthy\n    kind: openai_chat\n    url: http://{}/v1/chat/completions?ttft=5ms&tokens=4\n    model: sim-model\n    interval: 1s\n  - name: by-name\n    kind: openai_chat\n    url: http://localhost:{}/v1/chat/completions?ttft=5ms&tokens=4\n    model: sim-model\n    interval: 1s\n",
            sim.addr,
            sim.addr.port()
        ),
    )
    .unwrap();
    // An operator's cap far above what 256 descriptors allow: the agent does run out.
    let mut agent = Daemon::start_with_nofile(
        256,
        &probes,
        &[
            "--web.max-connections",
            "1000",
            "--web.header-read-timeout",
            "60s",
        ],
    );
    agent.wait_for_log("\"probe\":\"healthy\"", Duration::from_secs(15));
    let pid = agent.child.id();
    // 300: more than the ~220 descriptors left, fewer than that plus the kernel's
    // backlog (somaxconn may be 128), so every connect completes at once.
    let mut held = Vec::new();
    for _ in 0..300 {
        held.push(TcpStream::connect(&agent.addr).await.unwrap());
    }
    let cpu_before = cpu_seconds(pid);
    let exhausted = Duration::from_secs(12);
    tokio::time::sleep(exhausted).await;
    let cpu = cpu_seconds(pid) - cpu_before;
    drop(held);
    let released = Instant::now();
    crate::support::wait_until("the port answers again", Duration::from_secs(20), || {
        try_metrics(&agent.addr).is_some()
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m = agent.metrics();
    let (_, _, alerts) = crate::support::http_get(&agent.addr, "/api/v1/alerts", None);
    eprintln!(
        "out of descriptors for {exhausted:?}: {cpu:.2} s of CPU, {} accept errors, {} runs the agent's own error; answered again {:?} after the connections were released",
        metric_sum(&m, "inferprobe_listener_accept_errors_total", &[]),
        metric_sum(&m, "inferprobe_agent_errors_total", &[]),
        released.elapsed()
    );

    assert!(
        metric_sum(&m, "inferprobe_listener_accept_errors_total", &[]) > 0.0,
        "the agent never ran out: {m}"
    );
    // A spinning accept loop would burn a whole core for the whole time.
    assert!(
        cpu < exhausted.as_secs_f64() / 2.0,
        "{cpu:.1} s of CPU in {exhausted:?} out of descriptors"
    );
    assert!(
        metric_sum(&m, "inferprobe_agent_errors_total", &["probe=\"healthy\""]) >= 3.0
            && metric_sum(&m, "inferprobe_agent_errors_total", &["probe=\"by-name\""]) >= 3.0,
        "the runs the agent could not make are its own errors: {m}"
    );
    assert_eq!(
        metric_sum(&m, "inferprobe_runs_total", &["result=\"failure\""]),
        0.0,
        "counted against the endpoint: {m}"
    );
    let v: serde_json::Value = serde_json::from_str(&alerts).unwrap();
    assert_eq!(
        v["alerts"],
        serde_json::json!([]),
        "paged about a healthy endpoint: {alerts}"
    );
    let logs = agent.all_logs.lock().unwrap().clone();
    assert!(
        logs.iter()
            .any(|l| l.contains("\"reason\":\"agent_error\"") && l.contains("not the endpoint's fault")),
        "the log says whose fault it was"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_connections_get_the_idle_timeout_and_a_late_head_the_header_timeout() {
    // Heavy: it loads the machine and bounds what it sees in time; see support::heavy.
    let _alone = heavy();
    let sim = simulator(Script::default()).await;
    let dir = temp_dir("keepalive");
    let probes = dir.join("probes.yaml");
    std::fs::write(
        &probes,
        format!(
            "agent: {{location: ka}}\nprobes:\n  - name: healthy\n    kind: openai_chat\n    url: http://{}/v1/chat/completions\n    model: sim-model\n    interval: 5s\n",
            sim.addr
        ),
    )
    .unwrap();
    let agent = Daemon::start(
        &probes,
        &["--web.idle-timeout", "4s", "--web.header-read-timeout", "2s"],
    );
    async fn one_request(addr: &str) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).await.unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        s
    }
    async fn until_closed(s: &mut TcpStream) -> Duration {
        let start = Instant::now();
        let mut buf = [0u8; 64];
        loop {
            match tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return start.elapsed(),
                Ok(Ok(_)) => {}
                Err(_) => panic!("not closed within 30 s"),
            }
        }
    }
    // Idle after a response: the idle timeout, not the (shorter) header timeout.
    let mut idle = one_request(&agent.addr).await;
    let waited = until_closed(&mut idle).await;
    assert!(
        waited >= Duration::from_millis(3800) && waited < Duration::from_secs(8),
        "idle keep-alive closed after {waited:?}, want the 4 s idle timeout"
    );
    // A second head that starts but never ends: the header timeout from its first byte.
    let mut late = one_request(&agent.addr).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    late.write_all(b"GET /he").await.unwrap();
    let waited = until_closed(&mut late).await;
    assert!(
        waited >= Duration::from_millis(1800) && waited < Duration::from_millis(3500),
        "a started head was closed after {waited:?}, want the 2 s header timeout"
    );
    std::fs::remove_dir_all(&dir).ok();
}
