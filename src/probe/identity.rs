//! Which model answers a probe: the response's `model` and `system_fingerprint` (read by
//! the kinds' parsers), and what the server says of itself where that is cheap to ask,
//! reduced to a [`ModelIdentity`]: a small stable digest and a summary for people.
//!
//! Where each server says it (docs/measurements.md keeps the same list for users):
//!
//! - llama.cpp `GET /props`: `model_path`, `model_alias`, `build_info`, `chat_template`
//!   (hashed); `GET /v1/models`: `meta.n_params`, `meta.size` (they change with the GGUF
//!   or its quantization), `owned_by: "llamacpp"`.
//! - vLLM `GET /v1/models`: `root` (the model's path or repository), `parent` (a LoRA's
//!   base), `max_model_len`, `owned_by: "vllm"`; `GET /version`.
//! - TGI `GET /info`: `model_id`, `model_sha`, `version`, `sha`, `docker_label`.
//! - Ollama `GET /api/ps`: the loaded model's `digest` and its quantization.
//! - KServe v2 `GET /v2/models/{m}`: `name`, `versions`, `platform`.
//!
//! The fetch happens after a run has finished (never between a run's clock start and its
//! request), on a client of its own so the run's connection is left as it was, at most
//! every [`REFRESH`] (after a failed fetch too), and again at once when the response names
//! another model or fingerprint than the one the last fetch was made with (a swap shows
//! in the response first: without the re-fetch one swap would be two changes). A fetch
//! that fails, times out or is refused yields nothing and keeps what the last good one
//! said: it never fails a run. Fields that change per request (`created`, `expires_at`,
//! slots) are left out, or the digest would change every time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::endpoint::Endpoint;
use super::kinds::Kind;
use crate::config::ProbeConfig;
use crate::net::TlsRoots;
use crate::outcome::{ModelIdentity, Served};

/// How often the server's identity is asked at most, successful or not.
pub const REFRESH: Duration = Duration::from_secs(5 * 60);
/// One identity request's whole time: it is a courtesy of the server, not a run.
const FETCH_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest identity body read (a `/props` with its chat templates is ~10 KB).
const MAX_BODY: u64 = 256 * 1024;
/// Characters of one value kept (label values, the summary's parts).
const MAX_VALUE: usize = 64;

/// A server's value as shown: printable, trimmed, at most [`MAX_VALUE`] characters.
pub(crate) fn clean(s: &str) -> String {
    crate::human::shorten(&crate::human::printable(s.trim()), MAX_VALUE)
}

/// Where a server says what it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    /// llama.cpp's `/props`.
    Props,
    /// OpenAI-style `/v1/models` (llama.cpp, vLLM, SGLang, OpenAI).
    Models,
    /// vLLM's `/version`.
    VllmVersion,
    /// TGI's `/info`.
    TgiInfo,
    /// Ollama's `/api/ps`.
    OllamaPs,
    /// KServe v2 model metadata.
    V2Model,
}

