//! What the probes cost: tokens in and out per probe and period, from the local store's
//! runs, and their cost at the probe's `cost:` prices. Input counts the server did not
//! report are our estimate from the prompt (about four characters a token): the report
//! says how many of them are, so nobody takes them for the server's count.

use std::collections::BTreeMap;

use super::{Row, RunRecord, Table};
use crate::config::Cost;

/// Tokens of a set of runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenTotals {
    /// Input (prompt) tokens, estimated ones included.
    pub input: u64,
    /// The part of `input` we estimated (the server reported none for those runs).
    pub input_estimated: u64,
    pub output: u64,
}

impl TokenTotals {
    pub fn of(runs: &[RunRecord]) -> TokenTotals {
        let mut t = TokenTotals::default();
        for r in runs {
            let input = r.input_tokens.unwrap_or(0);
            t.input += input;
            if r.input_token_source == Some("estimated") {
                t.input_estimated += input;
            }
            t.output += r.output_tokens.unwrap_or(0);
        }
        t
    }

    pub fn is_empty(&self) -> bool {
        self.input == 0 && self.output == 0
    }

    pub fn cost(&self, price: &Cost) -> f64 {
        price.of(self.input, self.output)
    }
}

/// The prices of a config, by probe name, for [`super::Report::with_costs`].
pub fn costs_by_probe(config: Option<&crate::config::ReportView>) -> BTreeMap<String, Cost> {
    config
        .map(|c| {
            c.probes
                .iter()
                .filter_map(|p| Some((p.name.to_string(), (**p.cost.as_ref()?).clone())))
                .collect()
        })
        .unwrap_or_default()
}

/// `tokens` and `cost` (each with its `previous`) on a probe's JSON object.
pub(super) fn add_json(o: &mut serde_json::Value, r: &Row) {
    let tokens = |t: &TokenTotals| serde_json::json!({"input": t.input, "input_estimated": t.input_estimated, "output": t.output});
    o["tokens"] = tokens(&r.tokens[0]);
    o["previous"]["tokens"] = tokens(&r.tokens[1]);
    let cost = |t: &TokenTotals| r.cost.as_ref().map(|c| t.cost(c));
    o["cost"] = match &r.cost {
        Some(c) => serde_json::json!({
            "amount": cost(&r.tokens[0]),
            "currency": c.currency,
            "input_per_million": c.input_per_million,
            "output_per_million": c.output_per_million,
        }),
        None => serde_json::Value::Null,
    };
    o["previous"]["cost"] = cost(&r.tokens[1]).into();
}

/// The table of tokens and cost: one row per probe and location that used tokens.
pub(super) fn table(rows: &[Row]) -> Table {
    let mut t = Table::new(
        "Tokens and cost",
        "Tokens the probes sent (input) and were sent (output), as the servers' usage reported them; \
         input marked ~ includes our estimate from the prompt (about four characters a token) for \
         servers that report none. Cost at each probe's `cost:` prices per million tokens.",
        &[
            "probe",
            "location",
            ">input tokens",
            ">output tokens",
            ">cost",
            ">previous cost",
            ">change",
        ],
    );
    t.empty = "No tokens recorded in this period (LLM probes in the local store only).".into();
    for r in rows
        .iter()
        .filter(|r| !r.tokens[0].is_empty() || !r.tokens[1].is_empty())
    {
        let now = &r.tokens[0];
        let input = if now.input_estimated > 0 {
            format!("~{} ({} estimated)", now.input, now.input_estimated)
        } else {
            now.input.to_string()
        };
        let money = |t: &TokenTotals| match &r.cost {
            Some(c) => format!("{} {}", amount(t.cost(c)), c.currency),
            None => "–".into(),
        };
        let change = match &r.cost {
            Some(c) => super::relative(Some(now.cost(c)), Some(r.tokens[1].cost(c))),
            None => "–".into(),
        };
        t.rows.push(vec![
            r.probe.clone(),
            r.location.clone(),
            input,
            now.output.to_string(),
            money(now),
            money(&r.tokens[1]),
            change,
        ]);
    }
    t
}

/// A cost as people read it: cents for sums over a cent, four places for probe-sized
/// ones (a few thousand tokens cost fractions of a cent).
fn amount(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_keep_small_costs_visible() {
        assert_eq!(amount(12.345), "12.35");
        assert_eq!(amount(0.00123), "0.0012");
        assert_eq!(amount(0.0), "0.0000");
    }
}
