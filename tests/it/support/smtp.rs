//! A real SMTP server for the e-mail tests: aiosmtpd from PyPI, run by smtp_sink.py (ours)
//! on a 127.0.0.1 port, in plain, STARTTLS or implicit-TLS mode, with AUTH if asked. It
//! keeps each message as a file; [`SmtpSink::messages`] reads them back.
//!
//! The interpreter: `$SMTP_SINK_PYTHON`, else the venv .ci/run makes
//! (scripts/real-servers/.work/smtp-venv), else `python3`; without aiosmtpd the test
//! prints why and skips, and fails under CI=true.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::tls::Issued;

#[derive(Clone, Copy, Debug)]
pub enum Mode {
    Plain,
    StartTls,
    Implicit,
}

pub struct SmtpSink {
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

/// One message as the server received it.
#[derive(Debug)]
pub struct Received {
    /// The message as it came (headers and MIME body).
    pub raw: String,
    /// The envelope: `from`, `to`, `user` (who logged in), `tls`.
    pub envelope: serde_json::Value,
}

fn python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/real-servers/.work/smtp-venv/bin/python");
    let candidates = std::env::var_os("SMTP_SINK_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([venv, PathBuf::from("python3")]);
    for python in candidates {
        let works = Command::new(&python)
            .args(["-c", "import aiosmtpd"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if works {
            return Some(python);
        }
    }
    let why = "aiosmtpd (PyPI) is needed for a real SMTP server: `pip install aiosmtpd`";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}; .ci/run must install it");
    }
    eprintln!("SKIP: {why}");
    None
}

impl SmtpSink {
    /// A server in `mode` (with `cert` for the TLS modes), requiring `auth` (user,
    /// password) if given; `None` (skipped) without aiosmtpd.
    pub fn start(mode: Mode, cert: Option<&Issued>, auth: Option<(&str, &str)>) -> Option<SmtpSink> {
        SmtpSink::refusing(mode, cert, auth, &[])
    }

    /// As [`SmtpSink::start`], answering 550 to each of `refused` as a recipient.
    pub fn refusing(
        mode: Mode,
        cert: Option<&Issued>,
        auth: Option<(&str, &str)>,
        refused: &[&str],
    ) -> Option<SmtpSink> {
        let python = python()?;
        let dir = super::temp_dir("smtp-sink");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = Command::new(python);
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/smtp_sink.py"))
            .args(["--port", &port.to_string()])
            .arg("--dir")
            .arg(&dir)
            .args([
                "--mode",
                match mode {
                    Mode::Plain => "plain",
                    Mode::StartTls => "starttls",
                    Mode::Implicit => "implicit",
                },
            ]);
        if let Some(cert) = cert {
            let cert_path = dir.join("server.pem");
            let key_path = dir.join("server.key");
            std::fs::write(&cert_path, &cert.pem).unwrap();
            std::fs::write(&key_path, cert.key_pem()).unwrap();
            cmd.arg("--cert").arg(cert_path).arg("--key").arg(key_path);
        }
        if let Some((user, password)) = auth {
            cmd.args(["--user", user, "--password", password]);
        }
        for address in refused {
            cmd.args(["--refuse", address]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start smtp_sink.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("READY"), "smtp_sink.py did not start: {line:?}");
        Some(SmtpSink { port, dir, child })
    }

    /// Every message received so far, in order.
    pub fn messages(&self) -> Vec<Received> {
        let mut out = Vec::new();
        for n in 1.. {
            let raw = self.dir.join(format!("{n}.eml"));
            let Ok(raw) = std::fs::read_to_string(&raw) else {
                break;
            };
            let envelope = std::fs::read_to_string(self.dir.join(format!("{n}.json"))).unwrap();
            out.push(Received {
                raw,
                envelope: serde_json::from_str(&envelope).unwrap(),
            });
        }
        out
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
