import { migrateSchema } from '../../workers/kernel/schema-gate';

// The limits store's one table: the runtime limits record (JSON) and when it last changed,
// behind one version number. `carried` marks that the record an older build kept elsewhere
// has been looked for, so it is looked for once.

const MIGRATIONS: readonly string[] = [
  'CREATE TABLE IF NOT EXISTS setting (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at INTEGER NOT NULL)',
];

export const LIMITS_SCHEMA_VERSION = MIGRATIONS.length;

export type StoredRecord = { value: string; updatedAt: number };

export class LimitsStorage {
  constructor(private readonly sql: SqlStorage) {}

  migrate(): void {
    migrateSchema(this.sql, MIGRATIONS);
  }

  read(): StoredRecord | undefined {
    const row = this.sql
      .exec<{ value: string; updated_at: number }>("SELECT value, updated_at FROM setting WHERE key = 'limits'")
      .toArray()[0];
    return row ? { value: row.value, updatedAt: row.updated_at } : undefined;
  }

  write(record: StoredRecord): void {
    this.sql.exec("INSERT OR REPLACE INTO setting (key, value, updated_at) VALUES ('limits', ?, ?)", record.value, record.updatedAt);
  }

  /** True once the older build's record has been looked for (and copied here if there was one). */
  carried(): boolean {
    return this.meta('carried') === 1;
  }

  markCarried(): void {
    this.setMeta('carried', 1);
  }

  private meta(key: string): number | undefined {
    return this.sql.exec<{ value: number }>('SELECT value FROM meta WHERE key = ?', key).toArray()[0]?.value;
  }

  private setMeta(key: string, value: number): void {
    this.sql.exec('INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)', key, value);
  }
}
