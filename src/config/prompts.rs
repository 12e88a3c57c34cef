//! `prompts:`: what an LLM probe asks, as the config names it. The built-in sets by length
//! bucket and the canaries (questions with known answers), or the user's own prompts, each
//! with its own `expect` on the answer if it has one. The texts are payload/'s; answers
//! are judged by probe/answer.rs.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::answer::{AnswerCheck, RawAnswerExpect, answer_check};
use super::content::{ListOrMap, set};
use super::diagnostics::Diagnostics;
use super::files;
use super::values::file_message;
use crate::probe::kinds::Kind;

/// Prompt length buckets, by estimated tokens: short < 64, medium 64-256, long > 256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PromptBucket {
    Short,
    Medium,
    Long,
}

impl PromptBucket {
    pub const ALL: [PromptBucket; 3] = [PromptBucket::Short, PromptBucket::Medium, PromptBucket::Long];

    pub fn as_str(self) -> &'static str {
        match self {
            PromptBucket::Short => "short",
            PromptBucket::Medium => "medium",
            PromptBucket::Long => "long",
        }
    }

    /// The bucket of a prompt of about `tokens` tokens.
    pub fn for_tokens(tokens: usize) -> PromptBucket {
        match tokens {
            0..64 => PromptBucket::Short,
            64..=256 => PromptBucket::Medium,
            _ => PromptBucket::Long,
        }
    }
}

/// Where a probe's prompts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompts {
    /// Our built-in prompt sets: these length buckets, and the canaries if `canaries`.
    Builtin {
        buckets: Vec<PromptBucket>,
        canaries: bool,
    },
    /// The user's own prompts (inline, or read from a file at load time).
    Custom(Vec<CustomPrompt>),
}

impl Prompts {
    /// Every built-in prompt of every length bucket, no canaries: what a probe that names
    /// no prompts sends.
    pub fn default_builtin() -> Prompts {
        Prompts::Builtin {
            buckets: PromptBucket::ALL.to_vec(),
            canaries: false,
        }
    }
}

/// One prompt of the user's, and what its answer must be, if they said.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomPrompt {
    pub text: String,
    pub expect: Option<Arc<AnswerCheck>>,
}

impl From<&str> for CustomPrompt {
    fn from(text: &str) -> Self {
        CustomPrompt {
            text: text.to_owned(),
            expect: None,
        }
    }
}

/// An item of `prompts.builtin`: a length bucket, or the canaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum BuiltinSet {
    /// Short prompts (under 64 tokens).
    Short,
    /// Medium prompts (64 to 256 tokens).
    Medium,
    /// Long prompts (over 256 tokens).
    Long,
    /// Questions with known answers any healthy chat model gets right at temperature 0
    /// (one given word, a small sum, a fixed JSON object, a word in Chinese); a wrong
    /// answer is `wrong_answer`, one that runs to max_tokens `degenerate_output`.
    Canary,
}

pub(super) fn prompts(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    prefix: &str,
    kind: Kind,
    raw: Option<RawPrompts>,
) -> Option<Prompts> {
    let key = format!("{prefix}.prompts");
    let Some(raw) = raw else {
        return Some(Prompts::default_builtin());
    };
    if !kind.is_llm() {
        cx.error(probe, &key, "only for LLM kinds; use `body` for http");
        return None;
    }
    let set = [raw.builtin.is_some(), raw.inline.is_some(), raw.file.is_some()];
    if set.iter().filter(|s| **s).count() != 1 {
        cx.error(probe, &key, "set exactly one of `builtin`, `inline` or `file`");
        return None;
    }
    if let Some(sets) = raw.builtin {
        return builtin(cx, probe, &format!("{key}.builtin"), kind, &sets);
    }
    let (list, list_key) = if let Some(inline) = raw.inline {
        let list_key = if raw.plain {
            key.clone()
        } else {
            format!("{key}.inline")
        };
        let before = cx.error_count();
        let mut list = Vec::new();
        for (i, item) in inline.into_iter().enumerate() {
            let expect = item
                .expect
                .and_then(|e| answer_check(cx, probe, &format!("{list_key}[{i}].expect"), e));
            list.push(CustomPrompt {
                text: item.prompt,
                expect: expect.map(Arc::new),
            });
        }
        if cx.error_count() != before {
            return None;
        }
        (list, list_key)
    } else {
        let file = raw.file.unwrap_or_default();
        let path = cx.base_dir.join(&file);
        match files::read_regular_text(&path, files::MAX_PROMPT_FILE_BYTES) {
            Ok(text) => (
                split_prompt_file(&text)
                    .iter()
                    .map(|p| CustomPrompt::from(p.as_str()))
                    .collect(),
                format!("{key}.file"),
            ),
            Err(e) => {
                cx.error(probe, &format!("{key}.file"), file_message(&file, &e));
                return None;
            }
        }
    };
    let list: Vec<CustomPrompt> = list.into_iter().filter(|p| !p.text.trim().is_empty()).collect();
    if list.is_empty() {
        cx.error(probe, &list_key, "holds no prompt");
        return None;
    }
    Some(Prompts::Custom(list))
}

