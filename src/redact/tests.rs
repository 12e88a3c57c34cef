//! The redactor's tests: every form a secret can take on the way out.

use super::*;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};

const TOKEN: &str = "sk-live-4f9Kq2ZxP7mB1wRt";

fn redactor() -> Redactor {
    let mut r = Redactor::default();
    r.add(&format!("Bearer {TOKEN}"));
    r
}

fn assert_clean(r: &Redactor, text: &str, secret_bits: &[&str]) {
    let out = r.clean(text);
    for bit in secret_bits {
        assert!(
            !out.to_ascii_lowercase().contains(&bit.to_ascii_lowercase()),
            "{bit:?} survives in {out:?} (from {text:?})"
        );
    }
    assert!(out.contains(REDACTED), "{out:?}");
}

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

#[test]
fn case_variants_are_redacted() {
    let r = redactor();
    for text in [
        TOKEN.to_uppercase(),
        TOKEN.to_lowercase(),
        format!("authorization: BEARER {}", TOKEN.to_uppercase()),
    ] {
        assert_clean(&r, &text, &[&TOKEN[3..]]);
    }
}

#[test]
fn base64_of_the_secret_in_any_wrapper_and_alphabet_is_redacted() {
    let r = redactor();
    let wrapped = [
        TOKEN.to_owned(),
        format!("Bearer {TOKEN}"),
        format!("user:{TOKEN}"),
        format!("x{TOKEN}"),
        format!("xy{TOKEN}yz"),
        format!("{{\"key\":\"{TOKEN}\"}}"),
    ];
    for plain in &wrapped {
        for encoded in [
            STANDARD.encode(plain),
            STANDARD_NO_PAD_ENGINE.encode(plain),
            URL_SAFE.encode(plain),
            URL_SAFE_NO_PAD.encode(plain),
        ] {
            let text = format!("echo: {encoded} end");
            let out = r.clean(&text);
            assert!(out.contains(REDACTED), "{plain:?} as {encoded} kept: {out}");
            // What is left of the encoded text no longer decodes to the secret.
            assert!(out.len() < text.len(), "{out}");
            let left = out.replace(REDACTED, "");
            assert!(!left.contains(&encoded[encoded.len() / 2..]), "{out}");
        }
    }
}

#[test]
fn hex_and_query_encoded_base64_are_redacted() {
    let r = redactor();
    let hex: String = TOKEN.bytes().map(|b| format!("{b:02X}")).collect();
    assert_clean(&r, &format!("dump {hex}"), &[&hex[4..hex.len() - 4]]);
    let b64 = STANDARD.encode(format!("Bearer {TOKEN}"));
    let in_query = b64.replace('+', "%2B").replace('/', "%2F").replace('=', "%3D");
    let out = r.clean(&format!("GET /?auth={in_query}"));
    assert!(out.contains(REDACTED), "{out}");
    assert!(!out.contains(&in_query[12..in_query.len() - 6]), "{out}");
}

