//! THE closed list of probe kinds: the `kind:` values ([`Kind`]), the keys each kind
//! takes of its own ([`own_keys`], from the kind's `Keys` struct), what they become
//! ([`KindSpec`]), the probe each builds ([`AnyProbe`]), and the dispatch from one to the
//! next: check (own keys -> spec), build (spec -> probe), run, the simulator's dialects
//! and the event parser the fuzz targets drive. No registry, no macro: plain enums and
//! exhaustive matches, so the compiler points at every list a new kind is missing from,
//! the rules per kind ([`Kind::is_llm`], [`Kind::takes_images`], ...) included.
//!
//! Adding a kind:
//! 1. `probe/<kind>.rs`: its `Keys` (the serde shape of the keys only it takes, with a
//!    doc comment per key for the schema; `NoKeys` when it has none) and `check` (keys
//!    in, its `Spec` out), its probe and `build`, its request and event parser, the
//!    simulator's side of the protocol, and golden tests; `pub mod <kind>;` in
//!    probe/mod.rs.
//! 2. Here, one line in each list: [`Kind`] (with its YAML name and a doc comment, the
//!    text editors show for it through `inferprobe schema`), [`Kind::ALL`],
//!    [`Kind::as_str`], each rule of [`Kind`], `Kind::dialects` (streaming kinds),
//!    [`KindSpec`], `keys_of`, `check_spec`, [`AnyProbe`], [`AnyProbe::build`], its
//!    `run`, and `event_parser` (streaming kinds).
//!
//! A key of a kind's own needs nothing else: the loader hands it to that kind alone, tells
//! a probe of another kind which kinds take it (`only for kind http`), and the schema
//! says the same to editors.
//!
//! Imports the kinds' modules, and from config the [`Diagnostics`] that positions their
//! errors and the keys every probe has, checked ([`Common`]).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_yaml::Value;
use std::sync::Arc;

use super::dialect::Dialect;
use super::{BuildContext, BuildError, Probe, RunLimits};
use super::{
    anthropic, grpc_health, http, kserve_v2, kserve_v2_grpc, llamacpp, ollama, openai, openai_responses, tgi,
};
use crate::config::{Common, Diagnostics, KeysOf, KindKeys, KindList, OwnKeys, ProbeConfig};
use crate::outcome::Observation;

/// The API a probe speaks. The YAML `kind:` values (each name is written twice, in the
/// serde attribute and in [`Kind::as_str`]; a test checks they agree with [`Kind::ALL`]).
/// The variants' doc comments are the hover text of `inferprobe schema`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[schemars(
    description = "The API the endpoint speaks (the kind is the API, not the server: vLLM, SGLang and LM Studio serve openai_chat).",
    transform = crate::config::documented_enum
)]
pub enum Kind {
    /// OpenAI Chat Completions, streamed (/v1/chat/completions): vLLM, SGLang, llama.cpp, LM Studio, OpenAI.
    #[serde(rename = "openai_chat")]
    OpenAiChat,
    /// OpenAI legacy Completions, streamed (/v1/completions).
    #[serde(rename = "openai_completions")]
    OpenAiCompletions,
    /// OpenAI Responses API, streamed (/v1/responses).
    #[serde(rename = "openai_responses")]
    OpenAiResponses,
    /// Ollama's native API, NDJSON (/api/chat or /api/generate).
    #[serde(rename = "ollama")]
    Ollama,
    /// Hugging Face text-generation-inference (/generate_stream).
    #[serde(rename = "tgi")]
    Tgi,
    /// llama.cpp server's native API (/completion).
    #[serde(rename = "llamacpp")]
    LlamaCpp,
    /// Anthropic Messages API, streamed (/v1/messages).
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Open Inference Protocol (KServe v2, Triton, MLServer): a tensor in, outputs checked.
    #[serde(rename = "kserve_v2")]
    KserveV2,
    /// Open Inference Protocol over gRPC (inference.GRPCInferenceService: Triton, KServe, MLServer): a tensor in, outputs checked.
    #[serde(rename = "kserve_v2_grpc")]
    KserveV2Grpc,
    /// The standard gRPC health check (grpc.health.v1.Health/Check): up when SERVING.
    #[serde(rename = "grpc_health")]
    GrpcHealth,
    /// Any HTTP endpoint: a method, a body or image upload, status and body checked.
    #[serde(rename = "http")]
    Http,
}

