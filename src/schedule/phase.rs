//! Where in its interval each probe runs: its phase.
//!
//! **Probes of one endpoint take their own slots.** The probes of one endpoint (one
//! lane: scheme, host and port) share their shortest interval in equal slots, one
//! each, in name order, from a start derived from the endpoint: two probes of a
//! one-slot server at 30 s run 15 s apart, never at one moment, and take turns besides
//! (probe/lane.rs) should a run outlast its slot. Probes of different endpoints spread
//! by the endpoints' hashes, so 1,000 probes of 1,000 endpoints at 30 s start about
//! 30 ms apart instead of all at once.
//!
//! **Regions take turns too.** Agents in several regions run the same file; each
//! shifts every slot by its own share of it, so no two regions hit a one-slot server
//! at one moment: the *r*-th of `agent.locations`' *R* regions by *r*/*R* of a slot,
//! exactly; without that list, by a share derived from the location's name (two
//! arbitrary names land within a tenth of a slot of each other about one time in five;
//! common pairs such as `eu`/`us` are placed apart, see `REGION_SALT`).
//! Results still compare: every region runs each probe once per interval, and the
//! fleet rules judge windows of minutes, not instants.
//!
//! A phase is a pure function of the file (every probe's name, endpoint and interval,
//! all shards' included) and the location: the same after every restart.

use std::collections::BTreeMap;
use std::time::Duration;

/// 64-bit FNV-1a: tiny, and stable across Rust versions (std's hasher is not), so a
/// phase never changes between releases.
pub fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The splitmix64 finalizer: FNV-1a alone clusters names that differ only in a trailing
/// number (`probe-1`, `probe-2`, ...); this spreads them.
pub(super) fn spread(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A place in [0, `period`) derived from `name`: the same for the same name, spread
/// for different ones.
pub fn grid_offset(name: &str, period: Duration) -> Duration {
    let z = spread(fnv1a(name));
    let p = period.as_nanos().max(1);
    Duration::from_nanos((u128::from(z) % p) as u64)
}

/// How long until a probe with `phase` in `period` next runs, given the wall-clock
/// time since the epoch.
///
/// Example: period 30 s, phase 12.5 s, now = 1_699_999_987 s (7 s into a 30 s slot):
/// the first tick is in 5.5 s.
pub fn first_tick_delay(phase: Duration, period: Duration, since_epoch: Duration) -> Duration {
    let p = period.as_nanos().max(1);
    let offset = phase.as_nanos() % p;
    let into_slot = since_epoch.as_nanos() % p;
    Duration::from_nanos(((offset + p - into_slot) % p) as u64)
}

/// A probe on an interval, as phases are placed.
#[derive(Debug, Clone, Copy)]
pub struct Placing<'a> {
    pub name: &'a str,
    /// Its endpoint (`probe::lane::lane_key`).
    pub lane: &'a str,
    pub period: Duration,
    /// A cold probe: the cold probes of an endpoint are spread over their own shortest
    /// interval, apart from the others, so that their quiet windows do not meet.
    pub cold: bool,
}

