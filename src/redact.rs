//! Removing configured secrets from text that comes back from servers. Error bodies
//! sometimes echo what they received — an API key, a routing key, a token in a URL —
//! and that text goes into logs, run results, pages and metrics' neighbours. One
//! [`Redactor`] is built per config by [`Redactor::for_config`] (the only place that
//! knows which config values are secret) and cleans every server text.
//!
//! Servers rarely echo a secret exactly as sent. What is caught, for every secret:
//! - the value as written, percent-encoded and JSON-escaped, in any ASCII case;
//! - its base64 in the standard and URL-safe alphabets, padded or not, and inside a
//!   longer base64 text (`Bearer <value>`, `user:<value>` or anything else encoded
//!   with it): every alignment of the value in the encoded stream is searched;
//! - a piece of it next to a cut or a mask: before an ellipsis (`…`, `...`), around
//!   a mask run (`****abcd`, `sk-...abcd`) and at the end of a text known to be cut,
//!   a prefix or suffix of 4 characters or more is removed (a key's last four, as
//!   providers print them, narrow a leaked key down to its owner);
//! - anywhere else, a prefix or suffix of 8 characters or more at a word boundary (a
//!   server that cut the echo itself).
//!
//! Values shorter than 8 characters are not secrets (`1`, `json`, a region `eu`):
//! replacing them would garble messages. Text is redacted before it is cut
//! ([`Redactor::shorten`]), so a cut never leaves a secret's start behind.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, RwLock};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::Engine as _;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::config::{Config, ProbeConfig, ReceiverConfig, RemoteWriteConfig, TracingConfig, names_a_secret};

/// Secrets shorter than this are not redacted: short values (`1`, `json`) are not
/// credentials and replacing them would garble messages.
const MIN_SECRET: usize = 8;
/// A piece of a secret next to a cut or a mask is removed from this length on.
const MIN_FRAGMENT: usize = 4;
/// What a secret becomes.
pub const REDACTED: &str = "<redacted>";

#[derive(Default, Clone)]
pub struct Redactor {
    /// The values as configured, each once.
    secrets: HashSet<String>,
    /// Every form searched for, ASCII lower-cased.
    forms: Vec<String>,
    /// The forms whose pieces are searched for too (as written, percent-encoded).
    pieces: Vec<String>,
    /// Built on first use after a change.
    index: OnceLock<Arc<Index>>,
}

/// The running config's redactor, shared by everything that cleans server words (probes,
/// receivers, remote_write) and replaced whole on a reload, so a probe the reload left
/// running is cleaned of the new config's secrets too.
#[derive(Clone, Default, Debug)]
pub struct SharedRedactor(Arc<RwLock<Arc<Redactor>>>);

impl SharedRedactor {
    pub fn new(r: Redactor) -> Self {
        SharedRedactor(Arc::new(RwLock::new(Arc::new(r))))
    }

    /// Every secret of `config` ([`Redactor::for_config`]), shared: how a command or a
    /// build starts.
    pub fn for_config(config: &Config) -> Self {
        SharedRedactor::new(Redactor::for_config(config))
    }

    pub fn current(&self) -> Arc<Redactor> {
        match self.0.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, r: Arc<Redactor>) {
        match self.0.write() {
            Ok(mut g) => *g = r,
            Err(poisoned) => *poisoned.into_inner() = r,
        }
    }

    /// Puts `r` in force until the returned guard is dropped, unless it is kept: a
    /// config is built with its own secrets, and a refused one leaves the running
    /// config's in force.
    pub fn replace_until_kept(&self, r: Redactor) -> Replaced {
        let previous = self.current();
        self.set(Arc::new(r));
        Replaced {
            shared: self.clone(),
            previous: Some(previous),
        }
    }
}

/// See [`SharedRedactor::replace_until_kept`].
pub struct Replaced {
    shared: SharedRedactor,
    previous: Option<Arc<Redactor>>,
}

