import type { Ladder, RoomGoods } from '../../workers/kernel/waiting-room';

// The room's pure rules: order keys, the pre-queue draw, the sample a shard reports, a
// shopper's place estimated from the coordinator's marks, and the ETA.
//
// Every ticket has an order key, a string; the one global order is the keys' byte order:
//   pre-queue (drawn at the start):  "0" + first 16 hex digits of SHA-256(seed || ticketId) + ticketId
//   after the start:                 "1" + join time in ms, 13 digits + ticketId
// so the whole pre-queue comes before anyone who joins after the start.

const encoder = new TextEncoder();

/** The fairness rule as GET .../fairness publishes it with the seed. */
export const FAIRNESS_RULE =
  'Shoppers who joined before the start are ordered by the first 16 hex digits of SHA-256(seed || ticketId) ' +
  '(seed and ticketId as UTF-8 text, lowercase hex), ascending; ties by ticketId in byte order. ' +
  'Everyone who joined after the start follows, in join order (join time in ms, then ticketId).';

/** The order key of a ticket that joined at `joinedAt` (after the start). */
export function arrivalKey(joinedAt: number, ticketId: string): string {
  return `1${String(Math.max(0, Math.floor(joinedAt))).padStart(13, '0')}${ticketId}`;
}

/** Every arrival key of a ticket that joins before `at` sorts below this. */
export function timeHorizon(at: number): string {
  return `1${String(Math.max(0, Math.floor(at))).padStart(13, '0')}`;
}

/** The smallest string above `key`: "below after(k)" means "at most k". */
export function after(key: string): string {
  return `${key}\u0000`;
}

/**
 * Where a key sits on its kind's number line (join time in ms, or the draw's hash as a number),
 * to interpolate between two keys of the same kind; undefined across kinds.
 */
export function keyValue(key: string): { kind: string; value: number } {
  const kind = key.charAt(0);
  return kind === '0' ? { kind, value: Number.parseInt(key.slice(1, 13), 16) || 0 } : { kind, value: Number(key.slice(1, 14)) || 0 };
}

/** Below every key: nothing is known. */
export const NOTHING = '0';

async function sha256Hex(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', encoder.encode(text)));
  let hex = '';
  for (const b of digest) {
    hex += b.toString(16).padStart(2, '0');
  }
  return hex;
}

/** The pre-queue order key of a ticket under the revealed seed. */
export async function shuffleKey(seed: string, ticketId: string): Promise<string> {
  return `0${(await sha256Hex(seed + ticketId)).slice(0, 16)}${ticketId}`;
}

/** The commitment published before the start. */
export function seedHashOf(seed: string): Promise<string> {
  return sha256Hex(seed);
}

/** A fresh seed: 32 random bytes as 64 lowercase hex digits. */
export function newSeed(): string {
  let hex = '';
  for (const b of crypto.getRandomValues(new Uint8Array(32))) {
    hex += b.toString(16).padStart(2, '0');
  }
  return hex;
}

/** The pre-queue as the rule orders it: anyone can run this with the revealed seed. */
export async function drawOrder(seed: string, ticketIds: readonly string[]): Promise<string[]> {
  const keyed = await Promise.all(ticketIds.map(async (id) => ({ id, key: await shuffleKey(seed, id) })));
  return keyed.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)).map((k) => k.id);
}

/** How many keys of a shard it reports exactly (at least), and how many of the rest it samples. */
export const EXACT_KEYS = 256;
export const SAMPLED_KEYS = 32;
/** A decision admits only keys every shard reported exactly; these reports cover this many of the rate's ticks. */
const EXACT_TICKS = 3;
/** However high the rate: a report stays under about 100 KB. */
const EXACT_KEYS_MAX = 2_048;

/**
 * How many keys a shard of this room reports exactly: EXACT_KEYS, or three ticks of its share of
 * the rate when that is more (a room of few shards would otherwise admit at most EXACT_KEYS a
 * shard a decision, whatever its rate), up to EXACT_KEYS_MAX.
 */
export function exactKeysFor(goods: Pick<RoomGoods, 'admitPerSecond' | 'shards'>): number {
  const share = Math.ceil((EXACT_TICKS * goods.admitPerSecond) / Math.max(1, goods.shards));
  return Math.min(EXACT_KEYS_MAX, Math.max(EXACT_KEYS, share));
}

/**
 * The keys a shard reports: the first `exactKeys` of its sorted waiting keys with their ranks,
 * then SAMPLED_KEYS spread evenly over the rest (always ending with the last one).
 */
export function reportKeys(sorted: readonly string[], exactKeys = EXACT_KEYS): { keys: Ladder; exact: number } {
  const exact = Math.min(sorted.length, exactKeys);
  const keys: Ladder = { keys: sorted.slice(0, exact), counts: Array.from({ length: exact }, (_, i) => i) };
  const rest = sorted.length - exact;
  let last = exact - 1;
  for (let k = 1; k <= Math.min(SAMPLED_KEYS, rest); k++) {
    const i = exact + Math.ceil((k * rest) / Math.min(SAMPLED_KEYS, rest)) - 1;
    if (i > last) {
      keys.keys.push(sorted[i] ?? '');
      keys.counts.push(i);
      last = i;
    }
  }
  return { keys, exact };
}

