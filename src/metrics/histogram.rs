//! The histograms of a probe's series, held as plain numbers inside the probe's own
//! state (no lock or allocation of their own): classic buckets for every format, and
//! for TTFT and total a native histogram (sent on protobuf scrapes) and the last trace
//! id per bucket (OpenMetrics exemplars).
//!
//! The native buckets follow Prometheus's native histogram layout (client_golang's):
//! bucket `k` at schema `s` holds (2^((k-1)/2^s), 2^(k/2^s)]; past the bucket limit the
//! zero bucket widens first (up to a bound), then the schema drops by one, merging pairs.

use std::time::{SystemTime, UNIX_EPOCH};

/// One classic histogram: per-bucket (not cumulative) counts, `+Inf` last.
#[derive(Debug, Clone)]
pub(super) struct Classic {
    bounds: &'static [f64],
    /// One per bound, then `+Inf`.
    counts: Box<[u64]>,
    pub sum: f64,
    pub count: u64,
}

impl Classic {
    pub fn new(bounds: &'static [f64]) -> Self {
        Classic {
            bounds,
            counts: vec![0; bounds.len() + 1].into_boxed_slice(),
            sum: 0.0,
            count: 0,
        }
    }

    /// Counts `v`; returns the index of its bucket (`le` semantics: the first bound ≥ v).
    pub fn observe(&mut self, v: f64) -> usize {
        self.sum += v;
        self.count += 1;
        let i = self
            .bounds
            .iter()
            .position(|b| *b >= v)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        i
    }

    /// `(upper bound, count in that bucket)`, `+Inf` last: what prometheus-client's
    /// encoders take.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().copied())
            .collect()
    }
}

/// The configuration of TTFT's and total's native histograms (see `slo_native` in
/// metrics.rs for why these values).
#[derive(Debug, Clone, Copy)]
pub(super) struct NativeConfig {
    pub schema: i8,
    pub max_buckets: usize,
    pub max_zero_threshold: f64,
}

/// Prometheus's default zero bucket width, 2^-128.
const DEFAULT_ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;
const SCHEMA_MIN: i8 = -4;

/// Bucket bounds of the mantissa in [0.5, 1) at schema 3 (client_golang's table);
/// schemas 2 and 1 take every second and fourth of them.
const SCHEMA3_BOUNDS: [f64; 8] = [
    0.5,
    0.545_253_866_332_628_8,
    0.594_603_557_501_360_5,
    0.648_419_777_325_504_8,
    0.707_106_781_186_547_5,
    0.771_105_412_703_970_4,
    0.840_896_415_253_714_4,
    0.917_004_043_204_671_1,
];

/// A native histogram of non-negative values (durations).
#[derive(Debug, Clone)]
pub(super) struct Native {
    config: NativeConfig,
    schema: i8,
    zero_threshold: f64,
    zero_count: u64,
    /// (bucket key, count), sorted by key.
    buckets: Vec<(i32, u64)>,
    pub created: SystemTime,
}

/// A native histogram's buckets as the protobuf format has them.
pub(super) struct NativeSnapshot {
    pub schema: i32,
    pub zero_threshold: f64,
    pub zero_count: u64,
    pub spans: Vec<(i32, u32)>,
    pub deltas: Vec<i64>,
}

impl Native {
    pub fn new(config: NativeConfig) -> Self {
        Native {
            config,
            schema: config.schema,
            zero_threshold: DEFAULT_ZERO_THRESHOLD,
            zero_count: 0,
            buckets: Vec::new(),
            created: SystemTime::now(),
        }
    }

    pub fn observe(&mut self, v: f64) {
        if v.is_nan() {
            return;
        }
        let v = v.abs();
        if v <= self.zero_threshold {
            self.zero_count += 1;
        } else {
            let key = bucket_key(self.schema, v);
            match self.buckets.binary_search_by_key(&key, |(k, _)| *k) {
                Ok(i) => self.buckets[i].1 += 1,
                Err(i) => {
                    // A probe's latency keeps to a few buckets: room for one more, not
                    // twice as many (a doubled list held ~50 bytes unused per histogram).
                    self.buckets.reserve_exact(1);
                    self.buckets.insert(i, (key, 1));
                }
            }
        }
        self.enforce_limit();
    }

