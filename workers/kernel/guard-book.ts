import type { AdmitKey, AdmitVerdict, BanPolicy } from './contract';
import { SlidingLog, WindowCounter } from './windows';

// The per-client rules: bans first, then the ban counter, then the exact per-second limits.
// Each isolate applies them to what it sees (workers/edge/client-limiter.ts), and folds in what
// the guard shards learn from every isolate: a share of each limit and when a window is full.
// Plain state and plain functions; callers persist and spread bans.

export type NewBan = { id: string; until: number };

/** What the fleet knows about one rate window of a key: this isolate's share of its limit, and how long it is full. */
export type RemoteWindow = (key: AdmitKey, now: number) => { perSecond: number; blockedMs: number } | undefined;

/** Each rate window spans one second. */
export const RATE_WINDOW_MS = 1_000;

/**
 * A client's values per scope (its rate windows), the first held in place and a `Map` made only
 * for a second: a flash crowd is mostly shoppers with one window each, kept for the ban window,
 * and a `Map` of their own cost about 120 bytes a client, of some 700.
 */
export type Scoped<T> = { scope?: string; first?: T; more?: Map<string, T> };

/** The value of `scope` in `holder`, made by `make` on first use. */
export function scopedValue<T>(holder: Scoped<T>, scope: string, make: () => T): T {
  if (holder.first === undefined) {
    holder.scope = scope;
    holder.first = make();
  }
  if (holder.scope === scope) {
    return holder.first;
  }
  holder.more ??= new Map();
  let value = holder.more.get(scope);
  if (value === undefined) {
    value = make();
    holder.more.set(scope, value);
  }
  return value;
}

/** Every scope's value in `holder`, the first first. */
export function scopedEntries<T>(holder: Scoped<T>): [string, T][] {
  const entries: [string, T][] = holder.scope !== undefined && holder.first !== undefined ? [[holder.scope, holder.first]] : [];
  return holder.more ? [...entries, ...holder.more] : entries;
}

/** Drops `scope`'s value from `holder`; a value from `more` takes the first place when it is the one dropped. */
export function dropScoped<T>(holder: Scoped<T>, scope: string): void {
  if (holder.scope !== scope) {
    holder.more?.delete(scope);
    return;
  }
  const next = holder.more?.entries().next();
  if (next && !next.done) {
    [holder.scope, holder.first] = next.value;
    holder.more?.delete(next.value[0]);
  } else {
    holder.scope = undefined;
    holder.first = undefined;
  }
}

/** One client's ban counter and rate logs. */
type Entry = Scoped<SlidingLog> & { hits: WindowCounter; seen: number };

/** Forget idle clients every so often; with many clients, sooner. */
const SWEEP_EVERY_MS = 10_000;
const SWEEP_ABOVE_ENTRIES = 50_000;

/** The in-memory book of an isolate (or a shard of an older build): what each client did recently. */
export class GuardBook {
  private readonly entries = new Map<string, Entry>();
  private sweptAt = 0;
  private policyWindowMs = 10_000;

  /**
   * Decides one request for all of its keys at once: a banned key refuses it; a key crossing the
   * ban threshold is banned (returned in `newBans` for the caller to persist); a key at its
   * per-second limit refuses it (or its share of it, and a window the fleet has filled, when
   * `remote` knows them); otherwise every key records it.
   */
  admit(
    keys: AdmitKey[],
    policy: BanPolicy,
    bans: ReadonlyMap<string, number>,
    now: number,
    remote?: RemoteWindow,
  ): { verdict: AdmitVerdict; newBans: NewBan[] } {
    this.policyWindowMs = policy.windowMs;
    this.sweep(now);
    const ids = [...new Set(keys.map((k) => k.id))];
    for (const id of ids) {
      const until = bans.get(id);
      if (until !== undefined && until > now) {
        return { verdict: { ok: false, reason: 'BANNED', id, retryAfterMs: until - now }, newBans: [] };
      }
    }
    const newBans: NewBan[] = [];
    for (const id of ids) {
      const entry = this.entry(id, now);
      if (entry.hits.hit(now, policy.windowMs) > policy.threshold) {
        newBans.push({ id, until: now + policy.durationMs });
      }
    }
    const firstBan = newBans[0];
    if (firstBan) {
      for (const ban of newBans) {
        this.entries.delete(ban.id);
      }
      return { verdict: { ok: false, reason: 'BANNED', id: firstBan.id, retryAfterMs: policy.durationMs }, newBans };
    }
    let worst: { id: string; wait: number } | undefined;
    for (const key of keys) {
      const fleet = remote?.(key, now);
      const wait = Math.max(this.log(key, now).waitMs(now, RATE_WINDOW_MS, fleet?.perSecond ?? key.perSecond), fleet?.blockedMs ?? 0);
      if (wait > 0 && (!worst || wait > worst.wait)) {
        worst = { id: key.id, wait };
      }
    }
    if (worst) {
      return { verdict: { ok: false, reason: 'RATE_LIMITED', id: worst.id, retryAfterMs: worst.wait }, newBans };
    }
    for (const key of keys) {
      this.log(key, now).add(now);
    }
    return { verdict: { ok: true }, newBans };
  }

  /**
   * Counts requests an isolate answered on its own (a closed or sold-out sale), reported
   * afterwards in a batch: they go on the same ban counter as the requests admit() sees, and a
   * key crossing the threshold is banned (returned for the caller to persist).
   */
  countAnswered(id: string, hits: number, policy: BanPolicy, now: number): NewBan | undefined {
    this.policyWindowMs = policy.windowMs;
    this.sweep(now);
    if (this.entry(id, now).hits.hit(now, policy.windowMs, hits) > policy.threshold) {
      this.entries.delete(id);
      return { id, until: now + policy.durationMs };
    }
    return undefined;
  }

  /** Forgets what a client did (after an operator lifts its ban). */
  forget(id: string): void {
    this.entries.delete(id);
  }

  get size(): number {
    return this.entries.size;
  }

  private entry(id: string, now: number): Entry {
    let entry = this.entries.get(id);
    if (!entry) {
      entry = { hits: new WindowCounter(this.policyWindowMs), seen: now };
      this.entries.set(id, entry);
    }
    entry.seen = now;
    return entry;
  }

  private log(key: AdmitKey, now: number): SlidingLog {
    return scopedValue(this.entry(key.id, now), key.scope, () => new SlidingLog());
  }

  private sweep(now: number): void {
    const every = this.entries.size >= SWEEP_ABOVE_ENTRIES ? RATE_WINDOW_MS : SWEEP_EVERY_MS;
    if (now - this.sweptAt < every) {
      return;
    }
    this.sweptAt = now;
    const horizon = Math.max(this.policyWindowMs, RATE_WINDOW_MS);
    for (const [id, entry] of this.entries) {
      if (now - entry.seen > horizon) {
        this.entries.delete(id);
      }
    }
  }
}
