// The version gate of a Durable Object's SQLite schema (the cloudflare/agents pattern): the
// schema is an ordered list of steps, the object stores how many it has run, and on load it
// runs the ones it has not. Each step must be idempotent (CREATE ... IF NOT EXISTS), so a table
// an older build made outside the gate is found, not made twice.

/** Runs the steps `sql` has not run yet, records the count, and returns the version it was at. */
export function migrateSchema(sql: SqlStorage, steps: readonly string[]): number {
  sql.exec('CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)');
  const version = storedSchemaVersion(sql);
  for (let v = version; v < steps.length; v++) {
    sql.exec(steps[v] ?? '');
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
