//! Removing configured secrets from text that comes back from servers. Error bodies
//! sometimes echo what they received — an API key, a routing key, a token in a URL —
//! and that text goes into logs, run results, pages and metrics' neighbours. Whoever
//! holds secrets builds a [`Redactor`] from them and cleans every server text with it.
//! A leaf module.

/// Secrets shorter than this are not redacted: short values (`1`, `json`) are not
/// credentials and replacing them would garble messages.
const MIN_SECRET: usize = 8;

#[derive(Debug, Default, Clone)]
pub struct Redactor {
    /// Longest first, so a secret containing another is replaced whole.
    secrets: Vec<String>,
}

impl Redactor {
    /// A header value or key: the whole value and each word of it (the token of
    /// `Bearer x`).
    pub fn add(&mut self, value: &str) {
        for part in std::iter::once(value).chain(value.split_whitespace()) {
            self.push(part);
        }
    }

    /// A URL's secret parts: the userinfo password, every query value (as written and
    /// decoded, since servers echo either), and long path segments (webhook URLs such as
    /// Slack's carry their token in the path).
    pub fn add_url(&mut self, url: &str) {
        let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
        let (authority, rest) = after_scheme
            .split_once('/')
            .map_or((after_scheme, ""), |(a, r)| (a, r));
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
        {
            self.push(password);
            self.push(&percent_decode(password));
        }
        let (path, query) = rest.split_once('?').map_or((rest, ""), |(p, q)| (p, q));
        let query = query.split('#').next().unwrap_or_default();
        for (_, v) in query.split('&').filter_map(|kv| kv.split_once('=')) {
            self.push(v);
            self.push(&percent_decode(v));
            // Form encoding writes a space as `+`.
            self.push(&percent_decode(&v.replace('+', " ")));
        }
        for segment in path.split('/') {
            if segment.len() >= 2 * MIN_SECRET {
                self.push(segment);
            }
        }
    }

    /// Basic credentials: the password, and the encoded pair as it travels (a server
    /// echoing its `Authorization` header shows that).
    pub fn add_basic(&mut self, user: &str, password: &str) {
        use base64::Engine as _;
        self.push(password);
        self.push(&base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")));
    }

    fn push(&mut self, secret: &str) {
        if secret.len() >= MIN_SECRET && !self.secrets.iter().any(|s| s == secret) {
            self.secrets.push(secret.to_owned());
            self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    pub fn clean(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "<redacted>");
            }
        }
        out
    }
}

/// `%XX` decoded (invalid sequences kept as they are): URL userinfo and query values.
pub fn percent_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_for_echoed_secrets() {
        assert_eq!(percent_decode("a%2Fb%3D%3D+c"), "a/b==+c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%e2%82%ac"), "%zz€");
    }

    #[test]
    fn url_secrets_in_every_place_a_url_keeps_them() {
        let mut r = Redactor::default();
        r.add_url("https://user:pa%24%24word1@hooks.example.com/services/T0001/B0002/abcdefghijklmnopqrstuvwx?token=abc%2Fdef%2Bghi&x=1");
        r.add("Bearer tok-123456789");
        let cleaned = r.clean(
            "pa$$word1 pa%24%24word1 abcdefghijklmnopqrstuvwx abc/def+ghi abc%2Fdef%2Bghi tok-123456789 T0001 x=1",
        );
        assert_eq!(
            cleaned,
            "<redacted> <redacted> <redacted> <redacted> <redacted> <redacted> T0001 x=1"
        );
    }
}