impl Kind {
    /// Every kind, in the order of the list above.
    pub const ALL: [Kind; 11] = [
        Kind::OpenAiChat,
        Kind::OpenAiCompletions,
        Kind::OpenAiResponses,
        Kind::Ollama,
        Kind::Tgi,
        Kind::LlamaCpp,
        Kind::Anthropic,
        Kind::KserveV2,
        Kind::KserveV2Grpc,
        Kind::GrpcHealth,
        Kind::Http,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::OpenAiChat => "openai_chat",
            Kind::OpenAiCompletions => "openai_completions",
            Kind::OpenAiResponses => "openai_responses",
            Kind::Ollama => "ollama",
            Kind::Tgi => "tgi",
            Kind::LlamaCpp => "llamacpp",
            Kind::Anthropic => "anthropic",
            Kind::KserveV2 => "kserve_v2",
            Kind::KserveV2Grpc => "kserve_v2_grpc",
            Kind::GrpcHealth => "grpc_health",
            Kind::Http => "http",
        }
    }

    /// Kinds that stream generated tokens (and so have TTFT, prompts, `max_tokens`,
    /// tokens to count and price, and an `expect` on what was generated).
    pub fn is_llm(self) -> bool {
        match self {
            Kind::OpenAiChat
            | Kind::OpenAiCompletions
            | Kind::OpenAiResponses
            | Kind::Ollama
            | Kind::Tgi
            | Kind::LlamaCpp
            | Kind::Anthropic => true,
            Kind::KserveV2 | Kind::KserveV2Grpc | Kind::GrpcHealth | Kind::Http => false,
        }
    }

    /// Kinds whose server puts the prompt into the model's chat template (so a chat
    /// question, such as a canary, reaches an instruction-tuned model as one).
    pub fn applies_chat_template(self) -> bool {
        match self {
            Kind::OpenAiChat | Kind::OpenAiResponses | Kind::Ollama | Kind::Anthropic => true,
            Kind::OpenAiCompletions
            | Kind::Tgi
            | Kind::LlamaCpp
            | Kind::KserveV2
            | Kind::KserveV2Grpc
            | Kind::GrpcHealth
            | Kind::Http => false,
        }
    }

    /// Kinds whose request names a model, so `model` is required.
    pub fn needs_model(self) -> bool {
        match self {
            Kind::OpenAiChat
            | Kind::OpenAiCompletions
            | Kind::OpenAiResponses
            | Kind::Ollama
            | Kind::Tgi
            | Kind::LlamaCpp
            | Kind::Anthropic
            | Kind::KserveV2Grpc => true,
            // KServe's HTTP route names the model in its URL; gRPC health and plain HTTP
            // name none.
            Kind::KserveV2 | Kind::GrpcHealth | Kind::Http => false,
        }
    }

    /// Kinds whose responses name the model that answered (`expect.model`).
    pub fn names_model(self) -> bool {
        match self {
            Kind::OpenAiChat
            | Kind::OpenAiCompletions
            | Kind::OpenAiResponses
            | Kind::Ollama
            | Kind::LlamaCpp
            | Kind::Anthropic => true,
            // TGI serves one model and does not say which.
            Kind::Tgi | Kind::KserveV2 | Kind::KserveV2Grpc | Kind::GrpcHealth | Kind::Http => false,
        }
    }

    /// Kinds whose answer is output tensors (`expect.outputs`, `output_shape`,
    /// `top_label`).
    pub fn returns_tensors(self) -> bool {
        match self {
            Kind::KserveV2 | Kind::KserveV2Grpc => true,
            Kind::OpenAiChat
            | Kind::OpenAiCompletions
            | Kind::OpenAiResponses
            | Kind::Ollama
            | Kind::Tgi
            | Kind::LlamaCpp
            | Kind::Anthropic
            | Kind::GrpcHealth
            | Kind::Http => false,
        }
    }

    /// Kinds that tell the model how closely to look at an image (`images.detail`).
    pub fn image_detail(self) -> bool {
        match self {
            Kind::OpenAiChat | Kind::OpenAiResponses => true,
            Kind::OpenAiCompletions
            | Kind::Ollama
            | Kind::Tgi
            | Kind::LlamaCpp
            | Kind::Anthropic
            | Kind::KserveV2
            | Kind::KserveV2Grpc
            | Kind::GrpcHealth
            | Kind::Http => false,
        }
    }

    /// Kinds that upload images as the request itself (`images.upload`, `field`).
    pub fn uploads_images(self) -> bool {
        match self {
            Kind::Http => true,
            Kind::OpenAiChat
            | Kind::OpenAiCompletions
            | Kind::OpenAiResponses
            | Kind::Ollama
            | Kind::Tgi
            | Kind::LlamaCpp
            | Kind::Anthropic
            | Kind::KserveV2
            | Kind::KserveV2Grpc
            | Kind::GrpcHealth => false,
        }
    }

    /// What the simulator speaks for this kind, found by route: the dialects written in
    /// the kind's file (Ollama serves two routes; whole-body kinds are answered by the
    /// simulator's own code).
    pub(crate) fn dialects(self) -> &'static [&'static dyn Dialect] {
        match self {
            Kind::OpenAiChat => &[&openai::simulator::Chat],
            Kind::OpenAiCompletions => &[&openai::simulator::Completions],
            Kind::OpenAiResponses => &[&openai_responses::simulator::Responses],
            Kind::Ollama => &[&ollama::simulator::Chat, &ollama::simulator::Generate],
            Kind::Tgi => &[&tgi::simulator::GenerateStream],
            Kind::LlamaCpp => &[&llamacpp::simulator::Completion],
            Kind::Anthropic => &[&anthropic::simulator::Messages],
            Kind::KserveV2 | Kind::KserveV2Grpc | Kind::GrpcHealth | Kind::Http => &[],
        }
    }

    /// Kinds whose requests can carry images.
    pub fn takes_images(self) -> bool {
        match self {
            Kind::OpenAiChat
            | Kind::OpenAiResponses
            | Kind::Ollama
            | Kind::Anthropic
            | Kind::KserveV2
            | Kind::KserveV2Grpc
            | Kind::Http => true,
            Kind::OpenAiCompletions | Kind::Tgi | Kind::LlamaCpp | Kind::GrpcHealth => false,
        }
    }
}

