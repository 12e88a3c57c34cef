//! The command line. `run` reads as the daemon's lifecycle: config, bind, start, wait
//! for a signal (HUP reloads, INT/TERM stop), drain. The only place that knows exit
//! codes: 0 ok, 1 a run failed or start-up failed, 64 a bad config (EX_USAGE).
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

use inferprobe::alert::{Alert, Event, Notification};
use inferprobe::config::{self, Config, Severity};
use inferprobe::human::{printable, printable_json, printable_text};
use inferprobe::net::TlsRoots;
use inferprobe::notify::{Delivery, Receiver};
use inferprobe::outcome::Outcome;
use inferprobe::probe::BuildContext;
use inferprobe::redact::{Redactor, SharedRedactor};
use inferprobe::report::{self, Report};
use inferprobe::schedule::Shard;
use inferprobe::server::{ListenerLimits, PortSettings, WebConfig, WebHandle, raise_descriptor_limit};
use inferprobe::simulate::{self, Script};
use inferprobe::{Agent, AgentError, AgentSettings, build_probes};

const EXIT_BAD_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(
    name = "inferprobe",
    version,
    about = "Black-box prober for AI inference endpoints"
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log filter, e.g. `info` or `inferprobe=debug` (RUST_LOG works too).
    #[arg(long, global = true, default_value = "info", env = "RUST_LOG")]
    log_level: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
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
        #[arg(short, long, default_value = "probes.yaml")]
        config: PathBuf,
        /// Only this receiver (repeatable).
        #[arg(long)]
        receiver: Vec<String>,
        #[arg(long, env = "INFERPROBE_LOCATION")]
        location: Option<String>,
        /// The test page's severity (a page that pages needs the severity that pages).
        #[arg(long, value_enum, default_value_t = TestSeverity::Critical)]
        severity: TestSeverity,
        /// Resolve the test alert sent before, instead of sending one.
        #[arg(long)]
        resolve: bool,
    },
    /// Validate a config file: print every problem as FILE:LINE:COLUMN: message.
    Check {
        #[arg(short, long, default_value = "probes.yaml")]
        config: PathBuf,
        /// Also check this web config file (as `run --web.config.file` reads it).
        #[arg(long = "web.config.file")]
        web_config_file: Option<PathBuf>,
    },
    /// Run each probe once now, concurrently, and print the results.
    Once {
        #[arg(short, long, default_value = "probes.yaml")]
        config: PathBuf,
        /// Only these probes (repeatable).
        #[arg(long)]
        probe: Vec<String>,
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
        #[arg(long, env = "INFERPROBE_LOCATION")]
        location: Option<String>,
    },
    /// Serve a scripted OpenAI-compatible streaming endpoint (for tests and fire drills).
    Simulate {
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
    /// Run the simulator and the daemon together against a built-in config.
    Demo {
        #[arg(long, default_value = "127.0.0.1:9464")]
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.log_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
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
            } => run(&config, listen, location, shard, drain_timeout, data_dir, port).await,
            Command::TestAlert {
                config,
                receiver,
                location,
                severity,
                resolve,
            } => test_alert(&config, &receiver, location, severity.into(), resolve).await,
            Command::Check {
                config,
                web_config_file,
            } => {
                let code = check(&config);
                match web_config_file {
                    Some(web) if !check_web(&web) => ExitCode::from(EXIT_BAD_CONFIG),
                    _ => code,
                }
            }
            Command::Once {
                config,
                probe,
                format,
                location,
            } => once(&config, &probe, format, location).await,
            Command::Simulate { listen, script } => simulate_cmd(listen, script).await,
            Command::Report { config, request } => report(&config, request).await,
            Command::Demo {
                listen,
                sim_listen,
                data_dir,
                port,
            } => demo(listen, sim_listen, data_dir, port).await,
        }
    })
}

fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal: a journal or a file gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(|| RedactingStderr(Vec::new()));
    match format {
        LogFormat::Text => builder.fmt_fields(PrintableFields).init(),
        // serde escapes control characters in JSON strings.
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Text log fields as tracing prints them (`message key=value ...`, the `log.*`
/// fields of bridged `log` records left out), each value made printable: a server's
/// words in a field cannot recolour the terminal, erase the log or fake a log line.
struct PrintableFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for PrintableFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut visitor = PrintableVisitor {
            writer,
            result: Ok(()),
            first: true,
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct PrintableVisitor<'w> {
    writer: tracing_subscriber::fmt::format::Writer<'w>,
    result: std::fmt::Result,
    first: bool,
}

impl tracing::field::Visit for PrintableVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let value = printable(&format!("{value:?}"));
        let sep = if std::mem::take(&mut self.first) { "" } else { " " };
        self.result = if field.name() == "message" {
            write!(self.writer, "{sep}{value}")
        } else {
            write!(self.writer, "{sep}{}={value}", field.name())
        };
    }
}

