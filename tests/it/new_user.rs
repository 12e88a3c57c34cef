//! The "new user" test: from an empty directory, the README's commands and its first probe
//! run as written, against the built-in simulator instead of a model server.
//!
//! Nothing here is copied from the README: the example is the README's first ```yaml block,
//! written into an empty directory as probes.yaml, and the commands are the lines of its
//! ```sh blocks, each run with the real binary (`inferprobe ...` as written, `cargo run
//! --release -- ...` as the binary with the same arguments). The example takes its base URL
//! from an environment variable with a default (`${OPENAI_BASE_URL:-https://...}`): the
//! test sets it to `inferprobe simulate`'s address, sets the example's other variables as
//! the README's `export` line does (a dummy key; the receiver's URL at an address where
//! nothing listens, which must not break the agent, or at a fake receiver for
//! `test-alert`), and runs each command in the README's order. Only two things are added,
//! both to share the machine with other tests: `--listen 127.0.0.1:0` on the long-running
//! commands (`run`, `demo`) instead of the fixed port 9464, and `--log-format json` before
//! `run`, to read the address it took.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{FakeReceiver, closed_port, http_get, temp_dir};

const BIN: &str = env!("CARGO_BIN_EXE_inferprobe");

fn readme() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README's shell commands in order, as (line in README.md, command), comments and
/// blank lines dropped.
fn sh_commands(readme: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for block in crate::support::markdown::parse(readme).blocks {
        if block.lang != "sh" {
            continue;
        }
        for (i, line) in block.text.lines().enumerate() {
            // A comment starts at a `#` after blank space (a `#` inside a word stays).
            let command = match line.find(" #") {
                Some(at) => &line[..at],
                None if line.trim_start().starts_with('#') => "",
                None => line,
            };
            let command = command.trim();
            if !command.is_empty() {
                out.push((block.line + 1 + i, command.to_owned()));
            }
        }
    }
    out
}

/// The `${NAME}` and `${NAME:-default}` references in a value: (name, has a default).
fn env_references(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find('}') else { break };
        let inner = &rest[..end];
        out.push(match inner.split_once(":-") {
            Some((name, _)) => (name.to_owned(), true),
            None => (inner.to_owned(), false),
        });
        rest = &rest[end + 1..];
    }
    out
}

/// What the README's example needs from the environment, by role.
struct ExampleEnv {
    /// The variable the probe's URL takes its base from (it has a default: the real API).
    base_url: String,
    /// The variable holding the receiver's URL.
    receiver_url: String,
    /// Every variable without a default: what the user must export.
    required: BTreeSet<String>,
    /// The first probe's name, to find its result.
    probe: String,
}

fn example_env(example: &str) -> ExampleEnv {
    let yaml: serde_yaml::Value = serde_yaml::from_str(example).expect("the README's example is YAML");
    let probe = &yaml["probes"][0];
    let url = probe["url"].as_str().expect("the example's probe has a url");
    let base_url = env_references(url)
        .into_iter()
        .find(|(_, has_default)| *has_default)
        .map(|(name, _)| name)
        .unwrap_or_else(|| {
            panic!("the README's probe url must take its base from a variable with a default, like ${{OPENAI_BASE_URL:-https://api.openai.com/v1}}, so that it can be pointed elsewhere; it is {url}")
        });
    let receiver = yaml["receivers"][0]["url"]
        .as_str()
        .expect("the README's example has a receiver with a url");
    let receiver_url = env_references(receiver)
        .into_iter()
        .map(|(name, _)| name)
        .next()
        .expect("the receiver's url comes from the environment");
    let required = env_references(example)
        .into_iter()
        .filter(|(_, has_default)| !has_default)
        .map(|(name, _)| name)
        .collect();
    ExampleEnv {
        base_url,
        receiver_url,
        required,
        probe: probe["name"].as_str().unwrap().to_owned(),
    }
}

/// `inferprobe simulate` on a free loopback port; killed on drop.
struct Simulator {
    child: Child,
    addr: String,
}

