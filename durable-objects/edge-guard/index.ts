import { DurableObject } from 'cloudflare:workers';
import type {
  AdmitKey,
  AdmitVerdict,
  AnsweredCount,
  BanPolicy,
  BanView,
  GuardReply,
  GuardReport,
  KnownBan,
  LegacyLimits,
} from '../../workers/kernel/contract';
import { GUARD_LIST_RESET_NAME, guardResetName, resetEdgeObjectIfAsked, resetIfAsked } from '../../workers/kernel/dev-faults';
import { GuardBook, type NewBan } from '../../workers/kernel/guard-book';
import { GuardLedger } from './ledger';
import { ReportPace } from './pace';
import { GuardStorage } from './storage';

const PRUNE_INTERVAL_MS = 60_000;

/**
 * A key shard of the edge's per-client state (see guardShard in ../routing): single-use markers
 * (captcha challenges), bans, and the fleet's view of each client's rate windows, summed from
 * the isolates' background reports (see workers/edge/client-limiter.ts). Rate windows live in
 * memory: they span a second or a few, and an evicted shard starting them afresh is harmless.
 * Markers and bans are in storage.
 */
export class EdgeGuard extends DurableObject<Env> {
  private readonly store: GuardStorage;
  private readonly book = new GuardBook();
  private readonly ledger = new GuardLedger();
  private readonly pace = new ReportPace();
  private readonly bans = new Map<string, number>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new GuardStorage(ctx.storage.sql);
    this.store.migrate();
    for (const row of this.store.bansInForce(Date.now())) {
      this.bans.set(row.id, row.until);
    }
  }

  /** Marks `key` used until `expiresAt`; true the first time, false for every replay. */
  async useOnce(key: string, expiresAt: number): Promise<boolean> {
    if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
      resetIfAsked(this.ctx, guardResetName(key));
    }
    const now = Date.now();
    if (expiresAt <= now) {
      return false;
    }
    const inserted = this.store.markUsed(key, expiresAt);
    if (inserted) {
      await this.schedulePrune(now);
    }
    return inserted;
  }

  /**
   * Takes back a use `useOnce` granted: the token route's, when the request that spent a
   * correctly answered challenge then failed on a dependency (Postgres, Turnstile), so the
   * shopper's retry of the same answer passes. True when the key was marked.
   */
  async unuse(key: string): Promise<boolean> {
    return this.store.unmarkUsed(key);
  }

  /**
   * One isolate's accounting for the keys of this shard, sent in the background: its requests
   * counted toward bans, its admissions, bans it decided. Answers the bans in force for those
   * keys, the bans it asked about that were lifted, its share of each key's limits, and while
   * the shard hears more reports than it wants, how many times less often to report (pace.ts).
   */
  async account(report: GuardReport): Promise<GuardReply> {
    if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
      resetEdgeObjectIfAsked(this.ctx);
    }
    const now = Date.now();
    const { reply, newBans } = this.ledger.account(report, this.bans, now);
    await this.keepBans(newBans, now);
    const slowdown = this.pace.heardAt(now);
    return slowdown > 1 ? { ...reply, slowdown } : reply;
  }

  /**
   * Admits a batch of requests the way builds before the isolates' own limiters did (an
   * isolate's group commit, see workers/edge/group-commit.ts), in
   * order, as if each had come alone. Checks, counting and any new ban happen without an await
   * in between, so concurrent requests of one client can never both slip under a limit.
   */
  async admitMany(requests: { keys: AdmitKey[]; policy: BanPolicy }[]): Promise<AdmitVerdict[]> {
    const now = Date.now();
    let banned = false;
    const verdicts = requests.map(({ keys, policy }) => {
      const { verdict, newBans } = this.book.admit(keys, policy, this.bans, now);
      for (const ban of newBans) {
        this.bans.set(ban.id, ban.until);
        this.store.saveBan(ban.id, ban.until, now);
        banned = true;
      }
      return verdict;
    });
    if (banned) {
      await this.schedulePrune(now);
    }
    return verdicts;
  }

  /**
   * The requests isolates answered on their own since their last report (before the start,
   * after the end or a sell-out: answers that come before admitMany), counted toward bans like
   * any other. Returns the bans in force for the reported keys, new or old, so the isolates
   * refuse those clients at once from then on.
   */
  async noteAnswered(counts: AnsweredCount[], policy: BanPolicy): Promise<KnownBan[]> {
    const now = Date.now();
    let banned = false;
    const known: KnownBan[] = [];
    for (const { id, hits } of counts) {
      const until = this.bans.get(id);
      if (until !== undefined && until > now) {
        known.push({ id, retryAfterMs: until - now });
        continue;
      }
      const ban = this.book.countAnswered(id, hits, policy, now);
      if (ban) {
        this.bans.set(ban.id, ban.until);
        this.store.saveBan(ban.id, ban.until, now);
        known.push({ id, retryAfterMs: ban.until - now });
        banned = true;
      }
    }
    if (banned) {
      await this.schedulePrune(now);
    }
    return known;
  }

  /** Bans still in force in this shard. */
  async listBans(): Promise<BanView[]> {
    if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
      resetIfAsked(this.ctx, GUARD_LIST_RESET_NAME);
    }
    return this.store
      .bansInForce(Date.now())
      .map((r) => ({ id: r.id, until: new Date(r.until).toISOString(), createdAt: new Date(r.created_at).toISOString() }));
  }

  /** Lifts a ban and forgets the client's recent count; true when there was one. */
  async unban(id: string): Promise<boolean> {
    if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
      resetIfAsked(this.ctx, guardResetName(id));
    }
    const had = (this.bans.get(id) ?? 0) > Date.now();
    this.bans.delete(id);
    this.book.forget(id);
    this.ledger.forget(id);
    this.store.deleteBan(id);
    return had;
  }

  /**
   * The runtime limits record an older build kept in this class (its `config:limits` instance),
   * read once by the limits store when it has none of its own.
   */
  async legacyLimits(): Promise<LegacyLimits | undefined> {
    return this.store.legacyLimits();
  }

  private async keepBans(bans: NewBan[], now: number): Promise<void> {
    for (const ban of bans) {
      this.bans.set(ban.id, ban.until);
      this.store.saveBan(ban.id, ban.until, now);
    }
    if (bans.length > 0) {
      await this.schedulePrune(now);
    }
  }

  private async schedulePrune(now: number): Promise<void> {
    if ((await this.ctx.storage.getAlarm()) === null) {
      await this.ctx.storage.setAlarm(now + PRUNE_INTERVAL_MS);
    }
  }

  async alarm(): Promise<void> {
    const now = Date.now();
    const left = this.store.prune(now);
    for (const [id, until] of this.bans) {
      if (until <= now) {
        this.bans.delete(id);
      }
    }
    if (left) {
      await this.ctx.storage.setAlarm(now + PRUNE_INTERVAL_MS);
    }
  }
}
