//! `cost:` and `budget:`: what an LLM probe's tokens cost (read by `inferprobe report`)
//! and how many it may use a day (read by the scheduler, which stretches the interval
//! over it). Both may be set in `defaults` and per probe, key by key; a bad default is
//! reported once, at its own line, and not handed down.

use super::diagnostics::Diagnostics;
use crate::probe::kinds::Kind;
use schemars::JsonSchema;
use serde::Deserialize;

/// The currency when `cost` names none.
pub const DEFAULT_CURRENCY: &str = "USD";

/// Prices of a probe's tokens, per million, in `currency`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    pub input_per_million: f64,
    pub output_per_million: f64,
    /// Three capital letters (ISO 4217), e.g. USD.
    pub currency: String,
}

impl Cost {
    /// What `input` and `output` tokens cost.
    pub fn of(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_per_million + output as f64 * self.output_per_million) / 1e6
    }
}

/// Tokens (input plus output) a probe may use in any 24 hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBudget {
    pub tokens_per_day: u64,
}

/// `defaults.cost` as probes inherit it: its good values, and which prices it set at all
/// (a bad one was reported at its line; a probe does not say it is missing too).
#[derive(Debug, Default)]
pub(super) struct InheritedCost {
    prices: RawCost,
    given: [bool; 2],
}

/// `defaults.cost`: each value checked at its line; the good ones are inherited.
pub(super) fn defaults_cost(cx: &mut Diagnostics, raw: RawCost) -> InheritedCost {
    InheritedCost {
        given: [raw.input_per_million.is_some(), raw.output_per_million.is_some()],
        prices: RawCost {
            input_per_million: price(cx, None, "defaults.cost.input_per_million", raw.input_per_million),
            output_per_million: price(
                cx,
                None,
                "defaults.cost.output_per_million",
                raw.output_per_million,
            ),
            currency: raw
                .currency
                .filter(|c| currency(cx, None, "defaults.cost.currency", c)),
        },
    }
}

/// `defaults.budget`, checked at its line.
pub(super) fn defaults_budget(cx: &mut Diagnostics, raw: Option<RawBudget>) -> RawBudget {
    RawBudget {
        tokens_per_day: raw
            .and_then(|b| b.tokens_per_day)
            .filter(|&n| tokens_per_day(cx, None, "defaults.budget.tokens_per_day", n)),
    }
}

/// A probe's `cost`, over the inherited one key by key. Only LLM kinds count tokens:
/// another kind's own `cost` is an error, an inherited one is not applied.
pub(super) fn probe_cost(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    kind: Option<Kind>,
    own: Option<RawCost>,
    inherited: Option<&InheritedCost>,
) -> Option<Cost> {
    let key = |k: &str| format!("{prefix}.cost{k}");
    if kind.is_some_and(|k| !k.is_llm()) {
        if own.is_some() {
            cx.error(p, &key(""), "only for LLM kinds (the others count no tokens)");
        }
        return None;
    }
    let own_set = own.is_some();
    let own = own.unwrap_or_default();
    let given = [
        own.input_per_million.is_some() || inherited.is_some_and(|i| i.given[0]),
        own.output_per_million.is_some() || inherited.is_some_and(|i| i.given[1]),
    ];
    let inherited = inherited.map(|i| i.prices.clone()).unwrap_or_default();
    let input =
        price(cx, p, &key(".input_per_million"), own.input_per_million).or(inherited.input_per_million);
    let output =
        price(cx, p, &key(".output_per_million"), own.output_per_million).or(inherited.output_per_million);
    let currency = match own.currency {
        Some(c) => currency(cx, p, &key(".currency"), &c).then_some(c),
        None => inherited.currency,
    };
    if !own_set && given == [false, false] && currency.is_none() {
        return None;
    }
    // Both prices, so a report never shows a cost that leaves half of it out.
    for (given, name) in given.into_iter().zip(["input_per_million", "output_per_million"]) {
        if !given {
            cx.error(p, &key(""), format!("`{name}` is required (0 if free)"));
        }
    }
    Some(Cost {
        input_per_million: input?,
        output_per_million: output?,
        currency: currency.unwrap_or_else(|| DEFAULT_CURRENCY.to_owned()),
    })
}

