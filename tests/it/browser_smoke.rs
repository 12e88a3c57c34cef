//! The browser harness itself (tests/support/browser.rs), against pages served here: it
//! must see a console error, a failed resource load and an uncaught exception where there
//! are some and nothing on a clean page, read the text and width, and return a PNG.

use crate::support::browser::render;

const HEAD: &str = r#"<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">"#;

fn page(path: &str) -> Option<String> {
    let body = match path {
        "/clean" => "<title>Clean page</title></head><body><h1>All good</h1><p>probe-a healthy</p>",
        "/console-error" => {
            "<title>Bad page</title></head><body><p>Something broke</p><script>console.error(\"boom\")</script>"
        }
        "/missing-image" => "<title>Missing</title></head><body><img src=\"/nope.png\" alt=\"\">",
        "/throws" => "<title>Throws</title></head><body><script>null.x</script><p>after</p>",
        "/wide" => "<title>Wide</title></head><body><div style=\"width:2000px\">wide table</div>",
        _ => return None,
    };
    Some(format!("{HEAD}{body}</body></html>"))
}

fn server() -> String {
    let addr = crate::support::answering_server(|r| {
        let (status, body) = match page(&r.path) {
            Some(html) => (200, html),
            None => (404, "not here".to_owned()),
        };
        format!(
            "HTTP/1.1 {status} X\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    format!("http://{addr}")
}

#[test]
fn harness_sees_errors_text_width_and_screenshot() {
    let base = server();
    let started = std::time::Instant::now();
    let Some(clean) = render(&format!("{base}/clean"), 1280, 800, false) else {
        return;
    };
    eprintln!("one render took {:?}", started.elapsed());
    assert_eq!(clean.console_errors, Vec::<String>::new());
    assert_eq!(clean.title, "Clean page");
    assert!(clean.text.contains("All good"), "{:?}", clean.text);
    assert!(clean.text.contains("probe-a healthy"), "{:?}", clean.text);
    assert_eq!(clean.viewport_width, 1280);
    assert!(clean.scroll_width <= clean.viewport_width, "{clean:?}");
    assert!(clean.png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    clean.save_png("browser-smoke-clean");

    let bad = render(&format!("{base}/console-error"), 1280, 800, false).unwrap();
    assert_eq!(bad.console_errors.len(), 1, "{:#?}", bad.console_errors);
    assert!(
        bad.console_errors[0].contains("boom"),
        "{:#?}",
        bad.console_errors
    );
    assert!(bad.text.contains("Something broke"), "{:?}", bad.text);
    bad.save_png("browser-smoke-console-error");

    eprintln!("bad: {:?}", bad.console_errors);
    let missing = render(&format!("{base}/missing-image"), 1280, 800, false).unwrap();
    assert!(
        missing
            .console_errors
            .iter()
            .any(|e| e.contains("404") && e.contains("/nope.png")),
        "{:#?}",
        missing.console_errors
    );

    eprintln!("missing: {:?}", missing.console_errors);
    let throws = render(&format!("{base}/throws"), 1280, 800, false).unwrap();
    assert!(
        throws.console_errors.iter().any(|e| e.contains("TypeError")),
        "{:#?}",
        throws.console_errors
    );
    eprintln!("throws: {:?}", throws.console_errors);
}

#[test]
fn harness_measures_layout_on_a_phone() {
    let base = server();
    let Some(phone) = render(&format!("{base}/clean"), 375, 667, true) else {
        return;
    };
    assert_eq!(phone.viewport_width, 375, "{phone:?}");
    assert!(phone.scroll_width <= 375, "{phone:?}");
    assert!(phone.png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    phone.save_png("browser-smoke-phone");

    let wide = render(&format!("{base}/wide"), 375, 667, true).unwrap();
    assert!(wide.scroll_width > wide.viewport_width, "{wide:?}");
    assert_eq!(wide.console_errors, Vec::<String>::new());
}
