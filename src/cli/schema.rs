//! `schema`: print the JSON Schema of probes.yaml, for editors. Point an editor at it
//! with `# yaml-language-server: $schema=./probes.schema.json` as a file's first line.

use std::process::ExitCode;

use inferprobe::config;

pub fn run() -> ExitCode {
    out!("{}", config::json_schema());
    ExitCode::SUCCESS
}
