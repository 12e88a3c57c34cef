//! The web config: parsing, positions, header rules, client auth, the auth cache.

use super::*;

fn errors(text: &str) -> Vec<String> {
    match WebConfig::parse(text, Path::new("/nonexistent/web.yml")) {
        Ok(_) => Vec::new(),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

fn headers(config: &WebConfig) -> HeaderMap {
    let mut h = HeaderMap::new();
    config.add_headers(&mut h);
    h
}

#[test]
fn an_empty_file_is_plain_http_with_the_security_headers() {
    for text in ["", "---\n", "# nothing\n"] {
        let c = WebConfig::parse(text, Path::new("web.yml")).unwrap();
        assert!(!c.is_tls() && !c.has_basic_auth());
    }
    let h = headers(&WebConfig::default());
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["referrer-policy"], "no-referrer");
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"));
}

#[test]
fn every_problem_is_reported_with_its_position() {
    let e = errors("tls_server_config:\n  cert_file: a.pem\n  ciphers: [x]\n");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("/nonexistent/web.yml:3:3: "), "{e:?}");
    assert!(
        e[0].contains("tls_server_config.ciphers: unknown key `ciphers`, expected one of"),
        "{e:?}"
    );

    let e = errors(
        "tls_server_config:\n  cert_file: a.pem\n  key_file: a.key\n  client_auth_type: Sometimes\n  min_version: TLS10\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\nbasic_auth_users:\n  bob: plaintext\nrate_limit: {burst: 1}\n",
    );
    let want = [
        ":4:21: tls_server_config.client_auth_type: unknown value \"Sometimes\"",
        ":5:16: tls_server_config.min_version: TLS10 is not supported",
        ":6:3: tls_server_config.cipher_suites: not supported",
        ":2:14: tls_server_config.cert_file: cannot read /nonexistent/a.pem",
        ":3:13: tls_server_config.key_file: cannot read /nonexistent/a.key",
        ":8:8: basic_auth_users.bob: not a bcrypt hash",
        ":9:1: rate_limit: not supported",
    ];
    for w in want {
        assert!(e.iter().any(|e| e.contains(w)), "{w:?} not in {e:#?}");
    }
    assert_eq!(e.len(), want.len(), "{e:#?}");
}

