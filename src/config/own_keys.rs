//! Keys that belong to one kind of a thing: a probe's kind (probe/kinds.rs), a receiver's
//! kind (notify/kinds.rs). Each kind's file declares its keys as a serde struct
//! ([`OwnKeys`]); the closed list of kinds says which struct is whose ([`KindList`]).
//! From that alone: which keys are whose, what a thing of another kind is told when it
//! sets one ("only for kind http"), which keys hold secrets, and the schema's rules.
//!
//! Imports only [`Diagnostics`], which reads a key of another kind with its owner's shape,
//! and the suggestions of positions.rs.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_yaml::Value;

use super::diagnostics::{Diagnostics, field_names};
use super::positions::suggest;

/// A kind's own keys: the serde shape its file declares (`Keys`), read from the mapping
/// by the loader and handed to the kind's `check` alone.
pub(crate) trait OwnKeys: DeserializeOwned + JsonSchema {
    /// Keys the kind accepts and ignores, so that files written before keep loading: not
    /// named as this kind's when a thing of another kind is told which kinds take them.
    const UNUSED: &'static [&'static str] = &[];

    /// Keys whose value is a credential: a `${VAR}` there is a secret, redacted from
    /// everything shown.
    const SECRETS: &'static [&'static str] = &[];

    /// What a thing of kind `asking` that sets `key` is told after "only for kind X".
    fn instead(_key: &str, _asking: &str) -> Option<String> {
        None
    }
}

/// What the loader and the schema need of a kind's `Keys`, without its type.
pub(crate) struct KeysOf {
    names: &'static [&'static str],
    unused: &'static [&'static str],
    secrets: &'static [&'static str],
    instead: fn(&str, &str) -> Option<String>,
    schema: fn(&mut SchemaGenerator) -> Schema,
    /// Reads keys with this shape, every problem said; whether they read.
    read: fn(&mut Diagnostics, Value, &str, Option<&str>) -> bool,
}

impl KeysOf {
    pub(crate) fn of<K: OwnKeys>() -> KeysOf {
        KeysOf {
            names: field_names::<K>(),
            unused: K::UNUSED,
            secrets: K::SECRETS,
            instead: K::instead,
            schema: K::json_schema,
            read: |cx, keys, prefix, probe| cx.section::<K>(keys, prefix, probe).is_some(),
        }
    }
}

/// A closed list of kinds, each with its own keys.
pub(crate) trait KindList: Copy + PartialEq + 'static {
    /// Every kind, in the order the file format lists them.
    const ALL: &'static [Self];
    /// The kind's YAML name.
    fn name(self) -> &'static str;
    /// Its file's `Keys`.
    fn keys(self) -> KeysOf;
    /// What "only for ..." calls `kinds` when they are a group with a name of its own
    /// ("LLM kinds").
    fn group_name(_kinds: &[Self]) -> Option<&'static str> {
        None
    }
}

/// The keys `kind` takes of its own.
pub(crate) fn own_keys<K: KindList>(kind: K) -> &'static [&'static str] {
    kind.keys().names
}

/// Every kind's own keys, each once, in the order of the kinds.
pub(crate) fn every_own_key<K: KindList>() -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for kind in K::ALL {
        for key in own_keys(*kind) {
            if !keys.contains(key) {
                keys.push(key);
            }
        }
    }
    keys
}

/// The kinds that take `key` as their own (those that merely accept it left out).
pub(crate) fn kinds_taking<K: KindList>(key: &str) -> Vec<K> {
    K::ALL
        .iter()
        .copied()
        .filter(|k| {
            let keys = k.keys();
            keys.names.contains(&key) && !keys.unused.contains(&key)
        })
        .collect()
}

/// Whether `key`, as one kind's own, holds a credential.
pub(crate) fn is_secret<K: KindList>(key: &str) -> bool {
    K::ALL.iter().any(|k| k.keys().secrets.contains(&key))
}

