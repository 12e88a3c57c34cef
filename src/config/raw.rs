//! The raw serde shapes of `probes.yaml`: what the file may contain (step 2 of loading).
//! Plain strings for anything that needs checking, so the checks (check.rs, probe.rs,
//! content.rs) can report every bad value instead of stopping at the first. Imports only
//! the config's own types.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::alerting::{RawAlert, RawSlo};
use super::remote_write::RawRemoteWrite;
use super::{Kind, PromptBucket};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHistory {
    pub(super) retention: Option<String>,
    pub(super) max_disk_mb: Option<u64>,
}

/// `metrics:` (agent, defaults or a probe): which series are exposed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub(super) detail: Option<MetricsDetail>,
}

/// `metrics.detail`: `basic` (the default) exposes what availability and latency SLOs
/// need; `full` adds every other series (docs/metrics.md lists which is which). Each
/// series costs the user storage in their Prometheus, so the default stays small.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricsDetail {
    #[default]
    Basic,
    Full,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgent {
    pub(super) location: Option<String>,
    pub(super) listen: Option<String>,
    pub(super) data_dir: Option<String>,
    pub(super) external_url: Option<String>,
    pub(super) remote_write: Option<RawRemoteWrite>,
    pub(super) history: Option<RawHistory>,
    pub(super) metrics: Option<RawMetrics>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) interval: Option<String>,
    pub(super) timeout: Option<String>,
    pub(super) first_token_timeout: Option<String>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) max_tokens: Option<u32>,
    pub(super) reuse_connections: Option<bool>,
    pub(super) max_response_bytes: Option<u64>,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    pub(super) alert: Option<RawAlert>,
    pub(super) slo: Option<RawSlo>,
    pub(super) metrics: Option<RawMetrics>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProbe {
    pub(super) name: String,
    pub(super) kind: Kind,
    pub(super) url: String,
    pub(super) model: Option<String>,
    pub(super) interval: Option<String>,
    pub(super) schedule: Option<String>,
    pub(super) timeout: Option<String>,
    pub(super) first_token_timeout: Option<String>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) prompts: Option<RawPrompts>,
    pub(super) max_tokens: Option<u32>,
    pub(super) method: Option<String>,
    pub(super) body: Option<String>,
    pub(super) expect: Option<RawExpect>,
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
    pub(super) reuse_connections: Option<bool>,
    pub(super) max_response_bytes: Option<u64>,
    pub(super) tls: Option<RawTls>,
    pub(super) images: Option<RawImages>,
    pub(super) input: Option<RawInput>,
    pub(super) ready_check: Option<bool>,
    pub(super) outputs: Option<Vec<String>>,
    pub(super) alert: Option<RawAlert>,
    pub(super) slo: Option<RawSlo>,
    pub(super) metrics: Option<RawMetrics>,
}

/// `images:` as a mapping (`builtin`, `files`, ...) or a plain list, `[cat.jpg, x.png]`,
/// whose items are built-in images or files by whether they name a built-in one.
#[derive(Debug, Default)]
pub(crate) struct RawImages {
    pub(super) builtin: Option<Vec<String>>,
    pub(super) files: Option<Vec<String>>,
    pub(super) per_run: Option<usize>,
    pub(super) detail: Option<String>,
    pub(super) upload: Option<String>,
    pub(super) field: Option<String>,
    /// The plain list, as written.
    pub(super) list: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImagesMap {
    builtin: Option<Vec<String>>,
    files: Option<Vec<String>>,
    per_run: Option<usize>,
    detail: Option<String>,
    upload: Option<String>,
    field: Option<String>,
}

impl<'de> Deserialize<'de> for RawImages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListOrMap {
            expecting: "a list of images (built-in names or files), or a mapping with `builtin` and/or `files`",
            list: |list| RawImages {
                list: Some(list),
                ..RawImages::default()
            },
            map: |m: ImagesMap| RawImages {
                builtin: m.builtin,
                files: m.files,
                per_run: m.per_run,
                detail: m.detail,
                upload: m.upload,
                field: m.field,
                list: None,
            },
            shape: std::marker::PhantomData,
        })
    }
}

/// `prompts:` as a mapping (`builtin`, `inline` or `file`) or a plain list of prompts,
/// which is `inline`.
#[derive(Debug, Default)]
pub(super) struct RawPrompts {
    pub(super) builtin: Option<Vec<PromptBucket>>,
    pub(super) inline: Option<Vec<String>>,
    pub(super) file: Option<String>,
    /// Written as a plain list (so `inline`'s problems are the list's).
    pub(super) plain: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptsMap {
    builtin: Option<Vec<PromptBucket>>,
    inline: Option<Vec<String>>,
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

/// A key that takes a list of strings or a mapping `M`: each becomes the raw shape `T`.
/// The mapping is read by `M`'s derived code, so unknown keys are reported as anywhere.
struct ListOrMap<M, L, F> {
    expecting: &'static str,
    list: L,
    map: F,
    shape: std::marker::PhantomData<fn() -> M>,
}

impl<'de, T, M, L, F> Visitor<'de> for ListOrMap<M, L, F>
where
    M: Deserialize<'de>,
    L: FnOnce(Vec<String>) -> T,
    F: FnOnce(M) -> T,
{
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        let list = Vec::<String>::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok((self.list)(list))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        let m = M::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok((self.map)(m))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExpect {
    #[serde(default, deserialize_with = "one_or_many_statuses")]
    pub(super) status: Vec<u16>,
    pub(super) non_empty: Option<bool>,
    pub(super) min_output_tokens: Option<u64>,
    pub(super) finish_reason: Option<Vec<String>>,
    pub(super) contains: Option<String>,
    pub(super) matches: Option<String>,
    pub(super) json: Option<bool>,
    pub(super) model: Option<bool>,
    pub(super) outputs: Option<Vec<String>>,
    pub(super) output_shape: Option<Vec<i64>>,
    pub(super) top_label: Option<serde_yaml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInput {
    pub(super) name: String,
    pub(super) datatype: String,
    pub(super) shape: Vec<i64>,
    pub(super) data: Option<Vec<serde_json::Value>>,
    pub(super) image: Option<String>,
    pub(super) layout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) ca_file: Option<String>,
    pub(super) server_name: Option<String>,
    pub(super) insecure_skip_verify: Option<bool>,
}

/// `status: 200` and `status: [200, 201]` both work.
pub(super) fn one_or_many_statuses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u16>, D::Error> {
    struct StatusVisitor;
    impl<'de> Visitor<'de> for StatusVisitor {
        type Value = Vec<u16>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an HTTP status code or a list of them")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            u16::try_from(v)
                .map(|s| vec![s])
                .map_err(|_| E::custom(format!("{v} is not an HTTP status code")))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Err(E::custom(format!("{v} is not an HTTP status code")))
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<u16>()? {
                out.push(s);
            }
            Ok(out)
        }
    }
    d.deserialize_any(StatusVisitor)
}
