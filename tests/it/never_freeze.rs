//! The agent never stops on its own output or an early signal (issue 30): stdout and
//! stderr connected to pipes nobody reads, and SIGHUP from the first millisecond after
//! exec to the middle of loading 20,000 probes. Both against the real binary.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::{
    FakeReceiver, closed_port, heavy, http_get_within, metric_sum, switch_server, temp_dir,
};

/// A free loopback port for the agent to listen on (its log, which would tell the port,
/// is not read in these tests).
fn free_addr() -> String {
    format!("127.0.0.1:{}", closed_port())
}

/// Kills the child on drop, so a failed assertion leaves no agent behind.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_agent_whose_output_nobody_reads_keeps_probing_serving_and_paging() {
    // Heavy: the signal tests time a process start on a 2-core machine, which the
    // 41-probe agent of the pipe test (or any other heavy test) would slow.
    let _alone = heavy();
    // 40 streaming probes at 1 s against the simulator (a log line each per run, ~16 KB/s
    // of log: a 64 KiB pipe is full within seconds), and one probe of an endpoint that
    // goes down mid-test and must page.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sim = runtime.block_on(crate::support::simulator(Default::default()));
    let healthy = Arc::new(AtomicBool::new(true));
    let switch = switch_server(healthy.clone());
    let hook = FakeReceiver::start(200);
    let dir = temp_dir("never-freeze-pipes");
    let mut yaml = format!(
        "agent:\n  location: pipes\nreceivers:\n  - name: hook\n    kind: webhook\n    url: http://{}/hook\n    max_backoff: 500ms\n\
         defaults:\n  interval: 1s\n  timeout: 900ms\nprobes:\n  - name: switch\n    kind: http\n    url: http://{switch}/health\n    alert: {{failure_threshold: 2}}\n",
        hook.addr
    );
    for i in 0..40 {
        yaml.push_str(&format!(
            "  - name: chat-{i}\n    kind: openai_chat\n    url: http://{}/v1/chat/completions?ttft=20ms&token_gap=2ms\n    model: sim-model\n    max_tokens: 8\n",
            sim.addr
        ));
    }
    let config = dir.join("probes.yaml");
    std::fs::write(&config, yaml).unwrap();
    let addr = free_addr();
    let mut child = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["run", "--listen", &addr, "--log-level", "debug", "-c"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held open and never read: writes to them fill the pipes, then block (a closed pipe
    // would fail them at once instead, which is not what a stalled reader does).
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let child = Killed(child);

    let limit = Duration::from_secs(5);
    let started = Instant::now();
    crate::support::wait_until("the agent's port", Duration::from_secs(30), || {
        http_get_within(&addr, "/healthz", limit).0 == 200
    });
    let mut runs_before = 0.0;
    let mut dropped = 0.0;
    let mut paged_at = None;
    let mut went_down_at = None;
    let mut checks = 0;
    while started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_secs(4));
        let elapsed = started.elapsed();
        let (health, _) = http_get_within(&addr, "/healthz", limit);
        assert_eq!(health, 200, "/healthz after {elapsed:?} (check {checks})");
        let (status, metrics) = http_get_within(&addr, "/metrics", limit);
        assert_eq!(status, 200, "/metrics after {elapsed:?} (check {checks})");
        let runs = metric_sum(&metrics, "inferprobe_runs_total", &[]);
        assert!(
            runs > runs_before,
            "no run between two checks after {elapsed:?}: runs_total {runs_before} -> {runs}"
        );
        runs_before = runs;
        dropped = metric_sum(&metrics, "inferprobe_log_lines_dropped_total", &[]);
        // Down once the pipes have been full a while: the page must get out regardless.
        if went_down_at.is_none() && dropped > 0.0 && elapsed > Duration::from_secs(60) {
            healthy.store(false, Ordering::SeqCst);
            went_down_at = Some(elapsed);
        }
        if paged_at.is_none() && hook.accepted_count() > 0 {
            paged_at = Some(elapsed);
        }
        checks += 1;
    }
    assert!(
        dropped > 0.0,
        "the pipes never filled: nothing to prove (dropped {dropped})"
    );
    let went_down_at = went_down_at.expect("the endpoint was switched off");
    let paged_at = paged_at.unwrap_or_else(|| panic!("no page for the endpoint down since {went_down_at:?}"));
    assert!(paged_at >= went_down_at);
    let page = &hook.accepted()[0];
    assert!(page.to_string().contains("switch"), "{page}");

    // Once someone reads again, the log says how many lines it lost.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut { stdout }, &mut std::io::sink());
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let told = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("Lines were dropped") => break line,
            Ok(_) => {}
            Err(_) => panic!("no line telling of the dropped lines once stderr was read"),
        }
    };
    assert!(told.contains("dropped="), "{told}");
    drop(child);
}

/// The signals a process has handlers for (`SigCgt` in /proc/PID/status), bit N-1 for
/// signal N; None once it is gone.
fn caught_signals(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
    u64::from_str_radix(mask.trim(), 16).ok()
}

