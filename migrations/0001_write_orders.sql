-- The order consumer's write for one goods as ONE statement: a single round trip, and the
-- statement's own transaction is the batch's transaction.
-- Input: the order messages of one goods as a JSON array (the queue's own field names).
-- Output: one row per input element, in input order:
--   CREATED (order_id is the message's), EXISTING (a redelivery: order_id is the order made
--   for this request earlier), ALREADY_PURCHASED or SOLD_OUT (order_id is null).
-- Every message gets a consume-log row (order:<requestId>): 0 with the order id, or 1 with the
-- reason. A request refused once stays refused when its message comes again (its unit went back
-- to the sale), and a request that made an order answers that order again.
--
-- The usual batch (nothing in it seen before, enough stock) takes the fast path: a plain insert
-- of the orders, one guarded stock update, a plain insert of the log, inside one subtransaction.
-- A unique violation (a redelivery, a shopper's second live order, a message seen before) or a
-- refused guard rolls that back, and the careful path runs:
--   1. a multi-row insert, in input order, that skips what exists and what was refused before;
--   2. one guarded stock update for the rows it inserted; Postgres stock never goes negative;
--   3. when the guard refuses (Postgres has less stock than the new orders), the goods row is
--      locked, the first rows that fit stay and the others are deleted again and answered
--      SOLD_OUT (what a row-by-row retry would give, without interleaving row and goods locks);
--   4. classification of every message and the consume log.
-- Every path locks in the same order (the orders' keys, the goods row, the log's keys), so
-- consumers writing the same goods at once wait for each other instead of deadlocking; two
-- batches holding the same messages in opposite orders can still deadlock on the orders' keys,
-- and Postgres then aborts one statement, whose messages the queue retries.
CREATE OR REPLACE FUNCTION seckill_write_orders(p_goods_id bigint, p_orders jsonb, p_now timestamptz)
RETURNS TABLE (request_id text, order_id text, outcome text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
	v_count integer := jsonb_array_length(p_orders);
	v_stock integer;
	v_created text[] := '{}';
	v_refused text[] := '{}';
BEGIN
	BEGIN
		INSERT INTO seckill_order AS o
			(id, order_no, request_id, user_id, goods_id, activity_id, price_cents, reserved_at, pay_deadline)
		SELECT i."orderId", i."orderNo", i."requestId", i."userId", p_goods_id, i."activityId", i."priceCents",
			timestamptz 'epoch' + i."reservedAt" * interval '1 millisecond',
			p_now + i."payTimeoutSeconds" * interval '1 second'
		FROM jsonb_to_recordset(p_orders) AS i(
			"requestId" text, "orderId" text, "orderNo" text, "userId" text,
			"activityId" bigint, "priceCents" integer, "payTimeoutSeconds" integer, "reservedAt" bigint
		);

		UPDATE seckill_goods AS g
		SET stock = g.stock - v_count, updated_at = p_now
		WHERE g.id = p_goods_id AND g.stock >= v_count;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'seckill_write_orders: less stock than orders' USING ERRCODE = 'SK001';
		END IF;

		INSERT INTO mq_consume_log AS l (message_id, queue, status, detail)
		SELECT 'order:' || i."requestId", 'orders', 0, i."orderId"
		FROM jsonb_to_recordset(p_orders) AS i("requestId" text, "orderId" text);

		RETURN QUERY
		SELECT m."requestId", m."orderId", 'CREATED'
		FROM ROWS FROM (jsonb_to_recordset(p_orders) AS ("requestId" text, "orderId" text)) WITH ORDINALITY AS m("requestId", "orderId", ord)
		ORDER BY m.ord;
		RETURN;
	EXCEPTION
		WHEN unique_violation OR SQLSTATE 'SK001' THEN
			NULL;
	END;

	-- In input order, so that of two messages of one shopper the first one wins.
	WITH input AS (
		SELECT m.*
		FROM ROWS FROM (jsonb_to_recordset(p_orders) AS (
			"requestId" text, "orderId" text, "orderNo" text, "userId" text,
			"activityId" bigint, "priceCents" integer, "payTimeoutSeconds" integer, "reservedAt" bigint
		)) WITH ORDINALITY AS m(
			"requestId", "orderId", "orderNo", "userId", "activityId", "priceCents", "payTimeoutSeconds", "reservedAt", ord
		)
	), inserted AS (
		INSERT INTO seckill_order AS o
			(id, order_no, request_id, user_id, goods_id, activity_id, price_cents, reserved_at, pay_deadline)
		SELECT i."orderId", i."orderNo", i."requestId", i."userId", p_goods_id, i."activityId", i."priceCents",
			timestamptz 'epoch' + i."reservedAt" * interval '1 millisecond',
			p_now + i."payTimeoutSeconds" * interval '1 second'
		FROM input AS i
		WHERE NOT EXISTS (
			SELECT 1 FROM mq_consume_log AS l WHERE l.message_id = 'order:' || i."requestId" AND l.status = 1
		)
		ORDER BY i.ord
		ON CONFLICT DO NOTHING
		RETURNING o.request_id
	)
	SELECT coalesce(array_agg(inserted.request_id), '{}') INTO v_created FROM inserted;

	IF cardinality(v_created) > 0 THEN
		UPDATE seckill_goods AS g
		SET stock = g.stock - cardinality(v_created), updated_at = p_now
		WHERE g.id = p_goods_id AND g.stock >= cardinality(v_created);
		IF NOT FOUND THEN
			-- Less stock than new orders: the first ones (in input order) that fit stay, the rest
			-- are taken out again and answered SOLD_OUT. The goods row is locked from here on, so
			-- the stock read is the stock taken.
			SELECT g.stock INTO v_stock FROM seckill_goods AS g WHERE g.id = p_goods_id FOR UPDATE;
			WITH input AS (
				SELECT m."requestId", m.ord
				FROM ROWS FROM (jsonb_to_recordset(p_orders) AS ("requestId" text)) WITH ORDINALITY AS m("requestId", ord)
			), ranked AS (
				SELECT c.rid, row_number() OVER (ORDER BY min(i.ord)) AS n
				FROM unnest(v_created) AS c(rid)
				JOIN input AS i ON i."requestId" = c.rid
				GROUP BY c.rid
			), removed AS (
				DELETE FROM seckill_order AS o
				USING ranked AS r
				WHERE o.request_id = r.rid AND r.n > v_stock
				RETURNING o.request_id
			)
			SELECT coalesce(array_agg(removed.request_id), '{}') INTO v_refused FROM removed;
			v_created := ARRAY(SELECT c.rid FROM unnest(v_created) AS c(rid) EXCEPT SELECT r.rid FROM unnest(v_refused) AS r(rid));
			IF cardinality(v_created) > 0 THEN
				UPDATE seckill_goods AS g
				SET stock = g.stock - cardinality(v_created), updated_at = p_now
				WHERE g.id = p_goods_id AND g.stock >= cardinality(v_created);
				IF NOT FOUND THEN
					RAISE EXCEPTION 'seckill_write_orders: stock moved under a lock held';
				END IF;
			END IF;
		END IF;
	END IF;

	-- The arrays are joined as sets: `= ANY (array)` per row would unpack them once per row.
	RETURN QUERY
	WITH input AS (
		SELECT m."requestId", m."orderId", m.ord
		FROM ROWS FROM (jsonb_to_recordset(p_orders) AS ("requestId" text, "orderId" text)) WITH ORDINALITY AS m("requestId", "orderId", ord)
	), created AS MATERIALIZED (
		SELECT DISTINCT x AS rid FROM unnest(v_created) AS x
	), refused AS MATERIALIZED (
		SELECT DISTINCT x AS rid FROM unnest(v_refused) AS x
	), classified AS (
		SELECT i.ord, i."requestId" AS rid,
			CASE
				WHEN c.rid IS NOT NULL THEN i."orderId"
				WHEN r.rid IS NOT NULL THEN NULL
				ELSE o.id
			END AS oid,
			CASE
				WHEN c.rid IS NOT NULL THEN 'CREATED'
				WHEN r.rid IS NOT NULL THEN 'SOLD_OUT'
				WHEN o.id IS NOT NULL THEN 'EXISTING'
				WHEN l.detail = 'SOLD_OUT' THEN 'SOLD_OUT'
				ELSE 'ALREADY_PURCHASED'
			END AS outcome
		FROM input AS i
		LEFT JOIN created AS c ON c.rid = i."requestId"
		LEFT JOIN refused AS r ON r.rid = i."requestId"
		LEFT JOIN seckill_order AS o ON o.request_id = i."requestId"
		LEFT JOIN mq_consume_log AS l ON l.message_id = 'order:' || i."requestId" AND l.status = 1
	), logged AS (
		INSERT INTO mq_consume_log AS l (message_id, queue, status, detail)
		SELECT 'order:' || c.rid, 'orders', CASE WHEN c.oid IS NULL THEN 1 ELSE 0 END, coalesce(c.oid, c.outcome)
		FROM classified AS c
		ON CONFLICT DO NOTHING
	)
	SELECT c.rid, c.oid, c.outcome FROM classified AS c ORDER BY c.ord;
END;
$$;
