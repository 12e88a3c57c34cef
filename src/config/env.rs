//! `${VAR}` substitution: [`substitute_env`], a pure function of the template and an
//! `env` lookup (so tests pass a closure instead of touching the process environment),
//! applied to every string value of the file by [`substitute_all`] before any
//! section is read; which values were secrets is decided here, by where they went.

use serde_yaml::Value;

use super::diagnostics::Diagnostics;
use super::own_keys::is_secret;
use crate::notify::ReceiverKind;
use crate::probe::kinds::Kind;

/// Replaces `${NAME}` with `env(NAME)`, `${NAME:-default}` with the default when NAME is
/// unset or empty; `$$` is a literal `$`.
pub fn substitute_env(template: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        rest = &rest[pos..];
        if let Some(r) = rest.strip_prefix("$$") {
            out.push('$');
            rest = r;
        } else if let Some(r) = rest.strip_prefix("${") {
            let Some(end) = r.find('}') else {
                return Err("unterminated `${` (write `$$` for a literal `$`)".into());
            };
            let (name, default) = match r[..end].split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (&r[..end], None),
            };
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "`${{{name}}}` is not a valid environment variable reference"
                ));
            }
            match (env(name).filter(|v| !v.is_empty() || default.is_none()), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => return Err(format!("environment variable {name} is not set")),
            }
            rest = &r[end + 1..];
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// What a `${VAR}` value becomes by where it was put, by key path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A model, a region, a label, a link: shown as it is.
    Shown,
    /// A place that carries credentials (a header, a key, a body, a receiver's URL):
    /// the whole value is a secret, redacted from everything shown (see
    /// `redact::Redactor::for_config`).
    Secret,
    /// An endpoint's URL (a probe's, remote_write's, the OTLP collector's): where the
    /// agent connects is shown, so on-call sees which host failed. Its credentials are
    /// secrets: the URL's userinfo and credential-looking query values (the redactor
    /// reads them from the URL itself), a `${VAR}` written in the query string, and a
    /// variable whose name says it is a secret ([`names_a_secret`]).
    Endpoint,
}

fn place(path: &str) -> Place {
    // `probes[3].url` -> ("probes", "url"): a key right under one item of a top list.
    let item_key = path
        .split_once('[')
        .and_then(|(list, rest)| Some((list, rest.split_once("].")?.1)));
    if path.contains(".headers.") {
        return Place::Secret;
    }
    match (item_key, path) {
        (Some(("probes", "url")), _) | (_, "agent.remote_write.url" | "agent.tracing.otlp_endpoint") => {
            Place::Endpoint
        }
        // A receiver's URL is secret whole: chat robots and Slack carry their token in
        // the path (`/bot/v2/hook/<token>`, `/services/T../B../<token>`) or the query.
        (Some(("receivers", "url")), _) => Place::Secret,
        (Some(("probes", key)), _) if is_secret::<Kind>(key) => Place::Secret,
        (Some(("receivers", key)), _) if is_secret::<ReceiverKind>(key) => Place::Secret,
        (
            _,
            "agent.remote_write.bearer_token"
            | "agent.remote_write.basic_auth.username"
            | "agent.remote_write.basic_auth.password",
        ) => Place::Secret,
        _ => Place::Shown,
    }
}

/// Words that mark a name as a credential's, anywhere in it, in any case: a query
/// parameter's (`api_key`, `X-Amz-Signature`) or an environment variable's
/// (`OPENAI_API_KEY`, `HF_TOKEN`, `DB_PASSWORD`).
const SECRET_WORDS: [&str; 13] = [
    "key", "token", "secret", "sig", "pass", "pwd", "auth", "cred", "session", "code", "jwt", "bearer",
    "private",
];

/// Whether `name` (a query parameter, an environment variable) says that its value is a
/// credential.
pub fn names_a_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| name.contains(w))
}

/// Where the query string of an endpoint's URL template starts: its first `?` outside a
/// `${...}` (whose default may hold one; `$${` is a `$` and a `{`, not a reference).
fn query_start(template: &str) -> Option<usize> {
    let bytes = template.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'$', Some(b'$')) => i += 2,
            // A reference ends at its first `}`, as `substitute_env` reads it.
            (b'$', Some(b'{')) => i += template[i..].find('}')? + 1,
            (b'?', _) => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// `${VAR}` in every string value of the file, once, before any section is read: one
