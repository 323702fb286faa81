// The shoppers an `allowlist` sale is open to, as the goods' object holds them: a copy of
// Postgres' list, so the check where the unit is taken reads one local row. The admin route
// sends large lists in chunks; each chunk is one transaction of multi-row statements.

/** Ids bound in one statement (SQLite allows 100 bound values per statement here). */
const IDS_PER_STATEMENT = 100;

/** Adds then removes the ids, in the caller's transaction; the list's size afterwards. */
export function changeAllowlist(sql: SqlStorage, add: readonly string[], remove: readonly string[]): number {
  for (let i = 0; i < add.length; i += IDS_PER_STATEMENT) {
    const chunk = add.slice(i, i + IDS_PER_STATEMENT);
    sql.exec(`INSERT OR IGNORE INTO allowlist (user_id) VALUES ${chunk.map(() => '(?)').join(', ')}`, ...chunk);
  }
  for (let i = 0; i < remove.length; i += IDS_PER_STATEMENT) {
    const chunk = remove.slice(i, i + IDS_PER_STATEMENT);
    sql.exec(`DELETE FROM allowlist WHERE user_id IN (${chunk.map(() => '?').join(', ')})`, ...chunk);
  }
  return sql.exec<{ n: number }>('SELECT count(*) AS n FROM allowlist').one().n;
}
