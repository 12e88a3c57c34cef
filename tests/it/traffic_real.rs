//! Issue 29 against real llama.cpp servers (scripts/real-servers/llama_server.sh): what a
//! probe every few seconds must not do to the server it measures, and what it must see.
//!
//! - **No shadow.** Two probes of a one-slot server take turns, in `run` and in `once`:
//!   the server's own log shows no request of theirs arriving while the other's was
//!   being served, and each probe's TTFT is what it is alone. With `overlap: true` the
//!   same probes do overlap on the server, and the one that queued measured the other.
//! - **Cold runs.** A cold probe beside a warm one: no request of the agent's reached
//!   the server in the idle window before each cold run; after a restart the cold run is
//!   labelled cold and its TTFT is several times the warm runs' (the server's prompt
//!   cache is gone), and a restart seen as refusals then answers opens the warm-up.
//! - **A restart no run saw.** The server restarted between two runs: its start (in
//!   `/metrics` with `--metrics`, in `/props` without) changed, and the next run opens
//!   the warm-up with that cause.
//! - **Bursts.** Four requests at once on one slot spread their first tokens (they
//!   queue) and the degraded alert fires; on four slots they do not.
//!
//! The servers: each test starts its own one-slot server (18086-18089) with the log
//! verbosity that shows when each request arrived, so the log holds only its agent's
//! requests; the burst test's four-slot one is .ci/run's 18085. All run on one thread:
//! on this two-core machine a server generating on both leaves the agent timing it no
//! core, and the agent then reads tokens late, in bursts. Under `CI=true` (or
//! `INFERPROBE_REQUIRE_LLAMA_SERVER=1`) a missing server or binary is a failure; elsewhere
//! each test says why it skips. `LLAMA_SERVER_WORK` is the script's `WORK` (default the
//! repository's scripts/real-servers/.work, where .ci/run builds).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/real-servers/llama_server.sh"
);

fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true") || std::env::var("INFERPROBE_REQUIRE_LLAMA_SERVER").is_ok()
}

/// Says why a test cannot run: a failure where it must run, a skip elsewhere.
fn skip(why: &str) {
    assert!(!required(), "{why}");
    eprintln!("skipped: {why}");
}

/// A server .ci/run started, when it answers.
fn shared(var: &str, default: &str) -> Option<String> {
    let addr = std::env::var(var).unwrap_or_else(|_| default.into());
    let reachable = addr
        .parse()
        .ok()
        .is_some_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok());
    if !reachable {
        skip(&format!(
            "no llama-server at {addr} ({var}): start it as .ci/run does, e.g. SLOTS=4 THREADS=1 PORT=18085 scripts/real-servers/llama_server.sh start"
        ));
        return None;
    }
    Some(addr)
}

/// A llama-server this test starts on its own port through the script (one slot, one
/// thread, the plain tiny model, debug log), stopped on drop, so also when the test
/// panics.
struct OwnServer {
    port: u16,
    work: PathBuf,
    /// Started with `--metrics` (the script's default).
    metrics: bool,
}

impl OwnServer {
    /// `None` (after saying why) when the binary or model is not built.
    fn start(port: u16) -> Option<OwnServer> {
        Self::start_with(port, true)
    }

    /// As [`OwnServer::start`], with or without `--metrics`.
    fn start_with(port: u16, metrics: bool) -> Option<OwnServer> {
        let work = std::env::var_os("LLAMA_SERVER_WORK")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(SCRIPT).parent().unwrap().join(".work"));
        for file in ["llama-build/bin/llama-server", "tiny-llama.gguf"] {
            if !work.join(file).is_file() {
                skip(&format!(
                    "no {} (build it with WORK={} {SCRIPT} build model; LLAMA_SERVER_WORK names another WORK)",
                    work.join(file).display(),
                    work.display()
                ));
                return None;
            }
        }
        let server = OwnServer { port, work, metrics };
        // A server left on the port by a killed run of this test is stopped first.
        server.script("stop");
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} is taken by something the script did not start"
        );
        server.script("start");
        Some(server)
    }

    fn script(&self, action: &str) {
        let out = Command::new(SCRIPT)
            .arg(action)
            .env("WORK", &self.work)
            .env("PORT", self.port.to_string())
            .env("SLOTS", "1")
            // One core for the server, one for the agent timing it: with both threads
            // generating, the agent's reads lag the tokens by up to 300 ms.
            .env("THREADS", "1")
            // 5: the queue's debug lines, which say when each request arrived.
            .env("LOG_VERBOSITY", "5")
            .env("METRICS", if self.metrics { "1" } else { "0" })
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "llama_server.sh {action}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's log from byte `from` on (0: since it started). Bytes, not text: the
    /// model's gibberish is not all UTF-8, so the text's length is no offset.
    fn log_from(&self, from: usize) -> String {
        let path = self.work.join(format!("llama-server-{}.log", self.port));
        let bytes = std::fs::read(path).unwrap_or_default();
        String::from_utf8_lossy(bytes.get(from..).unwrap_or_default()).into_owned()
    }

    /// The log's length now, in bytes.
    fn log_len(&self) -> usize {
        let path = self.work.join(format!("llama-server-{}.log", self.port));
        std::fs::metadata(path).map_or(0, |m| m.len() as usize)
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.script("stop");
    }
}