#[test]
fn a_bcrypt_cost_that_would_stall_the_port_is_refused() {
    // Cost 31, written by hand: hashing one at load would take days.
    let hash = "$2y$31$abcdefghijklmnopqrstuu5qXJ0ITQzIqtDPAJZKQ1dWw/fD2Ql1S";
    let e = errors(&format!("basic_auth_users:\n  alice: '{hash}'\n"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("basic_auth_users.alice: bcrypt cost 31 is above 14"),
        "{e:?}"
    );
}

#[test]
fn only_regular_files_are_read() {
    let e = WebConfig::load(Path::new("/dev/zero")).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let dir = std::env::temp_dir().join(format!("inferprobe-webdev-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: /dev/zero\n  key_file: /dev/zero\n",
    )
    .unwrap();
    let e = WebConfig::load(&web).unwrap_err().to_string();
    assert!(e.contains("cert_file") && e.contains("not a regular file"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn no_error_repeats_a_value_that_may_be_a_secret() {
    for text in [
        "basic_auth_users:\n  alice: hunter2-plaintext\n",
        "basic_auth_users: hunter2-plaintext\n",
        "tls_server_config:\n  key: [hunter2-plaintext]\n",
    ] {
        let e = errors(text);
        assert!(!e.is_empty(), "{text}");
        assert!(!e.iter().any(|e| e.contains("hunter2")), "{e:?}");
    }
}

#[test]
fn only_the_exporter_headers_may_be_set_and_enumerations_are_checked() {
    let e = errors("http_server_config:\n  headers:\n    Server: nginx\n");
    assert!(
        e[0].contains(
            ":3:5: http_server_config.headers.Server: HTTP header \"Server\" can not be configured"
        ),
        "{e:?}"
    );
    let e = errors("http_server_config:\n  headers:\n    X-Frame-Options: allow-from x\n");
    assert!(
        e[0].contains("expected one of [\"deny\", \"sameorigin\"]"),
        "{e:?}"
    );
    let e = errors("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n");
    assert!(e[0].contains("expected one of [\"nosniff\"]"), "{e:?}");
    // Go's header names are exact.
    let e = errors("http_server_config:\n  headers:\n    x-frame-options: deny\n");
    assert_eq!(e.len(), 1, "{e:?}");

    let c = WebConfig::parse(
        "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: sameorigin\n    Content-Security-Policy: \"default-src 'self'\"\n    X-XSS-Protection: ''\n    Strict-Transport-Security: max-age=600\n",
        Path::new("web.yml"),
    )
    .unwrap();
    let h = headers(&c);
    assert_eq!(h["x-frame-options"], "sameorigin");
    assert_eq!(h["content-security-policy"], "default-src 'self'");
    assert_eq!(h["strict-transport-security"], "max-age=600");
    assert!(!h.contains_key("x-xss-protection"), "blank is unset");
    assert_eq!(h["x-content-type-options"], "nosniff", "ours stay");
    assert_eq!(h.get_all("x-frame-options").iter().count(), 1);
}

#[test]
fn client_auth_policies_and_their_cas_must_agree() {
    let dir = std::env::temp_dir().join(format!("inferprobe-webcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join("c.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.join("c.key"), cert.signing_key.serialize_pem()).unwrap();
    let file = dir.join("web.yml");
    let parse = |extra: &str| {
        WebConfig::parse(
            &format!("tls_server_config:\n  cert_file: c.pem\n  key_file: c.key\n{extra}"),
            &file,
        )
        .map_err(|e| e.to_string())
    };
    for policy in [
        "NoClientCert",
        "RequestClientCert",
        "RequireAnyClientCert",
        "RequireClientCert",
    ] {
        assert!(
            parse(&format!("  client_auth_type: {policy}\n"))
                .unwrap()
                .is_tls(),
            "{policy}"
        );
    }
    for policy in ["VerifyClientCertIfGiven", "RequireAndVerifyClientCert"] {
        let e = parse(&format!("  client_auth_type: {policy}\n")).unwrap_err();
        assert!(e.contains("give client_ca_file"), "{e}");
        assert!(
            parse(&format!(
                "  client_auth_type: {policy}\n  client_ca_file: c.pem\n"
            ))
            .is_ok()
        );
    }
    let e = parse("  client_ca_file: c.pem\n").unwrap_err();
    assert!(
        e.contains(":4:19: tls_server_config.client_ca_file: client CAs are configured without"),
        "{e}"
    );
    let e = parse("  min_version: TLS13\n  max_version: TLS12\n").unwrap_err();
    assert!(e.contains("max_version is below min_version"), "{e}");
    assert!(parse("  min_version: TLS13\n").is_ok());
    let e = parse("  cert: inline\n").unwrap_err();
    assert!(e.contains("give cert or cert_file, not both"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn basic_auth_checks_the_hash_once_and_caches_the_verdict() {
    let hash = bcrypt::hash("right", 4).unwrap();
    let c = WebConfig::parse(
        &format!("basic_auth_users:\n  alice: '{hash}'\nauth_excluded_paths: [/healthz]\n"),
        Path::new("web.yml"),
    )
    .unwrap();
    assert_eq!(c.authorize(&request("/metrics", None)).await, Access::Denied);
    assert_eq!(
        c.authorize(&request("/metrics", Some("alice:wrong"))).await,
        Access::Denied
    );
    assert_eq!(
        c.authorize(&request("/metrics", Some("mallory:right"))).await,
        Access::Denied
    );
    assert_eq!(
        c.authorize(&request("/metrics", Some("alice:right"))).await,
        Access::Granted
    );
    assert_eq!(c.authorize(&request("/healthz", None)).await, Access::Granted);
    let auth = c.auth.as_ref().unwrap();
    assert_eq!(auth.cache.lock().unwrap().len(), 3, "each verdict cached");
    // No password is kept in the clear.
    assert!(!format!("{:?}", auth.cache.lock().unwrap()).contains("right"));
    assert_eq!(
        c.authorize(&request("/metrics", Some("alice:right"))).await,
        Access::Granted
    );
    assert!(!format!("{c:?}").contains(&hash), "the hash stays out of Debug");
    // A flood of wrong passwords fills the cache; the good verdict stays in it.
    for i in 0..AUTH_CACHE_ENTRIES {
        let guess = format!("alice:guess-{i}");
        assert_eq!(
            c.authorize(&request("/metrics", Some(&guess))).await,
            Access::Denied
        );
    }
    {
        let cache = auth.cache.lock().unwrap();
        assert!(cache.len() < AUTH_CACHE_ENTRIES, "{}", cache.len());
        assert!(
            cache.values().any(|granted| *granted),
            "the good verdict was evicted"
        );
    }

    // A reload keeps the good verdicts of users whose hash is unchanged, and only those.
    let other = bcrypt::hash("other", 4).unwrap();
    let reloaded = |users: &str| {
        let mut fresh = WebConfig::parse(users, Path::new("web.yml")).unwrap();
        fresh.keep_verdicts_from(&c);
        fresh.auth.unwrap().cache.into_inner().unwrap()
    };
    let same = reloaded(&format!(
        "basic_auth_users:\n  alice: '{hash}'\n  bob: '{other}'\n"
    ));
    assert_eq!(same.len(), 1, "{same:?}");
    assert!(same.keys().all(|(user, _)| user == "alice") && same.values().all(|g| *g));
    let changed = reloaded(&format!("basic_auth_users:\n  alice: '{other}'\n"));
    assert!(changed.is_empty(), "a changed password must be checked anew");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_uncached_checks_is_refused_beyond_the_queue_not_queued() {
    let hash = bcrypt::hash("right", 4).unwrap();
    let c = Arc::new(
        WebConfig::parse(
            &format!("basic_auth_users:\n  alice: '{hash}'\n"),
            Path::new("web.yml"),
        )
        .unwrap(),
    );
    // Hold the bcrypt, as a check in progress would, and fill the queue behind it.
    let held = c.auth.as_ref().unwrap().bcrypt.lock().await;
    let mut queued = Vec::new();
    for i in 0..MAX_WAITING_CHECKS {
        let c = c.clone();
        queued.push(tokio::spawn(async move {
            let guess = format!("alice:guess-{i}");
            c.authorize(&request("/metrics", Some(&guess))).await
        }));
    }
    let auth = c.auth.as_ref().unwrap();
    let filled = async {
        while auth.waiting.load(std::sync::atomic::Ordering::Acquire) < MAX_WAITING_CHECKS {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), filled)
        .await
        .expect("the queue fills");
    // One more is answered at once, without waiting for the bcrypt.
    let r = request("/metrics", Some("alice:right"));
    assert_eq!(c.authorize(&r).await, Access::Denied);
    drop(held);
    for q in queued {
        assert_eq!(q.await.unwrap(), Access::Denied);
    }
    // With the flood gone the right password is checked and granted.
    assert_eq!(c.authorize(&r).await, Access::Granted);
}

/// A request for `path`, with basic credentials `user:password` if given.
fn request(path: &str, credentials: Option<&str>) -> http::Request<()> {
    let mut r = http::Request::builder().uri(path);
    if let Some(c) = credentials {
        r = r.header(
            "authorization",
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(c)),
        );
    }
    r.body(()).unwrap()
}
