import type { AdmitKey, AdmitVerdict, BanPolicy, GuardReply, KeyReport } from '../kernel/contract';
import { GuardBook, type NewBan } from '../kernel/guard-book';
import { isolateId } from '../kernel/isolate-id';

// One isolate's limiter: it decides every per-IP and per-shopper limit and the ban counter from
// what it holds, with no object call on the shopper's wait, and keeps the accounting for the
// guard shards, which it sends in the background (guard-reports.ts). The shards answer with
// what only the fleet knows: bans other isolates decided, this isolate's share of each limit
// among the isolates that see the same client, and windows the fleet has already filled.
// Plain state and `now` passed in, so a test can run several of them against one ledger.

/** How long an isolate refuses a ban on its own word before it asks the shard (an operator may lift a ban). */
export const LOCAL_BAN_TRUST_MS = 5_000;
/** A share of a limit is used for this long after the shard gave it; then the full limit applies again. */
export const SHARE_TTL_MS = 2_000;
const MAX_BANS = 10_000;
/** Distinct keys accounted between two reports; beyond that, new keys are decided locally only. */
const MAX_PENDING_KEYS = 10_000;

type LocalBan = { until: number; trustUntil: number };
type Share = { perSecond: number; limit: number; blockedUntil: number; until: number };

const windowKey = (id: string, scope: string) => `${id}\n${scope}`;

/** An isolate's limits, bans and pending accounting. */
export class ClientLimiter {
  private readonly book = new GuardBook();
  private readonly bans = new Map<string, LocalBan>();
  private readonly shares = new Map<string, Share>();
  private pending = new Map<string, KeyReport>();
  /** When an operator's lift reached this isolate, per client: answers to reports sent before it are stale. */
  private readonly lifts = new Map<string, number>();

  private id: string | undefined;

  /** `isolate` names this limiter to the shards; by default this isolate's name. */
  constructor(isolate?: string) {
    this.id = isolate;
  }

  get isolate(): string {
    this.id ??= isolateId();
    return this.id;
  }

  /**
   * The ban this isolate knows for any of `ids`, if one is in force. A ban trusted for longer
   * than LOCAL_BAN_TRUST_MS is still enforced, and is asked about in the next report.
   */
  knownBan(ids: readonly string[], now: number): { id: string; until: number } | undefined {
    for (const id of ids) {
      const ban = this.bans.get(id);
      if (!ban) {
        continue;
      }
      if (ban.until <= now) {
        this.bans.delete(id);
        continue;
      }
      if (ban.trustUntil <= now) {
        ban.trustUntil = Math.min(ban.until, now + LOCAL_BAN_TRUST_MS);
        const report = this.report(id);
        if (report) {
          report.check = true;
        }
      }
      return { id, until: ban.until };
    }
    return undefined;
  }

  /**
   * Decides one request for all of its keys (the guard rules, over this isolate's windows and
   * what the shards said) and accounts it. New bans are returned: the caller spreads them.
   */
  admit(keys: AdmitKey[], policy: BanPolicy, now: number): { verdict: AdmitVerdict; newBans: NewBan[] } {
    const { verdict, newBans } = this.book.admit(keys, policy, new Map(), now, (key, at) => this.fleetWindow(key, at));
    for (const id of new Set(keys.map((k) => k.id))) {
      const report = this.report(id);
      if (report) {
        report.hits++;
      }
    }
    for (const key of keys) {
      const w = this.window(key);
      if (w) {
        w.seen++;
        if (verdict.ok) {
          w.admitted = appended(w.admitted, now);
        }
      }
    }
    this.keepNewBans(newBans, now);
    return { verdict, newBans };
  }

  /**
   * Counts a request the isolate answered before the limits (a closed or sold-out sale) toward
   * the keys' bans. Its shard decides the ban, from every isolate's counts, and the ban comes
   * back with the reply: such answers cost nothing, so a second's delay costs nothing either.
   */
  countAnswered(ids: readonly string[]): void {
    for (const id of ids) {
      const report = this.report(id);
      if (report) {
        report.hits++;
      }
    }
  }

  /** Whether anything was accounted since the last takeReport. */
  get hasPending(): boolean {
    return this.pending.size > 0;
  }

  /** Takes what was accounted since the last call (undefined: nothing to tell). */
  takeReport(): KeyReport[] | undefined {
    if (this.pending.size === 0) {
      return undefined;
    }
    const keys = [...this.pending.values()];
    this.pending = new Map();
    return keys;
  }