/// What a thing of kind `asking` that sets `key`, which it does not take, is told: "only
/// for kind http", "only for kinds kserve_v2 and kserve_v2_grpc", with the taking
/// kind's word on what to use instead. `None` when no kind takes `key`.
pub(crate) fn refusal<K: KindList>(key: &str, asking: K) -> Option<String> {
    let kinds = kinds_taking::<K>(key);
    let first = *kinds.first()?;
    let instead = (first.keys().instead)(key, asking.name()).unwrap_or_default();
    Some(format!("only for {}{instead}", kinds_named(&kinds)))
}

/// A key that the thing's kind does not take, or set on a thing whose kind is unknown:
/// if some kind takes it, its value is read with that kind's shape, so that a value of
/// the wrong type is said as such whatever the kind, and then, if it read and the kind is
/// known, the key is refused ([`refusal`]). `false` when no kind takes the key.
pub(crate) fn refuse<K: KindList>(
    cx: &mut Diagnostics,
    kind: Option<K>,
    key: &str,
    value: Value,
    prefix: &str,
    probe: Option<&str>,
) -> bool {
    let Some(first) = kinds_taking::<K>(key).first().copied() else {
        return false;
    };
    let mut alone = serde_yaml::Mapping::new();
    alone.insert(Value::String(key.to_owned()), value);
    let path = format!("{prefix}.{key}");
    let read = (first.keys().read)(cx, Value::Mapping(alone), prefix, probe);
    // Said only when the kind is known: an unknown kind is the problem.
    if let Some(kind) = kind
        && read
        && !cx.is_settled(&path)
        && let Some(message) = refusal(key, kind)
    {
        cx.error(probe, &path, message);
    }
    true
}

/// "kind http", "kinds kserve_v2 and kserve_v2_grpc", "LLM kinds".
pub(crate) fn kinds_named<K: KindList>(kinds: &[K]) -> String {
    if let Some(group) = K::group_name(kinds) {
        return group.to_owned();
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    match names.as_slice() {
        [one] => format!("kind {one}"),
        [rest @ .., last] => format!("kinds {} and {last}", rest.join(", ")),
        [] => "no kind".to_owned(),
    }
}

/// Takes the keys of `value` (a thing's mapping) that are not in `common` (the keys every
/// thing of the list has) out of it: those its kind declares go into the mapping
/// returned, for the kind's own check; one another kind declares is refused with the
/// kinds that take it ("only for kind http"); one no kind declares is an unknown key,
/// with the closest known one. `kind` is `None` when the thing's kind is not known: its
/// own keys are then set aside unread.
pub(crate) fn split_own_keys<K: KindList>(
    cx: &mut Diagnostics,
    value: &mut Value,
    common: &[&'static str],
    prefix: &str,
    name: Option<&str>,
    kind: Option<K>,
) -> Value {
    let mut own = serde_yaml::Mapping::new();
    let Value::Mapping(map) = value else {
        return Value::Mapping(own);
    };
    let theirs: Vec<String> = map
        .keys()
        .filter_map(Value::as_str)
        .filter(|k| !common.contains(k))
        .map(str::to_owned)
        .collect();
    for key in theirs {
        let value = map.remove(key.as_str()).unwrap_or(Value::Null);
        let path = format!("{prefix}.{key}");
        match kind {
            Some(kind) if own_keys(kind).contains(&key.as_str()) => {
                own.insert(Value::String(key), value);
            }
            _ if refuse(cx, kind, &key, value, prefix, name) => {}
            _ => {
                // Every key a thing may have: those of every thing, then each kind's.
                let mut known = common.to_vec();
                for key in every_own_key::<K>() {
                    if !known.contains(&key) {
                        known.push(key);
                    }
                }
                let message = match suggest(&key, &known) {
                    Some(s) => format!("unknown key `{key}`; did you mean `{s}`?"),
                    None => format!("unknown key `{key}`; expected one of {}", known.join(", ")),
                };
                let position = cx.index().locate_key(&path);
                cx.error_at(position, name, &path, message);
            }
        }
    }
    Value::Mapping(own)
}

/// The schema of `kind`'s own keys: an object schema with their `properties`.
pub(crate) fn own_keys_schema<K: KindList>(kind: K, generator: &mut SchemaGenerator) -> Schema {
    (kind.keys().schema)(generator)
}

/// The own keys of a kind that has none.
#[derive(Debug, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoKeys {}

impl OwnKeys for NoKeys {}
