-- seckill_write_orders (0005_sale_rules.sql) inserts a batch's orders in one order every writer
-- shares: by shopper, then reservation time, then request id, all properties of the message
-- itself. Inserted in the batch's own order, two consumers writing the same messages in
-- different orders (a redelivery beside its original, overlapping re-drives) each held a row
-- the other was about to insert, and Postgres aborted one of them for a deadlock. Every unique
-- key an order meets is the shopper's own (their live order of the goods or of the activity) or
-- the message's own (its request id, order id and order number), so writers that insert in the
-- same shopper-first order wait for each other instead. Of two messages of one shopper, the one
-- reserved first still wins.
CREATE OR REPLACE FUNCTION seckill_write_orders(p_goods_id bigint, p_orders jsonb, p_now timestamptz)
RETURNS TABLE (request_id text, order_id text, outcome text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
	v_units integer := (SELECT coalesce(sum(coalesce(q."quantity", 1)), 0) FROM jsonb_to_recordset(p_orders) AS q("quantity" integer));
	v_stock integer;
	v_created text[] := '{}';
	v_refused text[] := '{}';
BEGIN
	BEGIN
		INSERT INTO seckill_order AS o
			(id, order_no, request_id, user_id, goods_id, activity_id, price_cents, reserved_at, pay_deadline,
			 quantity, limit_scope, per_user_limit)
		SELECT i."orderId", i."orderNo", i."requestId", i."userId", p_goods_id, i."activityId", i."priceCents",
			timestamptz 'epoch' + i."reservedAt" * interval '1 millisecond',
			p_now + i."payTimeoutSeconds" * interval '1 second',
			coalesce(i."quantity", 1), coalesce(i."limitScope", 'goods'), coalesce(i."perUserLimit", 1)
		FROM jsonb_to_recordset(p_orders) AS i(
			"requestId" text, "orderId" text, "orderNo" text, "userId" text,
			"activityId" bigint, "priceCents" integer, "payTimeoutSeconds" integer, "reservedAt" bigint,
			"quantity" integer, "limitScope" text, "perUserLimit" integer
		)
		ORDER BY i."userId", i."reservedAt", i."requestId";

		UPDATE seckill_goods AS g
		SET stock = g.stock - v_units, updated_at = p_now
		WHERE g.id = p_goods_id AND g.stock >= v_units;
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

	-- By shopper, then reservation time: of two messages of one shopper the earlier one wins.
	WITH input AS (
		SELECT m.*
		FROM ROWS FROM (jsonb_to_recordset(p_orders) AS (
			"requestId" text, "orderId" text, "orderNo" text, "userId" text,
			"activityId" bigint, "priceCents" integer, "payTimeoutSeconds" integer, "reservedAt" bigint,
			"quantity" integer, "limitScope" text, "perUserLimit" integer
		)) WITH ORDINALITY AS m(
			"requestId", "orderId", "orderNo", "userId", "activityId", "priceCents", "payTimeoutSeconds", "reservedAt",
			"quantity", "limitScope", "perUserLimit", ord
		)
	), inserted AS (
		INSERT INTO seckill_order AS o
			(id, order_no, request_id, user_id, goods_id, activity_id, price_cents, reserved_at, pay_deadline,
			 quantity, limit_scope, per_user_limit)
		SELECT i."orderId", i."orderNo", i."requestId", i."userId", p_goods_id, i."activityId", i."priceCents",
			timestamptz 'epoch' + i."reservedAt" * interval '1 millisecond',
			p_now + i."payTimeoutSeconds" * interval '1 second',
			coalesce(i."quantity", 1), coalesce(i."limitScope", 'goods'), coalesce(i."perUserLimit", 1)
		FROM input AS i
		WHERE NOT EXISTS (
			SELECT 1 FROM mq_consume_log AS l WHERE l.message_id = 'order:' || i."requestId" AND l.status = 1
		)
		ORDER BY i."userId", i."reservedAt", i."requestId"
		ON CONFLICT DO NOTHING
		RETURNING o.request_id
	)
	SELECT coalesce(array_agg(inserted.request_id), '{}') INTO v_created FROM inserted;

	IF cardinality(v_created) > 0 THEN
		v_units := (SELECT coalesce(sum(o.quantity), 0) FROM seckill_order AS o JOIN unnest(v_created) AS c(rid) ON o.request_id = c.rid);
		UPDATE seckill_goods AS g
		SET stock = g.stock - v_units, updated_at = p_now
		WHERE g.id = p_goods_id AND g.stock >= v_units;
		IF NOT FOUND THEN
			-- Less stock than the new orders' units: the first ones (in input order) whose units
			-- fit stay, the rest are taken out again and answered SOLD_OUT (an order is kept or
			-- refused whole). The goods row is locked from here on, so the stock read is the stock
			-- taken.
			SELECT g.stock INTO v_stock FROM seckill_goods AS g WHERE g.id = p_goods_id FOR UPDATE;
			WITH input AS (
				SELECT m."requestId", m.ord
				FROM ROWS FROM (jsonb_to_recordset(p_orders) AS ("requestId" text)) WITH ORDINALITY AS m("requestId", ord)
			), firsts AS (
				SELECT c.rid, min(i.ord) AS ord
				FROM unnest(v_created) AS c(rid)
				JOIN input AS i ON i."requestId" = c.rid
				GROUP BY c.rid
			), ranked AS (
				SELECT f.rid, sum(o.quantity) OVER (ORDER BY f.ord) AS n
				FROM firsts AS f
				JOIN seckill_order AS o ON o.request_id = f.rid
			), removed AS (
				DELETE FROM seckill_order AS o
				USING ranked AS r
				WHERE o.request_id = r.rid AND r.n > v_stock
				RETURNING o.request_id
			)
			SELECT coalesce(array_agg(removed.request_id), '{}') INTO v_refused FROM removed;
			v_created := ARRAY(SELECT c.rid FROM unnest(v_created) AS c(rid) EXCEPT SELECT r.rid FROM unnest(v_refused) AS r(rid));
			IF cardinality(v_created) > 0 THEN
				v_units := (SELECT coalesce(sum(o.quantity), 0) FROM seckill_order AS o JOIN unnest(v_created) AS c(rid) ON o.request_id = c.rid);
				UPDATE seckill_goods AS g
				SET stock = g.stock - v_units, updated_at = p_now
				WHERE g.id = p_goods_id AND g.stock >= v_units;
				IF NOT FOUND THEN
					RAISE EXCEPTION 'seckill_write_orders: stock moved under a lock held';
				END IF;
			END IF;
		END IF;
	END IF;

	-- The arrays are joined as sets: `= ANY (array)` per row would unpack them once per row.
	RETURN QUERY
	WITH input AS (
		SELECT m."requestId", m."orderId", m."limitScope", m.ord
		FROM ROWS FROM (jsonb_to_recordset(p_orders) AS ("requestId" text, "orderId" text, "limitScope" text))
			WITH ORDINALITY AS m("requestId", "orderId", "limitScope", ord)
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
				WHEN l.detail IN ('SOLD_OUT', 'LIMIT_REACHED') THEN l.detail
				WHEN i."limitScope" = 'activity' THEN 'LIMIT_REACHED'
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