impl Replaced {
    pub fn keep(mut self) {
        self.previous = None;
    }
}

impl Drop for Replaced {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            self.shared.set(previous);
        }
    }
}

/// The forms compiled for search.
struct Index {
    whole: Option<AhoCorasick>,
    /// Every 4-byte window of every piece form: (form, offset). Pieces of secrets are
    /// found from a window at the place where a piece would end or start.
    grams: HashMap<[u8; MIN_FRAGMENT], Vec<(u32, u32)>>,
}

// Secrets never print, not even in a debug dump.
impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    /// Every secret of a config: probes' headers and the credentials in their URLs,
    /// receivers' URLs, keys and headers, remote_write's and the OTLP exporter's
    /// credentials, and the value of every `${VAR}` that config found to be a secret by
    /// where it was put (a header, a body, a receiver, a query string) or by its name.
    pub fn for_config(config: &Config) -> Redactor {
        let mut r = Redactor::default();
        for p in &config.probes {
            r.add_probe(p);
        }
        for rc in &config.receivers {
            r.add_receiver(rc);
        }
        if let Some(rw) = &config.agent.remote_write {
            r.add_remote_write(rw);
        }
        if let Some(tracing) = &config.agent.tracing {
            r.add_tracing(tracing);
        }
        for s in &config.secrets {
            r.add(s.expose());
        }
        r
    }

    /// A probe's header values and the secret parts of its URL. Where it connects is
    /// shown on every page and in every failure (on-call must see which host failed), so
    /// its host, port and path are not secrets, and a long path segment (a model or
    /// deployment name) is not taken for a token: a secret in a probe's path comes
    /// through a `${VAR}` named as one (config registers it).
    pub fn add_probe(&mut self, p: &ProbeConfig) {
        for (name, value) in &p.headers {
            self.add_header(name, value.expose());
        }
        self.add_url_parts(&p.url.to_string(), false);
    }

    pub fn add_receiver(&mut self, rc: &ReceiverConfig) {
        self.add_url(rc.url.expose());
        for secret in rc.spec.secrets() {
            self.add(secret.expose());
        }
        for (name, value) in &rc.headers {
            self.add_header(name, value.expose());
        }
    }

    /// remote_write shows only its host; a long path segment is taken for a token, as
    /// gateways in front of a TSDB put one there.
    pub fn add_remote_write(&mut self, rw: &RemoteWriteConfig) {
        self.add_url(rw.url.expose());
        if let Some((user, password)) = &rw.basic_auth {
            self.add_basic(user, password.expose());
        }
        if let Some(token) = &rw.bearer_token {
            self.add(token.expose());
        }
        for (name, value) in &rw.headers {
            self.add_header(name, value.expose());
        }
    }

    /// The OTLP exporter shows only its collector's host, as remote_write does.
    pub fn add_tracing(&mut self, tracing: &TracingConfig) {
        self.add_url(tracing.otlp_endpoint.expose());
        for (name, value) in &tracing.headers {
            self.add_header(name, value.expose());
        }
    }

    /// A header value or key: the whole value and each word of it (the token of
    /// `Bearer x`).
    pub fn add(&mut self, value: &str) {
        let words: Vec<&str> = value.split_whitespace().collect();
        if words.len() > 1 && words.iter().any(|w| w.len() >= MIN_SECRET) {
            // Each long word gets every form; the whole value needs only its own (the
            // base64 of `Bearer <token>` holds the token's).
            self.push_as(value, false);
        } else {
            self.push(value);
        }
        for word in words {
            self.push(word);
        }
    }

    /// A configured header. Every value is redacted whole, but the values of headers
    /// that describe the request (`Content-Type: application/json`, `User-Agent`, an
    /// API version) are words, not credentials: only their written forms are looked
    /// for, not their pieces (every "application" at a word's end would be taken for a
    /// cut secret) nor their encodings.
    fn add_header(&mut self, name: &http::HeaderName, value: &str) {
        const DESCRIPTIVE: [&str; 11] = [
            "accept",
            "accept-encoding",
            "accept-language",
            "anthropic-beta",
            "anthropic-version",
            "cache-control",
            "connection",
            "content-encoding",
            "content-type",
            "openai-beta",
            "user-agent",
        ];
        if DESCRIPTIVE.contains(&name.as_str()) {
            self.push_as(value, false);
        } else {
            self.add(value);
        }
    }

    /// A URL's secret parts: the userinfo (as written and decoded, since servers echo
    /// either), the query values that are credentials, and long path segments (webhook
    /// URLs such as Slack's carry their token in the path).
    pub fn add_url(&mut self, url: &str) {
        self.add_url_parts(url, true);
    }

    /// As [`add_url`](Self::add_url), the path taken for a token in its long segments
    /// only with `long_segments`.
    pub fn add_url_parts(&mut self, url: &str, long_segments: bool) {
        let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
        let (authority, rest) = after_scheme
            .split_once('/')
            .map_or((after_scheme, ""), |(a, r)| (a, r));
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            // The user too: a key is often the user of a URL (`https://<key>@host`).
            self.push(user);
            self.push(&percent_decode(user));
            self.push(password);
            self.push(&percent_decode(password));
            self.add_basic(&percent_decode(user), &percent_decode(password));
        }
        let (path, query) = rest.split_once('?').map_or((rest, ""), |(p, q)| (p, q));
        let query = query.split('#').next().unwrap_or_default();
        for (k, v) in query.split('&').filter_map(|kv| kv.split_once('=')) {
            if !query_value_is_secret(k, v) {
                continue;
            }
            self.push(v);
            self.push(&percent_decode(v));
            // Form encoding writes a space as `+`.
            self.push(&percent_decode(&v.replace('+', " ")));
        }
        for segment in path.split('/').filter(|_| long_segments) {
            if segment.len() >= 2 * MIN_SECRET {
                self.push(segment);
            }
        }
    }

    /// Basic credentials: the password, and the encoded pair as it travels (found by
    /// the password's own base64 forms too, unless the password is short).
    pub fn add_basic(&mut self, user: &str, password: &str) {
        self.push(password);
        self.push(&base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")));
    }

    fn push(&mut self, secret: &str) {
        self.push_as(secret, true);
    }

    /// `derived`: whether its encodings and pieces (a start before a cut, a tail after
    /// a mask) are looked for too, or only the value as written and percent-encoded.
    fn push_as(&mut self, secret: &str, derived: bool) {
        if secret.len() < MIN_SECRET || !self.secrets.insert(secret.to_owned()) {
            return;
        }
        let (mut pieces, mut others) = forms_of(secret);
        if !derived {
            others = std::mem::take(&mut pieces);
        }
        for form in pieces.iter().chain(&others) {
            let form = form.to_ascii_lowercase();
            if form.len() >= MIN_SECRET {
                self.forms.push(form);
            }
        }
        self.pieces.extend(pieces.iter().map(|p| p.to_ascii_lowercase()));
        self.index = OnceLock::new();
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    fn index(&self) -> &Index {
        self.index.get_or_init(|| {
            let whole = (!self.forms.is_empty()).then(|| {
                AhoCorasickBuilder::new()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&self.forms)
                    .expect("literal patterns always build")
            });
            let mut grams: HashMap<[u8; MIN_FRAGMENT], Vec<(u32, u32)>> = HashMap::new();
            for (i, form) in self.pieces.iter().enumerate() {
                for (pos, w) in form.as_bytes().windows(MIN_FRAGMENT).enumerate() {
                    let gram: [u8; MIN_FRAGMENT] = w.try_into().expect("window size");
                    grams.entry(gram).or_default().push((i as u32, pos as u32));
                }
            }
            Arc::new(Index { whole, grams })
        })
    }

    /// `text` without any secret, in any of the forms above.
    pub fn clean(&self, text: &str) -> String {
        self.clean_inner(text, false)
    }

    /// As [`clean`](Self::clean), for a text that was cut at its end (a capped read):
    /// a trailing piece of a secret goes too.
    pub fn clean_cut(&self, text: &str) -> String {
        self.clean_inner(text, true)
    }

    /// At most `max` characters of `text`, redacted first, with an ellipsis when cut.
    /// The one way the agent shortens text that may hold server words. Not
    /// [`crate::human::shorten`]: a plain cut could leave half a `<redacted>` marker, or
    /// the start of a secret whose rest the cut removed (so it no longer matches).
    pub fn shorten(&self, text: &str, max: usize) -> String {
        let clean = self.clean(text);
        let mut cut = crate::human::first_chars(&clean, max).len();
        if cut == clean.len() {
            return clean;
        }
        // Never leave half a marker: `<redac…` reads as a broken page.
        if let Some(m) = clean[..cut].rfind(REDACTED.as_bytes()[0] as char)
            && REDACTED.starts_with(&clean[m..cut])
            && clean[m..].starts_with(REDACTED)
        {
            cut = m;
        }
        let head = &clean[..cut];
        let keep = self.piece_before(head, head.len(), MIN_FRAGMENT);
        format!("{}…", &head[..keep])
    }

    fn clean_inner(&self, text: &str, cut_at_end: bool) -> String {
        if self.forms.is_empty() {
            return text.to_owned();
        }
        let index = self.index();
        let out = match &index.whole {
            Some(ac) => {
                let mut out = String::with_capacity(text.len());
                let mut at = 0;
                for m in ac.find_iter(text) {
                    let start = escape_start(text, m.start()).max(at);
                    out.push_str(&text[at..start]);
                    out.push_str(REDACTED);
                    at = m.end();
                }
                out.push_str(&text[at..]);
                out
            }
            None => text.to_owned(),
        };
        // Pieces, found from the places a piece can sit: (start, end) ranges to drop.
        let bytes = out.as_bytes();
        let mut drop: Vec<(usize, usize)> = Vec::new();
        for (a, b) in mask_runs(&out) {
            // From every place in the run: the secret may itself hold a mask character
            // (`x`, `.`), which the run then swallowed.
            for at in (a..=b).filter(|&i| out.is_char_boundary(i)) {
                let s = self.piece_before(&out, at, MIN_FRAGMENT);
                if s < at {
                    drop.push((s, at));
                }
                let e = self.piece_after(&out, at, MIN_FRAGMENT);
                if e > at {
                    drop.push((at, e));
                }
            }
        }
        if cut_at_end {
            let s = self.piece_before(&out, out.len(), MIN_FRAGMENT);
            if s < out.len() {
                drop.push((s, out.len()));
            }
        }
        for i in 0..=bytes.len() {
            let after_sep = i == 0 || is_boundary(bytes[i - 1]);
            let before_sep = i == bytes.len() || is_boundary(bytes[i]);
            if before_sep && i > 0 && !after_sep {
                let s = self.piece_before(&out, i, MIN_SECRET);
                if s < i {
                    drop.push((s, i));
                }
            }
            if after_sep && i < bytes.len() && !before_sep {
                let e = self.piece_after(&out, i, MIN_SECRET);
                if e > i {
                    drop.push((i, e));
                }
            }
        }
        if drop.is_empty() {
            return out;
        }
        drop.sort_unstable();
        let mut cleaned = String::with_capacity(out.len());
        let mut at = 0;
        let mut i = 0;
        while i < drop.len() {
            // Overlapping and touching pieces become one marker.
            let (s, mut e) = drop[i];
            i += 1;
            while i < drop.len() && drop[i].0 <= e {
                e = e.max(drop[i].1);
                i += 1;
            }
            let s = escape_start(&out, s).max(at);
            if e <= s {
                continue;
            }
            cleaned.push_str(&out[at..s]);
            cleaned.push_str(REDACTED);
            at = e;
        }
        cleaned.push_str(&out[at..]);
        cleaned
    }

    /// The start of the longest piece of `text` ending at `end` that is a proper
    /// prefix of a form, `min` bytes or more; `end` if there is none.
    fn piece_before(&self, text: &str, end: usize, min: usize) -> usize {
        let b = text.as_bytes();
        if end < MIN_FRAGMENT || self.forms.is_empty() {
            return end;
        }
        let gram = lower_gram(&b[end - MIN_FRAGMENT..end]);
        let mut best = end;
        for &(f, pos) in self.index().grams.get(&gram).into_iter().flatten() {
            let form = self.pieces[f as usize].as_bytes();
            let len = pos as usize + MIN_FRAGMENT;
            if len < min || len >= form.len() || len > end || end - len >= best {
                continue;
            }
            let start = end - len;
            if b[start..end].eq_ignore_ascii_case(&form[..len]) && text.is_char_boundary(start) {
                best = start;
            }
        }
        best
    }

    /// The end of the longest piece of `text` starting at `start` that is a proper
    /// suffix of a form, `min` bytes or more; `start` if there is none.
    fn piece_after(&self, text: &str, start: usize, min: usize) -> usize {
        let b = text.as_bytes();
        if start + MIN_FRAGMENT > b.len() || self.forms.is_empty() {
            return start;
        }
        let gram = lower_gram(&b[start..start + MIN_FRAGMENT]);
        let mut best = start;
        for &(f, pos) in self.index().grams.get(&gram).into_iter().flatten() {
            let form = self.pieces[f as usize].as_bytes();
            let pos = pos as usize;
            let len = form.len() - pos;
            if pos == 0 || len < min || start + len > b.len() || start + len <= best {
                continue;
            }
            let end = start + len;
            if b[start..end].eq_ignore_ascii_case(&form[pos..]) && text.is_char_boundary(end) {
                best = end;
            }
        }
        best
    }
}

