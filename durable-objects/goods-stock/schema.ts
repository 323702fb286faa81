import { addColumn, type SchemaStep } from '../../workers/kernel/schema-gate';

// The goods' object's SQLite schema: one list of versioned steps behind one version number
// (storage.ts runs them, in the load's transaction). Every step is idempotent: a table, column,
// index or trigger already there is found, not made twice.

/**
 * Version 3: the counters and indexes that keep every read of a hot object independent of the
 * sale's size, and the columns that keep a reservation's outbox row until it settles.
 *
 * - `tally` holds the counts the snapshot reports (queued, confirmed, holders, unsent outbox
 *   rows). Triggers keep it in step with the rows in the same statement, so no code path can
 *   forget it and it always equals a full recount; the step counts once to start it.
 * - `sale.refused`: units Postgres refused (it had less stock than this object), held aside.
 * - `reservation.keyed`: 1 for a purchase sent with an Idempotency-Key (NULL for rows made
 *   before the column: unknown, counted as keyed), for the list of keyed purchases a SOLD_OUT
 *   answer carries.
 * - `outbox.sends` / `sent_at`: how often the queue took the message and when last; the row
 *   stays until the consumer settles the reservation, and `next_at` is its next (re)send.
 */
function v3CountersAndResends(sql: SqlStorage): void {
  addColumn(sql, 'sale', 'refused', 'INTEGER NOT NULL DEFAULT 0');
  addColumn(sql, 'reservation', 'keyed', 'INTEGER');
  addColumn(sql, 'outbox', 'sends', 'INTEGER NOT NULL DEFAULT 0');
  addColumn(sql, 'outbox', 'sent_at', 'INTEGER');
  sql.exec(V3_INDEXES_AND_TALLY);
}

const V3_INDEXES_AND_TALLY = `
  CREATE INDEX IF NOT EXISTS outbox_due ON outbox (next_at);
  CREATE INDEX IF NOT EXISTS outbox_request ON outbox (request_id);
  CREATE INDEX IF NOT EXISTS outbox_unsent ON outbox (created_at) WHERE sends = 0;
  CREATE INDEX IF NOT EXISTS reservation_keyed_accepts ON reservation (created_at) WHERE order_id IS NOT NULL AND keyed IS NOT 0;
  CREATE INDEX IF NOT EXISTS reservation_rejections ON reservation (created_at) WHERE order_id IS NULL;
  CREATE INDEX IF NOT EXISTS used_token_expiry ON used_token (expires_at);
  CREATE TABLE IF NOT EXISTS tally (
    id INTEGER PRIMARY KEY CHECK (id = 1), queued INTEGER NOT NULL, confirmed INTEGER NOT NULL,
    holders INTEGER NOT NULL, unsent INTEGER NOT NULL);
  INSERT OR REPLACE INTO tally (id, queued, confirmed, holders, unsent) VALUES (1,
    (SELECT count(*) FROM reservation WHERE status = 'QUEUED' AND released = 0),
    (SELECT count(*) FROM reservation WHERE status = 'SUCCESS' AND released = 0),
    (SELECT count(*) FROM holder),
    (SELECT count(*) FROM outbox WHERE sends = 0));
  CREATE TRIGGER IF NOT EXISTS tally_reservation_insert AFTER INSERT ON reservation WHEN NEW.released = 0 BEGIN
    UPDATE tally SET queued = queued + (NEW.status = 'QUEUED'), confirmed = confirmed + (NEW.status = 'SUCCESS') WHERE id = 1;
  END;
  CREATE TRIGGER IF NOT EXISTS tally_reservation_update AFTER UPDATE OF status, released ON reservation BEGIN
    UPDATE tally SET
      queued = queued - (OLD.status = 'QUEUED' AND OLD.released = 0) + (NEW.status = 'QUEUED' AND NEW.released = 0),
      confirmed = confirmed - (OLD.status = 'SUCCESS' AND OLD.released = 0) + (NEW.status = 'SUCCESS' AND NEW.released = 0)
    WHERE id = 1;
  END;
  CREATE TRIGGER IF NOT EXISTS tally_reservation_delete AFTER DELETE ON reservation WHEN OLD.released = 0 BEGIN
    UPDATE tally SET queued = queued - (OLD.status = 'QUEUED'), confirmed = confirmed - (OLD.status = 'SUCCESS') WHERE id = 1;
  END;
  CREATE TRIGGER IF NOT EXISTS tally_holder_insert AFTER INSERT ON holder BEGIN
    UPDATE tally SET holders = holders + 1 WHERE id = 1;
  END;
  CREATE TRIGGER IF NOT EXISTS tally_holder_delete AFTER DELETE ON holder BEGIN
    UPDATE tally SET holders = holders - 1 WHERE id = 1;
  END;
  CREATE TRIGGER IF NOT EXISTS tally_outbox_insert AFTER INSERT ON outbox WHEN NEW.sends = 0 BEGIN
    UPDATE tally SET unsent = unsent + 1 WHERE id = 1;
  END;
  CREATE TRIGGER IF NOT EXISTS tally_outbox_update AFTER UPDATE OF sends ON outbox WHEN (OLD.sends = 0) <> (NEW.sends = 0) BEGIN
    UPDATE tally SET unsent = unsent - (OLD.sends = 0) + (NEW.sends = 0) WHERE id = 1;
  END;
  CREATE TRIGGER IF NOT EXISTS tally_outbox_delete AFTER DELETE ON outbox WHEN OLD.sends = 0 BEGIN
    UPDATE tally SET unsent = unsent - 1 WHERE id = 1;
  END;`;

