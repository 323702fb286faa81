import { type Ladder, ROOM_SHARDS, type RoomGoods, type Round, type ShardReport } from '../../workers/kernel/waiting-room';
import { countsBelow, type Lane, surelyBelow } from './counts';
import { frontLag, heardLate, latestBought } from './measures';
import { after, etaSeconds, LEAD_MARGIN_MS, lowerBound, measuredOr, NOTHING, timeHorizon } from './rules';

// The coordinator's decision, pure: from the shards' latest reports, the stock and the clock,
// where the one admission cursor goes next, which waiting keys can no longer get a unit (the
// sold-out line), the marks shards place their shoppers by, and whether the room holds
// shoppers in line at all (`auto`). The coordinator calls it about once a tick.

/** A report as the coordinator holds it: when it came. */
export type Reported = ShardReport & { receivedAt: number };

export type HubState = {
  round: number;
  /** Every waiting key up to here is admitted (or about to be, at its round's time). '' before the first round. */
  cursor: string;
  /** Recent rounds, ascending, so a shard that missed one stamps each ticket with its own round. */
  rounds: Round[];
  /** Admissions the rate allows right now (a bucket of the rate's worth for the time since the last decision, at most two ticks). */
  tokens: number;
  decidedAt: number;
  /** From `since` on the room is `on` (holds shoppers in line); before it, the opposite. */
  active: { on: boolean; since: number };
  quietSince: number | null;
  arrivals: { at: number; n: number }[];
  admittedSamples: { at: number; n: number }[];
  /** The stock object's confirmed count at recent decisions (see `settledLately`). */
  confirmedSamples: { at: number; n: number }[];
  /** The line the previous decision found (a ticket is told sold out only when two decisions agree). */
  lastLine: string | null;
  /** The wait of a shopper who joins an empty line, as measured (see `frontLag`); null until a round measures it. */
  frontLagMs: number | null;
  /** How late the shards let shoppers in after their round's time, lately (see `lateness`); null until one says. */
  lateMs: number | null;
  /** Whether the last decision admitted every key it could (so the next round's keys waited for no rate). */
  drained: boolean;
  /** Each shard's latest `bought` (kept across restarts: a quiet shard reports it once). */
  bought: Record<string, number>;
};

/**
 * The stock object's figures: units not held, reservations waiting for Postgres, and confirmed
 * orders; `exact` when the last two are every stock shard's own count, not shard 0's scaled up;
 * `admittedQueued` and `admittedConfirmed`, those of the last two made by shoppers the room let
 * in (absent from stock objects before them).
 */
export type Stock = {
  remaining: number;
  queued: number;
  confirmed: number;
  exact?: boolean;
  admittedQueued?: number;
  admittedConfirmed?: number;
};

/** The part of every reply a decision fixes until the next one. */
export type HubView = {
  line: string | null;
  marks: Ladder;
  waiting: number;
  preQueued: number;
  remaining: number;
  outstanding: number;
  admittedPerSecond: number;
  lastEtaSeconds: number;
  /** The measured front lag the ETAs take (absent until measured, or from an earlier build). */
  frontLagMs?: number;
};

/** Reports older than this are from a shard that went quiet; they no longer hold the cursor back. */
export const STALE_REPORT_MS = 30_000;
const ROUNDS_KEPT = 64;
const MARKS_MAX = 256;
const MARKS_EXACT = 64;
const MARK_STEP = 1.04;
/**
 * Keys that joined this recently are left for the next decision: a shard whose first shopper
 * just came reports at once (before answering the join), so by then its report is in.
 */
const FRESH_JOIN_GRACE_MS = 500;
const AUTO_WINDOW_MS = 3_000;
const AUTO_QUIET_MS = 5_000;
/**
 * How long a settled purchase may still count as outstanding at its shard: the stock object
 * knows first; the shard hears from the consumer right after (a slow consumer: seconds later)
 * and reports within a tick. Too short a window draws the sold-out line on that double count
 * and tells shoppers who can still buy that they cannot (a 3 s window did so for results 3 s
 * behind their settlement); longer only delays the line while units are left, never the news
 * of a true sell-out (see `left` in decide).
 */
const SETTLE_LAG_MS = 10_000;
/** A decision admits at most this many ticks' worth of the rate, however long since the last. */
const BUCKET_TICKS = 2;
/** Whether a room holds shoppers in line before its coordinator has said anything. */
export function defaultActive(goods: RoomGoods, now: number): boolean {
  if (goods.mode === 'always') {
    return true;
  }
  return goods.mode === 'auto' && goods.preQueueSeconds > 0 && now < goods.startAt;
}