    fn enforce_limit(&mut self) {
        if self.config.max_buckets == 0 || self.buckets.len() <= self.config.max_buckets {
            return;
        }
        if self.widen_zero_bucket() {
            return;
        }
        if self.schema > SCHEMA_MIN {
            self.schema -= 1;
            let mut merged: Vec<(i32, u64)> = Vec::with_capacity(self.buckets.len());
            for &(key, n) in &self.buckets {
                // Keys 2k-1 and 2k become k: ceil(key / 2).
                let key = (key + 1).div_euclid(2);
                match merged.last_mut() {
                    Some((last, count)) if *last == key => *count += n,
                    _ => merged.push((key, n)),
                }
            }
            self.buckets = merged;
        }
    }

    /// Moves the lowest bucket into the zero bucket if its upper bound is within the
    /// configured maximum threshold.
    fn widen_zero_bucket(&mut self) -> bool {
        let Some(&(lowest, _)) = self.buckets.first() else {
            return false;
        };
        let threshold = upper_bound(self.schema, lowest);
        if threshold <= self.zero_threshold || threshold > self.config.max_zero_threshold {
            return false;
        }
        let split = self
            .buckets
            .iter()
            .take_while(|(k, _)| upper_bound(self.schema, *k) <= threshold)
            .count();
        let moved: u64 = self.buckets.drain(..split).map(|(_, n)| n).sum();
        if moved == 0 {
            return false;
        }
        self.zero_count += moved;
        self.zero_threshold = threshold;
        true
    }

    /// Spans and deltas as Prometheus encodes them: a new span after a gap of more than
    /// two empty buckets, shorter gaps filled with zero counts.
    pub fn snapshot(&self) -> NativeSnapshot {
        let mut spans: Vec<(i32, u32)> = Vec::new();
        let mut deltas = Vec::with_capacity(self.buckets.len());
        let mut previous = 0_i64;
        let mut next_key = 0_i32;
        let mut push = |count: i64, spans: &mut Vec<(i32, u32)>, deltas: &mut Vec<i64>| {
            if let Some((_, len)) = spans.last_mut() {
                *len += 1;
            }
            deltas.push(count - previous);
            previous = count;
        };
        for (n, &(key, count)) in self.buckets.iter().enumerate() {
            let gap = key - next_key;
            if n == 0 || gap > 2 {
                spans.push((gap, 0));
            } else {
                for _ in 0..gap {
                    push(0, &mut spans, &mut deltas);
                }
            }
            push(i64::try_from(count).unwrap_or(i64::MAX), &mut spans, &mut deltas);
            next_key = key + 1;
        }
        // An empty native histogram with a zero-width zero bucket would look classic.
        if spans.is_empty() && self.zero_count == 0 && self.zero_threshold == 0.0 {
            spans.push((0, 0));
        }
        NativeSnapshot {
            schema: i32::from(self.schema),
            zero_threshold: self.zero_threshold,
            zero_count: self.zero_count,
            spans,
            deltas,
        }
    }
}

/// The mantissa in [0.5, 1) and exponent of a positive finite `v` (C's frexp).
fn frexp(v: f64) -> (f64, i32) {
    let bits = v.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    if exponent == 0 {
        // Subnormal: normalize first.
        let (f, e) = frexp(v * 2f64.powi(64));
        return (f, e - 64);
    }
    let frac = f64::from_bits((bits & !(0x7ff_u64 << 52)) | (1022_u64 << 52));
    (frac, exponent - 1022)
}

fn bucket_key(schema: i8, v: f64) -> i32 {
    let v = if v.is_infinite() { f64::MAX } else { v };
    let (frac, exp) = frexp(v);
    let key = if schema > 0 {
        let step = 1 << (3 - schema);
        let below = SCHEMA3_BOUNDS
            .iter()
            .step_by(step)
            .take_while(|b| **b < frac)
            .count() as i32;
        below + (exp - 1) * (1 << schema)
    } else {
        let mut key = exp;
        if frac == 0.5 {
            key -= 1;
        }
        let shift = -i32::from(schema);
        (key + (1 << shift) - 1) >> shift
    };
    if v == f64::MAX { key + 1 } else { key }
}

fn upper_bound(schema: i8, key: i32) -> f64 {
    if schema <= 0 {
        return 2f64.powi(key << -i32::from(schema));
    }
    let per_octave = 1 << schema;
    let step = 1 << (3 - schema);
    let frac = SCHEMA3_BOUNDS[(key.rem_euclid(per_octave) * step) as usize];
    frac * 2f64.powi(key.div_euclid(per_octave) + 1)
}

/// TTFT or total: classic buckets, a native histogram, and per classic bucket the last
/// run's trace id (OpenMetrics exemplars).
#[derive(Debug, Clone)]
pub(super) struct SloHistogram {
    pub classic: Classic,
    pub native: Native,
    /// Only for the buckets runs fell in, which for most probes is one or two: a slot
    /// per bucket was 400 bytes a histogram (4 MB at 10,000 probes).
    exemplars: Vec<Exemplar>,
}