/// Where a redaction starting at `start` must start: before a backslash that would
/// otherwise escape the marker's `<` (`"\nsecret"` in a JSON log line must stay JSON).
fn escape_start(text: &str, start: usize) -> usize {
    let backslashes = text.as_bytes()[..start]
        .iter()
        .rev()
        .take_while(|&&b| b == b'\\')
        .count();
    // An even run is escaped backslashes; an odd one ends with an escape.
    start - backslashes % 2
}

fn lower_gram(w: &[u8]) -> [u8; MIN_FRAGMENT] {
    let mut g: [u8; MIN_FRAGMENT] = w.try_into().expect("gram size");
    g.make_ascii_lowercase();
    g
}

/// Where a word can start or end: a piece of a secret is looked for there.
fn is_boundary(b: u8) -> bool {
    b.is_ascii_whitespace()
        || matches!(
            b,
            b'"' | b'\''
                | b'`'
                | b'<'
                | b'>'
                | b'('
                | b')'
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b','
                | b';'
                | b'|'
                | b'='
                | b'&'
                | b'?'
                | b':'
                | b'/'
                | b'.'
                | b'!'
                | b'\\'
        )
}

/// Byte ranges of the masks and ellipses of `text`: a run of `*`, `•`, `#`, `…` and
/// `.` that holds one of the first four or at least two dots, and a run of four `x`
/// or more (`sk-xxxxxxxx1234`).
fn mask_runs(text: &str) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut xs: Option<(usize, usize)> = None;
    for (i, c) in text.char_indices() {
        match (c == 'x' || c == 'X', xs) {
            (true, None) => xs = Some((i, 1)),
            (true, Some((s, n))) => xs = Some((s, n + 1)),
            (false, Some((s, n))) => {
                if n >= 4 {
                    runs.push((s, i));
                }
                xs = None;
            }
            (false, None) => {}
        }
    }
    if let Some((s, n)) = xs
        && n >= 4
    {
        runs.push((s, text.len()));
    }
    let mut start: Option<usize> = None;
    let mut strong = false;
    let mut dots = 0;
    let mut close = |s: usize, e: usize, strong: bool, dots: usize| {
        if strong || dots >= 2 {
            runs.push((s, e));
        }
    };
    for (i, c) in text.char_indices() {
        let mask = matches!(c, '*' | '•' | '…' | '.' | '#');
        match (mask, start) {
            (true, None) => {
                start = Some(i);
                strong = c != '.';
                dots = usize::from(c == '.');
            }
            (true, Some(_)) => {
                strong |= c != '.';
                dots += usize::from(c == '.');
            }
            (false, Some(s)) => {
                close(s, i, strong, dots);
                start = None;
            }
            (false, None) => {}
        }
    }
    if let Some(s) = start {
        close(s, text.len(), strong, dots);
    }
    runs
}