/// What one source said: fields by name, in a fixed order.
type Fields = Vec<(&'static str, String)>;

/// The identity requests of one probe and what they said last.
pub(crate) struct IdentityFetcher {
    config: Arc<ProbeConfig>,
    roots: TlsRoots,
    /// Built at the first fetch: most reloads never need it.
    endpoint: OnceLock<Option<Endpoint>>,
    /// The server's root path (`/` stripped of the API's own path) and the OpenAI base
    /// (`/v1`), each with the probe's query string kept (it may carry a key).
    paths: Paths,
    first: Vec<Source>,
    state: Mutex<State>,
    /// The server's process start, asked apart from its identity and more often.
    start: Mutex<start::StartWatch>,
}

#[derive(Debug, Default)]
struct State {
    last_try: Option<Instant>,
    /// The response's (model, fingerprint) the last fetch was made for.
    fetched_for: Option<(Option<String>, Option<String>)>,
    /// Each source's last good answer.
    facts: BTreeMap<Source, Fields>,
    /// Sources that answered at least once, with something or with a refusal: until every
    /// source asked has, an identity would lack what they say and read as a change.
    settled: BTreeSet<Source>,
}

#[derive(Debug, Clone)]
struct Paths {
    root: String,
    openai_base: String,
    query: String,
}

impl Paths {
    fn of(&self, source: Source) -> String {
        let path = match source {
            Source::Props => format!("{}/props", self.root),
            Source::Models => format!("{}/models", self.openai_base),
            Source::VllmVersion => format!("{}/version", self.root),
            Source::TgiInfo => format!("{}/info", self.root),
            Source::OllamaPs => format!("{}/api/ps", self.root),
            // The model's own path: `.../infer` without its last segment.
            Source::V2Model => self.root.clone(),
        };
        format!("{path}{}", self.query)
    }
}

/// The sources of a kind at a URL path, asked first (more may follow from what they
/// say); `None` when the path is not the API's usual one (a gateway's own route: where
/// the server's other endpoints are is unknown).
fn plan(kind: Kind, path: &str, query: &str) -> Option<(Paths, Vec<Source>)> {
    let strip = |suffix: &str| {
        path.strip_suffix(suffix)
            .map(|p| p.trim_end_matches('/').to_owned())
    };
    let query = query.to_owned();
    let openai = |base: String| {
        let root = base.strip_suffix("/v1").unwrap_or(&base).to_owned();
        let paths = Paths {
            root,
            openai_base: base,
            query: query.clone(),
        };
        (paths, vec![Source::Models])
    };
    let at_root = |root: String, sources: Vec<Source>| {
        let paths = Paths {
            openai_base: format!("{root}/v1"),
            root,
            query: query.clone(),
        };
        (paths, sources)
    };
    Some(match kind {
        Kind::OpenAiChat => openai(strip("/chat/completions")?),
        Kind::OpenAiCompletions => openai(strip("/completions")?),
        Kind::OpenAiResponses => openai(strip("/responses")?),
        Kind::LlamaCpp => at_root(strip("/completion")?, vec![Source::Props, Source::Models]),
        Kind::Tgi => at_root(strip("/generate_stream")?, vec![Source::TgiInfo]),
        Kind::Ollama => at_root(
            strip("/api/chat").or_else(|| strip("/api/generate"))?,
            vec![Source::OllamaPs],
        ),
        Kind::KserveV2 => at_root(strip("/infer")?, vec![Source::V2Model]),
        // Anthropic's API says nothing more than the response's `model`; the others
        // name no model.
        Kind::Anthropic | Kind::KserveV2Grpc | Kind::GrpcHealth | Kind::Http => return None,
    })
}

impl IdentityFetcher {
    /// `None` for a probe whose server has nothing to ask (the response's model still
    /// makes an identity).
    pub fn new(config: &Arc<ProbeConfig>, roots: &TlsRoots) -> Option<Self> {
        let query = config.url.query().map(|q| format!("?{q}")).unwrap_or_default();
        let (paths, first) = plan(config.kind, config.url.path(), &query)?;
        Some(IdentityFetcher {
            config: config.clone(),
            roots: roots.clone(),
            endpoint: OnceLock::new(),
            paths,
            first,
            state: Mutex::new(State::default()),
            start: Mutex::new(start::StartWatch::default()),
        })
    }

    /// The identity after a successful run: what the response named, with what the
    /// server said (asked now if due).
    pub async fn identity(&self, served: &Served) -> Option<Arc<ModelIdentity>> {
        let named = (served.model.clone(), served.fingerprint.clone());
        let due = {
            let mut state = self.state.lock().expect("identity lock");
            let due = state.last_try.is_none_or(|t| t.elapsed() >= REFRESH)
                || state.fetched_for.as_ref() != Some(&named);
            if due {
                // Counted as tried before it is: a fetch cut short is not tried again
                // with the next run.
                state.last_try = Some(Instant::now());
                state.fetched_for = Some(named);
            }
            due
        };
        if due {
            let bound = FETCH_TIMEOUT * 2;
            let fetched = tokio::time::timeout(bound, self.fetch(served.model.as_deref())).await;
            let mut state = self.state.lock().expect("identity lock");
            match fetched {
                // A source that did not answer keeps its last word: a timeout is not a change.
                Ok(fetched) => {
                    state.settled.extend(fetched.answered);
                    let unsettled = fetched.asked.iter().any(|s| !state.settled.contains(s));
                    state.facts.extend(fetched.facts);
                    if unsettled {
                        // Asked again with the next run, not in five minutes.
                        state.last_try = None;
                    }
                }
                Err(_) => state.last_try = None,
            }
        }
        let state = self.state.lock().expect("identity lock");
        if !self.first.iter().all(|s| state.settled.contains(s)) {
            // Not known yet: no identity rather than one without the server's word.
            return None;
        }
        identity_of(served, &state.facts)
    }

    /// The server's process start after a successful run (probe/identity/start.rs),
    /// asked of its `/metrics` (llama.cpp's `/props` after a refusal) if due; `None`
    /// when the server does not say it. Only servers of our own kinds are asked: a
    /// hosted API has no `/metrics` to give.
    pub async fn server_start(&self) -> Option<String> {
        let owner = {
            let state = self.state.lock().expect("identity lock");
            state
                .facts
                .get(&Source::Models)
                .and_then(|f| owner(f).map(str::to_owned))
        };
        let says = matches!(self.config.kind, Kind::LlamaCpp | Kind::Tgi)
            || matches!(owner.as_deref(), Some("llamacpp" | "vllm" | "sglang"));
        let refresh = start::start_refresh(self.config.traffic.warmup);
        let due = says
            && self
                .start
                .lock()
                .expect("start lock")
                .due(Instant::now(), refresh);
        if due && let Some(endpoint) = self.endpoint.get().and_then(Option::as_ref) {
            // `/metrics` first; llama.cpp without `--metrics` refuses it, and says its
            // start in `/props`. Only a refusal moves on: a source that did not answer
            // is not replaced by another (their values differ, which would read as a
            // restart).
            let llama = self.config.kind == Kind::LlamaCpp || owner.as_deref() == Some("llamacpp");
            let mut paths = vec![format!("{}/metrics{}", self.paths.root, self.paths.query)];
            if llama {
                paths.push(self.paths.of(Source::Props));
            }
            let mut said = None;
            let mut answered = true;
            for path in &paths {
                match endpoint.fetch(path, start::MAX_METRICS_BODY, FETCH_TIMEOUT).await {
                    Ok(Some((headers, body))) => {
                        said = start::start_of(&headers, &body);
                        if said.is_some() {
                            break;
                        }
                    }
                    Ok(None) => {}
                    Err(()) => {
                        answered = false;
                        break;
                    }
                }
            }
            let mut watch = self.start.lock().expect("start lock");
            match said {
                Some(s) if watch.saw(&s, std::time::SystemTime::now()) => {
                    tracing::info!(
                        probe = %self.config.name,
                        "the server answers from several processes (replicas behind one address?): its restarts are told by refusals and loading answers only"
                    );
                }
                Some(_) => {}
                None if answered => watch.unsaid(Instant::now()),
                // No answer says nothing: asked again at the next refresh.
                None => {}
            }
        }
        self.start.lock().expect("start lock").current()
    }

    async fn fetch(&self, model: Option<&str>) -> Fetched {
        let mut out = Fetched::default();
        let Some(endpoint) = self
            .endpoint
            .get_or_init(|| Endpoint::build(&self.config, &self.roots, &[]).ok())
        else {
            // No client can be built: nothing will ever answer, so nothing is awaited.
            out.answered = self.first.iter().copied().collect();
            return out;
        };
        let asked = self.config.model.as_deref().unwrap_or_default();
        let mut sources = self.first.clone();
        let mut i = 0;
        while let Some(&source) = sources.get(i) {
            i += 1;
            out.asked.insert(source);
            let Ok(answer) = endpoint
                .fetch(&self.paths.of(source), MAX_BODY, FETCH_TIMEOUT)
                .await
            else {
                continue;
            };
            out.answered.insert(source);
            let Some(json) = answer.and_then(|(_, body)| serde_json::from_slice::<Value>(&body).ok()) else {
                continue;
            };
            let fields = parse(source, &json, model.unwrap_or(asked));
            // The OpenAI-style list says whose server it is: ask that server's own.
            if source == Source::Models {
                match owner(&fields) {
                    Some("llamacpp") if !sources.contains(&Source::Props) => sources.push(Source::Props),
                    Some("vllm") => sources.push(Source::VllmVersion),
                    _ => {}
                }
            }
            if !fields.is_empty() {
                out.facts.insert(source, fields);
            }
        }
        out
    }
}

/// What one round of asking found.
#[derive(Default)]
struct Fetched {
    asked: BTreeSet<Source>,
    /// Sources that answered, with something or with a refusal (not a timeout).
    answered: BTreeSet<Source>,
    facts: BTreeMap<Source, Fields>,
}

fn owner(fields: &Fields) -> Option<&str> {
    fields
        .iter()
        .find(|(k, _)| *k == "owned_by")
        .map(|(_, v)| v.as_str())
}

/// What one source's answer says, for the model `model`.
fn parse(source: Source, json: &Value, model: &str) -> Fields {
    let mut f = Fields::new();
    let mut put = |key: &'static str, v: Option<&Value>| {
        let text = match v {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(n @ Value::Number(_)) => n.to_string(),
            _ => return,
        };
        f.push((key, text));
    };
    match source {
        Source::Props => {
            put("model_path", json.get("model_path"));
            put("model_alias", json.get("model_alias"));
            put("build", json.get("build_info"));
            put("n_ctx", json.pointer("/default_generation_settings/n_ctx"));
            if let Some(t) = json.get("chat_template").and_then(Value::as_str) {
                f.push(("template", hash_hex(t.as_bytes(), 8)));
            }
        }
        Source::Models => {
            let list = json.get("data").and_then(Value::as_array);
            let names = |m: &&Value| {
                m.get("id").and_then(Value::as_str) == Some(model)
                    || m.get("aliases")
                        .and_then(Value::as_array)
                        .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(model)))
            };
            // The entry of the model asked for, else a server's only one.
            let entry = list.and_then(|l| {
                l.iter()
                    .find(names)
                    .or(if l.len() == 1 { l.first() } else { None })
            });
            if let Some(m) = entry {
                put("owned_by", m.get("owned_by"));
                put("root", m.get("root"));
                put("parent", m.get("parent"));
                put("max_model_len", m.get("max_model_len"));
                put("n_params", m.pointer("/meta/n_params"));
                put("size", m.pointer("/meta/size"));
                put("ftype", m.pointer("/meta/ftype"));
            }
        }
        Source::VllmVersion => put("vllm", json.get("version")),
        Source::TgiInfo => {
            put("model_id", json.get("model_id"));
            put("model_sha", json.get("model_sha"));
            put("tgi", json.get("version"));
            put("sha", json.get("sha"));
            put("docker_label", json.get("docker_label"));
        }
        Source::OllamaPs => {
            let entry = json.get("models").and_then(Value::as_array).and_then(|l| {
                l.iter().find(|m| {
                    [m.get("name"), m.get("model")]
                        .iter()
                        .any(|n| n.and_then(|n| n.as_str()).is_some_and(|n| ollama_names(n, model)))
                })
            });
            if let Some(m) = entry {
                put("digest", m.get("digest"));
                put("quantization", m.pointer("/details/quantization_level"));
                put("parameter_size", m.pointer("/details/parameter_size"));
            }
        }
        Source::V2Model => {
            put("name", json.get("name"));
            put("platform", json.get("platform"));
            if let Some(v) = json.get("versions").and_then(Value::as_array) {
                let versions: Vec<&str> = v.iter().filter_map(Value::as_str).collect();
                if !versions.is_empty() {
                    f.push(("versions", versions.join(",")));
                }
            }
        }
    }
    f
}

