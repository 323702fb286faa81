import type { GuardReply, GuardReport, WindowReport, WindowShare } from '../../workers/kernel/contract';
import { dropScoped, type NewBan, RATE_WINDOW_MS, type Scoped, scopedEntries, scopedValue } from '../../workers/kernel/guard-book';
import { SlidingLog, WindowCounter } from '../../workers/kernel/windows';

// A guard shard's view of the whole fleet: every isolate decides the limits on its own and
// reports, in the background, what it saw. The shard sums those reports per client key: the ban
// counter across isolates (a key over the threshold is banned, and the ban spreads with the
// next replies), each rate window's admissions across isolates (a window full fleet-wide is
// answered with how long it stays full), and each isolate's share of every limit, in
// proportion to the requests it sees of the key, so N isolates together admit about the limit.

/** An isolate that has not reported a key for this long no longer takes a share of its limits. */
export const SOURCE_TTL_MS = 2_000;
const SWEEP_EVERY_MS = 10_000;
const SWEEP_ABOVE_ENTRIES = 50_000;
/**
 * After an operator lifts a ban, reports of the client still on their way (an isolate sends
 * every 0.5 s and holds a key at most 8 rounds) carry what it did before the lift: for this
 * long they neither ban it again nor count toward a new ban. The isolates' own windows still
 * answer 429 meanwhile.
 */
export const LIFT_GRACE_MS = 5_000;

type Source = { seen: number; at: number };
/** A window's reporting isolates, the first held in place (most clients are seen by one). */
type Window = { log: SlidingLog; sources: Scoped<Source> };
/** A client's ban counter and rate windows (the first window held in place: guard-book.ts's Scoped). */
type Entry = Scoped<Window> & { hits: WindowCounter; seen: number };

/**
 * Splits `limit` among sources in proportion to their demand, by largest remainder, so the
 * shares add up to the limit exactly; while there are no more sources than the limit, every
 * source gets at least one (a shopper's single request on a quiet isolate is not refused for
 * want of a share).
 */