/// Each probe's phase, in the order given, for the agent at `location`; `locations` is
/// `agent.locations` (empty when the file does not list them).
pub fn phases(probes: &[Placing<'_>], location: &str, locations: &[String]) -> Vec<Duration> {
    let mut by_lane: BTreeMap<(&str, bool), Vec<usize>> = BTreeMap::new();
    for (i, p) in probes.iter().enumerate() {
        by_lane.entry((p.lane, p.cold)).or_default().push(i);
    }
    let mut out = vec![Duration::ZERO; probes.len()];
    for ((lane, cold), mut members) in by_lane {
        members.sort_by_key(|&i| probes[i].name);
        let shortest = members
            .iter()
            .map(|&i| probes[i].period)
            .min()
            .unwrap_or_default();
        let slot = shortest / members.len() as u32;
        // The cold probes from a start of their own, not on the others' first slot.
        let origin = if cold {
            format!("{lane} cold")
        } else {
            lane.to_owned()
        };
        let start = grid_offset(&origin, shortest) + region_shift(slot, location, locations);
        for (k, &i) in members.iter().enumerate() {
            let period = probes[i].period.as_nanos().max(1);
            let at = (start + slot * k as u32).as_nanos() % period;
            out[i] = Duration::from_nanos(at as u64);
        }
    }
    out
}

/// Added to an unlisted location's hash. Any hash lands some pairs of names close; with
/// none added, `eu` and `us` fell 2.5 % of a slot apart. This one was searched for
/// (scripts/region_salt.py) to put the names one fleet's regions are commonly given
/// (`eu`/`us`, `us-east-1`/`eu-west-1`, `region-a`/`region-b`, `cn-beijing`/
/// `cn-shanghai`, `dc1`/`dc2`, ...) at least 9 % of a slot apart. Other names are still
/// a hash: `agent.locations` is the exact answer.
const REGION_SALT: u64 = 270_616;

/// This region's share of a slot: the *r*-th of *R* listed locations takes *r*/*R*; an
/// unlisted one a share from its name's hash, in 1/1024ths.
fn region_shift(slot: Duration, location: &str, locations: &[String]) -> Duration {
    let nanos = slot.as_nanos();
    let share = match locations.iter().position(|l| l == location) {
        Some(r) => nanos * r as u128 / locations.len() as u128,
        None => nanos * u128::from(unlisted_share(location)) / 1024,
    };
    Duration::from_nanos(share as u64)
}

/// An unlisted location's share of a slot, in 1/1024ths.
fn unlisted_share(location: &str) -> u64 {
    spread(fnv1a(location).wrapping_add(REGION_SALT)) % 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    const S30: Duration = Duration::from_secs(30);

    #[test]
    fn offsets_are_stable_and_inside_the_period() {
        assert_eq!(grid_offset("chat-eu", S30), grid_offset("chat-eu", S30));
        for i in 0..1000 {
            assert!(grid_offset(&format!("probe-{i}"), S30) < S30);
        }
        // FNV-1a's published test vector, so the offset never changes across releases.
        assert_eq!(fnv1a("a"), 0xaf63dc4c8601ec8c);
    }

    #[test]
    fn a_thousand_endpoints_spread_over_the_interval() {
        let lanes: Vec<String> = (0..1000).map(|i| format!("http://host-{i}:80")).collect();
        let names: Vec<String> = (0..1000).map(|i| format!("probe-{i}")).collect();
        let probes: Vec<Placing> = (0..1000)
            .map(|i| Placing {
                name: &names[i],
                lane: &lanes[i],
                period: S30,
                cold: false,
            })
            .collect();
        let mut offsets = phases(&probes, "eu", &[]);
        offsets.sort();
        // No second of the interval holds more than three times its fair share (33).
        let mut per_second = [0u32; 30];
        for o in &offsets {
            per_second[o.as_secs() as usize] += 1;
        }
        assert!(per_second.iter().all(|&n| n < 100), "{per_second:?}");
        let same_ms = offsets
            .windows(2)
            .filter(|w| w[1].as_millis() == w[0].as_millis())
            .count();
        assert!(same_ms < 50, "{same_ms}");
    }

    #[test]
    fn probes_of_one_endpoint_take_equal_slots_of_the_shortest_interval() {
        let lane = "http://llama:8080";
        let probes = [
            Placing {
                name: "chat",
                lane,
                period: S30,
                cold: false,
            },
            Placing {
                name: "completions",
                lane,
                period: S30,
                cold: false,
            },
            Placing {
                name: "vision",
                lane,
                period: Duration::from_secs(60),
                cold: false,
            },
            Placing {
                name: "other",
                lane: "http://elsewhere:80",
                period: S30,
                cold: false,
            },
        ];
        let p = phases(&probes, "eu", &[]);
        // Three probes of llama: 10 s apart modulo the shortest interval.
        let at = |i: usize| p[i].as_nanos() % S30.as_nanos();
        let mut mine = [at(0), at(1), at(2)];
        mine.sort();
        assert_eq!(mine[1] - mine[0], Duration::from_secs(10).as_nanos());
        assert_eq!(mine[2] - mine[1], Duration::from_secs(10).as_nanos());
        // The 60 s probe never lands on a 30 s probe's tick.
        for k in 0..2u128 {
            let tick = p[2].as_nanos() + k * S30.as_nanos();
            assert_ne!(tick % S30.as_nanos(), at(0));
            assert_ne!(tick % S30.as_nanos(), at(1));
        }
        assert!(p.iter().zip([S30, S30, S30 * 2, S30]).all(|(ph, per)| *ph < per));
    }

    #[test]
    fn the_cold_probes_of_an_endpoint_spread_over_their_own_interval() {
        let lane = "http://ollama:11434";
        let p = |name, period, cold| Placing {
            name,
            lane,
            period,
            cold,
        };
        let half_hour = Duration::from_secs(1800);
        let at = phases(
            &[
                p("warm", S30, false),
                p("cold-llama", half_hour, true),
                p("cold-qwen", half_hour, true),
            ],
            "eu",
            &[],
        );
        // Fifteen minutes apart: each one's quiet window (minutes long) clear of the
        // other's, where slots of the 30 s probe would have put them 15 s apart.
        let apart = at[1].abs_diff(at[2]);
        assert_eq!(apart.min(half_hour - apart), Duration::from_secs(900));
    }

    #[test]
    fn listed_regions_split_each_slot_and_unlisted_ones_shift_by_their_name() {
        let lane = "http://llama:8080";
        let two = [
            Placing {
                name: "a",
                lane,
                period: S30,
                cold: false,
            },
            Placing {
                name: "b",
                lane,
                period: S30,
                cold: false,
            },
        ];
        let regions = ["eu-west".to_owned(), "us-east".to_owned(), "ap-south".to_owned()];
        let at: Vec<Vec<Duration>> = regions.iter().map(|r| phases(&two, r, &regions)).collect();
        // Six runs in 30 s, 5 s apart: two probes, each in three regions.
        let mut all: Vec<u128> = at.iter().flatten().map(Duration::as_nanos).collect();
        all.sort();
        for w in all.windows(2) {
            assert_eq!(w[1] - w[0], Duration::from_secs(5).as_nanos(), "{all:?}");
        }
        // The same location lands in the same place, listed or not.
        assert_eq!(phases(&two, "eu", &[]), phases(&two, "eu", &[]));
        assert_ne!(phases(&two, "eu", &[]), phases(&two, "us", &[]));
    }

    #[test]
    fn common_pairs_of_unlisted_region_names_land_apart() {
        for pair in [
            ["eu", "us"],
            ["eu-west", "us-east"],
            ["us-east-1", "eu-west-1"],
            ["us-east-1", "us-west-2"],
            ["region-a", "region-b"],
            ["region1", "region2"],
            ["a", "b"],
            ["cn-beijing", "cn-shanghai"],
            ["cn-hangzhou", "cn-beijing"],
            ["fra", "iad"],
            ["dc1", "dc2"],
            ["agent-a", "agent-b"],
        ] {
            let (x, y) = (unlisted_share(pair[0]), unlisted_share(pair[1]));
            let apart = x.abs_diff(y).min(1024 - x.abs_diff(y));
            assert!(apart >= 92, "{pair:?}: {apart}/1024 of a slot apart");
        }
    }

    #[test]
    fn first_tick_lands_on_the_phase() {
        let p = S30;
        let phase = Duration::from_millis(12_500);
        for now_ms in [0u64, 1, 7_000, 29_999, 1_700_000_007_123] {
            let now = Duration::from_millis(now_ms);
            let d = first_tick_delay(phase, p, now);
            assert!(d < p);
            assert_eq!((now + d).as_nanos() % p.as_nanos(), phase.as_nanos());
        }
        assert_eq!(
            first_tick_delay(phase, p, Duration::from_secs(1_699_999_987)),
            Duration::from_millis(5500)
        );
    }
}