/** Whether `active` holds shoppers in line at `now`. */
export function activeAt(active: { on: boolean; since: number }, now: number): boolean {
  return now >= active.since ? active.on : !active.on;
}

export function initialHubState(goods: RoomGoods, now: number): HubState {
  const on = defaultActive(goods, now);
  return {
    round: 0,
    cursor: '',
    rounds: [],
    tokens: 0,
    decidedAt: 0,
    active: { on, since: 0 },
    quietSince: null,
    arrivals: [],
    admittedSamples: [],
    confirmedSamples: [],
    lastLine: null,
    frontLagMs: null,
    lateMs: null,
    drained: true,
    bought: {},
  };
}

/** One shard's report seen from the current cursor: its keys above it, ranks counted from there. */
function laneOf(r: Reported, cursor: string): Lane {
  const i0 = cursor === '' ? 0 : lowerBound(r.keys.keys, after(cursor));
  // Keys at or below the cursor that the shard had not admitted when it reported.
  const base = i0 < r.keys.keys.length ? (r.keys.counts[i0] ?? 0) : r.waiting;
  return {
    keys: r.keys.keys.slice(i0),
    ranks: r.keys.counts.slice(i0).map((rank) => rank - base),
    exact: Math.max(0, r.exact - i0),
    waiting: Math.max(0, r.waiting - base),
    horizon: r.horizon,
    quiet: r.quiet === true,
    covered: base + r.covered,
    // The shard's clock, which stamped its keys (a shard of an earlier build sends neither: its
    // report counts from when it came, at the others' pace).
    reportedAt: r.at ?? r.receivedAt,
    ...(r.joinsPerSecond !== undefined ? { joinsPerMs: r.joinsPerSecond / 1000 } : {}),
  };
}

/**
 * Every busy lane with a join pace: a shard whose line is too young to measure one (its first
 * report, at its first shopper) takes the others' mean, as the shoppers spread evenly over the
 * shards (by the hash of their id). Quiet lanes report their next shopper at once and need none.
 */
function withPace(lanes: Lane[]): Lane[] {
  const known = lanes.filter((l) => !l.quiet && l.joinsPerMs !== undefined);
  if (known.length === 0 || known.length === lanes.length) {
    return lanes;
  }
  const mean = known.reduce((s, l) => s + (l.joinsPerMs ?? 0), 0) / known.length;
  return lanes.map((l) => (l.quiet || l.joinsPerMs !== undefined ? l : { ...l, joinsPerMs: mean }));
}

/**
 * At most MARKS_MAX marks, dense where a wrong place shows most: every one of the first
 * MARKS_EXACT, then each about MARK_STEP further on than the last kept, and the last one.
 */
function thin(marks: Ladder): Ladder {
  const n = marks.keys.length;
  if (n <= MARKS_MAX) {
    return marks;
  }
  const out: Ladder = { keys: [], counts: [] };
  let next = 0;
  for (let i = 0; i < n; i++) {
    const count = marks.counts[i] ?? 0;
    if (i === n - 1 || count < MARKS_EXACT || count >= next) {
      out.keys.push(marks.keys[i] ?? '');
      out.counts.push(count);
      next = Math.max(MARKS_EXACT, Math.ceil(count * MARK_STEP) + 1);
    }
  }
  if (out.keys.length <= MARKS_MAX) {
    return out;
  }
  // A line so long that even the steps are too many: spread them evenly.
  const even: Ladder = { keys: [], counts: [] };
  for (let k = 1; k <= MARKS_MAX; k++) {
    const i = Math.ceil((k * out.keys.length) / MARKS_MAX) - 1;
    even.keys.push(out.keys[i] ?? '');
    even.counts.push(out.counts[i] ?? 0);
  }
  return even;
}

