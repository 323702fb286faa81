import { migrateSchema } from '../../workers/kernel/schema-gate';

// Every table of an EdgeGuard shard: single-use markers and bans, behind one version number.
// Rate windows stay in memory (they span a second or a few; a restarted shard starting them
// afresh is harmless). The `setting` table is no longer written: the one instance that held the
// runtime limits before the limits store existed is only read, once, by the store.

const MIGRATIONS: readonly string[] = [
  // Builds before the version gate created these tables unconditionally; the step finds them.
  `CREATE TABLE IF NOT EXISTS used_once (key TEXT PRIMARY KEY, expires_at INTEGER NOT NULL);
   CREATE TABLE IF NOT EXISTS ban (id TEXT PRIMARY KEY, until INTEGER NOT NULL, created_at INTEGER NOT NULL);`,
];

export const GUARD_SCHEMA_VERSION = MIGRATIONS.length;

export type BanRow = { id: string; until: number; created_at: number };

export class GuardStorage {
  constructor(private readonly sql: SqlStorage) {}

  migrate(): void {
    migrateSchema(this.sql, MIGRATIONS);
  }

  /** Marks `key` used until `expiresAt`; true the first time. */
  markUsed(key: string, expiresAt: number): boolean {
    return this.sql.exec('INSERT OR IGNORE INTO used_once (key, expires_at) VALUES (?, ?)', key, expiresAt).rowsWritten > 0;
  }

  /** Takes `key`'s use back; true when it was marked. */
  unmarkUsed(key: string): boolean {
    return this.sql.exec('DELETE FROM used_once WHERE key = ?', key).rowsWritten > 0;
  }

  bansInForce(now: number): BanRow[] {
    return this.sql.exec<BanRow>('SELECT id, until, created_at FROM ban WHERE until > ? ORDER BY until', now).toArray();
  }

  saveBan(id: string, until: number, now: number): void {
    this.sql.exec('INSERT OR REPLACE INTO ban (id, until, created_at) VALUES (?, ?, ?)', id, until, now);
  }

  deleteBan(id: string): void {
    this.sql.exec('DELETE FROM ban WHERE id = ?', id);
  }

  /** Drops expired markers and bans; true when some remain to prune later. */
  prune(now: number): boolean {
    this.sql.exec('DELETE FROM used_once WHERE expires_at < ?', now);
    this.sql.exec('DELETE FROM ban WHERE until < ?', now);
    return (
      this.sql.exec('SELECT 1 FROM used_once LIMIT 1').toArray().length > 0 ||
      this.sql.exec('SELECT 1 FROM ban LIMIT 1').toArray().length > 0
    );
  }

  /** The runtime limits as builds before the limits store kept them (the `config:limits` instance), if any. */
  legacyLimits(): { value: string; updatedAt: number } | undefined {
    const table = this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'setting'").toArray();
    if (table.length === 0) {
      return undefined;
    }
    const row = this.sql
      .exec<{ value: string; updated_at: number }>("SELECT value, updated_at FROM setting WHERE key = 'limits'")
      .toArray()[0];
    return row ? { value: row.value, updatedAt: row.updated_at } : undefined;
  }
}