/// The secrets of the config last loaded, removed from every log line: our fields are
/// cleaned where server words enter, but a dependency's debug line (the HTTP client
/// naming the host it connects to) may show a `${VAR}` host too. Process-wide because
/// the log subscriber it serves is.
static LOG_SECRETS: std::sync::RwLock<Option<std::sync::Arc<Redactor>>> = std::sync::RwLock::new(None);

fn set_log_secrets(config: &Config) {
    if let Ok(mut s) = LOG_SECRETS.write() {
        *s = Some(std::sync::Arc::new(Redactor::for_config(config)));
    }
}

/// One log line, written to stderr redacted when it is complete (tracing writes each
/// event through a fresh writer and drops it).
struct RedactingStderr(Vec<u8>);

impl std::io::Write for RedactingStderr {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactingStderr {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let secrets = LOG_SECRETS.read().ok().and_then(|s| s.clone());
        let line = match secrets {
            Some(r) => r.clean(&text),
            None => text.into_owned(),
        };
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
}

fn load_or_report(path: &Path) -> Result<Config, ExitCode> {
    let config = config::load(path).map_err(|errors| {
        for e in &errors.0 {
            eprintln!("{e}");
        }
        ExitCode::from(EXIT_BAD_CONFIG)
    })?;
    set_log_secrets(&config);
    log_warnings(&config);
    Ok(config)
}

/// Risky settings, on every load: they must not be forgotten once the file works.
fn log_warnings(config: &Config) {
    for w in &config.warnings {
        tracing::warn!(warning = %w, "Config warning.");
    }
}

fn check(path: &Path) -> ExitCode {
    match config::load(path) {
        Ok(config) => {
            for w in &config.warnings {
                println!("warning: {w}");
            }
            println!(
                "{}: ok, {} probes{}",
                path.display(),
                config.probes.len(),
                match config.warnings.len() {
                    0 => String::new(),
                    n => format!(", {n} warning(s)"),
                }
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors.0 {
                println!("{e}");
            }
            println!("{}: {} problem(s)", path.display(), errors.0.len());
            ExitCode::from(EXIT_BAD_CONFIG)
        }
    }
}

/// `check --web.config.file`: every problem, or ok; whether it is ok.
fn check_web(path: &Path) -> bool {
    match WebConfig::load(path) {
        Ok(web) => {
            println!(
                "{}: ok, {}{}",
                path.display(),
                if web.is_tls() { "TLS" } else { "plain HTTP" },
                if web.has_basic_auth() { ", basic auth" } else { "" }
            );
            true
        }
        Err(errors) => {
            for e in &errors.0 {
                println!("{e}");
            }
            println!("{}: {} problem(s)", path.display(), errors.0.len());
            false
        }
    }
}

/// For one-off commands: the location if set, else "local".
fn location_of(flag: Option<String>, config: &Config) -> String {
    flag.or_else(|| config.agent.location.clone())
        .unwrap_or_else(|| "local".to_owned())
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

fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

fn exit_for(e: &AgentError) -> ExitCode {
    if e.is_config() {
        ExitCode::from(EXIT_BAD_CONFIG)
    } else {
        ExitCode::FAILURE
    }
}

async fn run(
    path: &Path,
    listen: Option<SocketAddr>,
    location: Option<String>,
    shard: Option<String>,
    drain: Duration,
    data_dir: Option<PathBuf>,
    port: PortArgs,
) -> ExitCode {
    let web_file = port.web_config_file.clone();
    let port = match port.settings() {
        Ok(p) => p,
        Err(code) => return code,
    };
    let shard = match shard.map(|s| Shard::parse(&s, hostname)).transpose() {
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
    let location = match location_for_run(location, &config) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    let addr = listen
        .or(config.agent.listen)
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 9464)));
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let data_dir = data_dir
        .or_else(|| config.agent.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from("inferprobe-data"));
    let web = port.web.clone();
    let settings = AgentSettings {
        location: location.clone(),
        data_dir: data_dir.clone(),
        port,
    };
    let mut agent = match Agent::start(&config, settings, listener) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
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

    let (Ok(mut hup), Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::hangup()),
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("error: cannot install signal handlers");
        return ExitCode::FAILURE;
    };
    loop {
        tokio::select! {
            _ = hup.recv() => {
                reload(&mut agent, path, shard);
                if let Some(file) = &web_file {
                    reload_web(&web, file);
                }
            }
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

/// Only this shard's probes.
fn sharded(mut config: Config, shard: Shard) -> Config {
    if shard != Shard::ALL {
        let all = config.probes.len();
        let (ours, others): (Vec<_>, Vec<_>) = config.probes.into_iter().partition(|p| shard.owns(&p.name));
        config.probes = ours;
        config.other_shards = others.into_iter().map(|p| p.name).collect();
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
            log_warnings(&c);
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

async fn once(path: &Path, only: &[String], format: OutputFormat, location: Option<String>) -> ExitCode {
    let mut config = match load_or_report(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(missing) = only.iter().find(|n| !config.probes.iter().any(|p| &p.name == *n)) {
        eprintln!("error: no probe named \"{missing}\" in {}", path.display());
        return ExitCode::from(EXIT_BAD_CONFIG);
    }
    if !only.is_empty() {
        config.probes.retain(|p| only.contains(&p.name));
    }
    let location = location_of(location, &config);
    let cx = BuildContext {
        redactor: SharedRedactor::new(Redactor::for_config(&config)),
        ..BuildContext::new()
    };
    let probes = match build_probes(&config, &location, &cx) {
        Ok(p) => p,
        Err((probe, e)) => {
            eprintln!("error: probe \"{probe}\": {e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    let tasks: Vec<_> = probes
        .into_iter()
        .map(|p| tokio::spawn(async move { p.run_once().await }))
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        match t.await {
            Ok(o) => outcomes.push(o),
            Err(e) => {
                eprintln!("error: a probe task failed: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match format {
        OutputFormat::Json => {
            for o in &outcomes {
                println!("{}", printable_json(&o.to_json().to_string()));
            }
        }
        OutputFormat::Table => print_table(&outcomes),
    }
    if outcomes.iter().all(|o| o.observation.success()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_table(outcomes: &[Outcome]) {
    let ms = |d: Option<Duration>| {
        d.map(|d| format!("{:.1}ms", d.as_secs_f64() * 1000.0))
            .unwrap_or_else(|| "-".into())
    };
    let rows: Vec<[String; 10]> = outcomes
        .iter()
        .map(|o| {
            let obs = &o.observation;
            [
                o.probe.name.clone(),
                if obs.success() { "ok".into() } else { "FAIL".into() },
                obs.failure()
                    .map(|f| f.reason.to_string())
                    .unwrap_or_else(|| "-".into()),
                obs.http_status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                ms(obs.ttfb()),
                ms(obs.ttft()),
                ms(obs.tpot()),
                ms(obs.total()),
                obs.output_tokens
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "-".into()),
                obs.finish_reason.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = [
        "PROBE", "RESULT", "REASON", "STATUS", "TTFB", "TTFT", "TPOT", "TOTAL", "TOKENS", "FINISH",
    ];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    println!("{}", line(header.to_vec()));
    for r in &rows {
        println!("{}", line(r.iter().map(String::as_str).collect()));
    }
    for o in outcomes {
        if let Some(f) = o.observation.failure() {
            // Messages are made printable where they are made; this edge holds for
            // any message that did not come through a probe run.
            println!("{}: {}: {}", o.probe.name, f.reason, printable(&f.message));
        } else if let Some(note) = &o.observation.note {
            println!("{}: note: {}", o.probe.name, printable(note));
        }
    }
}

#[derive(clap::Args)]
struct ReportRequest {
    /// Start of the period: a duration ago (7d, 24h) or a time (RFC 3339, Unix seconds).
    #[arg(long, default_value = "7d")]
    since: String,
    /// End of the period (default: now).
    #[arg(long)]
    until: Option<String>,
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
}

async fn report(path: &Path, request: ReportRequest) -> ExitCode {
    let config = if path.exists() {
        match load_or_report(path) {
            Ok(c) => Some(c),
            Err(code) => return code,
        }
    } else {
        eprintln!(
            "note: {} not found: reporting without SLO targets",
            path.display()
        );
        None
    };
    let now = std::time::SystemTime::now();
    let time = |flag: &str, v: &str| {
        inferprobe::human::time_arg(v, now).map_err(|why| format!("{flag} {v:?} {why}"))
    };
    let period = time("--since", &request.since).and_then(|since| {
        let until = match &request.until {
            Some(u) => time("--until", u)?,
            None => now,
        };
        if since >= until {
            return Err("--since must be before --until".to_owned());
        }
        Ok((since, until))
    });
    let (since, until) = match period {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    let targets = report::targets_by_probe(config.as_ref());
    let target_of = move |probe: &str| targets.get(probe).copied().unwrap_or_default();
    let report = match &request.prometheus {
        Some(url) => match report::prometheus::report(url, since, until, target_of).await {
            Ok(r) => r,
            // An unusable URL is a bad flag; a query that failed is a failure.
            Err(e @ report::prometheus::PrometheusError::Url { .. }) => {
                eprintln!("error: --prometheus: {e}");
                return ExitCode::from(EXIT_BAD_CONFIG);
            }
            Err(e) => {
                eprintln!("error: {}", printable(&e.to_string()));
                return ExitCode::FAILURE;
            }
        },
        None => match local_report(request.data_dir, config.as_ref(), since, until, target_of).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let text = match request.format {
        ReportFormat::Markdown => report.to_markdown(),
        ReportFormat::Html => report.to_html(),
        ReportFormat::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&report.to_json()).expect("JSON values serialize")
        ),
    };
    match request.output {
        Some(file) => {
            if let Err(e) = std::fs::write(&file, text) {
                eprintln!("error: cannot write {}: {e}", file.display());
                return ExitCode::FAILURE;
            }
        }
        // The report quotes endpoints' messages, from a history that older versions
        // may have written raw.
        None if matches!(request.format, ReportFormat::Json) => print!("{}", printable_json(&text)),
        None => print!("{}", printable_text(&text)),
    }
    ExitCode::SUCCESS
}

/// The report from one agent's store (`--data-dir`, else agent.data_dir).
async fn local_report(
    data_dir: Option<PathBuf>,
    config: Option<&Config>,
    since: std::time::SystemTime,
    until: std::time::SystemTime,
    target_of: impl Fn(&str) -> inferprobe::stats::Targets + Send + 'static,
) -> Result<Report, String> {
    let dir = data_dir
        .or_else(|| config.and_then(|c| c.agent.data_dir.clone()))
        .unwrap_or_else(|| PathBuf::from("inferprobe-data"));
    let db = dir.join("inferprobe.db");
    if !db.exists() {
        return Err(format!(
            "no store at {} (give the agent's --data-dir)",
            db.display()
        ));
    }
    tokio::task::spawn_blocking(move || {
        let history = inferprobe::store::HistoryReader::open(&db)?;
        let source = format!("the local store {}", db.display());
        Report::from_history(&history, source, since, until, target_of)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()))
}

async fn simulate_cmd(listen: SocketAddr, script: Script) -> ExitCode {
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sim = simulate::start(listener, script);
    println!("simulator listening on http://{}", sim.addr);
    tracing::info!(addr = %sim.addr, "Simulator started: POST /v1/chat/completions, /v1/completions; GET /v1/models, /health, /sim/log.");
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}

/// The demo's probes: healthy, slow and flaky endpoints on the built-in simulator.
const DEMO_CONFIG: &str = include_str!("demo.yaml");

async fn demo(
    listen: SocketAddr,
    sim_listen: SocketAddr,
    data_dir: Option<PathBuf>,
    port: PortArgs,
) -> ExitCode {
    let port = match port.settings() {
        Ok(p) => p,
        Err(code) => return code,
    };
    let scheme = if port.web.current().is_tls() {
        "https"
    } else {
        "http"
    };
    let sim_listener = match TcpListener::bind(sim_listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {sim_listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sim = simulate::start(sim_listener, Script::default());
    let text = DEMO_CONFIG.replace("SIMULATOR", &sim.addr.to_string());
    let config = match config::parse(&text, Path::new("<demo>"), &|_| None) {
        Ok(c) => c,
        Err(errors) => {
            eprintln!("error: the built-in demo config is invalid:\n{errors}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {listen}: {e} (try --listen 127.0.0.1:0)");
            return ExitCode::FAILURE;
        }
    };
    let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let temporary = data_dir.is_none();
    let data_dir = data_dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("inferprobe-demo-{}", std::process::id())));
    let settings = AgentSettings {
        location: "demo".into(),
        data_dir: data_dir.clone(),
        port,
    };
    let agent = match Agent::start(&config, settings, listener) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Whoever reads our output may go away (`demo | head`): that must not stop the demo.
    let say = |text: String| {
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), "{text}");
    };
    say(format!(
        "inferprobe demo: {} probes against the simulator at http://{}",
        config.probes.len(),
        sim.addr
    ));
    say(format!("  status page: {scheme}://{bound}/"));
    say(format!("  metrics:     {scheme}://{bound}/metrics"));
    say(format!(
        "  results:     {scheme}://{bound}/api/v1/probes, {scheme}://{bound}/api/v1/results"
    ));
    say(format!("  alerts:      {scheme}://{bound}/api/v1/alerts"));
    say(format!(
        "  SLO report:  inferprobe report --data-dir {} --since 15m",
        data_dir.display()
    ));
    say(format!(
        "First results arrive within 10 s.{} Press Ctrl-C to stop.",
        if temporary {
            " The history is deleted on exit (keep it with --data-dir)."
        } else {
            ""
        }
    ));
    let mut terminate = signal(SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match terminate.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
    agent.shutdown(Duration::from_secs(5)).await;
    if temporary {
        let _ = std::fs::remove_dir_all(&data_dir);
    }
    ExitCode::SUCCESS
}

/// `test-alert`: one test notification straight to each receiver (not through the
/// outbox: the operator wants the answer now), a few quick tries each.
async fn test_alert(
    path: &Path,
    only: &[String],
    location: Option<String>,
    severity: Severity,
    resolve: bool,
) -> ExitCode {
    let config = match load_or_report(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if config.receivers.is_empty() {
        eprintln!("error: {} has no `receivers:`", path.display());
        return ExitCode::from(EXIT_BAD_CONFIG);
    }
    if let Some(missing) = only
        .iter()
        .find(|n| !config.receivers.iter().any(|r| &r.name == *n))
    {
        eprintln!("error: no receiver named \"{missing}\" in {}", path.display());
        return ExitCode::from(EXIT_BAD_CONFIG);
    }
    let location = location_of(location, &config);
    let now = std::time::SystemTime::now();
    let api_base = config
        .agent
        .external_url
        .clone()
        .unwrap_or_else(|| "http://localhost:9464".into());
    let mut alert = Alert::test(&location, &api_base, severity, now);
    let event = if resolve {
        alert.resolved_at = Some(now);
        alert.summary = format!("RESOLVED: {}", alert.summary);
        Event::Resolved
    } else {
        Event::Firing
    };
    let roots = TlsRoots::system();
    let redactor = SharedRedactor::new(Redactor::for_config(&config));
    let mut all_ok = true;
    for rc in config
        .receivers
        .iter()
        .filter(|r| only.is_empty() || only.contains(&r.name))
    {
        let receiver = match Receiver::build(rc.clone(), &roots, redactor.clone()) {
            Ok(r) => r,
            Err(e) => {
                println!("{:<20} FAILED    {e}", rc.name);
                all_ok = false;
                continue;
            }
        };
        let n = Notification {
            id: format!(
                "{}/test/{}",
                alert.dedup_key,
                humantime::format_rfc3339_millis(now)
            ),
            event,
            alert: alert.clone(),
            receivers: vec![rc.name.clone()],
        };
        let mut result = receiver.send(&n, now).await;
        for attempt in 1..3 {
            let Delivery::Retry { after, .. } = &result else {
                break;
            };
            let wait =
                inferprobe::net::backoff(attempt, Duration::from_secs(2)).max(after.unwrap_or_default());
            tokio::time::sleep(wait.min(Duration::from_secs(5))).await;
            result = receiver.send(&n, std::time::SystemTime::now()).await;
        }
        // A `${VAR}` host is a secret; `why` is cleaned and printable already.
        let target = format!("{} {}", rc.kind.as_str(), redactor.current().clean(&rc.host));
        match result {
            Delivery::Accepted => println!("{:<20} accepted  ({target})", rc.name),
            Delivery::Retry { why, .. } => {
                all_ok = false;
                println!("{:<20} FAILED    ({target}) {why}", rc.name);
            }
            Delivery::Rejected { why } => {
                all_ok = false;
                println!("{:<20} REJECTED  ({target}) {why}", rc.name);
            }
        }
    }
    if !resolve && all_ok {
        println!(
            "Test alert {} sent (severity {}); Alertmanager expires it in 4 minutes, or run `inferprobe test-alert --resolve`.",
            alert.dedup_key,
            severity.as_str()
        );
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