/// Whether Ollama's `listed` name is the configured `model`: `llama3` is `llama3:latest`.
fn ollama_names(listed: &str, model: &str) -> bool {
    listed == model || (!model.contains(':') && listed.strip_suffix(":latest") == Some(model))
}

/// The first `hex` hex digits of the SHA-256 of `bytes`.
fn hash_hex(bytes: &[u8], hex: usize) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut s: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    s.truncate(hex);
    s
}

/// The identity of what the response named and the sources said; `None` when nothing
/// at all is known.
fn identity_of(served: &Served, facts: &BTreeMap<Source, Fields>) -> Option<Arc<ModelIdentity>> {
    let all: Vec<&(&'static str, String)> = facts.values().flatten().collect();
    let get = |key: &str| all.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str());
    let model = served
        .model
        .clone()
        .or_else(|| {
            ["model_alias", "model_id", "name"]
                .iter()
                .find_map(|k| get(k))
                .map(clean)
        })
        .unwrap_or_default();
    let fingerprint = served.fingerprint.clone().unwrap_or_default();
    if model.is_empty() && fingerprint.is_empty() && all.is_empty() {
        return None;
    }
    // The fingerprint is shown, not hashed: OpenAI's changes from one request to the next
    // as its backends take turns, for one model; llama.cpp's build reaches the digest
    // through /props.
    let mut hashed = format!("model={model}\0");
    for (k, v) in &all {
        hashed.push_str(&format!("{k}={v}\0"));
    }
    let mut parts = Vec::new();
    let build = get("build")
        .map(str::to_owned)
        .or((!fingerprint.is_empty()).then(|| fingerprint.clone()));
    if let Some(build) = build {
        let server = if facts.contains_key(&Source::Props) || get("owned_by") == Some("llamacpp") {
            "llama.cpp "
        } else {
            ""
        };
        parts.push(format!("{server}{}", clean(&build)));
    }
    for (key, label) in [("vllm", "vLLM "), ("tgi", "TGI ")] {
        if let Some(v) = get(key) {
            parts.push(format!("{label}{}", clean(v)));
        }
    }
    if let Some(root) = get("root").filter(|r| *r != model) {
        parts.push(clean(root));
    }
    if let Some(size) = get("size").and_then(|s| s.parse::<u64>().ok()) {
        parts.push(bytes(size));
    }
    for (key, label, n) in [
        ("template", "template ", 8),
        ("model_sha", "sha ", 8),
        ("digest", "digest ", 19),
        ("quantization", "", 16),
        ("versions", "versions ", 32),
    ] {
        if let Some(v) = get(key) {
            parts.push(format!("{label}{}", crate::human::first_chars(&clean(v), n)));
        }
    }
    let summary = match (model.is_empty(), parts.is_empty()) {
        (_, true) => model.clone(),
        (true, false) => parts.join(", "),
        (false, false) => format!("{model} ({})", parts.join(", ")),
    };
    Some(Arc::new(ModelIdentity {
        digest: hash_hex(hashed.as_bytes(), 16),
        summary,
        served_model: model,
        fingerprint,
    }))
}

/// A size as people read it: `586 kB`, `4.1 GB` (decimal units, as servers list them).
fn bytes(n: u64) -> String {
    let (value, unit) = match n {
        0..1_000 => return format!("{n} B"),
        1_000..1_000_000 => (n as f64 / 1e3, "kB"),
        1_000_000..1_000_000_000 => (n as f64 / 1e6, "MB"),
        _ => (n as f64 / 1e9, "GB"),
    };
    if value >= 100.0 {
        format!("{value:.0} {unit}")
    } else {
        format!("{value:.1} {unit}")
    }
}

/// The identity of a run without a server to ask: the response's model and fingerprint.
pub(crate) fn from_response(served: &Served) -> Option<Arc<ModelIdentity>> {
    identity_of(served, &BTreeMap::new())
}

#[path = "identity/start.rs"]
mod start;

#[cfg(test)]
#[path = "identity/tests.rs"]
mod tests;
