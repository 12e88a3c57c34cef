//! The subcommands other than `run`, one module each, and what every subcommand shares:
//! the exit code for a bad config, the defaults for the port and the data directory,
//! binding a port, loading the config, and logging (logging.rs). May import the library,
//! and from main.rs the command line's types; the library never sees this.

/// `println!` for a command's answers: a reader that went away (`check | head`) ends
/// the command quietly, as a closed pipe ends any Unix tool, rather than in a panic.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` as [`outln!`] does it.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!($($arg)*))
    };
}

pub mod check;
pub mod demo;
pub mod logging;
pub mod once;
pub mod report;
pub mod schema;
pub mod simulate;
pub mod test_alert;

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use tokio::net::TcpListener;

use inferprobe::config::{self, Config, ConfigError, ConfigErrors};

/// Writes a command's answer to stdout. A closed pipe ends the process with success:
/// the reader has what it wanted (`| head`, `| grep -q`); any other failure to write is
/// said on stderr and ends it with failure.
pub fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("error: cannot write to standard output: {e}");
            std::process::exit(1);
        }
    }
}

/// Exit code for a bad config or flag (EX_USAGE).
pub const EXIT_BAD_CONFIG: u8 = 64;

pub use inferprobe::server::DEFAULT_PORT;

/// Where the agent keeps its state when neither `--data-dir` nor agent.data_dir says.
pub const DEFAULT_DATA_DIR: &str = "inferprobe-data";

/// A listener on `addr`, or the error printed and the exit code to return. `hint` ends
/// the message (empty, or a space and a suggestion in parentheses).
pub async fn bind_or_exit(addr: SocketAddr, hint: &str) -> Result<TcpListener, ExitCode> {
    TcpListener::bind(addr).await.map_err(|e| {
        inferprobe::output::STDERR.say(&format!("error: cannot listen on {addr}: {e}{hint}"));
        ExitCode::FAILURE
    })
}

/// The config, its secrets handed to the log and its warnings logged; or every problem
/// printed and exit 64.
pub fn load_or_report(path: &Path) -> Result<Config, ExitCode> {
    let config = config::load(path).map_err(|errors| refused(&errors))?;
    logging::set_log_secrets(&config);
    log_warnings(&config.warnings);
    Ok(config)
}

/// Every problem of a config that did not load, printed; the exit code to return.
pub fn refused(errors: &ConfigErrors) -> ExitCode {
    for e in &errors.0 {
        eprintln!("{e}");
    }
    ExitCode::from(EXIT_BAD_CONFIG)
}

/// Risky settings, on every load: they must not be forgotten once the file works.
pub fn log_warnings(warnings: &[ConfigError]) {
    for w in warnings {
        tracing::warn!(warning = %w, "Config warning.");
    }
}

/// For one-off commands: the location if set, else "local".
pub fn location_of(flag: Option<String>, config: &Config) -> String {
    flag.or_else(|| config.agent.location.clone())
        .unwrap_or_else(|| "local".to_owned())
}