  /**
   * Folds a shard's answer in: bans to enforce, bans lifted, shares of limits and full windows.
   * `sentAt` is when the report left: the shard measured the windows about half the round trip
   * later, so a full window's end is reckoned from then, not from the answer's arrival.
   */
  applyReply(reply: GuardReply, now: number, sentAt = now): void {
    const measuredAt = sentAt + Math.max(0, now - sentAt) / 2;
    for (const ban of reply.bans) {
      const liftedAt = this.lifts.get(ban.id);
      if (liftedAt !== undefined && liftedAt >= sentAt) {
        // The shard answered a report that left before the lift: its ban is the one lifted.
        continue;
      }
      this.rememberBan(ban.id, now + ban.retryAfterMs, now);
      this.book.forget(ban.id);
    }
    for (const id of reply.lifted) {
      this.bans.delete(id);
    }
    for (const s of reply.shares) {
      this.shares.set(windowKey(s.id, s.scope), {
        perSecond: s.perSecond,
        limit: s.limit,
        blockedUntil: measuredAt + s.blockedMs,
        until: now + SHARE_TTL_MS,
      });
    }
    if (this.shares.size > MAX_PENDING_KEYS * 4) {
      for (const [key, share] of this.shares) {
        if (share.until <= now) {
          this.shares.delete(key);
        }
      }
    }
  }

  /** Refuses `id` until `until` (a ban this isolate decided or heard of). */
  rememberBan(id: string, until: number, now: number): void {
    if (this.bans.size >= MAX_BANS) {
      for (const [key, ban] of this.bans) {
        if (ban.until <= now) {
          this.bans.delete(key);
        }
      }
      if (this.bans.size >= MAX_BANS) {
        this.bans.clear();
      }
    }
    this.bans.set(id, { until, trustUntil: Math.min(until, now + LOCAL_BAN_TRUST_MS) });
  }

  /** Forgets a client: its ban here, its windows and what was pending (after an operator lifted its ban). */
  forget(id: string, now = Date.now()): void {
    if (this.lifts.size >= MAX_BANS) {
      this.lifts.clear();
    }
    this.lifts.set(id, now);
    this.bans.delete(id);
    this.book.forget(id);
    this.pending.delete(id);
    for (const key of this.shares.keys()) {
      if (key.startsWith(`${id}\n`)) {
        this.shares.delete(key);
      }
    }
  }

  private keepNewBans(newBans: readonly NewBan[], now: number): void {
    for (const ban of newBans) {
      this.rememberBan(ban.id, ban.until, now);
      const report = this.report(ban.id);
      if (report) {
        report.bannedUntil = ban.until;
      }
    }
  }

  private fleetWindow(key: AdmitKey, now: number): { perSecond: number; blockedMs: number } | undefined {
    const share = this.shares.get(windowKey(key.id, key.scope));
    // A share of another limit (changed since) or one the shard has not renewed no longer applies.
    if (!share || share.until <= now || share.limit !== key.perSecond) {
      return undefined;
    }
    return { perSecond: Math.min(key.perSecond, share.perSecond), blockedMs: Math.max(0, share.blockedUntil - now) };
  }

  private report(id: string): KeyReport | undefined {
    let report = this.pending.get(id);
    if (!report && this.pending.size < MAX_PENDING_KEYS) {
      report = { id, hits: 0, windows: [] };
      this.pending.set(id, report);
    }
    return report;
  }

  private window(key: AdmitKey) {
    const report = this.report(key.id);
    if (!report) {
      return undefined;
    }
    let w = report.windows.find((x) => x.scope === key.scope);
    if (!w) {
      w = { scope: key.scope, perSecond: key.perSecond, seen: 0, admitted: [] };
      report.windows = appended(report.windows, w);
    }
    return w;
  }
}

/**
 * `list` with `item` at its end: a one-item list for an empty one. A pending report lives until
 * the next report round, long enough to outlive a scavenge or two and be copied into the old
 * generation, and most of its lists hold one item (a shopper is seen once or twice a round): a
 * push onto an empty array gives it room for 17, a literal room for one.
 */
function appended<T>(list: T[], item: T): T[] {
  if (list.length === 0) {
    return [item];
  }
  list.push(item);
  return list;
}