impl Simulator {
    fn start() -> Simulator {
        let mut child = Command::new(BIN)
            .args(["simulate", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let line = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.contains("listening on http://"))
            .expect("simulate prints its address");
        let addr = line.split("http://").nth(1).unwrap().trim().to_owned();
        Simulator { child, addr }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A command of the README, with the test's environment, in the user's directory.
fn command(dir: &Path, env: &BTreeMap<String, String>, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(dir);
    // The user's shell has none of the agent's own variables set, whatever ours has.
    for name in [
        "INFERPROBE_LOCATION",
        "INFERPROBE_DATA_DIR",
        "INFERPROBE_SHARD",
        "INFERPROBE_WEB_CONFIG_FILE",
        "RUST_LOG",
    ] {
        cmd.env_remove(name);
    }
    cmd.envs(env);
    cmd
}

fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Polls the agent's `/api/v1/probes` until `probe` has a run; returns that run.
fn first_result(addr: &str, probe: &str, within: Duration) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, _, body) = http_get(addr, "/api/v1/probes", None);
        if status == 200 {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(run) = v["probes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["probe"] == probe && !p["last_run"].is_null())
            {
                return run["last_run"].clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no result for {probe} at http://{addr}/api/v1/probes within {within:?}: {body}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Stops a long-running command as Ctrl-C or `kill` would, and expects a clean exit.
fn stop(mut child: Child, what: &str) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM {what}");
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{what} exited {status} on SIGTERM");
            return;
        }
        assert!(Instant::now() < deadline, "{what} did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `inferprobe run ...` as written (plus a free port): the agent starts, probes, and its
/// API shows the first probe's result, a success against the simulator.
fn run_agent(dir: &Path, env: &BTreeMap<String, String>, args: &[&str], probe: &str) {
    let mut all = vec!["--log-format", "json"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--listen", "127.0.0.1:0"]);
    let mut child = command(dir, env, &all)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let addr = loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => {
                if line.contains("Agent started.") {
                    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                    break v["listen"].as_str().unwrap().to_owned();
                }
                seen.push(line);
            }
            Err(_) => panic!("`inferprobe {}` did not start: {seen:#?}", args.join(" ")),
        }
    };
    // The first run comes at the probe's phase within its interval (30 s by default).
    let run = first_result(&addr, probe, Duration::from_secs(50));
    assert_eq!(run["success"], true, "{run}");
    stop(child, &format!("inferprobe {}", args.join(" ")));
}

/// `cargo run --release -- demo` as the binary (plus a free port): its status page's API
/// shows live results with no model server.
fn run_demo(dir: &Path, env: &BTreeMap<String, String>, args: &[&str]) {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--listen", "127.0.0.1:0"]);
    let mut child = command(dir, env, &all)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let status_line = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.trim_start().starts_with("status page:"))
        .expect("the demo prints its status page's address");
    // Keep reading, so the demo never blocks on a full pipe.
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    let addr = status_line
        .split("http://")
        .nth(1)
        .expect("an http address")
        .trim()
        .trim_end_matches('/')
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let (_, _, body) = http_get(&addr, "/api/v1/probes", None);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if v["probes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| !p["last_run"].is_null())
        {
            break;
        }
        assert!(Instant::now() < deadline, "the demo showed no result within 25 s");
        std::thread::sleep(Duration::from_millis(250));
    }
    let (status, _, page) = http_get(&addr, "/", None);
    assert_eq!(status, 200);
    assert!(page.contains("<html") || page.contains("<!DOCTYPE"), "{page}");
    stop(child, "the demo");
}

#[test]
fn a_new_user_runs_the_readme_as_written() {
    let readme = readme();
    let parsed = crate::support::markdown::parse(&readme);
    let example = parsed
        .blocks
        .iter()
        .find(|b| b.lang == "yaml")
        .expect("the README has a probes.yaml example")
        .text
        .clone();
    let needs = example_env(&example);
    let commands = sh_commands(&readme);

    // The two commands the README promises, exactly as .ci/run and users type them.
    let texts: Vec<&str> = commands.iter().map(|(_, c)| c.as_str()).collect();
    for promised in [
        "cargo test --locked",
        "cargo install --locked --path .",
        "cargo run --release -- demo",
    ] {
        assert!(
            texts.contains(&promised),
            "the README's ```sh blocks lack `{promised}`: {texts:#?}"
        );
    }

    // An empty directory, and the example in it.
    let dir: PathBuf = temp_dir("new-user");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::write(dir.join("probes.yaml"), &example).unwrap();

    let sim = Simulator::start();
    let nobody = format!("http://127.0.0.1:{}/hooks/nobody", closed_port());
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert(needs.base_url.clone(), format!("http://{}/v1", sim.addr));
    let mut exported = BTreeSet::new();
    let mut ran = BTreeSet::new();
    for (line, text) in &commands {
        let words: Vec<&str> = text.split_whitespace().collect();
        let at = format!("README.md:{line}: `{text}`");
        match words.as_slice() {
            ["export", assignments @ ..] => {
                for a in assignments {
                    let (name, _) = a
                        .split_once('=')
                        .unwrap_or_else(|| panic!("{at}: `{a}` is no NAME=value"));
                    exported.insert(name.to_owned());
                    // The user's values, but for the receiver: nothing listens there.
                    let value = if *name == needs.receiver_url {
                        nobody.clone()
                    } else {
                        "sk-new-user-test-key".to_owned()
                    };
                    env.insert(name.to_owned(), value);
                }
            }
            ["cargo", "install", ..] | ["cargo", "test", ..] => {}
            ["cargo", "run", "--release", "--", args @ ..] => {
                assert_eq!(
                    args.first(),
                    Some(&"demo"),
                    "{at}: only the demo is run through cargo"
                );
                run_demo(&dir, &env, args);
                ran.insert("demo".to_owned());
            }
            ["inferprobe", sub, ..] => {
                let args = &words[1..];
                match *sub {
                    "check" => {
                        let out = command(&dir, &env, args).output().unwrap();
                        assert!(out.status.success(), "{at}:\n{}", output_text(&out));
                        assert!(
                            String::from_utf8_lossy(&out.stdout).contains("ok"),
                            "{at}:\n{}",
                            output_text(&out)
                        );
                    }
                    "once" => {
                        let out = command(&dir, &env, args).output().unwrap();
                        let stdout = String::from_utf8_lossy(&out.stdout);
                        assert!(out.status.success(), "{at}:\n{}", output_text(&out));
                        let row = stdout
                            .lines()
                            .find(|l| l.starts_with(&needs.probe))
                            .unwrap_or_else(|| panic!("{at}: no row for {}:\n{stdout}", needs.probe));
                        assert_eq!(row.split_whitespace().nth(1), Some("ok"), "{at}:\n{stdout}");
                    }
                    "test-alert" => {
                        // A receiver that answers, to see the test page arrive.
                        let receiver = FakeReceiver::start(200);
                        let mut env = env.clone();
                        env.insert(
                            needs.receiver_url.clone(),
                            format!("http://{}/services/new-user", receiver.addr),
                        );
                        let out = command(&dir, &env, args).output().unwrap();
                        assert!(out.status.success(), "{at}:\n{}", output_text(&out));
                        assert_eq!(receiver.accepted_count(), 1, "{at}:\n{}", output_text(&out));
                    }
                    "run" => run_agent(&dir, &env, args, &needs.probe),
                    other => {
                        panic!("{at}: the new-user test does not run `inferprobe {other}` yet; teach it")
                    }
                }
                ran.insert((*sub).to_owned());
            }
            _ => panic!(
                "{at}: the new-user test does not know how to run this; README ```sh blocks hold only commands that run as written"
            ),
        }
    }
    // The README tells the user every variable the example needs.
    assert!(
        needs.required.is_subset(&exported),
        "the README's `export` line must set {:?}; it sets {exported:?}",
        needs.required
    );
    for must in ["check", "once", "run", "demo"] {
        assert!(ran.contains(must), "the README never runs `{must}`: {ran:?}");
    }
    // Only what a user's commands make: the agent's data directory beside probes.yaml.
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["inferprobe-data", "probes.yaml"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `inferprobe schema | head`: the reader leaves early, and the command ends quietly and
/// successfully, as a Unix tool does, not with a panic about a broken pipe.
#[test]
fn a_reader_that_leaves_early_ends_a_command_quietly() {
    use std::io::Read;
    let mut child = Command::new(BIN)
        .arg("schema")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The read end is closed here; the schema (about 100 KB) outgrows the pipe's buffer.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}