function activity(
  state: HubState,
  goods: RoomGoods,
  waiting: number,
  now: number,
  tickMs: number,
): Pick<HubState, 'active' | 'quietSince'> {
  const recent = state.arrivals.filter((a) => a.at > now - AUTO_WINDOW_MS).reduce((s, a) => s + a.n, 0);
  const over = recent / (AUTO_WINDOW_MS / 1000) > goods.admitPerSecond;
  const on = activeAt(state.active, now);
  let desired: boolean;
  let quietSince = state.quietSince;
  if (goods.mode !== 'auto') {
    desired = goods.mode === 'always';
  } else if (goods.preQueueSeconds > 0 && now < goods.startAt) {
    desired = true;
  } else if (!on) {
    desired = over;
  } else {
    // Off again once the line has been empty and the arrivals within the rate for a while.
    quietSince = waiting === 0 && !over ? (quietSince ?? now) : null;
    desired = !(quietSince !== null && now - quietSince >= AUTO_QUIET_MS && now >= goods.startAt);
  }
  if (desired === state.active.on) {
    return { active: state.active, quietSince: desired ? quietSince : null };
  }
  // A change takes effect a tick ahead, so every shard switches at the same moment.
  return { active: { on: desired, since: now + tickMs + LEAD_MARGIN_MS }, quietSince: null };
}

/**
 * One decision. The cursor moves over the keys every shard has reported (below the lowest
 * horizon), in order, by as many as the rate allows and the free units cover; each move is a
 * round that takes effect one tick later, so every shard hears of it before it admits anyone.
 * Free units: not held (remaining) plus reservations still waiting for Postgres (their
 * shoppers have no result yet), minus every admitted shopper who may still buy. Admissions
 * count only the waiting reservations of shoppers the room let in where the stock object counts
 * them: another shopper's (an `auto` room's, from a token got while its line was off) will not
 * come back for the line, and counting it freed a unit for one shopper too many.
 */
