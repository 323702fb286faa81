import { DurableObject } from 'cloudflare:workers';

const PRUNE_INTERVAL_MS = 60_000;

/**
 * Small exact state the edge needs across isolates: single-use markers (captcha challenges).
 * Sharded by key (see workers/routing.ts) so no single object carries the whole sale.
 */
export class EdgeGuard extends DurableObject<Env> {
  private readonly sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec('CREATE TABLE IF NOT EXISTS used_once (key TEXT PRIMARY KEY, expires_at INTEGER NOT NULL)');
  }

  /** Marks `key` used until `expiresAt`; true the first time, false for every replay. */
  async useOnce(key: string, expiresAt: number): Promise<boolean> {
    const now = Date.now();
    if (expiresAt <= now) {
      return false;
    }
    const inserted = this.sql.exec('INSERT OR IGNORE INTO used_once (key, expires_at) VALUES (?, ?)', key, expiresAt).rowsWritten > 0;
    if (inserted && (await this.ctx.storage.getAlarm()) === null) {
      await this.ctx.storage.setAlarm(now + PRUNE_INTERVAL_MS);
    }
    return inserted;
  }

  async alarm(): Promise<void> {
    const now = Date.now();
    this.sql.exec('DELETE FROM used_once WHERE expires_at < ?', now);
    if (this.sql.exec('SELECT 1 FROM used_once LIMIT 1').toArray().length > 0) {
      await this.ctx.storage.setAlarm(now + PRUNE_INTERVAL_MS);
    }
  }
}
