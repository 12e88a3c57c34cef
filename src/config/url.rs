//! The one URL parser: every URL the agent reads (a probe's `url`, receivers' `url`,
//! `agent.remote_write.url`, `agent.external_url`, `alert.runbook_url`, and
//! `report --prometheus`) goes through [`parse_url`], so that what `check` accepts is
//! what is dialled.
//!
//! Why WHATWG parsing (the `url` crate) plus our own checks: `http::Uri` takes
//! `http://127.0.0.1:99999/` and the client then dials port 80, so a probe reported
//! `ok 200` for an endpoint that does not exist. The WHATWG parser is what browsers run;
//! on top of it we refuse what it would silently repair and curl would not: no `//`
//! after the scheme (`http:host`), an empty host (`http:///x` would become host `x`),
//! backslashes (browsers read `\` as `/`, other clients do not: two parsers, two hosts),
//! spaces and control characters, a fragment (never sent), and port 0. The accepted URL
//! is used in its WHATWG serialization (host lower-cased, IDNA to punycode, unsafe
//! characters percent-encoded), the form every client agrees on.
//!
//! No message echoes the URL: it may hold a secret (a Slack webhook, an API key in the
//! query string).

use std::str::FromStr;

pub use url::Url;

/// Why a URL is refused. Each message reads after the key (`probes[0].url: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("is empty")]
    Empty,
    #[error("holds a space or a control character, which must be percent-encoded (%20)")]
    Whitespace,
    #[error("must start with http:// or https://")]
    Scheme,
    /// No `scheme://` at all (`localhost:8000/v1/...`): the common slip, named with its fix.
    #[error("has no scheme: add `http://` or `https://` before the host")]
    NoScheme,
    #[error("has a backslash, which browsers read as `/` and other clients do not; percent-encode it (%5C)")]
    Backslash,
    #[error("has no host")]
    NoHost,
    #[error("has port {0}, out of range: ports are 1 to 65535")]
    PortRange(String),
    #[error("has a port that is not a number 1 to 65535")]
    Port,
    #[error("has an invalid host ({0})")]
    Host(String),
    #[error("has a fragment (`#...`), which is never sent; a `#` that belongs to the URL is written %23")]
    Fragment,
    #[error("is not a valid URL ({0})")]
    Invalid(String),
}

/// Parses an `http://` or `https://` URL as a browser would, and refuses what a browser
/// or curl would refuse or read differently (see the module doc). Leading and trailing
/// whitespace (a newline from `${VAR}`) is ignored.
pub fn parse_url(text: &str) -> Result<Url, UrlError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(UrlError::Empty);
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::Whitespace);
    }
    let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &text[7..]
    } else if lower.starts_with("https://") {
        &text[8..]
    } else if !text.contains("://")
        && !text.starts_with('/')
        && !lower.starts_with("http:")
        && !lower.starts_with("https:")
    {
        return Err(UrlError::NoScheme);
    } else {
        return Err(UrlError::Scheme);
    };
    if text.contains('\\') {
        return Err(UrlError::Backslash);
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host_port.is_empty() || host_port.starts_with(':') {
        return Err(UrlError::NoHost);
    }
    // The port after an IPv6 literal's `]`, or after the last `:` of a name.
    let port = match host_port.rfind(']') {
        Some(end) => host_port[end + 1..].strip_prefix(':'),
        None => host_port.rsplit_once(':').map(|(_, p)| p),
    };
    if let Some(port) = port.filter(|p| !p.is_empty()) {
        if !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(UrlError::Port);
        }
        if port.len() > 10 {
            return Err(UrlError::PortRange(format!("{}...", &port[..10])));
        }
        if !port.parse::<u32>().is_ok_and(|p| (1..=65_535).contains(&p)) {
            return Err(UrlError::PortRange(port.to_owned()));
        }
    }
    if text.contains('#') {
        return Err(UrlError::Fragment);
    }
    let url = Url::parse(text).map_err(|e| match e {
        url::ParseError::EmptyHost => UrlError::NoHost,
        url::ParseError::InvalidPort => UrlError::Port,
        // The url crate reports a forbidden character through IDNA processing.
        url::ParseError::IdnaError | url::ParseError::InvalidDomainCharacter => {
            UrlError::Host("not a valid host name".into())
        }
        url::ParseError::InvalidIpv4Address => UrlError::Host("not a valid IPv4 address".into()),
        url::ParseError::InvalidIpv6Address => UrlError::Host("not a valid IPv6 address".into()),
        other => UrlError::Invalid(other.to_string()),
    })?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(UrlError::NoHost);
    }
    Ok(url)
}