/** Index of the first element of `sorted` that is >= key (binary search). */
export function lowerBound(sorted: readonly string[], key: string): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((sorted[mid] ?? '') < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/**
 * Shoppers ahead of `key` in the whole room. `marks` are (key, shoppers ahead) points of the
 * global line from the coordinator (relative to its cursor); `own` is this shard's sorted
 * waiting keys, of which those from `ownStart` on lie beyond that cursor, `key` among them. At a
 * mark the answer is the mark's; between two marks it is placed by where `key` sits among this
 * shard's own keys between them (the shards' keys interleave evenly: shoppers are spread over
 * the shards by a hash); beyond the last mark (joined since) every own key ahead stands for
 * `spread` shoppers.
 */
export function placeOf(key: string, marks: Ladder, own: readonly string[], ownStart: number, spread: number): number {
  const i = lowerBound(marks.keys, key);
  const nextKey = marks.keys[i];
  const nextAhead = marks.counts[i] ?? 0;
  if (nextKey === key) {
    return nextAhead;
  }
  const prevKey = i > 0 ? marks.keys[i - 1] : undefined;
  const base = prevKey !== undefined ? (marks.counts[i - 1] ?? 0) + 1 : 0;
  const ownFrom = prevKey !== undefined ? Math.max(ownStart, lowerBound(own, after(prevKey))) : ownStart;
  const mine = lowerBound(own, key);
  if (nextKey === undefined) {
    return base + Math.max(0, mine - ownFrom) * spread;
  }
  // Shoppers strictly between the two marks, this key included.
  const span = Math.max(1, nextAhead - base);
  const between = lowerBound(own, nextKey) - ownFrom;
  // Each own key stands for the middle of its share of the span.
  const fraction = between > 0 ? (mine - ownFrom + 0.5) / between : 0.5;
  return base + Math.round(Math.min(1, Math.max(0, fraction)) * (span - 1));
}

/**
 * The pace of joins into a shard's line (`waiting`, in order), for ShardReport.joinsPerSecond:
 * its arrival keys of the last two ticks, or of the time since its oldest one when that is
 * shorter, a second (the pre-queue's keys sort before them and are not arrivals). None for
 * arrivals younger than half a tick: a line's first shoppers of a moment say nothing of its
 * next second.
 */
export function joinPace(waiting: readonly string[], now: number, tickMs: number): { joinsPerSecond?: number } {
  const oldest = waiting[lowerBound(waiting, timeHorizon(0))];
  if (oldest === undefined) {
    return {};
  }
  const span = Math.min(2 * tickMs, now - keyValue(oldest).value);
  if (span < tickMs / 2) {
    return {};
  }
  return { joinsPerSecond: ((waiting.length - lowerBound(waiting, timeHorizon(now - span))) * 1000) / span };
}

/** A round takes effect a tick and this much after its decision: every shard, reporting once a tick, has heard of it by then. */
export const LEAD_MARGIN_MS = 250;

/**
 * How long after the line could take a shopper at its front the admission reaches them, on
 * average, before the coordinator has measured it (`frontLag` in measures.ts): a decision passes
 * a key once every shard has reported after it (each reports once a tick at its own moment: the
 * last of `shards` reports comes `shards / (shards + 1)` of a tick later on average, half a tick
 * for one shard), the key waits for the next decision (half a tick), and the round takes effect
 * a tick and LEAD_MARGIN_MS after it: 2.25 s for one shard, 2.72 s for 32.
 */
export function admissionLagMs(tickMs: number, shards: number): number {
  const s = Math.max(1, shards);
  return Math.round((tickMs * s) / (s + 1) + tickMs / 2 + tickMs + LEAD_MARGIN_MS);
}

/**
 * The room's own delays as the coordinator measured them (`frontLag` and `lateness` in
 * measures.ts), or, for the front lag, admissionLagMs until it has.
 */
export type Measured = { frontLagMs: number; lateMs?: number };

/** The delays an ETA takes: the measured ones, and the front lag `shards` implies until one is measured. */
export function measuredOr(
  frontLagMs: number | null | undefined,
  lateMs: number | null | undefined,
  tickMs: number,
  shards: number,
): Measured {
  return { frontLagMs: frontLagMs ?? admissionLagMs(tickMs, shards), ...(lateMs === null || lateMs === undefined ? {} : { lateMs }) };
}

/**
 * Seconds until a shopper with `position` ahead is admitted at `rate` a second, to the nearest.
 * At the front of the line, the front lag (Measured).
 * Further back, the coordinator knows their key long before the line reaches it, and what is left
 * is the line at the rate and the round's lead: a tick and LEAD_MARGIN_MS after its decision, less
 * half a tick, as each decision admits what the rate accrued since the one before (the bench's
 * line of 4,000 at 200 a second: admitted about 1 s after its place at the rate, where the
 * front's lag promised 2.25 s). Either way, as late as the shards have lately let shoppers in
 * after their round's time (a busy shard hears of a round or runs its tick late).
 */
export function etaSeconds(position: number, rate: number, now: number, startAt: number, tickMs: number, measured: Measured): number {
  const untilStart = Math.max(0, startAt - now);
  const line = ((position + 1) * 1000) / Math.max(1, rate);
  return Math.round((untilStart + Math.max(measured.frontLagMs, line + tickMs / 2 + LEAD_MARGIN_MS) + (measured.lateMs ?? 0)) / 1000);
}
