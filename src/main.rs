//! The command line (clap) and `run`, which reads as the daemon's lifecycle:
//! config, bind, start, wait for a signal (HUP reloads, INT/TERM stop), drain. Every
//! other subcommand is a module of `cli/`. The binary (this file and `cli/`) is the
//! only place that knows exit codes: 0 ok, 1 a run failed or start-up failed, 64 a bad
//! config (EX_USAGE).
#![forbid(unsafe_code)]

mod cli;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use tokio::signal::unix::{SignalKind, signal};

use inferprobe::config::{self, Config, Severity};
use inferprobe::schedule::Shard;
use inferprobe::server::{ListenerLimits, PortSettings, WebConfig, WebHandle, raise_descriptor_limit};
use inferprobe::simulate::{Fault, GrpcFault, Script};
use inferprobe::{Agent, AgentError, AgentSettings, output};

use cli::logging::{LogFormat, init_logging, set_log_secrets};
use cli::{DEFAULT_DATA_DIR, DEFAULT_PORT, EXIT_BAD_CONFIG, bind_or_exit, load_or_report, log_warnings};

#[derive(Parser)]
#[command(
    name = "inferprobe",
    version,
    about = "Black-box prober for AI inference endpoints"
)]
struct Cli {
    /// How logs are written: text for people, JSON for log collectors.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log filter, e.g. `info` or `inferprobe=debug` (RUST_LOG works too).
    #[arg(long, global = true, default_value = "info", env = "RUST_LOG")]
    log_level: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum TestSeverity {
    Critical,
    Error,
    Warning,
    Info,
}

impl From<TestSeverity> for Severity {
    fn from(s: TestSeverity) -> Severity {
        match s {
            TestSeverity::Critical => Severity::Critical,
            TestSeverity::Error => Severity::Error,
            TestSeverity::Warning => Severity::Warning,
            TestSeverity::Info => Severity::Info,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ReportFormat {
    Markdown,
    Html,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum OutputFormat {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: probe on schedule, serve /metrics and /api/v1/probes.
    Run {
        /// The probes file to run.
        #[arg(short, long, default_value = "probes.yaml")]
        config: PathBuf,
        /// Address to serve on (default: agent.listen, else 0.0.0.0:9464).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// This agent's location label (else INFERPROBE_LOCATION, else agent.location;
        /// one is required).
        #[arg(long, env = "INFERPROBE_LOCATION")]
        location: Option<String>,
        /// Run only this shard of the probes: INDEX/COUNT (INDEX from 0), or auto/COUNT
        /// to take INDEX from the host name's trailing number (StatefulSet pods).
        #[arg(long, env = "INFERPROBE_SHARD")]
        shard: Option<String>,
        /// How long to wait for runs in flight on shutdown.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        drain_timeout: Duration,
        /// Where alert state and undelivered pages are kept (default: agent.data_dir,
        /// else ./inferprobe-data).
        #[arg(long, env = "INFERPROBE_DATA_DIR")]
        data_dir: Option<PathBuf>,
        #[command(flatten)]
        port: PortArgs,
    },
    /// Send a clearly marked test page through each receiver and say whether it was
    /// accepted: proof of the paging path after a deploy.
    TestAlert {
        /// The probes file whose receivers are tested.
        #[arg(short, long, default_value = "probes.yaml")]
        config: PathBuf,
        /// Only this receiver (repeatable).
        #[arg(long)]
        receiver: Vec<String>,
        /// The location the test page names (else INFERPROBE_LOCATION, else
        /// agent.location, else "local").
        #[arg(long, env = "INFERPROBE_LOCATION")]
        location: Option<String>,
        /// The agent's address, for the link in the test page when agent.external_url
        /// is not set (default: agent.listen, else 0.0.0.0:9464).
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// The test page's severity (a page that pages needs the severity that pages).
        #[arg(long, value_enum, default_value_t = TestSeverity::Critical)]
        severity: TestSeverity,
        /// Resolve the test alert sent before, instead of sending one.
        #[arg(long)]
        resolve: bool,
    },
    /// Validate a config file: print every problem as FILE:LINE:COLUMN: message.
    Check {
        /// The probes file to check.
        #[arg(short, long, default_value = "probes.yaml")]
        config: PathBuf,
        /// Also check this web config file (as `run --web.config.file` reads it).
        #[arg(long = "web.config.file")]
        web_config_file: Option<PathBuf>,
    },
    /// Run each probe once now, concurrently, and print the results.
    Once {
        /// The probes file whose probes are run.
        #[arg(short, long, default_value = "probes.yaml")]
        config: PathBuf,
        /// Only these probes (repeatable).
        #[arg(long)]
        probe: Vec<String>,
        /// How to print the results: a table for people, JSON for programs.
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
        /// The location the results are stamped with (else INFERPROBE_LOCATION, else
        /// agent.location, else "local").
        #[arg(long, env = "INFERPROBE_LOCATION")]
        location: Option<String>,
    },
    /// Serve a scripted inference endpoint that speaks every kind's protocol (OpenAI,
    /// Anthropic, Ollama, TGI, llama.cpp, KServe v2, plain HTTP), for tests and fire drills.
    Simulate {
        /// Address to serve on.
        #[arg(long, default_value = "127.0.0.1:8000")]
        listen: SocketAddr,
        #[command(flatten)]
        script: Script,
    },
    /// The SLO report: availability, TTFT and total latency percentiles, SLO attainment
    /// and the longest incidents per probe and location, against the previous period.
    Report {
        /// For SLO targets (slo:) and agent.data_dir; optional.
        #[arg(short, long, default_value = "probes.yaml")]
        config: PathBuf,
        #[command(flatten)]
        request: ReportRequest,
    },
    /// Print the JSON Schema of probes.yaml, with which editors check it as you type.
    Schema,
    /// Run the simulator and the daemon together against a built-in config.
    Demo {
        /// Address the demo agent serves its status page, API and metrics on.
        #[arg(long, default_value_t = SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)))]
        listen: SocketAddr,
        /// Where the simulator listens (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        sim_listen: SocketAddr,
        /// Where the demo keeps its state (default: a fresh temporary directory).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[command(flatten)]
        port: PortArgs,
    },
}

#[derive(clap::Args)]
struct ReportRequest {
    /// Start of the period: a duration ago (7d, 24h) or a time (RFC 3339, Unix seconds);
    /// default 7d, or report.period with --send.
    #[arg(long)]
    since: Option<String>,
    /// End of the period (default: now).
    #[arg(long)]
    until: Option<String>,
    /// Markdown to paste or mail, HTML to publish, JSON for programs.
    #[arg(long, value_enum, default_value_t = ReportFormat::Markdown)]
    format: ReportFormat,
    /// The agent's data directory (else agent.data_dir, else ./inferprobe-data).
    /// The agent may be running.
    #[arg(long, env = "INFERPROBE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Write the report here instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The whole fleet instead: every agent and location, from the Prometheus server
    /// at this URL that scrapes them (figures estimated from histogram buckets). The
    /// local store is not read. `user:password@` in the URL is sent as basic auth.
    #[arg(long, value_name = "URL")]
    prometheus: Option<String>,
    /// The IANA time zone the report's times are shown in (Asia/Shanghai, UTC); else
    /// agent.timezone of the config, else UTC.
    #[arg(long, value_name = "ZONE")]
    timezone: Option<String>,
    /// Send it instead of printing it: to the receivers the config's `report:` names
    /// (e-mail gets the HTML report; chat robots, Slack and webhooks a summary with
    /// report.link). Exit 1 if one does not take it. For a timer or a CronJob; with
    /// --prometheus, the fleet's one report.
    #[arg(long)]
    send: bool,
}

/// The agent's own port: how it is secured and what it lets clients hold.
#[derive(clap::Args)]
struct PortArgs {
    /// Prometheus exporter web configuration (TLS, client certificates, basic auth,
    /// headers): the file that secures node_exporter secures this port.
    #[arg(long = "web.config.file", env = "INFERPROBE_WEB_CONFIG_FILE")]
    web_config_file: Option<PathBuf>,
    /// Connections the port keeps open at once; more are closed at once (default: a
    /// quarter of the open-file limit above 64, at most 1024).
    #[arg(long = "web.max-connections")]
    max_connections: Option<usize>,
    /// Time a connection has to send a complete request head (TLS handshake included)
    /// [default: 10s].
    #[arg(long = "web.header-read-timeout", value_parser = humantime::parse_duration)]
    header_read_timeout: Option<Duration>,
    /// Time a kept-alive connection may wait for its next request [default: 60s].
    #[arg(long = "web.idle-timeout", value_parser = humantime::parse_duration)]
    idle_timeout: Option<Duration>,
}

impl PortArgs {
    /// Raises the open-file limit, reads the web config file (a bad one: every problem,
    /// exit 64) and sizes the limits.
    fn settings(self) -> Result<PortSettings, ExitCode> {
        let nofile = raise_descriptor_limit();
        let mut limits = ListenerLimits::for_descriptor_limit(nofile.unwrap_or(1024));
        if let Some(n) = self.max_connections {
            if n == 0 {
                eprintln!("error: --web.max-connections must be at least 1");
                return Err(ExitCode::from(EXIT_BAD_CONFIG));
            }
            limits.max_connections = n;
        }
        for (given, slot, flag) in [
            (
                self.header_read_timeout,
                &mut limits.header_read_timeout,
                "header-read-timeout",
            ),
            (self.idle_timeout, &mut limits.idle_timeout, "idle-timeout"),
        ] {
            match given {
                Some(d) if d.is_zero() => {
                    eprintln!("error: --web.{flag} must be more than 0");
                    return Err(ExitCode::from(EXIT_BAD_CONFIG));
                }
                Some(d) => *slot = d,
                None => {}
            }
        }
        let web = match &self.web_config_file {
            None => WebConfig::default(),
            Some(path) => WebConfig::load(path).map_err(|errors| {
                for e in &errors.0 {
                    eprintln!("{e}");
                }
                ExitCode::from(EXIT_BAD_CONFIG)
            })?,
        };
        tracing::info!(
            open_files = nofile,
            max_connections = limits.max_connections,
            header_read_timeout = ?limits.header_read_timeout,
            idle_timeout = ?limits.idle_timeout,
            tls = web.is_tls(),
            basic_auth = web.has_basic_auth(),
            "The agent's port."
        );
        Ok(PortSettings {
            limits,
            web: WebHandle::new(web),
        })
    }
}

/// The command line as clap derives it, with `simulate`'s faults listed after its
/// options: described inline, they would switch its `--help` to clap's long layout,
/// unlike every other subcommand's.
fn command() -> clap::Command {
    fn listed(values: Vec<clap::builder::PossibleValue>) -> String {
        values
            .into_iter()
            .map(|v| {
                let help = v.get_help().map(|h| h.to_string()).unwrap_or_default();
                format!("  {:<20}{help}", v.get_name())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
    let faults = listed(
        Fault::value_variants()
            .iter()
            .filter_map(|f| f.to_possible_value())
            .collect(),
    );
    let grpc_faults = listed(
        GrpcFault::value_variants()
            .iter()
            .filter_map(|f| f.to_possible_value())
            .collect(),
    );
    Cli::command().mut_subcommand("simulate", |c| {
        c.mut_arg("fault", |a| {
            a.hide_possible_values(true)
                .help("A fault to inject: one of the faults below")
        })
        .mut_arg("grpc_fault", |a| {
            a.hide_possible_values(true)
                .help("A fault for gRPC calls (gRPC is served on the same port, HTTP/2): one of the gRPC faults below")
        })
        .after_help(format!("Faults:\n{faults}\n\ngRPC faults:\n{grpc_faults}"))
    })
}

fn main() -> ExitCode {
    // Before anything else: a SIGHUP from a config manager that starts the agent and
    // signals it at once must reload, not end it (the default action).
    let early_hup = EarlyHangup::catch();
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    let early_hup = match cli.command {
        Command::Run { .. } => Some(early_hup),
        // Any other command ends on a hangup, as a command-line tool does.
        _ => {
            early_hup.default_action();
            None
        }
    };
    init_logging(cli.log_format, &cli.log_level);
    let runtime = match runtime(matches!(cli.command, Command::Simulate { .. })) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::Run {
                config,
                listen,
                location,
                shard,
                drain_timeout,
                data_dir,
                port,
            } => {
                let settings = RunArgs {
                    listen,
                    location,
                    shard,
                    drain: drain_timeout,
                    data_dir,
                    port,
                };
                let hup = early_hup.expect("caught for run");
                run(&config, settings, hup).await
            }
            Command::TestAlert {
                config,
                receiver,
                location,
                listen,
                severity,
                resolve,
            } => cli::test_alert::run(&config, &receiver, location, listen, severity.into(), resolve).await,
            Command::Check {
                config,
                web_config_file,
            } => cli::check::run(&config, web_config_file.as_deref()),
            Command::Once {
                config,
                probe,
                format,
                location,
            } => cli::once::run(&config, &probe, format, location).await,
            Command::Simulate { listen, script } => cli::simulate::run(listen, script).await,
            Command::Report { config, request } => cli::report::run(&config, request).await,
            Command::Schema => cli::schema::run(),
            Command::Demo {
                listen,
                sim_listen,
                data_dir,
                port,
            } => cli::demo::run(listen, sim_listen, data_dir, port).await,
        }
    })
}

/// The agent's worker threads: one. A run's CPU is a few tenths of a millisecond and
/// the agent waits on sockets (10,000 streaming probes keep ~14 % of one core busy,
/// BENCHMARKS.md), while a second worker costs more than it gives: at 100 runs/s two
/// workers parking and waking each other used 31 % more CPU per run. What could hold
/// the worker for long (a scrape's encoding, the API's JSON, the status page, history
/// queries, alert commits) runs on the blocking pool, so a run's timestamps are not
/// held up: with a scrape, the full probe list and the status page fetched every 2 s at
/// 9,000 probes, a 20 ms stream's TTFT read p99 22.9 ms, against 22.2 ms with no
/// fetch at all (BENCHMARKS.md).
/// `TOKIO_WORKER_THREADS` (tokio's own variable) sets another count.
const AGENT_WORKER_THREADS: usize = 1;

/// The simulator's worker threads at most: it serves load, so one per core, but
/// without tokio's default of 64 workers (each with its stack and, under glibc, its own
/// malloc arena) on a 64-core node.
const MAX_SIMULATOR_WORKER_THREADS: usize = 4;

fn runtime(simulator: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // tokio reads its own variable unless a count is set here.
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        builder.worker_threads(if simulator {
            cores.min(MAX_SIMULATOR_WORKER_THREADS)
        } else {
            AGENT_WORKER_THREADS
        });
    }
    builder.enable_all().build()
}

/// For the daemon: --location, else INFERPROBE_LOCATION (clap reads both into `flag`),
/// else agent.location; none is an error, since results from an unnamed place mislead.
fn location_for_run(flag: Option<String>, config: &Config) -> Result<String, String> {
    let location = flag.or_else(|| config.agent.location.clone()).ok_or(
        "no location: set --location, INFERPROBE_LOCATION or agent.location (e.g. eu-west); \
         every result is labelled with it",
    )?;
    if config::valid_label_value(&location) {
        Ok(location)
    } else {
        Err(format!(
            "location `{location}` must be 1-64 characters of letters, digits, `_`, `-` or `.`"
        ))
    }
}

fn exit_for(e: &AgentError) -> ExitCode {
    if e.is_config() {
        ExitCode::from(EXIT_BAD_CONFIG)
    } else {
        ExitCode::FAILURE
    }
}

/// `run`'s flags.
struct RunArgs {
    listen: Option<SocketAddr>,
    location: Option<String>,
    shard: Option<String>,
    drain: Duration,
    data_dir: Option<PathBuf>,
    port: PortArgs,
}

async fn run(path: &Path, args: RunArgs, early_hup: EarlyHangup) -> ExitCode {
    let RunArgs {
        listen,
        location,
        shard,
        drain,
        data_dir,
        port,
    } = args;
    let web_file = port.web_config_file.clone();
    let port = match port.settings() {
        Ok(p) => p,
        Err(code) => return code,
    };
    let shard = match shard
        .map(|s| Shard::parse(&s, inferprobe::net::host_name))
        .transpose()
    {
        Ok(s) => s.unwrap_or(Shard::ALL),
        Err(e) => {
            eprintln!("error: --shard: {e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    let config = match load_or_report(path) {
        Ok(c) => sharded(c, shard),
        Err(code) => return code,
    };
    // From here on nothing the agent writes to stderr or stdout can block it: a reader
    // that stopped costs lines (counted), never a run, the port or a page. (A file
    // that does not load is reported whole before: that process probes nothing.)
    let _flush = output::start(false);
    let location = match location_for_run(location, &config) {
        Ok(l) => l,
        Err(e) => {
            output::STDERR.say(&format!("error: {e}"));
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    let addr = listen
        .or(config.agent.listen)
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)));
    let listener = match bind_or_exit(addr, "").await {
        Ok(l) => l,
        Err(code) => return code,
    };
    let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let data_dir = data_dir
        .or_else(|| config.agent.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    let web = port.web.clone();
    let settings = AgentSettings {
        location: location.clone(),
        data_dir: data_dir.clone(),
        port,
    };
    let mut agent = match Agent::start(&config, settings, listener) {
        Ok(a) => a,
        Err(e) => {
            output::STDERR.say(&format!("error: {e}"));
            return exit_for(&e);
        }
    };
    tracing::info!(
        listen = %bound,
        location = %location,
        probes = config.probes.len(),
        shard = %format!("{}/{}", shard.index, shard.count),
        receivers = config.receivers.len(),
        data_dir = %data_dir.display(),
        "Agent started."
    );
    // Lines from here on may wait for a batch (see `output`); the guard writes what
    // waits however `run` ends.
    output::STDERR.set_batching(true);
    // The agent keeps what it runs (each probe's config, built); the parsed file is
    // not needed again until a reload reads the file anew, and at 10,000 probes it is
    // ~20 MB, a third of the memory budget, held for the life of the process otherwise.
    drop(config);

    let (Ok(mut hup), Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::hangup()),
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("Cannot install signal handlers.");
        return ExitCode::FAILURE;
    };
    // tokio's handler now sees every SIGHUP; one that came while the agent was loading
    // and starting asks for the file as it is now.
    let hangup = |agent: &mut Agent| {
        reload(agent, path, shard);
        if let Some(file) = &web_file {
            reload_web(&web, file);
        }
    };
    if early_hup.take() {
        tracing::info!("A SIGHUP came while the agent was starting: reloading now.");
        hangup(&mut agent);
    }
    loop {
        tokio::select! {
            _ = hup.recv() => hangup(&mut agent),
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    tracing::info!(drain = ?drain, "Shutting down; waiting for runs in flight.");
    // A drain that missed its deadline says so itself, with what it abandoned.
    if agent.shutdown(drain).await {
        tracing::info!("All runs finished; bye.");
    }
    ExitCode::SUCCESS
}

/// SIGHUP from the first line of `main` until tokio's handler takes over: noted, so it
/// neither ends the process (the default action) nor is lost. Sent 5 ms after exec it
/// used to kill the agent, which installed its handlers only once loaded.
struct EarlyHangup {
    came: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Set for commands other than `run`: a hangup then does what it does by default.
    by_default: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ids: Vec<signal_hook::SigId>,
}

impl EarlyHangup {
    fn catch() -> EarlyHangup {
        use signal_hook::consts::SIGHUP;
        let came = std::sync::Arc::default();
        let by_default = std::sync::Arc::default();
        // Registration fails only for a forbidden signal, which SIGHUP is not; were it
        // to fail, the process keeps the default action, as before.
        let ids = [
            signal_hook::flag::register(SIGHUP, std::sync::Arc::clone(&came)),
            signal_hook::flag::register_conditional_default(SIGHUP, std::sync::Arc::clone(&by_default)),
        ]
        .into_iter()
        .flatten()
        .collect();
        EarlyHangup {
            came,
            by_default,
            ids,
        }
    }

    /// A command other than `run`: a hangup ends it as usual, also one already come.
    fn default_action(self) {
        use std::sync::atomic::Ordering;
        self.by_default.store(true, Ordering::SeqCst);
        if self.came.load(Ordering::SeqCst) {
            let _ = signal_hook::low_level::emulate_default_handler(signal_hook::consts::SIGHUP);
        }
    }

    /// Whether a SIGHUP came; from now on tokio's handler alone sees them.
    fn take(self) -> bool {
        for id in self.ids {
            signal_hook::low_level::unregister(id);
        }
        self.came.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Only this shard's probes.
fn sharded(mut config: Config, shard: Shard) -> Config {
    if shard != Shard::ALL {
        let all = config.probes.len();
        let (ours, others): (Vec<_>, Vec<_>) = config.probes.into_iter().partition(|p| shard.owns(&p.name));
        config.probes = ours;
        config.other_shards = others;
        tracing::info!(shard = %format!("{}/{}", shard.index, shard.count), probes = config.probes.len(), of = all, "This agent runs its shard of the probes.");
    }
    config
}

/// SIGHUP, with --web.config.file: new certificates, users and headers for connections
/// accepted from now on; a bad file keeps the running one.
fn reload_web(web: &WebHandle, file: &Path) {
    match web.reload(file) {
        Ok(c) => tracing::info!(
            tls = c.is_tls(),
            basic_auth = c.has_basic_auth(),
            "Web config reloaded."
        ),
        Err(errors) => {
            for e in &errors.0 {
                tracing::error!(problem = %e, "Web config problem; the running web config stays.");
            }
        }
    }
}

/// SIGHUP: a bad file keeps the running config.
fn reload(agent: &mut Agent, path: &Path, shard: Shard) {
    let config = match config::load(path) {
        Ok(c) => {
            set_log_secrets(&c);
            log_warnings(&c.warnings);
            sharded(c, shard)
        }
        Err(errors) => {
            for e in &errors.0 {
                tracing::error!(problem = %e, "Config problem.");
            }
            // Metrics first: whoever reads the log line may look at /metrics next.
            agent.metrics.reloaded(false);
            tracing::error!(file = %path.display(), problems = errors.0.len(), "Reload failed; keeping the running configuration.");
            return;
        }
    };
    match agent.apply(&config) {
        Ok(s) => {
            agent.metrics.reloaded(true);
            tracing::info!(
                added = s.added,
                changed = s.changed,
                removed = s.removed,
                unchanged = s.unchanged,
                "Configuration reloaded."
            );
        }
        Err(e) => {
            agent.metrics.reloaded(false);
            tracing::error!(error = %e, "Reload failed; keeping the running configuration.");
        }
    }
}
