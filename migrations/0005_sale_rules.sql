CREATE TABLE "seckill_allowlist" (
	"goods_id" bigint NOT NULL,
	"user_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "seckill_allowlist_goods_id_user_id_pk" PRIMARY KEY("goods_id","user_id")
);
--> statement-breakpoint
DROP INDEX "seckill_order_user_goods_live_uk";--> statement-breakpoint
ALTER TABLE "seckill_goods" ADD COLUMN "per_user_limit" smallint DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE "seckill_goods" ADD COLUMN "limit_scope" text DEFAULT 'goods' NOT NULL;--> statement-breakpoint
ALTER TABLE "seckill_goods" ADD COLUMN "eligibility" text DEFAULT 'open' NOT NULL;--> statement-breakpoint
ALTER TABLE "seckill_order" ADD COLUMN "quantity" smallint DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE "seckill_order" ADD COLUMN "limit_scope" text DEFAULT 'goods' NOT NULL;--> statement-breakpoint
ALTER TABLE "seckill_order" ADD COLUMN "per_user_limit" smallint DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE "seckill_allowlist" ADD CONSTRAINT "seckill_allowlist_goods_id_seckill_goods_id_fk" FOREIGN KEY ("goods_id") REFERENCES "public"."seckill_goods"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "seckill_order_user_activity_live_uk" ON "seckill_order" USING btree ("user_id","activity_id") WHERE "seckill_order"."status" IN (0, 1) AND "seckill_order"."limit_scope" = 'activity';--> statement-breakpoint
CREATE UNIQUE INDEX "seckill_order_user_goods_live_uk" ON "seckill_order" USING btree ("user_id","goods_id") WHERE "seckill_order"."status" IN (0, 1) AND "seckill_order"."per_user_limit" = 1 AND "seckill_order"."limit_scope" = 'goods';--> statement-breakpoint
CREATE INDEX "seckill_order_user_goods_idx" ON "seckill_order" USING btree ("user_id","goods_id");--> statement-breakpoint
ALTER TABLE "seckill_goods" ADD CONSTRAINT "seckill_goods_per_user_limit" CHECK ("seckill_goods"."per_user_limit" BETWEEN 1 AND 100);--> statement-breakpoint
ALTER TABLE "seckill_goods" ADD CONSTRAINT "seckill_goods_limit_scope" CHECK ("seckill_goods"."limit_scope" IN ('goods', 'activity'));--> statement-breakpoint
ALTER TABLE "seckill_goods" ADD CONSTRAINT "seckill_goods_eligibility" CHECK ("seckill_goods"."eligibility" IN ('open', 'allowlist'));
--> statement-breakpoint
-- seckill_write_orders (0001_write_orders.sql) in units: an order carries its quantity, the
-- goods' limit scope and per-shopper limit, and the stock moves by the orders' units. When
-- Postgres has less stock than the batch's units, the first orders (in input order) whose units
-- fit stay and the rest are SOLD_OUT, each kept or refused whole. An `activity`-scoped order
-- that meets the activity's unique index (the shopper's live order of another goods of the
-- activity) is LIMIT_REACHED, and its unit goes back to its goods' object like any refusal.
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
		);

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

	-- In input order, so that of two messages of one shopper the first one wins.
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
		ORDER BY i.ord
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
