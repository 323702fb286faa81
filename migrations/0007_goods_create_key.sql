-- POST /admin/goods takes an Idempotency-Key: the key and a digest of the request's body are kept
-- with the goods it created, so the same request sent again (its answer lost on the way) answers
-- that goods instead of creating a second one, and the same key with other settings is refused.
ALTER TABLE "seckill_goods" ADD COLUMN "create_key" text;--> statement-breakpoint
ALTER TABLE "seckill_goods" ADD COLUMN "create_digest" text;--> statement-breakpoint
CREATE UNIQUE INDEX "seckill_goods_create_key_uk" ON "seckill_goods" USING btree ("create_key") WHERE "seckill_goods"."create_key" IS NOT NULL;