//! Writing the metrics out in the three exposition formats, family by family.
//!
//! The two text formats are written piece by piece into any [`std::fmt::Write`], so the
//! server can stream a scrape in bounded chunks instead of holding it whole (at 10,000
//! probes a scrape is ~17 MB of text); protobuf goes out one `MetricFamily` at a time, so
//! an encoding holds one family's messages, never all of them. The probes' series are
//! taken as they are when the encoding starts (a probe added meanwhile is in the next
//! scrape), and each probe's are locked only while its lines of one family are written;
//! the agent's own series are prometheus-client's registry, read-locked per family. A
//! writer that may wait must bound how long: the server's does. The one-piece renderings
//! (`render_*`) are the same bytes, for tests.

use std::fmt::Write;

use prometheus_client::encoding::{prometheus_protobuf, prometheus_text, text};
use prometheus_client::registry::Registry;

use super::Metrics;
use super::families::{E2E, FAMILIES, ProbeFamilies, TTFT, has_exemplars, write_openmetrics_slo};

/// The text formats `/metrics` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// The Prometheus text format 0.0.4, for everything that does not ask for more (curl,
    /// promtool).
    Prometheus,
    /// OpenMetrics 1.0, for scrapers that ask for it (Prometheus does); ends with `# EOF`.
    OpenMetrics,
}

/// Probes per protobuf `MetricFamily` message: what one message holds while it is built.
const PROTOBUF_GROUP: usize = 500;

/// A registry of some per-probe families, for one encoding.
fn probe_registry(
    probes: &std::sync::Arc<[std::sync::Arc<super::ProbeSeries>]>,
    families: std::ops::Range<usize>,
) -> Registry {
    let mut registry = Registry::with_prefix("inferprobe");
    registry.register_collector(Box::new(ProbeFamilies {
        probes: probes.clone(),
        families,
    }));
    registry
}

impl Metrics {
    /// Writes every series in `format` into `out`, a few KiB at a time. An error from
    /// `out` stops the encoding at once (the locks are released) and is returned; the
    /// encoders themselves cannot fail.
    pub fn write_text<W: Write>(&self, format: TextFormat, out: &mut W) -> std::fmt::Result {
        let probes = self.probe_list();
        match format {
            TextFormat::Prometheus => {
                prometheus_text::encode(out, &probe_registry(&probes, 0..FAMILIES.len()))?;
                prometheus_text::encode(out, &self.registry)
            }
            TextFormat::OpenMetrics => {
                // TTFT and total with exemplars are written here (the library takes no
                // exemplars beside native buckets); the rest by the library.
                let mut from = 0;
                for family in [E2E, TTFT] {
                    if has_exemplars(&probes, family) {
                        text::encode_registry(out, &probe_registry(&probes, from..family))?;
                        write_openmetrics_slo(out, &probes, family)?;
                        from = family + 1;
                    }
                }
                text::encode_registry(out, &probe_registry(&probes, from..FAMILIES.len()))?;
                text::encode_registry(out, &self.registry)?;
                text::encode_eof(out)
            }
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
    /// the text formats, with TTFT and total as native histograms beside their classic
    /// buckets, as client_golang sends them. Each family is built and handed to `out`
    /// before the next is built; an error from `out` stops the encoding.
    pub fn write_protobuf(
        &self,
        out: &mut dyn FnMut(Vec<u8>) -> std::fmt::Result,
    ) -> Result<(), EncodeError> {
        let probes = self.probe_list();
        for family in 0..FAMILIES.len() {
            // A family of 10,000 probes built whole is ~25 MB of messages: it goes out in
            // messages of PROTOBUF_GROUP probes each (a family may span several
            // messages: Prometheus reads each message's series as they come).
            for group in probes.chunks(PROTOBUF_GROUP) {
                let body =
                    prometheus_protobuf::encode_to_vec(&probe_registry(&group.into(), family..family + 1))?;
                if !body.is_empty() {
                    out(body).map_err(|_| EncodeError::Stopped)?;
                }
            }
        }
        out(prometheus_protobuf::encode_to_vec(&self.registry)?).map_err(|_| EncodeError::Stopped)
    }

    /// The protobuf format in one piece, for tests.
    pub fn render_protobuf(&self) -> Result<Vec<u8>, EncodeError> {
        let mut all = Vec::new();
        self.write_protobuf(&mut |piece| {
            all.extend_from_slice(&piece);
            Ok(())
        })?;
        Ok(all)
    }
}

/// The protobuf exposition could not be built: a histogram created before 1970 by a
/// clock set wrong, or a count past i64 (the text formats have no such limits); or the
/// writer stopped it (the scraper went away).
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("cannot encode the metrics as protobuf: {0}")]
    Protobuf(#[from] prometheus_protobuf::EncodeError),
    #[error("the protobuf encoding was stopped by its writer")]
    Stopped,
    /// Our own encoding did not read back (a bug, not the data).
    #[error("cannot read back the agent's own series: {0}")]
    Decode(prost::DecodeError),
}

impl Metrics {
    /// Every sample as the text format 0.0.4 has it, `(labels with __name__ first,
    /// value)`, for remote_write: the probes' straight from their numbers, the agent's
    /// from its registry's families (a few dozen series), without text in between.
    pub fn each_sample(&self, f: &mut dyn FnMut(Vec<(String, String)>, f64)) -> Result<(), EncodeError> {
        let probes = self.probe_list();
        super::families::each_sample(&probes, f);
        let body = prometheus_protobuf::encode_to_vec(&self.registry)?;
        let mut rest = body.as_slice();
        while !rest.is_empty() {
            let family: prometheus_protobuf::prometheus_data_model::MetricFamily =
                prost::Message::decode_length_delimited(&mut rest).map_err(EncodeError::Decode)?;
            agent_samples(&family, f);
        }
        Ok(())
    }
}

/// One agent family's samples, named as the text format names them.
fn agent_samples(
    family: &prometheus_protobuf::prometheus_data_model::MetricFamily,
    f: &mut dyn FnMut(Vec<(String, String)>, f64),
) {
    for metric in &family.metric {
        let with = |name: String, le: Option<String>| {
            let mut l = vec![("__name__".to_owned(), name)];
            l.extend(metric.label.iter().map(|p| (p.name.clone(), p.value.clone())));
            if let Some(le) = le {
                l.push(("le".to_owned(), le));
            }
            l
        };
        let name = &family.name;
        if let Some(c) = &metric.counter {
            f(with(name.clone(), None), c.value);
        } else if let Some(g) = &metric.gauge {
            f(with(name.clone(), None), g.value);
        } else if let Some(h) = &metric.histogram {
            // The text format's order: buckets, then sum and count.
            for b in &h.bucket {
                let le = super::families::go_float(b.upper_bound);
                f(
                    with(format!("{name}_bucket"), Some(le)),
                    b.cumulative_count as f64,
                );
            }
            f(with(format!("{name}_sum"), None), h.sample_sum);
            f(with(format!("{name}_count"), None), h.sample_count as f64);
        }
    }
}
