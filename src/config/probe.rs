//! The checks every probe gets, whatever its kind: name, URL, model, schedule, timeouts,
//! headers, `expect`, labels, limits, TLS, alerting and SLOs, into a [`ProbeConfig`].
//! The keys of some kinds only go, as [`SpecKeys`], to the kind's own check (through
//! `probe::kinds::check_spec`), which makes [`ProbeConfig::spec`]; [`SpecKeys::refuse`]
//! is how a kind turns away the keys it does not take, with the messages the file
//! format has always given.
//!
//! Errors print sorted by position, and those at one position in the order they were
//! found: moving a check moves its errors among those that share a position (a key
//! that is absent is reported where its probe starts). Keep the order of the checks.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use super::alerting::{RawAlert, RawSlo};
use super::check::{Checker, Defaults, fmt_duration, valid_label_value};
use super::positions::closest;
use super::raw::{RawExpect, RawImages, RawInput, RawProbe, RawTls};
use super::{
    ANSWER_FINISH_REASONS, DEFAULT_INTERVAL, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_MAX_TOKENS, DEFAULT_TIMEOUT,
    Expect, Kind, MAX_RESPONSE_BYTES, Pattern, ProbeConfig, Prompts, Schedule, Secret, TlsConfig,
};
use crate::probe::kinds;