/// Many random secrets, each echoed in a random one of the forms servers use, in
/// random company, cut or masked at random: nothing of it may be left. A fixed seed
/// keeps it repeatable.
#[test]
fn random_secrets_in_random_forms_leave_nothing() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789-_+/=.~";
    const WORDS: [&str; 6] = [
        "error:",
        "the key",
        "was rejected",
        "(code 401)",
        "see docs",
        "for user",
    ];
    for round in 0..1000 {
        let len = 8 + next(40);
        // Start with a letter so the secret is a word of its own.
        let secret: String = std::iter::once('k')
            .chain((1..len).map(|_| ALPHABET[next(ALPHABET.len())] as char))
            .collect();
        let mut r = Redactor::default();
        match next(3) {
            0 => r.add(&format!("Bearer {secret}")),
            1 => r.add(&secret),
            _ => r.add_basic("user", &secret),
        }
        let before = WORDS[next(WORDS.len())];
        let after = WORDS[next(WORDS.len())];
        let wrapper = ["", "Bearer ", "user:", "x", "xy", "{\"k\":\""][next(6)];
        let plain = format!("{wrapper}{secret}");
        let (shown, region): (String, Option<(usize, usize)>) = match next(9) {
            0 => (secret.to_uppercase(), None),
            1 => (secret.to_lowercase(), None),
            2 => (percent_encode(&secret), None),
            3..=6 => {
                let e = [STANDARD, URL_SAFE, URL_SAFE_NO_PAD, STANDARD_NO_PAD_ENGINE][next(4)].encode(&plain);
                // The characters that depend on the secret alone, with a margin.
                let p = wrapper.len();
                let from = (4 * p).div_ceil(3) + 4;
                let to = (4 * (p + secret.len()) / 3).saturating_sub(4);
                (e, (to >= from + 8).then_some((from, to)))
            }
            _ => (plain.clone(), None),
        };
        let text = format!("{before} {shown} {after}");
        let out = r.clean(&text);
        match region {
            Some((from, to)) => assert!(
                !out.contains(&shown[from..to]),
                "round {round}: base64 of {plain:?} left in {out:?}"
            ),
            None => {
                let lower = out.to_ascii_lowercase();
                let s = secret.to_ascii_lowercase();
                let p = percent_encode(&secret).to_ascii_lowercase();
                for w in (0..=s.len() - 6).map(|i| &s[i..i + 6]) {
                    assert!(
                        !lower.contains(w) || WORDS.iter().any(|x| x.contains(w)),
                        "round {round}: {w:?} of {secret:?} left in {out:?}"
                    );
                }
                assert!(!lower.contains(&p[..p.len().min(12)]), "round {round}: {out:?}");
            }
        }
        // Cut inside the secret, by us or by someone else, and masked.
        let cut_at = 4 + next(secret.len() - 4);
        let head = format!("{before} {}", &secret[..cut_at]);
        let mut ours_text = head.clone();
        ours_text.push_str(&secret[cut_at..]);
        let ours = r.shorten(&ours_text, head.chars().count());
        for theirs in [
            r.clean(&format!("{head}…")),
            r.clean(&format!("{head}...")),
            r.clean_cut(&head),
            ours,
        ] {
            assert!(
                !theirs.contains(&secret[..4]),
                "round {round}: the start of {secret:?} left in {theirs:?}"
            );
        }
        let tail = &secret[secret.len() - (4 + next(5)).min(secret.len() - 1)..];
        let mask = ["****", "...", "…", "••••", "xxxxxx", "####"][next(6)];
        let masked = r.clean(&format!("{before} sk-{mask}{tail} {after}"));
        assert!(
            !masked.contains(&format!("{mask}{tail}")),
            "round {round}: the tail of {secret:?} left in {masked:?}"
        );
        // Multi-byte characters around and between pieces: never a panic, never
        // a broken character.
        const NOISE: [&str; 8] = ["é", "€", "😀", "…", "•", "*", "\\", " "];
        let mut noisy = String::new();
        for _ in 0..12 {
            noisy.push_str(NOISE[next(NOISE.len())]);
            let a = next(secret.len());
            let b = (a + 1 + next(secret.len() - a)).min(secret.len());
            noisy.push_str(&secret[a..b]);
        }
        for cleaned in [r.clean(&noisy), r.clean_cut(&noisy), r.shorten(&noisy, next(40))] {
            assert!(!cleaned.contains(&secret), "round {round}: {cleaned:?}");
        }
    }
}

const STANDARD_NO_PAD_ENGINE: base64::engine::GeneralPurpose =
    base64::engine::general_purpose::STANDARD_NO_PAD;

#[test]
fn masked_tails_and_heads_are_redacted() {
    let r = redactor();
    let tail = &TOKEN[TOKEN.len() - 4..];
    for text in [
        format!("Incorrect API key provided: sk-...{tail}."),
        format!("key ****{tail} is revoked"),
        format!("key ••••{tail}"),
        format!("key {}…{tail}", &TOKEN[..7]),
        format!("key {}****", &TOKEN[..10]),
        format!("key sk-xxxxxxxxxxxx{tail}"),
        format!("key ####{tail}"),
    ] {
        let out = r.clean(&text);
        assert!(!out.contains(tail) || text.ends_with("****"), "{out}");
        assert!(!out.contains(&TOKEN[..7]), "{out}");
        assert!(out.contains(REDACTED), "{out}");
    }
    // A mask next to words that are not the secret's stays as it was.
    let text = "loading... done; password ****";
    assert_eq!(r.clean(text), text);
}

#[test]
fn a_cut_leaves_no_prefix_of_a_secret() {
    let r = redactor();
    let text = format!("invalid token {TOKEN} for model m");
    // Every cut through the token: the redactor's own shortening...
    for max in 14..text.chars().count() {
        let out = r.shorten(&text, max);
        assert!(out.chars().count() <= max + 1, "{out}");
        assert!(!out.contains(&TOKEN[..4]), "cut at {max}: {out}");
    }
    // ...and text another party cut (an ellipsis marks it, or a capped read).
    for n in 4..TOKEN.len() {
        let cut = format!("invalid token {}", &TOKEN[..n]);
        assert!(!r.clean(&format!("{cut}...")).contains(&TOKEN[..4]), "{cut}");
        assert!(!r.clean(&format!("{cut}…")).contains(&TOKEN[..4]), "{cut}");
        assert!(!r.clean_cut(&cut).contains(&TOKEN[..4]), "{cut}");
    }
    // A longer piece at a word's end is a secret's even with no cut marked.
    let out = r.clean(&format!("token '{}' rejected", &TOKEN[..9]));
    assert_eq!(out, "token '<redacted>' rejected");
}