/// `prompts.builtin` (at `key`): the buckets named, and the canaries for kinds that chat.
fn builtin(
    cx: &mut Diagnostics,
    probe: Option<&str>,
    key: &str,
    kind: Kind,
    sets: &[BuiltinSet],
) -> Option<Prompts> {
    if sets.is_empty() {
        cx.error(probe, key, "name at least one of short, medium, long, canary");
        return None;
    }
    let canaries = sets.contains(&BuiltinSet::Canary);
    if canaries && !kind.applies_chat_template() {
        cx.error(
            probe,
            key,
            format!(
                "canaries are chat questions, and kind {} sends a raw completion with no chat template, \
                 so even a healthy model would miss them; give your own prompts with their `expect` instead",
                kind.as_str()
            ),
        );
        return None;
    }
    let mut buckets: Vec<PromptBucket> = sets
        .iter()
        .filter_map(|s| match s {
            BuiltinSet::Short => Some(PromptBucket::Short),
            BuiltinSet::Medium => Some(PromptBucket::Medium),
            BuiltinSet::Long => Some(PromptBucket::Long),
            BuiltinSet::Canary => None,
        })
        .collect();
    buckets.sort();
    buckets.dedup();
    Some(Prompts::Builtin { buckets, canaries })
}

/// A prompt file holds prompts separated by lines that contain only `---`.
pub(super) fn split_prompt_file(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for line in text.lines() {
        if line.trim() == "---" {
            out.push(String::new());
        } else {
            let cur = out.last_mut().expect("never empty");
            if !cur.is_empty() {
                cur.push('\n');
            }
            cur.push_str(line);
        }
    }
    out.into_iter().map(|p| p.trim().to_owned()).collect()
}

/// `prompts:` as a mapping (`builtin`, `inline` or `file`) or a plain list of prompts,
/// which is `inline`.
#[derive(Debug, Default)]
pub(super) struct RawPrompts {
    pub(super) builtin: Option<Vec<BuiltinSet>>,
    pub(super) inline: Option<Vec<RawPrompt>>,
    pub(super) file: Option<String>,
    /// Written as a plain list (so `inline`'s problems are the list's).
    pub(super) plain: bool,
}

/// One of the user's prompts: its text, or a mapping with its text and `expect`.
#[derive(Debug)]
pub(super) struct RawPrompt {
    prompt: String,
    expect: Option<RawAnswerExpect>,
}

/// A prompt with a check of its answer.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "CheckedPrompt")]
struct CheckedPrompt {
    /// The prompt's text.
    prompt: String,
    /// What its answer must be (sent at temperature 0): a miss is `wrong_answer`.
    expect: Option<RawAnswerExpect>,
}

impl<'de> Deserialize<'de> for RawPrompt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PromptVisitor;
        impl<'de> Visitor<'de> for PromptVisitor {
            type Value = RawPrompt;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a prompt's text, or a mapping with `prompt` and `expect`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawPrompt, E> {
                Ok(RawPrompt {
                    prompt: v.to_owned(),
                    expect: None,
                })
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<RawPrompt, A::Error> {
                let p = CheckedPrompt::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawPrompt {
                    prompt: p.prompt,
                    expect: p.expect,
                })
            }
        }
        d.deserialize_any(PromptVisitor)
    }
}

impl JsonSchema for RawPrompt {
    fn schema_name() -> Cow<'static, str> {
        "Prompt".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let checked = generator.subschema_for::<CheckedPrompt>();
        json_schema!({"oneOf": [{"type": "string"}, checked]})
    }
}

/// Prompts as a mapping: built-in buckets, your own prompts inline, or a file of them.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "PromptsMapping", transform = one_prompt_source)]
pub(super) struct PromptsMap {
    /// Built-in prompts by length bucket (short < 64 tokens, medium 64-256, long > 256),
    /// rotated per run; the bucket is the `prompt_bucket` label. `canary` adds questions
    /// with known answers (label `short`).
    builtin: Option<Vec<BuiltinSet>>,
    /// Your own prompts, rotated per run: a text, or `{prompt, expect}`.
    inline: Option<Vec<RawPrompt>>,
    /// A file of prompts separated by lines holding only `---`, relative to this file.
    file: Option<String>,
}

impl<'de> Deserialize<'de> for RawPrompts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListOrMap {
            expecting: "a list of prompts, or a mapping with `builtin`, `inline` or `file`",
            list: |list| RawPrompts {
                inline: Some(list),
                plain: true,
                ..RawPrompts::default()
            },
            map: |m: PromptsMap| RawPrompts {
                builtin: m.builtin,
                inline: m.inline,
                file: m.file,
                plain: false,
            },
            shape: std::marker::PhantomData,
        })
    }
}

/// `prompts:` is a plain list (inline prompts) or a mapping: [`RawPrompts`]'s hand-written
/// Deserialize, with the mapping's keys from [`PromptsMap`].
impl JsonSchema for RawPrompts {
    fn schema_name() -> Cow<'static, str> {
        "Prompts".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let map = generator.subschema_for::<PromptsMap>();
        let item = generator.subschema_for::<RawPrompt>();
        json_schema!({
            "oneOf": [
                {"type": "array", "items": item, "description": "Your own prompts, rotated per run."},
                map,
            ],
        })
    }
}

/// `prompts:` as a mapping names exactly one source. Used as `#[schemars(transform)]`.
fn one_prompt_source(schema: &mut Schema) {
    let message = "Set exactly one of `builtin`, `inline` or `file`.";
    let sources = [
        set("builtin", message),
        set("inline", message),
        set("file", message),
    ];
    schema.insert("oneOf".into(), serde_json::json!(sources));
}