/// The forms a secret is echoed in, before lower-casing: those whose pieces matter
/// (a start before a cut, a tail after a mask), and the others.
fn forms_of(secret: &str) -> (Vec<String>, Vec<String>) {
    let mut pieces = vec![secret.to_owned()];
    let encoded = percent_encode(secret);
    if encoded != secret {
        pieces.push(encoded);
    }
    let mut forms = Vec::new();
    if secret.contains('/') {
        forms.push(secret.replace('/', "\\/"));
    }
    forms.push(secret.bytes().map(|b| format!("{b:02x}")).collect());
    for core in base64_cores(secret.as_bytes()) {
        if core.contains(['+', '/']) {
            forms.push(core.replace('+', "-").replace('/', "_"));
        }
        // A base64 value in a query string.
        let encoded = percent_encode(&core);
        if encoded != core {
            forms.push(encoded);
        }
        forms.push(core);
    }
    (pieces, forms)
}

/// The part of the base64 text that depends on `secret` alone, for each of the three
/// places the secret can start in the encoded stream: what `Basic <pair>`,
/// `Bearer <value>` or any other wrapper shows of it once encoded.
fn base64_cores(secret: &[u8]) -> Vec<String> {
    let engine = base64::engine::general_purpose::STANDARD_NO_PAD;
    (0..3)
        .map(|k| {
            let mut bytes = vec![0u8; k];
            bytes.extend_from_slice(secret);
            let text = engine.encode(&bytes);
            // The first characters mix in the bytes before the secret; the last one
            // the bytes after it, unless the secret ends a 3-byte group.
            let skip = [0, 2, 3][k];
            let tail = usize::from(bytes.len() % 3 != 0);
            text[skip..text.len() - tail].to_owned()
        })
        .collect()
}

/// What a client percent-encodes in a query value: every byte but RFC 3986's unreserved
/// ones (letters, digits, `-`, `_`, `.`, `~`).
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Every byte but the unreserved ones as `%XX`, as a client encodes a query value.
fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

/// `%XX` decoded (invalid sequences kept as they are, bytes that are not UTF-8 replaced):
/// URL userinfo and query values.
pub fn percent_decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// Whether a query parameter of a URL is a credential: by its name (`api_key`, `token`,
/// `sig`, `password`, ...) or by its shape (long, letters and digits mixed, as keys are).
/// Other values (`?fault=http_500`, `?deployment=canary`) are shown, so probes that
/// differ only there can be told apart; a `${VAR}` written in the query string is a
/// secret whatever its name (config registers it).
fn query_value_is_secret(key: &str, value: &str) -> bool {
    let value = percent_decode(value);
    let credential_shaped = value.len() >= 16
        && value.chars().any(|c| c.is_ascii_alphabetic())
        && value.chars().any(|c| c.is_ascii_digit());
    names_a_secret(&percent_decode(key)) || credential_shaped || value.len() >= 32
}

#[cfg(test)]
mod tests;