impl Checker<'_> {
    /// The checks of one probe; `kind_known` from [`Checker::read_kind`]: for a kind that
    /// is not known, the keys every kind has (name, URL, schedule, labels, alerting...)
    /// are checked and the kind's own skipped.
    pub(super) fn check_probe(
        &mut self,
        raw: RawProbe,
        kind_known: bool,
        prefix: &str,
        defaults: Option<&Defaults>,
        receivers: &[String],
    ) -> Option<ProbeConfig> {
        let errors_before = self.errors.len();
        let kind = kind_known.then_some(raw.kind);
        let name = raw.name.clone();
        let p = Some(name.as_str());
        let key = |k: &str| format!("{prefix}.{k}");

        if !valid_label_value(&name) {
            self.error(
                p,
                &key("name"),
                "must be 1-64 characters of letters, digits, `_`, `-` or `.`",
            );
        }

        let url = self.url(p, &key("url"), &raw.url);

        let model = raw.model.filter(|m| !m.trim().is_empty());
        if let Some(kind) = kind.filter(|k| k.is_llm() || *k == Kind::KserveV2Grpc)
            && model.is_none()
        {
            self.error(
                p,
                &key("model"),
                format!("`model` is required for kind {}", kind.as_str()),
            );
        }

        let schedule = self.probe_schedule(p, prefix, &raw.interval, &raw.schedule, defaults);

        let (timeout, first_token_timeout) = self.probe_timeouts(
            p,
            prefix,
            &raw.timeout,
            &raw.first_token_timeout,
            defaults,
            schedule.as_ref(),
        );

        let headers = self.probe_headers(p, prefix, &raw.headers, defaults);
        let trace = self.probe_trace(
            p,
            prefix,
            raw.trace,
            defaults.map(|d| (d.trace, &d.headers)),
            &raw.headers,
        );

        // Prompts and max_tokens are the LLM kinds' keys, handed to their check below, but
        // checked here, in file order, so that a misplaced `prompts` reads before the
        // problems found after it. `defaults.max_tokens` was checked at its own line.
        let prompts = kind.and_then(|kind| self.prompts(p, prefix, kind, raw.prompts));

        let max_tokens = raw
            .max_tokens
            .or(defaults.map(|d| d.max_tokens))
            .unwrap_or(DEFAULT_MAX_TOKENS);
        if !(1..=1_000_000).contains(&max_tokens) {
            self.error(p, &key("max_tokens"), "must be between 1 and 1000000");
        }

        let expect = self.probe_expect(p, prefix, kind, raw.expect);

        let mut labels: BTreeMap<String, String> = defaults.map(|d| d.labels.clone()).unwrap_or_default();
        labels.extend(raw.labels);
        self.labels(p, prefix, &labels);

        let max_response_bytes = raw
            .max_response_bytes
            .or(defaults.map(|d| d.max_response_bytes))
            .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES);
        if !(1024..=MAX_RESPONSE_BYTES).contains(&max_response_bytes) {
            self.error(
                p,
                &key("max_response_bytes"),
                "must be between 1024 and 1073741824 (1 GiB)",
            );
        }

        let tls = self.probe_tls(p, prefix, raw.tls);

        // The kind's own keys, checked by the kind's own file (probe/kinds.rs dispatches);
        // not for a kind that is not known.
        let spec = kind.and_then(|kind| {
            kinds::check_spec(
                self,
                SpecKeys {
                    probe: p,
                    prefix,
                    kind,
                    url: url.as_ref(),
                    prompts,
                    max_tokens,
                    method: raw.method,
                    body: raw.body,
                    images: raw.images,
                    input: raw.input,
                    ready_check: raw.ready_check,
                    outputs: raw.outputs,
                    model_version: raw.model_version,
                    service: raw.service,
                },
            )
        });

        let no_alert = RawAlert::default();
        let raw_alert = raw
            .alert
            .unwrap_or_default()
            .over(defaults.map_or(&no_alert, |d| &d.alert));
        let alert = self.alert(p, prefix, raw_alert, receivers);
        let no_slo = RawSlo::default();
        let raw_slo = raw.slo.unwrap_or_default().over(
            defaults.map_or(&no_slo, |d| &d.slo),
            kind.is_none_or(Kind::is_llm),
        );
        let slo = self.slo(p, prefix, raw_slo);
        if let Some(s) = &slo
            && s.ttft_p95.is_some()
            && kind.is_some_and(|k| !k.is_llm())
        {
            self.error(p, &key("slo.ttft_p95"), "only for LLM kinds; use total_p95");
        }

        let cost = self.probe_cost(p, prefix, kind, raw.cost, defaults.and_then(|d| d.cost.as_ref()));
        let budget = self.probe_budget(
            p,
            prefix,
            kind,
            schedule.as_ref(),
            raw.budget,
            defaults.and_then(|d| d.budget.as_ref()),
        );

        if self.errors.len() > errors_before {
            return None;
        }
        Some(ProbeConfig {
            name: name.into(),
            kind: kind?,
            url: url?,
            model,
            schedule: schedule?,
            timeout: timeout?,
            first_token_timeout: first_token_timeout?,
            headers,
            spec: spec?,
            expect: self.sections.expect.share(expect),
            labels: labels.into_iter().collect(),
            reuse_connections: raw
                .reuse_connections
                .or(defaults.map(|d| d.reuse_connections))
                .unwrap_or(false),
            max_response_bytes,
            tls: self.sections.tls.share(tls),
            alert: self.sections.alert.share(alert?),
            slo: self.sections.slo.share(slo?),
            metrics: raw
                .metrics
                .and_then(|m| m.detail)
                .or(defaults.and_then(|d| d.metrics))
                .unwrap_or_default(),
            cost: cost.map(|c| self.sections.cost.share(c)),
            budget,
            trace,
        })
    }

    /// `interval` or `schedule` (cron), never both; the default interval otherwise.
    fn probe_schedule(
        &mut self,
        p: Option<&str>,
        prefix: &str,
        raw_interval: &Option<String>,
        raw_schedule: &Option<String>,
        defaults: Option<&Defaults>,
    ) -> Option<Schedule> {
        let key = |k: &str| format!("{prefix}.{k}");
        match (raw_interval, raw_schedule) {
            (Some(_), Some(_)) => {
                self.error(
                    p,
                    &key("schedule"),
                    "set either `interval` or `schedule`, not both",
                );
                None
            }
            (None, Some(expr)) => match cron::Schedule::from_str(expr) {
                Ok(s) => match cron_never_fires(&s, chrono::Utc::now()) {
                    Some(why) => {
                        self.error(p, &key("schedule"), format!("`{expr}` {why}"));
                        None
                    }
                    None => Some(Schedule::Cron {
                        expr: expr.clone(),
                        schedule: Box::new(s),
                    }),
                },
                Err(_) => {
                    let fields = expr.split_whitespace().count();
                    let hint = if fields == 5 {
                        format!("5 fields; add a seconds field first, e.g. `0 {expr}`")
                    } else {
                        "6 or 7 fields, seconds first, e.g. `0/30 * * * * *`".to_owned()
                    };
                    self.error(
                        p,
                        &key("schedule"),
                        format!("invalid cron expression `{expr}` ({hint})"),
                    );
                    None
                }
            },
            (Some(s), None) => self.duration(p, &key("interval"), s).and_then(|d| {
                if d < Duration::from_secs(1) {
                    self.error(p, &key("interval"), "must be at least 1s");
                    None
                } else {
                    Some(Schedule::Interval(d))
                }
            }),
            (None, None) => Some(Schedule::Interval(
                defaults.and_then(|d| d.interval).unwrap_or(DEFAULT_INTERVAL),
            )),
        }
    }

    /// `timeout` and `first_token_timeout`: an explicit timeout longer than the interval
    /// is an error (runs would be skipped); an inherited one is clamped to the interval.
    fn probe_timeouts(
        &mut self,
        p: Option<&str>,
        prefix: &str,
        raw_timeout: &Option<String>,
        raw_first_token_timeout: &Option<String>,
        defaults: Option<&Defaults>,
        schedule: Option<&Schedule>,
    ) -> (Option<Duration>, Option<Duration>) {
        let key = |k: &str| format!("{prefix}.{k}");
        // A bad `interval` (reported already, and set aside) is not compared with.
        let interval = match schedule {
            Some(Schedule::Interval(d)) if !self.is_settled(&key("interval")) => Some(*d),
            _ => None,
        };
        let timeout = match raw_timeout {
            Some(s) => self.duration(p, &key("timeout"), s).and_then(|t| match interval {
                Some(i) if t > i => {
                    self.error(
                        p,
                        &key("timeout"),
                        format!(
                            "{} is longer than the interval ({}); runs would overlap",
                            fmt_duration(t),
                            fmt_duration(i)
                        ),
                    );
                    None
                }
                _ => Some(t),
            }),
            None if self.is_settled(&key("timeout")) => None,
            None => {
                let t = defaults.and_then(|d| d.timeout).unwrap_or(DEFAULT_TIMEOUT);
                Some(interval.map_or(t, |i| t.min(i)))
            }
        };
        let first_token_timeout = match raw_first_token_timeout {
            Some(s) => self
                .duration(p, &key("first_token_timeout"), s)
                .and_then(|f| match timeout {
                    Some(t) if f > t => {
                        self.error(
                            p,
                            &key("first_token_timeout"),
                            format!(
                                "{} is longer than the timeout ({})",
                                fmt_duration(f),
                                fmt_duration(t)
                            ),
                        );
                        None
                    }
                    _ => Some(f),
                }),
            None => {
                let t = timeout.unwrap_or(DEFAULT_TIMEOUT);
                Some(
                    defaults
                        .and_then(|d| d.first_token_timeout)
                        .map_or(t, |f| f.min(t)),
                )
            }
        };
        (timeout, first_token_timeout)
    }

    /// Headers: defaults first, the probe's own override by name (case-insensitive).
    fn probe_headers(
        &mut self,
        p: Option<&str>,
        prefix: &str,
        raw_headers: &BTreeMap<String, String>,
        defaults: Option<&Defaults>,
    ) -> Vec<(http::HeaderName, Secret)> {
        let key = |k: &str| format!("{prefix}.{k}");
        self.duplicate_headers(p, &key("headers"), raw_headers);
        let mut merged: BTreeMap<String, (String, String)> = BTreeMap::new();
        if let Some(d) = defaults {
            for (k, v) in &d.headers {
                merged.insert(
                    k.to_ascii_lowercase(),
                    (format!("defaults.headers.{k}"), v.clone()),
                );
            }
        }
        for (k, v) in raw_headers {
            merged.insert(k.to_ascii_lowercase(), (key(&format!("headers.{k}")), v.clone()));
        }
        let mut headers = Vec::new();
        for (name_lc, (path, value)) in merged {
            let Ok(header) = http::HeaderName::from_str(&name_lc) else {
                self.error(p, &path, "not a valid HTTP header name");
                continue;
            };
            if http::HeaderValue::from_str(&value).is_err() {
                // Do not echo the value: it may be a secret.
                self.error(
                    p,
                    &path,
                    "the value (after ${VAR} substitution) is not a valid HTTP header value",
                );
                continue;
            }
            headers.push((header, Secret::new(value)));
        }
        headers
    }

    /// `expect`: what a run must show, beyond a complete response; some keys are only
    /// for LLM kinds, some only for `kserve_v2` (not said for a kind that is not known).
    fn probe_expect(
        &mut self,
        p: Option<&str>,
        prefix: &str,
        kind: Option<Kind>,
        raw_expect: Option<RawExpect>,
    ) -> Expect {
        let llm = kind.is_some_and(Kind::is_llm);
        let not_llm = kind.is_some_and(|k| !k.is_llm());
        let key = |k: &str| format!("{prefix}.{k}");
        let raw_expect = raw_expect.unwrap_or_default();
        for s in &raw_expect.status {
            if !(100..=599).contains(s) {
                self.error(
                    p,
                    &key("expect.status"),
                    format!("{s} is not an HTTP status code"),
                );
            }
        }
        if not_llm && raw_expect.min_output_tokens.is_some() {
            self.error(p, &key("expect.min_output_tokens"), "only for LLM kinds");
        }
        let finish_reasons = ANSWER_FINISH_REASONS;
        if not_llm && raw_expect.finish_reason.is_some() {
            self.error(p, &key("expect.finish_reason"), "only for LLM kinds");
        } else if let Some(bad) = raw_expect
            .finish_reason
            .iter()
            .flatten()
            .find(|r| !finish_reasons.contains(&r.as_str()))
        {
            let close = closest(bad, &finish_reasons)
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_default();
            self.error(
                p,
                &key("expect.finish_reason"),
                format!(
                    "{bad:?} is not a finish reason that carries an answer: one of {}{close}",
                    finish_reasons.join(", ")
                ),
            );
        }
        let expect = Expect {
            status: raw_expect.status,
            non_empty: raw_expect.non_empty.unwrap_or(llm),
            min_output_tokens: raw_expect.min_output_tokens.unwrap_or(u64::from(llm)),
            finish_reason: raw_expect.finish_reason.unwrap_or_default(),
            contains: raw_expect.contains,
            matches: raw_expect
                .matches
                .and_then(|source| match regex::Regex::new(&source) {
                    Ok(regex) => Some(Pattern { source, regex }),
                    Err(e) => {
                        let first = e.to_string().lines().last().unwrap_or_default().trim().to_owned();
                        self.error(
                            p,
                            &key("expect.matches"),
                            format!("not a valid regular expression: {first}"),
                        );
                        None
                    }
                }),
            json: raw_expect.json.unwrap_or(false),
            model: raw_expect.model.unwrap_or(false),
            outputs: raw_expect.outputs.unwrap_or_default(),
            output_shape: raw_expect.output_shape,
            top_label: raw_expect.top_label.and_then(|v| match v {
                serde_yaml::Value::String(s) => Some(s),
                serde_yaml::Value::Number(n) => Some(n.to_string()),
                serde_yaml::Value::Bool(b) => Some(b.to_string()),
                _ => {
                    self.error(p, &key("expect.top_label"), "must be a label or a number");
                    None
                }
            }),
        };
        let only_kserve = [
            ("outputs", !expect.outputs.is_empty()),
            ("output_shape", expect.output_shape.is_some()),
            ("top_label", expect.top_label.is_some()),
        ];
        for (name, set) in only_kserve {
            if set && kind.is_some_and(|k| !matches!(k, Kind::KserveV2 | Kind::KserveV2Grpc)) {
                self.error(
                    p,
                    &key(&format!("expect.{name}")),
                    "only for kinds kserve_v2 and kserve_v2_grpc",
                );
            }
        }
        if expect.model && kind.is_some_and(|k| !k.is_llm() || k == Kind::Tgi) {
            self.error(
                p,
                &key("expect.model"),
                "only for kinds whose responses name the model (not tgi, http, kserve_v2)",
            );
        }
        expect
    }

    /// `tls`: a CA file that must be readable now, and a warning for skipped verification.
    fn probe_tls(&mut self, p: Option<&str>, prefix: &str, raw_tls: Option<RawTls>) -> TlsConfig {
        let key = |k: &str| format!("{prefix}.{k}");
        let tls = raw_tls.unwrap_or_default();
        let ca_file = tls
            .ca_file
            .and_then(|f| self.existing_file(p, &key("tls.ca_file"), &f));
        let insecure_skip_verify = tls.insecure_skip_verify.unwrap_or(false);
        if insecure_skip_verify {
            self.warn(
                p,
                &key("tls.insecure_skip_verify"),
                "TLS certificates are not verified: expired, self-signed or wrong-host certificates will not fail this probe",
            );
        }
        TlsConfig {
            ca_file,
            server_name: tls.server_name,
            insecure_skip_verify,
        }
    }
}

