//! Is the answer right? The validators of a complete answer's content, run after the
//! stream ended (outside the timed window): a canary's known answer, a prompt's own
//! `expect`, the probe's `expect.schema`, and whether an answer that should be short
//! stopped by itself. A miss is `wrong_answer`; an answer that runs to `max_tokens` or
//! loops on one phrase, where that is asked, `degenerate_output`.
//!
//! Known answers are read leniently (any case, Markdown, a sentence around a number): a
//! false failure pages someone for nothing, the worst thing a prober can do.
//!
//! Imports config (the checks), payload (the prompt and its canary) and outcome.

use crate::config::{AnswerCheck, AnswerSchema, Expect};
use crate::outcome::{Failure, FailureReason};
use crate::payload::canaries::{Canary, Known};
use crate::payload::{Answer, Prompt};

use super::endpoint::one_line;

/// What a finished generation said, as the answer checks need it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answered<'a> {
    /// The answer text (reasoning and tool calls apart).
    pub text: &'a str,
    /// Normalized (`stop`, `length`, ...).
    pub finish_reason: Option<&'a str>,
    /// The request's output cap.
    pub max_tokens: u32,
    /// The output tokens, as the server counted them (or the content events).
    pub output_tokens: Option<u64>,
}

/// The answer checks of one run: the prompt's own (a canary's known answer or the user's
/// `expect`), then the probe's `expect.schema`, then `stops` where asked.
pub(crate) fn check_answer(
    prompt: &Prompt,
    expect: &Expect,
    mut answered: Answered<'_>,
) -> Result<(), Failure> {
    answered.text = after_thinking(answered.text);
    let mut stops = expect.stops;
    match &prompt.answer {
        Some(Answer::Canary(canary)) => {
            check_known(canary, answered.text)?;
            stops = true;
        }
        Some(Answer::Checked(check)) => {
            check_own(check, &prompt.text, answered.text)?;
            stops |= check.stops;
        }
        None => {}
    }
    if let Some(schema) = &expect.schema {
        check_schema(schema, answered.text).map_err(|what| wrong(&prompt.text, what, answered.text))?;
    }
    if stops && let Some(what) = degenerate(answered) {
        return Err(Failure::new(
            FailureReason::DegenerateOutput,
            format!(
                "{what}, for a prompt with a short answer ({}); it ends {:?}",
                prompt_words(&prompt.text),
                ending(answered.text)
            ),
        ));
    }
    Ok(())
}

/// The answer after a reasoning model's thinking, where the server left it in the text
/// (`<think>...</think>`, or only the closing tag when the template opened it): the
/// thinking is not the answer, and its working (other numbers, drafts) must not fail it.
fn after_thinking(text: &str) -> &str {
    match text.rfind("</think>") {
        Some(i) => &text[i + "</think>".len()..],
        None => text,
    }
}

/// A `wrong_answer` failure: the prompt, what was expected, what came (each cut short).
fn wrong(prompt: &str, expected: String, got: &str) -> Failure {
    Failure::new(
        FailureReason::WrongAnswer,
        format!(
            "{expected}, for the prompt {}; the answer was {:?}",
            prompt_words(prompt),
            one_line(got, 80)
        ),
    )
}

fn prompt_words(prompt: &str) -> String {
    format!("{:?}", one_line(prompt, 48))
}

/// A canary's answer: its known answer, read the way a person would.
fn check_known(canary: &Canary, text: &str) -> Result<(), Failure> {
    let right = match canary.answer {
        Known::Word(w) => words(text).any(|x| x == w),
        Known::Number(n) => {
            // The number, and besides it only the question's, or the number last (a
            // working such as `Step 1: 17 + 25 = 42`).
            let n = n as f64;
            let asked: Vec<f64> = numbers(canary.question).collect();
            let (mut found, mut other, mut last) = (false, false, None);
            for x in numbers(text) {
                found |= x == n;
                other |= x != n && !asked.contains(&x);
                last = Some(x);
            }
            found && (!other || last == Some(n))
        }
        Known::JsonObject(o) => {
            let expected: serde_json::Value = serde_json::from_str(o).expect("the canaries' JSON parses");
            json_values(text).any(|v| v == expected)
        }
        Known::Characters(c) => text.contains(c),
    };
    if right {
        return Ok(());
    }
    Err(wrong(
        canary.question,
        format!("the canary expected {}", canary.answer.describe()),
        text,
    ))
}

