//! What a probe sends: realistic prompts in three length buckets (and, in `images`,
//! realistic images), rotated per run. Built
//! once when a probe is built; a run only picks the next one (no I/O, no allocation).
//!
//! The bucket travels with each outcome as a label, so TTFT can be compared by prompt
//! length: prefill time grows with the prompt, and a regression often shows only on long
//! prompts.

pub mod canaries;
pub mod images;

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::{AnswerCheck, PromptBucket, Prompts};
use canaries::{CANARIES, Canary};

/// One prompt, the length bucket it belongs to, and what its answer must be, if known.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// Built-in prompts are borrowed, not copied per probe: 10,000 probes share one set.
    pub text: Cow<'static, str>,
    pub bucket: PromptBucket,
    pub answer: Option<Answer>,
}

impl Prompt {
    /// Sent at temperature 0: an answer that is checked must not depend on sampling.
    pub fn deterministic(&self) -> bool {
        self.answer.is_some()
    }
}

/// What a prompt's answer must be: a canary's known answer, or the user's own check.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Canary(&'static Canary),
    Checked(Arc<AnswerCheck>),
}

/// A probe's prompts, handed out round-robin.
#[derive(Debug)]
pub struct PromptSet {
    prompts: Vec<Prompt>,
    next: AtomicUsize,
}

impl PromptSet {
    pub fn new(source: &Prompts) -> Self {
        let prompts = match source {
            Prompts::Builtin { buckets, canaries } => {
                let mut list: Vec<Prompt> = builtin_prompts()
                    .into_iter()
                    .filter(|p| buckets.contains(&p.bucket))
                    .collect();
                if *canaries {
                    list = interleave(list, canary_prompts());
                }
                list
            }
            Prompts::Custom(list) => list
                .iter()
                .map(|p| Prompt {
                    bucket: PromptBucket::for_tokens(estimate_tokens(&p.text)),
                    text: Cow::Owned(p.text.clone()),
                    answer: p.expect.clone().map(Answer::Checked),
                })
                .collect(),
        };
        PromptSet {
            prompts,
            next: AtomicUsize::new(0),
        }
    }

    /// The prompt for the next run. Interleaves buckets so every bucket is seen within a
    /// few runs (the built-in list is ordered short, medium, long, short, ...).
    pub fn next(&self) -> &Prompt {
        &self.prompts[self.next_index()]
    }

    /// The index (into [`PromptSet::prompts`]) of the next run's prompt.
    pub fn next_index(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.prompts.len()
    }

    pub fn prompts(&self) -> &[Prompt] {
        &self.prompts
    }

    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }
}

/// About four characters per token for English text with common BPE vocabularies. Only
/// used to bucket user prompts; the server's usage report is the real count.
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// The canaries as prompts: short, with their known answers.
fn canary_prompts() -> Vec<Prompt> {
    CANARIES
        .iter()
        .map(|c| Prompt {
            text: Cow::Borrowed(c.question),
            bucket: PromptBucket::Short,
            answer: Some(Answer::Canary(c)),
        })
        .collect()
}

/// `a` and `b` taken in turn, so a probe with both sees each within a few runs.
fn interleave(a: Vec<Prompt>, b: Vec<Prompt>) -> Vec<Prompt> {
    let (mut a, mut b) = (a.into_iter(), b.into_iter());
    let mut out = Vec::new();
    loop {
        match (a.next(), b.next()) {
            (None, None) => return out,
            (x, y) => out.extend(x.into_iter().chain(y)),
        }
    }
}