/// A run's trace id on the bucket its value fell in.
#[derive(Debug, Clone, Copy)]
pub(super) struct Exemplar {
    pub trace_id: [u8; 16],
    pub value: f64,
    /// Seconds since the epoch.
    pub at: f64,
    bucket: u8,
}

impl SloHistogram {
    pub fn new(bounds: &'static [f64], native: NativeConfig) -> Self {
        SloHistogram {
            classic: Classic::new(bounds),
            native: Native::new(native),
            exemplars: Vec::new(),
        }
    }

    pub fn observe(&mut self, v: f64, trace: Option<([u8; 16], SystemTime)>) {
        let bucket = self.classic.observe(v);
        self.native.observe(v);
        if let Some((trace_id, at)) = trace {
            let exemplar = Exemplar {
                trace_id,
                value: v,
                at: at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64(),
                bucket: u8::try_from(bucket).unwrap_or(u8::MAX),
            };
            match self.exemplars.iter_mut().find(|x| x.bucket == exemplar.bucket) {
                Some(x) => *x = exemplar,
                None => {
                    self.exemplars.reserve_exact(1);
                    self.exemplars.push(exemplar);
                }
            }
        }
    }

    /// The last traced run's exemplar in classic bucket `bucket`.
    pub fn exemplar(&self, bucket: usize) -> Option<&Exemplar> {
        self.exemplars.iter().find(|x| usize::from(x.bucket) == bucket)
    }

    pub fn has_exemplars(&self) -> bool {
        !self.exemplars.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::prometheus_protobuf;
    use prometheus_client::metrics::histogram::{Histogram, NativeHistogramConfig};
    use prometheus_client::registry::Registry;

    const CONFIG: NativeConfig = NativeConfig {
        schema: 3,
        max_buckets: 40,
        max_zero_threshold: 0.001,
    };

    /// prometheus-client's native histogram, the reference ours must equal.
    fn reference(values: &[f64]) -> prometheus_protobuf::prometheus_data_model::Histogram {
        let h = Histogram::new_native(
            NativeHistogramConfig::with_schema(CONFIG.schema)
                .max_buckets(CONFIG.max_buckets)
                .max_zero_threshold(CONFIG.max_zero_threshold),
        );
        for v in values {
            h.observe(*v);
        }
        let mut registry = Registry::default();
        registry.register("h", "", h);
        let body = prometheus_protobuf::encode_to_vec(&registry).unwrap();
        let family: prometheus_protobuf::prometheus_data_model::MetricFamily =
            prost::Message::decode_length_delimited(body.as_slice()).unwrap();
        family.metric[0].histogram.clone().unwrap()
    }

    fn check(values: &[f64]) {
        let mut ours = Native::new(CONFIG);
        for v in values {
            ours.observe(*v);
        }
        let s = ours.snapshot();
        let r = reference(values);
        assert_eq!(s.schema, r.schema, "{values:?}");
        assert_eq!(s.zero_threshold, r.zero_threshold);
        assert_eq!(s.zero_count, r.zero_count);
        let spans: Vec<(i32, u32)> = r.positive_span.iter().map(|s| (s.offset, s.length)).collect();
        assert_eq!(s.spans, spans, "{values:?}");
        assert_eq!(s.deltas, r.positive_delta, "{values:?}");
    }

    #[test]
    fn native_buckets_are_prometheus_clients_to_the_bucket() {
        check(&[0.3]);
        check(&[0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 20.0, 0.0, 1e-9]);
        check(&[0.31, 0.32, 0.5, 0.51, 0.9, 3.7]);
        // A microsecond to three hours: the zero bucket widens, then the schema drops.
        let spread: Vec<f64> = (0..400).map(|i| 1e-6 * 1.05_f64.powi(i)).collect();
        check(&spread);
        let wide: Vec<f64> = (0..300).map(|i| 0.002 * 1.07_f64.powi(i)).collect();
        check(&wide);
    }

    #[test]
    fn classic_buckets_count_a_value_on_a_bound_in_that_bucket() {
        let mut c = Classic::new(&[1.0, 2.0]);
        assert_eq!(c.observe(1.0), 0);
        assert_eq!(c.observe(1.5), 1);
        assert_eq!(c.observe(9.0), 2);
        assert_eq!(c.buckets(), [(1.0, 1), (2.0, 1), (f64::INFINITY, 1)]);
        assert_eq!((c.sum, c.count), (11.5, 3));
    }
}
