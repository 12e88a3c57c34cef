//! The per-probe families, written family by family across probes: through
//! prometheus-client's encoders (a [`Collector`], so the text, OpenMetrics and protobuf
//! bytes are the library's own), except TTFT and total in OpenMetrics when a run left a
//! trace id, which carry exemplars the library cannot take beside native buckets and are
//! written here, line for line as the library writes them plus the exemplar; and as
//! remote_write samples, straight from the numbers.

use std::fmt::{self, Write};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, LabelSetEncoder, MetricEncoder, NativeHistogram,
    NativeHistogramBuckets, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::registry::Unit;

use crate::outcome::{ModelIdentity, ProbeIdentity};

use super::histogram::{Classic, SloHistogram};
use super::probe::{Extra, NO_EXTRA, ProbeSeries, State};

/// A family's descriptor; `help` without the final period prometheus-client adds.
pub(super) struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub seconds: bool,
    pub kind: MetricType,
}

const fn family(name: &'static str, help: &'static str, seconds: bool, kind: MetricType) -> Family {
    Family {
        name,
        help,
        seconds,
        kind,
    }
}

/// Every per-probe family, in exposition order.
pub(super) const FAMILIES: [Family; 20] = [
    family(
        "runs",
        "Probe runs by result (success or failure) and failure reason (none on success)",
        false,
        MetricType::Counter,
    ),
    family(
        "skipped_runs",
        "Scheduled runs that did not start because the previous run was still going or the agent fell behind",
        false,
        MetricType::Counter,
    ),
    family(
        "up",
        "Whether the probe's last run succeeded (1) or failed (0)",
        false,
        MetricType::Gauge,
    ),
    family(
        "last_run_timestamp",
        "Unix time the probe's last run started",
        true,
        MetricType::Gauge,
    ),
    family(
        "last_success_timestamp",
        "Unix time the probe's last successful run started",
        true,
        MetricType::Gauge,
    ),
    family(
        "e2e_latency",
        "Successful runs: request start (connection included) to the response fully received (the protocol's terminator)",
        true,
        MetricType::Histogram,
    ),
    family(
        "ttfb",
        "Successful runs: request start to response headers received",
        true,
        MetricType::Histogram,
    ),
    family(
        "ttft",
        "Successful streaming runs: request start to the first event carrying generated output",
        true,
        MetricType::Histogram,
    ),
    family(
        "tpot",
        "Successful streaming runs: (last token - first token) / (output tokens - 1)",
        true,
        MetricType::Histogram,
    ),
    family(
        "chunk_gap",
        "Gaps between consecutive content-bearing stream events (a chunk may hold several tokens; not by prompt bucket)",
        true,
        MetricType::Histogram,
    ),
    family(
        "phase",
        "Phases of successful runs: dns, connect, tls (new connections), ready (a readiness check before the request); not by prompt bucket",
        true,
        MetricType::Histogram,
    ),
    family(
        "output_tokens",
        "Output tokens per successful streaming run (server-reported where available)",
        false,
        MetricType::Histogram,
    ),
    family(
        "server_reported_duration",
        "Durations the server reported about itself (e.g. Ollama's load, prompt_eval, eval, total), by stage; not our measurement",
        true,
        MetricType::Histogram,
    ),
    family(
        "tokens",
        "Tokens of the probe's runs by direction: input (the server's usage where it reports it, else estimated) and output",
        false,
        MetricType::Counter,
    ),
    family(
        "probe_model_info",
        "Which model serves the probe, as the server says (the response's model and system_fingerprint): always 1, one series per probe, replaced when the model changes",
        false,
        MetricType::Gauge,
    ),
    family(
        "held_runs",
        "Scheduled runs held off because the endpoint was kept quiet for another probe's cold run",
        false,
        MetricType::Counter,
    ),
    family(
        "endpoint_restarts",
        "Restarts of the probe's endpoint its runs showed (a loading answer, connections accepted again after refusals, a new model identity, the server loading the model for a request)",
        false,
        MetricType::Counter,
    ),
    family(
        "burst_spread_ratio",
        "Burst probes, the last burst: standard deviation over mean of its requests' times to first token (total time for kinds without tokens)",
        false,
        MetricType::Gauge,
    ),
    family(
        "burst_max_over_min_ratio",
        "Burst probes, the last burst: its slowest request's time over its fastest's",
        false,
        MetricType::Gauge,
    ),
    family(
        "burst_slowdown_ratio",
        "Burst probes, the last burst: its requests' mean time over the time of the request sent alone just before it",
        false,
        MetricType::Gauge,
    ),
];

