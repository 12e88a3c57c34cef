//! NDJSON framing: no panic, bounded buffering, chunking-invariant output.
#![no_main]

mod common;

use inferprobe::fuzzing::Decoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    common::check(&Decoder::ndjson, data);
});