/// What a probe's kind-specific keys became, checked: one variant per kind's module, each
/// holding the `Spec` defined in that module.
#[derive(Debug, Clone, PartialEq)]
pub enum KindSpec {
    /// `openai_chat`, `openai_completions` (which one is [`ProbeConfig::kind`]).
    OpenAi(openai::Spec),
    OpenAiResponses(openai_responses::Spec),
    Ollama(ollama::Spec),
    Tgi(tgi::Spec),
    LlamaCpp(llamacpp::Spec),
    Anthropic(anthropic::Spec),
    /// Boxed, as the next: these specs are the largest (208 and 232 bytes, where the
    /// others take 128 at most), and the rest of a config holds the enum's size.
    KserveV2(Box<kserve_v2::Spec>),
    KserveV2Grpc(Box<kserve_v2_grpc::Spec>),
    GrpcHealth(grpc_health::Spec),
    Http(http::Spec),
}

impl KindList for Kind {
    const ALL: &'static [Kind] = &Kind::ALL;

    fn name(self) -> &'static str {
        self.as_str()
    }

    fn keys(self) -> KeysOf {
        match self {
            Kind::OpenAiChat => KeysOf::of::<openai::ChatKeys>(),
            Kind::OpenAiCompletions => KeysOf::of::<openai::Keys>(),
            Kind::OpenAiResponses => KeysOf::of::<openai_responses::Keys>(),
            Kind::Ollama => KeysOf::of::<ollama::Keys>(),
            Kind::Tgi => KeysOf::of::<tgi::Keys>(),
            Kind::LlamaCpp => KeysOf::of::<llamacpp::Keys>(),
            Kind::Anthropic => KeysOf::of::<anthropic::Keys>(),
            Kind::KserveV2 => KeysOf::of::<kserve_v2::Keys>(),
            Kind::KserveV2Grpc => KeysOf::of::<kserve_v2_grpc::Keys>(),
            Kind::GrpcHealth => KeysOf::of::<grpc_health::Keys>(),
            Kind::Http => KeysOf::of::<http::Keys>(),
        }
    }

    fn group_name(kinds: &[Kind]) -> Option<&'static str> {
        let llm = Kind::ALL.into_iter().filter(|k| k.is_llm());
        kinds.iter().copied().eq(llm).then_some("LLM kinds")
    }
}

