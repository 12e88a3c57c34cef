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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgent {
    pub(super) location: Option<String>,
    pub(super) listen: Option<String>,
    pub(super) data_dir: Option<String>,
    pub(super) external_url: Option<String>,
    pub(super) remote_write: Option<RawRemoteWrite>,
    pub(super) history: Option<RawHistory>,
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawImages {
    pub(super) builtin: Option<Vec<String>>,
    pub(super) files: Option<Vec<String>>,
    pub(super) per_run: Option<usize>,
    pub(super) detail: Option<String>,
    pub(super) upload: Option<String>,
    pub(super) field: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrompts {
    pub(super) builtin: Option<Vec<PromptBucket>>,
    pub(super) inline: Option<Vec<String>>,
    pub(super) file: Option<String>,
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