/**
 * Version 4: sale rules.
 *
 * - `sale.per_user_limit`, `limit_scope`, `eligibility`: the goods' rules (defaults: one unit,
 *   per goods, open to all, as every sale was before).
 * - `reservation.quantity`: the units a reservation holds (1 for rows made before).
 * - `holder.units`: the units a shopper holds now, over all of their live reservations; the row
 *   goes when it reaches 0, so `tally.holders` still counts shoppers.
 * - `allowlist`: the shoppers an `allowlist` sale is open to, checked where the unit is taken.
 */
function v4SaleRules(sql: SqlStorage): void {
  addColumn(sql, 'sale', 'per_user_limit', 'INTEGER NOT NULL DEFAULT 1');
  addColumn(sql, 'sale', 'limit_scope', "TEXT NOT NULL DEFAULT 'goods'");
  addColumn(sql, 'sale', 'eligibility', "TEXT NOT NULL DEFAULT 'open'");
  addColumn(sql, 'reservation', 'quantity', 'INTEGER NOT NULL DEFAULT 1');
  addColumn(sql, 'holder', 'units', 'INTEGER NOT NULL DEFAULT 1');
  sql.exec('CREATE TABLE IF NOT EXISTS allowlist (user_id TEXT PRIMARY KEY) WITHOUT ROWID');
}

/**
 * Version 5: stock shards (leases.ts). `lease_state` is this shard's place (its index, the
 * goods' shard count, the grant it asked for and not yet credited, the last give-back it
 * made); shard 0, which holds the goods' pool, keeps the last grant per shard (a repeated ask
 * gets the same answer), the give-backs it asked for and not yet credited, and each shard's
 * last reported stock.
 */
const V5_STOCK_SHARDS = `
  CREATE TABLE IF NOT EXISTS lease_state (
    id INTEGER PRIMARY KEY CHECK (id = 1), shard INTEGER NOT NULL, shards INTEGER NOT NULL,
    location_hint TEXT, pending_grant TEXT, given_id TEXT, given_units INTEGER NOT NULL DEFAULT 0);
  CREATE TABLE IF NOT EXISTS lease_grant (shard INTEGER PRIMARY KEY, grant_id TEXT NOT NULL, units INTEGER NOT NULL);
  CREATE TABLE IF NOT EXISTS lease_reclaim (shard INTEGER PRIMARY KEY, reclaim_id TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS lease_report (shard INTEGER PRIMARY KEY, remaining INTEGER NOT NULL);`;

/**
 * Version 6: orders of shoppers the waiting room let in. `reservation.admitted` is 1 for a
 * purchase whose token was issued against an admission pass (0 for every other, and for rows
 * made before the column); `tally.admitted_queued` and `admitted_confirmed` count those waiting
 * for Postgres and those confirmed (not released), kept by the reservation triggers, which this
 * step remakes with the new counts. The room's coordinator compares the confirmed ones with the
 * purchases its shards have heard of (heardLate in durable-objects/waiting-room/measures.ts),
 * which without them held only for a room always on, and leaves the units held by other
 * shoppers' reservations out of the units it admits by.
 */
function v6AdmittedOrders(sql: SqlStorage): void {
  addColumn(sql, 'reservation', 'admitted', 'INTEGER NOT NULL DEFAULT 0');
  addColumn(sql, 'tally', 'admitted_queued', 'INTEGER NOT NULL DEFAULT 0');
  addColumn(sql, 'tally', 'admitted_confirmed', 'INTEGER NOT NULL DEFAULT 0');
  sql.exec(V6_TRIGGERS);
}