/// A probe's per-kind keys as written, and what their checks need: handed to the kind's
/// own check (in the kind's file, dispatched by `probe/kinds.rs`), which takes the keys
/// its kind uses and [refuses](SpecKeys::refuse) the others.
pub(crate) struct SpecKeys<'a> {
    pub probe: Option<&'a str>,
    /// The probe's key path, `probes[i]`.
    pub prefix: &'a str,
    pub kind: Kind,
    /// The probe's URL, if it was valid.
    pub url: Option<&'a http::Uri>,
    /// Already checked (see `check_probe`); `None` after an error, or for a kind that
    /// does not take prompts.
    pub prompts: Option<Prompts>,
    /// Already checked (see `check_probe`).
    pub max_tokens: u32,
    pub method: Option<String>,
    pub body: Option<String>,
    pub images: Option<RawImages>,
    pub input: Option<RawInput>,
    pub ready_check: Option<bool>,
    pub outputs: Option<Vec<String>>,
    pub model_version: Option<String>,
    pub service: Option<String>,
}

/// A per-kind key that some kinds do not take (see [`SpecKeys::refuse`]). Not here: images
/// (whether a kind takes them is [`Kind::takes_images`]) and prompts (refused where they
/// are checked, for kinds that are not [`Kind::is_llm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    Method,
    Body,
    Input,
    ReadyCheck,
    Outputs,
    ModelVersion,
    Service,
}

