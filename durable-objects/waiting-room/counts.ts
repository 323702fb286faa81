import { keyValue, lowerBound } from './rules';

// How many of the room's waiting shoppers are ahead of a key, from the shards' reports: the
// coordinator's count for the sold-out line and for the marks shards place their shoppers by.

/**
 * One shard's report seen from the current cursor: its keys above it, ranks counted from there.
 * `quiet`: the shard had nobody waiting and reports its next waiting shopper at once, so its
 * horizon holds nothing back. `reportedAt` and `joinsPerMs`: when the shard made the report (by
 * its clock) and how fast its shoppers joined lately, for the ones who joined since (`joinedSince`).
 */
export type Lane = {
  keys: string[];
  ranks: number[];
  exact: number;
  waiting: number;
  horizon: string;
  quiet: boolean;
  covered: number;
  reportedAt?: number;
  joinsPerMs?: number;
};

/**
 * The longest a lane's joins are carried past its report: a shard reports once a tick, and one
 * this late has most likely stopped taking joins (its report is dropped at STALE_REPORT_MS).
 */
const EXTRAPOLATE_MS = 3_000;

/**
 * Shoppers of the lane who joined after its report and before arrival time `at` (ms), at its
 * recent pace: the shards report a tick apart in turn, so a key from the latest report has
 * ahead of it, in every other shard, the shoppers who joined since that shard last reported.
 * Counted as nobody, they put a shopper who joins now about half a tick of the room's joins too
 * far forward (joining at 600 a second, about 8%: the bench's line of 6,000 at 100 admissions a
 * second was admitted 4.7 s later than promised on average). Only a guess: the sure counts
 * (`lower`, the sold-out line's) never include them.
 */
function joinedSince(lane: Lane, kind: string, at: number): number {
  if (kind !== '1' || lane.quiet || !lane.joinsPerMs || lane.reportedAt === undefined) {
    return 0;
  }
  return lane.joinsPerMs * Math.min(EXTRAPOLATE_MS, Math.max(0, at - lane.reportedAt));
}

/**
 * At least / at most how many of the lane's keys are below `x`, and a best guess: between two
 * sampled keys of one kind, by where `x` falls between them on that kind's number line (join
 * times and draw hashes both spread evenly enough for that). The rule; `countsBelow` applies it
 * to many keys at once.
 */
export function countBelow(lane: Lane, x: string): { lower: number; upper: number; guess: number } {
  const i = lowerBound(lane.keys, x);
  const lower = lowerAt(lane, i);
  const upper = Math.max(lower, i >= lane.keys.length ? lane.waiting : (lane.ranks[i] ?? lane.waiting));
  const lo = i > 0 ? lane.keys[i - 1] : undefined;
  const hi = lane.keys[i];
  const v = keyValue(x);
  if (hi === undefined) {
    return { lower, upper, guess: (lower + upper) / 2 + joinedSince(lane, v.kind, v.value) };
  }
  if (upper === lower || lo === undefined) {
    return { lower, upper, guess: (lower + upper) / 2 };
  }
  const [a, b] = [keyValue(lo), keyValue(hi)];
  if (a.kind !== b.kind || a.kind !== v.kind || b.value <= a.value) {
    return { lower, upper, guess: (lower + upper) / 2 };
  }
  const f = Math.min(1, Math.max(0, (v.value - a.value) / (b.value - a.value)));
  return { lower, upper, guess: lower + f * (upper - lower) };
}

/** How many of the lane's shoppers are surely below `x`: what the sold-out line counts, without `countBelow`'s guess. */
export function surelyBelow(lane: Lane, x: string): number {
  return lowerAt(lane, lowerBound(lane.keys, x));
}

/** Shoppers surely below the lane's key `i`: every one up to the reported key before it. */
function lowerAt(lane: Lane, i: number): number {
  return i === 0 ? 0 : (lane.ranks[i - 1] ?? 0) + 1;
}

/**
 * `countBelow`'s lower bound and guess for every key of `xs` (ascending), summed over the lanes:
 * one pass over each lane, every key's kind and value read once, nothing allocated per pair. The
 * marks need it for every sampled key, about 290 per busy shard: key by key, 128 shards'
 * decision took 0.6 s.
 */
export function countsBelow(lanes: readonly Lane[], xs: readonly string[]): { lower: Float64Array; guess: Float64Array } {
  const lower = new Float64Array(xs.length);
  const guess = new Float64Array(xs.length);
  const [xKinds, xValues] = kindsAndValues(xs);
  for (const lane of lanes) {
    const { keys, ranks, waiting } = lane;
    const [kinds, values] = kindsAndValues(keys);
    let i = 0;
    for (let j = 0; j < xs.length; j++) {
      const x = xs[j] ?? '';
      while (i < keys.length && (keys[i] ?? '') < x) {
        i++;
      }
      const lo = lowerAt(lane, i);
      const up = Math.max(lo, i >= keys.length ? waiting : (ranks[i] ?? waiting));
      let g = (lo + up) / 2;
      if (i >= keys.length) {
        g += joinedSince(lane, xKinds[j] ?? '', xValues[j] ?? 0);
      } else if (up !== lo && i > 0) {
        const a = values[i - 1] ?? 0;
        const b = values[i] ?? 0;
        if (kinds[i - 1] === kinds[i] && kinds[i] === xKinds[j] && b > a) {
          g = lo + Math.min(1, Math.max(0, ((xValues[j] ?? 0) - a) / (b - a))) * (up - lo);
        }
      }
      lower[j] = (lower[j] ?? 0) + lo;
      guess[j] = (guess[j] ?? 0) + g;
    }
  }
  return { lower, guess };
}

function kindsAndValues(keys: readonly string[]): [string[], Float64Array] {
  const kinds: string[] = new Array(keys.length);
  const values = new Float64Array(keys.length);
  for (let k = 0; k < keys.length; k++) {
    const v = keyValue(keys[k] ?? '');
    kinds[k] = v.kind;
    values[k] = v.value;
  }
  return [kinds, values];
}