const V6_TRIGGERS = `
  UPDATE tally SET
    admitted_queued = (SELECT count(*) FROM reservation WHERE status = 'QUEUED' AND released = 0 AND admitted = 1),
    admitted_confirmed = (SELECT count(*) FROM reservation WHERE status = 'SUCCESS' AND released = 0 AND admitted = 1)
  WHERE id = 1;
  DROP TRIGGER IF EXISTS tally_reservation_insert;
  DROP TRIGGER IF EXISTS tally_reservation_update;
  DROP TRIGGER IF EXISTS tally_reservation_delete;
  CREATE TRIGGER tally_reservation_insert AFTER INSERT ON reservation WHEN NEW.released = 0 BEGIN
    UPDATE tally SET queued = queued + (NEW.status = 'QUEUED'), confirmed = confirmed + (NEW.status = 'SUCCESS'),
      admitted_queued = admitted_queued + (NEW.status = 'QUEUED' AND NEW.admitted = 1),
      admitted_confirmed = admitted_confirmed + (NEW.status = 'SUCCESS' AND NEW.admitted = 1) WHERE id = 1;
  END;
  CREATE TRIGGER tally_reservation_update AFTER UPDATE OF status, released ON reservation BEGIN
    UPDATE tally SET
      queued = queued - (OLD.status = 'QUEUED' AND OLD.released = 0) + (NEW.status = 'QUEUED' AND NEW.released = 0),
      confirmed = confirmed - (OLD.status = 'SUCCESS' AND OLD.released = 0) + (NEW.status = 'SUCCESS' AND NEW.released = 0),
      admitted_queued = admitted_queued - (OLD.status = 'QUEUED' AND OLD.released = 0 AND OLD.admitted = 1)
        + (NEW.status = 'QUEUED' AND NEW.released = 0 AND NEW.admitted = 1),
      admitted_confirmed = admitted_confirmed - (OLD.status = 'SUCCESS' AND OLD.released = 0 AND OLD.admitted = 1)
        + (NEW.status = 'SUCCESS' AND NEW.released = 0 AND NEW.admitted = 1)
    WHERE id = 1;
  END;
  CREATE TRIGGER tally_reservation_delete AFTER DELETE ON reservation WHEN OLD.released = 0 BEGIN
    UPDATE tally SET queued = queued - (OLD.status = 'QUEUED'), confirmed = confirmed - (OLD.status = 'SUCCESS'),
      admitted_queued = admitted_queued - (OLD.status = 'QUEUED' AND OLD.admitted = 1),
      admitted_confirmed = admitted_confirmed - (OLD.status = 'SUCCESS' AND OLD.admitted = 1) WHERE id = 1;
  END;`;

/**
 * The steps. Version 1 made the sale, its reservations, holders, spent tokens and the outbox.
 * Version 2 brings mirror_state behind the gate: builds before it created that table on their
 * own at load, so the step is written to find it already there. Version 3 to 6: see above.
 */
export const MIGRATIONS: readonly SchemaStep[] = [
  `CREATE TABLE IF NOT EXISTS sale (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     goods_id INTEGER NOT NULL, activity_id INTEGER NOT NULL, price_cents INTEGER NOT NULL,
     total_stock INTEGER NOT NULL, remaining INTEGER NOT NULL CHECK (remaining >= 0),
     start_at INTEGER NOT NULL, end_at INTEGER NOT NULL, paused INTEGER NOT NULL,
     pay_timeout_seconds INTEGER NOT NULL, next_seq INTEGER NOT NULL);
   CREATE TABLE IF NOT EXISTS reservation (
     request_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, order_id TEXT, status TEXT NOT NULL,
     reason TEXT, released INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL,
     settled_at INTEGER);
   CREATE INDEX IF NOT EXISTS reservation_order ON reservation (order_id);
   CREATE TABLE IF NOT EXISTS holder (user_id TEXT PRIMARY KEY, request_id TEXT NOT NULL);
   CREATE TABLE IF NOT EXISTS used_token (token_id TEXT PRIMARY KEY, expires_at INTEGER NOT NULL);
   CREATE TABLE IF NOT EXISTS outbox (
     seq INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, body TEXT NOT NULL,
     attempts INTEGER NOT NULL DEFAULT 0, next_at INTEGER NOT NULL, created_at INTEGER NOT NULL);`,
  'CREATE TABLE IF NOT EXISTS mirror_state (id INTEGER PRIMARY KEY CHECK (id = 1), title TEXT NOT NULL, stale_since INTEGER)',
  v3CountersAndResends,
  v4SaleRules,
  V5_STOCK_SHARDS,
  v6AdmittedOrders,
];

/** The first version whose outbox keeps a row until its reservation settles (older builds deleted it once sent). */
export const OUTBOX_KEEPS_UNSETTLED = 3;
