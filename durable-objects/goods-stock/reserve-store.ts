import type { FailReason, OrderMessage, ReserveItem } from '../../workers/kernel/contract';
import type { PriorAnswer } from './rules';

// The statements of one reservation batch (ledger.ts): what its decisions read, asked once for
// the whole batch, and what they write, one statement per table. A statement costs the object
// more than the row it writes, so a batch of 10 shoppers runs a handful of statements instead of
// six for each. Each list goes in as one bound value, a JSON array the statement reads with
// `json_each`, so every statement's text is the same whatever the batch's size: SQLite prepares
// it once (with the tally triggers it fires), where a `VALUES (?, ...), (...)` of each size was a
// new statement to prepare, and the variable limit no longer splits a batch. Synchronous, like
// storage.ts: the caller runs them inside its transaction.

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
  /** Its token was issued against the waiting room's pass. */
  admitted: boolean;
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

type PriorRow = { request_id: string; order_id: string | null; status: string; reason: string | null; released: number };

/** The rows whose key is in the JSON array bound to the statement. */
const KEYS = 'IN (SELECT value FROM json_each(?))';

// Each row of the bound JSON array, column by column, in the array's order (the outbox's seq
// follows acceptance). `WHERE true` keeps SQLite from reading the upsert's ON as a join's.
const USED_TOKEN = 'INSERT OR IGNORE INTO used_token (token_id, expires_at) SELECT value->>0, value->>1 FROM json_each(?) ORDER BY key';
const RESERVATION = `INSERT INTO reservation (request_id, user_id, order_id, status, reason, released, created_at, keyed, quantity, admitted)
  SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, value->>7, value->>8, value->>9
  FROM json_each(?) ORDER BY key`;
const HOLDER = `INSERT INTO holder (user_id, request_id, units) SELECT value->>0, value->>1, value->>2 FROM json_each(?) WHERE true ORDER BY key
  ON CONFLICT (user_id) DO UPDATE SET units = units + excluded.units, request_id = excluded.request_id`;
const OUTBOX =
  'INSERT INTO outbox (request_id, body, next_at, created_at) SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(?) ORDER BY key';

export class ReserveStore {
  constructor(private readonly sql: SqlStorage) {}

  /** Everything the decisions of `items` read, in at most four statements. */
  read(items: ReserveItem[], allowlist: boolean): BatchReads {
    const keyed = items.filter((i) => i.keyed).map((i) => i.requestId);
    const users = JSON.stringify(items.map((i) => i.userId));
    const tokens = this.sql
      .exec<{ token_id: string }>(`SELECT token_id FROM used_token WHERE token_id ${KEYS}`, JSON.stringify(items.map((i) => i.tokenId)))
      .toArray();
    const holders = this.sql
      .exec<{ user_id: string; units: number }>(`SELECT user_id, units FROM holder WHERE user_id ${KEYS}`, users)
      .toArray();
    const priors = new Map<string, PriorAnswer>();
    if (keyed.length > 0) {
      const rows = this.sql.exec<PriorRow>(
        `SELECT request_id, order_id, status, reason, released FROM reservation WHERE request_id ${KEYS}`,
        JSON.stringify(keyed),
      );
      for (const r of rows) {
        priors.set(r.request_id, {
          orderId: r.status === 'FAIL' ? null : r.order_id,
          reason: (r.reason as FailReason | null) ?? null,
          released: r.released === 1,
        });
      }
    }
    const allowed = allowlist
      ? this.sql.exec<{ user_id: string }>(`SELECT user_id FROM allowlist WHERE user_id ${KEYS}`, users).toArray()
      : [];
    return {
      usedTokens: new Set(tokens.map((r) => r.token_id)),
      units: new Map(holders.map((r) => [r.user_id, r.units])),
      priors,
      allowed: new Set(allowed.map((r) => r.user_id)),
    };
  }

  /** Writes a batch's decisions, all stamped `now`; the triggers keep the tally as with single rows. */
  write(w: BatchWrites, now: number): void {
    this.insert(
      USED_TOKEN,
      w.spentTokens.map((t) => [t.tokenId, t.tokenExpiresAt]),
    );
    // An accepted row is QUEUED with its order id; a remembered rejection is FAIL and released.
    this.insert(
      RESERVATION,
      w.reservations.map((r) => [
        r.requestId,
        r.userId,
        r.orderId,
        r.orderId === null ? 'FAIL' : 'QUEUED',
        r.reason,
        r.orderId === null ? 1 : 0,
        now,
        r.keyed ? 1 : 0,
        r.quantity,
        r.admitted ? 1 : 0,
      ]),
    );
    // One row per shopper; a second purchase adds its units (an update: the tally counts shoppers).
    this.insert(
      HOLDER,
      w.holders.map((h) => [h.userId, h.requestId, h.units]),
    );
    this.insert(
      OUTBOX,
      w.outbox.map((m) => [m.requestId, JSON.stringify(m), now, now]),
    );
  }

  /** Runs one of the INSERTs above with `rows` as its JSON array; none when there are no rows. */
  private insert(statement: string, rows: SqlStorageValue[][]): void {
    if (rows.length > 0) {
      this.sql.exec(statement, JSON.stringify(rows));
    }
  }
}