/// mechanism for every key (a header, a model, a label, a receiver's URL), so no key
/// is left out and none is substituted twice (`$$` stays a literal `$`). A variable
/// that is not set is reported at its value, and the key is settled: the checks that
/// follow say nothing more about it. Mapping keys (header and label names) are not
/// values and are left as written.
///
/// Gives the values `env` put where credentials go (see [`Place`]): they are
/// the config's secrets.
pub(super) fn substitute_all(
    cx: &mut Diagnostics,
    root: &mut Value,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut s = Substitution {
        env,
        secrets: Vec::new(),
    };
    let Value::Mapping(map) = root else {
        return s.secrets;
    };
    for (key, value) in map.iter_mut() {
        let Some(key) = key.as_str() else { continue };
        match (key, value) {
            ("probes", Value::Sequence(probes)) => {
                for (i, probe) in probes.iter_mut().enumerate() {
                    substitute_probe(cx, &mut s, &format!("probes[{i}]"), probe);
                }
            }
            (key, value) => substitute_node(cx, &mut s, None, key, value),
        }
    }
    s.secrets
}

/// What substitution needs besides the diagnostics: the variables, and where the values
/// given to secret-bearing keys are gathered.
struct Substitution<'e> {
    env: &'e dyn Fn(&str) -> Option<String>,
    secrets: Vec<String>,
}

/// A probe's name first, so that the messages about its other values name it.
fn substitute_probe(cx: &mut Diagnostics, s: &mut Substitution, prefix: &str, probe: &mut Value) {
    let Value::Mapping(map) = probe else {
        return substitute_node(cx, s, None, prefix, probe);
    };
    if let Some(name) = map.get_mut("name") {
        substitute_node(cx, s, None, &format!("{prefix}.name"), name);
    }
    let name = map.get("name").and_then(Value::as_str).map(str::to_owned);
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            Some("name") => {}
            Some(key) => substitute_node(cx, s, name.as_deref(), &format!("{prefix}.{key}"), value),
            None => {}
        }
    }
}

/// `template` with its `${VAR}`s substituted, and the values `env` gave that are
/// secrets at `place`.
fn resolve(
    template: &str,
    place: Place,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Vec<String>), String> {
    // An endpoint's query string is substituted apart: a value put there is a secret
    // whatever its variable's name, as a key in `?key=${KEY}` is.
    let (before, query) = match place {
        Place::Endpoint => template.split_at(query_start(template).unwrap_or(template.len())),
        Place::Shown | Place::Secret => (template, ""),
    };
    let mut secrets = Vec::new();
    let mut value = String::with_capacity(template.len());
    for (part, in_query) in [(before, false), (query, true)] {
        let used = std::cell::RefCell::new(Vec::new());
        let lookup = |name: &str| {
            let value = env(name);
            if let Some(v) = &value {
                used.borrow_mut().push((names_a_secret(name), v.clone()));
            }
            value
        };
        value.push_str(&substitute_env(part, &lookup)?);
        secrets.extend(used.into_inner().into_iter().filter_map(|(named_secret, v)| {
            let secret = match place {
                Place::Shown => false,
                Place::Secret => true,
                Place::Endpoint => in_query || named_secret,
            };
            secret.then_some(v)
        }));
    }
    Ok((value, secrets))
}

