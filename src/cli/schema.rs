//! `schema`: print the JSON Schema of probes.yaml, for editors. Point an editor at it
//! with `# yaml-language-server: $schema=./probes.schema.json` as a file's first line.

use std::io::Write;
use std::process::ExitCode;

use inferprobe::config;

pub fn run() -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out
        .write_all(config::json_schema().as_bytes())
        .and_then(|()| out.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write the schema: {e}");
            ExitCode::FAILURE
        }
    }
}
