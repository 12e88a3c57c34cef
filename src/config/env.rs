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

/// The values that may carry a credential, by key path: a `${VAR}` put there is a secret
/// (redacted from everything shown, see `redact::Redactor::for_config`). Elsewhere (a
/// model, a region, a label, a link) the value is shown as it is.
fn secret_bearing(path: &str) -> bool {
    // `probes[3].url` -> ("probes", "url"): a key right under one item of a top list.
    let item_key = path
        .split_once('[')
        .and_then(|(list, rest)| Some((list, rest.split_once("].")?.1)));
    path.contains(".headers.")
        || match item_key {
            Some(("probes", key)) => key == "url" || is_secret::<Kind>(key),
            Some(("receivers", key)) => key == "url" || is_secret::<ReceiverKind>(key),
            _ => false,
        }
        || matches!(
            path,
            "agent.remote_write.url"
                | "agent.remote_write.bearer_token"
                | "agent.remote_write.basic_auth.username"
                | "agent.remote_write.basic_auth.password"
                | "agent.tracing.otlp_endpoint"
        )
}

/// `${VAR}` in every string value of the file, once, before any section is read: one
/// mechanism for every key (a header, a model, a label, a receiver's URL), so no key
/// is left out and none is substituted twice (`$$` stays a literal `$`). A variable
/// that is not set is reported at its value, and the key is settled: the checks that
/// follow say nothing more about it. Mapping keys (header and label names) are not
/// values and are left as written.
///
/// Gives the values `env` put where credentials go (see [`secret_bearing`]): they are
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
            let used = std::cell::RefCell::new(Vec::new());
            let env = |name: &str| {
                let value = (s.env)(name);
                used.borrow_mut().extend(value.clone());
                value
            };
            match substitute_env(template, &env) {
                Ok(value) => {
                    *template = value;
                    if secret_bearing(path) {
                        s.secrets.extend(used.into_inner());
                    }
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
    use super::secret_bearing;

    #[test]
    fn secret_bearing_keys_are_the_credentials_places_only() {
        for path in [
            "probes[0].url",
            "probes[12].body",
            "probes[0].headers.Authorization",
            "defaults.headers.X-Api-Key",
            "receivers[1].url",
            "receivers[0].routing_key",
            "receivers[0].headers.Authorization",
            "agent.remote_write.url",
            "agent.remote_write.bearer_token",
            "agent.remote_write.basic_auth.password",
            "agent.remote_write.headers.X-Scope-OrgID",
            "agent.tracing.otlp_endpoint",
            "agent.tracing.headers.x-api-key",
        ] {
            assert!(secret_bearing(path), "{path}");
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
            assert!(!secret_bearing(path), "{path}");
        }
    }
}