/// Our own prompt sets: the kinds of questions people send to assistants, at three
/// lengths. Written for inferprobe; no third-party text.
pub fn builtin_prompts() -> Vec<Prompt> {
    let mut short = SHORT.iter();
    let mut medium = MEDIUM.iter();
    let mut long = LONG.iter();
    let mut out = Vec::new();
    loop {
        let before = out.len();
        for (it, bucket) in [
            (&mut short, PromptBucket::Short),
            (&mut medium, PromptBucket::Medium),
            (&mut long, PromptBucket::Long),
        ] {
            if let Some(text) = it.next() {
                out.push(Prompt {
                    text: Cow::Borrowed(text),
                    bucket,
                    answer: None,
                });
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

const SHORT: &[&str] = &[
    "What is the capital of Australia? Answer in one word.",
    "Translate to French: \"The meeting has been moved to Thursday afternoon.\"",
    "Give me three name ideas for a bakery that sells sourdough bread.",
    "In one sentence, what does a load balancer do?",
    "Convert 72 degrees Fahrenheit to Celsius and show the formula.",
];

const MEDIUM: &[&str] = &[
    "I run a small online shop and customers keep asking whether we ship to Canada. We do, \
     but delivery takes 7 to 12 business days and customs fees are paid by the customer on \
     arrival. Write a short, friendly FAQ answer that explains this clearly, mentions that \
     tracking numbers are emailed within two days of the order, and suggests contacting \
     support if a parcel has not arrived after 15 business days.",
    "Here is a Python function:\n\ndef mean(xs):\n    total = 0\n    for x in xs:\n        \
     total += x\n    return total / len(xs)\n\nIt crashes when the list is empty. Explain why \
     in one or two sentences, then rewrite the function so that it raises a ValueError with \
     a helpful message for an empty list, and add a docstring and type hints.",
    "Summarise the trade-offs between running a language model on your own GPUs and using a \
     hosted API. Consider cost at low and high volume, latency, data privacy, the effort of \
     keeping the serving stack up to date, and the ability to fine-tune. Answer as a short \
     list of bullet points, one line each, and end with a one-sentence recommendation for a \
     startup with ten engineers.",
];

const LONG: &[&str] = &[
    "You are helping an operations team write a post-incident review. Read the timeline \
     below and produce: a two-sentence summary, the customer impact in numbers, the root \
     cause, and three concrete follow-up actions with owners.\n\n\
     Timeline (all times UTC):\n\
     09:02 A configuration change raises the maximum batch size of the inference servers \
     in the eu-west cluster from 32 to 128 to improve throughput.\n\
     09:05 The change is rolled out to all twelve replicas at once instead of the usual \
     canary of two replicas, because the deploy tool's canary step was skipped by mistake.\n\
     09:11 Median time to first token for chat requests rises from 0.4 s to 2.8 s. The \
     in-service dashboard still shows the servers as healthy because GPU utilisation is \
     high and no request has failed.\n\
     09:19 Customer support receives the first complaints that the assistant \"hangs\" \
     before answering. About 18 percent of sessions are abandoned before the first token.\n\
     09:26 The black-box probes in three regions fire a warning for TTFT above the two \
     second objective; the on-call engineer is paged at 09:29 when the probes in two \
     regions agree.\n\
     09:34 The on-call engineer correlates the latency jump with the configuration change \
     and starts a rollback.\n\
     09:41 The rollback completes; median time to first token returns to 0.45 s within two \
     minutes.\n\
     09:50 Support confirms that complaints have stopped. In total about 41,000 requests \
     were served with a time to first token above five seconds, and an estimated 7,400 \
     sessions were abandoned.\n\n\
     Keep the review blameless and factual, and do not invent details that are not in the \
     timeline.",
    "Below are the notes from a product discussion about adding a \"summarise this thread\" \
     button to a team chat application. Turn them into a one-page design brief with the \
     sections Problem, Goals, Non-goals, Proposed behaviour, Risks and Open questions.\n\n\
     Notes: People come back from holidays to hundreds of unread messages and scroll for \
     a long time to find decisions. Several customers asked for summaries in the last \
     survey, mostly managers and support leads. The summary should appear in a side panel \
     and never be posted into the channel automatically. It must respect permissions: a \
     user can only summarise messages they are allowed to read, including private \
     channels. Summaries of long threads may take several seconds, so the panel should \
     stream the text as it is generated rather than show a spinner. Legal wants a visible \
     note that the summary is machine-generated and may be wrong. Finance worries about \
     the cost of long threads; one idea is to cap the input at the most recent 300 \
     messages and say so in the panel. Engineering wants the feature behind a flag per \
     workspace for the first month, and a thumbs up or down control to collect feedback. \
     Nobody has decided yet whether summaries should be cached, or what happens when a \
     message in the thread is edited or deleted after the summary was made. Support asked \
     for a way to copy the summary into a ticket. Accessibility review is required before \
     general availability.\n\n\
     Write in plain language for an audience of engineers and designers.",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_prompts_fall_in_their_buckets() {
        for p in builtin_prompts() {
            let estimated = PromptBucket::for_tokens(estimate_tokens(&p.text));
            assert_eq!(estimated, p.bucket, "{:?}", &p.text[..40]);
        }
    }

    #[test]
    fn builtin_set_interleaves_buckets() {
        let b: Vec<_> = builtin_prompts().iter().map(|p| p.bucket).collect();
        assert_eq!(
            &b[..3],
            &[PromptBucket::Short, PromptBucket::Medium, PromptBucket::Long]
        );
    }

    #[test]
    fn rotation_wraps_around() {
        let set = PromptSet::new(&Prompts::Custom(vec!["a".into(), "b".into()]));
        let seen: Vec<_> = (0..5).map(|_| set.next().text.to_string()).collect();
        assert_eq!(seen, ["a", "b", "a", "b", "a"]);
    }

    #[test]
    fn a_restricted_builtin_set_has_only_those_buckets() {
        let set = PromptSet::new(&Prompts::Builtin {
            buckets: vec![PromptBucket::Long],
            canaries: false,
        });
        assert!(!set.is_empty());
        for _ in 0..set.len() {
            assert_eq!(set.next().bucket, PromptBucket::Long);
            assert!(set.next().answer.is_none());
        }
    }

    #[test]
    fn canaries_alone_or_taken_in_turn_with_a_bucket() {
        let only = PromptSet::new(&Prompts::Builtin {
            buckets: vec![],
            canaries: true,
        });
        assert_eq!(only.len(), CANARIES.len());
        assert!(
            only.prompts()
                .iter()
                .all(|p| p.deterministic() && p.bucket == PromptBucket::Short)
        );
        let mixed = PromptSet::new(&Prompts::Builtin {
            buckets: vec![PromptBucket::Medium],
            canaries: true,
        });
        let checked: Vec<bool> = mixed.prompts().iter().map(Prompt::deterministic).collect();
        assert_eq!(&checked[..4], &[false, true, false, true]);
        assert_eq!(checked.iter().filter(|c| **c).count(), CANARIES.len());
    }

    #[test]
    fn custom_prompts_are_bucketed_by_estimated_length() {
        let long = "word ".repeat(400);
        let set = PromptSet::new(&Prompts::Custom(vec!["hi".into(), long.as_str().into()]));
        assert_eq!(set.next().bucket, PromptBucket::Short);
        assert_eq!(set.next().bucket, PromptBucket::Long);
    }
}