impl SpecKeys<'_> {
    fn key(&self, name: &str) -> String {
        format!("{}.{name}", self.prefix)
    }

    /// Reports each of `keys` that the probe sets, as a key its kind does not take, with
    /// the message naming the kinds that do. Always in the same order (that of the file
    /// format's documentation), whatever the order of `keys`: errors at one position print
    /// in the order they were found.
    pub(crate) fn refuse(&self, cx: &mut Checker<'_>, keys: &[Key]) {
        let p = self.probe;
        if keys.contains(&Key::Method) && self.method.is_some() {
            cx.error(p, &self.key("method"), "only for kind http");
        }
        if keys.contains(&Key::Body) && self.body.is_some() {
            cx.error(
                p,
                &self.key("body"),
                "only for kind http (LLM kinds build their own body)",
            );
        }
        if keys.contains(&Key::Input) && self.input.is_some() {
            cx.error(
                p,
                &self.key("input"),
                "only for kinds kserve_v2 and kserve_v2_grpc",
            );
        }
        if keys.contains(&Key::ReadyCheck) && self.ready_check.is_some() {
            self.ready_check_url(cx);
            cx.error(
                p,
                &self.key("ready_check"),
                "only for kinds kserve_v2 and kserve_v2_grpc",
            );
        }
        if keys.contains(&Key::Outputs) && self.outputs.is_some() {
            cx.error(
                p,
                &self.key("outputs"),
                "only for kinds kserve_v2 and kserve_v2_grpc",
            );
        }
        if keys.contains(&Key::ModelVersion) && self.model_version.is_some() {
            cx.error(p, &self.key("model_version"), "only for kind kserve_v2_grpc");
        }
        if keys.contains(&Key::Service) && self.service.is_some() {
            cx.error(p, &self.key("service"), "only for kind grpc_health");
        }
    }

    /// `method`, for the kinds that send the user's request: an HTTP method, by default
    /// POST when there is a body and GET otherwise.
    pub(crate) fn method(&self, cx: &mut Checker<'_>) -> Option<http::Method> {
        // HTTP allows methods of its own to a service; one a letter or two from a
        // standard one is most likely that one misspelt: sent as written, with a warning.
        const STANDARD: [&str; 9] = [
            "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
        ];
        match &self.method {
            Some(m) => match http::Method::from_str(&m.to_ascii_uppercase()) {
                Ok(method) => {
                    if !STANDARD.contains(&method.as_str())
                        && let Some(s) = closest(method.as_str(), &STANDARD)
                    {
                        cx.warn(
                            self.probe,
                            &self.key("method"),
                            format!("`{m}` is not a standard HTTP method (it is sent as written); did you mean `{s}`?"),
                        );
                    }
                    Some(method)
                }
                Err(_) => {
                    cx.error(
                        self.probe,
                        &self.key("method"),
                        format!("`{m}` is not an HTTP method"),
                    );
                    None
                }
            },
            None => Some(if self.body.is_some() {
                http::Method::POST
            } else {
                http::Method::GET
            }),
        }
    }

    /// `ready_check: true` asks `.../ready` next to `.../infer`, so the URL must end in
    /// `/infer` (said for every kind that sets it, before anything else about it).
    pub(crate) fn ready_check_url(&self, cx: &mut Checker<'_>) {
        if self.ready_check == Some(true)
            && self
                .url
                .is_some_and(|u| !u.path().trim_end_matches('/').ends_with("/infer"))
        {
            cx.error(
                self.probe,
                &self.key("ready_check"),
                "needs a url ending in /infer (the check asks .../ready)",
            );
        }
    }
}

