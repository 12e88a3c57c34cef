//! The faults that could grow memory, through the real binary: all kinds at once in one
//! agent process, its peak RSS watched.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use inferprobe::outcome::FailureReason;

use super::table::faults;
use super::wire::WIRES;
use super::{MB, MEMORY_FAULTS, RSS_BOUND_KB, TIMEOUT};
use crate::support::{heavy, temp_dir};

/// Peak RSS (VmHWM, kB) of a process, from /proc.
fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_stays_bounded_through_the_binary() {
    // Heavy: the matrix and the binary runs load the two cores, and elapsed times are
    // asserted.
    let _alone = heavy();
    let faults = faults();
    let mut report = String::new();
    for name in MEMORY_FAULTS {
        let fault = faults.iter().find(|f| f.name == name).unwrap();
        // All eight kinds in one agent process, at once: the worst case for its memory.
        let mut yaml = String::from("probes:\n");
        for wire in WIRES {
            let target = (fault.serve)(&wire);
            for (i, line) in wire.yaml(&target.base, &target.extra).lines().enumerate() {
                let lead = if i == 0 { "  - " } else { "    " };
                writeln!(yaml, "{lead}{line}").unwrap();
            }
            // At once, though they share the fake server (`once` runs the probes of one
            // endpoint one after another otherwise).
            writeln!(yaml, "    overlap: true").unwrap();
        }
        let dir = temp_dir("faults-rss");
        let config = dir.join("probes.yaml");
        std::fs::write(&config, &yaml).unwrap();
        let started = Instant::now();
        let (peak, output) = tokio::task::spawn_blocking(move || {
            let child = std::process::Command::new(env!("CARGO_BIN_EXE_inferprobe"))
                .args(["once", "--format", "json", "-c"])
                .arg(&config)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let pid = child.id();
            // Poll the high-water mark while it runs; the last read before exit holds the peak.
            let watcher = std::thread::spawn(move || {
                let mut peak = 0;
                while let Some(kb) = vm_hwm_kb(pid) {
                    peak = peak.max(kb);
                    std::thread::sleep(Duration::from_millis(5));
                }
                peak
            });
            let output = child.wait_with_output().unwrap();
            (watcher.join().unwrap(), output)
        })
        .await
        .unwrap();
        let elapsed = started.elapsed();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let results: Vec<serde_json::Value> =
            stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(
            results.len(),
            WIRES.len(),
            "{name}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        for (wire, result) in WIRES.iter().zip(&results) {
            assert_eq!(result["kind"], wire.kind);
            assert_eq!(
                result["reason"].as_str(),
                (fault.expect)(wire).map(FailureReason::as_str),
                "{name} x {}: {}",
                wire.kind,
                result["message"]
            );
        }
        // The agent process must not exit with a panic or a signal: it reports failures.
        assert_eq!(output.status.code(), Some(1), "{name}: {:?}", output.status);
        assert!(elapsed < TIMEOUT + Duration::from_secs(3), "{name}: {elapsed:?}");
        let received: u64 = results
            .iter()
            .map(|r| r["bytes_received"].as_u64().unwrap_or(0))
            .sum();
        writeln!(
            report,
            "{name}: {} kinds at once, peak RSS {:.1} MB (bound {} MB), {:.1} MB received in total, {:.2}s",
            WIRES.len(),
            peak as f64 / 1024.0,
            RSS_BOUND_KB / 1024,
            received as f64 / MB as f64,
            elapsed.as_secs_f64()
        )
        .unwrap();
        assert!(peak > 0, "{name}: no VmHWM read");
        assert!(peak < RSS_BOUND_KB, "{name}: peak RSS {peak} kB");
    }
    println!("{report}");
}
