//! Writing the registry out in the three exposition formats.
//!
//! The two text formats are written piece by piece into any [`std::fmt::Write`], so the
//! server can stream a scrape in bounded chunks instead of holding it whole (at 10,000
//! probes a scrape is ~17 MB of text). While a family is being written its series are
//! read-locked (prometheus-client's `Family`), so a writer that may wait must bound how
//! long: the server's does. The one-piece renderings (`render_*`) are the same bytes, for
//! tests, remote_write and the protobuf format, which prometheus-client only builds whole.

use std::fmt::Write;

use prometheus_client::encoding::{prometheus_protobuf, prometheus_text, text};

use super::Metrics;

/// The text formats `/metrics` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// The Prometheus text format 0.0.4, for everything that does not ask for more (curl,
    /// promtool).
    Prometheus,
    /// OpenMetrics 1.0, for scrapers that ask for it (Prometheus does); ends with `# EOF`.
    OpenMetrics,
}

impl Metrics {
    /// Writes every series in `format` into `out`, a few KiB at a time. An error from
    /// `out` stops the encoding at once (the families' locks are released) and is
    /// returned; the encoders themselves cannot fail.
    pub fn write_text<W: Write>(&self, format: TextFormat, out: &mut W) -> std::fmt::Result {
        match format {
            TextFormat::Prometheus => prometheus_text::encode(out, &self.registry),
            TextFormat::OpenMetrics => text::encode(out, &self.registry),
        }
    }

    /// OpenMetrics text in one `String`.
    pub fn render_openmetrics(&self) -> String {
        self.render(TextFormat::OpenMetrics)
    }

    /// The Prometheus text format 0.0.4 in one `String`.
    pub fn render_text(&self) -> String {
        self.render(TextFormat::Prometheus)
    }

    fn render(&self, format: TextFormat) -> String {
        let mut out = String::new();
        self.write_text(format, &mut out)
            .expect("writing to a String cannot fail");
        out
    }

    /// Prometheus's protobuf format (length-delimited `io.prometheus.client.MetricFamily`
    /// messages), for scrapers that negotiate it: the same series, labels and detail as
    /// the text formats (one registry), with TTFT and total as native histograms beside
    /// their classic buckets, as client_golang sends them. Built whole: prometheus-client
    /// collects every `MetricFamily` before encoding any.
    pub fn render_protobuf(&self) -> Result<Vec<u8>, EncodeError> {
        Ok(prometheus_protobuf::encode_to_vec(&self.registry)?)
    }
}

/// The protobuf exposition could not be built: a histogram created before 1970 by a
/// clock set wrong, or a count past i64 (the text formats have no such limits).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the metrics as protobuf: {0}")]
pub struct EncodeError(#[from] prometheus_protobuf::EncodeError);