/// Checks a probe's own keys (`own`, the mapping the loader set aside for its kind) with
/// its kind's own check. Errors go to `cx`, positioned; `None` when there were any.
pub(crate) fn check_spec(cx: &mut Diagnostics, common: Common<'_>, own: Value) -> Option<KindSpec> {
    match common.kind {
        Kind::OpenAiChat => run(cx, common, own, openai::check_chat).map(KindSpec::OpenAi),
        Kind::OpenAiCompletions => run(cx, common, own, openai::check).map(KindSpec::OpenAi),
        Kind::OpenAiResponses => run(cx, common, own, openai_responses::check).map(KindSpec::OpenAiResponses),
        Kind::Ollama => run(cx, common, own, ollama::check).map(KindSpec::Ollama),
        Kind::Tgi => run(cx, common, own, tgi::check).map(KindSpec::Tgi),
        Kind::LlamaCpp => run(cx, common, own, llamacpp::check).map(KindSpec::LlamaCpp),
        Kind::Anthropic => run(cx, common, own, anthropic::check).map(KindSpec::Anthropic),
        Kind::KserveV2 => run(cx, common, own, kserve_v2::check).map(|s| KindSpec::KserveV2(Box::new(s))),
        Kind::KserveV2Grpc => {
            run(cx, common, own, kserve_v2_grpc::check).map(|s| KindSpec::KserveV2Grpc(Box::new(s)))
        }
        Kind::GrpcHealth => run(cx, common, own, grpc_health::check).map(KindSpec::GrpcHealth),
        Kind::Http => run(cx, common, own, http::check).map(KindSpec::Http),
    }
}