/// A cron schedule must fire within this long: one that does not (`0 0 0 30 2 *`, 30
/// February) is accepted by the cron grammar, and its probe would show NO DATA forever.
pub(super) const CRON_HORIZON_DAYS: i64 = 5 * 366;

/// Why a cron schedule is useless, if it is: no occurrence within [`CRON_HORIZON_DAYS`].
pub(super) fn cron_never_fires(
    schedule: &cron::Schedule,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<String> {
    let horizon = now + chrono::TimeDelta::days(CRON_HORIZON_DAYS);
    match schedule.after(&now).next() {
        Some(t) if t <= horizon => None,
        Some(t) => Some(format!(
            "first fires on {}, more than 5 years from now; the probe would show no data until then",
            t.format("%Y-%m-%d")
        )),
        None => Some(
            "never fires: no date from now on matches it (30 February, a year gone by), so the probe would never run"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    /// Errors at one position print in the order the checks find them: here, where a
    /// probe starts (a flow mapping's first key, and where absent keys are reported),
    /// the kinds' own checks interleave with the common ones exactly as they always did.
    #[test]
    fn errors_at_one_position_keep_the_order_of_the_checks() {
        let text = "defaults:\n  max_tokens: 0\n  labels: {kind: x}\nprobes:\n  - {prompts: {builtin: [short]}, name: a, kind: kserve_v2, url: \"http://h/v2/models/m/infer\"}\n  - {images: {files: []}, name: b, kind: http, url: \"http://h/x\", ready_check: true}\n";
        let errors = super::super::parse(text, std::path::Path::new("t.yaml"), &|_| None).unwrap_err();
        let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                // A bad inherited value is reported once, at its `defaults` line.
                "t.yaml:2:15: defaults.max_tokens: must be between 1 and 1000000",
                "t.yaml:3:18: defaults.labels.kind: `kind` is set by inferprobe itself; choose another name",
                "t.yaml:5:6: probe \"a\": probes[0].prompts: only for LLM kinds; use `body` for http",
                "t.yaml:5:6: probe \"a\": probes[0].input: kind kserve_v2 needs an `input` tensor",
                "t.yaml:6:6: probe \"b\": probes[1].images: an empty list of images",
                "t.yaml:6:80: probe \"b\": probes[1].ready_check: needs a url ending in /infer (the check asks .../ready)",
                "t.yaml:6:80: probe \"b\": probes[1].ready_check: only for kinds kserve_v2 and kserve_v2_grpc",
            ]
        );
    }
}