pub(super) const E2E: usize = 5;
pub(super) const TTFT: usize = 7;

/// One series' value.
pub(super) enum Value<'a> {
    Counter(u64),
    Int(i64),
    Float(f64),
    Classic(&'a Classic),
    Slo(&'a SloHistogram),
    /// The probe's model info series: 1, its labels the identity's.
    Info(&'a ModelIdentity),
}

impl<'a> Value<'a> {
    /// The served model's labels, on the info series only.
    fn info(&self) -> Option<&'a ModelIdentity> {
        match self {
            Value::Info(m) => Some(m),
            _ => None,
        }
    }
}

fn one(name: &'static str, value: &'static str) -> Extra {
    let mut e = NO_EXTRA;
    e[0] = (name, value);
    e
}

/// Calls `f` with every series of family `family` in one probe's state.
pub(super) fn each_series(
    family: usize,
    s: &State,
    f: &mut dyn FnMut(&Extra, Value<'_>) -> fmt::Result,
) -> fmt::Result {
    let full = s.full.as_deref();
    let classic = |h: Option<&Classic>, f: &mut dyn FnMut(&Extra, Value<'_>) -> fmt::Result| match h {
        Some(h) => f(&NO_EXTRA, Value::Classic(h)),
        None => Ok(()),
    };
    match family {
        0 => s
            .runs
            .iter()
            .try_for_each(|(k, n)| f(&k.labels(), Value::Counter(*n))),
        1 => s.skipped.map_or(Ok(()), |n| f(&NO_EXTRA, Value::Counter(n))),
        2 => s.up.map_or(Ok(()), |v| f(&NO_EXTRA, Value::Int(v))),
        3 => s.last_run.map_or(Ok(()), |v| f(&NO_EXTRA, Value::Float(v))),
        4 => s.last_success.map_or(Ok(()), |v| f(&NO_EXTRA, Value::Float(v))),
        E2E => {
            s.e2e.as_deref().map_or(Ok(()), |h| f(&NO_EXTRA, Value::Slo(h)))?;
            s.e2e_cold
                .as_deref()
                .map_or(Ok(()), |h| f(&one("start", "cold"), Value::Slo(h)))
        }
        6 => classic(full.and_then(|x| x.ttfb.as_ref()), f),
        TTFT => s.ttft.iter().try_for_each(|(b, h)| f(&b.labels(), Value::Slo(h))),
        8 => classic(full.and_then(|x| x.tpot.as_ref()), f),
        9 => classic(full.and_then(|x| x.chunk_gap.as_ref()), f),
        10 => full.map_or(Ok(()), |x| {
            x.phase
                .iter()
                .try_for_each(|(p, h)| f(&one("phase", p), Value::Classic(h)))
        }),
        11 => classic(full.and_then(|x| x.output_tokens.as_ref()), f),
        12 => full.map_or(Ok(()), |x| {
            x.server_reported
                .iter()
                .try_for_each(|(p, h)| f(&one("stage", p), Value::Classic(h)))
        }),
        13 => s.tokens.map_or(Ok(()), |[input, output]| {
            f(&one("direction", "input"), Value::Counter(input))?;
            f(&one("direction", "output"), Value::Counter(output))
        }),
        14 => s
            .model
            .as_deref()
            .map_or(Ok(()), |m| f(&NO_EXTRA, Value::Info(m))),
        15 => s.held.map_or(Ok(()), |n| f(&NO_EXTRA, Value::Counter(n))),
        16 => s.restarts.map_or(Ok(()), |n| f(&NO_EXTRA, Value::Counter(n))),
        17..=19 => match s.burst.as_deref().and_then(|b| b[family - 17]) {
            Some(v) => f(&NO_EXTRA, Value::Float(v)),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

fn has_series(family: usize, s: &State) -> bool {
    each_series(family, s, &mut |_, _| Err(fmt::Error)).is_err()
}

/// A series' labels: the probe's own (shared), then the per-series ones.
pub(super) struct SeriesLabels<'a> {
    pub probe: &'a ProbeIdentity,
    pub extra: &'a Extra,
    /// The info series' served model and fingerprint (cleaned and capped where read).
    pub info: Option<&'a ModelIdentity>,
}

impl SeriesLabels<'_> {
    /// `(name, value)` in exposition order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        let p = self.probe;
        [
            ("probe", &*p.name),
            ("kind", p.kind),
            ("model", p.model.as_str()),
            ("location", &*p.location),
        ]
        .into_iter()
        .chain(p.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .chain(
            self.extra
                .iter()
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (*k, *v)),
        )
        .chain(self.info.into_iter().flat_map(|m| {
            [
                ("served_model", m.served_model.as_str()),
                ("fingerprint", m.fingerprint.as_str()),
            ]
        }))
    }
}

impl EncodeLabelSet for SeriesLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        for pair in self.pairs() {
            pair.encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

fn encode_value(e: &mut MetricEncoder, value: Value<'_>) -> fmt::Result {
    match value {
        Value::Counter(n) => e.encode_counter::<NoLabelSet, u64, u64>(&n, None::<&Exemplar<NoLabelSet, u64>>),
        Value::Int(v) => e.encode_gauge(&v),
        Value::Float(v) => e.encode_gauge(&v),
        Value::Info(_) => e.encode_gauge(&1i64),
        Value::Classic(h) => e.encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets(), None),
        Value::Slo(h) => {
            let native = h.native.snapshot();
            e.encode_histogram_with_native::<NoLabelSet>(
                h.classic.sum,
                h.classic.count,
                &h.classic.buckets(),
                None,
                NativeHistogram {
                    schema: native.schema,
                    zero_threshold: native.zero_threshold,
                    zero_count: native.zero_count,
                    negative: NativeHistogramBuckets {
                        spans: &[],
                        deltas: &[],
                    },
                    positive: NativeHistogramBuckets {
                        spans: &native.spans,
                        deltas: &native.deltas,
                    },
                    created: Some(h.native.created),
                },
            )
        }
    }
}

/// Some per-probe families of some probes, for prometheus-client's encoders; made for
/// one encoding (a scrape holds the probes it started with).
#[derive(Debug)]
pub(super) struct ProbeFamilies {
    pub probes: Arc<[Arc<ProbeSeries>]>,
    pub families: std::ops::Range<usize>,
}

impl Collector for ProbeFamilies {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        for family in self.families.clone() {
            // An empty family has no descriptor either, as with prometheus-client's own.
            if !self.probes.iter().any(|p| has_series(family, &p.state())) {
                continue;
            }
            let d = &FAMILIES[family];
            let help = format!("{}.", d.help);
            let unit = d.seconds.then_some(&Unit::Seconds);
            let mut metrics = encoder.encode_descriptor(d.name, &help, unit, d.kind)?;
            for p in self.probes.iter() {
                let state = p.state();
                each_series(family, &state, &mut |extra, value| {
                    let labels = SeriesLabels {
                        probe: &p.identity,
                        extra,
                        info: value.info(),
                    };
                    let mut e = metrics.encode_family(&labels)?;
                    encode_value(&mut e, value)
                })?;
            }
        }
        Ok(())
    }
}

/// Whether any probe's TTFT or total in `family` carries an exemplar.
pub(super) fn has_exemplars(probes: &[Arc<ProbeSeries>], family: usize) -> bool {
    probes.iter().any(|p| {
        each_series(family, &p.state(), &mut |_, v| match v {
            Value::Slo(h) if h.has_exemplars() => Err(fmt::Error),
            _ => Ok(()),
        })
        .is_err()
    })
}

/// TTFT or total (`family`) in OpenMetrics with exemplars: prometheus-client's lines,
/// and after a bucket's count the last trace id that fell in it.
pub(super) fn write_openmetrics_slo<W: Write>(
    out: &mut W,
    probes: &[Arc<ProbeSeries>],
    family: usize,
) -> fmt::Result {
    let d = &FAMILIES[family];
    let name = format!("inferprobe_{}_seconds", d.name);
    write!(
        out,
        "# HELP {name} {}.\n# TYPE {name} histogram\n# UNIT {name} seconds\n",
        d.help
    )?;
    let mut line = String::new();
    for p in probes {
        let state = p.state();
        each_series(family, &state, &mut |extra, value| {
            let Value::Slo(h) = value else { return Ok(()) };
            let labels = SeriesLabels {
                probe: &p.identity,
                extra,
                info: None,
            };
            let mut label_text = String::new();
            for (i, (k, v)) in labels.pairs().enumerate() {
                if i > 0 {
                    label_text.push(',');
                }
                write!(label_text, "{k}=\"")?;
                escape(&mut label_text, v);
                label_text.push('"');
            }
            let mut float = dtoa::Buffer::new();
            line.clear();
            writeln!(line, "{name}_sum{{{label_text}}} {}", float.format(h.classic.sum))?;
            writeln!(line, "{name}_count{{{label_text}}} {}", h.classic.count)?;
            let mut cumulative = 0;
            for (i, (bound, n)) in h.classic.buckets().into_iter().enumerate() {
                cumulative += n;
                let le = if bound == f64::INFINITY {
                    "+Inf".to_owned()
                } else {
                    float.format(bound).to_owned()
                };
                write!(line, "{name}_bucket{{le=\"{le}\",{label_text}}} {cumulative}")?;
                if let Some(x) = h.exemplar(i) {
                    line.push_str(" # {trace_id=\"");
                    for byte in x.trace_id {
                        write!(line, "{byte:02x}")?;
                    }
                    write!(
                        line,
                        "\"}} {} {}",
                        float.format(x.value),
                        dtoa::Buffer::new().format(x.at)
                    )?;
                }
                line.push('\n');
            }
            out.write_str(&line)
        })?;
    }
    Ok(())
}

/// OpenMetrics label value escaping, as prometheus-client does it.
fn escape(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Every per-probe sample as remote_write sends it: `(labels with __name__ first, value)`,
/// the names and `le` values as the text format has them.
pub(super) fn each_sample(probes: &[Arc<ProbeSeries>], f: &mut dyn FnMut(Vec<(String, String)>, f64)) {
    for (family, d) in FAMILIES.iter().enumerate() {
        let base = format!("inferprobe_{}{}", d.name, if d.seconds { "_seconds" } else { "" });
        for p in probes {
            let state = p.state();
            let _ = each_series(family, &state, &mut |extra, value| {
                let labels = SeriesLabels {
                    probe: &p.identity,
                    extra,
                    info: value.info(),
                };
                let with = |name: String, le: Option<String>| {
                    let mut l = vec![("__name__".to_owned(), name)];
                    l.extend(labels.pairs().map(|(k, v)| (k.to_owned(), v.to_owned())));
                    if let Some(le) = le {
                        l.push(("le".to_owned(), le));
                    }
                    l
                };
                let classic = match value {
                    Value::Counter(n) => {
                        f(with(format!("{base}_total"), None), n as f64);
                        return Ok(());
                    }
                    Value::Int(v) => {
                        f(with(base.clone(), None), v as f64);
                        return Ok(());
                    }
                    Value::Float(v) => {
                        f(with(base.clone(), None), v);
                        return Ok(());
                    }
                    Value::Info(_) => {
                        f(with(base.clone(), None), 1.0);
                        return Ok(());
                    }
                    Value::Classic(h) => h,
                    Value::Slo(h) => &h.classic,
                };
                f(with(format!("{base}_sum"), None), classic.sum);
                f(with(format!("{base}_count"), None), classic.count as f64);
                let mut cumulative = 0;
                for (bound, n) in classic.buckets() {
                    cumulative += n;
                    f(
                        with(format!("{base}_bucket"), Some(go_float(bound))),
                        cumulative as f64,
                    );
                }
                Ok(())
            });
        }
    }
}

/// A bucket bound as the text format 0.0.4 writes `le` (client_golang's
/// `strconv.FormatFloat(v, 'g', -1, 64)`): whole numbers below 1e6 without a decimal
/// point, `+Inf`, else the shortest decimal that reads back as `v`.
pub(super) fn go_float(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".to_owned()
    } else if v.fract() == 0.0 && v.abs() < 1e6 {
        format!("{}", v as i64)
    } else if (1e-4..1e21).contains(&v.abs()) {
        format!("{v}")
    } else {
        // Go's exponent form: at least two exponent digits, with a sign.
        let e = format!("{v:e}");
        let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}