export function splitLimit(limit: number, demand: ReadonlyMap<string, number>): Map<string, number> {
  const total = [...demand.values()].reduce((a, b) => a + b, 0);
  const shares = new Map<string, number>();
  if (demand.size <= 1 || total <= 0) {
    for (const id of demand.keys()) {
      shares.set(id, limit);
    }
    return shares;
  }
  const exact = [...demand].map(([id, d]) => ({ id, exact: (limit * d) / total }));
  let left = limit;
  for (const s of exact) {
    const floor = Math.floor(s.exact);
    shares.set(s.id, floor);
    left -= floor;
  }
  // Remainders compared in quarters, then by source: near-equal demand keeps the same order from
  // one report to the next, so the spare units do not hop between isolates (each hop lets one extra through).
  const rest = (x: number) => Math.round((x - Math.floor(x)) * 4);
  exact.sort((a, b) => rest(b.exact) - rest(a.exact) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  for (const s of exact) {
    if (left <= 0) {
      break;
    }
    shares.set(s.id, (shares.get(s.id) ?? 0) + 1);
    left--;
  }
  // More isolates than the limit allows requests: the spare ones get none, or together they would let one each through.
  const least = demand.size > limit ? 0 : 1;
  for (const [id, n] of shares) {
    shares.set(id, Math.max(least, n));
  }
  return shares;
}

/** The in-memory fleet view of one shard. */
export class GuardLedger {
  private readonly entries = new Map<string, Entry>();
  private readonly lifts = new Map<string, number>();
  private sweptAt = 0;
  private horizonMs = 10_000;

  /**
   * Folds one isolate's report in, and answers what that isolate should know: bans in force for
   * its keys (`bans` is the shard's map; new ones are returned to persist), bans it asked about
   * that no longer hold, and its share of each window's limit.
   */
  account(report: GuardReport, bans: ReadonlyMap<string, number>, now: number): { reply: GuardReply; newBans: NewBan[] } {
    const { policy, isolate } = report;
    this.horizonMs = Math.max(policy.windowMs, SOURCE_TTL_MS);
    this.sweep(now);
    const reply: GuardReply = { bans: [], lifted: [], shares: [] };
    const newBans: NewBan[] = [];
    const ban = (id: string, until: number): void => {
      newBans.push({ id, until });
      reply.bans.push({ id, retryAfterMs: until - now });
      this.entries.delete(id);
    };
    for (const key of report.keys) {
      const until = bans.get(key.id);
      if (until !== undefined && until > now) {
        reply.bans.push({ id: key.id, retryAfterMs: until - now });
        continue;
      }
      const liftedAt = this.lifts.get(key.id);
      const justLifted = liftedAt !== undefined && now - liftedAt < LIFT_GRACE_MS;
      if (!justLifted && key.bannedUntil !== undefined && key.bannedUntil > now) {
        ban(key.id, Math.min(key.bannedUntil, now + policy.durationMs));
        continue;
      }
      const entry = this.entry(key.id, policy.windowMs, now);
      if (!justLifted && key.hits > 0 && entry.hits.hit(now, policy.windowMs, key.hits) > policy.threshold) {
        ban(key.id, now + policy.durationMs);
        continue;
      }
      if (key.check) {
        reply.lifted.push(key.id);
      }
      for (const w of key.windows) {
        reply.shares.push(this.window(entry, key.id, w, isolate, now));
      }
    }
    return { reply, newBans };
  }

  /** Forgets what a client did (after an operator lifts its ban). */
  forget(id: string, now = Date.now()): void {
    this.entries.delete(id);
    for (const [key, at] of this.lifts) {
      if (now - at >= LIFT_GRACE_MS) {
        this.lifts.delete(key);
      }
    }
    this.lifts.set(id, now);
  }

  get size(): number {
    return this.entries.size;
  }

  private window(entry: Entry, id: string, report: WindowReport, isolate: string, now: number): WindowShare {
    const w = scopedValue(entry, report.scope, (): Window => ({ log: new SlidingLog(), sources: {} }));
    // A clock ahead of the shard's would keep a window full; an admission is never in the future.
    w.log.addMany(report.admitted.map((t) => Math.min(t, now)));
    const source = scopedValue(w.sources, isolate, (): Source => ({ seen: 0, at: 0 }));
    source.seen = Math.max(1, report.seen);
    source.at = now;
    const blockedMs = w.log.waitMs(now, RATE_WINDOW_MS, report.perSecond);
    return {
      id,
      scope: report.scope,
      perSecond: this.share(w.sources, isolate, report.perSecond, now),
      limit: report.perSecond,
      blockedMs,
    };
  }

  /**
   * The reporting isolate's share of a window's limit, after dropping the sources that went
   * quiet. A window only this isolate reports (most shoppers are seen by one) is all its own,
   * found without the demand map and the split.
   */
  private share(sources: Scoped<Source>, isolate: string, limit: number, now: number): number {
    if (sources.more === undefined || sources.more.size === 0) {
      return limit;
    }
    const demand = new Map<string, number>();
    for (const [from, s] of scopedEntries(sources)) {
      if (now - s.at > SOURCE_TTL_MS) {
        dropScoped(sources, from);
      } else {
        demand.set(from, s.seen);
      }
    }
    return splitLimit(limit, demand).get(isolate) ?? limit;
  }

  private entry(id: string, windowMs: number, now: number): Entry {
    let entry = this.entries.get(id);
    if (!entry) {
      entry = { hits: new WindowCounter(windowMs), seen: now };
      this.entries.set(id, entry);
    }
    entry.seen = now;
    return entry;
  }

  private sweep(now: number): void {
    const every = this.entries.size >= SWEEP_ABOVE_ENTRIES ? RATE_WINDOW_MS : SWEEP_EVERY_MS;
    if (now - this.sweptAt < every) {
      return;
    }
    this.sweptAt = now;
    for (const [id, entry] of this.entries) {
      if (now - entry.seen > this.horizonMs) {
        this.entries.delete(id);
      }
    }
  }
}
