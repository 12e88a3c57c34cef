#!/usr/bin/env python3
"""Search for REGION_SALT in src/schedule/phase.rs.

An agent whose location is not in `agent.locations` shifts its runs by a share of each
slot taken from a hash of its name. Any hash puts some pairs of names close together;
this picks the number added to the hash so that the names a fleet's regions are commonly
given, in the groups they come in, land far apart. The score of a salt is the worst
group's smallest gap between two of its members, times the group's size (1.0: evenly
spread). Run: python3 scripts/region_salt.py [tries]  (300000 tries take a few minutes.)
"""
import sys

MASK = (1 << 64) - 1


def fnv1a(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def spread(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


GROUPS = [g.split() for g in """
eu us|eu us asia|eu us ap|eu-west us-east|us-east us-west|eu-west us-east ap-south
us-east-1 eu-west-1|us-east-1 us-west-2|us-east-1 eu-west-1 ap-southeast-1
us-east-1 eu-central-1|us-west-2 eu-central-1|eu-west-1 eu-central-1|ap-northeast-1 us-east-1
region-a region-b|region-a region-b region-c|region1 region2|region1 region2 region3
region_a region_b|regionA regionB|a b|a b c|r1 r2|east west|north south
cn-hangzhou cn-beijing|cn-shanghai cn-beijing|cn-hangzhou cn-shanghai
cn-beijing cn-shanghai cn-shenzhen|beijing shanghai|bj sh|sh hz|fra iad|dc1 dc2
site-a site-b|site1 site2|loc-a loc-b|loc1 loc2|agent-a agent-b|agent1 agent2|one two
local remote|lab cloud|home office|primary secondary|eu-1 us-1|eu1 us1|europe america
europe us|tokyo london|frankfurt virginia|singapore frankfurt|zone-a zone-b|east-1 west-1
us-central1 europe-west1|us-central1 asia-east1|europe-west4 us-east4|eastus westeurope
eastus westus|westeurope northeurope
""".replace("\n", "|").split("|") if g.strip()]


def score(salt, hashes):
    share = {n: (spread((h + salt) & MASK) % 1024) / 1024 for n, h in hashes.items()}
    worst = 1.0
    for g in GROUPS:
        for i, a in enumerate(g):
            for b in g[i + 1:]:
                d = abs(share[a] - share[b])
                worst = min(worst, min(d, 1 - d) * len(g))
    return worst


def main():
    tries = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    hashes = {n: fnv1a(n) for g in GROUPS for n in g}
    best = (-1.0, 0)
    for salt in range(tries):
        s = score(salt, hashes)
        if s > best[0]:
            best = (s, salt)
            print(f"salt {salt}: worst group spread {s:.4f}", flush=True)
    print(f"no salt: {score(0, hashes):.4f}")


if __name__ == "__main__":
    main()
