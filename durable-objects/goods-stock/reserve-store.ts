import type { FailReason, OrderMessage, ReserveItem } from '../../workers/kernel/contract';
import type { PriorAnswer } from './rules';

// The statements of one reservation batch (ledger.ts): what its decisions read, asked once for
// the whole batch, and what they write, one multi-row statement per table. A statement costs the
// object more than the row it writes, so a batch of 10 shoppers runs a handful of statements
// instead of six for each. Each list goes in as one JSON value, taken apart by json_each.
// Synchronous, like storage.ts: the caller runs them inside its transaction.

/** What a batch's decisions read: its spent tokens, its shoppers' units, its keyed ids' answers, its allowlisted shoppers. */
export type BatchReads = {
  usedTokens: Set<string>;
  units: Map<string, number>;
  priors: Map<string, PriorAnswer>;
  /** Asked only of an `allowlist` sale (empty otherwise). */
  allowed: Set<string>;
};

/** One reservation row to write: an accepted one (an order id, QUEUED) or a keyed rejection remembered (FAIL). */
export type ReservationWrite = {
  requestId: string;
  userId: string;
  orderId: string | null;
  reason: FailReason | null;
  keyed: boolean;
  quantity: number;
};

/** What a batch writes, in the order its decisions were made. */
export type BatchWrites = {
  spentTokens: Pick<ReserveItem, 'tokenId' | 'tokenExpiresAt'>[];
  reservations: ReservationWrite[];
  /** Units each accepted shopper takes, in order (one shopper may appear more than once). */
  holders: { userId: string; requestId: string; units: number }[];
  /** The accepted reservations' order messages. */
  outbox: OrderMessage[];
};

const IN_LIST = 'IN (SELECT value FROM json_each(?))';

export class ReserveStore {
  constructor(private readonly sql: SqlStorage) {}

  /** Everything the decisions of `items` read, in at most four statements. */
  read(items: ReserveItem[], allowlist: boolean): BatchReads {
    const usedTokens = new Set(
      this.sql
        .exec<{ token_id: string }>(
          `SELECT token_id FROM used_token WHERE token_id ${IN_LIST}`,
          JSON.stringify(items.map((i) => i.tokenId)),
        )
        .toArray()
        .map((r) => r.token_id),
    );
    const users = JSON.stringify(items.map((i) => i.userId));
    const units = new Map(
      this.sql
        .exec<{ user_id: string; units: number }>(`SELECT user_id, units FROM holder WHERE user_id ${IN_LIST}`, users)
        .toArray()
        .map((r) => [r.user_id, r.units]),
    );
    const keyed = items.filter((i) => i.keyed).map((i) => i.requestId);
    const priors = new Map<string, PriorAnswer>();
    if (keyed.length > 0) {
      const rows = this.sql
        .exec<{ request_id: string; order_id: string | null; status: string; reason: string | null; released: number }>(
          `SELECT request_id, order_id, status, reason, released FROM reservation WHERE request_id ${IN_LIST}`,
          JSON.stringify(keyed),
        )
        .toArray();
      for (const r of rows) {
        priors.set(r.request_id, {
          orderId: r.status === 'FAIL' ? null : r.order_id,
          reason: (r.reason as FailReason | null) ?? null,
          released: r.released === 1,
        });
      }
    }
    const allowed = new Set<string>();
    if (allowlist) {
      for (const r of this.sql.exec<{ user_id: string }>(`SELECT user_id FROM allowlist WHERE user_id ${IN_LIST}`, users)) {
        allowed.add(r.user_id);
      }
    }
    return { usedTokens, units, priors, allowed };
  }

  /** Writes a batch's decisions, all stamped `now`; the triggers keep the tally as with single rows. */
  write(w: BatchWrites, now: number): void {
    if (w.spentTokens.length > 0) {
      this.sql.exec(
        'INSERT OR IGNORE INTO used_token (token_id, expires_at) SELECT value->>0, value->>1 FROM json_each(?)',
        JSON.stringify(w.spentTokens.map((t) => [t.tokenId, t.tokenExpiresAt])),
      );
    }
    if (w.reservations.length > 0) {
      // An accepted row is QUEUED with its order id; a remembered rejection is FAIL, released, keyed.
      this.sql.exec(
        `INSERT INTO reservation (request_id, user_id, order_id, status, reason, released, created_at, keyed, quantity)
         SELECT value->>0, value->>1, value->>2, iif(value->>2 IS NULL, 'FAIL', 'QUEUED'), value->>3,
                value->>2 IS NULL, ?, value->>4, value->>5
         FROM json_each(?)`,
        now,
        JSON.stringify(w.reservations.map((r) => [r.requestId, r.userId, r.orderId, r.reason, r.keyed ? 1 : 0, r.quantity])),
      );
    }
    if (w.holders.length > 0) {
      // One row per shopper; a second purchase adds its units (an update: the tally counts
      // shoppers). `WHERE true` tells SQLite the ON CONFLICT belongs to the INSERT.
      this.sql.exec(
        `INSERT INTO holder (user_id, request_id, units) SELECT value->>0, value->>1, value->>2 FROM json_each(?) WHERE true
         ON CONFLICT (user_id) DO UPDATE SET units = units + excluded.units, request_id = excluded.request_id`,
        JSON.stringify(w.holders.map((h) => [h.userId, h.requestId, h.units])),
      );
    }
    if (w.outbox.length > 0) {
      // json_each gives the rows in the list's order, so the outbox's seq follows acceptance;
      // `->` keeps each message as its JSON text, the body the outbox sends.
      this.sql.exec(
        "INSERT INTO outbox (request_id, body, next_at, created_at) SELECT value->>'requestId', value->'$', ?, ? FROM json_each(?)",
        now,
        now,
        JSON.stringify(w.outbox),
      );
    }
  }
}