/// Starts the agent on `config` and sends SIGHUP `after` its exec; the process must
/// still run, serve, and (a SIGHUP while starting means "reload") reload once started.
fn hangup_after(
    config: &std::path::Path,
    after: Duration,
    dir: &std::path::Path,
) -> (Killed, String, Vec<String>) {
    let addr = free_addr();
    let child = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
        .args(["--log-format", "json", "run", "--listen", &addr, "-c"])
        .arg(config)
        .arg("--data-dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // spawn() returns once exec has succeeded: the clock starts at exec.
    let execed = Instant::now();
    let pid = child.id().to_string();
    // Killed however this ends, a failed assertion included.
    let mut child = Killed(child);
    // Not before any code of the binary runs: until then a SIGHUP ends any program, and
    // on a 2-core VM the kernel and the dynamic loader take 0.4 ms (a static C program)
    // to 1-2 ms (this binary, debug or release) to get there. Rust's runtime installs
    // its SIGSEGV handler as its first step, before `main`: from then on what happens is
    // the agent's own doing. Old agents, which caught SIGHUP only once loaded, die here.
    // (For a few microseconds after spawn() returns, exec has not yet reset the handlers
    // copied from this test: the handler counts once seen reset, or once read well after
    // exec returned, when the reset is surely done. This thread may itself be held off
    // the CPU past the reset window on a busy machine.)
    // Then a millisecond more: the agent's first line comes microseconds after the
    // runtime's handler, but on a busy 2-core machine the process may be held off the
    // CPU in between; an agent that catches SIGHUP only once loaded is far from ready.
    let runtime_started = Duration::from_millis(1);
    let exec_done = Duration::from_millis(1);
    let segv = 1 << (11 - 1);
    let (mut reset, mut started_at) = (false, None);
    loop {
        let elapsed = execed.elapsed();
        let caught = caught_signals(&pid);
        reset |= caught.is_some_and(|m| m & segv == 0) || elapsed >= exec_done;
        if reset && started_at.is_none() && caught.is_some_and(|m| m & segv != 0) {
            started_at = Some(elapsed);
        }
        if started_at.is_some_and(|t| elapsed >= after.max(t + runtime_started)) {
            break;
        }
        assert!(elapsed < Duration::from_secs(5), "the runtime never started");
        std::thread::sleep(Duration::from_micros(20));
    }
    let sent_at = execed.elapsed();
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    println!(
        "SIGHUP {sent_at:?} after exec (asked for {after:?}; the binary's runtime started {:?} after exec)",
        started_at.unwrap_or_default()
    );
    let killed = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    assert!(killed.success());
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    // Started, then the reload the early SIGHUP asked for.
    loop {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("SIGHUP {sent_at:?} after exec ended the agent: {status}; it said {lines:#?}");
        }
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let done = line.contains("Configuration reloaded.") || line.contains("Reload failed");
                lines.push(line);
                if done {
                    break;
                }
            }
            Err(_) => assert!(
                Instant::now() < deadline,
                "SIGHUP {sent_at:?} after exec: no reload within 120 s; the agent said {lines:#?}"
            ),
        }
    }
    (child, addr, lines)
}

#[test]
fn a_sighup_from_the_first_millisecond_on_never_ends_the_agent_and_reloads() {
    // Heavy: the signal tests time a process start on a 2-core machine, which the
    // 41-probe agent of the pipe test (or any other heavy test) would slow.
    let _alone = heavy();
    let dir = temp_dir("never-freeze-hup");
    let config = dir.join("probes.yaml");
    std::fs::write(
        &config,
        "agent:\n  location: hup\nprobes:\n  - name: one\n    kind: http\n    url: http://127.0.0.1:9/health\n    interval: 1h\n",
    )
    .unwrap();
    for ms in [1, 10, 100] {
        let (mut child, addr, lines) = hangup_after(
            &config,
            Duration::from_millis(ms),
            &dir.join(format!("data-{ms}")),
        );
        assert!(
            lines.iter().any(|l| l.contains("Agent started.")),
            "at {ms} ms: {lines:#?}"
        );
        assert_eq!(
            http_get_within(&addr, "/healthz", Duration::from_secs(10)).0,
            200,
            "at {ms} ms"
        );
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "at {ms} ms the agent ended"
        );
    }
}

#[test]
fn a_sighup_while_20000_probes_load_never_ends_the_agent_and_reloads_once_started() {
    // Heavy: the signal tests time a process start on a 2-core machine, which the
    // 41-probe agent of the pipe test (or any other heavy test) would slow.
    let _alone = heavy();
    let dir = temp_dir("never-freeze-hup-load");
    let config = dir.join("probes.yaml");
    let mut yaml = String::from("agent:\n  location: hup-load\ndefaults:\n  interval: 1h\nprobes:\n");
    for i in 0..20_000 {
        yaml.push_str(&format!(
            "  - name: p{i}\n    kind: http\n    url: http://127.0.0.1:9/health/{i}\n"
        ));
    }
    std::fs::write(&config, yaml).unwrap();
    // Several moments while it loads (a debug build takes seconds over 20,000 probes):
    // each must reload once the agent has started, not end it.
    for ms in [30, 300] {
        let (mut child, addr, lines) = hangup_after(
            &config,
            Duration::from_millis(ms),
            &dir.join(format!("data-{ms}")),
        );
        let started = lines.iter().position(|l| l.contains("Agent started."));
        let reloaded = lines.iter().position(|l| l.contains("Configuration reloaded."));
        assert!(
            started.is_some() && reloaded > started,
            "at {ms} ms: started, then reloaded: {lines:#?}"
        );
        // It came while loading (seconds for a debug build), and was kept for later.
        let noted = lines
            .iter()
            .position(|l| l.contains("A SIGHUP came while the agent was starting"));
        assert!(noted > started && noted < reloaded, "at {ms} ms: {lines:#?}");
        assert_eq!(
            http_get_within(&addr, "/healthz", Duration::from_secs(30)).0,
            200,
            "at {ms} ms"
        );
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "at {ms} ms the agent ended"
        );
    }
}
