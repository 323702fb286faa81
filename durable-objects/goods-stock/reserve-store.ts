import type { FailReason, OrderMessage, ReserveItem } from '../../workers/kernel/contract';
import type { PriorAnswer } from './rules';

// The statements of one reservation batch (ledger.ts): what its decisions read, asked once for
// the whole batch, and what they write, one multi-row statement per table. A statement costs the
// object more than the row it writes, so a batch of 10 shoppers runs a handful of statements
// instead of six for each. Each list goes in as bound values (`VALUES (...), (...)`, `IN (...)`),
// as many as the 100 a statement may carry, chunked beyond. Synchronous, like storage.ts: the
// caller runs them inside its transaction.

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

/** Bound values one statement may carry in a Durable Object's SQLite. */
const MAX_VARIABLES = 100;

type PriorRow = { request_id: string; order_id: string | null; status: string; reason: string | null; released: number };

export class ReserveStore {
  constructor(private readonly sql: SqlStorage) {}

  /** Everything the decisions of `items` read, in at most four statements (a batch's keys fit in one). */
  read(items: ReserveItem[], allowlist: boolean): BatchReads {
    const keyed = items.filter((i) => i.keyed).map((i) => i.requestId);
    const users = items.map((i) => i.userId);
    const tokens = this.rows<{ token_id: string }>(
      'SELECT token_id FROM used_token WHERE token_id',
      items.map((i) => i.tokenId),
    );
    const holders = this.rows<{ user_id: string; units: number }>('SELECT user_id, units FROM holder WHERE user_id', users);
    const priors = new Map<string, PriorAnswer>();
    for (const r of this.rows<PriorRow>('SELECT request_id, order_id, status, reason, released FROM reservation WHERE request_id', keyed)) {
      priors.set(r.request_id, {
        orderId: r.status === 'FAIL' ? null : r.order_id,
        reason: (r.reason as FailReason | null) ?? null,
        released: r.released === 1,
      });
    }
    const allowed = allowlist ? this.rows<{ user_id: string }>('SELECT user_id FROM allowlist WHERE user_id', users) : [];
    return {
      usedTokens: new Set(tokens.map((r) => r.token_id)),
      units: new Map(holders.map((r) => [r.user_id, r.units])),
      priors,
      allowed: new Set(allowed.map((r) => r.user_id)),
    };
  }

  /** The rows of `select` (ending in the key column) whose key is one of `keys`. */
  private rows<R extends Record<string, SqlStorageValue>>(select: string, keys: string[]): R[] {
    const out: R[] = [];
    for (let i = 0; i < keys.length; i += MAX_VARIABLES) {
      const chunk = keys.slice(i, i + MAX_VARIABLES);
      out.push(...this.sql.exec<R>(`${select} IN (${placeholders(chunk.length)})`, ...chunk).toArray());
    }
    return out;
  }

  /** Writes a batch's decisions, all stamped `now`; the triggers keep the tally as with single rows. */
  write(w: BatchWrites, now: number): void {
    this.insert(
      'used_token (token_id, expires_at)',
      w.spentTokens.map((t) => [t.tokenId, t.tokenExpiresAt]),
      'OR IGNORE',
    );
    // An accepted row is QUEUED with its order id; a remembered rejection is FAIL and released.
    this.insert(
      'reservation (request_id, user_id, order_id, status, reason, released, created_at, keyed, quantity)',
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
      ]),
    );
    // One row per shopper; a second purchase adds its units (an update: the tally counts shoppers).
    this.insert(
      'holder (user_id, request_id, units)',
      w.holders.map((h) => [h.userId, h.requestId, h.units]),
      '',
      'ON CONFLICT (user_id) DO UPDATE SET units = units + excluded.units, request_id = excluded.request_id',
    );
    this.insert(
      'outbox (request_id, body, next_at, created_at)',
      w.outbox.map((m) => [m.requestId, JSON.stringify(m), now, now]),
    );
  }

  /**
   * Inserts `rows` into `table (columns)`, in order (the outbox's seq follows acceptance): one
   * multi-row statement per chunk of what the variable limit allows.
   */
  private insert(table: string, rows: SqlStorageValue[][], or = '', conflict = ''): void {
    const width = rows[0]?.length ?? 0;
    if (width === 0) {
      return;
    }
    const perStatement = Math.floor(MAX_VARIABLES / width);
    const row = `(${placeholders(width)})`;
    for (let i = 0; i < rows.length; i += perStatement) {
      const chunk = rows.slice(i, i + perStatement);
      this.sql.exec(`INSERT ${or} INTO ${table} VALUES ${Array(chunk.length).fill(row).join(', ')} ${conflict}`, ...chunk.flat());
    }
  }
}

/** `?, ?, ...`, n of them. */
function placeholders(n: number): string {
  return Array(n).fill('?').join(', ');
}