fn substitute_node(
    cx: &mut Diagnostics,
    s: &mut Substitution,
    probe: Option<&str>,
    path: &str,
    node: &mut Value,
) {
    match node {
        Value::String(template) if template.contains('$') => {
            if template.contains("${") {
                cx.templated.insert(path.to_owned());
            }
            match resolve(template, place(path), s.env) {
                Ok((value, secrets)) => {
                    *template = value;
                    s.secrets.extend(secrets);
                }
                Err(message) => {
                    // Never the value in the message: it may be (part of) a secret.
                    cx.error(probe, path, message);
                    cx.settled.insert(path.to_owned());
                }
            }
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute_node(cx, s, probe, &format!("{path}[{i}]"), item);
            }
        }
        Value::Mapping(map) => {
            for (key, value) in map.iter_mut() {
                if let Some(key) = key.as_str() {
                    substitute_node(cx, s, probe, &format!("{path}.{key}"), value);
                }
            }
        }
        Value::Tagged(tagged) => substitute_node(cx, s, probe, path, &mut tagged.value),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::{Place, names_a_secret, place, query_start, resolve};

    #[test]
    fn each_place_is_shown_secret_or_an_endpoint() {
        for path in [
            "probes[12].body",
            "probes[0].headers.Authorization",
            "defaults.headers.X-Api-Key",
            "receivers[1].url",
            "receivers[0].routing_key",
            "receivers[0].headers.Authorization",
            "agent.remote_write.bearer_token",
            "agent.remote_write.basic_auth.password",
            "agent.remote_write.headers.X-Scope-OrgID",
            "agent.tracing.headers.x-api-key",
        ] {
            assert_eq!(place(path), Place::Secret, "{path}");
        }
        for path in [
            "probes[0].url",
            "probes[7].url",
            "agent.remote_write.url",
            "agent.tracing.otlp_endpoint",
        ] {
            assert_eq!(place(path), Place::Endpoint, "{path}");
        }
        for path in [
            "probes[0].model",
            "probes[0].labels.team",
            "probes[0].alert.runbook_url",
            "probes[0].prompts[0]",
            "probes[0].tls.server_name",
            "receivers[0].name",
            "agent.location",
            "agent.external_url",
            "agent.remote_write.job",
            "defaults.labels.url",
        ] {
            assert_eq!(place(path), Place::Shown, "{path}");
        }
    }

    #[test]
    fn an_endpoint_shows_its_host_and_hides_what_names_or_sits_in_a_query() {
        let env = |name: &str| {
            Some(match name {
                "EU_ENDPOINT" => "https://u:pw@eu.example.com:8443/v1".to_owned(),
                "DEPLOYMENT" => "canary-eu".to_owned(),
                "API_VERSION" => "2024-06-01".to_owned(),
                "GATEWAY_TOKEN" => "tok-in-the-path".to_owned(),
                "SECRET_HOST" => "hidden.example.com".to_owned(),
                _ => return None,
            })
        };
        let endpoint = |t: &str| resolve(t, Place::Endpoint, &env).unwrap();
        // The host, the port and the path are shown; the redactor takes the userinfo
        // from the URL itself.
        let (url, secrets) = endpoint("${EU_ENDPOINT}/${DEPLOYMENT}/chat");
        assert_eq!(url, "https://u:pw@eu.example.com:8443/v1/canary-eu/chat");
        assert!(secrets.is_empty(), "{secrets:?}");
        // A value in the query string is a secret whatever its variable's name.
        let (url, secrets) = endpoint("${EU_ENDPOINT}/chat?api-version=${API_VERSION}");
        assert_eq!(
            url,
            "https://u:pw@eu.example.com:8443/v1/chat?api-version=2024-06-01"
        );
        assert_eq!(secrets, ["2024-06-01"]);
        // A variable named as a secret is one wherever it is.
        let (_, secrets) = endpoint("https://${SECRET_HOST}/x/${GATEWAY_TOKEN}/y");
        assert_eq!(secrets, ["hidden.example.com", "tok-in-the-path"]);
        // A `?` in a default does not start the query.
        let (url, secrets) = endpoint("${NOPE:-http://h/?a}/${DEPLOYMENT}?v=${API_VERSION}");
        assert_eq!(url, "http://h/?a/canary-eu?v=2024-06-01");
        assert_eq!(secrets, ["2024-06-01"]);
        // Elsewhere the place decides alone.
        assert_eq!(
            resolve("${DEPLOYMENT}", Place::Secret, &env).unwrap().1,
            ["canary-eu"]
        );
        assert!(
            resolve("${GATEWAY_TOKEN}", Place::Shown, &env)
                .unwrap()
                .1
                .is_empty()
        );
        assert_eq!(
            resolve("${UNSET}/x", Place::Endpoint, &env).unwrap_err(),
            "environment variable UNSET is not set"
        );
    }

    #[test]
    fn secret_names_and_query_starts() {
        for name in [
            "OPENAI_API_KEY",
            "HF_TOKEN",
            "db_password",
            "X-Amz-Signature",
            "SECRET_HOST",
        ] {
            assert!(names_a_secret(name), "{name}");
        }
        for name in ["EU_ENDPOINT", "VLLM_URL", "DEPLOYMENT", "api-version", "fault"] {
            assert!(!names_a_secret(name), "{name}");
        }
        assert_eq!(query_start("http://h/p?q"), Some(10));
        assert_eq!(query_start("${A:-x?y}/p"), None);
        assert_eq!(query_start("${A}?q"), Some(4));
        assert_eq!(query_start("$${A?}"), Some(4));
        assert_eq!(query_start("${unterminated?"), None);
    }
}
