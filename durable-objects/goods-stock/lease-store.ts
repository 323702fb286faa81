// The stock shards' tables (schema.ts, version 5) and every statement on them, for leases.ts.
// Synchronous, like storage.ts: the caller runs them inside one step of the object's thread.

/** This shard's place: its index, the goods' shard count, the grant it awaits, its last give-back. */
export type LeaseRow = {
  shard: number;
  shards: number;
  location_hint: string | null;
  pending_grant: string | null;
  given_id: string | null;
  given_units: number;
};

export class LeaseStore {
  constructor(private readonly sql: SqlStorage) {}

  /** This shard's place, or undefined before its first init as a shard. */
  row(): LeaseRow | undefined {
    return this.sql.exec<LeaseRow>('SELECT * FROM lease_state WHERE id = 1').toArray()[0];
  }

  saveRow(r: LeaseRow): void {
    this.sql.exec(
      'INSERT OR REPLACE INTO lease_state (id, shard, shards, location_hint, pending_grant, given_id, given_units) VALUES (1, ?, ?, ?, ?, ?, ?)',
      r.shard,
      r.shards,
      r.location_hint,
      r.pending_grant,
      r.given_id,
      r.given_units,
    );
  }

  saveRemaining(remaining: number): void {
    this.sql.exec('UPDATE sale SET remaining = ? WHERE id = 1', remaining);
  }

  // Shard 0: the last grant per shard, give-backs not yet credited, reported stock.

  lastGrant(shard: number): { grantId: string; units: number } | undefined {
    const r = this.sql
      .exec<{ grant_id: string; units: number }>('SELECT grant_id, units FROM lease_grant WHERE shard = ?', shard)
      .toArray()[0];
    return r && { grantId: r.grant_id, units: r.units };
  }

  saveGrant(shard: number, grantId: string, units: number): void {
    this.sql.exec('INSERT OR REPLACE INTO lease_grant (shard, grant_id, units) VALUES (?, ?, ?)', shard, grantId, units);
  }

  saveReport(shard: number, remaining: number): void {
    this.sql.exec('INSERT OR REPLACE INTO lease_report (shard, remaining) VALUES (?, ?)', shard, remaining);
  }

  /** Every shard's last reported stock. */
  reports(): Map<number, number> {
    const rows = this.sql.exec<{ shard: number; remaining: number }>('SELECT shard, remaining FROM lease_report').toArray();
    return new Map(rows.map((r) => [r.shard, r.remaining]));
  }

  /** The sum of what shards 1..shards-1 last reported. */
  reportedOthers(shards: number): number {
    return (
      this.sql.exec<{ n: number | null }>('SELECT sum(remaining) AS n FROM lease_report WHERE shard > 0 AND shard < ?', shards).one().n ?? 0
    );
  }

  /** The give-back asked of `shard` and not yet credited, if any. */
  pendingReclaim(shard: number): string | undefined {
    return this.sql.exec<{ reclaim_id: string }>('SELECT reclaim_id FROM lease_reclaim WHERE shard = ?', shard).toArray()[0]?.reclaim_id;
  }

  savePendingReclaim(shard: number, reclaimId: string): void {
    this.sql.exec('INSERT OR REPLACE INTO lease_reclaim (shard, reclaim_id) VALUES (?, ?)', shard, reclaimId);
  }

  clearReclaim(shard: number): void {
    this.sql.exec('DELETE FROM lease_reclaim WHERE shard = ?', shard);
  }

  /** Shards with a give-back not yet credited. */
  pendingReclaims(): number[] {
    return this.sql
      .exec<{ shard: number }>('SELECT shard FROM lease_reclaim')
      .toArray()
      .map((r) => r.shard);
  }
}
