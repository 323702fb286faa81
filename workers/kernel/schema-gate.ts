// The version gate of a Durable Object's SQLite schema (the cloudflare/agents pattern): the
// schema is an ordered list of steps, the object stores how many it has run, and on load it
// runs the ones it has not. Each step must be idempotent (CREATE ... IF NOT EXISTS, addColumn),
// so a table or column an older build made outside the gate is found, not made twice.

/** One step: SQL, or a function for what SQL cannot say idempotently (a column added only when missing). */
export type SchemaStep = string | ((sql: SqlStorage) => void);

/** Runs the steps `sql` has not run yet, records the count, and returns the version it was at. */
export function migrateSchema(sql: SqlStorage, steps: readonly SchemaStep[]): number {
  sql.exec('CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)');
  const version = storedSchemaVersion(sql);
  for (let v = version; v < steps.length; v++) {
    const step = steps[v] ?? '';
    if (typeof step === 'string') {
      sql.exec(step);
    } else {
      step(sql);
    }
  }
  if (version < steps.length) {
    sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)", steps.length);
  }
  return version;
}

/** The schema version an object's storage is at (0 before its first migration). */
export function storedSchemaVersion(sql: SqlStorage): number {
  return sql.exec<{ value: number }>("SELECT value FROM meta WHERE key = 'schema'").toArray()[0]?.value ?? 0;
}

/** ALTER TABLE ... ADD COLUMN, unless the table has that column already (SQLite has no IF NOT EXISTS for it). */
export function addColumn(sql: SqlStorage, table: string, column: string, definition: string): void {
  const exists = sql.exec('SELECT 1 FROM pragma_table_info(?) WHERE name = ?', table, column).toArray().length > 0;
  if (!exists) {
    sql.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${definition}`);
  }
}