/// A probe's `budget`, over the inherited one. The interval is what it stretches: a
/// probe on a cron `schedule` (`cron`) cannot have its own, and does not inherit one.
pub(super) fn probe_budget(
    cx: &mut Diagnostics,
    p: Option<&str>,
    prefix: &str,
    kind: Option<Kind>,
    cron: bool,
    own: Option<RawBudget>,
    inherited: Option<&RawBudget>,
) -> Option<TokenBudget> {
    let key = format!("{prefix}.budget");
    if let Some(own) = own {
        if kind.is_some_and(|k| !k.is_llm()) {
            cx.error(p, &key, "only for LLM kinds (the others count no tokens)");
            return None;
        }
        if cron {
            cx.error(
                p,
                &key,
                "stretches the probe's interval, so it needs `interval`, not a cron `schedule`",
            );
            return None;
        }
        let Some(n) = own.tokens_per_day else {
            cx.error(p, &key, "`tokens_per_day` is required");
            return None;
        };
        return tokens_per_day(cx, p, &format!("{key}.tokens_per_day"), n)
            .then_some(TokenBudget { tokens_per_day: n });
    }
    if cron || kind.is_some_and(|k| !k.is_llm()) {
        return None;
    }
    inherited
        .and_then(|b| b.tokens_per_day)
        .map(|n| TokenBudget { tokens_per_day: n })
}

/// A price: a finite number, 0 or more.
fn price(cx: &mut Diagnostics, p: Option<&str>, key: &str, value: Option<f64>) -> Option<f64> {
    let v = value?;
    if v.is_finite() && v >= 0.0 {
        Some(v)
    } else {
        cx.error(p, key, "must be a number, 0 or more (a price per million tokens)");
        None
    }
}

fn currency(cx: &mut Diagnostics, p: Option<&str>, key: &str, code: &str) -> bool {
    if code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase()) {
        return true;
    }
    let upper = code.trim().to_ascii_uppercase();
    let hint = if upper.len() == 3 && upper.bytes().all(|b| b.is_ascii_uppercase()) {
        format!("; did you mean `{upper}`?")
    } else {
        String::new()
    };
    cx.error(
        p,
        key,
        format!("`{code}` is not a currency code of three capital letters, like USD or EUR{hint}"),
    );
    false
}

fn tokens_per_day(cx: &mut Diagnostics, p: Option<&str>, key: &str, n: u64) -> bool {
    if n == 0 {
        cx.error(p, key, "must be at least 1");
    }
    n > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_is_tokens_times_the_price_per_million() {
        let c = Cost {
            input_per_million: 0.15,
            output_per_million: 0.60,
            currency: "USD".into(),
        };
        // 2 M input tokens at 0.15 and 0.5 M output at 0.60.
        assert!((c.of(2_000_000, 500_000) - 0.60).abs() < 1e-12);
        assert_eq!(c.of(0, 0), 0.0);
    }
}
/// `cost:` (defaults or an LLM probe): what its tokens cost, for `inferprobe report`.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Cost")]
pub(super) struct RawCost {
    /// Price of one million input (prompt) tokens, e.g. 0.15.
    #[schemars(range(min = 0))]
    pub(super) input_per_million: Option<f64>,
    /// Price of one million output (generated) tokens, e.g. 0.60.
    #[schemars(range(min = 0))]
    pub(super) output_per_million: Option<f64>,
    /// The prices' currency: three capital letters, e.g. USD (default USD).
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    pub(super) currency: Option<String>,
}

/// `budget:` (defaults or an LLM probe): tokens a probe may use a day; over it, the agent
/// warns and stretches the probe's interval (it never stops probing).
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Budget")]
pub(super) struct RawBudget {
    /// Input plus output tokens in any 24 hours, e.g. 2000000.
    #[schemars(range(min = 1))]
    pub(super) tokens_per_day: Option<u64>,
}