/// A secret right after a JSON escape (`\n` then the token) leaves a JSON line valid.
#[test]
fn json_text_stays_json() {
    let mut r = Redactor::default();
    r.add("nsecret-1234567");
    let line = serde_json::json!({"error": "a\nsecret-1234567 and \\nsecret-12345…"}).to_string();
    let out = r.clean(&line);
    assert!(out.contains(REDACTED), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(!v["error"].as_str().unwrap().contains("secret-1"), "{v}");
}

#[test]
fn shortening_never_splits_the_marker() {
    let r = redactor();
    let out = r.shorten(&format!("abc {TOKEN} and more text"), 8);
    assert_eq!(out, "abc …");
}

#[test]
fn ordinary_text_is_untouched() {
    let r = redactor();
    for text in [
        "HTTP 500: internal server error",
        "connect: connection refused (os error 111)",
        "expected status [200], got 404...",
        "Bearer token required",
    ] {
        assert_eq!(r.clean(text), text);
    }
    assert_eq!(Redactor::default().clean("anything"), "anything");
    assert_eq!(format!("{:?}", r), "Redactor(2 secrets)");
}

#[test]
fn descriptive_header_values_are_redacted_whole_only() {
    let mut r = Redactor::default();
    r.add_header(&http::header::CONTENT_TYPE, "application/json");
    r.add_header(&http::HeaderName::from_static("x-api-key"), "applesauce-key");
    assert_eq!(r.clean("got application/json"), "got <redacted>");
    assert_eq!(
        r.clean("application error… and \"applesauce\" rejected"),
        "application error… and \"<redacted>\" rejected"
    );
}

#[test]
fn a_refused_config_leaves_the_running_secrets_in_force() {
    let shared = SharedRedactor::new(redactor());
    let mut other = Redactor::default();
    other.add("other-secret-123");
    drop(shared.replace_until_kept(other.clone()));
    assert_eq!(shared.current().clean(TOKEN), REDACTED);
    shared.replace_until_kept(other).keep();
    assert_eq!(shared.current().clean(TOKEN), TOKEN);
    assert_eq!(shared.current().clean("other-secret-123"), REDACTED);
}

#[test]
fn short_values_are_not_secrets() {
    let mut r = Redactor::default();
    r.add("json");
    assert!(r.is_empty());
    assert_eq!(r.clean("json"), "json");
}

#[test]
fn query_values_are_secrets_by_name_or_shape_not_by_length_alone() {
    for (k, v) in [
        ("api_key", "abcdefgh"),
        ("access_token", "plainwords"),
        ("X-Amz-Signature", "deadbeefcafe"),
        ("password", "hunter22"),
        ("k", "Zx8Kq2Lm9Pq4Rt7W"),
        ("blob", "abcdefghijklmnopqrstuvwxyzabcdefgh"),
        ("api%5Fkey", "abcdefgh"),
    ] {
        assert!(query_value_is_secret(k, v), "{k}={v} must be a secret");
    }
    for (k, v) in [
        ("fault", "http_500"),
        ("deployment", "canary-eu-west"),
        ("model_version", "2024-06-01"),
    ] {
        assert!(!query_value_is_secret(k, v), "{k}={v} is not a secret");
    }
    let mut r = Redactor::default();
    r.add_url_parts("https://h.example/v1?fault=http_500&api_key=abcdefgh12", false);
    assert_eq!(
        r.clean("?fault=http_500&api_key=abcdefgh12"),
        "?fault=http_500&api_key=<redacted>"
    );
}

#[test]
fn an_endpoint_url_keeps_its_host_and_path_and_loses_its_credentials() {
    let mut r = Redactor::default();
    r.add_url_parts(
        "https://sk-user-0123456789:pa%24s-0123456789@eu-gw.example.com:8443/openai/deployments/gpt-4o-mini-prod/chat?api-version=2024-06-01&api_key=plainwords",
        false,
    );
    assert_eq!(
        r.clean("POST https://eu-gw.example.com:8443/openai/deployments/gpt-4o-mini-prod/chat?api-version=2024-06-01 as sk-user-0123456789 / pa$s-0123456789 / pa%24s-0123456789 with plainwords"),
        "POST https://eu-gw.example.com:8443/openai/deployments/gpt-4o-mini-prod/chat?api-version=2024-06-01 as <redacted> / <redacted> / <redacted> with <redacted>"
    );
    // A webhook's URL loses its long path segments too: its token is there.
    let mut r = Redactor::default();
    r.add_url("https://open.feishu.cn/open-apis/bot/v2/hook/0a1b2c3d-4e5f-6789-abcd-ef0123456789");
    assert_eq!(
        r.clean("hook 0a1b2c3d-4e5f-6789-abcd-ef0123456789 refused"),
        "hook <redacted> refused"
    );
}