/// The user's `expect` for one prompt.
fn check_own(check: &AnswerCheck, prompt: &str, text: &str) -> Result<(), Failure> {
    if let Some(needle) = &check.contains
        && !text.contains(needle.as_str())
    {
        return Err(wrong(
            prompt,
            format!("expected the answer to contain {needle:?}"),
            text,
        ));
    }
    if let Some(pattern) = &check.matches
        && !pattern.regex.is_match(text)
    {
        return Err(wrong(
            prompt,
            format!("expected the answer to match /{}/", pattern.source),
            text,
        ));
    }
    if check.json
        && let Err(e) = answer_json(text)
    {
        return Err(wrong(prompt, format!("expected a JSON answer ({e})"), text));
    }
    if let Some(schema) = &check.schema {
        check_schema(schema, text).map_err(|what| wrong(prompt, what, text))?;
    }
    Ok(())
}

/// The answer as JSON that validates against `schema`; else what is wrong, and where.
pub(crate) fn check_schema(schema: &AnswerSchema, text: &str) -> Result<(), String> {
    let value = answer_json(text).map_err(|e| format!("expected a JSON answer for the schema ({e})"))?;
    schema
        .validate(&value)
        .map_err(|e| format!("the answer breaks the schema {}", one_line(&e, 160)))
}

/// The answer parsed as JSON: the whole text, or the inside of one Markdown code fence.
pub(crate) fn answer_json(text: &str) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::from_str(unfenced(text))
}

/// `text` without a Markdown code fence around it (```json ... ```), trimmed.
fn unfenced(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let body = rest.split_once('\n').map_or("", |(_, b)| b);
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

/// The answer's words, lowercased: letters and digits, everything else a separator.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// The numbers written in `text` (ASCII digits, a decimal part, a minus sign right before
/// them): `42.0` is 42.
fn numbers(text: &str) -> impl Iterator<Item = f64> + '_ {
    let bytes = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            if !bytes[i].is_ascii_digit() {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            // A decimal part, not a sentence's full stop.
            if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let negative = start > 0 && bytes[start - 1] == b'-';
            if let Ok(n) = text[start..i].parse::<f64>() {
                return Some(if negative { -n } else { n });
            }
        }
        None
    })
}

/// Every JSON object in `text` (what follows each `{` that parses as one).
fn json_values(text: &str) -> impl Iterator<Item = serde_json::Value> + '_ {
    text.match_indices('{').filter_map(|(i, _)| {
        serde_json::Deserializer::from_str(&text[i..])
            .into_iter::<serde_json::Value>()
            .next()?
            .ok()
    })
}

/// Characters of the answer's end the loop check looks at: a loop that matters fills the
/// end of the answer, and the check must stay cheap on a long one.
const LOOP_WINDOW: usize = 4096;
/// The longest phrase a loop is looked for with, in characters.
const MAX_LOOP_PHRASE: usize = 200;

/// Why the answer is degenerate, if it is: it loops on one phrase, or it ran to the cap.
fn degenerate(answered: Answered<'_>) -> Option<String> {
    if let Some((phrase, times)) = looping_tail(answered.text) {
        return Some(format!("the answer repeats {phrase:?} {times} times at its end"));
    }
    // Some servers call an answer cut at the cap complete (llama-server's Responses API
    // says `completed`): the count says it ran to the cap all the same.
    let at_cap = answered
        .output_tokens
        .is_some_and(|n| n >= u64::from(answered.max_tokens));
    (answered.finish_reason == Some("length") || at_cap).then(|| {
        format!(
            "the answer ran to max_tokens ({}) instead of stopping",
            answered.max_tokens
        )
    })
}