export function decide(
  state: HubState,
  reports: Reported[],
  goods: RoomGoods,
  stock: Stock | undefined,
  arrivals: number,
  now: number,
  tickMs: number,
): { state: HubState; view: HubView } {
  const fresh = reports.filter((r) => now - r.receivedAt <= STALE_REPORT_MS);
  const lanes = withPace(fresh.map((r) => laneOf(r, state.cursor)));
  // Below the lowest horizon every waiting key of every shard is known (strings: no Math.min).
  // A quiet shard's next key reaches this object before its shopper hears of the join, so it
  // holds nothing back: keys fresher than the grace wait for the next decision anyway.
  let horizon = lanes.length > 0 ? timeHorizon(now - FRESH_JOIN_GRACE_MS) : NOTHING;
  for (const l of lanes) {
    if (!l.quiet && l.horizon < horizon) {
      horizon = l.horizon;
    }
  }
  // Sorted without a comparator: code-unit order, the keys' own order (`<`), and faster.
  const front = lanes
    .flatMap((l) => l.keys.slice(0, l.exact))
    .filter((k) => k < horizon)
    .sort();
  const outstanding = fresh.reduce((s, r) => s + r.outstanding, 0) + lanes.reduce((s, l) => s + l.covered, 0);
  // Admissions take the strict figure; the sold-out line also counts purchases settled lately,
  // whose shoppers may still look outstanding (a line drawn too early would send away shoppers
  // who can still buy; one drawn a few seconds late only keeps them waiting that long).
  const free = stock ? stock.remaining + stock.queued - outstanding : Number.POSITIVE_INFINITY;
  const freeToAdmit = stock ? stock.remaining + (stock.admittedQueued ?? stock.queued) - outstanding : Number.POSITIVE_INFINITY;
  const confirmedSamples = stock
    ? [...state.confirmedSamples.filter((c) => c.at > now - SETTLE_LAG_MS), { at: now, n: stock.confirmed }]
    : state.confirmedSamples;
  const settledLately = stock ? Math.max(0, stock.confirmed - Math.min(...confirmedSamples.map((c) => c.n))) : 0;
  const ended = now >= goods.endAt;
  const open = now >= goods.startAt && !ended && !goods.paused;
  const bought = latestBought(state.bought, reports);
  const unheard = heardLate(stock, goods, reports, bought, settledLately);

  const capacity = Math.max(1, goods.admitPerSecond);
  // The rate accrues for the time since the last decision, up to BUCKET_TICKS ticks: decisions
  // come about a tick apart, later from a busy coordinator, and a bucket of one second lost what
  // a late one had accrued (deciding every 1.3 s, a room of 100 a second admitted 77).
  const elapsed = Math.min(BUCKET_TICKS * tickMs, Math.max(0, state.decidedAt === 0 ? tickMs : now - state.decidedAt));
  const bucket = capacity * Math.max(1, elapsed / 1000);
  let tokens = open ? Math.min(bucket, state.tokens + (capacity * elapsed) / 1000) : 0;
  const n = open ? Math.max(0, Math.min(Math.floor(tokens), Math.floor(Math.max(0, freeToAdmit + unheard)), front.length)) : 0;
  let { round, cursor, rounds, frontLagMs } = state;
  if (n > 0) {
    round += 1;
    cursor = front[n - 1] ?? cursor;
    const at = now + tickMs + LEAD_MARGIN_MS;
    rounds = [...rounds, { round, cursor, at }].slice(-ROUNDS_KEPT);
    tokens -= n;
    if (n === front.length) {
      frontLagMs = frontLag(frontLagMs, front, at, state.drained, tickMs);
    }
  }

  const rest = front.slice(n);
  // Nothing for sale and nothing on its way to Postgres: no waiting shopper can buy now, whoever
  // still looks outstanding (free is at most 0), and the line is drawn without waiting out the
  // settle window.
  const nothingLeft = stock !== undefined && stock.remaining <= 0 && stock.queued <= 0;
  const left = free + (nothingLeft ? 0 : settledLately) - n;
  const waiting = Math.max(0, lanes.reduce((s, l) => s + l.waiting, 0) - n);
  const preQueued = fresh.reduce((s, r) => s + r.unkeyed, 0);
  // Reported keys beyond what is known exactly: their places are estimated from each shard's sample.
  const sampled = [...new Set(lanes.flatMap((l) => l.keys).filter((k) => k >= horizon))].sort();
  // Shoppers ahead of a sampled key, every lane counted (the n admitted now no longer are).
  const lowerAt = (x: string) => lanes.reduce((sum, l) => sum + surelyBelow(l, x), 0) - n;

  let found: string | null = null;
  if (ended) {
    found = '';
  } else if (left <= 0) {
    found = after(cursor);
  } else if (left < rest.length) {
    found = rest[left] ?? null;
  } else {
    // The first sampled key with `left` shoppers surely ahead (the count only grows along the keys).
    let lo = 0;
    let hi = sampled.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (lowerAt(sampled[mid] ?? '') >= left) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    found = sampled[lo] ?? null;
  }
  // The later of this line and the last one: both decisions must agree that a ticket is out.
  const line = ended ? '' : found === null || state.lastLine === null ? null : found > state.lastLine ? found : state.lastLine;

  const guesses = countsBelow(lanes, sampled).guess;
  const marks = thin({
    keys: [...rest, ...sampled],
    counts: [...rest.map((_, i) => i), ...sampled.map((_, j) => Math.round((guesses[j] ?? 0) - n))],
  });

  const admittedTotal = fresh.reduce((s, r) => s + r.admitted, 0);
  const admittedSamples = [...state.admittedSamples.filter((a) => a.at > now - 10_000), { at: now, n: admittedTotal }];
  const oldest = admittedSamples[0];
  const admittedPerSecond = oldest && now > oldest.at ? Math.round(((admittedTotal - oldest.n) * 1000) / (now - oldest.at)) : 0;
  const nextArrivals = [...state.arrivals.filter((a) => a.at > now - AUTO_WINDOW_MS * 2), { at: now, n: arrivals }];
  const next: HubState = {
    ...state,
    round,
    cursor,
    rounds,
    tokens,
    decidedAt: now,
    arrivals: nextArrivals,
    admittedSamples,
    confirmedSamples,
    lastLine: found,
    frontLagMs,
    drained: n === front.length,
    bought,
  };
  const { active, quietSince } = activity(next, goods, waiting + preQueued, now, tickMs);
  const measured = measuredOr(next.frontLagMs, next.lateMs, tickMs, goods.shards ?? ROOM_SHARDS);
  return {
    state: { ...next, active, quietSince },
    view: {
      line,
      marks,
      waiting,
      preQueued,
      remaining: stock?.remaining ?? 0,
      outstanding: outstanding + n,
      admittedPerSecond,
      lastEtaSeconds: etaSeconds(Math.max(0, waiting + preQueued - 1), capacity, now, now, tickMs, measured),
      ...(next.frontLagMs === null ? {} : { frontLagMs: next.frontLagMs }),
    },
  };
}

/** The rounds a shard that knows round `known` has not heard of yet. */
export function roundsAfter(state: HubState, known: number): Round[] {
  return state.rounds.filter((r) => r.round > known);
}
