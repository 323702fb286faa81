import { DurableObject } from 'cloudflare:workers';
import type { AdmitKey, AdmitVerdict, BanPolicy, BanView, Lease, StoredLimits } from '../../workers/kernel/contract';
import { DEFAULT_LIMITS, LimitsPatch } from '../../workers/kernel/limits';
import { TokenBucket } from '../admission-gate/bucket';
import { applyPatch, readStoredLimits } from '../limits-store/rules';
import { GuardBook } from './rules';

const PRUNE_INTERVAL_MS = 60_000;

/**
 * Small exact state the edge needs across isolates. One class, three kinds of instance (see
 * workers/defences/guard-routing.ts):
 * - key shards: single-use markers (captcha challenges), per-client rate windows and bans;
 * - `config:limits`: the runtime limits, durable;
 * - `gate:<goodsId>`: the goods' admission bucket, leased to isolates in small batches.
 * Rate windows and the admission bucket live in memory: they span a second or a few, and an
 * evicted object starting them afresh is harmless. Bans and limits are in storage.
 */
export class EdgeGuard extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private readonly book = new GuardBook();
  private readonly bans = new Map<string, number>();
  private readonly bucket = new TokenBucket();
  private limits: StoredLimits | undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS used_once (key TEXT PRIMARY KEY, expires_at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS ban (id TEXT PRIMARY KEY, until INTEGER NOT NULL, created_at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS setting (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at INTEGER NOT NULL);
    `);
    for (const row of this.sql.exec<{ id: string; until: number }>('SELECT id, until FROM ban WHERE until > ?', Date.now())) {
      this.bans.set(row.id, row.until);
    }
  }

  /** Marks `key` used until `expiresAt`; true the first time, false for every replay. */
  async useOnce(key: string, expiresAt: number): Promise<boolean> {
    const now = Date.now();
    if (expiresAt <= now) {
      return false;
    }
    const inserted = this.sql.exec('INSERT OR IGNORE INTO used_once (key, expires_at) VALUES (?, ?)', key, expiresAt).rowsWritten > 0;
    if (inserted) {
      await this.schedulePrune(now);
    }
    return inserted;
  }

  /**
   * Admits one request of the clients named by `keys` (all owned by this shard), or says why
   * not. Checks, counting and any new ban happen without an await in between, so concurrent
   * requests of one client can never both slip under a limit.
   */
  async admit(keys: AdmitKey[], policy: BanPolicy): Promise<AdmitVerdict> {
    const [verdict] = await this.admitMany([{ keys, policy }]);
    return verdict as AdmitVerdict;
  }

  /**
   * Admits a batch of requests (an isolate's group commit, see workers/group-commit.ts), in
   * order, as if each had come alone: one call instead of one per request.
   */
  async admitMany(requests: { keys: AdmitKey[]; policy: BanPolicy }[]): Promise<AdmitVerdict[]> {
    const now = Date.now();
    let banned = false;
    const verdicts = requests.map(({ keys, policy }) => {
      const { verdict, newBans } = this.book.admit(keys, policy, this.bans, now);
      for (const ban of newBans) {
        this.bans.set(ban.id, ban.until);
        this.sql.exec('INSERT OR REPLACE INTO ban (id, until, created_at) VALUES (?, ?, ?)', ban.id, ban.until, now);
        banned = true;
      }
      return verdict;
    });
    if (banned) {
      await this.schedulePrune(now);
    }
    return verdicts;
  }

  /** Bans still in force in this shard. */
  async listBans(): Promise<BanView[]> {
    return this.sql
      .exec<{ id: string; until: number; created_at: number }>(
        'SELECT id, until, created_at FROM ban WHERE until > ? ORDER BY until',
        Date.now(),
      )
      .toArray()
      .map((r) => ({ id: r.id, until: new Date(r.until).toISOString(), createdAt: new Date(r.created_at).toISOString() }));
  }

  /** Lifts a ban and forgets the client's recent count; true when there was one. */
  async unban(id: string): Promise<boolean> {
    const had = (this.bans.get(id) ?? 0) > Date.now();
    this.bans.delete(id);
    this.book.forget(id);
    this.sql.exec('DELETE FROM ban WHERE id = ?', id);
    return had;
  }

  /** The runtime limits (`config:limits` instance): stored values over the defaults. */
  async getLimits(): Promise<StoredLimits> {
    if (!this.limits) {
      const row = this.sql
        .exec<{ value: string; updated_at: number }>("SELECT value, updated_at FROM setting WHERE key = 'limits'")
        .toArray()[0];
      this.limits = row
        ? { limits: readStoredLimits(parseJson(row.value)), updatedAt: new Date(row.updated_at).toISOString() }
        : { limits: { ...DEFAULT_LIMITS }, updatedAt: null };
    }
    return this.limits;
  }

  /** Applies a change to the runtime limits and stores the whole record. */
  async setLimits(patch: LimitsPatch): Promise<StoredLimits> {
    const change = LimitsPatch.parse(patch);
    const current = await this.getLimits();
    const next = applyPatch(current.limits, change);
    const now = Date.now();
    this.sql.exec("INSERT OR REPLACE INTO setting (key, value, updated_at) VALUES ('limits', ?, ?)", JSON.stringify(next), now);
    this.limits = { limits: next, updatedAt: new Date(now).toISOString() };
    return this.limits;
  }

  /** Admission permits (`gate:<goodsId>` instance): up to `want` at `ratePerSecond`. */
  async lease(want: number, ratePerSecond: number): Promise<Lease> {
    return this.bucket.take(want, ratePerSecond, Date.now());
  }

  private async schedulePrune(now: number): Promise<void> {
    if ((await this.ctx.storage.getAlarm()) === null) {
      await this.ctx.storage.setAlarm(now + PRUNE_INTERVAL_MS);
    }
  }

  async alarm(): Promise<void> {
    const now = Date.now();
    this.sql.exec('DELETE FROM used_once WHERE expires_at < ?', now);
    this.sql.exec('DELETE FROM ban WHERE until < ?', now);
    for (const [id, until] of this.bans) {
      if (until <= now) {
        this.bans.delete(id);
      }
    }
    const left =
      this.sql.exec('SELECT 1 FROM used_once LIMIT 1').toArray().length > 0 ||
      this.sql.exec('SELECT 1 FROM ban LIMIT 1').toArray().length > 0;
    if (left) {
      await this.ctx.storage.setAlarm(now + PRUNE_INTERVAL_MS);
    }
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