/// The same URL as the HTTP client takes it. Every URL [`parse_url`] accepts converts;
/// the error is kept so that a disagreement between the two crates is a config error,
/// never a panic.
pub fn to_uri(url: &Url) -> Result<http::Uri, UrlError> {
    http::Uri::from_str(url.as_str()).map_err(|e| UrlError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_curl_and_browsers_take_are_taken_in_their_canonical_form() {
        for (given, canonical) in [
            (
                "http://127.0.0.1:8000/v1/chat/completions",
                "http://127.0.0.1:8000/v1/chat/completions",
            ),
            ("HTTPS://API.Example.COM/v1?key=a b", ""),
            ("https://api.example.com", "https://api.example.com/"),
            ("https://api.example.com:443/x", "https://api.example.com/x"),
            ("http://[::1]:9093/api", "http://[::1]:9093/api"),
            (
                "http://user:p%40ss@h.example:65535/",
                "http://user:p%40ss@h.example:65535/",
            ),
            ("  http://h.example/\n", "http://h.example/"),
            (
                "http://h.example/a?q=\"x\"&r=<y>",
                "http://h.example/a?q=%22x%22&r=%3Cy%3E",
            ),
            ("http://bücher.example/", "http://xn--bcher-kva.example/"),
        ] {
            match parse_url(given) {
                Ok(u) if !canonical.is_empty() => {
                    assert_eq!(u.as_str(), canonical, "{given:?}");
                    assert_eq!(to_uri(&u).unwrap().to_string(), canonical, "{given:?}");
                }
                Ok(u) => panic!("{given:?} accepted as {u}"),
                Err(e) => assert!(canonical.is_empty(), "{given:?}: {e}"),
            }
        }
    }

    #[test]
    fn urls_that_would_be_dialled_elsewhere_or_not_at_all_are_refused() {
        use UrlError::*;
        for (given, want) in [
            ("", Empty),
            ("http://127.0.0.1:99999/health", PortRange("99999".into())),
            ("http://127.0.0.1:65536/", PortRange("65536".into())),
            ("http://127.0.0.1:0/", PortRange("0".into())),
            (
                "http://h:99999999999999999999/",
                PortRange("9999999999...".into()),
            ),
            ("http://[::1]:70000/", PortRange("70000".into())),
            ("http://h:80a/", Port),
            ("http://h:-1/", Port),
            ("127.0.0.1:8000/health", NoScheme),
            ("localhost:8000/v1/chat/completions", NoScheme),
            ("api.example.com/health", NoScheme),
            ("//h.example/", Scheme),
            ("ftp://h.example/", Scheme),
            ("file:///etc/passwd", Scheme),
            ("http:h.example", Scheme),
            ("http:/h.example", Scheme),
            ("http:///h.example/x", NoHost),
            ("http://", NoHost),
            ("http://:80/", NoHost),
            ("http://user@/", NoHost),
            ("http://h.example\\@evil.example/", Backslash),
            ("http://h .example/", Whitespace),
            ("http://h.example/a b", Whitespace),
            ("http://h.example/\0", Whitespace),
            ("http://h.example/\u{1b}[31m", Whitespace),
            ("http://h.example/#x", Fragment),
            ("http://256.1.1.1/", Host("not a valid IPv4 address".into())),
            ("http://[::1/", Host("not a valid IPv6 address".into())),
            ("http://a<b/", Host("not a valid host name".into())),
            ("http://a%00b/", Host("not a valid host name".into())),
            ("http://a^b/", Host("not a valid host name".into())),
        ] {
            assert_eq!(parse_url(given).map(|u| u.to_string()), Err(want), "{given:?}");
        }
    }

    #[test]
    fn no_message_echoes_the_url() {
        let secret = "sk-marker-7f3a";
        for given in [
            format!("http://h.example/{secret} x"),
            format!("ftp://{secret}/"),
            format!("http://{secret}:99a/"),
            format!("http://h.example/?k={secret}#"),
        ] {
            let e = parse_url(&given).unwrap_err().to_string();
            assert!(!e.contains(secret), "{e}");
        }
    }
}
