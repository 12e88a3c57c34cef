//! The config loader: `config::parse` on any UTF-8 text must not panic, and every error
//! and warning must point at a line and column (>= 1; only a file that cannot be read at
//! all, which `parse` never sees, is reported at 0:0).
#![no_main]

use std::path::Path;

use inferprobe::config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The loader reads files the config names (prompt files, image folders, CA files),
    // only regular ones and with a byte cap, so `/dev/stdin`, `/dev/zero` or a FIFO are
    // refused, not read: the fuzzer may name them. Kernel files are regular files; keep
    // it away from those (reading /proc and /sys is the user's own business).
    if ["/proc", "/sys"].iter().any(|p| text.contains(p)) {
        return;
    }
    let env = |name: &str| match name {
        "FUZZ_SET" => Some("value".to_owned()),
        "FUZZ_EMPTY" => Some(String::new()),
        _ => None,
    };
    // A base folder that does not exist: relative paths in the config resolve to nothing.
    let file = Path::new("/nonexistent-inferprobe-fuzz/probes.yaml");
    let problems = match config::parse(text, file, &env) {
        Ok(config) => config.warnings,
        Err(errors) => {
            assert!(!errors.0.is_empty(), "Err with no error");
            errors.0
        }
    };
    for p in &problems {
        assert!(p.line >= 1 && p.column >= 1, "no position: {p:?}");
        let _ = p.to_string();
    }
});
