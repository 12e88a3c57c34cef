//! The built-in canaries (`prompts: {builtin: [canary]}`): questions with one right answer
//! that any healthy instruction-tuned chat model gets right at temperature 0, in a few
//! tokens. A wrong one is a model that is not working (a broken chat template, a kernel
//! that produces gibberish, another model served), however fast and well-formed the
//! response. Written for inferprobe; what a model must be able to do to pass is in
//! docs/configuration.md ("Canaries").
//!
//! Each answer is read leniently, the way a person would read it (any case, Markdown and
//! punctuation around it, a short sentence around a number): a canary must never fail a
//! model that answered right. probe/answer.rs holds the reading.

/// A canary's known answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// This word, in any case, among the answer's words.
    Word(&'static str),
    /// This number, and no number but it and those of the question.
    Number(i64),
    /// A JSON object equal to this one (a code fence or words around it allowed).
    JsonObject(&'static str),
    /// These characters, somewhere in the answer (a word of a script without spaces).
    Characters(&'static str),
}

impl Known {
    /// The right answer, as a failure message says it.
    pub fn describe(self) -> String {
        match self {
            Known::Word(w) => format!("the word {w:?}"),
            Known::Number(n) => format!("the number {n}"),
            Known::JsonObject(o) => format!("the JSON object {o}"),
            Known::Characters(c) => format!("{c:?}"),
        }
    }
}

/// A canary: its question and its answer.
#[derive(Debug, PartialEq, Eq)]
pub struct Canary {
    pub question: &'static str,
    pub answer: Known,
}

/// The set, in the order runs take them. Each question says how to answer, so a model that
/// follows instructions answers in a few tokens and stops.
pub const CANARIES: &[Canary] = &[
    Canary {
        question: "Reply with only the word PONG and nothing else.",
        answer: Known::Word("pong"),
    },
    Canary {
        question: "What is 17 + 25? Reply with the number only.",
        answer: Known::Number(42),
    },
    Canary {
        question: "Reply with exactly this JSON object and nothing else: {\"status\": \"ok\", \"count\": 3}",
        answer: Known::JsonObject("{\"status\": \"ok\", \"count\": 3}"),
    },
    Canary {
        question: "What is the Chinese character for \"water\"? Reply with that one character only.",
        answer: Known::Characters("水"),
    },
    Canary {
        question: "What is the capital city of France? Reply with one word.",
        answer: Known::Word("paris"),
    },
];

/// The canary asking `question`, if it is one (the simulator answers them).
pub fn canary_for(question: &str) -> Option<&'static Canary> {
    CANARIES.iter().find(|c| c.question == question.trim())
}
