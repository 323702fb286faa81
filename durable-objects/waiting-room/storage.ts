import { z } from 'zod';
import { migrateSchema } from '../../workers/kernel/schema-gate';
import type { RoomResult } from '../../workers/kernel/waiting-room';

// Every table of a waiting-room object, behind one version number. A shard keeps its tickets
// and the last result of shoppers it has heard from; the coordinator keeps its state and the
// pre-queue seed in `room_state`. One class plays both roles, so an object only ever fills the
// tables of its own role.

const MIGRATIONS: readonly string[] = [
  `CREATE TABLE IF NOT EXISTS ticket (
     id TEXT PRIMARY KEY, user_id TEXT NOT NULL UNIQUE, order_key TEXT, joined_at INTEGER NOT NULL,
     pre INTEGER NOT NULL, admitted_round INTEGER, admitted_at INTEGER, pass_expires_at INTEGER);
   CREATE TABLE IF NOT EXISTS shopper_result (user_id TEXT PRIMARY KEY, value TEXT NOT NULL, at INTEGER NOT NULL);
   CREATE TABLE IF NOT EXISTS room_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);`,
];

export const ROOM_SCHEMA_VERSION = MIGRATIONS.length;

/** A shard's counters and the last round it admitted, kept as its `shard` state. */
export const ShardCounters = z.object({
  shard: z.number(),
  joined: z.number(),
  admitted: z.number(),
  messages: z.number(),
  round: z.number(),
  cursor: z.string(),
});
export type ShardCounters = z.infer<typeof ShardCounters>;

export type TicketRow = {
  id: string;
  user_id: string;
  order_key: string | null;
  joined_at: number;
  pre: number;
  admitted_round: number | null;
  admitted_at: number | null;
  pass_expires_at: number | null;
};

export class RoomStorage {
  constructor(private readonly sql: SqlStorage) {}

  migrate(): void {
    migrateSchema(this.sql, MIGRATIONS);
  }

  tickets(): TicketRow[] {
    return this.sql.exec<TicketRow>('SELECT * FROM ticket').toArray();
  }

  saveTicket(t: TicketRow): void {
    this.sql.exec(
      `INSERT OR REPLACE INTO ticket (id, user_id, order_key, joined_at, pre, admitted_round, admitted_at, pass_expires_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      t.id,
      t.user_id,
      t.order_key,
      t.joined_at,
      t.pre,
      t.admitted_round,
      t.admitted_at,
      t.pass_expires_at,
    );
  }

  setKey(id: string, key: string): void {
    this.sql.exec('UPDATE ticket SET order_key = ? WHERE id = ?', key, id);
  }

  admit(id: string, round: number, at: number, passExpiresAt: number): void {
    this.sql.exec('UPDATE ticket SET admitted_round = ?, admitted_at = ?, pass_expires_at = ? WHERE id = ?', round, at, passExpiresAt, id);
  }

  results(): { userId: string; result: RoomResult; at: number }[] {
    return this.sql
      .exec<{ user_id: string; value: string; at: number }>('SELECT user_id, value, at FROM shopper_result')
      .toArray()
      .flatMap((r) => {
        const result = parseResult(r.value);
        return result ? [{ userId: r.user_id, result, at: r.at }] : [];
      });
  }

  saveResult(userId: string, result: RoomResult, at: number): void {
    this.sql.exec('INSERT OR REPLACE INTO shopper_result (user_id, value, at) VALUES (?, ?, ?)', userId, JSON.stringify(result), at);
  }

  /** A small JSON value of the object's own (counters, settings, the coordinator's state). */
  state<T>(key: string, parse: (raw: unknown) => T | undefined): T | undefined {
    const row = this.sql.exec<{ value: string }>('SELECT value FROM room_state WHERE key = ?', key).toArray()[0];
    if (!row) {
      return undefined;
    }
    try {
      return parse(JSON.parse(row.value));
    } catch {
      return undefined;
    }
  }

  saveState(key: string, value: unknown): void {
    this.sql.exec('INSERT OR REPLACE INTO room_state (key, value) VALUES (?, ?)', key, JSON.stringify(value));
  }

  /** Drops everything (a sale long over). */
  clear(): void {
    this.sql.exec('DELETE FROM ticket; DELETE FROM shopper_result; DELETE FROM room_state');
  }
}

function parseResult(text: string): RoomResult | undefined {
  try {
    const v: unknown = JSON.parse(text);
    if (typeof v === 'object' && v !== null && 'requestId' in v && 'status' in v) {
      const r = v as Record<string, unknown>;
      if (typeof r.requestId === 'string' && (r.status === 'SUCCESS' || r.status === 'FAIL')) {
        return {
          requestId: r.requestId,
          status: r.status,
          ...(typeof r.orderId === 'string' ? { orderId: r.orderId } : {}),
          ...(typeof r.reason === 'string' ? { reason: r.reason } : {}),
        };
      }
    }
  } catch {
    // An unreadable row is no result.
  }
  return undefined;
}
