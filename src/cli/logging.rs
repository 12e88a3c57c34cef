//! Logging: the tracing subscriber every subcommand logs through, text (fields made
//! printable) or JSON, on stderr, with the loaded config's secrets removed from every
//! line. The daemon's lines go through [`output::STDERR`], which never lets a reader
//! that stopped block the agent.

use std::fmt::Write as _;

use clap::ValueEnum;

use inferprobe::config::Config;
use inferprobe::human::{is_printable, printable};
use inferprobe::output;
use inferprobe::redact::Redactor;

/// `--log-format`.
#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(LineWriter);
    match format {
        LogFormat::Text => builder.fmt_fields(PrintableFields).init(),
        // serde escapes control characters in JSON strings.
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Colours only for a person at a terminal (a journal or a file gets plain text), and
/// never when `NO_COLOR` is set to anything but the empty string (https://no-color.org).
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
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
        let sep = if std::mem::take(&mut self.first) { "" } else { " " };
        self.result = if field.name() == "message" {
            self.writer.write_str(sep)
        } else {
            write!(self.writer, "{sep}{}=", field.name())
        }
        .and_then(|()| write!(Printable(&mut self.writer), "{value:?}"));
    }
}

/// Writes through what it is given made printable (as [`printable`]; it treats each
/// character on its own, so piece by piece is the same as whole), without building
/// each value as a string first: there is a log line per run.
struct Printable<'a, W>(&'a mut W);

impl<W: std::fmt::Write> std::fmt::Write for Printable<'_, W> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if is_printable(s) {
            self.0.write_str(s)
        } else {
            self.0.write_str(&printable(s))
        }
    }
}

/// The secrets of the config last loaded, removed from every log line: our fields are
/// cleaned where server words enter, but a dependency's debug line (the HTTP client
/// naming the host it connects to) may show a `${VAR}` host too. Process-wide because
/// the log subscriber it serves is.
static LOG_SECRETS: std::sync::RwLock<Option<std::sync::Arc<Redactor>>> = std::sync::RwLock::new(None);

pub fn set_log_secrets(config: &Config) {
    if let Ok(mut s) = LOG_SECRETS.write() {
        *s = Some(std::sync::Arc::new(Redactor::for_config(config)));
    }
}

/// Makes one [`RedactingStderr`] per event; warnings and errors are marked urgent.
struct LineWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LineWriter {
    type Writer = RedactingStderr;

    fn make_writer(&'a self) -> RedactingStderr {
        RedactingStderr::new(true)
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> RedactingStderr {
        RedactingStderr::new(*meta.level() <= tracing::Level::WARN)
    }
}

/// One log line, handed to [`output::STDERR`] redacted when it is complete (tracing
/// writes each event through a fresh writer and drops it).
struct RedactingStderr {
    line: Vec<u8>,
    urgent: bool,
}

impl RedactingStderr {
    fn new(urgent: bool) -> Self {
        // A run's line is ~200 bytes: one allocation, not six doublings.
        RedactingStderr {
            line: Vec::with_capacity(256),
            urgent,
        }
    }
}

impl std::io::Write for RedactingStderr {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactingStderr {
    fn drop(&mut self) {
        let secrets = LOG_SECRETS
            .read()
            .ok()
            .and_then(|s| s.clone())
            .filter(|r| !r.is_empty());
        let text = String::from_utf8_lossy(&self.line);
        let text = match &secrets {
            Some(r) => std::borrow::Cow::Owned(r.clean(&text)),
            None => text,
        };
        output::STDERR.write(text.as_bytes(), self.urgent);
    }
}

#[cfg(test)]
mod tests {
    use super::colour;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(colour(true, None));
        assert!(!colour(false, None));
        assert!(!colour(true, Some("1".into())));
        assert!(colour(true, Some("".into())), "an empty NO_COLOR is unset");
    }
}