/// One inference request as the server's log shows it, in seconds since the server
/// started (the `--log-timestamps` prefix).
#[derive(Debug, Clone, Default)]
struct Task {
    id: u64,
    /// Queued: the request had arrived and been read ("new task").
    arrived: f64,
    /// Given a slot ("processing task").
    launched: f64,
    /// Its slot released, the answer sent ("stop processing").
    released: f64,
    /// Its prompt's length ("new prompt, ... task.n_tokens").
    prompt_tokens: u32,
    /// It had to wait for a slot ("no slot is available, defer task").
    deferred: bool,
}

/// `M.SS.mmm.uuu` at the start of a line, in seconds.
fn log_time(line: &str) -> Option<f64> {
    let stamp = line.split_whitespace().next()?;
    let parts: Vec<f64> = stamp.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    match parts[..] {
        [m, s, ms, us] => Some(m * 60.0 + s + ms / 1e3 + us / 1e6),
        _ => None,
    }
}

/// The number after `key` in `line`.
fn number_after(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Every inference task of the log that ran to its end, in the order they arrived.
/// Tasks without a slot (the `/metrics` and `/slots` ones) are left out.
fn tasks(log: &str) -> Vec<Task> {
    let mut by_id: HashMap<u64, Task> = HashMap::new();
    let mut arrived: HashMap<u64, f64> = HashMap::new();
    let mut deferred = Vec::new();
    for line in log.lines() {
        let Some(t) = log_time(line) else { continue };
        if line.contains("new task, id = ") {
            // "new task, id = 12, front = 0" or "new task, id = 12/1, front = 0".
            if let Some(id) = number_after(line, "new task, id = ") {
                arrived.entry(id).or_insert(t);
            }
        } else if line.contains("defer task") {
            deferred.extend(number_after(line, "id_task = "));
        } else if let Some(id) = number_after(line, "| task ") {
            let task = by_id.entry(id).or_insert_with(|| Task {
                id,
                ..Task::default()
            });
            if line.contains("processing task") {
                task.launched = t;
            } else if line.contains("new prompt,") {
                task.prompt_tokens = number_after(line, "task.n_tokens = ").unwrap_or(0) as u32;
            } else if line.contains("stop processing") {
                task.released = t;
            }
        }
    }
    let mut out: Vec<Task> = by_id
        .into_values()
        .filter(|t| t.launched > 0.0 && t.released > 0.0)
        .map(|mut t| {
            t.arrived = arrived.get(&t.id).copied().unwrap_or(t.launched);
            t.deferred = deferred.contains(&t.id);
            t
        })
        .collect();
    out.sort_by(|a, b| a.arrived.total_cmp(&b.arrived));
    out
}

/// Pairs of tasks whose time on the server (arrival to release) overlapped.
fn overlapping(tasks: &[Task]) -> Vec<(u64, u64)> {
    let mut pairs = Vec::new();
    for (i, a) in tasks.iter().enumerate() {
        for b in &tasks[i + 1..] {
            if b.arrived < a.released && a.arrived < b.released {
                pairs.push((a.id, b.id));
            }
        }
    }
    pairs
}

/// Each run of the named probes as the agent's API gave it (`last_run`, polled), kept
/// until dropped.
struct Runs {
    seen: Arc<Mutex<HashMap<String, Vec<Value>>>>,
    stop: Arc<AtomicBool>,
}

impl Runs {
    fn watch(agent: &str, names: &[&str]) -> Runs {
        let seen: Arc<Mutex<HashMap<String, Vec<Value>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (keep, done, addr) = (seen.clone(), stop.clone(), agent.to_owned());
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                for name in &names {
                    // Not `http_get`: it panics when the agent is gone, as it is at the end.
                    let (status, body) =
                        http_get_within(&addr, &format!("/api/v1/probes/{name}"), Duration::from_secs(2));
                    let Ok(v) = serde_json::from_str::<Value>(&body) else {
                        continue;
                    };
                    let run = &v["last_run"];
                    if status != 200 || run.is_null() {
                        continue;
                    }
                    let mut seen = keep.lock().unwrap();
                    let list = seen.entry(name.clone()).or_default();
                    if list.last().is_none_or(|l| l["started_at"] != run["started_at"]) {
                        list.push(run.clone());
                    }
                }
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        Runs { seen, stop }
    }

    fn of(&self, name: &str) -> Vec<Value> {
        self.seen.lock().unwrap().get(name).cloned().unwrap_or_default()
    }

    /// Waits until `name` has `n` runs more than `after`; they are returned.
    fn wait(&self, name: &str, after: usize, n: usize, within: Duration) -> Vec<Value> {
        wait_until(&format!("{n} runs of {name}"), within, || {
            self.of(name).len() >= after + n
        });
        self.of(name)[after..].to_vec()
    }
}

impl Drop for Runs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn secs(run: &Value, key: &str) -> f64 {
    run[key].as_f64().unwrap_or_else(|| panic!("{key} in {run}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}

fn write_config(tag: &str, text: &str) -> PathBuf {
    let path = temp_dir(tag).join("probes.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The shadow test's two probes of one server. `beat` asks every second for 64 tokens;
/// `long` every two seconds for 1200 (0.7-1.1 s on this server), half a second after a
/// `beat` tick (schedule/phase.rs: two probes of one endpoint, slots of 0.5 s), so each
/// `long` run is still going when the next `beat` tick comes: unless they take turns,
/// that `beat` request waits on the server behind `long`'s and measures it. Greedy
/// (`temperature: 0`): the random model's sampled text sometimes holds a byte that is no
/// UTF-8, which llama-server cannot put in JSON (a 500 event); its greedy text does not.
/// `once` runs them with a longer timeout (`lenient`): a `beat` queued behind `long`
/// there is measured, not timed out.
fn shadow_probes(addr: &str, which: &[&str], overlap: bool, lenient: bool) -> String {
    let (beat, long) = if lenient {
        ("interval: 10s, timeout: 5s", "interval: 10s, timeout: 5s")
    } else {
        ("interval: 1s, timeout: 1s", "interval: 2s, timeout: 2s")
    };
    let mut text = String::from("agent: {location: here}\nprobes:\n");
    let common = format!(
        "kind: openai_completions, url: \"http://{addr}/v1/completions\", model: tiny-llama, temperature: 0, overlap: {overlap}"
    );
    if which.contains(&"beat") {
        text += &format!(
            "  - {{name: beat, {common}, {beat}, max_tokens: 64, prompts: [\"Write a short story about a cat.\"]}}\n"
        );
    }
    if which.contains(&"long") {
        text += &format!(
            "  - {{name: long, {common}, {long}, max_tokens: 1200, prompts: [\"Once upon a time\"]}}\n"
        );
    }
    text
}

/// What one stretch of probing showed: each probe's runs, and the server's tasks then.
struct Stretch {
    runs: HashMap<String, Vec<Value>>,
    tasks: Vec<Task>,
}

impl Stretch {
    fn ttfts(&self, probe: &str) -> Vec<f64> {
        self.runs[probe]
            .iter()
            .filter_map(|r| r["ttft_seconds"].as_f64())
            .collect()
    }
}

/// The server's tasks from the log's byte `from` on, once it has been idle a while (a
/// killed agent's request is cancelled at the server's next token).
fn tasks_since(server: &OwnServer, from: usize) -> Vec<Task> {
    std::thread::sleep(Duration::from_millis(1500));
    tasks(&server.log_from(from))
}

/// An agent on `config` until each of `wanted` has its number of runs.
fn agent_stretch(server: &OwnServer, config: &str, wanted: &[(&str, usize)]) -> Stretch {
    let from = server.log_len();
    let path = write_config("shadow", config);
    let agent = Daemon::start(&path, &[]);
    let names: Vec<&str> = wanted.iter().map(|(n, _)| *n).collect();
    let watch = Runs::watch(&agent.addr, &names);
    let runs = wanted
        .iter()
        .map(|(name, n)| {
            (
                (*name).to_owned(),
                watch.wait(name, 0, *n, Duration::from_secs(60)),
            )
        })
        .collect();
    drop(agent);
    Stretch {
        runs,
        tasks: tasks_since(server, from),
    }
}

/// `once` on `config`, `times` times; each run's JSON by probe.
fn once_stretch(server: &OwnServer, config: &str, times: usize) -> Stretch {
    let from = server.log_len();
    let path = write_config("shadow-once", config);
    let mut runs: HashMap<String, Vec<Value>> = HashMap::new();
    for _ in 0..times {
        let out = Command::new(env!("CARGO_BIN_EXE_inferprobe"))
            .args(["once", "--format", "json", "-c"])
            .arg(&path)
            .output()
            .unwrap();
        // Exit 1 when a run failed (a queued one may time out); no output is an error.
        assert!(!out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let run: Value = serde_json::from_str(line).unwrap();
            runs.entry(run["probe"].as_str().unwrap().to_owned())
                .or_default()
                .push(run);
        }
    }
    Stretch {
        runs,
        tasks: tasks_since(server, from),
    }
}

/// TTFT within noise of the same probe alone. On this shared two-core machine a run now
/// and then takes tens of milliseconds more for reasons of its own, and a stretch's
/// median moved from 2 to 17 ms with nothing queued on the server (BENCHMARKS.md, issue
/// 29), so medians are compared, with room: at most twice the lone median plus 50 ms. A
/// `beat` queued behind `long` waits 140 ms or more (medians 144-465 ms).
fn within_noise(alone: f64) -> f64 {
    2.0 * alone + 0.050
}

fn describe(what: &str, s: &Stretch) -> String {
    let mut parts = vec![format!("{what}: {} tasks on the server", s.tasks.len())];
    let mut names: Vec<&String> = s.runs.keys().collect();
    names.sort();
    for name in names {
        let t = s.ttfts(name);
        let waited = s.runs[name]
            .iter()
            .map(|r| secs(r, "waited_seconds"))
            .fold(0.0, f64::max);
        parts.push(format!(
            "{name} TTFT median {} max {} over {} runs (waited at most {})",
            ms(median(t.clone())),
            ms(t.iter().copied().fold(0.0, f64::max)),
            t.len(),
            ms(waited)
        ));
    }
    parts.join("; ")
}

/// No shadow: two probes of a one-slot llama-server, in one agent and in `once`, never
/// have requests on the server at once, and each one's TTFT is its TTFT alone; with
/// `overlap: true` the same two overlap there, and `beat` measures `long`'s queue.
#[test]
fn probes_of_a_one_slot_server_take_turns_and_measure_what_they_would_alone() {
    let Some(server) = OwnServer::start(18086) else {
        return;
    };
    let _heavy = heavy();
    let addr = server.addr();
    let both = ["beat", "long"];

    // Each alone, then both taking turns, then both overlapping, in an agent.
    let beat_alone = agent_stretch(
        &server,
        &shadow_probes(&addr, &["beat"], false, false),
        &[("beat", 6)],
    );
    let long_alone = agent_stretch(
        &server,
        &shadow_probes(&addr, &["long"], false, false),
        &[("long", 3)],
    );
    let turns = agent_stretch(
        &server,
        &shadow_probes(&addr, &both, false, false),
        &[("beat", 8), ("long", 4)],
    );
    let overlap = agent_stretch(
        &server,
        &shadow_probes(&addr, &both, true, false),
        &[("beat", 8), ("long", 4)],
    );
    for (what, s) in [
        ("beat alone", &beat_alone),
        ("long alone", &long_alone),
        ("taking turns", &turns),
        ("overlap: true", &overlap),
    ] {
        eprintln!("agent, {}", describe(what, s));
    }
    let alone = [
        ("beat", median(beat_alone.ttfts("beat"))),
        ("long", median(long_alone.ttfts("long"))),
    ];
    // Taking turns: nothing overlapped on the server, though the turns were needed (a
    // `beat` tick found `long` going and waited), and each TTFT is what it is alone.
    assert_eq!(overlapping(&turns.tasks), [], "{:#?}", turns.tasks);
    assert!(turns.tasks.iter().all(|t| !t.deferred), "{:#?}", turns.tasks);
    assert!(turns.tasks.len() >= 12, "{:#?}", turns.tasks);
    let waited = turns.runs["beat"]
        .iter()
        .filter(|r| secs(r, "waited_seconds") > 0.1)
        .count();
    assert!(
        waited >= 2,
        "beat never waited its turn: {:?}",
        turns.runs["beat"]
    );
    for (name, alone) in alone {
        let together = median(turns.ttfts(name));
        assert!(
            together <= within_noise(alone),
            "{name}: median TTFT {} taking turns, {} alone",
            ms(together),
            ms(alone)
        );
    }
    // The contrast, so the checks above can fail: with overlap the server queued one
    // request behind the other, and the `beat` runs that queued measured `long`.
    let pairs = overlapping(&overlap.tasks);
    assert!(pairs.len() >= 2, "no overlap on the server: {:#?}", overlap.tasks);
    assert!(overlap.tasks.iter().any(|t| t.deferred), "{:#?}", overlap.tasks);
    let bound = within_noise(alone[0].1);
    let queued = overlap.ttfts("beat").into_iter().filter(|t| *t > bound).count();
    assert!(
        queued >= 2,
        "beat TTFTs with overlap: {:?}",
        overlap.ttfts("beat")
    );

    // `once`: the same two, run one after another unless they may overlap.
    let once_alone = [
        (
            "beat",
            once_stretch(&server, &shadow_probes(&addr, &["beat"], false, true), 3),
        ),
        (
            "long",
            once_stretch(&server, &shadow_probes(&addr, &["long"], false, true), 3),
        ),
    ];
    let once_turns = once_stretch(&server, &shadow_probes(&addr, &both, false, true), 3);
    let once_overlap = once_stretch(&server, &shadow_probes(&addr, &both, true, true), 3);
    for (name, s) in &once_alone {
        eprintln!("once, {}", describe(&format!("{name} alone"), s));
    }
    eprintln!("once, {}", describe("taking turns", &once_turns));
    eprintln!("once, {}", describe("overlap: true", &once_overlap));
    assert_eq!(overlapping(&once_turns.tasks), [], "{:#?}", once_turns.tasks);
    assert_eq!(once_turns.tasks.len(), 6, "{:#?}", once_turns.tasks);
    for (name, s) in &once_alone {
        let (alone, together) = (median(s.ttfts(name)), median(once_turns.ttfts(name)));
        assert!(
            together <= within_noise(alone),
            "once, {name}: median TTFT {} taking turns, {} alone",
            ms(together),
            ms(alone)
        );
    }
    // Sent at once, each pair met on the server.
    assert_eq!(
        overlapping(&once_overlap.tasks).len(),
        3,
        "{:#?}",
        once_overlap.tasks
    );
}

/// The cold test's probes: `warm` every second, `cold` every 12 s once the server has had
/// no request from the agent for 5 s. Both ask for the same thing but for one word, so
/// their TTFTs compare and the server's log tells their requests apart by prompt length.
/// The prompts share a long start (about 900 tokens of this model's byte-level
/// vocabulary): llama-server keeps a slot's prompt in its cache and evaluates only what
/// follows the part it has, so a served start costs a few ms, and one the server has
/// never seen, as after a restart, tens (measured by hand: 31-36 ms first, then 5-8 ms).
fn cold_probes(addr: &str) -> String {
    let common = format!(
        "kind: openai_completions, url: \"http://{addr}/v1/completions\", model: tiny-llama, temperature: 0, max_tokens: 16"
    );
    let start: Vec<String> = (0..40)
        .map(|i| format!("the quick brown fox jumps over the lazy dog{i}"))
        .collect();
    let start = start.join(" ");
    format!(
        "agent: {{location: here}}\nprobes:\n  - {{name: warm, {common}, interval: 1s, timeout: 1s, prompts: [\"{start} Write a short story about a cat.\"]}}\n  - {{name: cold, {common}, interval: 12s, timeout: 5s, cold: {{idle: 5s}}, prompts: [\"{start} Write a short story about a black cat.\"]}}\n"
    )
}

const COLD_IDLE: f64 = 5.0;
const COLD_INTERVAL: Duration = Duration::from_secs(12);

fn started_at(run: &Value) -> std::time::SystemTime {
    humantime::parse_rfc3339(run["started_at"].as_str().unwrap()).unwrap()
}

/// For each of the cold probe's requests on the server (by its prompt length): the time
/// since the end of the request before it. The agent's idle time ends when its request
/// goes out, before the server queues it, and starts when the answer is in, after the
/// server released the slot: the server's gap is never shorter than the agent's.
fn gaps_before(tasks: &[Task], prompt_tokens: u32) -> Vec<f64> {
    tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.prompt_tokens == prompt_tokens)
        .map(|(i, t)| {
            let before = tasks[..i].iter().map(|b| b.released).fold(0.0, f64::max);
            t.arrived - before
        })
        .collect()
}

/// Cold runs against a real server: the agent keeps its warm probe off the server for
/// the idle time before each cold run (the server's own log shows no request in that
/// window), labels the run cold, and a restart the cold run is the first to meet is
/// still a cold run; a restart the warm probe sees (refused, then answered) opens the
/// endpoint's warm-up and counts on `inferprobe_endpoint_restarts_total`.
#[test]
fn a_cold_probe_finds_the_server_idle_and_sees_it_restarted() {
    let Some(server) = OwnServer::start(18087) else {
        return;
    };
    let _heavy = heavy();
    let path = write_config("cold", &cold_probes(&server.addr()));
    let agent = Daemon::start(&path, &[]);
    let watch = Runs::watch(&agent.addr, &["warm", "cold"]);

    // Two cold runs after idle.
    let after_idle = watch.wait("cold", 0, 2, Duration::from_secs(45));
    for run in &after_idle {
        assert_eq!(run["success"], true, "{run}");
        assert_eq!(run["start"], "cold", "{run}");
        assert!(secs(run, "idle_seconds") >= COLD_IDLE, "{run}");
    }
    let cold_tokens = after_idle[0]["input_tokens"].as_u64().unwrap() as u32;
    let warm_tokens = watch.of("warm")[0]["input_tokens"].as_u64().unwrap() as u32;
    assert_ne!(cold_tokens, warm_tokens, "the log could not tell them apart");
    let first_life = tasks(&server.log_from(0));
    let gaps = gaps_before(&first_life, cold_tokens);
    assert!(gaps.len() >= 2, "{first_life:#?}");
    assert!(gaps.iter().all(|g| *g >= COLD_IDLE), "{gaps:?}: {first_life:#?}");
    let held = metric_sum(
        &agent.metrics(),
        "inferprobe_held_runs_total",
        &["probe=\"warm\""],
    );
    eprintln!(
        "server gaps before the cold runs: {gaps:?} s; warm ticks held: {held} for {} cold runs",
        gaps.len()
    );
    assert!(
        held >= 3.0 * gaps.len() as f64,
        "held {held} warm ticks for {} cold runs",
        gaps.len()
    );

    // A restart inside the quiet window before the next cold run: that run is the first
    // request the new server serves. The agent asked nothing meanwhile, so it cannot
    // know of the restart; the run is cold by its idle time.
    let last = after_idle.last().unwrap();
    let tick = started_at(last) - Duration::from_secs_f64(secs(last, "waited_seconds"));
    let stop_at = tick + COLD_INTERVAL - Duration::from_secs_f64(COLD_IDLE - 0.3);
    std::thread::sleep(
        stop_at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    );
    server.script("stop");
    server.script("start");
    let restarted = watch.wait("cold", 2, 1, Duration::from_secs(30)).remove(0);
    assert_eq!(restarted["success"], true, "{restarted}");
    assert_eq!(restarted["start"], "cold", "{restarted}");
    let second_life = tasks(&server.log_from(0));
    assert_eq!(
        second_life.first().map(|t| t.prompt_tokens),
        Some(cold_tokens),
        "the cold run was not the new server's first request: {second_life:#?}"
    );

    // A restart the warm probe sees: the server down for three of its ticks, then back.
    std::thread::sleep(Duration::from_millis(500));
    server.script("stop");
    std::thread::sleep(Duration::from_millis(2500));
    server.script("start");
    let back = watch.wait("cold", 3, 1, Duration::from_secs(30)).remove(0);
    assert_eq!(back["start"], "cold", "{back}");
    let cause = back["warmup"]["cause"]
        .as_str()
        .unwrap_or_else(|| panic!("no warm-up: {back}"));
    // Refusals then answers; or, when the new server listens before its model is in
    // (it does when its start is slow, on a busy machine), refusals then `Loading model`.
    assert!(
        cause.contains("accepts connections again") || cause.contains("loading the model"),
        "{cause}"
    );
    let warm = watch.of("warm");
    let refused = warm.iter().filter(|r| r["reason"] == "connect").count();
    assert!(refused >= 2, "the warm probe saw no refusals: {warm:?}");
    let first_back = warm
        .iter()
        .skip_while(|r| r["reason"] != "connect")
        .find(|r| r["success"] == true)
        .unwrap();
    assert_eq!(
        first_back["warmup"]["since"], back["warmup"]["since"],
        "{first_back}"
    );
    let metrics = agent.metrics();
    for probe in ["warm", "cold"] {
        let restarts = metric_sum(
            &metrics,
            "inferprobe_endpoint_restarts_total",
            &[&format!("probe=\"{probe}\"")],
        );
        assert_eq!(restarts, 1.0, "{probe}: {metrics}");
    }
    assert!(
        metrics.lines().any(|l| l.starts_with("inferprobe_runs_total{")
            && l.contains("probe=\"cold\"")
            && l.contains("start=\"cold\"")),
        "{metrics}"
    );

    // The figures. After idle a cold run is no slower than a warm one on llama.cpp: it
    // keeps its prompt cache, its threads and the model, and nothing unloads. The new
    // server's first request has no cache of the long prompt start: several times the
    // warm TTFT.
    let ttft = |r: &Value| r["ttft_seconds"].as_f64().map_or("-".into(), ms);
    let warm_ttfts: Vec<f64> = warm.iter().filter_map(|r| r["ttft_seconds"].as_f64()).collect();
    let warm_median = median(warm_ttfts.clone());
    let first_after_restart = restarted["ttft_seconds"].as_f64().unwrap();
    assert!(
        first_after_restart > 2.0 * warm_median,
        "the restarted server's first TTFT {} is not above twice the warm median {}",
        ms(first_after_restart),
        ms(warm_median)
    );
    eprintln!(
        "warm TTFT median {} over {} runs; cold after {} s idle: {}; cold, first request after a restart: {}; warm, first request after a restart it saw: {}; cold after that: {}",
        ms(median(warm_ttfts.clone())),
        warm_ttfts.len(),
        COLD_IDLE,
        after_idle.iter().map(ttft).collect::<Vec<_>>().join(", "),
        ttft(&restarted),
        ttft(first_back),
        ttft(&back),
    );
}

/// The burst probe: one request alone, then four together, every 3 s, each generating 128
/// tokens (about 60 ms on one slot, so queued first tokens come 60 ms apart); the degraded
/// alert after three bursts in a row whose first tokens spread more than half their mean
/// (the default threshold). More tokens would not widen the one-slot spread (it tends to
/// 75 %) but would load the agent: four streams of 256 at once on four slots keep this
/// debug build busy enough to read some first tokens late and spread them.
fn burst_probe(addr: &str) -> String {
    format!(
        "agent: {{location: here}}\nprobes:\n  - {{name: burst, kind: openai_completions, url: \"http://{addr}/v1/completions\", model: tiny-llama, temperature: 0, max_tokens: 128, interval: 3s, timeout: 1500ms, burst: 4, slo: {{burst_spread: 50}}, alert: {{failure_threshold: 3}}, prompts: [\"Write a short story about a cat.\"]}}\n"
    )
}

/// The degraded alerts the agent lists, firing or resolved since.
fn degraded(agent: &Daemon) -> Vec<Value> {
    let (_, _, body) = http_get(&agent.addr, "/api/v1/alerts", None);
    let v: Value = serde_json::from_str(&body).unwrap();
    v["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["alertname"] == "InferenceEndpointDegraded")
        .cloned()
        .collect()
}

/// Each burst's spread, max over min and slowdown, as the runs' JSON says them.
fn burst_figures(runs: &[Value]) -> Vec<[f64; 3]> {
    runs.iter()
        .filter_map(|r| {
            let b = &r["burst"];
            Some([
                b["spread"].as_f64()?,
                b["max_over_min"].as_f64()?,
                b["slowdown"].as_f64()?,
            ])
        })
        .collect()
}

fn show(figures: &[[f64; 3]]) -> String {
    figures
        .iter()
        .map(|[s, m, d]| format!("{:.0} % (max/min {m:.1}, slowdown {d:.1})", s * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Bursts: four requests at once on a one-slot server queue (each first token waits
/// for the requests before it), the spread is wide and the degraded alert fires; on a
/// four-slot server they are served together, the spread is small and nothing fires.
#[test]
fn a_burst_spreads_on_one_slot_and_pages_but_not_on_four() {
    let Some(four) = shared("LLAMA_SERVER_SLOTS4", "127.0.0.1:18085") else {
        return;
    };
    let Some(one) = OwnServer::start(18088) else {
        return;
    };
    let _heavy = heavy();

    let agent = Daemon::start(&write_config("burst-1", &burst_probe(&one.addr())), &[]);
    let watch = Runs::watch(&agent.addr, &["burst"]);
    watch.wait("burst", 0, 3, Duration::from_secs(30));
    wait_until("the degraded alert on one slot", Duration::from_secs(60), || {
        !degraded(&agent).is_empty()
    });
    let alert = degraded(&agent).remove(0);
    let one_slot = burst_figures(&watch.of("burst"));
    eprintln!("one slot, bursts of 4: {}", show(&one_slot));
    eprintln!(
        "one slot, the alert: {} ({})",
        alert["summary"], alert["description"]
    );
    assert!(
        alert["summary"].as_str().unwrap_or_default().contains("spread")
            || alert["description"]
                .as_str()
                .unwrap_or_default()
                .contains("spread"),
        "{alert}"
    );
    drop(agent);
    drop(watch);

    let agent = Daemon::start(&write_config("burst-4", &burst_probe(&four)), &[]);
    let watch = Runs::watch(&agent.addr, &["burst"]);
    let runs = watch.wait("burst", 0, 8, Duration::from_secs(60));
    let four_slots = burst_figures(&runs);
    eprintln!("four slots, bursts of 4: {}", show(&four_slots));
    assert!(degraded(&agent).is_empty(), "{:?}", degraded(&agent));
    let spreads = |f: &[[f64; 3]]| median(f.iter().map(|x| x[0]).collect());
    assert!(four_slots.len() >= 6, "{runs:?}");
    assert!(spreads(&four_slots) < 0.5, "{}", show(&four_slots));
    assert!(spreads(&one_slot) > 0.5, "{}", show(&one_slot));
    let gauge = metric_sum(
        &agent.metrics(),
        "inferprobe_burst_spread_ratio",
        &["probe=\"burst\""],
    );
    assert!(gauge > 0.0 && gauge < 1.5, "{gauge}");
}

/// A restart no run sees: the server stopped and started again between two runs (the
/// tiny model loads in about a second, the probe runs every 6 s), so no request was
/// refused and none was told `Loading model`, and the model is the same. The server
/// says when its process started: with `--metrics`, in `/metrics`' header
/// `Process-Start-Time-Unix`; without (the default), by the `media_marker` its `/props`
/// draws at each start. Either way the next run finds a new start, and the warm-up
/// opens with that cause.
#[test]
fn a_restart_between_runs_shows_in_the_servers_start_time() {
    for metrics in [true, false] {
        let Some(server) = OwnServer::start_with(18089, metrics) else {
            return;
        };
        let _heavy = heavy();
        let path = write_config(
            "restart-between-runs",
            &format!(
                "agent: {{location: here}}\nprobes:\n  - {{name: chat, kind: openai_chat, url: \"http://{}/v1/chat/completions\", model: tiny-llama, max_tokens: 8, interval: 6s, timeout: 3s, warmup: 10s}}\n",
                server.addr()
            ),
        );
        let agent = Daemon::start(&path, &[]);
        let watch = Runs::watch(&agent.addr, &["chat"]);
        let before = watch.wait("chat", 0, 2, Duration::from_secs(30));
        for run in &before {
            assert_eq!(run["success"], true, "{run}");
            assert!(run["warmup"].is_null(), "{run}");
        }
        // Right after a run: the restart is over long before the next.
        let restarted_at = std::time::Instant::now();
        server.script("stop");
        server.script("start");
        let took = restarted_at.elapsed();
        let after = watch.wait("chat", 2, 1, Duration::from_secs(30)).remove(0);
        let runs = watch.of("chat");
        assert!(
            runs.iter().all(|r| r["success"] == true),
            "a run saw the restart (took {took:?}), so this is not the case under test: {runs:?}"
        );
        let cause = after["warmup"]["cause"].as_str().unwrap_or_else(|| {
            panic!("--metrics {metrics}: no warm-up after a restart between runs: {after}")
        });
        assert_eq!(
            cause, "the server's process started anew (its start time changed)",
            "{after}"
        );
        let restarts = metric_sum(
            &agent.metrics(),
            "inferprobe_endpoint_restarts_total",
            &["probe=\"chat\""],
        );
        assert_eq!(restarts, 1.0);
        eprintln!(
            "--metrics {metrics}: restart took {took:?}; the next run, {} later, opened the warm-up: {cause}",
            ms(secs(&after, "idle_seconds"))
        );
    }
}
