CREATE TABLE "dead_letter" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"queue" text NOT NULL,
	"message_key" text NOT NULL,
	"goods_id" bigint,
	"body" jsonb NOT NULL,
	"attempts" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"redriven_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "mq_consume_log" (
	"message_id" text PRIMARY KEY NOT NULL,
	"queue" text NOT NULL,
	"status" smallint NOT NULL,
	"detail" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "payment" (
	"id" text PRIMARY KEY NOT NULL,
	"order_id" text NOT NULL,
	"provider" text NOT NULL,
	"amount_cents" integer NOT NULL,
	"status" text DEFAULT 'PENDING' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "payment_event" (
	"event_id" text PRIMARY KEY NOT NULL,
	"payment_id" text NOT NULL,
	"order_id" text NOT NULL,
	"status" text NOT NULL,
	"amount_cents" integer NOT NULL,
	"outcome" text NOT NULL,
	"received_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "reconciliation_report" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"goods_id" bigint NOT NULL,
	"run_at" timestamp with time zone DEFAULT now() NOT NULL,
	"do_remaining" integer,
	"db_stock" integer NOT NULL,
	"mirror_stock" integer,
	"live_orders" integer NOT NULL,
	"consistent" boolean NOT NULL,
	"discrepancies" jsonb NOT NULL,
	"actions" jsonb NOT NULL
);
--> statement-breakpoint
CREATE TABLE "refund" (
	"id" text PRIMARY KEY NOT NULL,
	"order_id" text NOT NULL,
	"payment_id" text NOT NULL,
	"amount_cents" integer NOT NULL,
	"reason" text NOT NULL,
	"status" text DEFAULT 'PENDING' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "seckill_goods" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"activity_id" bigint NOT NULL,
	"title" text NOT NULL,
	"image_url" text,
	"price_cents" integer NOT NULL,
	"total_stock" integer NOT NULL,
	"stock" integer NOT NULL,
	"start_at" timestamp with time zone NOT NULL,
	"end_at" timestamp with time zone NOT NULL,
	"status" smallint DEFAULT 0 NOT NULL,
	"pay_timeout_seconds" integer DEFAULT 900 NOT NULL,
	"location_hint" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "seckill_goods_stock_range" CHECK ("seckill_goods"."stock" >= 0 AND "seckill_goods"."stock" <= "seckill_goods"."total_stock"),
	CONSTRAINT "seckill_goods_price" CHECK ("seckill_goods"."price_cents" >= 0),
	CONSTRAINT "seckill_goods_window" CHECK ("seckill_goods"."end_at" > "seckill_goods"."start_at"),
	CONSTRAINT "seckill_goods_pay_timeout" CHECK ("seckill_goods"."pay_timeout_seconds" BETWEEN 1 AND 43200)
);
--> statement-breakpoint
CREATE TABLE "seckill_order" (
	"id" text PRIMARY KEY NOT NULL,
	"order_no" text NOT NULL,
	"request_id" text NOT NULL,
	"user_id" text NOT NULL,
	"goods_id" bigint NOT NULL,
	"activity_id" bigint NOT NULL,
	"price_cents" integer NOT NULL,
	"status" smallint DEFAULT 0 NOT NULL,
	"reserved_at" timestamp with time zone NOT NULL,
	"pay_deadline" timestamp with time zone NOT NULL,
	"paid_at" timestamp with time zone,
	"closed_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "payment" ADD CONSTRAINT "payment_order_id_seckill_order_id_fk" FOREIGN KEY ("order_id") REFERENCES "public"."seckill_order"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "seckill_order" ADD CONSTRAINT "seckill_order_goods_id_seckill_goods_id_fk" FOREIGN KEY ("goods_id") REFERENCES "public"."seckill_goods"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "dead_letter_key_uk" ON "dead_letter" USING btree ("queue","message_key");--> statement-breakpoint
CREATE INDEX "dead_letter_goods_idx" ON "dead_letter" USING btree ("goods_id");--> statement-breakpoint
CREATE INDEX "payment_order_idx" ON "payment" USING btree ("order_id");--> statement-breakpoint
CREATE INDEX "reconciliation_report_goods_idx" ON "reconciliation_report" USING btree ("goods_id","run_at");--> statement-breakpoint
CREATE UNIQUE INDEX "refund_payment_uk" ON "refund" USING btree ("payment_id");--> statement-breakpoint
CREATE INDEX "seckill_goods_window_idx" ON "seckill_goods" USING btree ("start_at","end_at");--> statement-breakpoint
CREATE UNIQUE INDEX "seckill_order_order_no_uk" ON "seckill_order" USING btree ("order_no");--> statement-breakpoint
CREATE UNIQUE INDEX "seckill_order_request_id_uk" ON "seckill_order" USING btree ("request_id");--> statement-breakpoint
CREATE UNIQUE INDEX "seckill_order_user_goods_live_uk" ON "seckill_order" USING btree ("user_id","goods_id") WHERE "seckill_order"."status" IN (0, 1);--> statement-breakpoint
CREATE INDEX "seckill_order_goods_status_idx" ON "seckill_order" USING btree ("goods_id","status");--> statement-breakpoint
CREATE INDEX "seckill_order_pending_deadline_idx" ON "seckill_order" USING btree ("pay_deadline") WHERE "seckill_order"."status" = 0;