/// The phrase the end of `text` repeats, and how often, when the repeats fill at least
/// half of its end (a window of [`LOOP_WINDOW`] characters), four times or more, over at
/// least 24 characters: a model stuck in a loop, not a list with a repeated word.
fn looping_tail(text: &str) -> Option<(String, usize)> {
    let chars: Vec<char> = text.trim_end().chars().collect();
    let window = &chars[chars.len().saturating_sub(LOOP_WINDOW)..];
    let n = window.len();
    for period in 1..=MAX_LOOP_PHRASE.min(n / 4) {
        let run = (period..n)
            .rev()
            .take_while(|&i| window[i] == window[i - period])
            .count();
        let covered = run + period;
        let times = covered / period;
        if times >= 4 && covered >= 24 && covered * 2 >= n {
            let phrase: String = window[n - period..].iter().collect();
            return Some((phrase.trim().to_owned(), times));
        }
    }
    None
}

/// The last characters of an answer, for a message.
fn ending(text: &str) -> String {
    let chars: Vec<char> = text.trim_end().chars().collect();
    let tail: String = chars[chars.len().saturating_sub(60)..].iter().collect();
    let flat = tail.split_whitespace().collect::<Vec<_>>().join(" ");
    if chars.len() > 60 {
        format!("…{flat}")
    } else {
        flat
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::canaries::CANARIES;
    use std::borrow::Cow;

    fn canary(answer: Known) -> &'static Canary {
        CANARIES.iter().find(|c| c.answer == answer).unwrap()
    }

    fn run(prompt: &Prompt, text: &str, finish: &str) -> Result<(), Failure> {
        let answered = Answered {
            text,
            finish_reason: Some(finish),
            max_tokens: 64,
            output_tokens: Some(3),
        };
        check_answer(prompt, &Expect::default(), answered)
    }

    fn canary_prompt(c: &'static Canary) -> Prompt {
        Prompt {
            text: Cow::Borrowed(c.question),
            bucket: crate::config::PromptBucket::Short,
            answer: Some(Answer::Canary(c)),
        }
    }

    /// Right answers as models write them: none may fail (a false page is the worst bug).
    #[test]
    fn right_answers_in_every_usual_form_pass() {
        let forms: [(Known, &[&str]); 5] = [
            (
                Known::Word("pong"),
                &[
                    "PONG",
                    "pong",
                    "Pong.",
                    "**PONG**",
                    " PONG\n",
                    "`PONG`",
                    "PONG!",
                    "\"PONG\"",
                    "> PONG",
                    "PONG 🏓",
                ],
            ),
            (
                Known::Number(42),
                &[
                    "42",
                    "42.",
                    "**42**",
                    "The answer is 42.",
                    "17 + 25 = 42",
                    "42 (17 + 25)",
                    "Answer: 42\n",
                    "The sum of 17 and 25 is 42.",
                    "42.0",
                    "Step 1: 17 + 25 = 42",
                    // A reasoning model's working, left in the text by the server.
                    "<think>\n17 + 25: 10 + 20 = 30, 7 + 5 = 12, so 42.\n</think>\n\n42",
                    "10 + 20 = 30 and 7 + 5 = 12\n</think>\n42",
                ],
            ),
            (
                Known::JsonObject("{\"status\": \"ok\", \"count\": 3}"),
                &[
                    "{\"status\": \"ok\", \"count\": 3}",
                    "{\"count\":3,\"status\":\"ok\"}",
                    "```json\n{\"status\": \"ok\", \"count\": 3}\n```",
                    "Here it is: {\"status\": \"ok\", \"count\": 3}",
                    "{\n  \"status\": \"ok\",\n  \"count\": 3\n}",
                    "Sure!\n```json\n{\"status\":\"ok\",\"count\":3}\n```",
                ],
            ),
            (
                Known::Characters("水"),
                &["水", "水。", "「水」", "水 (shuǐ)", "The character is 水."],
            ),
            (
                Known::Word("paris"),
                &[
                    "Paris",
                    "Paris.",
                    "PARIS",
                    "The capital is Paris.",
                    "**Paris**",
                    "Paris, France",
                ],
            ),
        ];
        let mut tried = 0;
        for (known, answers) in forms {
            let prompt = canary_prompt(canary(known));
            for a in answers {
                assert!(run(&prompt, a, "stop").is_ok(), "{a:?} for {known:?}");
                tried += 1;
            }
        }
        // The false-failure measurement of the built-in set: every form passes.
        assert_eq!(tried, 39);
    }

    #[test]
    fn wrong_answers_fail_naming_prompt_expected_and_got() {
        let prompt = canary_prompt(canary(Known::Number(42)));
        let f = run(&prompt, "43", "stop").unwrap_err();
        assert_eq!(f.reason, FailureReason::WrongAnswer);
        assert!(f.message.contains("the number 42"), "{}", f.message);
        assert!(f.message.contains("17 + 25"), "{}", f.message);
        assert!(f.message.contains("\"43\""), "{}", f.message);
        // Two answers in one: not the answer.
        assert!(run(&prompt, "42 or maybe 41", "stop").is_err());
        // Gibberish, as a random-weight model writes it.
        for c in CANARIES {
            let f = run(
                &canary_prompt(c),
                "ingland\u{1c} ew thearn\u{fffd}s ofs",
                "length",
            )
            .unwrap_err();
            assert_eq!(f.reason, FailureReason::WrongAnswer, "{}", c.question);
        }
        let json = canary_prompt(canary(Known::JsonObject("{\"status\": \"ok\", \"count\": 3}")));
        assert!(run(&json, "{\"status\": \"ok\", \"count\": 4}", "stop").is_err());
        assert!(run(&json, "{\"status\": \"ok\"", "stop").is_err());
    }

    #[test]
    fn a_canary_that_runs_to_max_tokens_or_loops_is_degenerate() {
        let prompt = canary_prompt(canary(Known::Word("pong")));
        let f = run(&prompt, "PONG PONG PONG PONG PONG PONG PONG PONG", "length").unwrap_err();
        assert_eq!(f.reason, FailureReason::DegenerateOutput);
        assert!(f.message.contains("repeats \"PONG\""), "{}", f.message);
        let f = run(
            &prompt,
            "PONG. Is there anything else I can help you with today",
            "length",
        )
        .unwrap_err();
        assert_eq!(f.reason, FailureReason::DegenerateOutput);
        assert!(f.message.contains("ran to max_tokens (64)"), "{}", f.message);
        // A loop after the answer, even though the server says it stopped.
        let looped = format!("PONG{}", "<|im_start|>assistant\n".repeat(6));
        assert_eq!(
            run(&prompt, &looped, "stop").unwrap_err().reason,
            FailureReason::DegenerateOutput
        );
    }

    #[test]
    fn an_ordinary_prompt_may_use_all_its_tokens() {
        let prompt = Prompt {
            text: Cow::Borrowed("Tell me a story."),
            bucket: crate::config::PromptBucket::Short,
            answer: None,
        };
        assert!(run(&prompt, "ha ha ha ha ha ha ha ha ha ha ha ha ha ha", "length").is_ok());
    }

    #[test]
    fn loops_are_told_from_lists() {
        assert!(looping_tail("the the the the the the the the the").is_some());
        assert!(looping_tail("1. apples\n2. pears\n3. plums\n4. figs").is_none());
        assert!(looping_tail("Yes.").is_none());
        assert!(looping_tail("").is_none());
        let (phrase, times) = looping_tail(&format!("Answer: {}", "I am a robot. ".repeat(10))).unwrap();
        assert_eq!((phrase.as_str(), times >= 9), ("I am a robot.", true));
    }

    #[test]
    fn fenced_json_is_read() {
        assert_eq!(answer_json("```json\n{\"a\": 1}\n```").unwrap()["a"], 1);
        assert_eq!(answer_json("  [1, 2] ").unwrap()[1], 2);
        assert!(answer_json("```\nnope\n```").is_err());
    }
}