/// Reads a kind's own keys with its serde shape, every problem said (see
/// [`Diagnostics::section`]), and hands them to the kind's `check`.
fn run<K: OwnKeys, S>(
    cx: &mut Diagnostics,
    common: Common<'_>,
    own: Value,
    check: fn(&mut Diagnostics, KindKeys<'_, K>) -> Option<S>,
) -> Option<S> {
    let own = cx.section::<K>(own, common.prefix, common.probe)?;
    check(cx, KindKeys { common, own })
}

/// The closed set of probes, one per kind's module. Each is boxed at its own size:
/// inline, every built probe took the largest kind's (~380 bytes).
pub enum AnyProbe {
    OpenAi(Box<openai::OpenAiProbe>),
    OpenAiResponses(Box<openai_responses::ResponsesProbe>),
    Ollama(Box<ollama::OllamaProbe>),
    Tgi(Box<tgi::TgiProbe>),
    LlamaCpp(Box<llamacpp::LlamaCppProbe>),
    Anthropic(Box<anthropic::AnthropicProbe>),
    Kserve(Box<kserve_v2::KserveProbe>),
    KserveGrpc(Box<kserve_v2_grpc::KserveGrpcProbe>),
    GrpcHealth(Box<grpc_health::GrpcHealthProbe>),
    Http(Box<http::HttpProbe>),
}

impl AnyProbe {
    /// The probe for a validated config, built by its kind's module.
    pub fn build(config: &Arc<ProbeConfig>, cx: &BuildContext) -> Result<Self, BuildError> {
        Ok(match &config.spec {
            KindSpec::OpenAi(spec) => {
                AnyProbe::OpenAi(Box::new(openai::OpenAiProbe::build(config, spec, cx)?))
            }
            KindSpec::OpenAiResponses(spec) => AnyProbe::OpenAiResponses(Box::new(
                openai_responses::ResponsesProbe::build(config, spec, cx)?,
            )),
            KindSpec::Ollama(spec) => {
                AnyProbe::Ollama(Box::new(ollama::OllamaProbe::build(config, spec, cx)?))
            }
            KindSpec::Tgi(spec) => AnyProbe::Tgi(Box::new(tgi::TgiProbe::build(config, spec, cx)?)),
            KindSpec::LlamaCpp(spec) => {
                AnyProbe::LlamaCpp(Box::new(llamacpp::LlamaCppProbe::build(config, spec, cx)?))
            }
            KindSpec::Anthropic(spec) => {
                AnyProbe::Anthropic(Box::new(anthropic::AnthropicProbe::build(config, spec, cx)?))
            }
            KindSpec::KserveV2(spec) => {
                AnyProbe::Kserve(Box::new(kserve_v2::KserveProbe::build(config, spec, cx)?))
            }
            KindSpec::KserveV2Grpc(spec) => AnyProbe::KserveGrpc(Box::new(
                kserve_v2_grpc::KserveGrpcProbe::build(config, spec, cx)?,
            )),
            KindSpec::GrpcHealth(spec) => {
                AnyProbe::GrpcHealth(Box::new(grpc_health::GrpcHealthProbe::build(config, spec, cx)?))
            }
            KindSpec::Http(spec) => AnyProbe::Http(Box::new(http::HttpProbe::build(config, spec, cx)?)),
        })
    }
}

impl Probe for AnyProbe {
    /// Each kind's run is boxed at its own size, before its clock starts: inline, the
    /// run's task was the size of the largest kind's state machine (~13 KB) plus the
    /// task's own, and it lives until the outcome is handed over.
    async fn run(&self, limits: &RunLimits) -> Observation {
        match self {
            AnyProbe::OpenAi(p) => Box::pin(p.run(limits)).await,
            AnyProbe::OpenAiResponses(p) => Box::pin(p.run(limits)).await,
            AnyProbe::Ollama(p) => Box::pin(p.run(limits)).await,
            AnyProbe::Tgi(p) => Box::pin(p.run(limits)).await,
            AnyProbe::LlamaCpp(p) => Box::pin(p.run(limits)).await,
            AnyProbe::Anthropic(p) => Box::pin(p.run(limits)).await,
            AnyProbe::Kserve(p) => Box::pin(p.run(limits)).await,
            AnyProbe::KserveGrpc(p) => Box::pin(p.run(limits)).await,
            AnyProbe::GrpcHealth(p) => Box::pin(p.run(limits)).await,
            AnyProbe::Http(p) => Box::pin(p.run(limits)).await,
        }
    }
}

/// A streaming kind's event parser: what one framed event said.
#[cfg(feature = "fuzzing")]
pub(crate) type EventParser =
    fn(&super::framing::Event) -> Result<super::generation::EventFacts, crate::outcome::Failure>;

/// The event parser of a kind whose answer is streamed; `None` for whole-body kinds.
/// Each probe calls its own parser directly; this list is for the fuzz targets.
#[cfg(feature = "fuzzing")]
pub(crate) fn event_parser(kind: Kind) -> Option<EventParser> {
    let parser: EventParser = match kind {
        Kind::OpenAiChat => |event| openai::parse_event(event, true),
        Kind::OpenAiCompletions => |event| openai::parse_event(event, false),
        Kind::OpenAiResponses => openai_responses::parse_responses_event,
        Kind::Ollama => ollama::parse_line,
        Kind::Tgi => tgi::parse_event,
        Kind::LlamaCpp => llamacpp::parse_event,
        Kind::Anthropic => anthropic::parse_event,
        Kind::KserveV2 | Kind::KserveV2Grpc | Kind::GrpcHealth | Kind::Http => return None,
    };
    Some(parser)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ALL` and `as_str` cover every `kind:` value the file format accepts: the list
    /// serde gives when it rejects one.
    #[test]
    fn all_names_every_kind_once() {
        let e = serde_yaml::from_str::<Kind>("no_such_kind")
            .unwrap_err()
            .to_string();
        let expected: Vec<&str> = e.split('`').skip(3).step_by(2).collect();
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, expected, "{e}");
        for kind in Kind::ALL {
            assert_eq!(serde_yaml::from_str::<Kind>(kind.as_str()).unwrap(), kind);
        }
    }
}
